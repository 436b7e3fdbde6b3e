"""The index behind ``search``: Okapi BM25 over the chunks (:class:`BM25`). Runs inside the
sandboxed worker: the standard library only."""

from __future__ import annotations

import bisect
import heapq
import math
import re
from array import array
from collections import Counter
from collections.abc import Callable
from typing import Any

#: A search term: a run of letters or digits (``parse_config`` is two terms), compared lowercased.
TERM = re.compile(r"[^\W_]+")


class BM25:
    """Okapi BM25 over chunks with Lucene's idf, ``log(1 + (N - df + 0.5) / (df + 0.5))``, and term
    weight ``tf / (tf + k1 * (1 - b + b * dl / avgdl))`` (the ranking bm25s's default gives).

    Compact, for corpora of a gigabyte: once built, the postings of all terms are two flat
    arrays (chunk numbers and term frequencies, 8 bytes a posting) in the order of the terms'
    64-bit hashes, which a sorted ``array('q')`` holds with each term's first posting (16 bytes a
    term); a query term is found by binary search on its hash. The terms' strings are not kept
    (two terms of one corpus share a 64-bit hash with a chance of about ``terms**2 / 2**65``:
    one in 10**7 for a million terms). While building, a term seen in one chunk only (most
    terms of logs: request ids, numbers) is one packed ``int`` under its hash, and from its second
    chunk on an ``array('Q')`` of packed ``chunk << 32 | tf``.
    """

    def __init__(self, context: str, spans: list[tuple[int, int]], k1: float = 1.5, b: float = 0.75,
                 pause: Callable[[], None] | None = None) -> None:
        """Index ``spans`` (``[(start, end)]`` character offsets of ``context``, one per chunk);
        ``pause`` (a background build's) is called every 64 chunks."""
        self.k1, self.b = k1, b
        self.n = len(spans)
        self.lens = array("I")
        postings: dict[int, Any] = {}  # hash(term) -> chunk << 32 | tf (one chunk so far), or array of those
        findall = TERM.findall
        get = postings.get
        for i, (start, end) in enumerate(spans):
            if pause is not None and not i % 64:
                pause()
            terms = findall(context[start:end].lower())
            self.lens.append(len(terms))
            for term, tf in Counter(terms).items():
                h = hash(term)
                p = get(h)
                if p is None:
                    postings[h] = i << 32 | tf
                elif type(p) is int:
                    postings[h] = array("Q", (p, i << 32 | tf))
                else:
                    p.append(i << 32 | tf)
        self.avgdl = (sum(self.lens) / self.n) if self.n else 0.0
        self.keys = array("q", sorted(postings))  # the terms' hashes, sorted
        self.first = array("Q")  # index of each term's first posting; one more at the end
        self.docs = array("I")
        self.tfs = array("I")
        for h in self.keys:
            self.first.append(len(self.docs))
            p = postings.pop(h)
            if type(p) is int:
                self.docs.append(p >> 32)
                self.tfs.append(p & 0xFFFFFFFF)
            else:
                self.docs.extend(x >> 32 for x in p)
                self.tfs.extend(x & 0xFFFFFFFF for x in p)
        self.first.append(len(self.docs))

    def _range(self, term: str) -> tuple[int, int]:
        """``(first, end)`` of ``term``'s postings in :attr:`docs` (empty for an unknown term)."""
        h = hash(term)
        i = bisect.bisect_left(self.keys, h)
        if i < len(self.keys) and self.keys[i] == h:
            return self.first[i], self.first[i + 1]
        return 0, 0

    def idf(self, term: str) -> float:
        """Lucene's non-negative idf of ``term`` (0 for an unknown term)."""
        a, z = self._range(term)
        if z == a:
            return 0.0
        df = z - a
        return math.log(1 + (self.n - df + 0.5) / (df + 0.5))

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """``[(chunk index, score)]`` of the best ``k`` chunks, best first (ties: lower index)."""
        scores: dict[int, float] = {}
        k1, b, avg, lens = self.k1, self.b, self.avgdl or 1.0, self.lens
        for term in dict.fromkeys(TERM.findall(query.lower())):
            a, z = self._range(term)
            if z == a:
                continue
            idf = self.idf(term)
            for i, tf in zip(self.docs[a:z], self.tfs[a:z], strict=True):
                scores[i] = scores.get(i, 0.0) + idf * tf / (tf + k1 * (1 - b + b * lens[i] / avg))
        return heapq.nsmallest(max(0, k), scores.items(), key=lambda kv: (-kv[1], kv[0]))
