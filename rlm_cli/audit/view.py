"""What ``rlm audit`` shows on stderr while it runs: the session's events, a line per check as it
completes (its verdict), and the table of every check at the end."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rlm_cli.app.batch import Question
from rlm_cli.audit.checklist import Checklist
from rlm_cli.audit.run import CheckRun, audit_report, check_report, run_checklist
from rlm_cli.config import Settings
from rlm_cli.events import Emit, is_type
from rlm_cli.output.findings import AuditReport
from rlm_cli.output.reports.text import table_row, table_rows

if TYPE_CHECKING:
    from rlm_cli.models.backend import Backend
    from rlm_cli.output.ui import UI

COLUMNS = ["check", "severity", "status", "value", "why"]


def run_audit(settings: Settings, paths: list[str], checklist: Checklist, *, jobs: int, backend: Backend | None, ui: UI,
              fail_on: str) -> AuditReport:
    """Run ``checklist`` (:func:`~rlm_cli.audit.run.run_checklist`) showing its progress on
    ``ui`` (a ``render.Renderer``): a line per check as it completes, then the table of all
    checks and a closing line. Returns the typed report every report format reads.

    Raises:
        the errors of ``run_checklist``.
    """
    from rlm_cli.audit.findings import ReportPaths

    total, done, where = len(checklist.checks), [0], ReportPaths.of_run(paths)

    def on_check(run: CheckRun) -> None:
        done[0] += 1
        value = table_row(check_report(run, where))[3]
        line = f"[{done[0]}/{total}] {run.check.id} ({run.check.severity}): {run.verdict.status}"
        line += f" {value}" if value else ""
        (ui.warning if run.verdict.status in ("fail", "error", "unsupported") else ui.info)(
            f"{line}: {run.verdict.reason}" if run.verdict.status != "pass" else line)

    def emit_for(question: Question) -> Emit:
        def warnings_only(ev: dict[str, Any]) -> None:
            if is_type(ev, "notice") and ev.get("level") == "warning":
                ui.on_event({**ev, "message": f"[{question.id}] {ev.get('message', '')}"})
        return warnings_only

    started = time.monotonic()
    run = run_checklist(settings, paths, checklist, jobs=jobs, backend=backend, emit=ui.on_event, emit_for=emit_for,
                        on_check=on_check)
    ui.close()
    report = audit_report(checklist, run, fail_on=fail_on)
    t = report.totals
    ui.stderr_table(f"rlm audit: {report.checklist}", COLUMNS, table_rows(report))
    ui.summary({"iterations": sum(int(c.run.get("iterations") or 0) for c in report.checks), "usage": report.usage,
                "sub_calls": sum(int(c.run.get("sub_calls") or 0) for c in report.checks),
                "elapsed_s": round(time.monotonic() - started, 3)})
    ui.info(f"{t.checks} checks: {t.passed} pass, {t.failed} fail, {t.errors} error, {t.unsupported} "
            f"unsupported; corpus loaded {run.loads} time(s)" + (f"; {t.note}" if t.note else "")
            + (f"; exit code {report.exit_code}" if report.exit_code else ""))
    return report
