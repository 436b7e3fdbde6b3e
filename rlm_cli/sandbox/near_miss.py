r"""Why a ``grep`` found nothing: the note the worker adds to a block whose grep matched no line.

A grep that matches nothing returns ``[]``, and a model (small ones above all) reads that as "the
corpus has none": ``grep(r"HTTP/1.1 500")`` over an access log whose lines read
``"GET / HTTP/1.1" 500 235`` (a quote between) made a 1.5B model answer "no request failed with a
500" where 51 did. What the model needs is what a person at a shell does next: a looser search.
So the worker looks for the lines that hold every literal part of the pattern (its runs of
letters and digits, in any case, with anything between) and shows up to three of them (not how
many: that count is not the figure asked, and small models take numbers shown for answers); or
says that no line holds them either, which is real evidence of absence. A ``path_glob`` that
matches no file is said too (nothing was searched). When there are such lines, the note also says
where the pattern stops fitting the first of them (:func:`where_it_stops`: the longest start of the
pattern that matches the line, and the characters that follow it there), which is the edit a
person makes after reading the line: ``r"HTTP/1.1\s+500"`` fits ``HTTP/1.1`` and then meets ``" 500``.

The scan is bounded (:data:`BUDGET_S` per block), reads only ``context`` and runs inside the
sandboxed worker: the standard library only.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

#: Seconds one block's near-miss scans may take in all (a literal, case-insensitive scan reads
#: the 31 MB standard library in about 0.1 s).
BUDGET_S = 1.0
#: Lines shown as examples.
EXAMPLES = 3
#: Characters of an example line shown.
LINE_CHARS = 160
#: Literal parts used (the longest ones): more make a stricter, slower test.
MAX_PARTS = 4
#: Empty greps of one block that get a note (a loop over names can make hundreds).
NOTES_PER_BLOCK = 2
#: Characters of the line shown after the part of the pattern that fits it.
FOLLOW_CHARS = 12
#: Longest pattern whose stopping point is looked for (one compilation per character).
MAX_STOP_PATTERN = 300

#: Regex syntax that holds letters but no literal text: group names and flags, escapes such as
#: ``\d`` or ``\s``, character classes and counted repeats.
_SYNTAX = re.compile(r"\(\?P?<[^>]*>|\(\?[:=!<>aiLmsux-]*|\\[A-Za-z]|\[(?:\\.|[^\]\\])*\]|\{\d*,?\d*\}")
_PART = re.compile(r"[^\W_]\w+|\d+")


def literal_parts(pattern: str) -> list[str]:
    """The literal words and numbers of a regex ``pattern``, longest first, at most
    :data:`MAX_PARTS` (``r"HTTP/1.1\\s+500"`` -> ``["HTTP", "500"]``); ``[]`` for a pattern with
    alternatives (``a|b``: its parts need not appear together) or none of two characters or more."""
    if "|" in pattern.replace("\\|", ""):
        return []
    parts: list[str] = []
    for p in _words(pattern):
        if p.lower() not in (q.lower() for q in parts):
            parts.append(p)
    return sorted(parts, key=len, reverse=True)[:MAX_PARTS]


def _words(pattern: str) -> list[str]:
    """The literal words and numbers of two characters or more in ``pattern``, in order."""
    return [p for p in _PART.findall(_SYNTAX.sub(" ", pattern)) if len(p) >= 2]


def where_it_stops(pattern: str, line: str, flags: int = 0) -> tuple[str, str, str] | None:
    r"""Where regex ``pattern`` (compiled with ``flags``) stops fitting ``line``, a line it does not
    match: ``(head, follows, rest)``, where ``head`` is the longest start of the pattern's source
    that compiles and matches somewhere in the line, ``follows`` the :data:`FOLLOW_CHARS` characters
    of the line after that match (``""`` at the line's end) and ``rest`` the pattern after ``head``;
    ``None`` when no start holding a literal word of two characters or more matches (a lone ``s``
    or ``^`` fits every line and says nothing), or the pattern is over :data:`MAX_STOP_PATTERN`.

    ``r"HTTP/1.1\s+500"`` on ``... "GET / HTTP/1.1" 500 235`` gives ``("HTTP/1.1", '" 500 235', r"\s+500")``.
    Starts that are not a regex by themselves (an open group, a lone backslash) are skipped; a
    pattern of n characters costs at most n compilations (patterns are short).
    """
    if len(pattern) > MAX_STOP_PATTERN:
        return None
    for i in range(len(pattern) - 1, 1, -1):
        head = pattern[:i]
        if not _words(head):
            return None  # shorter starts hold no more words
        try:
            m = re.compile(head, flags).search(line)
        except (re.error, RecursionError, OverflowError):
            continue
        if m is not None:
            return head, line[m.end():m.end() + FOLLOW_CHARS], pattern[i:]
    return None


def explain_empty(context: str, files: list[dict[str, Any]], pattern: str, keep: Callable[[str], bool] | None,
                  path_glob: str | None, deadline: float, flags: int = 0) -> str:
    """The note for a grep of ``pattern`` (regex ``flags``) that matched nothing in ``files`` (dicts
    with ``path``, ``start``, ``end`` into ``context``) filtered by ``keep`` (from ``path_glob``): one
    ``[note: ...]`` line, then up to :data:`EXAMPLES` corpus lines ``  path:line: text``. Scans
    until ``deadline`` (``time.monotonic()`` seconds) at most; a scan cut there that found no line
    says so. With example lines, the note says where the pattern stops fitting the first
    (:func:`where_it_stops`)."""
    shown = repr(pattern if len(pattern) <= 80 else pattern[:77] + "...")
    if keep is not None:
        files = [f for f in files if keep(f["path"])]
        if not files:
            return (f"[note: grep({shown}) searched nothing: no corpus file matches path_glob {path_glob!r}. "
                    "Pass a file name, a glob such as '*.log', or no path_glob (see `files`).]\n")
    parts = literal_parts(pattern)
    if not parts:
        return f"[note: grep({shown}) matched no line.]\n"
    examples, cut = _lines_with_all(context, files, parts, deadline)
    words = ", ".join(repr(p) for p in parts)
    if not examples:
        more = "" if not cut else " (the scan stopped early: the corpus is large)"
        return f"[note: grep({shown}) matched no line, and no line holds all of {words} in any case either{more}.]\n"
    # No count of those lines: they are not the lines asked for (a 500 in a byte count is not a
    # status), and small models take any number shown for the answer.
    lines = "".join(f"  {path}:{line}: {text}\n" for path, line, text in examples)
    stop = where_it_stops(pattern, examples[0][2], flags)
    where = ""
    if stop is not None:
        head, follows, rest = stop
        after = f"the line goes on with {follows!r}" if follows else "the line ends"
        where = f" In the first, {head!r} fits, then {after}, where the pattern wants {rest!r}."
    return (f"[note: grep({shown}) matched no line, but some lines hold {words} (any case, anything between), "
            f"such as these: fit the pattern to them and run it again before you answer.{where}]\n{lines}")


def _lines_with_all(context: str, files: list[dict[str, Any]], parts: list[str],
                    deadline: float) -> tuple[list[tuple[str, int, str]], bool]:
    """``(examples, cut)``: the first :data:`EXAMPLES` lines of ``files`` that hold every one of
    ``parts`` (any case) as ``(path, line, text)``, and whether the deadline cut the scan first.
    The longest part is found with one case-insensitive literal scan per file; the others are
    tested on each line it finds. Stops at the examples: how many more there are is never shown."""
    anchor = re.compile(re.escape(parts[0]), re.IGNORECASE)
    others = [p.lower() for p in parts[1:]]
    get = str.__getitem__
    examples: list[tuple[str, int, str]] = []
    seen = 0
    for f in files:
        fs, fe = f["start"], f["end"]
        pos = fs
        while pos < fe:
            m = anchor.search(context, pos, fe)
            if m is None:
                break
            ls = context.rfind("\n", fs, m.start()) + 1 or fs
            le = context.find("\n", m.end(), fe)
            le = fe if le < 0 else le
            line = get(context, slice(ls, le))
            if all(o in line.lower() for o in others):
                text = line.rstrip("\r")
                text = text if len(text) <= LINE_CHARS else text[:LINE_CHARS - 3] + "..."
                examples.append((f["path"], context.count("\n", fs, ls) + 1, text))
                if len(examples) == EXAMPLES:
                    return examples, False
            pos = le + 1
            seen += 1
            if seen % 512 == 0 and time.monotonic() > deadline:
                return examples, True
        if time.monotonic() > deadline:
            return examples, f is not files[-1]
    return examples, False
