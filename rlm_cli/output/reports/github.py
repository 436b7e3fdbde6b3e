"""GitHub Actions (``rlm audit --github``): workflow commands on stdout, one annotation per
finding that fails (``::error file=PATH,line=N,endLine=M,title=rlm audit: ID::MESSAGE``;
``::warning`` and ``::notice`` for the other severities) and one per check that could not be
decided, at its line of the checklist (``::error`` when that fails the job, else the command of
its severity, so that annotations and the exit code agree) (:func:`github_commands`); and the job
summary table (:func:`summary_markdown`). Data and properties are escaped as ``@actions/core``
escapes them; every cell of the summary is plain text (``workflow_guard.summary_text``: no HTML,
link or table border from an answer)."""

from __future__ import annotations

import re

from rlm_cli.output.findings import AuditReport, checklist_region
from rlm_cli.output.reports.text import findings_line, shown_value, value_text
from rlm_cli.output.workflow_guard import summary_text

_SURROGATE = re.compile("[\ud800-\udfff]")
#: The workflow command of each severity.
COMMANDS = {"error": "error", "warning": "warning", "note": "notice"}


def _escape_data(text: str) -> str:
    text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)  # no UTF-8 form: shown as its escape
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _command(command: str, path: str, start: int, end: int, check: str, message: str) -> str:
    props = (f"file={_escape_property(path)},line={start},endLine={end},"
             f"title={_escape_property('rlm audit: ' + check)}")
    return f"::{command} {props}::{_escape_data(message)}\n"


def github_commands(report: AuditReport) -> str:
    """The workflow commands of an audit (see the module docstring)."""
    out = []
    for c in report.checks:
        if c.status == "error":
            at = checklist_region(c.line)
            command = "error" if c.fails_job else COMMANDS[c.severity]
            out.append(_command(command, report.checklist, at.start_line, at.end_line, c.id, f"{c.status}: {c.reason}"))
            continue
        for f in c.findings:
            if not f.failing:
                continue
            more = len(f.related)
            message = f"{f.status}: {f.message}" + (f" (and {more} more location{'s' if more > 1 else ''})"
                                                    if more else "")
            out.append(_command(COMMANDS[f.level], f.path, f.region.start_line, f.region.end_line, c.id, message))
    return "".join(out)


def _cell(text: str) -> str:
    text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", str(text))  # no UTF-8 form: its escape, as text
    return summary_text(text)  # answers, reasons, file names: plain text in the table (issue 47)


def summary_markdown(report: AuditReport) -> str:
    """The job summary: a heading with the result, a Markdown table of the checks, the totals."""
    t = report.totals
    head = (f"### rlm audit: {report.status} ({t.passed} pass, {t.failed} fail, {t.errors} error, "
            f"{t.unsupported} unsupported; exit {report.exit_code})\n\n")
    found = findings_line(report)
    if found:
        head += f"{found}\n\n"
    rows = ["| check | severity | status | answer | why | where |", "| --- | --- | --- | --- | --- | --- |"]
    for c in report.checks:
        where = ", ".join(loc.text for loc in c.locations[:3])
        value = shown_value(c)
        rows.append(f"| `{c.id}` | {c.severity} | {c.shown_status} | {_cell(value_text(value) if value is not None else '')} "
                    f"| {_cell(c.reason)} | {_cell(where)} |")
    cost = t.cost_usd
    tail = f"\n\n{t.calls} model calls ({t.cached_calls} from the cache), cost " + (
        "unknown" if cost is None else f"${cost:.4f}") + (f"; {t.note}" if t.note else "") + "\n"
    return head + "\n".join(rows) + tail
