"""The ``--json`` documents of ``rlm ask``, ``rlm chat`` and ``rlm replay`` and the plain answer
text, built from a run's outcome or error (``rlm_cli/schemas/ask-result.v1.json`` describes the
document). Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NotRequired, Protocol, TypedDict

from rlm_cli.errors import BudgetExceededError, PartialAnswerError
from rlm_cli.shapes import SourceDoc, SupportDoc, UsageDoc, no_usage

#: The ``schema`` of the ``rlm ask --json`` document: ``rlm_cli/schemas/ask-result.v1.json``.
ASK_SCHEMA = "ask-result.v1"


class SkippedFile(TypedDict):
    """A file or folder the corpus left out (a folder's ``path`` ends with ``/``) and why."""

    path: str
    reason: str


class SkippedFiles(TypedDict):
    """What :func:`skipped_files` returns: the first skipped files named, and how many in all."""

    skipped: list[SkippedFile]
    skipped_count: int


class CorpusSection(SkippedFiles):
    """The ``corpus`` object of the ask document (the schema's ``result.corpus``)."""

    files: int
    chars: int
    tokens: int
    chunks: int


class AskResult(TypedDict):
    """The keys :func:`ask_document` writes, in their order: those every ``rlm ask --json``
    document of a run with an answer has (the schema's ``$defs.result``; ``support`` is in its
    ``properties``). ``usage`` is the usage summary (``models.usage.Usage.summary()``, the
    schema's ``$defs.usage``), ``sources`` the ranges the run looked at (``output.sources``, the
    schema's ``$defs.source``)."""

    schema: str
    answer: str
    status: str
    support: SupportDoc
    iterations: int
    sub_calls: int
    usage: UsageDoc
    elapsed_s: float
    mode: str
    policy: str
    sandbox: str
    corpus: CorpusSection | None
    sources: list[SourceDoc]
    sources_omitted: int


class AskDocument(AskResult):
    """The ``rlm ask --json`` document of a run with an answer, final or partial: the keys of
    :class:`AskResult`, then those set after it: ``trace`` by every caller, ``same_answer`` by
    ``rlm replay``, ``budget`` and ``partial`` by :func:`partial_document`, the typed fields by
    :func:`typed_fields`. (``id`` and ``question``, with several questions, go in front of a copy.)"""

    trace: NotRequired[str | None]
    same_answer: NotRequired[bool]
    budget: NotRequired[str | None]
    partial: NotRequired[bool]
    answer_type: NotRequired[str]
    value: NotRequired[object]
    value_problem: NotRequired[str]
    dropped: NotRequired[list[str]]


class TypedFields(TypedDict):
    """What :func:`typed_fields` adds to a document beside ``answer``."""

    answer_type: str
    value: object
    value_problem: NotRequired[str]
    dropped: NotRequired[list[str]]


class ErrorDocument(TypedDict):
    """The document of a run that failed (the schema's ``$defs.error``)."""

    schema: str
    status: str
    error: str
    exit_code: int
    answer: None
    trace: NotRequired[str | None]


class _SkipReport(Protocol):
    """What :func:`skipped_files` reads of a corpus's load report (a ``corpus.loader.LoadReport``)."""

    @property
    def named(self) -> Sequence[tuple[str, str]]: ...
    @property
    def skipped(self) -> Mapping[str, int]: ...


class CorpusFacts(Protocol):
    """What the documents read of a loaded corpus (a ``corpus.Corpus``: this package may not
    import it)."""

    @property
    def files(self) -> Sequence[object]: ...
    @property
    def chunks(self) -> Sequence[object]: ...
    @property
    def chars(self) -> int: ...
    @property
    def total_tokens(self) -> int: ...
    @property
    def report(self) -> _SkipReport: ...


class _Judged(Protocol):
    """An answer's support verdict (a ``loop.support.Support``)."""

    def to_dict(self) -> SupportDoc: ...


class _TypedValue(Protocol):
    """A typed answer's value (a ``loop.typed.TypedValue``)."""

    @property
    def kind(self) -> str: ...
    @property
    def value(self) -> object: ...
    @property
    def problem(self) -> str: ...
    @property
    def dropped(self) -> Sequence[str]: ...


class RunFacts(Protocol):
    """What the documents read of a run's result (a ``loop.result.RunResult``)."""

    @property
    def answer(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def iterations(self) -> int: ...
    @property
    def sub_calls(self) -> int: ...
    @property
    def mode(self) -> str: ...
    @property
    def policy(self) -> str: ...
    @property
    def support(self) -> _Judged | None: ...
    @property
    def typed(self) -> _TypedValue | None: ...


class OutcomeFacts(Protocol):
    """What :func:`outcome_document` reads of a finished run (an ``app.outcome.AskOutcome``)."""

    @property
    def result(self) -> RunFacts: ...
    @property
    def corpus(self) -> CorpusFacts: ...
    @property
    def usage(self) -> UsageDoc: ...
    @property
    def sandbox(self) -> str: ...
    @property
    def trace_path(self) -> Path | None: ...
    @property
    def sources(self) -> list[SourceDoc]: ...
    @property
    def sources_omitted(self) -> int: ...


def skipped_files(corpus: CorpusFacts) -> SkippedFiles:
    """``{"skipped": [{"path", "reason"}, ...], "skipped_count": n}``: the files and folders the
    corpus (a ``corpus.Corpus``) left out (the first ``loader.MAX_NAMED_SKIPS``; a folder's path ends with ``/``) and
    how many there were in all (``--json``'s corpus section and the trajectory's corpus event)."""
    return {"skipped": [{"path": path, "reason": reason} for path, reason in corpus.report.named],
            "skipped_count": sum(corpus.report.skipped.values())}


#: The ``support`` object of an answer no loop judged (a run stopped without a final answer).
PARTIAL_SUPPORT: SupportDoc = {"verdict": "partial", "unsupported": [], "objections": [],
                               "reason": "the run stopped without a final answer"}


def support_object(result: RunFacts | None) -> SupportDoc:
    """The ``support`` object of a run's result (a ``loop.result.RunResult`` or ``None``): its
    verdict as ``--json`` gives it (:data:`PARTIAL_SUPPORT` when there is none)."""
    support = getattr(result, "support", None)
    return support.to_dict() if support is not None else PARTIAL_SUPPORT.copy()


def ask_document(answer: str, status: str, iterations: int, sub_calls: int, usage: UsageDoc, elapsed: float,
                 corpus: CorpusFacts | None, mode: str, sandbox: str, sources: list[SourceDoc] | None = None,
                 sources_omitted: int = 0, policy: str = "", support: SupportDoc | None = None) -> AskDocument:
    """The ``--json`` document of a run (``elapsed`` in wall seconds; ``corpus`` may be ``None``;
    ``policy`` the loop policy the run used; ``support`` the answer's support verdict: ``verdict``,
    ``unsupported`` tokens, overruled ``objections``, ``reason``)."""
    return {"schema": ASK_SCHEMA, "answer": answer, "status": status,
            "support": support or PARTIAL_SUPPORT.copy(), "iterations": iterations,
            "sub_calls": sub_calls, "usage": usage, "elapsed_s": elapsed, "mode": mode, "policy": policy,
            "sandbox": sandbox,
            "corpus": {"files": len(corpus.files), "chars": corpus.chars, "tokens": corpus.total_tokens,
                       "chunks": len(corpus.chunks), **skipped_files(corpus)} if corpus is not None else None,
            "sources": sources or [], "sources_omitted": sources_omitted}


def outcome_document(outcome: OutcomeFacts, elapsed: float) -> AskDocument:
    """The document of a finished run (a ``runner.AskOutcome``), ``trace`` included."""
    r = outcome.result
    doc = ask_document(r.answer, r.status, r.iterations, r.sub_calls, outcome.usage, elapsed, outcome.corpus, r.mode,
                       outcome.sandbox, outcome.sources, outcome.sources_omitted, r.policy, support_object(r))
    doc["trace"] = str(outcome.trace_path) if outcome.trace_path else None
    typed = r.typed
    if typed is not None:  # a typed question (--answer-type); a text one's document is as it always was
        doc.update(typed_fields(typed.kind, typed.value, typed.problem, list(typed.dropped)))
    return doc


def typed_fields(kind: str, value: object, problem: str, dropped: list[str]) -> TypedFields:
    """The fields a typed answer adds beside ``answer``: ``answer_type``, ``value`` (the typed
    JSON value; ``null`` when the answer is not well typed), and where they apply
    ``value_problem`` (why it is not) and ``dropped`` (locations not in the corpus)."""
    out: TypedFields = {"answer_type": kind, "value": value}
    if problem:
        out["value_problem"] = problem
    if dropped:
        out["dropped"] = dropped
    return out


def partial_document(exc: PartialAnswerError, sandbox: str, elapsed: float) -> AskDocument:
    """The document of a run stopped without a final answer (the iteration limit or a budget):
    ``status`` ``max_iterations`` or ``budget_exceeded`` (then with ``budget``), the partial
    answer, and ``partial: true``. ``sandbox`` is what to report when the run did not say which
    level it used (it stopped before starting a worker); the level it used wins."""
    report = exc.report
    result = report.result
    budget = exc.budget if isinstance(exc, BudgetExceededError) else None
    status = result.status if result is not None else budget or "stopped"
    if status != "max_iterations":
        status = "budget_exceeded"
    doc = ask_document(exc.partial, status, result.iterations if result else 0, result.sub_calls if result else 0,
                       report.usage if report.usage is not None else no_usage(), elapsed, report.corpus, report.mode or "rlm", report.sandbox or sandbox,
                       report.sources, report.sources_omitted, result.policy if result else "", PARTIAL_SUPPORT.copy())
    doc["trace"] = str(report.trace_path) if report.trace_path else None
    if status == "budget_exceeded":
        doc["budget"] = budget  # timeout, tokens, cost or sub_calls
    doc["partial"] = True
    return doc


def error_document(message: str, code: int, *, status: str = "error") -> ErrorDocument:
    """The document of a run that failed (exit 1-4, 130): ``status``, ``error``, ``exit_code``."""
    return {"schema": ASK_SCHEMA, "status": status, "error": message, "exit_code": int(code), "answer": None}


def answer_text(doc: Mapping[str, Any], cite: bool = False) -> str:
    """The plain answer of a document, newline-terminated; with ``cite`` a ``Sources:`` list of
    the ranges the final answer cites follows (``sources.cite_lines``; ``none`` and why when it
    cites none). A partial answer (no final answer) gets no ``Sources:``: there is nothing the
    run concluded for lines to support. A typed answer with a value is its value
    (:func:`value_text`); one without (not of its type) is nothing."""
    from rlm_cli.output.sources import cite_lines

    answer = doc.get("answer") or ""
    if doc.get("answer_type") and doc.get("value") is not None:
        text = value_text(doc["value"])  # an empty list is no line at all
    elif doc.get("answer_type") and doc.get("status", "final") == "final":
        return ""  # not a value of its type (exit 9): nothing, never the untyped text in its place
    else:
        text = answer if answer.endswith("\n") else answer + "\n"
    if cite and doc.get("status", "final") == "final":
        rows = cite_lines(doc.get("sources") or [])
        seen = len(doc.get("sources") or []) + int(doc.get("sources_omitted") or 0)
        why = (f"the answer cites none of the {seen} range{'' if seen == 1 else 's'} the run looked at "
               "(--json lists them)" if seen else "the run read no corpus lines")
        text += "\nSources:\n" + ("".join(f"- {r}\n" for r in rows) if rows else f"- none: {why}\n")
    return text


def value_text(value: object) -> str:
    """A typed value as plain text, newline-terminated: ``true``/``false``, a number, a list one
    item a line (an empty list: nothing), other JSON as JSON (``output.answer.json_text``, on one
    line: RFC 8259, a lone surrogate kept as its escape)."""
    from rlm_cli.output.answer import json_text

    if isinstance(value, list):
        return "".join(v + "\n" if isinstance(v, str) else json_text(v, line=True) for v in value)
    return json_text(value, line=True)
