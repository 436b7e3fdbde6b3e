"""What a question's code can leave in the worker to run during a later question's code
(:class:`Hooks`): the interpreter's hooks, threads and signal handlers. Runs inside the sandbox:
the standard library only.

A profile hook (``sys.setprofile``) or a daemon thread that sets ``FINAL``'s value rewrote the
answer of every later question of a session (``-q Q1 -q Q2``, ``rlm chat``, each ``ask`` of
``rlm mcp``). None can be taken back safely from inside (a thread cannot be stopped), so the parent
replaces a worker that has any (``launcher.Sandbox.check``), and says so.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

#: Hooks of ``sys`` and ``threading`` read with their getters, by name as shown.
_GETTERS: tuple[tuple[str, Callable[[], Any]], ...] = (
    ("a profile hook (sys.setprofile)", sys.getprofile),
    ("a trace hook (sys.settrace)", sys.gettrace),
    ("a profile hook for new threads (threading.setprofile)", getattr(threading, "getprofile", lambda: None)),
    ("a trace hook for new threads (threading.settrace)", getattr(threading, "gettrace", lambda: None)),
    ("async generator hooks (sys.set_asyncgen_hooks)", lambda: tuple(sys.get_asyncgen_hooks())),
)
#: Hooks that are plain attributes: ``(module, attribute)``.
_ATTRIBUTES = ((sys, "excepthook"), (sys, "unraisablehook"), (sys, "displayhook"), (sys, "breakpointhook"),
               (threading, "excepthook"))


def refuse_audit_hooks(event: str, args: tuple[Any, ...]) -> None:
    """An audit hook (``sys.addaudithook``) that refuses every later audit hook: one cannot be
    removed, and it runs on every audited event of later questions. Install it before model code.

    Raises:
        RuntimeError: ``event`` is ``sys.addaudithook`` (CPython then adds nothing, quietly).
    """
    if event == "sys.addaudithook":
        raise RuntimeError("audit hooks are not available in the REPL")


class Hooks:
    """The worker's hooks, threads and signal handlers as they were before any model code ran;
    :meth:`changed` names what differs now.

    ``own_threads()`` returns the threads the worker itself runs (its index builders): every other
    live thread, and every thread the kernel lists that ``threading`` does not know
    (``_thread.start_new_thread``), was left by model code.
    """

    def __init__(self, own_threads: Callable[[], Iterable[threading.Thread]]) -> None:
        self.own_threads = own_threads
        self.getters = [(name, get()) for name, get in _GETTERS]
        self.attributes = [(module, attr, getattr(module, attr, None)) for module, attr in _ATTRIBUTES]
        self.signals = {sig: signal.getsignal(sig) for sig in _signals()}
        self.gc_callbacks = list(gc.callbacks)
        self.meta_path, self.path_hooks = list(sys.meta_path), list(sys.path_hooks)
        self.main = threading.main_thread()
        self.tools = _monitoring_tools()

    def changed(self) -> list[str]:
        """What model code left that later code would run into, in words (at most 20)."""
        out = [name for (name, was), (_, get) in zip(self.getters, _GETTERS, strict=True) if get() != was]
        out += [f"{module.__name__}.{attr}" for module, attr, was in self.attributes
                if getattr(module, attr, None) is not was]
        for sig, was in self.signals.items():
            try:
                if signal.getsignal(sig) is not was:
                    out.append(f"a handler for {signal.Signals(sig).name}")
            except (ValueError, OSError):
                continue
        if _pending_timer():
            out.append("a timer (signal.setitimer or signal.alarm)")
        if list(gc.callbacks) != self.gc_callbacks:
            out.append("a garbage collector callback (gc.callbacks)")
        if list(sys.meta_path) != self.meta_path or list(sys.path_hooks) != self.path_hooks:
            out.append("an import hook (sys.meta_path, sys.path_hooks)")
        out += [f"a sys.monitoring tool ({name})" for tool, name in _monitoring_tools().items()
                if self.tools.get(tool) != name]
        out += self._threads()
        return out[:20]

    def _threads(self) -> list[str]:
        own = {id(t) for t in self.own_threads()} | {id(self.main)}
        known = threading.enumerate()
        left = [t for t in known if id(t) not in own and t.is_alive()]
        out = [f"thread {t.name!r} left running" for t in left[:5]]
        hidden = 0
        for _ in range(5):  # a thread that just ended leaves the kernel's list a moment after threading's
            try:
                hidden = len(os.listdir("/proc/self/task")) - len(threading.enumerate())
            except OSError:
                return out
            if hidden <= 0:
                break
            time.sleep(0.02)
        # hidden: threads started without threading (_thread.start_new_thread), still running
        if hidden > 0:
            out.append(f"{hidden} thread{'s' if hidden > 1 else ''} started outside threading left running")
        return out


def _signals() -> list[int]:
    valid = getattr(signal, "valid_signals", None)
    sigs = sorted(int(s) for s in valid()) if valid else [int(s) for s in signal.Signals]
    return [s for s in sigs if s not in (int(getattr(signal, "SIGKILL", -1)), int(getattr(signal, "SIGSTOP", -1)))]


def _pending_timer() -> bool:
    """Whether an interval timer or alarm of this process is set (it would fire in later code)."""
    getitimer = getattr(signal, "getitimer", None)
    if getitimer is None:
        return False
    for which in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF"):
        if hasattr(signal, which) and any(getitimer(getattr(signal, which))):
            return True
    return False


def _monitoring_tools() -> dict[int, str]:
    """``sys.monitoring``'s tools in use (Python 3.12+): ``{tool id: name}``."""
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is None:
        return {}
    tools = {}
    for tool in range(6):
        name = monitoring.get_tool(tool)
        if name is not None:
            tools[tool] = str(name)
    return tools
