"""Corpus helpers of the REPL namespace: ``grep``, ``read_file``, ``chunk_text``, ``search``.

Runs inside the sandboxed worker, so it uses only the standard library. :class:`CorpusView`
holds ``context`` (str), ``files`` and ``chunks`` (lists of dicts built from the bundle's
``index.json``, whose columns are written by ``rlm_cli.corpus.store``).

Line numbers are 1-based and count ``\\n`` only (a ``\\r`` before it is not shown), the same rule
the chunker uses for ``chunks[i]["start_line"]``, so ``grep``, ``read_file`` and ``chunks`` agree.
"""

from __future__ import annotations

import bisect
import difflib
import gc
import json
import mmap
import os
import re
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from rlm_cli.protocol import BUNDLE_VERSION, context_by_path, unpack_columns
from rlm_cli.sandbox import grep_engine, near_miss, pydefs, rows
from rlm_cli.sandbox.bm25 import BM25
from rlm_cli.sandbox.grep_engine import GREP_USAGE, PY_SUFFIXES
from rlm_cli.sandbox.rows import CHUNK_KEYS, FILE_KEYS, Row, glob_matcher, make_hit, no_collection, raw_layout
from rlm_cli.sandbox.texts import Context, Lines, NumberedLines, str_width

#: Characters of a matching line kept in a ``grep`` result.
MAX_LINE_CHARS = 500


class _DefaultCap(int):
    """grep's default ``max_results``: an ``int`` that remembers the caller did not choose it, so
    that a result stopped there is reported as stopped at the *default* cap (a count over it is
    a wrong count the model never asked for; ``rlm_cli.loop.checks.DefaultCap``)."""


#: grep's default ``max_results``: high enough that a count over a default grep is every match on
#: any corpus a model can read line by line (31 MB of standard library has 870,000 lines; a grep
#: that matches 100,000 of them is a pattern that matches almost anything), low enough that a
#: result fits in memory (about 50 MB of rows).
DEFAULT_MAX_RESULTS = _DefaultCap(100_000)
READ_USAGE = "Usage: read_file(path, start_line=None, end_line=None), e.g. read_file('src/app.py', 10, 40)"
#: ``path:120`` or ``path:100-140``.
_PATH_LINES = re.compile(r"(.+?):(\d+)(?:-(\d+))?")


class CorpusView:
    """The loaded corpus and the helper functions the model calls on it.

    ``CorpusView(text)`` (no ``files``) treats ``text`` as one pseudo-file ``<context>`` split
    into line-aligned pseudo-chunks of about 8,000 characters, so every helper still works.
    """

    def __init__(self, context: str = "", files: list[dict[str, Any]] | None = None,
                 chunks: list[dict[str, Any]] | None = None, *, by_path: bool = True) -> None:
        #: The corpus text: a :class:`Context` when :func:`protocol.context_by_path` allows
        #: (always for a ``str`` given here), else the plain ``str`` :meth:`from_bundle` decoded.
        self.context: str = context if isinstance(context, Context) or not by_path else Context(context)
        if isinstance(self.context, Context):
            self.context._view = self
        rows.set_current(self)
        if files is None:
            files, chunks = raw_layout(context)
        self.files: list[dict[str, Any]] = files
        self.chunks: list[dict[str, Any]] = chunks or []
        self._file_by_path: dict[str, dict[str, Any]] = {f["path"]: f for f in self.files}
        self._starts = [f["start"] for f in self.files]
        self._cstarts: list[int] = []  # chunks' starts, made on first use (chunk_text of an offset)
        self._sep_ok: bool | None = None
        self._defs: dict[str, list[tuple[int, int, str]]] = {}  # per Python file, for grep's "in"
        self._bm25: BM25 | None = None
        self._bm25_lock = threading.Lock()
        self._bm25_wanted = False
        #: The ``max_results`` a :meth:`grep` call stopped at since this was last set to 0 (0: none),
        #: and whether that was the default one (:data:`DEFAULT_MAX_RESULTS`).
        self.grep_capped = 0
        self.grep_capped_default = False
        #: ``(pattern, path_glob, keep, flags)`` of each grep over the corpus that matched no line since
        #: the worker last cleared it (see :meth:`explain_empty_greps`).
        self.grep_empty: list[tuple[str, str | None, Callable[[str], bool] | None, int]] = []
        #: ``(path, dstart, dend, summary)`` of each structured file (for ``data_helpers.DataView``).
        self.structured: list[tuple[str, int, int, dict[str, Any]]] = []
        _VIEWS.add(self)

    @classmethod
    def from_bundle(cls, index_file: str, context_file: str) -> CorpusView:
        """Load a saved bundle (``index.json`` and the UTF-8 context file).

        Raises:
            OSError: a file cannot be read.
            ValueError: the bundle is of another version or inconsistent.
        """
        with open(index_file, "rb") as fh:
            index = json.loads(fh.read())
        if index.get("version") != BUNDLE_VERSION:
            raise ValueError(f"corpus bundle version {index.get('version')!r} is not {BUNDLE_VERSION}")
        with open(context_file, "rb") as fh:  # mapped: no private copy of the bytes (see store.read_context)
            size = os.fstat(fh.fileno()).st_size
            context = ""
            if size:
                with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                    context = str(mm, "utf-8")
        if len(context) != index["context_chars"]:
            raise ValueError("the context file does not match the index")
        by_path = context_by_path(len(context), str_width(context))
        if by_path:
            context = Context(context)  # the copy (see Context); the plain str is freed here
        with no_collection():
            fcols, ccols = unpack_columns(index["files"]), unpack_columns(index["chunks"])
            paths = fcols["path"]
            files: list[dict[str, Any]] = [Row(zip(FILE_KEYS, row, strict=True))
                                           for row in zip(*(fcols[k] for k in FILE_KEYS), strict=True)]
            chunks: list[dict[str, Any]] = [
                Row({"id": i, "path": paths[fi], **dict(zip(CHUNK_KEYS, row, strict=True))})
                for i, (fi, *row) in enumerate(zip(ccols["file"], *(ccols[k] for k in CHUNK_KEYS), strict=True))]
            view = cls(context, files, chunks, by_path=by_path)
            view.structured = [(p, a, b, m) for p, a, b, m in zip(paths, fcols["dstart"], fcols["dend"], fcols["dmeta"],
                                                                  strict=True) if b > a and m]
        # The rows live as long as the worker: out of the collector's generations, a full
        # collection while the model's code runs (one every ~70,000 new objects: a grep with
        # many hits) does not walk a million rows again.
        gc.freeze()
        return view

    # -- grep ----------------------------------------------------------------------------------
    def grep(self, pattern: str | re.Pattern[str] | None = None, where: Any = None, *more: Any,
             path_glob: str | None = None, ignore_case: bool = False,
             max_results: int | None = DEFAULT_MAX_RESULTS, **aliases: Any) -> list[dict[str, Any]]:
        """Lines matching the regex ``pattern`` in every file (or those matching ``path_glob``).

        Returns at most ``max_results`` dicts ``{"file", "line", "text"}`` in corpus order, one
        per matching line (``line`` is 1-based; ``text`` is the line, cut at 500 characters);
        ``max_results=None`` returns every one. A call that stops at its ``max_results`` sets
        :attr:`grep_capped` to that number, and :attr:`grep_capped_default` when it was the
        default (:data:`DEFAULT_MAX_RESULTS`): the worker then tells the model there may be
        more and reports the default cap to the loop (a default cap of 200 once made
        ``len(grep(...))`` a wrong count of 200).
        ``^`` and ``$`` match at line boundaries. ``path_glob`` is an fnmatch pattern tried on the
        whole path and, when it has no ``/``, on the file name (``"*.py"``, ``"src/*"``).

        The calls a Python programmer writes by habit also work (see :meth:`_where`): a second
        argument may be the glob, a file dict or grep hit, a list of them, or a text to search
        (``grep(pattern, context)``, ``grep(pattern, read_file_text)``, like ``re.findall``);
        ``grep(context, pattern)`` is read the right way round; ``flags=re.I``, ``glob=``,
        ``file=``/``path=``, ``limit=`` are accepted.

        Raises:
            TypeError: the arguments cannot be read as a grep call (the message shows the call).
            re.error: ``pattern`` is not a valid regular expression.
        """
        pattern, spans, path_glob, ignore_case, limit = self._grep_args(
            pattern, where, more, path_glob, ignore_case, max_results, aliases)
        default = isinstance(limit, _DefaultCap)
        max_results = sys.maxsize if limit is None else int(limit)
        flags = re.MULTILINE | (re.IGNORECASE if ignore_case else 0)
        if isinstance(pattern, re.Pattern):
            rx = re.compile(pattern.pattern, pattern.flags | flags)
        else:
            rx = re.compile(pattern, flags)
        if isinstance(spans, str):  # a text that is not part of `context`: its own lines
            own = CorpusView(spans)
            hits = own.grep(rx, max_results=DEFAULT_MAX_RESULTS if default else max_results)
            if own.grep_capped:
                self.grep_capped, self.grep_capped_default = own.grep_capped, own.grep_capped_default
            return hits
        keep = glob_matcher(path_glob) if path_glob else None
        ctx = self.context
        rfind, find = ctx.rfind, ctx.find
        out: list[dict[str, Any]] = []

        one_group, get = rx.groups == 1, str.__getitem__

        def emit(f: dict[str, Any], m: re.Match[str], ms: int, line: int) -> int:
            """Append the hit of match ``m`` (at ``ms``, on line ``line`` of ``f``); returns its line's end."""
            fs, fe, path = f["start"], f["end"], f["path"]
            ls = rfind("\n", fs, ms) + 1 or fs
            le = find("\n", ms, fe)
            if le < 0:
                le = fe
            text = get(ctx, slice(ls, le if le - ls <= MAX_LINE_CHARS else ls + MAX_LINE_CHARS))
            hit = make_hit(path, line, text[:-1] if text[-1:] == "\r" else text,
                           m.group(1) if one_group else m.group(0), m.groups())
            if path.endswith(PY_SUFFIXES):
                where = self._enclosing(f, line)
                if where:
                    hit["in"] = where
            out.append(hit)
            return le

        with no_collection():  # the hits are kept: a collection while they are made finds nothing to free
            self._scan(rx, spans, keep, out, max_results, emit)
        if len(out) >= max_results:
            self.grep_capped, self.grep_capped_default = max_results, default
        if not out and spans is None:
            self.grep_empty.append((rx.pattern, path_glob, keep, rx.flags))
        return out

    def explain_empty_greps(self) -> str:
        """Notes on the greps over the corpus since :attr:`grep_empty` was last cleared that matched
        nothing (``near_miss.explain_empty``: the lines that hold the pattern's literal parts), at
        most ``near_miss.NOTES_PER_BLOCK`` of them within ``near_miss.BUDGET_S`` seconds; ``""``
        when every grep found something."""
        empty, self.grep_empty = self.grep_empty, []
        deadline = time.monotonic() + near_miss.BUDGET_S
        notes = [near_miss.explain_empty(self.context, self.files, pattern, keep, glob, deadline, flags)
                 for pattern, glob, keep, flags in empty[:near_miss.NOTES_PER_BLOCK]]
        if len(empty) > near_miss.NOTES_PER_BLOCK:
            notes.append(f"[note: {len(empty) - near_miss.NOTES_PER_BLOCK:,} more grep() calls of this block "
                         "matched no line.]\n")
        return "".join(notes)

    def _scan(self, rx: re.Pattern[str], spans: Any, keep: Callable[[str], bool] | None, out: list[dict[str, Any]],
              max_results: int, emit: Callable[[dict[str, Any], re.Match[str], int, int], int]) -> None:
        """Hand each grep match to ``emit``: over runs of neighbouring files
        (``grep_engine.scan_run``) when the pattern allows, else file by file over ``spans``."""
        ctx = self.context
        search, count = rx.search, ctx.count
        if spans is None and self._separated() and grep_engine.scans_across_files(rx):
            for run in grep_engine.runs(self.files, keep):
                if len(out) >= max_results:
                    break
                grep_engine.scan_run(self.context, rx, run, out, max_results, emit)
        else:
            for f, (fs, fe, line0) in self._spans(spans):
                if len(out) >= max_results:
                    break
                if keep is not None and not keep(f["path"]):
                    continue
                pos, counted, line = fs, fs, line0
                while pos < fe:
                    m = search(ctx, pos, fe)
                    if m is None:
                        break
                    ms = m.start()
                    line += count("\n", counted, ms)
                    counted = ms
                    le = emit(f, m, ms, line)
                    if len(out) >= max_results:
                        break
                    pos = le + 1

    def _separated(self) -> bool:
        """Whether every file's text is followed by ``\\n`` or the end of ``context`` (as in every
        bundle), which ``grep_engine.scan_run`` needs; checked once."""
        if self._sep_ok is None:
            ctx, n = self.context, len(self.context)
            self._sep_ok = all(f["end"] >= n or str.__getitem__(ctx, f["end"]) == "\n" for f in self.files)
        return self._sep_ok

    def _enclosing(self, f: dict[str, Any], line: int) -> str | None:
        """The function or class (qualified: ``Class.method``) whose body holds line ``line`` of
        Python file ``f``, or ``None`` at module level (``pydefs.definitions``: by indentation,
        as ``ast`` reads it). Each file is read once, on its first hit."""
        defs = self._defs.get(f["path"])
        if defs is None:
            defs = self._defs[f["path"]] = pydefs.definitions(self.context[f["start"]:f["end"]])
        return grep_engine.enclosing(defs, line)

    def _grep_args(self, pattern: Any, where: Any, more: tuple[Any, ...], path_glob: str | None, ignore_case: bool,
                   max_results: int | None, aliases: dict[str, Any]) -> tuple[Any, Any, str | None, bool, int | None]:
        """Read a grep call however it was written (``grep_engine.read_call``): ``(pattern, spans,
        path_glob, ignore_case, max_results)``; ``spans`` is ``None`` (every file), a list of
        ``(file, start, end, first line)`` or a text of its own (a ``str``)."""
        pattern, where, path_glob, ignore_case, max_results = grep_engine.read_call(
            pattern, where, more, path_glob, ignore_case, max_results, aliases, self.context)
        spans: Any = None
        if where is not None:
            spans, glob = self._where(where)
            path_glob = path_glob or glob
        return pattern, spans, path_glob, ignore_case, max_results

    def _where(self, where: Any) -> tuple[Any, str | None]:
        """``(spans, glob)`` for grep's second argument: ``context`` or a slice of it (its own
        place in the corpus), another text (its own lines), a glob or path, a file dict or grep
        hit, or a list of any of these."""
        if isinstance(where, str):
            if where is self.context or (len(where) == len(self.context) and where == self.context):
                return None, None
            if "\n" not in where and len(where) <= 300:
                f = self._file_by_path.get(where)
                if f is not None:
                    return [(f, f["start"], f["end"], 1)], None
                return None, where  # a glob
            return self._locate(where), None
        if isinstance(where, dict):
            path = where.get("file") or where.get("path")
            if isinstance(path, str):
                f = self.resolve(path)
                return [(f, f["start"], f["end"], 1)], None
        if isinstance(where, (list, tuple, set)):
            spans: list[tuple[dict[str, Any], int, int, int]] = []
            for item in where:
                part, glob = self._where(item)
                if glob is not None:
                    spans += [(f, f["start"], f["end"], 1) for f in self.files if glob_matcher(glob)(f["path"])]
                elif isinstance(part, str):
                    return "\n".join(str(x) for x in where), None
                elif part is not None:
                    spans += part
            seen: set[tuple[int, int]] = set()
            return [s for s in spans if (s[1], s[2]) not in seen and not seen.add((s[1], s[2]))], None  # type: ignore[func-returns-value]
        raise TypeError(f"grep(): cannot search in a {type(where).__name__}. {GREP_USAGE}")

    def _locate(self, text: str) -> Any:
        """Spans of ``context`` equal to ``text`` when it is a slice of one file (so hits keep
        their real file and line), else ``text`` itself."""
        pos = self.context.find(text) if text else -1
        if pos < 0:
            return text
        i = bisect.bisect_right(self._starts, pos) - 1
        f = self.files[i] if i >= 0 else None
        if f is None or pos + len(text) > f["end"] + 1:
            return text  # spans several files: search it as a text of its own
        return [(f, pos, min(pos + len(text), f["end"]), 1 + self.context.count("\n", f["start"], pos))]

    def _spans(self, spans: Any) -> list[tuple[dict[str, Any], tuple[int, int, int]]]:
        if spans is None:
            return [(f, (f["start"], f["end"], 1)) for f in self.files]
        return [(f, (a, b, line)) for f, a, b, line in spans]

    # -- reading -------------------------------------------------------------------------------
    def resolve(self, path: str) -> dict[str, Any]:
        """The entry of ``files`` that ``path`` names: a corpus path or a unique suffix of one.

        Raises:
            FileNotFoundError: no such file, or several (the message suggests close paths).
        """
        f = self._file_by_path.get(path)
        if f is not None:
            return f
        norm = path.lstrip("./") if path.startswith("./") else path
        matches = [p for p in self._file_by_path if p == norm or p.endswith("/" + norm)]
        if len(matches) == 1:
            return self._file_by_path[matches[0]]
        if matches:
            raise FileNotFoundError(f"{path!r} matches several files: {matches[:8]}; give a longer path")
        close = difflib.get_close_matches(path, list(self._file_by_path), n=5, cutoff=0.6)
        hint = f"; did you mean one of {close}" if close else "; see `files` for the paths"
        raise FileNotFoundError(f"no file {path!r} in the corpus{hint}")

    def read_file(self, path: Any = None, start_line: int | None = None, end_line: int | None = None,
                  **aliases: Any) -> str:
        """Lines ``start_line..end_line`` (1-based, inclusive; default the whole file) of ``path``,
        each prefixed with its number: ``"12: text"`` (a :class:`NumberedLines`: a loop over it
        gives the lines without their numbers, as a loop over a file does). ``path`` may be a
        unique path suffix.

        Also accepted: a grep hit or search result (``read_file(hit)`` shows lines around its
        line, or the result's chunk), ``"path:120"`` / ``"path:100-140"``, and ``start=``,
        ``end=``, ``line=``, ``lines=(a, b)``.

        Raises:
            FileNotFoundError: no such file (the message suggests close paths).
            ValueError: ``start_line`` is past the end of the file.
            TypeError: the arguments cannot be read as a read_file call (the message shows the call).
        """
        for key in ("file", "filename", "file_path", "filepath", "name"):
            if key in aliases and path is None:
                path = aliases.pop(key)
        for key in ("start", "first_line", "from_line", "begin"):
            if key in aliases and start_line is None:
                start_line = aliases.pop(key)
        for key in ("end", "last_line", "to_line", "stop"):
            if key in aliases and end_line is None:
                end_line = aliases.pop(key)
        around = aliases.pop("line", None)
        if "lines" in aliases:
            start_line, end_line = aliases.pop("lines")
        if aliases:
            raise TypeError(f"read_file() got unexpected keyword argument(s) {sorted(aliases)}. {READ_USAGE}")
        if isinstance(path, dict):
            if start_line is None and "start_line" in path:
                start_line, end_line = path["start_line"], path.get("end_line")
            elif start_line is None and "line" in path:
                around = path["line"]
        elif isinstance(path, str) and path not in self._file_by_path:
            m = _PATH_LINES.fullmatch(path)
            if m and start_line is None:
                start_line = int(m.group(2))
                end_line = int(m.group(3)) if m.group(3) else None
                if end_line is None:
                    around, start_line = start_line, None
        path = self.path_of(path)
        if around is not None and start_line is None:
            start_line, end_line = max(1, int(around) - 10), int(around) + 30
        f = self.resolve(path)
        n = int(f["lines"])
        a = 1 if start_line is None else max(1, int(start_line))
        if a > n:
            raise ValueError(f"start_line {a} is past the end of {f['path']} ({n} lines)")
        b = n if end_line is None else min(int(end_line), n)
        if b < a:
            return ""
        lines = self.context[f["start"]:f["end"]].split("\n", b)
        width = len(str(b))
        own = [lines[i - 1].removesuffix(chr(13)) for i in range(a, b + 1)]
        return NumberedLines("\n".join(f"{i:>{width}}: {t}" for i, t in enumerate(own, a)), "".join(t + "\n" for t in own))

    def file_text(self, path: str) -> str:
        """The text of the file ``path`` (a unique suffix is enough), as :class:`Lines` (a ``str``
        whose loop gives lines).

        Raises:
            FileNotFoundError: no such file (the message suggests close paths).
        """
        f = self.resolve(self.path_of(path))
        return Lines(str.__getitem__(self.context, slice(f["start"], f["end"])))

    def path_of(self, target: Any) -> str:
        """The path a helper argument names: a path, ``"path:120"`` / ``"path:100-140"``, or a dict
        with ``file`` or ``path`` (a grep hit, a search result, an entry of ``files``).

        Raises:
            TypeError: ``target`` names no path (the message shows read_file's call).
        """
        if isinstance(target, dict):
            target = target.get("file") or target.get("path")
        if isinstance(target, str):
            m = _PATH_LINES.fullmatch(target)
            return m.group(1) if m and target not in self._file_by_path else target
        raise TypeError(f"read_file() needs a path (a str), got {type(target).__name__}. {READ_USAGE}")

    def chunk_text(self, i: Any) -> str:
        """The text of chunk ``i`` (see ``chunks[i]`` for its file and lines); a search result or
        a chunk dict works too. A number past the last chunk but inside ``context`` is read as a
        character offset (``chunk_text(context.find(name))``): the chunk holding it, or the first
        chunk after it when it falls on a file's header line. A ``str`` is read as what a model
        means by it: a digit string is that number, a path is that file's first chunk, and other
        text is the chunk holding its first occurrence in ``context``
        (``chunk_text("XKWR-7354")``).

        Raises:
            IndexError: no such chunk, nor such offset.
            ValueError: a text found nowhere in ``context`` (the message shows the right calls).
            FileNotFoundError: a path that names no corpus file.
            TypeError: neither a number, a row nor a text.
        """
        if isinstance(i, dict):
            i = i.get("chunk", i.get("id"))
        if isinstance(i, str):
            i = self._chunk_of_text(i)
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"chunk_text() takes a chunk number (chunks[i]), a search() or grep() row, or a text "
                            f"of the corpus; got {type(i).__name__}")
        if isinstance(i, int) and len(self.chunks) <= i < len(self.context) and self.chunks:
            offset = i
            i = max(0, bisect.bisect_right(self._chunk_starts(), offset) - 1)
            if self.chunks[i]["end"] <= offset and i + 1 < len(self.chunks):
                i += 1  # between two files (a "==> path <==" header): the file that follows
        try:
            c = self.chunks[i]
        except IndexError:
            raise IndexError(f"chunk {i} does not exist: there are {len(self.chunks)} chunks") from None
        return Lines(str.__getitem__(self.context, slice(c["start"], c["end"])))

    def _chunk_of_text(self, text: str) -> int:
        """``chunk_text``'s reading of a ``str`` argument: a chunk number or an offset of ``context``."""
        if text.strip().isdigit():
            return int(text.strip())
        f = self._file_by_path.get(text)
        if f is None and re.fullmatch(r"[\w./\\-]+\.\w{1,8}", text):
            try:
                f = self.resolve(text)
            except FileNotFoundError:
                if self.context.find(text) < 0:
                    raise  # a path that names no file, nor a text of the corpus: the close paths
        if f is not None:
            return int(f["start"]) if int(f["start"]) >= len(self.chunks) else self._chunk_index(int(f["start"]))
        pos = self.context.find(text) if text else -1
        if pos < 0:
            raise ValueError(f"chunk_text({text[:60]!r}): that text is nowhere in `context`. chunk_text takes a chunk "
                             "number (chunks[i]), a search() or grep() row, or a text that is in the corpus; "
                             "grep(pattern) finds lines by a regex")
        return pos if pos >= len(self.chunks) else self._chunk_index(pos)

    def _chunk_index(self, offset: int) -> int:
        """The index of the chunk holding character ``offset`` (the next one on a header line)."""
        i = max(0, bisect.bisect_right(self._chunk_starts(), offset) - 1)
        if self.chunks and self.chunks[i]["end"] <= offset and i + 1 < len(self.chunks):
            i += 1
        return i

    def _chunk_starts(self) -> list[int]:
        if len(self._cstarts) != len(self.chunks):
            self._cstarts = [c["start"] for c in self.chunks]
        return self._cstarts

    # -- search --------------------------------------------------------------------------------
    def search(self, query: str, k: Any = 10, path_glob: str | None = None, **aliases: Any) -> list[dict[str, Any]]:
        """The ``k`` chunks most relevant to ``query`` by BM25 (Okapi, k1=1.5, b=0.75, Lucene idf).

        Terms are runs of letters or digits, compared lowercased (``parse_config`` is ``parse``
        and ``config``; grep's ``ignore_case=``/``flags=`` are accepted and change nothing).
        Returns ``[{"chunk", "file", "start_line", "end_line", "score"}]``, best first; chunks
        sharing no term with the query are left out (``k=None``: all the others). The index takes about 3 s per
        30 MB of text to build: :meth:`start_index_build` starts it in the background, otherwise
        the first call builds it (a call during the build waits for it).
        """
        for key in ("top_k", "n", "limit", "max_results"):
            if key in aliases:
                k = aliases.pop(key)
        path_glob = path_glob or aliases.pop("glob", None) or aliases.pop("file", None)
        for key in ("ignore_case", "flags", "case_sensitive"):  # grep's; search ignores case already
            aliases.pop(key, None)
        if aliases:
            raise TypeError(f"search() got unexpected keyword argument(s) {sorted(aliases)}. "
                            "Usage: search(query, k=10) -> [{'chunk', 'file', 'start_line', 'end_line', 'score'}]")
        if isinstance(k, str):  # search(query, "*.py")
            k, path_glob = 10, k
        if k is None:  # max_results=None, as grep takes it: every chunk that shares a term
            k = len(self.chunks)
        keep = glob_matcher(path_glob) if path_glob else None
        out: list[dict[str, Any]] = []
        for i, score in self._index().top(str(query), int(k) if keep is None else len(self.chunks)):
            if keep is not None and not keep(self.chunks[i]["path"]):
                continue
            if len(out) >= int(k):
                break
            c = self.chunks[i]
            out.append(Row(chunk=i, file=c["path"], start_line=c["start_line"], end_line=c["end_line"],
                           score=round(score, 4)))
        return out

    def start_index_build(self, busy: Callable[[], bool] | None = None) -> threading.Thread:
        """Build the ``search`` index in a daemon thread (while the REPL waits for code); between
        pieces of the work it waits while ``busy()`` is true, unless a ``search`` call waits for
        the index. A failure there (MemoryError under ``--memory-limit``) is left for ``search``
        to meet and report."""
        def piece() -> None:
            while busy is not None and not self._bm25_wanted and busy():
                time.sleep(0.005)

        def build() -> None:
            try:
                self._index(piece)
            except Exception:  # noqa: BLE001, S110 - search() builds again and raises it to the caller
                pass

        thread = threading.Thread(target=build, name="search-index", daemon=True)
        thread.start()
        return thread

    def _index(self, pause: Callable[[], None] | None = None) -> BM25:
        if pause is None:
            self._bm25_wanted = True  # a build paused in the background goes on without pausing
        with self._bm25_lock:
            if self._bm25 is None:
                self._bm25 = BM25(self.context, [(c["start"], c["end"]) for c in self.chunks], pause=pause)
            return self._bm25


#: Live views, so that a child forked by model code gets fresh locks: it has no builder thread,
#: and a lock held by the parent's would never be released there.
_VIEWS: weakref.WeakSet[CorpusView] = weakref.WeakSet()


def _fresh_locks_after_fork() -> None:
    for view in list(_VIEWS):
        view._bm25_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_locks_after_fork)
