"""Sandbox notes that describe this machine, shown once per machine and level.

What the level leaves open without bubblewrap, the user the worker runs as, a limit the kernel
refused: such a note is the same on every run of a machine, so a daily user would read the same
300 characters before every answer. Each is shown the first time it is met (a changed machine or
level words it differently, so it shows again), then only with ``-v``; the trajectory keeps it
every time, and ``rlm doctor`` always says it all.

The notes already shown are kept as digests in ``data_dir()/shown-notes.json`` (0600). A file that
cannot be read or written never fails a run: the note is then shown, as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path

from rlm_cli.config import data_dir

#: The file in the user data folder that remembers which notes were shown.
SHOWN_FILE = "shown-notes.json"
#: Most digests kept (the oldest are dropped): a machine has a handful of notes.
MAX_KEPT = 200

_lock = threading.Lock()
#: Digests shown by this process (a note met twice in one run is shown once).
_this_run: set[str] = set()


def _digest(note: str) -> str:
    return hashlib.sha256(note.encode("utf-8", "surrogatepass")).hexdigest()[:20]


def _path() -> Path:
    return data_dir() / SHOWN_FILE


def _read() -> dict[str, float]:
    try:
        data = json.loads(_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    shown = data.get("shown") if isinstance(data, dict) else None
    return {str(k): float(v) for k, v in shown.items() if isinstance(v, (int, float))} if isinstance(shown, dict) else {}


def _write(shown: dict[str, float]) -> None:
    path = _path()
    kept = dict(sorted(shown.items(), key=lambda kv: kv[1])[-MAX_KEPT:])
    tmp = path.with_name(f".{SHOWN_FILE}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"shown": kept}, fh)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def shown_before(note: str) -> bool:
    """Whether ``note`` was already shown on this machine (or earlier in this run); the first
    time, it is recorded and ``False`` is returned. Thread-safe; never raises."""
    key = _digest(note)
    with _lock:
        if key in _this_run:
            return True
        _this_run.add(key)
        shown = _read()
        if key in shown:
            return True
        shown[key] = time.time()
        _write(shown)
        return False
