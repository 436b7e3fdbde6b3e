"""What ``rlm audit`` shows on stderr while it runs: the session's events, a line per check as it
completes (its verdict), a progress line every :data:`PROGRESS_EVERY_S` when stderr is not a
terminal (a CI log), and the table of every check at the end; and ``$GITHUB_OUTPUT``."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rlm_cli import interrupts
from rlm_cli.app.batch import Question
from rlm_cli.audit.baseline import Baseline
from rlm_cli.audit.changed import Scope
from rlm_cli.audit.changed import changed_since as changed_files
from rlm_cli.audit.changed import staged as staged_files
from rlm_cli.audit.checklist import Checklist
from rlm_cli.audit.findings import ReportPaths
from rlm_cli.audit.run import AuditRun, CheckRun, audit_report, check_report, run_checklist
from rlm_cli.config import Settings
from rlm_cli.events import Emit, EventDict, is_type
from rlm_cli.output.findings import AuditReport
from rlm_cli.output.reports.text import findings_line, shown_value, table_rows, value_text

if TYPE_CHECKING:
    from rlm_cli.models.backend import Backend
    from rlm_cli.output.ui import UI

COLUMNS = ["check", "severity", "status", "value", "why"]

#: Seconds between two progress lines when stderr is not a terminal (issue 48: a CI log said
#: nothing for 7 minutes through 3 retries). ``RLM_PROGRESS_EVERY`` (seconds) sets another.
PROGRESS_EVERY_S = 30.0
#: Characters of a value on a check's line (cut at a whole item, with ``...``).
VALUE_CHARS = 120
#: What a retry's notice says (``models.sending``): counted per check for the progress line.
RETRY_WORD = "; retrying ("


def progress_every() -> float | None:
    """Seconds between progress lines: ``RLM_PROGRESS_EVERY`` when set (0: never), else
    :data:`PROGRESS_EVERY_S` when stderr is not a terminal, else ``None`` (the live view)."""
    raw = os.environ.get("RLM_PROGRESS_EVERY", "").strip()
    if raw:
        try:
            every = float(raw)
        except ValueError:
            every = PROGRESS_EVERY_S
        return every if every > 0 else None
    try:
        return None if sys.stderr.isatty() else PROGRESS_EVERY_S
    except (AttributeError, ValueError):
        return PROGRESS_EVERY_S


class Ticker:
    """Progress lines for a CI log: every ``every`` seconds, each check in flight with its
    iteration, its seconds so far and its retries (or the corpus load before the first)."""

    def __init__(self, ui: UI, total: int, every: float | None) -> None:
        self.ui, self.total, self.every = ui, total, every
        self.started = time.monotonic()
        self.flying: dict[str, list[float]] = {}  # check id -> [started, iteration, retries]
        self.done = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Ticker:
        if self.every is not None:
            self._thread = threading.Thread(target=self._run, name="audit-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def saw(self, qid: str, ev: EventDict) -> None:
        """Count an event of check ``qid`` (its iteration; a retry's notice)."""
        with self._lock:
            row = self.flying.setdefault(qid, [time.monotonic(), 0, 0])
            if is_type(ev, "iteration") and ev.get("depth", 0) == 0:
                row[1] = int(ev.get("iteration") or 0)
            elif is_type(ev, "notice") and RETRY_WORD in str(ev.get("message", "")):
                row[2] += 1

    def finished(self, qid: str) -> None:
        """Check ``qid`` ended."""
        with self._lock:
            self.flying.pop(qid, None)
            self.done += 1

    def line(self) -> str:
        """The progress line now."""
        now = time.monotonic()
        with self._lock:
            rows = [f"{qid} iteration {int(r[1]) or 1}, {now - r[0]:.0f} s"
                    + (f", {int(r[2])} retr{'y' if r[2] == 1 else 'ies'}" if r[2] else "")
                    for qid, r in self.flying.items()]
            done = self.done
        doing = "; ".join(rows) if rows else "loading the corpus and starting" if not done else "between checks"
        return f"progress: {done}/{self.total} checks done, {now - self.started:.0f} s: {doing}"

    def _run(self) -> None:
        assert self.every is not None
        while not self._stop.wait(self.every):
            self.ui.info(self.line())


def _short_value(value: str) -> str:
    """A check's value for its line: whole up to :data:`VALUE_CHARS`, else cut after a comma."""
    if len(value) <= VALUE_CHARS:
        return value
    cut = value[:VALUE_CHARS]
    return cut[:cut.rfind(",")] + ", ..." if "," in cut else cut + "..."


def check_line(run: CheckRun, where: ReportPaths, done: int, total: int, fail_on: str) -> tuple[str, bool]:
    """A check's line as it completes, and whether it is an error line (it makes the run fail:
    its severity is at or above ``fail_on``), else a warning line (not passing) or an info one."""
    from rlm_cli.audit.checklist import SEVERITIES

    value = shown_value(check_report(run, where))
    line = f"[{done}/{total}] {run.check.id} ({run.check.severity}): {run.verdict.status}"
    line += f" {_short_value(value_text(value))}" if value is not None else ""
    if run.verdict.status == "pass":
        return line, False
    failing = SEVERITIES.index(run.check.severity) <= SEVERITIES.index(fail_on)
    return f"{line}: {' '.join(run.verdict.reason.split())}", failing


def run_audit(settings: Settings, paths: list[str], checklist: Checklist, *, jobs: int, backend: Backend | None, ui: UI,
              fail_on: str, scope: Scope | None = None, baseline: Baseline | None = None,
              on_cancel: Callable[[AuditReport], None] | None = None) -> AuditReport:
    """Run ``checklist`` (:func:`~rlm_cli.audit.run.run_checklist`) showing its progress on
    ``ui`` (a ``render.Renderer``): a line per check as it completes, progress lines in a CI log,
    then the table of all checks and a closing line; findings are matched against ``baseline``
    when given (``audit.baseline``). Returns the typed report every report format reads; stopped
    by Ctrl-C or SIGTERM, ``on_cancel`` gets the report of the checks that finished
    (``incomplete``) first.

    Raises:
        the errors of ``run_checklist``.
    """
    total, done, where = len(checklist.checks), [0], ReportPaths.of_run(paths)
    ticker = Ticker(ui, total, progress_every())

    def on_check(run: CheckRun) -> None:
        done[0] += 1
        ticker.finished(run.check.id)
        line, failing = check_line(run, where, done[0], total, fail_on)
        (ui.error if failing else ui.warning if run.verdict.status != "pass" else ui.info)(line)

    def emit_for(question: Question) -> Emit:
        ticker.saw(str(question.id), {})

        def warnings_only(ev: EventDict) -> None:
            ticker.saw(str(question.id), ev)
            if is_type(ev, "notice") and ev.get("level") == "warning":
                ui.on_event({**ev, "message": f"[{question.id}] {ev.get('message', '')}"})
        return warnings_only

    def cancelled(cut: AuditRun) -> None:
        if on_cancel is not None:
            interrupts.final_in_hand()  # a second Ctrl-C does not cut the reports short (rlm_cli.interrupts)
            ui.warning(f"{cut.extra['incomplete']['signal']}: {len(cut.runs)} of {total} checks finished; "
                       "writing their reports, marked incomplete")
            on_cancel(audit_report(checklist, cut, fail_on=fail_on, baseline=baseline))

    started = time.monotonic()
    with ticker:
        run = run_checklist(settings, paths, checklist, jobs=jobs, backend=backend, emit=ui.on_event,
                            emit_for=emit_for, on_check=on_check, on_cancel=cancelled, scope=scope)
    ui.close()
    report = audit_report(checklist, run, fail_on=fail_on, baseline=baseline)
    t = report.totals
    ui.stderr_table(f"rlm audit: {report.checklist}", COLUMNS, table_rows(report))
    ui.summary({"iterations": sum(int(c.run.get("iterations") or 0) for c in report.checks), "usage": report.usage,
                "sub_calls": sum(int(c.run.get("sub_calls") or 0) for c in report.checks),
                "elapsed_s": round(time.monotonic() - started, 3)})
    found = findings_line(report)
    ui.info(f"{t.checks} checks: {t.passed} pass, {t.failed} fail, {t.errors} error, {t.unsupported} "
            f"unsupported; " + (f"{found}; " if found else "") + f"corpus loaded {run.loads} time(s)"
            + (f"; {t.note}" if t.note else "")
            + (f"; exit code {report.exit_code}" if report.exit_code else ""))
    return report


def github_output(report: AuditReport, sarif: Path | None, path: Path) -> None:
    """Append the step's outputs to ``path`` (``$GITHUB_OUTPUT``): ``passed``, ``failed``
    (checks that ended ``fail`` or ``unsupported``), ``errors``, ``new`` (failing findings a
    ``--baseline`` did not hold: every failing finding without one), ``incomplete``, ``exit-code``
    and ``sarif`` (its path, when written), each in GitHub's multiline form (``NAME<<DELIMITER``,
    the value, the delimiter; a delimiter the value does not hold, as ``@actions/core``'s
    ``prepareKeyValueMessage`` makes one).

    Raises:
        OSError: the file cannot be written.
    """
    t = report.totals
    failing = [f for f in report.findings if f.failing]
    values: dict[str, object] = {
        "passed": t.passed, "failed": t.failed + t.unsupported, "errors": t.errors,
        "new": sum(1 for f in failing if f.baseline_state in (None, "new")),
        "incomplete": "true" if report.incomplete else "false", "exit-code": report.exit_code}
    if sarif is not None:
        values["sarif"] = str(sarif)
    _append_outputs(values, path)


def _append_outputs(values: dict[str, object], path: Path) -> None:
    out = []
    for name, value in values.items():
        text = str(value)
        delimiter = f"ghadelimiter_{uuid.uuid4()}"
        while delimiter in text:
            delimiter = f"ghadelimiter_{uuid.uuid4()}"
        out.append(f"{name}<<{delimiter}\n{text}\n{delimiter}\n")
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("".join(out))


def prepare(settings: Settings, paths: list[str], outputs: list[Path | None], changed_since: str | None,
            ui: UI, *, staged: bool = False, checklist: Path | None = None) -> tuple[Settings, Scope | None]:
    """The run's settings with rlm's own reports left out of the corpus (``outputs``: the report
    files of this run; said once), and the scope of ``--changed-since`` or ``--staged`` (said
    once), whose files are never rlm's reports nor the ``checklist``.

    Raises:
        UsageError: ``--changed-since`` outside a git repository or with a ref git does not know;
            ``--staged`` outside a git repository (``changed_since`` is ``None`` then).
    """
    from rlm_cli.audit.run import without_reports

    settings, left = without_reports(settings, paths, [p for p in outputs if p is not None])
    if left:
        ui.info(f"left out {len(left)} report file(s) rlm wrote, not code to audit: {', '.join(left[:5])}"
                + (f" and {len(left) - 5} more" if len(left) > 5 else ""))
    if changed_since is None and not staged:
        return settings, None
    not_code = [os.path.abspath(p) for p in left] + ([os.path.abspath(checklist)] if checklist else [])  # no code
    if changed_since is None:
        scope = staged_files(paths, leave_out=not_code)
        said = f"--staged: {len(scope.files)} changed file(s) staged for the next commit"
    else:
        scope = changed_files(changed_since, paths, leave_out=not_code)
        said = f"--changed-since {changed_since}: {len(scope.files)} changed file(s) since {scope.merge_base[:12]}"
    ui.info(said + ("; every check passes without a model call" if not scope.files else ""))
    return settings, scope


#: Whether this process has written the step's outputs (``written``): a run cancelled after
#: writing its reports does not write ``exit-code`` again.
_STEP = {"written": False}


def deliver_exit_code(code: int) -> None:
    """``exit-code`` and ``incomplete`` (``true``) into ``$GITHUB_OUTPUT``, when it names a file,
    for a run that ended before its report did (no key: 3; a bad checklist or option: 2), so a
    workflow can tell a fork's pull request without secrets from a failing audit. A file that
    cannot be written is left as it is: the run's own error line is what matters then."""
    target = os.environ.get("GITHUB_OUTPUT")
    if target and not _STEP["written"]:
        with contextlib.suppress(OSError):
            _append_outputs({"incomplete": "true", "exit-code": code}, Path(target))


def deliver_github_output(report: AuditReport, sarif: Path | None, ui: UI) -> None:
    """:func:`github_output` into ``$GITHUB_OUTPUT`` when it names a file (a GitHub Actions
    step); a file that cannot be written is a warning, never a lost report."""
    target = os.environ.get("GITHUB_OUTPUT")
    if not target:
        return
    _STEP["written"] = True
    try:
        github_output(report, sarif, Path(target))
    except OSError as exc:
        ui.warning(f"cannot write $GITHUB_OUTPUT ({target}): {exc.strerror or exc}")
