"""The typed records every ``rlm audit`` report reads: plain data, built by the audit
(``rlm_cli.audit.findings``), rendered by one module per format (``rlm_cli.output.reports``).

* :class:`Finding`: one alert: the check it comes from, the file (``path``: from the repository
  root, ``/``-separated; absolute for a file outside it), the lines (:class:`Region`), a
  ``fingerprint`` that survives lines inserted or removed elsewhere in the file
  (:data:`FINGERPRINT_KEY`), the ``baseline_state`` against an earlier report (``new``,
  ``unchanged``, ``updated``, ``absent``; ``None``: no baseline was given), a
  :class:`Suppression` (``None``: not suppressed), the ``message`` and the ``level`` (the
  check's severity: ``error``, ``warning``, ``note``);
* :class:`Location`: a place a check's answer names or rests on (its ``locations`` or the
  evidence the run read);
* :class:`CheckReport`: one check with its status and why, its answer, typed value, locations and
  findings; ``run`` and ``sources`` are the check's ``ask-result.v1`` fields, carried as they are
  into the ``--json`` document;
* :class:`AuditReport`: the whole run: the checks, the totals, and what the ``audit-result.v1``
  document adds (:meth:`AuditReport.document`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from rlm_cli.answer_types import AnswerType
from rlm_cli.shapes import UsageDoc, no_usage

#: The key of ``partialFingerprints`` (SARIF) and the kind of ``fingerprint`` everywhere: rlm's
#: own (GitHub reserves ``primaryLocationLineHash`` and computes it itself).
FINGERPRINT_KEY = "rlmFindingHash/v1"
#: The values of :attr:`Finding.baseline_state` (SARIF's ``baselineState``).
BASELINE_STATES = ("new", "unchanged", "updated", "absent")


class SuppressionDoc(TypedDict):
    """A finding's ``suppression`` in ``audit-result.v1``."""

    kind: str
    reason: str


class LocationDoc(TypedDict):
    """A ``location`` of ``audit-result.v1``: ``path`` as the corpus names the file, ``file`` from
    the repository root, and the lines (1-based, inclusive)."""

    path: str
    file: str
    start_line: int
    end_line: int


class FindingDoc(TypedDict):
    """A ``finding`` of ``audit-result.v1`` (see :class:`Finding`)."""

    check: str
    path: str
    start_line: int
    end_line: int
    fingerprint: str
    message: str
    level: str
    where: str
    baseline_state: str | None
    suppression: SuppressionDoc | None


class CheckDoc(TypedDict):
    """A ``check`` of ``audit-result.v1`` (see :class:`CheckReport`); ``value`` a JSON value,
    ``run`` and ``sources`` the check's ``ask-result.v1`` fields as they are."""

    id: str
    question: str
    type: str
    severity: str
    expectation: str
    status: str
    reason: str
    answer: str | None
    value: Any
    locations: list[LocationDoc]
    sources: list[dict[str, Any]]
    line: int
    model: str | None
    max_cost: float | None
    include: list[str]
    exclude: list[str]
    run: dict[str, Any]
    findings: list[FindingDoc]
    exit_code: NotRequired[int]
    support: NotRequired[dict[str, Any]]


#: ``audit-result.v1``'s ``totals`` as :meth:`Totals.to_dict` gives them (the functional form:
#: ``pass`` is a keyword).
TotalsDoc = TypedDict("TotalsDoc", {"checks": int, "pass": int, "fail": int, "error": int, "unsupported": int,
                                    "calls": int, "cached_calls": int, "cost_usd": float | None, "from_cache": bool,
                                    "note": NotRequired[str]})


class AuditTotals(TotalsDoc):
    """The ``totals`` of the ``audit-result.v1`` document: :data:`TotalsDoc` and the finding
    counts (:attr:`AuditReport.finding_counts`)."""

    findings: dict[str, int]


class AuditDocument(TypedDict):
    """The ``audit-result.v1`` document (:meth:`AuditReport.document`), its keys in the order
    they are written; ``usage`` and ``corpus`` as the ask document has them."""

    schema: str
    status: str
    exit_code: int
    fail_on: str
    checklist: str
    root: str
    root_dir: str
    checks: list[CheckDoc]
    totals: AuditTotals
    usage: UsageDoc
    corpus: dict[str, Any] | None
    sandbox: str
    elapsed_s: float
    incomplete: NotRequired[dict[str, Any]]
    changed_since: NotRequired[dict[str, Any]]
    baseline: NotRequired[str]
    absent: NotRequired[list[FindingDoc]]


@dataclass(frozen=True)
class Region:
    """Lines ``start_line`` to ``end_line`` of a file (1-based, inclusive)."""

    start_line: int
    end_line: int


def checklist_region(line: int) -> Region:
    """Where a check stands in its checklist, for what has no place in the corpus to point at (a
    finding placed ``checklist``, the annotation of a check that could not be decided): its line
    ``line`` (1-based), or line 1 when that is unknown (0)."""
    at = max(1, line)
    return Region(at, at)


@dataclass(frozen=True)
class Suppression:
    """Why a finding does not fail: ``kind`` (SARIF's: ``inSource`` for a comment next to the
    line, ``external`` for a baseline or a file of its own) and the ``reason`` given."""

    kind: str
    reason: str = ""

    def to_dict(self) -> SuppressionDoc:
        """``{"kind", "reason"}``."""
        return {"kind": self.kind, "reason": self.reason}


@dataclass(frozen=True)
class Location:
    """A place a check names: ``corpus_path`` (as the corpus names the file), ``path`` (from the
    repository root, or absolute outside it) and its :class:`Region`."""

    corpus_path: str
    path: str
    region: Region

    @property
    def text(self) -> str:
        """``path:start`` or ``path:start-end``."""
        a, b = self.region.start_line, self.region.end_line
        return f"{self.path}:{a}" + (f"-{b}" if b != a else "")

    def to_dict(self) -> LocationDoc:
        """The ``location`` of ``audit-result.v1``: ``path`` (corpus), ``file``, ``start_line``, ``end_line``."""
        return {"path": self.corpus_path, "file": self.path, "start_line": self.region.start_line,
                "end_line": self.region.end_line}


@dataclass(frozen=True)
class Finding:
    """One alert of a check (see the module docstring). ``where`` says how it was placed:
    ``answer`` (a ``locations`` answer), ``evidence`` (lines the run read with code) or
    ``checklist`` (the check's line in the checklist: nothing else to point at); ``related``
    are further places it rests on (evidence beyond the first)."""

    check: str
    path: str
    region: Region
    fingerprint: str
    message: str
    level: str
    status: str = "fail"
    where: str = "answer"
    related: tuple[Location, ...] = ()
    baseline_state: str | None = None
    suppression: Suppression | None = None

    @property
    def failing(self) -> bool:
        """Whether it counts against the run: not suppressed and not known from the baseline."""
        return self.suppression is None and self.baseline_state not in ("unchanged", "updated", "absent")

    def to_dict(self) -> FindingDoc:
        """The ``finding`` of ``audit-result.v1``."""
        out: FindingDoc = {"check": self.check, "path": self.path, "start_line": self.region.start_line,
                               "end_line": self.region.end_line, "fingerprint": self.fingerprint,
                               "message": self.message, "level": self.level, "where": self.where,
                               "baseline_state": self.baseline_state,
                               "suppression": None if self.suppression is None else self.suppression.to_dict()}
        return out


@dataclass
class CheckReport:
    """One check of an audit (``audit-result.v1``'s ``check``): what the checklist says of it,
    its ``status`` (pass, fail, error, unsupported) and ``reason``, the ``answer`` text, the
    typed ``value`` (a text check's: its answer), ``locations``, its ``findings`` (empty unless
    it ended ``fail`` or ``unsupported``), the ``exit_code`` of a run that ended in an error (0:
    it answered), the ask-result fields carried along (``run``, ``sources``, ``support``), and
    whether it counts against the job (``fails_job``: decided by the audit from ``--fail-on``)."""

    id: str
    question: str
    type: AnswerType
    severity: str
    expectation: str
    status: str
    reason: str
    answer: str | None
    value: Any
    line: int
    locations: list[Location] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    exit_code: int = 0
    model: str | None = None
    max_cost: float | None = None
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    sources: list[dict[str, Any]] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)
    support: dict[str, Any] | None = None
    fails_job: bool = False

    @property
    def accepted(self) -> bool:
        """Whether it ended ``fail`` or ``unsupported`` yet every finding of it is accepted
        (suppressed in the source, or in the ``--baseline`` report): it does not fail the run."""
        return self.status in ("fail", "unsupported") and bool(self.findings) and not any(
            f.failing for f in self.findings)

    @property
    def shown_status(self) -> str:
        """The status as the tables show it: ``fail (accepted)`` for an :attr:`accepted` check."""
        return f"{self.status} (accepted)" if self.accepted else self.status

    @property
    def trace(self) -> str | None:
        """The check's trajectory file, when it has one."""
        trace = self.run.get("trace")
        return str(trace) if trace else None

    @property
    def elapsed_s(self) -> float:
        """The check's run time in seconds (0.0 when unknown)."""
        return float(self.run.get("elapsed_s") or 0.0)

    def to_dict(self) -> CheckDoc:
        """The ``check`` of ``audit-result.v1``."""
        row: CheckDoc = {
            "id": self.id, "question": self.question, "type": self.type, "severity": self.severity,
            "expectation": self.expectation, "status": self.status, "reason": self.reason, "answer": self.answer,
            "value": self.value, "locations": [loc.to_dict() for loc in self.locations], "sources": self.sources,
            "line": self.line, "model": self.model, "max_cost": self.max_cost, "include": list(self.include),
            "exclude": list(self.exclude), "run": self.run, "findings": [f.to_dict() for f in self.findings],
        }
        if self.exit_code:
            row["exit_code"] = self.exit_code
        if self.support is not None:
            row["support"] = self.support
        return row


@dataclass
class Totals:
    """How many checks ended each way, the model calls (and those from the cache) and the cost
    (USD; ``None``: unknown); ``note`` for people."""

    checks: int
    passed: int
    failed: int
    errors: int
    unsupported: int
    calls: int
    cached_calls: int
    cost_usd: float | None
    note: str = ""

    @property
    def from_cache(self) -> bool:
        """Whether every model call was served by the response cache."""
        return bool(self.calls) and self.cached_calls == self.calls

    def to_dict(self) -> TotalsDoc:
        """``audit-result.v1``'s ``totals``."""
        out: TotalsDoc = {"checks": self.checks, "pass": self.passed, "fail": self.failed, "error": self.errors,
                               "unsupported": self.unsupported, "calls": self.calls,
                               "cached_calls": self.cached_calls, "cost_usd": self.cost_usd,
                               "from_cache": self.from_cache}
        if self.note:
            out["note"] = self.note
        return out


@dataclass
class AuditReport:
    """A whole audit, as every report reads it: ``checks`` in checklist order, ``totals``, the
    ``exit_code`` and ``fail_on``, the ``checklist`` path (from the repository root), the
    repository root (``root_dir``: an absolute folder; what ``path``s are from), the ``prefix``
    put before corpus paths to make them (``"svc/"``; ``""``: none), and what ``--json`` adds
    (``usage``, ``corpus``, ``sandbox``, ``elapsed_s``)."""

    checks: list[CheckReport]
    totals: Totals
    exit_code: int
    fail_on: str
    checklist: str
    root_dir: str
    prefix: str
    usage: UsageDoc = field(default_factory=no_usage)
    corpus: dict[str, Any] | None = None
    sandbox: str = ""
    elapsed_s: float = 0.0
    #: A cancelled run: ``{"signal": "SIGINT"|"SIGTERM", "not_run": [check ids]}``.
    incomplete: dict[str, Any] | None = None
    #: ``--changed-since`` or ``--staged``: ``{"ref", "merge_base", "files"}`` (``"staged": true`` too).
    changed_since: dict[str, Any] | None = None
    #: ``--baseline FILE`` as given (``None``: none), and the findings of that earlier report
    #: that this run no longer has (``baseline_state`` ``absent``).
    baseline: str | None = None
    absent: list[Finding] = field(default_factory=list)

    @property
    def status(self) -> str:
        """``pass`` when the exit code is 0, ``interrupted`` when cancelled, else ``fail``."""
        return "interrupted" if self.incomplete else "pass" if self.exit_code == 0 else "fail"

    @property
    def findings(self) -> list[Finding]:
        """Every finding of every check, in checklist order."""
        return [f for c in self.checks for f in c.findings]

    @property
    def finding_counts(self) -> dict[str, int]:
        """The findings by what they do to the run: ``findings`` (all), ``failing``, ``new`` and
        ``unchanged`` (against ``--baseline``), ``absent`` (in it, gone now) and ``suppressed``
        (accepted by a comment in the source)."""
        found = self.findings
        return {"findings": len(found), "failing": sum(1 for f in found if f.failing),
                "new": sum(1 for f in found if f.baseline_state == "new"),
                "unchanged": sum(1 for f in found if f.baseline_state == "unchanged"),
                "absent": len(self.absent), "suppressed": sum(1 for f in found if f.suppression is not None)}

    def document(self, schema: str) -> AuditDocument:
        """The ``audit-result.v1`` document (``schema`` its name)."""
        totals: AuditTotals = {**self.totals.to_dict(), "findings": self.finding_counts}
        doc: AuditDocument = {
            "schema": schema, "status": self.status, "exit_code": self.exit_code, "fail_on": self.fail_on,
            "checklist": self.checklist, "root": self.prefix, "root_dir": self.root_dir,
            "checks": [c.to_dict() for c in self.checks], "totals": totals, "usage": self.usage,
            "corpus": self.corpus, "sandbox": self.sandbox, "elapsed_s": self.elapsed_s}
        if self.incomplete:  # a cancelled run
            doc["incomplete"] = self.incomplete
        if self.changed_since:
            doc["changed_since"] = self.changed_since
        if self.baseline is not None:
            doc["baseline"] = self.baseline
            doc["absent"] = [f.to_dict() for f in self.absent]
        return doc
