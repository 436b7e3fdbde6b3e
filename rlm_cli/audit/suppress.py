"""Inline suppressions: a comment ``rlm-audit: ignore[CHECK-ID] reason`` accepts a finding of
that check on its line (issue 48).

Where it counts: on the finding's first line, or on the line above it when that line holds the
comment alone (nothing but white space and punctuation before the marker: ``#``, ``//``, ``--``,
``/*``, ``<!--``, ``;``, ``%``, ``*``, ``{#``...), so a trailing comment of one statement never
accepts a finding on the next. The marker is found as text anywhere in the line, whatever the
language's comment syntax (as semgrep's ``nosemgrep``); ``ignore[a, b]`` names several checks.
The reason is the rest of the line, without a closing ``*/``, ``-->``, ``*)``, ``#}``, ``%}`` or
``}}``.

A bare ``rlm-audit: ignore`` (no ``[CHECK-ID]``) accepts nothing, unlike ``nosemgrep``: a
suppression names what it accepts, so a check added later is never silenced unseen on that
line; :func:`bare_marker` finds one so that the run can say it does nothing.

Pure functions over a file's lines (``lines[0]`` is line 1); a suppressed finding
(``Finding.suppression``: ``inSource`` and the reason) is SARIF's ``suppressions: [{"kind":
"inSource", "justification": reason}]`` and never fails the run.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Sequence

from rlm_cli.audit.findings import LinesOf, ReportPaths, checklist_lines
from rlm_cli.output.findings import Finding, Suppression

#: The marker: ``rlm-audit: ignore``, then ``[IDS]`` (optional here: a bare one is reported),
#: then the reason.
MARKER = re.compile(r"rlm-audit:[ \t]*ignore\b(?:\[(?P<ids>[^\]\r\n]*)\])?(?P<rest>[^\r\n]*)", re.IGNORECASE)
#: What may stand before the marker on a line above the finding for it to count: a comment alone.
_ALONE = re.compile(r"[^\w\s]*[ \t]*\Z")
#: Closers of block comments and template tags, cut from the end of a reason.
_CLOSERS = ("*/", "-->", "*)", "#}", "%}", "}}", "-}")


def _reason(rest: str) -> str:
    text = rest.strip()
    changed = True
    while changed:
        changed = False
        for closer in _CLOSERS:
            if text.endswith(closer):
                text, changed = text[: -len(closer)].rstrip(), True
    return text.lstrip(":-–— \t").strip()


def _ids(raw: str) -> set[str]:
    return {part.strip() for part in raw.split(",") if part.strip()}


def _markers(line: str, *, alone: bool) -> list[re.Match[str]]:
    found = []
    for m in MARKER.finditer(line):
        if alone and not _ALONE.match(line[:m.start()].lstrip()):
            continue
        found.append(m)
    return found


def _candidates(lines: Sequence[str], line: int) -> list[tuple[int, bool]]:
    """``(line number, must be alone)`` of the lines a finding at ``line`` reads, in order."""
    out = []
    if 1 <= line <= len(lines):
        out.append((line, False))
    if 2 <= line <= len(lines) + 1:
        out.append((line - 1, True))
    return out


def suppression_for(lines: Sequence[str], line: int, check_id: str) -> Suppression | None:
    """The suppression (``inSource``, with the comment's reason: ``""`` when none) of a finding
    of ``check_id`` whose first line is ``line`` (1-based) in a file of ``lines`` (its text's
    ``splitlines()``), or ``None``. A line out of range has none."""
    for number, alone in _candidates(lines, line):
        for m in _markers(lines[number - 1], alone=alone):
            if m.group("ids") is not None and check_id in _ids(m.group("ids")):
                return Suppression("inSource", _reason(m.group("rest")))
    return None


def bare_marker(lines: Sequence[str], line: int) -> int | None:
    """The 1-based line of a bare ``rlm-audit: ignore`` (no ``[CHECK-ID]``: it accepts nothing)
    where a finding at ``line`` would read one, or ``None``."""
    for number, alone in _candidates(lines, line):
        if any(m.group("ids") is None for m in _markers(lines[number - 1], alone=alone)):
            return number
    return None


#: ``lines(report_path)``: the lines of a file named as findings name it (from the repository root).
ReportLines = Callable[[str], "Sequence[str] | None"]


def apply(findings: Iterable[Finding], lines: ReportLines) -> tuple[list[Finding], list[str]]:
    """``(findings, bare)``: each finding with its :attr:`~Finding.suppression` when a comment
    accepts it (:func:`suppression_for` on the lines ``lines(finding.path)`` gives; a file it
    cannot read has none), and ``path:line`` of each bare marker next to a finding that
    accepts nothing (:func:`bare_marker`), for a warning."""
    out, bare = [], []
    for f in findings:
        text = lines(f.path)
        if text is None:
            out.append(f)
            continue
        found = suppression_for(text, f.region.start_line, f.check)
        out.append(f if found is None else dataclasses.replace(f, suppression=found))
        at = bare_marker(text, f.region.start_line) if found is None else None
        if at is not None and f"{f.path}:{at}" not in bare:
            bare.append(f"{f.path}:{at}")
    return out, bare


def report_lines(corpus_paths: Iterable[str], paths: ReportPaths, lines_of: LinesOf,
                 checklist: str) -> ReportLines:
    """A reader of a file's lines by its report path: a corpus file's as the run saw them
    (``lines_of``, by corpus path), the checklist's (``checklist``: its absolute path) from
    disk; ``None`` for any other path."""
    by_report = {paths.report_path(p): p for p in corpus_paths}
    listed = paths.from_root(checklist)

    def lines(path: str) -> Sequence[str] | None:
        if path in by_report:
            return lines_of(by_report[path])
        return checklist_lines(checklist) if path == listed else None
    return lines
