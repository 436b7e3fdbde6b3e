"""On-disk cache of model completions, so re-asking the same question on the same corpus costs
nothing and replays the same trajectory.

Entries live under ``cache_dir()/llm/<2 hex>/<sha256>.json``; the key hashes the model, the
base URL, the messages and the request parameters (never the API key). Writes go to a
temporary file renamed into place, so readers never see half an entry; an entry that does not
parse is treated as a miss and overwritten by the next answer. ``rlm cache clear`` deletes the
folder. Only successful completions are stored.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

#: Bumped when the entry format or the key recipe changes (old entries then miss).
CACHE_VERSION = 1


def default_dir() -> Path:
    """``cache_dir()/llm`` (not created here)."""
    from rlm_cli.config import cache_dir

    return cache_dir() / "llm"


class LLMCache:
    """A folder of JSON entries keyed by :meth:`key`. Thread-safe (no shared state besides files)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or default_dir()

    @staticmethod
    def key(model: str, messages: list[dict[str, Any]], *, api_base: str | None = None,
            params: dict[str, Any] | None = None) -> str:
        """The hex SHA-256 of the request's identity (model, base URL, messages, parameters)."""
        blob = json.dumps({"v": CACHE_VERSION, "model": model, "api_base": api_base or "", "messages": messages,
                           "params": params or {}}, sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def path(self, key: str) -> Path:
        """Where the entry for ``key`` lives."""
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored entry (``{"text", "input_tokens", "output_tokens", "model", ...}``) or
        ``None`` when absent, unreadable or corrupt."""
        try:
            with open(self.path(key), encoding="utf-8") as fh:
                entry = json.load(fh)
        except (OSError, ValueError):
            return None
        if (not isinstance(entry, dict) or entry.get("v") != CACHE_VERSION or entry.get("key") != key
                or not isinstance(entry.get("text"), str)):
            return None
        return entry

    def put(self, key: str, entry: dict[str, Any]) -> bool:
        """Store ``entry`` (JSON-able; must hold ``text``) atomically; ``False`` if the disk refused.

        A cache that cannot be written never fails the run.
        """
        target = self.path(key)
        data = json.dumps({**entry, "v": CACHE_VERSION, "key": key}, ensure_ascii=False)
        tmp: str | None = None
        try:
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=target.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(data)
            os.replace(tmp, target)
            return True
        except OSError:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            return False
