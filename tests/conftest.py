"""Shared fixtures: isolated user dirs, the fake model server, and running ``rlm`` as a subprocess."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fake_llm import FakeLLM


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
    monkeypatch.setenv("RLM_STRICT_EVENTS", "1")  # an undeclared event type or field fails the test
    # No model autodetection of servers running on this machine (tests that want it set these).
    monkeypatch.setenv("RLM_PROBE_OLLAMA", "off")
    monkeypatch.setenv("RLM_PROBE_PORTS", "off")
    # Scripted tests drive the REPL loop; auto mode would answer their tiny corpora directly.
    # Tests of auto mode pass --mode or delete this variable.
    monkeypatch.setenv("RLM_MODE", "rlm")
    # `rlm` commands of the tests share model hosts as users' commands do, in a folder of this
    # test session (stopped at its end), with a short idle period: a host is started (litellm
    # imported, about 3 s of CPU) by the first command of a working folder and environment only.
    # tests/test_shared_host.py sets a folder and idle period of its own for each test.
    monkeypatch.setenv("RLM_RUNTIME_DIR", str(_session_runtime()))
    monkeypatch.setenv("RLM_HOST_IDLE", "20")
    return home


_RUNTIME: list[Path] = []


def _session_runtime() -> Path:
    """This test session's runtime folder for shared model hosts (short: a socket path holds at
    most ~100 bytes)."""
    if not _RUNTIME:
        import tempfile

        _RUNTIME.append(Path(tempfile.mkdtemp(prefix="rlmt", dir="/tmp")) / "rlm")
    return _RUNTIME[0]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the session's shared model hosts and remove their folder."""
    if not _RUNTIME:
        return
    import shutil
    import signal

    os.environ["RLM_RUNTIME_DIR"] = str(_RUNTIME[0])
    from rlm_cli.models import host_admin

    for host in host_admin.running():
        try:
            os.kill(int(host["pid"]), signal.SIGKILL)
        except OSError:
            pass
    shutil.rmtree(_RUNTIME[0].parent, ignore_errors=True)


@pytest.fixture
def run_tmp() -> Iterator[Path]:
    """A TMPDIR for the ``rlm`` a test runs, short enough that rlm's socket folders go in it
    whatever the suite's own TMPDIR is (with a long one they go to /tmp: ``rlm_cli.sockets``), for
    tests that look there for the relay's folder or check that nothing is left."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="rlt", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    """A fresh scripted OpenAI-compatible server."""
    server = FakeLLM()
    yield server
    server.close()


