"""The first instant of an ``rlm`` process: the model host starts before the command line's own
modules are imported (``rlm_cli.commands.launch``), so its ``import litellm`` overlaps them too."""

from __future__ import annotations

import subprocess
import sys

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
