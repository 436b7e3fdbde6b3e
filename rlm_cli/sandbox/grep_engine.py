"""The machinery behind ``CorpusView.grep``: a call read however it was written
(:func:`read_call`), one scan over neighbouring files instead of a search per file
(:func:`runs`, :func:`scan_run`, :func:`scans_across_files`) and the Python definition that
encloses a hit (:func:`definitions`, :func:`enclosing`). Runs inside the sandboxed worker: the
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


#: The fields of statements (``if``, ``try``, ``match``...) that hold statements, and of their ``except``/``case`` parts.
_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")


def definitions(text: str) -> list[tuple[int, int, str]]:
    """``(first body line, last line, qualified name)`` of every function and class of Python
    ``text`` by ``ast``, sorted by first line; ``[]`` when it does not parse."""
    import ast

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    out: list[tuple[int, int, str]] = []

    def visit(stmts: list[Any], prefix: str) -> None:  # statements only: no definition is inside an expression
        for child in stmts:
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qual = prefix + child.name
                out.append((child.body[0].lineno, child.end_lineno or child.body[0].lineno, qual))
                visit(child.body, qual + ".")
            else:
                for name in _BLOCKS:
                    block = getattr(child, name, None)
                    if isinstance(block, list):
                        visit(block, prefix)

    visit(tree.body, "")
    out.sort()
    return out


def enclosing(defs: list[tuple[int, int, str]], line: int) -> str | None:
    """The innermost of ``defs`` (:func:`definitions` of a file) whose body holds line ``line``, or
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
    """
    search = rx.search
    starts = [f["start"] for f in run]
    end = run[-1]["end"]
    k, pos = 0, run[0]["start"]
    f = run[0]
    line, counted = 1, f["start"]
    while pos < end and len(out) < max_results:
        m = search(ctx, pos, end)
        if m is None:
            return
        ms = m.start()
        if ms >= f["end"]:  # past this file: into the one that holds the match, if any
            k = bisect.bisect_right(starts, ms, k) - 1
            f = run[k]
            line, counted = 1, f["start"]
            if ms >= f["end"]:  # on the header line of the next file: no match starts there
                if k + 1 >= len(run):
                    return
                k += 1
                f = run[k]
                pos, line, counted = f["start"], 1, f["start"]
                continue
        if m.end() > f["end"]:  # runs into the next file: what the file alone holds from here
            m = search(ctx, ms, f["end"])
            if m is None:
                if k + 1 >= len(run):
                    return
                k += 1
                f = run[k]
                pos, line, counted = f["start"], 1, f["start"]
                continue
            ms = m.start()
        line += ctx.count("\n", counted, ms)
        counted = ms
        pos = emit(f, m, ms, line) + 1


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
