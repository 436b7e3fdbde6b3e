"""The queue between the protocol thread and the main thread of ``rlm mcp``: one :class:`Call`
per ``tools/call``, served one at a time in order, cancellable (a SIGINT to the main thread
for the call being served; see ``rlm_cli.mcp``).
"""

from __future__ import annotations

import collections
import dataclasses
import queue
import signal
import threading
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass
class Result:
    """What a call returns: a document (``payload``) or a one-line error."""

    payload: dict[str, Any] | None = None
    error: str | None = None


@dataclasses.dataclass(eq=False)
class Call:
    """One ``tools/call`` on its way through the queue. ``post`` hands ``("progress", message)``
    and ``("result", Result)`` to the protocol thread (thread-safe); ``cancel_requested`` is set
    by the client's cancellation, ``interrupted`` once the SIGINT for it was raised."""

    id: Any
    tool: str
    args: dict[str, Any]
    post: Callable[[tuple[str, Any]], None]
    cancel_requested: bool = False
    interrupted: bool = False

    def progress(self, message: str) -> None:
        """Send a progress message to the client (when it asked for progress)."""
        self.post(("progress", message))


class Calls:
    """The queue between the protocol thread (:meth:`put`, :meth:`cancel`, :meth:`stop`) and the
    main thread (:meth:`next`, :meth:`finish`, :meth:`on_sigint`); see ``rlm_cli.mcp``."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Call | None] = queue.Queue()
        self._lock = threading.Lock()
        self.current: Call | None = None
        #: One entry per SIGINT sent for a cancelled call (read by :meth:`on_sigint`).
        self._signals: collections.deque[Call] = collections.deque()
        self._main = threading.main_thread().ident
        #: A real Ctrl-C arrived: the server ends.
        self.shutdown = False

    def put(self, call: Call) -> int:
        """Queue ``call``; returns how many calls are ahead of it."""
        with self._lock:
            ahead = self._queue.qsize() + (self.current is not None)
            self._queue.put(call)
        return ahead

    def cancel(self, call: Call) -> None:
        """The client cancelled ``call``: interrupt it when it is being served, else drop it when
        its turn comes."""
        with self._lock:
            if call.cancel_requested:
                return
            call.cancel_requested = True
            if call is self.current and self._main is not None:
                self._signals.append(call)
                signal.pthread_kill(self._main, signal.SIGINT)

    def stop(self) -> None:
        """The client went away: interrupt the call being served and end the queue."""
        with self._lock:
            current = self.current
        if current is not None:
            self.cancel(current)
        self._queue.put(None)

    def next(self) -> Call | None:
        """The next call to serve (``None``: the protocol ended), skipping cancelled ones."""
        while True:
            call = self._queue.get()
            if call is None:
                return None
            with self._lock:
                if call.cancel_requested:
                    continue
                self.current = call
                return call

    def finish(self, call: Call, result: Result) -> None:
        """``call`` is over: hand ``result`` to its waiting handler."""
        with self._lock:
            if self.current is call:
                self.current = None
        call.post(("result", result))

    def on_sigint(self, signum: int, frame: Any) -> None:
        """The main thread's SIGINT handler: a SIGINT sent for the call being served raises
        ``KeyboardInterrupt`` (once per call), one sent for a call already over is ignored, and any
        other (Ctrl-C) ends the server."""
        try:
            call = self._signals.popleft()
        except IndexError:
            self.shutdown = True
            raise KeyboardInterrupt from None
        if call is self.current and not call.interrupted:
            call.interrupted = True
            raise KeyboardInterrupt
