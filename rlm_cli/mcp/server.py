"""``rlm mcp``'s server: the protocol thread and the main thread's service started, and ended
when the client closes stdin, on Ctrl-C or on SIGTERM (see ``rlm_cli.mcp``).
"""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING

from rlm_cli.config import Settings
from rlm_cli.errors import UsageError
from rlm_cli.mcp.calls import Calls
from rlm_cli.mcp.protocol import protocol_thread, require_sdk
from rlm_cli.mcp.service import Service

if TYPE_CHECKING:
    from rlm_cli.models.backend import Backend
    from rlm_cli.output.ui import UI


def serve(settings: Settings, paths: list[str], *, host: Backend, ui: UI, debug: bool = False) -> int:
    """Serve ``rlm mcp`` on stdin/stdout until the client closes it; returns the exit code (0, or
    the code of the error that kept the session from opening). ``host`` is the started model host,
    ``ui`` the stderr renderer; ``debug`` shows internal errors' tracebacks on stderr.

    Raises:
        UsageError: no path, ``-`` among them, or the SDK is missing.
        KeyboardInterrupt / SystemExit: Ctrl-C or SIGTERM (the session is closed first).
    """
    require_sdk()
    if not paths:
        raise UsageError("give at least one PATH", hint="e.g. rlm mcp ./repo")
    if "-" in paths:
        raise UsageError("rlm mcp speaks the protocol on standard input, so the corpus cannot come from it",
                         hint="give files or folders")
    calls = Calls()
    service = Service(settings, paths, host=host, ui=ui, debug=debug)
    previous = signal.signal(signal.SIGINT, calls.on_sigint)
    thread = threading.Thread(target=protocol_thread, args=(calls, paths, ui), name="mcp-protocol", daemon=True)
    try:
        thread.start()  # initialize and tools/list are answered while the session opens
        service.open()
        service.serve(calls)
    finally:
        service.close()
        signal.signal(signal.SIGINT, previous)
    thread.join(timeout=2.0)
    return int(service.failure.exit_code) if service.failure is not None else 0
