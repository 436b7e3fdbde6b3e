"""Where answers and documents go: stdout, or ``--output`` FILE atomically (``ask``, ``replay``,
``audit``), each as its :class:`~rlm_cli.output.formats.Format` through one delivery path
(``formats.deliver``).

Where an answer or a document goes is a :class:`~rlm_cli.output.formats.Report` (its format and
its file) that the command makes once, from ``--json`` and ``--output``, and hands to each delivery.
The command also leaves the file in ``INVOCATION.output_path``, read only by the error handling
(``commands.exits``: an error's ``--json`` document goes to the same file), which no parameter
reaches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from rlm_cli.commands.invocation import INVOCATION
from rlm_cli.errors import PartialAnswerError
from rlm_cli.output.answer import json_text
from rlm_cli.output.formats import Format, Report, deliver, render_answer

if TYPE_CHECKING:
    from pathlib import Path

    from rlm_cli.app.batch import Result
    from rlm_cli.config import Settings
    from rlm_cli.output.estimates import EstimateDocument
    from rlm_cli.output.findings import AuditReport
    from rlm_cli.output.ui import UI


def answer_format(json_out: bool) -> Format:
    """The format ``--json`` asks for: JSON, else the plain answer."""
    return Format.JSON if json_out else Format.TEXT


def answer_report(json_out: bool, output: Path | None) -> Report:
    """Where ``ask``'s answer goes: its format (``--json``) and ``--output``'s file, checked now
    (``None``: stdout); the file is also left for the error handling (``INVOCATION.output_path``).

    Raises:
        UsageError: ``output`` cannot be written (``outfile.check_writable``).
    """
    from rlm_cli.output.outfile import check_writable

    path = None if output is None else check_writable(output)
    INVOCATION.output_path = path
    return Report(answer_format(json_out), path)


def estimate_report(reports: list[Report]) -> Report:
    """Where ``audit --estimate`` writes: the ``--json`` report of ``reports`` (to its file or
    stdout), else text on stdout."""
    return next((r for r in reports if r.format is Format.JSON), Report(Format.TEXT))


def batch_writer(out: Report, cite: bool, ui: UI, total: int) -> tuple[Callable[[dict[str, Any], Result], None],
                                                                   Callable[[], None]]:
    """``(write(doc, result), finish())``: each question's document (a JSON line) or answer under
    a header goes to stdout as it completes, or, with ``out.path`` (``--output``), into FILE at the end."""
    from rlm_cli.app.batch import header

    fmt, path = out.format, out.path
    kept: list[str] = []
    count = [0]

    def write(doc: dict[str, Any], result: Result) -> None:
        count[0] += 1
        if result.error is not None and not isinstance(result.error, PartialAnswerError):
            ui.error(f"question [{result.question.id}]: {result.error}")
        else:
            ui.summary(doc)
            if result.error is not None:
                ui.warning(f"question [{result.question.id}]: {result.error.message}; the answer is PARTIAL")
        if fmt is Format.JSON:
            text = json_text(doc, line=True)
        else:
            why = doc.get("error") or (result.error.message if result.error is not None else "")
            body = render_answer(doc, fmt, cite) if doc.get("answer") else f"(no answer: {why})\n"
            text = ("\n" if count[0] > 1 else "") + header(result.question) + "\n" + body
        if path is None:
            deliver(text, None)
        else:
            kept.append(text)

    def finish() -> None:
        if path is not None:
            deliver("".join(kept), path)
            ui.info(f"wrote {path}")
    return write, finish



def deliver_answer(doc: Mapping[str, Any], out: Report, cite: bool, ui: UI) -> None:
    """The document (``--json``) or the answer (with its sources under ``--cite``) to stdout, or
    to ``out.path`` (``--output``) atomically."""
    deliver_report(render_answer(doc, out.format, cite), out, ui)


def deliver_report(text: str, report: Report, ui: UI) -> None:
    """``text`` (``report`` rendered) to its file atomically, said on stderr, or to stdout."""
    deliver(text, report.path)
    if report.path is not None:
        ui.info(f"wrote {report.path}")


def emit_partial(exc: PartialAnswerError, ui: UI, out: Report, settings: Settings, elapsed: float, *,
                 cite: bool = False) -> None:
    """A run stopped early: its summary on stderr, and its document (``--json``) or its partial
    answer (when it has one) delivered like a final one."""
    from rlm_cli.output.documents import partial_document

    doc = partial_document(exc, settings.sandbox, elapsed)
    ui.summary(doc)
    if out.format is Format.JSON or exc.partial:
        deliver_answer(doc, out, cite and out.format is Format.TEXT, ui)



def audit_reports(*, junit: Path | None, sarif: Path | None, github: bool, json_out: bool, output: Path | None,
                  codequality: Path | None = None) -> list[Report]:
    """The reports ``rlm audit`` was asked for, their files checked before the run: ``--junit``,
    ``--sarif``, ``--codequality``, ``--json`` (to ``--output`` FILE or stdout) and ``--github``'s
    workflow commands (stdout).

    Raises:
        UsageError: a file that cannot be written, ``--output`` without ``--json``, or two
            reports for stdout (``--github`` with ``--json`` and no ``--output``).
    """
    from rlm_cli.errors import UsageError
    from rlm_cli.output.outfile import check_writable

    if output is not None and not json_out:
        raise UsageError("--output is where the --json document goes: add --json",
                         hint="reports take --junit FILE, --sarif FILE and --codequality FILE")
    if github and json_out and output is None:
        raise UsageError("--github writes workflow commands to stdout, and so does --json",
                         hint="send the JSON document to a file: --json --output audit.json")
    files = ((Format.JUNIT, junit, "--junit"), (Format.SARIF, sarif, "--sarif"),
             (Format.CODEQUALITY, codequality, "--codequality"))
    reports = [Report(f, check_writable(p, flag)) for f, p, flag in files if p is not None]
    if json_out:
        path = None if output is None else check_writable(output)
        INVOCATION.output_path = path  # an error's --json document goes there too (commands.exits)
        reports.append(Report(Format.JSON, path))
    if github:
        reports.append(Report(Format.GITHUB))
    return reports


def deliver_audit(report: AuditReport, reports: list[Report], ui: UI) -> None:
    """Write each report of an audit (each rendered from the typed ``report`` by its module of
    ``rlm_cli.output.reports``), and with ``--github`` the job summary when
    ``GITHUB_STEP_SUMMARY`` names a file."""
    import os
    from pathlib import Path

    from rlm_cli import __version__
    from rlm_cli.audit.run import audit_document
    from rlm_cli.output.formats import append
    from rlm_cli.output.reports import codequality, github, junit, sarif
    from rlm_cli.output.reports.text import strict_json
    from rlm_cli.output.workflow_guard import own_commands

    render: dict[Format, Callable[[AuditReport], str]] = {
        Format.JUNIT: junit.junit_text, Format.JSON: lambda r: strict_json(audit_document(r)),
        Format.SARIF: lambda r: sarif.sarif_text(r, __version__), Format.GITHUB: github.github_commands,
        Format.CODEQUALITY: codequality.codequality_text}
    for out in reports:
        with own_commands() if out.format is Format.GITHUB else contextlib.nullcontext():  # --github's own ::
            deliver_report(render[out.format](report), out, ui)
        if out.format is Format.GITHUB and os.environ.get("GITHUB_STEP_SUMMARY"):
            append(github.summary_markdown(report), Path(os.environ["GITHUB_STEP_SUMMARY"]))


def deliver_estimate(doc: EstimateDocument, out: Report, ui: UI) -> None:
    """An ``estimate.v1`` document (``--estimate``): its text, or the document (``--json``), to
    stdout or ``out.path`` (``--output``)."""
    from rlm_cli.output.answer import json_text
    from rlm_cli.output.estimates import estimate_text

    deliver_report(json_text(doc) if out.format is Format.JSON else estimate_text(doc), out, ui)
