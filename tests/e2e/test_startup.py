"""The first instant of an ``rlm`` process: the model host starts before the command line's own
modules are imported (``rlm_cli.commands.launch``), so its ``import litellm`` overlaps them too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from tests.support.cli import run_rlm

SPY = """
import sys
from rlm_cli.commands import invocation

def spy(self, argv):
    print("typer imported" if "typer" in sys.modules else "typer not imported", argv[:1], flush=True)
    raise SystemExit(0)

invocation.Invocation.start_host_early = spy
sys.argv = ["rlm", "ask", ".", "Where?"]
from rlm_cli.__main__ import main
main()
"""


def test_the_host_starts_before_typer_and_the_commands_are_imported() -> None:
    proc = subprocess.run([sys.executable, "-c", SPY], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "typer not imported ['ask']"


def test_rlm_host_start_leaves_a_shared_host_for_the_next_command() -> None:
    # an environment of its own: the suite's other commands share hosts of theirs
    env = {"RLM_HOST_IDLE": "120", "RLM_TEST_HOST_START": "1", "HOST_START_TEST": str(os.getpid())}
    res = run_rlm("host", "start", "--json", env=env)
    assert res.code == 0, res.stderr
    started = json.loads(res.stdout)
    try:
        assert started["started"] is True and started["pid"] > 0 and started["idle_limit_s"] == 120
        again = json.loads(run_rlm("host", "start", "--json", env=env).stdout)
        assert again == {**started, "started": False}  # leased: the same host, still there
        status = json.loads(run_rlm("host", "status", "--json", env=env).stdout)
        assert started["pid"] in [h["pid"] for h in status["hosts"]]
        # it imports litellm meanwhile (what the next command's model may need: issue 49)
        mine = [h for h in status["hosts"] if h["pid"] == started["pid"]]
        assert mine[0]["litellm"] in ("importing", "imported"), mine
    finally:
        os.kill(started["pid"], signal.SIGTERM)  # only this test's host (rlm host stop would end all)
    off = run_rlm("host", "start", env={"RLM_HOST_IDLE": "0"})
    assert off.code == 2 and "no shared model host to start: RLM_HOST_IDLE=0" in off.stderr
