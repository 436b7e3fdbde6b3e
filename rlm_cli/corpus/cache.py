"""``rlm cache info`` and ``rlm cache clear``: what the user cache folder holds, and emptying it.

The cache folder (``config.cache_dir()``) has one subfolder per cache: ``index/`` (corpus
bundles, one folder per set of roots and options) and ``llm/`` (model responses). Only these
known subfolders are reported and removed; anything else in the folder is left alone.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from rlm_cli.config import cache_dir

#: Subfolders of the cache folder that ``rlm cache clear`` may remove, with what they hold.
KNOWN_CACHES: dict[str, str] = {"index": "corpus chunk indexes", "llm": "model responses"}


def _usage(path: Path) -> tuple[int, int]:
    """``(files, bytes)`` under ``path`` (0, 0 when missing); links are not followed."""
    files = size = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            files += 1
            size += st.st_size
    return files, size


def _bundles(index_dir: Path) -> list[dict[str, Any]]:
    """One entry per corpus bundle: roots, totals, size and last use (newest first)."""
    out = []
    for d in sorted(index_dir.iterdir()) if index_dir.is_dir() else []:
        index = d / "index.json"
        if not d.is_dir():
            continue
        entry: dict[str, Any] = {"key": d.name, "bytes": _usage(d)[1]}
        try:
            doc = json.loads(index.read_bytes())
            entry.update(roots=doc.get("meta", {}).get("roots", []), last_used=index.stat().st_mtime,
                         **{k: doc.get("totals", {}).get(k) for k in ("files", "tokens", "chunks")})
        except (OSError, ValueError, AttributeError):
            entry.update(roots=[], last_used=None, files=None, tokens=None, chunks=None, broken=True)
        out.append(entry)
    return sorted(out, key=lambda e: -(e.get("last_used") or 0))


def cache_info() -> dict[str, Any]:
    """The ``rlm cache info`` document: the folder, each known cache's size, and the bundles."""
    root = cache_dir()
    caches = []
    for name, what in KNOWN_CACHES.items():
        files, size = _usage(root / name)
        caches.append({"name": name, "holds": what, "path": str(root / name), "files": files, "bytes": size})
    return {"path": str(root), "caches": caches, "bytes": sum(c["bytes"] for c in caches),
            "bundles": _bundles(root / "index")}


def cache_clear(which: list[str] | None = None) -> dict[str, Any]:
    """Remove the known caches named in ``which`` (default all). Returns what was removed:
    ``{"path", "removed": [{"name", "files", "bytes"}], "bytes"}``.

    Raises:
        ValueError: an unknown cache name.
    """
    names = list(KNOWN_CACHES) if not which else which
    unknown = [n for n in names if n not in KNOWN_CACHES]
    if unknown:
        raise ValueError(f"unknown cache {unknown[0]!r}: known caches are {', '.join(KNOWN_CACHES)}")
    root = cache_dir()
    removed = []
    for name in names:
        path = root / name
        files, size = _usage(path)
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.exists():
            shutil.rmtree(path)
        removed.append({"name": name, "files": files, "bytes": size})
    return {"path": str(root), "removed": removed, "bytes": sum(r["bytes"] for r in removed)}
