"""Figures about a loaded corpus for ``rlm stats`` and ``rlm index --json``: totals, tokens by
file type, the largest files and what was skipped. Pure functions over a :class:`Corpus` (the
context text itself is never decoded)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from rlm_cli.corpus.model import Corpus


def file_type(path: str) -> str:
    """The lowercased extension of ``path`` (``'.py'``), or ``'(none)'``; dotfiles have none."""
    name = path.rsplit("/", 1)[-1]
    dot = name.rfind(".")
    return name[dot:].lower() if dot > 0 else "(none)"


def index_summary(corpus: Corpus, elapsed_s: float) -> dict[str, Any]:
    """The ``rlm index --json`` document: totals, cache use, skipped files by reason and files by
    kind (``kinds``: ``{"csv": 2, "gz": 1, "pdf": 1}``; plain text files are not counted)."""
    return {
        "files": len(corpus.files), "bytes": corpus.total_bytes, "chars": corpus.chars,
        "tokens": corpus.total_tokens, "chunks": len(corpus.chunks), "encoding": corpus.encoding,
        "chunk_tokens": corpus.chunk_tokens, "from_cache": corpus.from_cache, "reindexed": corpus.reindexed,
        "skipped": dict(sorted(corpus.report.skipped.items())), "decoded": dict(sorted(corpus.report.decoded.items())),
        "kinds": dict(sorted(corpus.report.kinds.items())),
        "bundle": None if corpus.temporary else str(corpus.bundle_dir), "elapsed_s": round(elapsed_s, 3),
        "summary": corpus.summary(),
    }


def corpus_stats(corpus: Corpus, *, top: int = 10) -> dict[str, Any]:
    """The ``rlm stats`` document: totals, ``by_type`` (files, bytes, tokens, chunks per extension,
    most tokens first), ``largest`` (the ``top`` files by tokens), ``skipped``, ``kinds`` (files
    read as structured data, documents or compressed files, by kind) and ``context``:
    the memory the ``context`` string takes in the REPL worker (``memory_bytes``, which is
    ``chars * bytes_per_char``) and ``wide_files``: the files (at most ``top``; widest, then
    largest first) whose text or name holds characters beyond U+00FF, each with the bytes per
    character it alone needs (``wide_files_count`` counts them all, ``astral_files_count`` those
    beyond U+FFFF; see
    :func:`rlm_cli.corpus.model.char_width`)."""
    by: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for f in corpus.files:
        row = by[file_type(f.path)]
        row[0] += 1
        row[1] += f.size
        row[2] += f.tokens
        row[3] += f.n_chunks
    by_type = [{"type": t, "files": r[0], "bytes": r[1], "tokens": r[2], "chunks": r[3]}
               for t, r in sorted(by.items(), key=lambda kv: (-kv[1][2], kv[0]))]
    largest = sorted(corpus.files, key=lambda f: (-f.tokens, f.path))[:max(0, top)]
    wide = sorted((f for f in corpus.files if f.width > 1), key=lambda f: (-f.width, -f.chars, f.path))
    return {
        "files": len(corpus.files), "bytes": corpus.total_bytes, "tokens": corpus.total_tokens,
        "chunks": len(corpus.chunks), "encoding": corpus.encoding, "chunk_tokens": corpus.chunk_tokens,
        "by_type": by_type,
        "largest": [{"path": f.path, "bytes": f.size, "lines": f.lines, "tokens": f.tokens, "chunks": f.n_chunks}
                    for f in largest],
        "skipped": dict(sorted(corpus.report.skipped.items())),
        "kinds": dict(sorted(corpus.report.kinds.items())),
        "context": {"chars": corpus.chars, "bytes_per_char": corpus.char_width, "memory_bytes": corpus.context_memory,
                    "wide_files_count": len(wide), "astral_files_count": sum(f.width == 4 for f in wide),
                    "wide_files": [{"path": f.path, "bytes_per_char": f.width, "chars": f.chars}
                                   for f in wide[:max(0, top)]]},
    }
