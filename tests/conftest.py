"""Shared fixtures: isolated user dirs, the fake model server, and running ``rlm`` as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fake_llm import FakeLLM

#: Seconds a subprocess run of ``rlm`` may take in tests.
RUN_TIMEOUT = 240


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point rlm's config, cache and data dirs at the test's tmp_path; drop model env vars."""
    home = tmp_path / "userdirs"
    for name, sub in (("RLM_CONFIG_DIR", "config"), ("RLM_CACHE_DIR", "cache"), ("RLM_DATA_DIR", "data")):
        monkeypatch.setenv(name, str(home / sub))
    for var in ("RLM_MODEL", "RLM_SUB_MODEL", "RLM_API_BASE", "RLM_API_KEY", "RLM_SANDBOX",
                "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # No model autodetection of servers running on this machine (tests that want it set these).
    monkeypatch.setenv("RLM_PROBE_OLLAMA", "off")
    monkeypatch.setenv("RLM_PROBE_PORTS", "off")
    # Scripted tests drive the REPL loop; auto mode would answer their tiny corpora directly.
    # Tests of auto mode pass --mode or delete this variable.
    monkeypatch.setenv("RLM_MODE", "rlm")
    # A model host per command, as before sharing: a shared one would outlive the test (the tests
    # of sharing, tests/test_shared_host.py, set RLM_HOST_IDLE and a runtime folder of their own).
    monkeypatch.setenv("RLM_HOST_IDLE", "0")
    return home


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    """A fresh scripted OpenAI-compatible server."""
    server = FakeLLM()
    yield server
    server.close()


@dataclass
class Result:
    """A finished ``rlm`` subprocess."""

    code: int
    stdout: str
    stderr: str


def run_rlm(*args: str, stdin: str | bytes | None = None, env: dict[str, str] | None = None,
            cwd: Path | None = None, timeout: float = RUN_TIMEOUT) -> Result:
    """Run ``python -m rlm_cli ARGS`` with the test environment (plus ``env``)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    data = stdin.encode() if isinstance(stdin, str) else stdin
    proc = subprocess.run([sys.executable, "-m", "rlm_cli", *args], input=data, capture_output=True,
                          env=full_env, cwd=cwd, timeout=timeout)
    return Result(proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"))


def model_flags(llm: FakeLLM) -> list[str]:
    """The flags that point rlm at the fake server with models ``root`` and ``sub``."""
    return ["--model", "openai/root", "--sub-model", "openai/sub", "--api-base", llm.url]


def two_file_repo(tmp_path: Path) -> Path:
    """``tmp_path/repo`` with ``a.py`` (``def foo(): return 42``) and ``b.py`` (``x = 1``)."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.py").write_text("def foo():\n    return 42\n")
    (root / "b.py").write_text("x = 1\n")
    return root
