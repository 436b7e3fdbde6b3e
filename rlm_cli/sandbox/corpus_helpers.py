"""Corpus helpers of the REPL namespace: ``grep``, ``read_file``, ``chunk_text``, ``search``.

Runs inside the sandboxed worker, so it uses only the standard library. ``CorpusView`` holds
``context`` (str), ``files`` and ``chunks`` (lists of dicts as saved in the bundle's index.json).
"""

from __future__ import annotations

import bisect
import fnmatch
import json
import math
import re
from collections import Counter
from typing import Any


class CorpusView:
    """The loaded corpus and the helper functions the model calls on it."""

    def __init__(self, context: str = "", files: list[dict[str, Any]] | None = None,
                 chunks: list[dict[str, Any]] | None = None) -> None:
        self.context = context
        self.files: list[dict[str, Any]] = files or []
        self.chunks: list[dict[str, Any]] = chunks or []
        self._file_by_path: dict[str, dict[str, Any]] = {f["path"]: f for f in self.files}
        self._bm25: _BM25 | None = None

    @classmethod
    def from_bundle(cls, index_file: str, context_file: str) -> CorpusView:
        """Load a saved bundle (``index.json`` and the context text file)."""
        with open(index_file, "rb") as fh:
            index = json.loads(fh.read())
        with open(context_file, "rb") as fh:
            context = fh.read().decode("utf-8", "surrogatepass")
        return cls(context, index["files"], index["chunks"])

    # -- corpus --------------------------------------------------------------------------------
    def _file_text(self, f: dict[str, Any]) -> str:
        return self.context[f["start"]:f["end"]]

    def grep(self, pattern: str, *, path_glob: str | None = None, ignore_case: bool = False,
             max_results: int = 200) -> list[dict[str, Any]]:
        """Regex search over every file; returns ``[{"file", "line", "text"}]`` (line 1-based)."""
        rx = re.compile(pattern, re.MULTILINE | (re.IGNORECASE if ignore_case else 0))
        out: list[dict[str, Any]] = []
        targets = self.files or [{"path": "<context>", "start": 0, "end": len(self.context)}]
        for f in targets:
            if path_glob and not fnmatch.fnmatch(f["path"], path_glob):
                continue
            text = self._file_text(f)
            line_starts: list[int] | None = None
            for m in rx.finditer(text):
                if line_starts is None:
                    line_starts = _line_starts(text)
                ln = bisect.bisect_right(line_starts, m.start())
                ls = line_starts[ln - 1]
                le = text.find("\n", m.start())
                out.append({"file": f["path"], "line": ln, "text": text[ls:le if le >= 0 else len(text)][:500]})
                if len(out) >= max_results:
                    return out
        return out

    def read_file(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        """Lines ``start_line..end_line`` (1-based, inclusive) of ``path``, each prefixed with its number."""
        f = self._file_by_path.get(path)
        if f is None:
            matches = [p for p in self._file_by_path if p.endswith("/" + path) or p.endswith(path)]
            if len(matches) != 1:
                hint = f"; did you mean one of {matches[:5]}" if matches else ""
                raise KeyError(f"no file {path!r} in the corpus{hint}")
            f = self._file_by_path[matches[0]]
        lines = self._file_text(f).splitlines()
        a = max(1, start_line or 1)
        b = min(len(lines), end_line or len(lines))
        width = len(str(b))
        return "\n".join(f"{i:>{width}}: {lines[i - 1]}" for i in range(a, b + 1))

    def chunk_text(self, i: int) -> str:
        """The text of chunk ``i`` (see ``chunks[i]`` for its file and lines)."""
        c = self.chunks[i]
        return self.context[c["start"]:c["end"]]

    def search(self, query: str, k: int = 10) -> list[dict[str, Any]]:
        """Top ``k`` chunks by BM25 relevance to ``query``: ``[{"chunk", "file", "start_line",
        "end_line", "score"}]``, best first."""
        if self._bm25 is None:
            self._bm25 = _BM25([self.chunk_text(c["id"]) for c in self.chunks])
        out = []
        for i, score in self._bm25.top(query, k):
            c = self.chunks[i]
            out.append({"chunk": i, "file": c["path"], "start_line": c["start_line"],
                        "end_line": c["end_line"], "score": round(score, 3)})
        return out


def _line_starts(text: str) -> list[int]:
    starts = [0]
    find = text.find
    i = find("\n")
    while i >= 0:
        starts.append(i + 1)
        i = find("\n", i + 1)
    return starts


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+")


def _terms(text: str) -> list[str]:
    out: list[str] = []
    for w in _WORD.findall(text):
        lw = w.lower()
        out.append(lw)
        if "_" in w:
            out.extend(p for p in lw.split("_") if p)
    return out


class _BM25:
    """Okapi BM25 (Robertson et al., k1=1.5, b=0.75) over chunk texts; built on first use."""

    def __init__(self, docs: list[str], k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.tfs: list[Counter[str]] = [Counter(_terms(d)) for d in docs]
        self.lens = [sum(tf.values()) for tf in self.tfs]
        self.avg = (sum(self.lens) / len(self.lens)) if self.lens else 0.0
        df: Counter[str] = Counter()
        for tf in self.tfs:
            df.update(tf.keys())
        n = len(docs)
        self.idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}
        self.postings: dict[str, list[int]] = {}
        for i, tf in enumerate(self.tfs):
            for t in tf:
                self.postings.setdefault(t, []).append(i)

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        scores: dict[int, float] = {}
        for t in set(_terms(query)):
            idf = self.idf.get(t)
            if idf is None:
                continue
            for i in self.postings[t]:
                f = self.tfs[i][t]
                norm = f * (self.k1 + 1) / (f + self.k1 * (1 - self.b + self.b * self.lens[i] / (self.avg or 1)))
                scores[i] = scores.get(i, 0.0) + idf * norm
        return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
