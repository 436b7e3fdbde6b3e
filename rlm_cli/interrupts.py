"""Ctrl-C once the answer is final: finish, do not lose it.

A run whose root loop has accepted its final answer still has work to do: write the summary to
the trajectory, stop the worker, remove the scratch and relay folders, print the answer. A
Ctrl-C in that stretch used to unwind through it: exit 130 without the answer while the
trajectory said ``final``, and the worker's folders left for the next run to sweep. So:

* :func:`install` (``rlm``'s entry point) makes SIGINT go through :func:`_on_sigint`, which raises
  ``KeyboardInterrupt`` as Python's own handler does, except while a final answer is in hand;
* the loop calls :func:`final_in_hand` when the root loop (depth 0) accepts a final answer;
* ``rlm audit``, stopped by Ctrl-C or SIGTERM, calls :func:`final_in_hand` too while it writes the
  reports of the checks that finished (a second Ctrl-C would lose them); the run then ends 130/143;
* :func:`clear` ends that: a question starting, or one that ended in an error, or a session
  that goes on to another question (``rlm chat``, ``--question``, ``rlm mcp``) after delivering it. The
  one-question ``rlm ask`` keeps it until it exits: nothing left to do waits on a model or the
  network, so the run ends as it was going to, with the answer and exit 0, as recorded.

Only the main thread's state counts (a question of ``--jobs N`` on another thread cannot make
Ctrl-C ignored), and nothing changes when rlm was started with SIGINT ignored (a background job).
Imports nothing of the project.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

_final = False


def install() -> None:
    """Route SIGINT through :func:`_on_sigint` (only where Python's own handler is installed)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def final_in_hand() -> None:
    """The root loop accepted a final answer: a Ctrl-C from now until :func:`clear` is dropped.
    Called from another thread than the main one, nothing changes."""
    global _final
    if threading.current_thread() is threading.main_thread():
        _final = True


def clear() -> None:
    """Ctrl-C interrupts again (a question starts, or the answer in hand has been delivered)."""
    global _final
    if threading.current_thread() is threading.main_thread():
        _final = False


def _on_sigint(signum: int, frame: Any) -> None:
    if _final:
        return
    raise KeyboardInterrupt
