"""What each sandbox level means to the launcher (``sandbox.level.Level``), and that the worker's
hardening installs the seccomp filter only when its level asks for it (issue 41: the launcher
and the worker ask the level, never compare its name)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlm_cli.sandbox.level import Level
from rlm_cli.sandbox.probes import confinement

REPO = Path(__file__).resolve().parents[2]

#: level: (confined, namespaced, seccomp, drops_root, reaped, runs_plain, confined_on_host)
TABLE = {
    Level.BWRAP: (True, True, True, True, False, False, False),
    Level.SANDBOX_EXEC: (True, False, False, False, False, False, False),
    Level.PROCESS: (True, False, True, True, True, True, True),
    Level.NONE: (False, False, False, False, True, True, False),
}


@pytest.mark.parametrize("level", list(Level))
def test_each_level_says_what_it_means(level: Level) -> None:
    got = (level.confined, level.namespaced, level.seccomp, level.drops_root, level.reaped, level.runs_plain,
           level.confined_on_host)
    assert got == TABLE[level]


def _seccomp_mode(install: bool) -> str:
    """The ``Seccomp:`` line of a fresh process's status after ``hardening.harden`` with
    ``seccomp=install`` (``0``: no filter, ``2``: a filter)."""
    code = ("import os, sys\nfrom rlm_cli.sandbox.hardening import harden\n"
            f"harden(os.getppid(), None, False, {install!r})\n"
            "print([line.split()[1] for line in open('/proc/self/status') if line.startswith('Seccomp:')][0])\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux") or not confinement().seccomp, reason="needs seccomp")
def test_the_seccomp_filter_is_installed_only_when_the_level_asks() -> None:
    assert _seccomp_mode(True) == "2"
    assert _seccomp_mode(False) == "0"
