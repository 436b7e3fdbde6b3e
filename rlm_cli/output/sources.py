"""The evidence of a run: which files and lines it looked at, how, and which the answer cites.

Rows come from the REPL worker with every code block's result (``sandbox.observe``), at every
depth, as ``(how, path, start_line, end_line)``; ``how`` is ``read_file`` (a range it read),
``grep`` (a matching line it printed), ``leads`` (a line ``leads(question)`` showed before the
first turn or when the code called it), ``printed`` (a slice of ``context`` found in its output),
``sub_call`` or ``rlm_query`` (a slice of ``context`` found in a prompt or context sent to a
sub-call or a sub-RLM). In direct mode the root model read every file whole (``direct``).

:func:`build_sources` keeps the rows whose path is a corpus file, clamps their lines to the file,
merges overlapping or adjacent ranges of a file (``how`` becomes the union), marks the ranges the
answer cites, and keeps at most :data:`MAX_SOURCES` (cited ranges first, then those seen in more
ways, then the longest), listed in corpus order. A range is *cited* when the answer names its file
(its path, or its file name when no other corpus file has that name) with a line or line range
that overlaps it (``a.py:12``, ``a.py:10-20``, ``a.py#L10-L20``, ``a.py line 12``,
``a.py (lines 10-20)``), or names the file without any line number.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence

from rlm_cli.events import Emit, EventDict, is_type
from rlm_cli.shapes import SourceDoc

#: Most ranges listed in ``sources`` (the rest are counted in ``sources_omitted``).
MAX_SOURCES = 100
#: Order in which the ways of looking are listed.
HOW_ORDER = ("read_file", "grep", "leads", "printed", "sub_call", "rlm_query", "direct")
#: Most ranges listed by ``--cite``.
MAX_CITE_LINES = 10



class SourceCollector:
    """An ``emit`` wrapper that keeps the ``sources`` rows of every ``output`` and ``leads``
    event and forwards every event unchanged."""

    def __init__(self, forward: Emit) -> None:
        self.forward = forward
        self.rows: list[tuple[str, str, int, int]] = []

    def __call__(self, ev: EventDict) -> None:
        if is_type(ev, "output") or is_type(ev, "leads"):
            for row in ev.get("sources") or []:
                if isinstance(row, (list, tuple)) and len(row) == 4:
                    self.rows.append((str(row[0]), str(row[1]), int(row[2]), int(row[3])))
        self.forward(ev)


def _citations(answer: str, path: str, names: list[str]) -> list[tuple[int, int] | None]:
    """Where ``answer`` names ``path`` (as any of ``names``): one ``(first, last)`` line range per
    mention with line numbers, ``None`` for a mention without."""
    out: list[tuple[int, int] | None] = []
    for name in names:
        rx = re.compile(r"(?:(?<=\./)|(?<![\w/.\-]))" + re.escape(name) + r"(?![\w\-]|\.\w)"
                        r"(?:(?::|#L|,?\s*\(?\s*lines?\s+|\s+L)(\d+)(?:\s*(?:-|–|to)\s*L?(\d+))?)?")
        for m in rx.finditer(answer):
            if m.group(1) is None:
                out.append(None)
            else:
                a = int(m.group(1))
                b = int(m.group(2)) if m.group(2) else a
                out.append((min(a, b), max(a, b)))
    return out


def merge_rows(rows: Iterable[tuple[str, str, int, int]], lines: dict[str, int]) -> dict[str, list[tuple[int, int, set[str]]]]:
    """``{path: [(start, end, {how}), ...]}`` with overlapping or adjacent ranges merged, rows of
    paths not in ``lines`` (``{path: line count}``) dropped and line numbers clamped to the file."""
    by_path: dict[str, list[tuple[int, int, str]]] = {}
    for how, path, a, b in rows:
        n = lines.get(path)
        if n is None or n < 1:
            continue
        a, b = max(1, min(a, n)), max(1, min(b, n))
        by_path.setdefault(path, []).append((min(a, b), max(a, b), how))
    merged: dict[str, list[tuple[int, int, set[str]]]] = {}
    for path, ranges in by_path.items():
        out: list[tuple[int, int, set[str]]] = []
        for a, b, how in sorted(ranges):
            if out and a <= out[-1][1] + 1:
                start, end, hows = out[-1]
                hows.add(how)
                out[-1] = (start, max(end, b), hows)
            else:
                out.append((a, b, {how}))
        merged[path] = out
    return merged


def build_sources(rows: Iterable[tuple[str, str, int, int]], answer: str, files: list[tuple[str, int]], *,
                  limit: int = MAX_SOURCES) -> tuple[list[SourceDoc], int]:
    """``(sources, omitted)`` for the ``--json`` document (see the module docstring).

    ``files`` lists the corpus as ``(path, line count)`` in corpus order. Each source is
    ``{"path", "start_line", "end_line", "how": [...], "cited": bool}`` (1-based, inclusive).
    """
    lines = dict(files)
    order = {p: i for i, (p, _) in enumerate(files)}
    merged = merge_rows(rows, lines)
    base_count: dict[str, int] = {}
    for p, _ in files:
        base = os.path.basename(p)
        base_count[base] = base_count.get(base, 0) + 1
    items: list[SourceDoc] = []
    for path, ranges in merged.items():
        names = [path]
        base = os.path.basename(path)
        if base != path and base_count.get(base) == 1:
            names.append(base)
        mentions = _citations(answer, path, names) if answer else []
        for a, b, hows in ranges:
            cited = any(m is None or (m[0] <= b and a <= m[1]) for m in mentions)
            items.append({"path": path, "start_line": a, "end_line": b,
                          "how": [h for h in HOW_ORDER if h in hows] + sorted(hows - set(HOW_ORDER)),
                          "cited": cited})
    omitted = max(0, len(items) - limit)
    if omitted:
        ranked = sorted(items, key=lambda s: (not s["cited"], -len(s["how"]), "read_file" not in s["how"],
                                              -(s["end_line"] - s["start_line"])))
        keep = {id(s) for s in ranked[:limit]}
        items = [s for s in items if id(s) in keep]
    items.sort(key=lambda s: (order.get(s["path"], len(order)), s["start_line"]))
    return items, omitted


def direct_rows(files: list[tuple[str, int]]) -> list[tuple[str, str, int, int]]:
    """Direct mode: the root model read every file whole."""
    return [("direct", path, 1, n) for path, n in files if n > 0]


def cite_lines(sources: Sequence[SourceDoc], *, limit: int = MAX_CITE_LINES) -> list[str]:
    """The ``--cite`` list: ``path:start-end`` of the ranges the answer rests on (``cited``), in
    the order of ``sources`` (the ``--json`` order: the corpus's); at most ``limit`` and a count of
    the rest. Empty when the answer cites none: lines the run only looked at (leads, a grep) are
    not what it rests on, and ``--json`` lists those."""
    chosen = [s for s in sources if s["cited"]]
    out = [f"{s['path']}:{s['start_line']}" + (f"-{s['end_line']}" if s["end_line"] != s["start_line"] else "")
           for s in chosen[:limit]]
    if len(chosen) > limit:
        out.append(f"... and {len(chosen) - limit} more")
    return out
