"""Each check's status from the typed outcome of its run, where its finding is, and the audit's
exit code.

A check ends:

* ``error``: its run did not give a decidable answer: it failed (a provider error, exit 4...),
  stopped without a final answer (the iteration limit, a budget), or its answer was still not a
  well-typed value after the ``answer_type`` check sent it back;
* ``unsupported``: the answer's support verdict (issue 37: ``support.verdict``) is
  ``unsupported``; such an answer never passes (:attr:`CheckOutcome.unsupported`, read from the
  typed ``RunResult.support`` by :func:`outcome_of`: the one place the audit reads it);
* ``pass`` / ``fail``: the typed value meets the check's expectation, or does not (a check
  without one passes once answered).

The audit decides from :class:`CheckOutcome` (built from the run's ``RunResult`` or the error it
raised), never from the ``--json`` document of the run.

The exit code (:func:`exit_code`) is the worst of, ranked by ``errors.EXIT_SEVERITY`` (best
first): 0, 5 (an iteration limit), 6 (a budget), 8 (a check failed: :attr:`ExitCode.CHECK_FAILED`),
2, 3, 4, 1. A failed, unsupported or undecided check counts (as 8, or its run's 5 or 6) only when its
severity is at least ``--fail-on`` (``error`` by default: warnings and notes never fail the job);
a usage, no-model, provider or internal error (2, 3, 4, 1) counts whatever the severity.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlm_cli.answer_types import AnswerType
from rlm_cli.app.batch import Result
from rlm_cli.audit.checklist import SEVERITIES, Check
from rlm_cli.errors import BudgetExceededError, ExitCode, PartialAnswerError, worst_exit_code
from rlm_cli.loop.result import RunResult
from rlm_cli.loop.typed import location_parts
from rlm_cli.shapes import SourceDoc

STATUSES = ("pass", "fail", "error", "unsupported")
#: Codes that count whatever the check's severity: the audit itself could not run as asked.
SYSTEMIC = (ExitCode.USAGE, ExitCode.NO_MODEL, ExitCode.PROVIDER, ExitCode.INTERNAL)
#: Locations a report shows for one check at most.
MAX_LOCATIONS = 20
#: How a run reads lines with code (``rlm_cli.output.sources.HOW_ORDER``): what a finding of a
#: check that is not a ``locations`` check may point at (a lead shown before it looked may not).
CODE_READS = ("read_file", "grep", "printed")


@dataclass
class Verdict:
    """A check's ``status`` (one of :data:`STATUSES`), why (``reason``, for people), the exit
    code its run ended with (``run_code``; 0 when it answered) and where the finding is
    (``locations``: ``(path, start_line, end_line)``, corpus paths)."""

    status: str
    reason: str
    run_code: int = 0
    locations: list[tuple[str, int, int]] = field(default_factory=list)


@dataclass(frozen=True)
class Evidence:
    """A range of lines a run looked at (``ask-result``'s ``sources``): corpus ``path``, lines,
    ``how`` it looked (``read_file``, ``grep``, ``leads``...) and whether the answer ``cited`` it."""

    path: str
    start_line: int
    end_line: int
    how: tuple[str, ...] = ()
    cited: bool = False

    @property
    def read_with_code(self) -> bool:
        """Whether the run's own code read these lines (:data:`CODE_READS`), not only a lead
        shown to the model."""
        return any(h in CODE_READS for h in self.how)


@dataclass(frozen=True)
class CheckOutcome:
    """What a check's run ended with, typed: ``answer`` (``None``: no answer), the typed ``value``
    (a text check: its answer; ``None``: not well typed, and ``problem`` says why);
    ``unsupported`` (the answer's support verdict is ``unsupported``); ``evidence`` (what the run
    looked at); for a run that did not answer: ``error`` (why) and ``run_code`` (its exit code),
    or ``stopped_at`` (``max_iterations`` or the budget's name: a partial answer)."""

    answer: str | None
    value: Any = None
    problem: str = ""
    unsupported: bool = False
    evidence: tuple[Evidence, ...] = ()
    error: str | None = None
    run_code: int = 0
    stopped_at: str | None = None


def evidence_of(sources: list[SourceDoc]) -> tuple[Evidence, ...]:
    """The ``sources`` rows of a run (``rlm_cli.output.sources.build_sources``) as :class:`Evidence`."""
    return tuple(Evidence(s["path"], s["start_line"], s["end_line"], tuple(s["how"]), s["cited"]) for s in sources)


def outcome_of(result: Result, kind: AnswerType) -> CheckOutcome:
    """The typed outcome of one check's run (``app.batch.Result`` of a question of answer type
    ``kind``): read from the run's ``RunResult`` (its ``typed`` value and its ``support``
    verdict), or from the partial answer or the error the run raised."""
    err = result.error
    if isinstance(err, PartialAnswerError):
        report = err.report
        limit = report.result is not None and report.result.status == "max_iterations"
        stopped = "max_iterations" if limit else str(err.budget if isinstance(err, BudgetExceededError) else None)
        return CheckOutcome(err.partial, evidence=evidence_of(report.sources), run_code=int(err.exit_code),
                            stopped_at=stopped)
    if err is not None:
        return CheckOutcome(None, error=err.message or "the run failed", run_code=int(err.exit_code))
    outcome = result.outcome
    if outcome is None:  # neither an outcome nor an error: not a finished run
        return CheckOutcome(None, error="the run gave no outcome", run_code=int(ExitCode.INTERNAL))
    run: RunResult = outcome.result
    typed = run.typed
    value = run.answer if not kind.typed else (typed.value if typed is not None else None)
    support = run.support
    return CheckOutcome(run.answer, value, typed.problem if typed is not None else "",
                        support is not None and support.verdict == "unsupported", evidence_of(outcome.sources))


def meets(check: Check, value: object) -> tuple[bool, str]:
    """``(passed, why)``: whether the typed ``value`` meets ``check``'s expectation."""
    if check.has_expect and not _equal(value, check.expect, check.type):
        return False, f"expected {check.expectation()}, got {_short(value)}"
    measured: float | None
    if check.type.counted:
        measured = float(len(value)) if isinstance(value, list) else None
        what = "items"
    else:
        measured = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        what = "value"
    if check.max is not None and (measured is None or measured > check.max):
        return False, f"{what} {_short(value) if what == 'value' else int(measured or 0)} is over the max of {check.max:g}"
    if check.min is not None and (measured is None or measured < check.min):
        return False, f"{what} {_short(value) if what == 'value' else int(measured or 0)} is under the min of {check.min:g}"
    if check.empty is not None and isinstance(value, list) and (not value) != check.empty:
        return False, f"expected no items, got {len(value)}" if check.empty else "expected some items, got none"
    return True, check.expectation() or "answered"


def _equal(value: object, expected: object, kind: AnswerType) -> bool:
    if kind is AnswerType.NUMBER and isinstance(value, (int, float)) and isinstance(expected, (int, float)):
        return math.isclose(float(value), float(expected), rel_tol=1e-9, abs_tol=1e-12)
    if kind.placed and isinstance(value, list) and isinstance(expected, list):
        return sorted(value) == sorted(expected)
    return bool(value == expected and type(value) is type(expected)) or (
        kind.numeric and not isinstance(value, bool) and value == expected)


def _short(value: object, limit: int = 120) -> str:
    import json

    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def decide(check: Check, outcome: CheckOutcome, in_scope: Callable[[str], bool]) -> Verdict:
    """The verdict of ``check`` from its run's typed outcome; ``in_scope(path)`` says whether a
    corpus path is one the check is about (its ``include``/``exclude``), and a located answer
    outside it is dropped."""
    if outcome.error is not None:
        return Verdict("error", outcome.error, outcome.run_code or int(ExitCode.INTERNAL))
    if outcome.stopped_at is not None:
        limit = outcome.stopped_at == "max_iterations"
        why = "the iteration limit" if limit else f"the {outcome.stopped_at} budget"
        return Verdict("error", f"stopped at {why} without a final answer",
                       int(ExitCode.MAX_ITERATIONS if limit else ExitCode.BUDGET))
    value = outcome.value
    if check.type.typed and value is None:
        return Verdict("error", f"no well-typed {check.type} answer ({outcome.problem or 'none'})")
    located = _located(check, value, outcome.evidence, in_scope)
    if check.type.placed:
        value = [f"{p}:{a}" + (f"-{b}" if b != a else "") for p, a, b in located]
    if outcome.unsupported:
        return Verdict("unsupported", "the answer is not supported by what the run read", 0, located)
    passed, why = meets(check, value)
    return Verdict("pass" if passed else "fail", why, 0, located)


def _located(check: Check, value: object, evidence: tuple[Evidence, ...],
             in_scope: Callable[[str], bool]) -> list[tuple[str, int, int]]:
    """Where a check's answer is: its ``locations`` (in scope); else the lines its run read with
    code (:attr:`Evidence.read_with_code`; those the answer cites first), never a lead line it
    did not examine (at most :data:`MAX_LOCATIONS`)."""
    if check.type.placed and isinstance(value, list):
        parts = [location_parts(v) for v in value]
        return [p for p in parts if p is not None and in_scope(p[0])]
    read = [e for e in evidence if e.read_with_code and in_scope(e.path)]
    chosen = [e for e in read if e.cited] + [e for e in read if not e.cited]
    return [(e.path, e.start_line, e.end_line) for e in chosen[:MAX_LOCATIONS]]


def counts(check: Check, fail_on: str) -> bool:
    """Whether a check of ``check.severity`` can fail the job under ``--fail-on fail_on``."""
    return SEVERITIES.index(check.severity) <= SEVERITIES.index(fail_on)


def fails_job(check: Check, verdict: Verdict, fail_on: str) -> bool:
    """Whether ``verdict`` counts against the job (see the module docstring): a check that did
    not pass, at a severity ``--fail-on`` counts, or one whose run failed systemically."""
    if verdict.status == "pass":
        return False
    return counts(check, fail_on) or (verdict.status == "error" and verdict.run_code in SYSTEMIC)


def exit_code(verdicts: list[tuple[Check, Verdict]], fail_on: str = "error") -> int:
    """The audit's exit code (see the module docstring): the worst (``errors.worst_exit_code``)
    of the codes of the checks that count."""
    codes: list[int] = []
    for check, v in verdicts:
        if v.status == "pass":
            continue
        if v.status == "error" and v.run_code in SYSTEMIC:
            codes.append(v.run_code)
        elif not counts(check, fail_on):
            continue
        elif v.status == "error" and v.run_code in (ExitCode.MAX_ITERATIONS, ExitCode.BUDGET):
            codes.append(v.run_code)
        else:
            codes.append(int(ExitCode.CHECK_FAILED))
    return worst_exit_code(codes)
