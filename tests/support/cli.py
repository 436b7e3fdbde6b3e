"""Running ``rlm`` as a subprocess in tests, and small corpora many tests share."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.fake_llm import FakeLLM

#: Seconds a subprocess run of ``rlm`` may take in tests.
RUN_TIMEOUT = 240


@dataclass
class Result:
    """A finished ``rlm`` subprocess."""

    code: int
    stdout: str
    stderr: str


#: The variable naming an installed ``rlm`` for the tests to run (CI: the built wheel's, installed
#: into a fresh virtual environment away from this source tree).
BIN_ENV = "RLM_TEST_BIN"


def rlm_argv() -> list[str]:
    """The command line that starts ``rlm`` in tests, the one place that decides it: the installed
    command named by ``RLM_TEST_BIN``, else this source tree's ``python -m rlm_cli``."""
    exe = os.environ.get(BIN_ENV)
    return [exe] if exe else [sys.executable, "-m", "rlm_cli"]


def run_rlm(*args: str, stdin: str | bytes | None = None, env: dict[str, str] | None = None,
            cwd: Path | None = None, timeout: float = RUN_TIMEOUT) -> Result:
    """Run ``rlm ARGS`` (:func:`rlm_argv`) with the test environment (plus ``env``)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    data = stdin.encode() if isinstance(stdin, str) else stdin
    proc = subprocess.run([*rlm_argv(), *args], input=data, capture_output=True,
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
