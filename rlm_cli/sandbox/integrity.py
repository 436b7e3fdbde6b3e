"""Whether model code changed the worker's own code (:class:`Integrity`). Runs inside the sandbox:
the standard library only."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

#: Modules besides rlm's own whose functions the worker's replies pass through (framing, JSON).
WATCHED_MODULES = ("json", "json.encoder", "json.decoder", "os", "struct", "io", "socket", "select")
_MISSING = object()


class Integrity:
    """The worker's own code as it was before any model code ran, to tell whether a code block
    changed it (``sys.modules['rlm_cli.sandbox.worker'].Worker.FINAL = ...``, a helper in the
    worker's ``_helpers``, ``json.dumps``...): such a change would rewrite the answers of later questions
    of a session, so the parent starts a fresh worker then (``launcher.Sandbox.check``).

    Recorded: every function and class of the ``rlm_cli`` modules loaded and of
    :data:`WATCHED_MODULES` (a function with its code, defaults and closure cells, a class with
    every entry of its ``__dict__``), and the worker's callable attributes and helpers; compared by
    identity. Best effort: code that rewrites the interpreter's own structures (``ctypes``, frame
    locals) can hide its changes.
    """

    def __init__(self, worker: object, helpers: Callable[[], dict[str, Any]]) -> None:
        """Record ``worker`` (its callable attributes) and what ``helpers()`` returns now (the
        helper names given to model code: called again at each check, so a helper table that was
        replaced is compared too)."""
        self.worker = worker
        self.helpers = helpers
        self.items = self._collect()

    def _collect(self) -> dict[str, Any]:
        items: dict[str, Any] = {}
        for name, module in list(sys.modules.items()):
            if not (name == "rlm_cli" or name.startswith("rlm_cli.") or name in WATCHED_MODULES):
                continue
            for attr, value in list(vars(module).items()):
                key = f"{name}.{attr}"
                if isinstance(value, type):
                    if getattr(value, "__module__", None) == name:
                        items[key] = value
                        for k, v in list(vars(value).items()):
                            items[f"{key}.{k}"] = v
                            self._function(f"{key}.{k}", getattr(v, "__func__", v), items)
                elif callable(value):
                    items[key] = value
                    self._function(key, value, items)
        for k, v in list(vars(self.worker).items()):
            if callable(v):
                items[f"worker.{k}"] = v
                self._function(f"worker.{k}", v, items)
        for k, v in list(self.helpers().items()):
            items[f"helper.{k}"] = v
        return items

    @staticmethod
    def _function(key: str, value: Any, items: dict[str, Any]) -> None:
        code = getattr(value, "__code__", None)
        if code is None:
            return
        items[f"{key}.__code__"] = code
        items[f"{key}.__defaults__"] = getattr(value, "__defaults__", None)
        items[f"{key}.__kwdefaults__"] = getattr(value, "__kwdefaults__", None)
        for n, cell in enumerate(getattr(value, "__closure__", None) or ()):
            try:
                items[f"{key}.<cell {n}>"] = cell.cell_contents
            except ValueError:
                items[f"{key}.<cell {n}>"] = _MISSING

    def changed(self) -> list[str]:
        """The names recorded that now hold something else (or are gone), and entries added to a
        recorded class (at most 20, sorted)."""
        now = self._collect()
        names = [k for k, v in self.items.items() if now.get(k, _MISSING) is not v]
        classes = {k for k, v in self.items.items() if isinstance(v, type)}
        names += [k for k in now if k not in self.items and k.rsplit(".", 1)[0] in classes]
        return sorted(names)[:20]
