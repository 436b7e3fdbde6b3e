"""The ``rlm`` console script and ``python -m rlm_cli``: the model host starts first.

The first model call of a command waits for the model host's ``import litellm`` (seconds), so
the host is started at the process's first instant, before the command line's own modules
(typer, every command) are imported: only the closed standard streams are reopened before it
(``streams.reopen_closed``: no pipe of the host may take their numbers). Everything else is
``rlm_cli.commands.app.main``'s.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Start the model host of an ``ask``, ``audit``, ``chat`` or ``mcp`` command
    (``Invocation.start_host_early``), then run the command line (never returns)."""
    from rlm_cli.commands import streams

    closed = streams.reopen_closed()
    from rlm_cli.commands.invocation import INVOCATION

    INVOCATION.start_host_early(sys.argv[1:])
    from rlm_cli.commands import app

    app.main(closed=closed, early_host=INVOCATION.early_host)
