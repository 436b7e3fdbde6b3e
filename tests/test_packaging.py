"""What users install (issue 36): the wheel built from this tree holds every module under
``rlm_cli/`` and the JSON schemas, and its ``rlm`` entry point names a module that is in it.
(CI also installs that wheel into a fresh virtual environment and runs the end-to-end tests
against it: ``.ci/run``.)"""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of this tree (the build writes nothing into the checkout)."""
    pytest.importorskip("build")
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "CHANGELOG.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "rlm_cli", src / "rlm_cli", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (built,) = out.glob("rlm_cli-*.whl")
    return built


def test_the_wheel_holds_every_module_and_schema(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {p.relative_to(ROOT).as_posix() for p in (ROOT / "rlm_cli").rglob("*")
                if p.is_file() and (p.suffix == ".py" or p.parent.name == "schemas") and "__pycache__" not in p.parts}
    assert any(n.startswith("rlm_cli/schemas/") for n in expected)
    assert sorted(expected - names) == []
    assert not [n for n in names if n.startswith("tests/") or n.startswith("benchmarks/")]


def test_the_entry_point_names_a_module_of_the_wheel(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        (ep_name,) = [n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt")]
        parser = configparser.ConfigParser()
        parser.read_string(zf.read(ep_name).decode())
        target = parser["console_scripts"]["rlm"]
        module = target.split(":")[0].replace(".", "/") + ".py"
        assert module in zf.namelist(), target
