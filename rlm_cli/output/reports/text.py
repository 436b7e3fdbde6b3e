"""What the audit reports share: a check's account in words, the value as text, JSON that every
consumer parses (RFC 8259: no ``NaN``/``Infinity``, lone surrogates escaped), and the rows of the
table ``rlm audit`` shows on stderr."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from rlm_cli.output.findings import AuditReport, CheckReport
from rlm_cli.output.workflow_guard import json_for_runner

#: Characters of an answer a report quotes.
ANSWER_CHARS = 2_000
#: Sources a check's account lists at most.
MAX_SOURCES_SHOWN = 20
_SURROGATE = re.compile("[\ud800-\udfff]")


def value_text(value: object) -> str:
    """A typed value as one line of JSON (at most :data:`ANSWER_CHARS` characters)."""
    return json.dumps(finite(value), ensure_ascii=False)[:ANSWER_CHARS]


def shown_value(c: CheckReport) -> object:
    """What a report shows as a check's value: the typed value, or a text check's answer."""
    return c.value if c.type.typed else c.answer


def _source_text(s: dict[str, Any]) -> str:
    a, b = s["start_line"], s["end_line"]
    return f"{s['path']}:{a}" + (f"-{b}" if b != a else "") + (" (cited)" if s.get("cited") else "")


def check_details(c: CheckReport) -> str:
    """The plain-text account of one check: question, status and why, answer, value,
    expectation, locations, sources and trajectory (JUnit's failure text)."""
    lines = [f"Question: {c.question}", f"Status: {c.status} ({c.severity}): {c.reason}"]
    if c.expectation:
        lines.append(f"Expectation: {c.expectation}")
    if c.answer is not None:
        lines.append("Answer: " + c.answer[:ANSWER_CHARS])
    if c.type.typed and c.value is not None:
        lines.append(f"Value ({c.type}): {value_text(c.value)}")
    if c.locations:
        lines.append("Locations: " + ", ".join(loc.text for loc in c.locations))
    if c.sources:
        lines.append("Sources: " + ", ".join(_source_text(s) for s in c.sources[:MAX_SOURCES_SHOWN]))
    if c.trace:
        lines.append(f"Trajectory: {c.trace}")
    return "\n".join(lines) + "\n"


def finite(value: object) -> object:
    """``value`` with every float that is not finite (which JSON cannot hold) as its name
    (``"NaN"``, ``"Infinity"``, ``"-Infinity"``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def strict_json(doc: object, indent: int | None = 2) -> str:
    """``doc`` as RFC 8259 JSON, UTF-8 characters kept, newline-terminated: floats that are not
    finite written as strings (:func:`finite`), and a lone surrogate (from a corpus file or an
    answer: it has no UTF-8 form) written as its ``\\uXXXX`` escape; under GitHub Actions ``##[``
    as ``#\\u0023[`` (``workflow_guard.json_for_runner``: the same value)."""
    text = json.dumps(finite(doc), ensure_ascii=False, indent=indent, allow_nan=False, default=str)
    return json_for_runner(_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n")


def table_row(c: CheckReport) -> list[str]:
    """A row of the stderr table: check, severity, status, value (short), why."""
    value = shown_value(c)
    return [c.id, c.severity, c.shown_status, "" if value is None else value_text(value)[:40],
            " ".join(c.reason.split())[:80]]


def table_rows(report: AuditReport) -> list[list[str]]:
    """Rows of the stderr table, one per check (:func:`table_row`)."""
    return [table_row(c) for c in report.checks]


def findings_line(report: AuditReport) -> str:
    """The findings in words, for the stderr summary and the job summary: ``4 findings, 1
    failing (1 new, 3 unchanged, 2 absent against the baseline; 0 suppressed)``; ``""`` when
    there are none, no baseline and nothing suppressed."""
    n = report.finding_counts
    if not n["findings"] and report.baseline is None:
        return ""
    text = f"{n['findings']} finding{'' if n['findings'] == 1 else 's'}, {n['failing']} failing"
    parts = []
    if report.baseline is not None:
        parts.append(f"{n['new']} new, {n['unchanged']} unchanged, {n['absent']} absent against the baseline")
    parts.append(f"{n['suppressed']} suppressed")
    return f"{text} ({'; '.join(parts)})"
