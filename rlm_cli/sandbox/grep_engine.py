"""The machinery behind ``CorpusView.grep``: a call read however it was written
(:func:`read_call`), one scan over neighbouring files instead of a search per file
(:func:`runs`, :func:`scan_run`, :func:`scans_across_files`) and the Python definition that
encloses a hit (:func:`enclosing`, over ``pydefs.definitions``). Runs inside the sandboxed worker: the
standard library only."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from typing import Any

GREP_USAGE = ("Usage: grep(pattern, path_glob=None, ignore_case=False, max_results=100000) searches every file of "
              "`context` and returns [{'file', 'line', 'text'}] (max_results=None: every match); "
              "e.g. grep(r'def main\\b', '*.py')")

PY_SUFFIXES = (".py", ".pyi", ".pyw")
#: Inline flags that turn a flag off (``(?-m:...)``, ``(?i-m)``): ``$`` without MULTILINE differs at a file's end.
_FLAGS_OFF = re.compile(r"\(\?[a-zA-Z]*-")


def scans_across_files(rx: re.Pattern[str]) -> bool:
    """Whether :func:`scan_run` finds exactly the per-file hits of ``rx``: no lookahead,
    no ``\\Z``, no flag turned off inline, and no match of the empty string (the pattern's
    smallest width, by ``re``'s own parser, is above 0). When unsure (a parser that changed), no."""
    src = rx.pattern
    if not isinstance(src, str) or "(?=" in src or "(?!" in src or "\\Z" in src or _FLAGS_OFF.search(src):
        return False
    try:
        from re import _parser  # type: ignore[attr-defined]

        return bool(_parser.parse(src, rx.flags).getwidth()[0] > 0)
    except Exception:  # noqa: BLE001 - another Python's private parser: take the per-file path
        return False


def enclosing(defs: list[tuple[int, int, str]], line: int) -> str | None:
    """The innermost of ``defs`` (``pydefs.definitions`` of a file) whose body holds line ``line``, or
    ``None`` at module level."""
    i = bisect.bisect_right(defs, (line, float("inf"))) - 1
    while i >= 0:  # nested bodies are nested intervals: the first that holds the line is innermost
        start, end, qual = defs[i]
        if end >= line:
            return qual
        i -= 1
    return None


def runs(files: list[dict[str, Any]], keep: Callable[[str], bool] | None) -> list[list[dict[str, Any]]]:
    """The ``files`` that ``keep`` accepts (all without it), cut into runs of neighbours in
    ``files`` (so in ``context``)."""
    out: list[list[dict[str, Any]]] = []
    last = -2
    for i, f in enumerate(files):
        if keep is not None and not keep(f["path"]):
            continue
        if i == last + 1 and out:
            out[-1].append(f)
        else:
            out.append([f])
        last = i
    return out


def scan_run(ctx: str, rx: re.Pattern[str], run: list[dict[str, Any]], out: list[dict[str, Any]],
             max_results: int, emit: Callable[[dict[str, Any], re.Match[str], int, int], int]) -> None:
    """grep over consecutive files (``run``) with one scan of their part of ``ctx`` (``context``):
    each match is handed to ``emit(file, match, start, line)``, which appends its hit to ``out``
    and returns the end of its line, until ``out`` holds ``max_results``.

    A per-file search (``rx.search(context, pos, file_end)``) costs a call per file; this
    searches the whole run and places each match in its file. The hits are the per-file
    search's, for a pattern :func:`scans_across_files` accepts: it cannot match the empty
    string, so none starts at a file's end, and without lookaheads or ``\\Z`` a match that
    ends inside its file is the one the per-file search finds there (a match never looks
    past its end but to the character after it, which is ``\\n`` after every file, as the
    end of the file is to ``$`` and ``\\b``). A match that starts between two files (on a
    header line) is passed over; one that runs past the end of its file is searched again
    inside that file.

    The matches come from one ``finditer`` rather than a ``search`` from each hit's line end
    (a call each: 1.7x ``re`` on 93,624 log lines): the leftmost match from a point at or
    before the next line is the leftmost from that line when no match passed over reaches
    into it, and the scan starts again from the line when one does.
    """
    starts = [f["start"] for f in run]
    end = run[-1]["end"]
    k, f = 0, run[0]
    pos = counted = f["start"]  # where the next hit may start; where `line` was counted to
    line = 1
    matches = rx.finditer(ctx, pos, end)
    while len(out) < max_results:
        m = next(matches, None)
        if m is None:
            return
        ms, me = m.start(), m.end()
        if ms < pos:  # on a line that has its hit already
            if me > pos:
                matches = rx.finditer(ctx, pos, end)
            continue
        if ms >= f["end"]:  # past this file: into the one that holds the match, if any
            k = bisect.bisect_right(starts, ms, k) - 1
            f = run[k]
            line, counted = 1, f["start"]
            if ms >= f["end"]:  # on the header line of the next file: no match starts there
                if k + 1 >= len(run):
                    return
                k += 1
                f = run[k]
                pos = counted = f["start"]
                line = 1
                if me > pos:
                    matches = rx.finditer(ctx, pos, end)
                continue
        if me > f["end"]:  # runs into the next file: what the file alone holds from here
            inside = rx.search(ctx, ms, f["end"])
            if inside is None:
                if k + 1 >= len(run):
                    return
                k += 1
                f = run[k]
                pos = counted = f["start"]
                line = 1
                matches = rx.finditer(ctx, pos, end)
                continue
            m, ms = inside, inside.start()
        line += ctx.count("\n", counted, ms)
        counted = ms
        pos = emit(f, m, ms, line) + 1
        if me > pos:
            matches = rx.finditer(ctx, pos, end)


def read_call(pattern: Any, where: Any, more: tuple[Any, ...], path_glob: str | None, ignore_case: bool,
              max_results: int | None, aliases: dict[str, Any], context: str) -> tuple[Any, Any, str | None, bool, int | None]:
    """Read a grep call however it was written (``context``: the corpus, which may come first):
    ``(pattern, where, path_glob, ignore_case, max_results)``, ``where`` the place to search
    (``None``: every file) for ``CorpusView`` to read.

    Raises:
        TypeError: the arguments cannot be read as a grep call (the message shows the call).
    """
    for key in ("glob", "file", "path", "files", "path_pattern", "pattern_glob"):
        if key in aliases and path_glob is None:
            path_glob = aliases.pop(key)
    for key in ("limit", "n", "max_hits", "max_matches", "k", "max_count"):
        if key in aliases:
            value = aliases.pop(key)
            max_results = None if value is None else int(value)
    if "flags" in aliases:
        ignore_case = ignore_case or bool(int(aliases.pop("flags")) & re.IGNORECASE)
    if "case_sensitive" in aliases:
        ignore_case = not aliases.pop("case_sensitive")
    for key in ("text", "string", "source", "content", "in_text"):
        if key in aliases and where is None:
            where = aliases.pop(key)
    if "regex" in aliases and pattern is None:
        pattern = aliases.pop("regex")
    if aliases:
        raise TypeError(f"grep() got unexpected keyword argument(s) {sorted(aliases)}. {GREP_USAGE}")
    for extra in more:  # grep(p, where, True) / grep(p, where, 50)
        if isinstance(extra, bool):
            ignore_case = extra
        elif isinstance(extra, int):
            max_results = extra
        else:
            raise TypeError(f"grep() takes at most 2 positional arguments plus flags. {GREP_USAGE}")
    if isinstance(where, (str, re.Pattern)) and isinstance(pattern, str) and (
            pattern is context or len(pattern) > 1000 >= len(str(where))):
        pattern, where = where, pattern  # grep(context, "def main")
    if not isinstance(pattern, (str, re.Pattern)):
        raise TypeError(f"grep() needs a regex pattern (a str) first, got {type(pattern).__name__}. {GREP_USAGE}")
    if isinstance(where, bool):
        return pattern, None, path_glob, where, max_results
    if isinstance(where, int):
        return pattern, None, path_glob, ignore_case, where
    return pattern, where, path_glob, ignore_case, max_results
