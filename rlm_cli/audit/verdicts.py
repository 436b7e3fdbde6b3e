"""Each check's status from its run, where its finding is, and the audit's exit code.

A check ends:

* ``error``: its run did not give a decidable answer: it failed (a provider error, exit 4...),
  stopped without a final answer (the iteration limit, a budget), or its answer was still not a
  well-typed value after the ``answer_type`` check sent it back;
* ``unsupported``: the answer's support verdict (issue 37: ``support.verdict``) is
  ``unsupported``; such an answer never passes (:func:`answer_unsupported`);
* ``pass`` / ``fail``: the typed value meets the check's expectation, or does not (a check
  without one passes once answered).

The exit code (:func:`exit_code`) is the worst of, ranked by :data:`RANK` (best first):
0, 5 (an iteration limit), 6 (a budget), 8 (a check failed: :attr:`ExitCode.CHECK_FAILED`), 2, 4,
1. A failed, unsupported or undecided check counts (as 8, or its run's 5 or 6) only when its
severity is at least ``--fail-on`` (``error`` by default: warnings and notes never fail the job);
a usage, provider or internal error (2, 4, 1) counts whatever the severity.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlm_cli.audit.checklist import SEVERITIES, Check
from rlm_cli.errors import ExitCode
from rlm_cli.loop.typed import location_parts

STATUSES = ("pass", "fail", "error", "unsupported")
#: Exit codes from best to worst (see the module docstring).
RANK = (ExitCode.OK, ExitCode.MAX_ITERATIONS, ExitCode.BUDGET, ExitCode.CHECK_FAILED, ExitCode.USAGE,
        ExitCode.PROVIDER, ExitCode.INTERNAL)
#: Codes that count whatever the check's severity: the audit itself could not run as asked.
SYSTEMIC = (ExitCode.USAGE, ExitCode.NO_MODEL, ExitCode.PROVIDER, ExitCode.INTERNAL)
#: Locations a report shows for one check at most.
MAX_LOCATIONS = 20


@dataclass
class Verdict:
    """A check's ``status`` (one of :data:`STATUSES`), why (``reason``, for people), the exit
    code its run ended with (``run_code``; 0 when it answered) and where the finding is
    (``locations``: ``(path, start_line, end_line)``, corpus paths)."""

    status: str
    reason: str
    run_code: int = 0
    locations: list[tuple[str, int, int]] = field(default_factory=list)


def answer_unsupported(result: Any) -> bool:
    """Whether an answer's support verdict is ``unsupported`` (issue 37): read from
    ``result.support.verdict`` (a ``RunResult``) or ``result["support"]["verdict"]`` (an
    ``rlm ask --json`` document). An answer without a verdict (before issue 37, or a run that
    gives none) is not unsupported. This is the one place the audit reads the verdict."""
    support = result.get("support") if isinstance(result, dict) else getattr(result, "support", None)
    verdict = support.get("verdict") if isinstance(support, dict) else getattr(support, "verdict", None)
    return verdict == "unsupported"


def meets(check: Check, value: Any) -> tuple[bool, str]:
    """``(passed, why)``: whether the typed ``value`` meets ``check``'s expectation."""
    if check.has_expect and not _equal(value, check.expect, check.type):
        return False, f"expected {check.expectation()}, got {_short(value)}"
    measured: float | None
    if check.type in ("list", "locations"):
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


def _equal(value: Any, expected: Any, kind: str) -> bool:
    if kind == "number" and isinstance(value, (int, float)) and isinstance(expected, (int, float)):
        return math.isclose(float(value), float(expected), rel_tol=1e-9, abs_tol=1e-12)
    if kind == "locations" and isinstance(value, list):
        return sorted(value) == sorted(expected)
    return bool(value == expected and type(value) is type(expected)) or (
        kind in ("int", "number") and not isinstance(value, bool) and value == expected)


def _short(value: Any, limit: int = 120) -> str:
    import json

    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def decide(check: Check, doc: dict[str, Any], in_scope: Callable[[str], bool]) -> Verdict:
    """The verdict of ``check`` from its run's document (``ask-result.v1``: an answer, a partial
    answer or an error); ``in_scope(path)`` says whether a corpus path is one the check is about
    (its ``include``/``exclude``), and a located answer outside it is dropped."""
    code = int(doc.get("exit_code") or 0)
    if doc.get("status") == "error":
        return Verdict("error", str(doc.get("error") or "the run failed"), code or int(ExitCode.INTERNAL))
    if doc.get("partial"):
        why = "the iteration limit" if doc.get("status") == "max_iterations" else f"the {doc.get('budget')} budget"
        return Verdict("error", f"stopped at {why} without a final answer",
                       int(ExitCode.MAX_ITERATIONS if doc.get("status") == "max_iterations" else ExitCode.BUDGET))
    value = doc.get("value") if check.type != "text" else doc.get("answer")
    if check.type != "text" and value is None:
        return Verdict("error", f"no well-typed {check.type} answer ({doc.get('value_problem') or 'none'})")
    located = _located(check, value, doc, in_scope)
    if check.type == "locations":
        value = [f"{p}:{a}" + (f"-{b}" if b != a else "") for p, a, b in located]
    if answer_unsupported(doc):
        return Verdict("unsupported", "the answer is not supported by what the run read", 0, located)
    passed, why = meets(check, value)
    return Verdict("pass" if passed else "fail", why, 0, located)


def _located(check: Check, value: Any, doc: dict[str, Any],
             in_scope: Callable[[str], bool]) -> list[tuple[str, int, int]]:
    """Where a check's answer is: its ``locations`` (in scope), else the sources it cites, else
    those it read (at most :data:`MAX_LOCATIONS`)."""
    if check.type == "locations" and isinstance(value, list):
        parts = [location_parts(v) for v in value]
        return [p for p in parts if p is not None and in_scope(p[0])]
    sources = doc.get("sources") or []
    chosen = [s for s in sources if s.get("cited")] or sources
    return [(s["path"], int(s["start_line"]), int(s["end_line"])) for s in chosen[:MAX_LOCATIONS]]


def counts(check: Check, fail_on: str) -> bool:
    """Whether a check of ``check.severity`` can fail the job under ``--fail-on fail_on``."""
    return SEVERITIES.index(check.severity) <= SEVERITIES.index(fail_on)


def exit_code(verdicts: list[tuple[Check, Verdict]], fail_on: str = "error") -> int:
    """The audit's exit code (see the module docstring)."""
    rank = {int(c): i for i, c in enumerate(RANK)}
    worst = 0
    for check, v in verdicts:
        if v.status == "pass":
            continue
        if v.status == "error" and v.run_code in SYSTEMIC:
            code = v.run_code if v.run_code in rank else int(ExitCode.INTERNAL)
        elif not counts(check, fail_on):
            continue
        elif v.status == "error" and v.run_code in (ExitCode.MAX_ITERATIONS, ExitCode.BUDGET):
            code = v.run_code
        else:
            code = int(ExitCode.CHECK_FAILED)
        if rank.get(code, len(RANK) - 1) > rank.get(worst, 0):
            worst = code
    return worst
