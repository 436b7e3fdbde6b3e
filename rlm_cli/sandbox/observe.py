"""What model code looked at, observed inside the REPL worker (standard library only).

The worker wraps the corpus helpers and the sub-call functions so that, for every code block,
it can report two things with the block's result:

* ``helpers``: how many times the block called each helper (``grep``, ``read_file``,
  ``search``, ``chunk_text``, ``llm_query``, ``rlm_query``, ``FINAL``...) and touched ``files``,
  ``chunks`` or ``context``. Helpers are wrapped and ``files``/``chunks`` are lists that count
  their reads, all at run time; ``context`` is a plain ``str`` (watching its reads would need a
  copy of the whole corpus), so a block counts as reading it when its code loads the name
  ``context``. The parent infers the iteration's phase from these counts (``rlm_cli.app.phases``).
* ``sources``: the corpus lines the block looked at, as ``[how, path, start_line, end_line]``
  (1-based, inclusive): ``read_file`` ranges; ``grep`` hits whose line the block printed;
  ``printed`` slices of ``context`` (a chunk, a window) found in the block's output; and
  ``sub_call`` / ``rlm_query`` slices of ``context`` found in the prompts and contexts sent to
  sub-calls and sub-RLMs. The parent merges them into the run's ``sources`` (``rlm_cli.output.sources``).

Finding slices of ``context`` in a text (a prompt, the output) uses a line index: every line of
``context`` with at least :data:`MIN_LINE_CHARS` characters, keyed by the high 32 bits of its hash
and packed with its offset into one sorted ``array('q')`` (8 bytes per line: about 16 MB for the
Python standard library's 600,000 such lines, built in about 1.5 s per 30 MB). Each line of the
text not yet covered is looked up; every candidate offset is extended forwards and backwards
while the text and ``context`` agree (block compares, halving on a mismatch), and the longest
unambiguous match is kept. A slice is found when it holds at least one whole line of
``MIN_LINE_CHARS`` characters that occurs at most :data:`MAX_CANDIDATES` times in the corpus.
Model code runs in this process, so it could tamper with these records: the parent checks their
shape and paths, but they describe what the helpers saw, not a proof.
"""

from __future__ import annotations

import ast
import bisect
import os
import threading
import time
import weakref
from array import array
from collections import Counter
from collections.abc import Callable
from typing import Any

#: Lines shorter than this are not indexed (too common to place a slice).
MIN_LINE_CHARS = 24
#: A line found at more places than this in the corpus is not used to place a slice.
MAX_CANDIDATES = 16
#: Text mapped per call (a prompt, an output): longer texts are mapped on their first part.
MAX_MAP_CHARS = 4_000_000
#: Source records kept per block (the parent merges and caps them again).
MAX_RECORDS = 2_000
#: ``grep`` hits remembered per block to check against its output.
MAX_PENDING_HITS = 5_000


class LineIndex:
    """Sorted packed ``(hash(line) >> 32) << 32 | offset`` of every long line of ``context``."""

    def __init__(self, context: str, pause: Callable[[], None] | None = None) -> None:
        """Index ``context``; ``pause`` (a background build's) is called between blocks of about 1 MiB."""
        self.context = context
        n = len(context)
        if n >= 1 << 32:
            self.keys = array("q")
            return
        # Keys go to 256 arrays by their top byte (8 bytes a key) and each is sorted on its own,
        # so the Python ints of a sort (40 bytes a key) exist for one 256th of the lines at a time.
        buckets = [array("q") for _ in range(256)]
        pos = 0
        block = 1 << 20  # split per MiB: the lines of one block at a time in memory
        while pos < n:
            if pause is not None:
                pause()
            end = context.find("\n", min(n, pos + block))
            end = n if end < 0 else end + 1
            offset = pos
            for line in context[pos:end].split("\n"):
                if len(line) >= MIN_LINE_CHARS:
                    key = ((hash(line) >> 32) << 32) | offset
                    buckets[(key >> 56) + 128].append(key)
                offset += len(line) + 1
            pos = end
        self.keys = array("q")
        for i, bucket in enumerate(buckets):  # top bytes -128..127: ascending order of the signed keys
            self.keys.extend(sorted(bucket))
            buckets[i] = array("q")

    def lookup(self, line: str) -> list[int]:
        """Offsets of ``line`` as a whole line of ``context`` (at most ``MAX_CANDIDATES + 1``)."""
        high = (hash(line) >> 32) << 32
        keys, ctx, size = self.keys, self.context, len(line)
        i = bisect.bisect_left(keys, high)
        out: list[int] = []
        while i < len(keys) and keys[i] - high < (1 << 32) and keys[i] >= high:
            offset = keys[i] - high
            if ctx.startswith(line, offset) and (offset + size == len(ctx) or ctx[offset + size] == "\n"):
                out.append(offset)
                if len(out) > MAX_CANDIDATES:
                    break
            i += 1
        return out


def _forward(text: str, i: int, ctx: str, j: int) -> int:
    """Length of the common run of ``text[i:]`` and ``ctx[j:]``."""
    limit = min(len(text) - i, len(ctx) - j)
    n, step = 0, 256
    while n < limit:
        k = min(step, limit - n)
        if text[i + n:i + n + k] == ctx[j + n:j + n + k]:
            n += k
            step = min(step * 2, 1 << 16)
        elif k == 1:
            break
        else:
            step = max(1, k // 2)
    return n


def _backward(text: str, i: int, ctx: str, j: int) -> int:
    """Length of the common run ending at ``text[:i]`` and ``ctx[:j]``."""
    limit = min(i, j)
    n, step = 0, 256
    while n < limit:
        k = min(step, limit - n)
        if text[i - n - k:i - n] == ctx[j - n - k:j - n]:
            n += k
            step = min(step * 2, 1 << 16)
        elif k == 1:
            break
        else:
            step = max(1, k // 2)
    return n


class Observer:
    """Per-block counters and source records of one worker (thread-safe: batched sub-calls
    report from many threads)."""

    def _fresh_locks(self) -> None:
        self._lock = threading.Lock()
        self._index_lock = threading.Lock()

    def __init__(self, context: str, files: list[dict[str, Any]]) -> None:
        self.context = context
        self.files = files
        self._starts = [int(f["start"]) for f in files]
        self._lock = threading.Lock()
        self._index: LineIndex | None = None
        self._index_failed = False
        self._index_lock = threading.Lock()
        self._wanted = False  # a lookup waits for the index: the background build stops pausing
        self.counts: Counter[str] = Counter()
        self.records: list[tuple[str, str, int, int]] = []
        self.pending_hits: list[tuple[str, int, str]] = []
        #: Output a helper wrote with its sources already recorded (left out of slice mapping).
        self.known_texts: list[str] = []
        _OBSERVERS.add(self)

    # -- per block -------------------------------------------------------------------------------
    def begin_block(self, tree: ast.AST | None) -> None:
        """Reset the counters for a new block; ``tree`` is its parsed code (a ``context`` name
        read in it counts as looking at the corpus text)."""
        with self._lock:
            self.counts = Counter()
            self.records = []
            self.pending_hits = []
            self.known_texts = []
            if tree is not None:
                uses = sum(1 for node in ast.walk(tree)
                           if isinstance(node, ast.Name) and node.id == "context" and isinstance(node.ctx, ast.Load))
                if uses:
                    self.counts["context"] += uses

    def end_block(self, output: str) -> dict[str, Any]:
        """The block's report: ``{"helpers": {name: count}, "sources": [[how, path, a, b], ...]}``,
        after checking which ``grep`` hits the block printed and which corpus slices ``output``
        (the block's kept stdout) shows."""
        with self._lock:
            hits, self.pending_hits = self.pending_hits, []
            known, self.known_texts = self.known_texts, []
        for path, line, text in hits:
            shown = text.strip()
            if len(shown) >= 3 and (shown in output or repr(text)[1:-1].strip() in output):
                self._add("grep", path, line, line)
        for text in known:
            output = output.replace(text, "", 1)
        self.note_text(output, "printed")
        with self._lock:
            return {"helpers": dict(self.counts), "sources": [list(r) for r in self.records]}

    # -- recording -------------------------------------------------------------------------------
    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the block's counter ``name``."""
        with self._lock:
            self.counts[name] += n

    def _add(self, how: str, path: str, a: int, b: int) -> None:
        with self._lock:
            if len(self.records) < MAX_RECORDS:
                self.records.append((how, path, a, b))

    def read(self, path: str, a: int, b: int) -> None:
        """``read_file`` showed lines ``a..b`` of ``path``."""
        if b >= a:
            self._add("read_file", path, a, b)

    def formatted(self, text: str, rows: list[tuple[str, str, int, int]]) -> None:
        """A helper prints ``text``, lines of the corpus it formatted itself (``path:line: ...``),
        whose sources it knows: record ``rows`` (``(how, path, first line, last line)``) and leave
        ``text`` out of the block's slice mapping (it holds no slice of ``context``)."""
        with self._lock:
            if text:
                self.known_texts.append(text)
        for how, path, a, b in rows:
            self._add(how, path, a, b)

    def grep_hits(self, hits: list[dict[str, Any]]) -> None:
        """Remember ``grep`` results; the ones whose line the block prints become sources."""
        with self._lock:
            room = MAX_PENDING_HITS - len(self.pending_hits)
            for h in hits[:max(0, room)]:
                self.pending_hits.append((str(h.get("file")), int(h.get("line", 0)), str(h.get("text", ""))))

    def note_text(self, text: str, how: str) -> None:
        """Record the slices of ``context`` that ``text`` contains, as ``how`` (``sub_call``,
        ``rlm_query`` or ``printed``). Never raises: a failed index build disables it."""
        if not text or len(text) < MIN_LINE_CHARS:
            return
        try:
            index = self._line_index()
            if index is None:
                return
            for start, end in self.find_slices(text[:MAX_MAP_CHARS], index):
                for path, a, b in self.lines_of(start, end):
                    self._add(how, path, a, b)
        except (MemoryError, RecursionError):
            self._index_failed = True

    # -- mapping ---------------------------------------------------------------------------------
    def build_index(self, busy: Callable[[], bool] | None = None) -> None:
        """Build the line index now (the worker calls this from a background thread). Between
        pieces of the work it waits while ``busy()`` is true (the worker: a code block runs),
        unless a lookup is waiting for the index."""
        def piece() -> None:
            while busy is not None and not self._wanted and busy():
                time.sleep(0.005)
        self._line_index(piece)

    def _line_index(self, pause: Callable[[], None] | None = None) -> LineIndex | None:
        if pause is None:
            self._wanted = True  # a build paused in the background goes on without pausing
        with self._index_lock:
            if self._index is None and not self._index_failed:
                try:
                    self._index = LineIndex(self.context, pause)
                except MemoryError:
                    self._index_failed = True
            return self._index

    def find_slices(self, text: str, index: LineIndex) -> list[tuple[int, int]]:
        """``[(start, end)]`` offsets of ``context`` that appear in ``text``, in text order."""
        ctx = self.context
        out: list[tuple[int, int]] = []
        covered = 0  # text before this offset is part of a slice found already
        q = 0
        for line in text.split("\n"):
            start_q = q
            q += len(line) + 1
            if start_q < covered or len(line) < MIN_LINE_CHARS:
                continue
            cands = index.lookup(line)
            if not cands or len(cands) > MAX_CANDIDATES:
                continue
            best: tuple[int, int, int] | None = None  # (length, context start, text end)
            tie = False
            for o in cands:
                back = _backward(text, start_q, ctx, o)
                fwd = _forward(text, start_q, ctx, o)
                length = back + fwd
                if best is None or length > best[0]:
                    best, tie = (length, o - back, start_q + fwd), False
                elif length == best[0]:
                    tie = True
            if best is None or tie:
                continue
            length, cstart, text_end = best
            out.append((cstart, cstart + length))
            covered = text_end
        return out

    def lines_of(self, start: int, end: int) -> list[tuple[str, int, int]]:
        """The ``(path, first line, last line)`` of each file that ``context[start:end]`` covers
        (file headers between files are not part of any file)."""
        out: list[tuple[str, int, int]] = []
        ctx = self.context
        i = max(0, bisect.bisect_right(self._starts, start) - 1)
        while i < len(self.files) and end > 0:
            f = self.files[i]
            fs, fe = int(f["start"]), int(f["end"])
            if fs >= end:
                break
            s, e = max(start, fs), min(end, fe)
            if e > s:
                a = 1 + ctx.count("\n", fs, s)
                b = a + ctx.count("\n", s, max(s, e - 1))
                out.append((str(f["path"]), a, b))
            i += 1
        return out


#: Live observers, so that a child forked by model code gets fresh locks (a lock held by a thread
#: of the parent would never be released there).
_OBSERVERS: weakref.WeakSet[Observer] = weakref.WeakSet()


def _after_fork() -> None:
    for observer in list(_OBSERVERS):
        observer._fresh_locks()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def watched(name: str, fn: Callable[..., Any], observer: Observer,
            after: Callable[[Any, tuple[Any, ...], dict[str, Any]], None] | None = None) -> Callable[..., Any]:
    """``fn`` that counts its calls as ``name`` and passes ``(result, args, kwargs)`` to ``after``."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        observer.count(name)
        result = fn(*args, **kwargs)
        if after is not None:
            try:
                after(result, args, kwargs)
            except Exception:  # noqa: BLE001, S110 - observing must never break model code
                pass
        return result

    wrapper.__name__ = getattr(fn, "__name__", name)
    wrapper.__qualname__ = getattr(fn, "__qualname__", name)
    wrapper.__doc__ = getattr(fn, "__doc__", None)
    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


class WatchedList(list):  # type: ignore[type-arg]
    """A list (``files``, ``chunks``) that counts reads as ``name`` on an :class:`Observer`."""

    def __init__(self, items: list[Any], name: str, observer: Observer) -> None:
        super().__init__(items)
        self._name = name
        self._observer = observer

    def _seen(self) -> None:
        self._observer.count(self._name)

    def __iter__(self) -> Any:
        self._seen()
        return super().__iter__()

    def __getitem__(self, i: Any) -> Any:
        self._seen()
        return super().__getitem__(i)

    def __len__(self) -> int:
        self._seen()
        return super().__len__()

    def __reduce_ex__(self, protocol: Any) -> Any:  # pickles (and copies) as a plain list
        return (list, (list(super().__iter__()),))
