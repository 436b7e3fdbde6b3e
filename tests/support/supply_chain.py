"""Running ``scripts/check_supply_chain.py`` against fake installed distributions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_supply_chain.py"


def fake_dist(where: Path, name: str, version: str) -> None:
    """A ``NAME-VERSION.dist-info`` folder under ``where`` that importlib.metadata reads as installed."""
    info = where / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def check(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the supply-chain check with ``args`` (text output, 60 s at most)."""
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
