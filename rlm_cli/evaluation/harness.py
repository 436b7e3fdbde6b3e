"""Running ``rlm eval``: each generated question goes through ``runner.ask`` (the path of
``rlm ask``), in each requested mode, and is scored.

A question counts as correct only when its run ended with a final answer (status ``final``)
that the family's scorer accepts: a run stopped by the iteration limit, a budget or the
timeout, or failed with an error, is wrong. Direct mode runs only where the corpus fits the
root model's input window; elsewhere the question is reported as ``does_not_fit`` and left out
of that mode's accuracy (never silently skipped). An authentication or unknown-model error
stops the whole evaluation (exit 4): every other question would fail the same way.
"""

from __future__ import annotations

import dataclasses
import shutil
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlm_cli.config import Settings
from rlm_cli.corpus import Corpus
from rlm_cli.corpus.store import derive_corpus
from rlm_cli.errors import DoesNotFitError, PartialAnswerError, ProviderError, RLMError
from rlm_cli.evaluation.scoring import partial, score
from rlm_cli.evaluation.task import CorpusText, Task
from rlm_cli.events import Emit, EventDict, is_type
from rlm_cli.shapes import UsageDoc

MODES = ("rlm", "direct")
#: Characters of an answer kept in the results (the trajectory keeps it whole).
ANSWER_CHARS = 2_000

Progress = Callable[["QuestionResult"], None]


@dataclass
class QuestionResult:
    """The outcome of one question in one mode. ``correct`` is ``None`` when it did not run
    (``does_not_fit``); ``tokens`` counts input + output tokens of every model call made;
    ``cached_calls`` counts the calls answered from the LLM cache instead (no tokens spent: the
    reply the model gave that exact request before); ``partial`` is the answer's score from 0 to 1
    (``scoring.partial``: OOLONG's partial credit; 0 when the run did not end with an answer)."""

    task: Task
    mode: str
    status: str
    answer: str = ""
    correct: bool | None = None
    partial: float = 0.0
    iterations: int = 0
    #: Calls of root models (the loop's turns, and those of its sub-RLMs), and sub-calls.
    root_calls: int = 0
    sub_calls: int = 0
    tokens: int = 0
    cached_calls: int = 0
    cost_usd: float | None = None
    elapsed_s: float = 0.0
    run_id: str | None = None
    trace: str | None = None
    error: str | None = None
    #: The root loop's checks that fired (sent the answer back or rewrote it), in order: ``check``,
    #: ``verdict``, ``iteration``, ``answer`` (the answer it judged) and ``right`` (whether that
    #: answer, had it been taken, would have scored correct).
    checks: list[dict[str, Any]] = field(default_factory=list)
    #: The loop policy the run used (``auto`` resolved).
    policy: str = ""
    #: The answer's support verdict (``observed``, ``computed``, ``unsupported``, ``partial``;
    #: ``""`` for a run that ended in an error).
    support: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form used in ``rlm eval --json``'s ``results``."""
        t = self.task
        return {"id": t.id, "family": t.family, "kind": t.kind, "mode": self.mode, "question": t.question,
                "gold": t.gold, "answer": self.answer[:ANSWER_CHARS], "correct": self.correct,
                "partial": round(self.partial, 4), "status": self.status,
                "iterations": self.iterations, "root_calls": self.root_calls, "sub_calls": self.sub_calls, "tokens": self.tokens,
                "cached_calls": self.cached_calls, "cost_usd": self.cost_usd, "elapsed_s": self.elapsed_s,
                "run_id": self.run_id, "trace": self.trace, "error": self.error, "policy": self.policy,
                "support": self.support,
                "checks": [{k: (v[:ANSWER_CHARS] if k == "answer" else v) for k, v in c.items()} for c in self.checks]}


@dataclass
class GroupSummary:
    """Figures of one (family, mode): accuracy over the questions that ran, medians and totals;
    ``partial`` is the mean partial score of the questions that ran (``scoring.partial``) and
    ``with_sub_calls`` how many of them made at least one sub-call (decomposed); ``root_calls``
    and ``sub_calls`` are totals."""

    family: str
    mode: str
    questions: int
    ran: int
    correct: int
    does_not_fit: int
    statuses: dict[str, int] = field(default_factory=dict)
    median_iterations: float | None = None
    sub_calls: int = 0
    tokens: int = 0
    cost_usd: float | None = None
    wall_s: float = 0.0
    median_s: float | None = None
    cached_calls: int = 0
    partial: float | None = None
    with_sub_calls: int = 0
    root_calls: int = 0

    @property
    def accuracy(self) -> float | None:
        """Correct / ran (``None`` when nothing ran)."""
        return self.correct / self.ran if self.ran else None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form used in ``rlm eval --json``'s ``summary``."""
        d = dataclasses.asdict(self)
        d["accuracy"] = None if self.accuracy is None else round(self.accuracy, 4)
        return d


def summarize(results: list[QuestionResult]) -> list[GroupSummary]:
    """One :class:`GroupSummary` per (family, mode), in the order they first appear.

    ``cost_usd`` is ``None`` when any question's cost is unknown (an unpriced model), never 0.
    """
    groups: dict[tuple[str, str], list[QuestionResult]] = {}
    for r in results:
        groups.setdefault((r.task.family, r.mode), []).append(r)
    out = []
    for (fam, mode), rows in groups.items():
        ran = [r for r in rows if r.status != "does_not_fit"]
        costs = [r.cost_usd for r in ran]
        statuses: dict[str, int] = {}
        for r in rows:
            statuses[r.status] = statuses.get(r.status, 0) + 1
        out.append(GroupSummary(
            fam, mode, len(rows), len(ran), sum(1 for r in ran if r.correct), len(rows) - len(ran), statuses,
            statistics.median(r.iterations for r in ran) if ran else None, sum(r.sub_calls for r in ran),
            sum(r.tokens for r in ran), None if any(c is None for c in costs) else round(sum(c or 0.0 for c in costs), 6),
            round(sum(r.elapsed_s for r in ran), 3), statistics.median(r.elapsed_s for r in ran) if ran else None,
            sum(r.cached_calls for r in ran), round(statistics.fmean(r.partial for r in ran), 4) if ran else None,
            sum(1 for r in ran if r.sub_calls > 0), sum(r.root_calls for r in ran)))
    return out


def corpus_text(corpus: Corpus) -> CorpusText:
    """The :class:`CorpusText` view of a loaded corpus (decodes ``context`` once, on first use)."""
    spans = {f.path: (f.start, f.end) for f in corpus.files}

    def text(path: str) -> str:
        a, b = spans[path]
        return corpus.context[a:b]

    return CorpusText([f.path for f in corpus.files], text, lambda: corpus.context)


class _Corpora:
    """Derived corpora by edit key, made on first use and deleted after their last task."""

    def __init__(self, base: Corpus, tasks: list[tuple[Task, str]]) -> None:
        self.base = base
        self.lock = threading.Lock()
        self.made: dict[str, Corpus] = {}
        self.users: dict[str, int] = {}
        for task, _ in tasks:
            if task.edit is not None:
                self.users[task.edit.key] = self.users.get(task.edit.key, 0) + 1

    def get(self, task: Task) -> Corpus:
        edit = task.edit
        if edit is None:
            return self.base
        with self.lock:
            if edit.key not in self.made:
                self.made[edit.key] = derive_corpus(self.base, replace=edit.replace, add=list(edit.add))
            return self.made[edit.key]

    def done(self, task: Task) -> None:
        edit = task.edit
        if edit is None:
            return
        with self.lock:
            self.users[edit.key] -= 1
            if self.users[edit.key] == 0 and edit.key in self.made:
                shutil.rmtree(self.made.pop(edit.key).bundle_dir, ignore_errors=True)

    def close(self) -> None:
        with self.lock:
            for corpus in self.made.values():
                shutil.rmtree(corpus.bundle_dir, ignore_errors=True)
            self.made.clear()


def run_one(settings: Settings, paths: list[str], task: Task, mode: str, corpus: Corpus, *,
            emit: Emit) -> QuestionResult:
    """Ask ``task`` in ``mode`` through ``runner.ask`` and score it.

    Raises:
        ProviderError: an authentication / permission / unknown-model error (fatal for the eval).
    """
    from rlm_cli.app import runner

    s = dataclasses.replace(settings, mode=mode, trace=None)
    started = time.monotonic()
    res = QuestionResult(task, mode, "error")
    usage: UsageDoc | None

    def tap(ev: EventDict) -> None:
        if is_type(ev, "check") and ev.get("depth") == 0 and ev.get("verdict") != "accept":
            res.checks.append({"check": ev.get("check"), "verdict": ev.get("verdict"),
                               "iteration": ev.get("iteration"), "answer": str(ev.get("answer") or "")})
        emit(ev)

    try:
        outcome = runner.ask(s, paths, task.question, emit=tap, corpus=corpus)
        r = outcome.result
        res.status, res.answer, res.iterations, res.sub_calls = r.status, r.answer, r.iterations, r.sub_calls
        res.policy = r.policy
        res.support = r.support.verdict if r.support is not None else "partial"
        res.run_id, res.trace = outcome.run_id, str(outcome.trace_path) if outcome.trace_path else None
        usage = outcome.usage
    except DoesNotFitError as exc:
        res.status, res.error = "does_not_fit", exc.message
        res.elapsed_s = round(time.monotonic() - started, 3)
        return res
    except PartialAnswerError as exc:
        result = exc.report.result
        res.status = result.status if result is not None else "budget_exceeded"
        res.answer, res.error = exc.partial or "", exc.message
        res.support = "partial"
        res.iterations = result.iterations if result is not None else 0
        res.policy = result.policy if result is not None else ""
        res.sub_calls = result.sub_calls if result is not None else 0
        usage = exc.report.usage
        res.trace = str(exc.report.trace_path) if exc.report.trace_path else None
    except ProviderError as exc:
        if getattr(exc, "fatal", False) or getattr(exc, "status", None) in (401, 403, 404):
            raise
        res.error, usage = exc.message, None
        res.trace = str(exc.report.trace_path) if exc.report.trace_path else None
    except RLMError as exc:
        res.error, usage = exc.message, None
        res.trace = str(exc.report.trace_path) if exc.report.trace_path else None
    res.elapsed_s = round(time.monotonic() - started, 3)
    if usage is not None:  # none: the run asked no model (tokens, calls 0; cost unknown)
        res.tokens, res.root_calls = usage["total_tokens"], usage["root"]["calls"]
        res.cached_calls, res.cost_usd = usage["cached_calls"], usage["cost_usd"]
    if res.trace and not res.run_id:
        res.run_id = res.trace.rsplit("/", 1)[-1].removesuffix(".jsonl")
    res.correct = res.status == "final" and score(task.scorer, res.answer, task.gold, **task.extra)
    res.partial = partial(task.scorer, res.answer, task.gold, **task.extra) if res.status == "final" else 0.0
    for c in res.checks:
        c["right"] = bool(score(task.scorer, c["answer"], task.gold, **task.extra))
    return res


@dataclass
class CheckSummary:
    """How one answer check did over an evaluation: ``fired`` (times it sent an answer back or
    rewrote it), ``questions`` (questions it fired on), ``changed`` (firings after which the
    question's final answer differs from the answer judged), ``right_to_wrong`` (the judged
    answer would have scored correct, the final one did not) and ``wrong_to_right``."""

    check: str
    fired: int = 0
    questions: int = 0
    changed: int = 0
    right_to_wrong: int = 0
    wrong_to_right: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON form used in ``rlm eval --json``'s ``checks``."""
        return dataclasses.asdict(self)


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()).lower() == " ".join(b.split()).lower()


def summarize_checks(results: list[QuestionResult]) -> list[CheckSummary]:
    """One :class:`CheckSummary` per check that fired in ``results``, by name."""
    out: dict[str, CheckSummary] = {}
    for r in results:
        final_right = bool(r.correct)
        for name in dict.fromkeys(c["check"] for c in r.checks):
            out.setdefault(name, CheckSummary(name)).questions += 1
        for c in r.checks:
            cs = out.setdefault(c["check"], CheckSummary(c["check"]))
            cs.fired += 1
            cs.changed += not _same(c["answer"], r.answer)
            cs.right_to_wrong += c["right"] and not final_right
            cs.wrong_to_right += (not c["right"]) and final_right
    return [out[k] for k in sorted(out)]


@dataclass
class SupportSummary:
    """How one support verdict did over an evaluation: ``answers`` that got it and how many of
    those were ``correct``."""

    verdict: str
    answers: int = 0
    correct: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON form used in ``rlm eval --json``'s ``support``."""
        return dataclasses.asdict(self)


#: The support verdicts in report order (``""``: the run ended in an error).
SUPPORT_ORDER = ("observed", "computed", "unsupported", "partial", "")


def summarize_support(results: list[QuestionResult]) -> list[SupportSummary]:
    """One :class:`SupportSummary` per support verdict the results hold (runs that ran), in
    :data:`SUPPORT_ORDER`: whether the answers rlm stands behind are right more often than the rest."""
    out: dict[str, SupportSummary] = {}
    for r in results:
        if r.status == "does_not_fit":
            continue
        s = out.setdefault(r.support, SupportSummary(r.support or "error"))
        s.answers += 1
        s.correct += bool(r.correct)
    return [out[k] for k in SUPPORT_ORDER if k in out]


def run_eval(settings: Settings, paths: list[str], base: Corpus, tasks: list[Task], *, modes: list[str],
             jobs: int = 1, on_result: Progress | None = None, emit: Emit | None = None) -> list[QuestionResult]:
    """Run every task in every mode (``jobs`` at once) and return the results in task order.

    ``on_result`` is called (from worker threads, one at a time) as each question finishes;
    ``emit`` receives every trajectory event of every run (for warnings).

    Raises:
        ProviderError: a fatal provider error (authentication, unknown model): nothing more runs.
    """
    work = [(t, m) for t in tasks for m in modes]
    corpora = _Corpora(base, work)
    lock = threading.Lock()
    results: dict[int, QuestionResult] = {}
    stop = threading.Event()

    def one(i: int) -> None:
        task, mode = work[i]
        if stop.is_set():
            return
        try:
            corpus = corpora.get(task)
            try:
                res = run_one(settings, paths, task, mode, corpus, emit=emit or (lambda ev: None))
            finally:
                corpora.done(task)
        except BaseException:
            stop.set()
            raise
        with lock:
            results[i] = res
            if on_result is not None:
                on_result(res)

    errors: list[BaseException] = []

    def loop(queue: list[int]) -> None:
        while not stop.is_set():
            with lock:
                if not queue:
                    return
                i = queue.pop(0)
            try:
                one(i)
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                errors.append(exc)
                return

    try:
        if jobs <= 1:
            for i in range(len(work)):
                one(i)
        else:
            # Daemon threads: Ctrl-C in the main thread ends the command without waiting for the
            # questions in flight (their workers die with the process).
            queue = list(range(len(work)))
            threads = [threading.Thread(target=loop, args=(queue,), daemon=True, name=f"eval-{n}")
                       for n in range(min(jobs, len(work)))]
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(0.2)
            if errors:
                raise errors[0]
    finally:
        corpora.close()
    return [results[i] for i in sorted(results)]
