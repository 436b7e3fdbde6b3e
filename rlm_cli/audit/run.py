"""Run a checklist: every check a typed question over one loaded corpus in one warm session, and
the ``audit-result.v1`` document (``rlm_cli/schemas/audit-result.v1.json``) of the run.

The corpus is loaded once and the model host and the REPL worker start once (``app.session``);
the checks run as a list of questions (``app.batch``: one after another, or ``jobs`` at once,
each in its own worker). A check with ``model`` runs with that root model (its window resolved
like the session's); one with ``max_cost`` gets a budget of its own inside the run's
(:class:`CheckBudget`). ``include``/``exclude`` say which files a check is about: the model is
told, and a ``locations`` answer outside them is dropped.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlm_cli.app.batch import Question, Result, result_document, run_all
from rlm_cli.app.plan import model_window
from rlm_cli.app.session import Session
from rlm_cli.audit import suppress
from rlm_cli.audit.baseline import Baseline, compare, counted
from rlm_cli.audit.changed import Scope
from rlm_cli.audit.checklist import Check, Checklist
from rlm_cli.audit.findings import LinesOf, ReportPaths, place
from rlm_cli.audit.verdicts import CheckOutcome, Verdict, decide, exit_code, fails_job, outcome_of
from rlm_cli.config import Settings
from rlm_cli.events import Emit, EventDict, event, is_type
from rlm_cli.models.budget import Budget, Reservation
from rlm_cli.models.usage import Usage
from rlm_cli.output.findings import AuditDocument, AuditReport, CheckReport, Finding, Location, Region, Totals
from rlm_cli.shapes import UsageDoc

if TYPE_CHECKING:
    from rlm_cli.corpus.model import Corpus
    from rlm_cli.models.backend import Backend

#: The ``schema`` of the ``rlm audit --json`` document.
AUDIT_SCHEMA = "audit-result.v1"


class CheckBudget(Budget):
    """A check's budget (its ``max_cost``, over its own usage) inside the run's (``parent``:
    ``--max-cost``, ``--max-tokens``, ``--max-sub-calls``, ``--timeout`` for the whole audit):
    a request must fit both."""

    def __init__(self, parent: Budget, settings: Settings, usage: Usage) -> None:
        own = dataclasses.replace(settings, max_tokens=None, max_sub_calls=None, timeout=None)
        super().__init__(own, usage, started=parent.started)
        self.parent = parent
        self.deadline = parent.deadline
        self._held: dict[int, Reservation] = {}

    @property
    def exceeded(self) -> Any:
        """The first refusal of this check's budget, else of the run's (``None``: none)."""
        return super().exceeded or self.parent.exceeded

    def remaining_s(self) -> float | None:
        """Seconds left before the run's ``--timeout``."""
        return self.parent.remaining_s()

    def check(self, *, sub_call: bool = False, counted: bool = False) -> None:
        """The run's check, then this check's cost.

        Raises:
            BudgetExceededError: either budget is spent.
        """
        self.parent.check(sub_call=sub_call, counted=counted)
        super().check()

    @property
    def reserves(self) -> bool:
        """Whether either budget counts tokens or cost."""
        return self.parent.reserves or super().reserves

    def reserve(self, input_tokens: int, max_output: int, prices: tuple[float, float] | None) -> Reservation:
        """Reserve in the run's budget, then in this check's (what is left of the reply cap).

        Raises:
            BudgetExceededError: it fits either budget no more.
        """
        outer = self.parent.reserve(input_tokens, max_output, prices) if self.parent.reserves else None
        try:
            inner = super().reserve(input_tokens, outer.max_output if outer else max_output, prices)
        except BaseException:
            if outer is not None:
                self.parent.settle(outer)
            raise
        if outer is not None:
            self._held[id(inner)] = outer
        return inner

    def settle(self, reservation: Reservation) -> None:
        """Release ``reservation`` in both budgets."""
        outer = self._held.pop(id(reservation), None)
        super().settle(reservation)
        if outer is not None:
            self.parent.settle(outer)


def check_budget(session_budget: Budget, usage: Usage, settings: Settings, own: bool) -> Budget:
    """The budget of one check's question (``app.session.QuestionBudget``): the session's, or a
    :class:`CheckBudget` within it for a check with a ``max_cost`` of its own (its settings')."""
    if not own or settings.max_cost is None:
        return session_budget
    return CheckBudget(session_budget, settings, usage)


@dataclass
class CheckRun:
    """One check's run: its typed ``outcome``, its verdict and findings (placed and
    fingerprinted: ``audit.findings``), and its ``ask-result.v1`` document (``doc``, or an error
    document), whose run fields the ``--json`` document carries along."""

    check: Check
    outcome: CheckOutcome
    verdict: Verdict
    doc: dict[str, Any]
    findings: list[Finding] = field(default_factory=list)


@dataclass
class AuditRun:
    """What :func:`run_checklist` hands back: the check runs in checklist order, the session's
    usage summary, its corpus (``ask-result``'s ``corpus`` section), how many times the corpus
    was loaded, the sandbox level, the seconds it took, and where report paths are from
    (``paths``)."""

    runs: list[CheckRun]
    usage: UsageDoc
    corpus: dict[str, Any] | None
    loads: int
    sandbox: str
    elapsed_s: float
    paths: ReportPaths
    extra: dict[str, Any] = field(default_factory=dict)
    #: The report paths of the corpus files and the checklist: what a baseline's finding may be
    #: ``absent`` from (``audit.baseline.compare``).
    files: frozenset[str] = frozenset()


def check_question(check: Check, scope: Scope | None = None) -> str:
    """The question a check asks: its ``question``, and the files it is about when it names them
    or ``--changed-since`` or ``--staged`` does (``scope``)."""
    if scope is not None:
        return f"{check_question(check)}\n\n{scope.question_note()}"
    if not check.include and not check.exclude:
        return check.question
    about = []
    if check.include:
        about.append("only files matching " + ", ".join(check.include))
    if check.exclude:
        about.append("no files matching " + ", ".join(check.exclude))
    return (f"{check.question}\n\nThis question is about {' and '.join(about)} (gitignore-style globs); "
            "ignore other files (grep and search take path_glob=).")


def scope_matcher(check: Check) -> Callable[[str], bool]:
    """Whether a corpus path is one ``check`` is about (its ``include`` and ``exclude`` globs,
    gitignore syntax as ``--include``/``--exclude``)."""
    if not check.include and not check.exclude:
        return lambda path: True
    from rlm_cli.corpus.ignore import compile_rules

    inc = compile_rules(list(check.include), "include", walked=False)
    exc = compile_rules(list(check.exclude), "exclude")
    return lambda path: (inc is None or inc.match_file(path)) and (exc is None or not exc.match_file(path))


def path_prefix(paths: list[str]) -> str:
    """What turns a corpus path into a path from the repository root (what CI reports need:
    ``audit.findings.ReportPaths``): ``"svc/"`` for the folder PATH ``svc`` of a repository,
    ``""`` when corpus paths are already from it, an absolute folder outside it."""
    return ReportPaths.of_run(paths).prefix


def corpus_lines(corpus: Corpus | None) -> LinesOf:
    """A reader of a corpus file's lines as the run saw them (from the corpus bundle; ``None``
    for a path that is not a corpus file or cannot be read)."""
    files = {f.path: f for f in corpus.files} if corpus is not None else {}
    cache: dict[str, list[str] | None] = {}

    def lines_of(path: str) -> list[str] | None:
        entry = files.get(path)
        if entry is None or corpus is None:
            return None
        if path not in cache:
            try:
                with open(corpus.context_file, "rb") as fh:
                    fh.seek(entry.bstart)
                    cache[path] = fh.read(entry.bend - entry.bstart).decode("utf-8", "replace").splitlines()
            except OSError:
                cache[path] = None
        return cache[path]
    return lines_of


def without_files(settings: Settings, paths: list[str], files: list[str]) -> Settings:
    """``settings`` whose corpus leaves out each of ``files`` that lies in a folder PATH (an
    ``--exclude`` rule anchored at that folder, matching the name literally)."""
    rules = []
    for file in files:
        target = os.path.abspath(file)
        for p in paths:
            root = os.path.abspath(p)
            if p != "-" and os.path.isdir(p) and target.startswith(root.rstrip(os.sep) + os.sep):
                rules.append("/" + _literal(os.path.relpath(target, root).replace(os.sep, "/")))
                break
    if not rules:
        return settings
    return dataclasses.replace(settings, corpus=dataclasses.replace(settings.corpus,
                                                                    exclude=[*settings.corpus.exclude, *rules]))


def _literal(path: str) -> str:
    """``path`` as a gitignore pattern that matches only itself (its wildcards escaped)."""
    return re.sub(r"([\\*?\[\]!# ])", r"\\\1", path)


def without_checklist(settings: Settings, paths: list[str], checklist: Path) -> Settings:
    """``settings`` whose corpus leaves out the checklist file when it lies in a folder PATH (its
    questions would otherwise be evidence for their own answers)."""
    return without_files(settings, paths, [str(checklist)])


def without_reports(settings: Settings, paths: list[str], outputs: list[Path]) -> tuple[Settings, list[str]]:
    """``settings`` whose corpus leaves out what rlm writes (issue 48): the report files of this
    run (``outputs``: ``--sarif``, ``--junit``, ``--codequality``, ``-o``) and the files under the
    folder PATHs that are rlm reports by their content (``corpus.selfreports``). Also returns
    those found in the corpus, as paths from the current folder, for the one line that says so."""
    from rlm_cli.corpus.selfreports import find_reports

    found = find_reports(paths, settings.corpus)
    files = sorted({*found, *(os.path.abspath(p) for p in outputs)})
    here = os.getcwd().rstrip(os.sep) + os.sep
    present = [os.path.relpath(f) if f.startswith(here) else f for f in files if os.path.isfile(f) and any(
        f.startswith(os.path.abspath(p).rstrip(os.sep) + os.sep) for p in paths if p != "-" and os.path.isdir(p))]
    return without_files(settings, paths, files), present


def check_settings(session: Session, check: Check) -> Settings | None:
    """The settings of ``check`` in ``session`` (opened): its root model, with that model's
    input window (``--root-model-window`` when given), and its ``max_cost``; ``None``: the
    session's."""
    if check.model is None and check.max_cost is None:
        return None
    s = session.run_settings
    if check.model is None or session.plan is None or check.model == session.plan.models.model:
        return dataclasses.replace(s, max_cost=check.max_cost)
    # --root-model-window as given (the session's settings are never written), else the model's own
    window, _ = model_window(session.client, check.model, session.settings.root_model_window)
    return dataclasses.replace(s, model=check.model, root_model_window=window, max_cost=check.max_cost)


def run_checklist(settings: Settings, paths: list[str], checklist: Checklist, *, jobs: int, backend: Backend | None,
                  emit: Emit, emit_for: Callable[[Question], Emit], on_check: Callable[[CheckRun], None],
                  on_cancel: Callable[[AuditRun], None] | None = None, scope: Scope | None = None) -> AuditRun:
    """Ask every check of ``checklist`` over the corpus at ``paths`` and decide each
    (``audit.verdicts``); ``on_check`` gets each :class:`CheckRun` as it completes, ``emit`` the
    session's events, ``emit_for(question)`` those of one check. ``scope`` (``--changed-since``,
    ``--staged``) narrows what every check is about; a check with no file of it in scope passes unasked.
    Stopped by Ctrl-C or SIGTERM, ``on_cancel`` gets the checks that finished (``extra``'s
    ``incomplete``: the signal and the checks not run) before the stop goes on.

    Raises:
        UsageError, NoModelError, SandboxError, HostUnavailable: the session could not open (no
            check ran); KeyboardInterrupt / SystemExit: Ctrl-C or SIGTERM.
    """
    started = time.monotonic()
    settings = without_checklist(settings, paths, checklist.path)
    loads = [0]

    def session_events(ev: EventDict) -> None:
        if is_type(ev, "corpus"):
            loads[0] += 1
        emit(ev)

    by_id = {c.id: c for c in checklist.checks}
    runs: dict[str, CheckRun] = {}
    where, checklist_path = ReportPaths.of_run(paths), os.path.abspath(checklist.path)
    asked = [c for c in checklist.checks if scope is None or scope.touches(scope_matcher(c))]
    for c in checklist.checks:
        if c not in asked and scope is not None:
            runs[c.id] = unasked_run(c, scope.unasked())
            on_check(runs[c.id])
    session = Session(settings, paths, emit=session_events, backend=backend, numbered=True,
                      question_budget=check_budget)
    files: list[str] = []  # the corpus's paths, once it is loaded

    def audit_run() -> AuditRun:
        corpus = session.corpus
        corpus_doc = None if corpus is None else {"files": len(corpus.files), "chars": corpus.chars,
                                                  "tokens": corpus.total_tokens, "chunks": len(corpus.chunks)}
        return AuditRun([runs[c.id] for c in checklist.checks if c.id in runs], session.usage.summary(), corpus_doc,
                        loads[0], str(session.level), round(time.monotonic() - started, 3), where,
                        {"changed_since": None if scope is None else scope.document()},
                        frozenset([*(where.report_path(p) for p in files), where.from_root(checklist_path)]))

    if not asked:  # nothing in scope: no corpus, no model
        return audit_run()
    with session:
        try:
            session.open()
            lines_of = corpus_lines(session.corpus)
            # what a baseline's finding may be absent from: the files this run was about
            files.extend(f.path for f in (session.corpus.files if session.corpus is not None else [])
                         if scope is None or f.path in scope.files)
            lines = suppress.report_lines(files, where, lines_of, checklist_path)
            questions = [Question(c.id, check_question(c, scope), c.type, check_settings(session, c)) for c in asked]

            def done(result: Result) -> None:
                check = by_id[str(result.question.id)]  # a check id: its question was made with it
                outcome = outcome_of(result, check.type)
                about = scope_matcher(check) if scope is None else scope.matcher(scope_matcher(check))
                verdict = decide(check, outcome, about)
                run = CheckRun(check, outcome, verdict, result_document(result, session.level))
                run.findings, bare = suppress.apply(place(check, verdict, finding_message(verdict), where,
                                                          checklist_path, lines_of), lines)
                for at in bare:
                    emit(event("notice", message=f"{at}: 'rlm-audit: ignore' without [CHECK-ID] accepts nothing "
                                                 f"(write rlm-audit: ignore[{check.id}] REASON)", level="warning"))
                runs[check.id] = run
                on_check(run)

            run_all(session, questions, jobs=jobs, emit_for=emit_for, on_result=done)
        except (KeyboardInterrupt, SystemExit) as exc:
            if on_cancel is not None and (isinstance(exc, KeyboardInterrupt) or exc.code == 143):
                cut = audit_run()
                cut.extra["incomplete"] = {"signal": "SIGINT" if isinstance(exc, KeyboardInterrupt) else "SIGTERM",
                                           "not_run": [c.id for c in checklist.checks if c.id not in runs]}
                on_cancel(cut)
            raise
        return audit_run()


def unasked_run(check: Check, reason: str) -> CheckRun:
    """The run of a check that passes without a model call (``reason``: why it was not asked)."""
    return CheckRun(check, CheckOutcome(None, None), Verdict("pass", reason), {})


def finding_message(verdict: Verdict) -> str:
    """What a finding says: why its check did not pass (an unsupported answer's reason says so)."""
    return verdict.reason


def audit_report(checklist: Checklist, run: AuditRun, *, fail_on: str, baseline: Baseline | None = None) -> AuditReport:
    """The typed report of ``run`` that every report format reads: each check with its status,
    reason, answer, value, locations and findings (against ``baseline``, when given: each
    ``new`` or ``unchanged``, and the ``absent`` ones), the totals and the exit code, in which
    a failing check counts only while one of its findings does (``Finding.failing``: not
    suppressed, not in the baseline). A cancelled run exits 130 (Ctrl-C) or 143 (SIGTERM)."""
    absent: list[Finding] = []
    if baseline is not None:
        ids = {r.check.id for r in run.runs}
        matched, absent = compare([f for r in run.runs for f in r.findings], baseline,
                                  lambda f: f.check in ids and f.path in run.files)
        for r in run.runs:
            r.findings, matched = matched[:len(r.findings)], matched[len(r.findings):]
    code = exit_code([(r.check, counted(r.verdict, r.findings)) for r in run.runs], fail_on)
    cut = run.extra.get("incomplete")
    code = (130 if cut["signal"] == "SIGINT" else 143) if cut else code
    checks = [check_report(r, run.paths, fail_on) for r in run.runs]
    usage = run.usage
    calls = usage["root"]["calls"] + usage["sub"]["calls"]
    cached = usage["cached_calls"]
    count = {s: sum(1 for c in checks if c.status == s) for s in ("pass", "fail", "error", "unsupported")}
    totals = Totals(len(checks), count["pass"], count["fail"], count["error"], count["unsupported"], calls, cached,
                    usage["cost_usd"])
    if totals.from_cache:
        totals.note = "every model call was served by the response cache: this run cost nothing"
    return AuditReport(checks, totals, code, fail_on, run.paths.from_root(os.path.abspath(checklist.path)),
                       run.paths.root, run.paths.prefix, usage,
                       None if run.corpus is None else {**run.corpus, "loads": run.loads}, run.sandbox, run.elapsed_s,
                       incomplete=cut, changed_since=run.extra.get("changed_since"),
                       baseline=None if baseline is None else str(baseline.path), absent=absent)


def audit_document(report: AuditReport) -> AuditDocument:
    """The ``audit-result.v1`` document of ``report``: ``checks`` (each check with its status,
    reason, answer, value, locations, findings and run), ``totals``, ``usage``, ``corpus`` (with
    ``loads``), ``status`` (``pass`` or ``fail``) and ``exit_code``."""
    return report.document(AUDIT_SCHEMA)


def check_report(run: CheckRun, paths: ReportPaths, fail_on: str = "error") -> CheckReport:
    """One check of the audit report (``fail_on``: ``--fail-on``)."""
    c, out, v, doc = run.check, run.outcome, run.verdict, run.doc
    support = doc.get("support")
    value = out.value
    if c.type.placed and isinstance(value, list) and v.status in ("pass", "fail", "unsupported"):
        # what the verdict counted: locations outside the check's scope (include, --changed-since) are out
        value = [f"{p}:{a}" + (f"-{b}" if b != a else "") for p, a, b in v.locations]
    return CheckReport(
        c.id, c.question, c.type, c.severity, c.expectation(), v.status, v.reason, out.answer, value,
        c.line, [Location(p, paths.report_path(p), Region(a, b)) for p, a, b in v.locations], list(run.findings),
        v.run_code, c.model, c.max_cost, tuple(c.include), tuple(c.exclude), list(doc.get("sources") or []),
        {k: doc.get(k) for k in ("status", "mode", "iterations", "sub_calls", "elapsed_s", "usage", "trace")
         if k in doc}, support if isinstance(support, dict) else None, fails_job(c, counted(v, run.findings), fail_on))
