"""Trajectory events and their JSONL file.

Every line is one JSON object with ``schema`` (version), ``type``, ``depth`` and ``ts`` (Unix
seconds). The first line has ``type: "header"`` and the run's configuration with secrets removed.
Event types: ``header``, ``corpus``, ``iteration``, ``root_call``, ``code``, ``output``,
``sub_call``, ``recursion``, ``notice``, ``final``, ``summary``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import IO, Any

SCHEMA_VERSION = 1


def event(type_: str, depth: int = 0, **fields: Any) -> dict[str, Any]:
    """A trajectory event dict with schema version, type, depth and timestamp."""
    return {"schema": SCHEMA_VERSION, "type": type_, "depth": depth, "ts": round(time.time(), 3), **fields}


class TraceWriter:
    """Appends events to a JSONL file as they happen (thread-safe; flushed per line)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] | None = open(path, "a", encoding="utf-8")
        os.chmod(path, 0o600)
        self._lock = threading.Lock()

    def write(self, ev: dict[str, Any]) -> None:
        """Write one event as a line."""
        line = json.dumps(ev, ensure_ascii=False, default=str)
        with self._lock:
            if self._fh is not None:
                self._fh.write(line + "\n")
                self._fh.flush()

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


def read_trace(path: Path) -> list[dict[str, Any]]:
    """All events of a trajectory file (a torn last line from a killed run is ignored)."""
    events = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events
