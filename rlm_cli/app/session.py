"""A session: one loaded corpus, one model layer and one REPL worker for one question or many.

``rlm ask`` (one question, or a list with ``--question``/``--questions``), ``rlm chat`` and
``runner.ask`` (``rlm eval``, ``rlm replay``) all run their questions here. :meth:`Session.open`
does what every question needs once: pick the model, load the corpus, decide the mode, resolve
the models' input windows and start the worker; :meth:`Session.ask` then runs one question with
its own trajectory, usage and sources, as many times as needed. Nothing is paid twice: the second
question starts at its first root call.

Start-up order (the point of the model host, ``rlm_cli.models.host``): the caller starts the host
first; while it imports litellm, ``open`` loads the corpus and, when the mode is sure to be
``rlm`` (``--mode rlm``, or a corpus over ``--direct-max-tokens``), starts the worker. Only the
input windows (and the first root call) wait for the host.

What a session keeps between questions:

* the REPL worker (a :class:`Lane`: worker + relay), so variables survive; each question is told
  which variables exist (``SHOW_VARS()``);
* in a *conversation* (``rlm chat``, and ``rlm ask`` with several questions one after another)
  the earlier questions and their answers, shown to the root model in compact form
  (``prompts.session_note``), so follow-up questions work;
* one usage total and one set of budgets (``--max-cost``, ``--max-tokens``, ``--max-sub-calls``,
  ``--timeout``): they hold for the session, not per question. Time spent waiting for the user
  (:meth:`Session.pause`) does not count against ``--timeout``.

What ``open`` decides is a frozen :class:`~rlm_cli.app.plan.RunPlan` (``Session.plan``); the
session's ``settings`` are never written: code that reads decisions from settings gets
:attr:`Session.run_settings`, a copy with the plan's decisions in it.

Each question gets its own ``ModelClient`` (:meth:`Session.question_client`): its own usage
records, also added to the session's, over the session's budget, cache, concurrency limiter and
backend; a fatal provider error (401/403/404) of one question ends the following ones too.

Who owns what: this module opens the session and holds what it decided (models, corpus, plan,
mode, the conversation); ``app.question.QuestionRun`` runs one question (its client,
trajectory, mode and answer); ``app.lane.LaneKeeper`` keeps the session's worker and relay
(started on first need, replaced, stopped).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rlm_cli.app import records
from rlm_cli.app.lane import Lane, LaneKeeper, QuestionClient, QuestionUsage, SessionBudget
from rlm_cli.app.outcome import AskOutcome, PastQuestion
from rlm_cli.app.plan import ModelChoice, Opening, RunPlan, choose_models, make_plan
from rlm_cli.app.question import QuestionId, QuestionRun
from rlm_cli.config import Settings
from rlm_cli.corpus import Corpus, check_paths, load_corpus
from rlm_cli.corpus.tokens import encoding
from rlm_cli.events import TRANSIENT_TYPES, Emit, EventDict, event
from rlm_cli.loop.fitting import direct_tokens
from rlm_cli.loop.meta import CorpusMeta, corpus_meta
from rlm_cli.models.backend import Backend
from rlm_cli.models.budget import Budget
from rlm_cli.models.client import ModelClient
from rlm_cli.models.failures import CallFailed
from rlm_cli.models.router_file import check_router_file
from rlm_cli.models.usage import Usage
from rlm_cli.output.progress import index_callback
from rlm_cli.output.trace import new_run_id
from rlm_cli.sandbox.level import Level
from rlm_cli.sandbox.levels import resolve_level

#: Seconds a Ctrl-C in ``rlm chat`` gives the running code block to stop before the worker is
#: restarted (losing its variables).
INTERRUPT_GRACE_S = 3.0

#: How a question's budget is made: ``(the session's budget, the question's usage, its settings,
#: whether those are its own) -> Budget`` (``Session(question_budget=...)``).
QuestionBudget = Callable[[Budget, Usage, Settings, bool], Budget]


def shared_budget(session_budget: Budget, usage: Usage, settings: Settings, own: bool) -> Budget:
    """The default :data:`QuestionBudget`: every question is checked against the session's
    budget, whose limits hold for all questions together."""
    return session_budget


class Session:
    """One corpus, model layer and worker for several questions (see the module docstring).

    ``emit`` receives the session's own events (loading, notices, the mode) as they happen; the
    first question's trajectory gets them too. ``backend`` is where litellm runs (a started
    ``models.host.HostBackend``, or in this process); ``client`` replaces the model client for a
    one-question session (``rlm replay``); ``corpus`` is an already loaded corpus the caller
    keeps. ``conversation`` shows each question the earlier ones; ``numbered`` makes ``--trace
    FILE`` one file per question (``FILE`` with ``-N`` before its suffix) and adds ``session``,
    ``turn`` and ``id`` to the trajectory headers. ``question_budget`` makes each question's
    budget (:data:`QuestionBudget`; default :func:`shared_budget`): ``rlm mcp`` gives each
    question one of its own, ``rlm audit`` a check with ``max_cost`` one within the session's.
    """

    def __init__(self, settings: Settings, paths: list[str], *, emit: Emit, stdin_bytes: bytes | None = None,
                 backend: Backend | None = None, client: ModelClient | None = None, corpus: Corpus | None = None,
                 record: bool = True, conversation: bool = False, numbered: bool = False,
                 interrupt_grace_s: float = 0.0, question_budget: QuestionBudget = shared_budget) -> None:
        self.settings = dataclasses.replace(settings)  # never written: decisions go to self.plan
        self.paths = paths
        self.emit = self._keep(emit)
        self.stdin_bytes = stdin_bytes
        self.record = record
        self.conversation = conversation
        self.numbered = numbered
        self.interrupt_grace_s = interrupt_grace_s
        #: Questions do not share variables (``--jobs``): a lane's namespace is cleared between them.
        self.independent = False
        self.id = new_run_id()
        self.started = time.monotonic()
        self._given_client = client
        self.usage = client.usage if client is not None else Usage()
        self.budget = client.budget if client is not None else SessionBudget(self.settings, self.usage,
                                                                             started=self.started)
        self._backend = backend
        self._question_budget = question_budget
        self._client = client  # made by open() once the models are chosen, unless given
        #: The models and the sandbox level (``open``, before the corpus loads), then everything it decided.
        self.opening: Opening | None = None
        self.plan: RunPlan | None = None
        self.corpus = corpus
        self._own_corpus = corpus is None
        self.hide = tuple(os.path.abspath(p) for p in paths if p != "-")
        #: The session's own REPL worker and relay (started when first needed).
        self.workers = LaneKeeper()
        self.turns: list[PastQuestion] = []
        self.fatal: CallFailed | None = None
        self._events: list[EventDict] = []  # the session's events, for the first trajectory
        self._corpus_event: EventDict | None = None
        self._mode_event: EventDict | None = None
        #: What the root model is told of the corpus (``open``; no corpus before it).
        self.meta: CorpusMeta = {"chars": 0, "tokens": 0, "files": 0, "chunks": 0, "prefix": ""}
        self._lock = threading.Lock()
        #: Questions asked so far (``/reset`` does not start it again: it numbers the trajectories).
        self.asked = 0
        #: A final answer keeps Ctrl-C dropped after :meth:`ask` returns (``rlm_cli.interrupts``).
        self.hold_final = False
        self._active: set[QuestionClient] = set()

    @property
    def client(self) -> ModelClient:
        """The session's model client (the given one, or the one :meth:`open` made)."""
        assert self._client is not None, "open() the session first"
        return self._client

    @property
    def run_settings(self) -> Settings:
        """The session's settings with what :meth:`open` decided so far in a copy of them (the
        models, then the windows and the policy's name), for code that reads them from settings."""
        return self.settings_for(self.settings)

    def settings_for(self, settings: Settings) -> Settings:
        """A copy of ``settings`` (the session's, or a question's own) with the session's decisions."""
        if self.plan is not None:
            return self.plan.settings_for(settings)
        return self.opening.models.settings_for(settings) if self.opening is not None else settings

    def _keep(self, emit: Emit) -> Emit:
        def keep(ev: EventDict) -> None:
            if ev.get("type") not in TRANSIENT_TYPES:
                self._events.append(ev)
            emit(ev)
        return keep

    # -- once per session ---------------------------------------------------------------------------
    def open(self, first_question: str = "") -> None:
        """Pick the model, load the corpus, choose the mode, resolve the windows, start the worker.
        ``first_question`` (a one-question session) counts in auto mode's choice, as each question
        does later (:meth:`_question_mode`). Stopped by Ctrl-C or SIGTERM, it still writes the run's
        trajectory (``records.record_stopped_open``).

        Raises:
            NoModelError, UsageError (bad paths, an empty corpus), SandboxError, HostUnavailable.
        """
        try:
            self._open(first_question)
        except (KeyboardInterrupt, SystemExit) as exc:
            if self.record:
                records.record_stopped_open(self.trace_path(self.id, 1), run_id=self.id, question=first_question,
                                    paths=self.paths, config=self.run_settings.redacted(), events=self._events, exc=exc,
                                    elapsed_s=time.monotonic() - self.started)
            raise

    def _open(self, first_question: str) -> None:
        s, emit = self.settings, self.emit
        check_paths(self.paths if self.corpus is None else [])  # a mistyped PATH: exit 2 before a model is sought
        models = self._choose_models()
        level, level_warning = resolve_level(s.sandbox)  # said when the worker starts
        self.opening = Opening(models, level, level_warning)
        started = time.monotonic()
        if self.corpus is None:
            self.corpus = load_corpus(self.paths, s.corpus, stdin_bytes=self.stdin_bytes,
                                      on_warning=lambda w: emit(event("notice", 0, message=w, level="warning")),
                                      on_progress=index_callback(emit), deadline=self.budget.deadline)
        corpus = self.corpus
        self._corpus_event = records.corpus_event(corpus, time.monotonic() - started, self.level)
        emit(self._corpus_event)
        self.meta = corpus_meta(corpus)
        surely_rlm = s.mode == "rlm" or (s.mode == "auto" and corpus.total_tokens >= s.direct_max_tokens)
        if surely_rlm:  # the worker starts while litellm is still being imported when the mode cannot be direct
            self.worker_lane()
        encoding()  # tiktoken's table (0.3-0.7 s; every request needs it), loaded while the host imports litellm
        self.plan = plan = make_plan(s, self.client, models, level, level_warning,
                                     corpus_tokens=corpus.total_tokens, needed=direct_tokens(corpus, first_question))
        self._mode_event = event("mode", 0, mode=plan.mode, reason=plan.mode_reason, **plan.mode_fields())
        emit(self._mode_event)
        if plan.mode == "rlm":
            self.worker_lane()
        else:
            self.workers.close()

    def _choose_models(self) -> ModelChoice:
        """The root and sub-model (autodetected when none is configured, said as a notice), checked
        against ``--router-config``, warmed on the backend; the session's client is made for them.

        Raises:
            NoModelError, UsageError (a bad ``--router-config`` file).
        """
        emit = self.emit
        models = choose_models(self.settings, lambda message: emit(event("notice", 0, message=message)))
        s = models.settings_for(self.settings)
        for note in check_router_file(s.router_config, [s.model, s.sub_model]) if s.router_config else []:
            emit(event("notice", 0, message=note, level="warning"))  # a bad file: exit 2 before loading
        if self._client is None:
            self._client = ModelClient(s, self.usage, self.budget, backend=self._backend,
                                       notify=lambda m: self.emit(event("notice", 0, message=m, level="warning")))
            warm = getattr(self._client.backend, "warm", None)
            if callable(warm):
                warm([s.model, s.effective_sub_model])
        return models

    def use_corpus(self, corpus: Corpus, load_s: float = 0.0) -> Corpus | None:
        """Answer the next questions over ``corpus``, a new load of the session's paths (``rlm
        mcp`` after files changed): the corpus description, the ``corpus`` event of the next
        trajectories and the mode follow it, and the worker is restarted on its bundle (the REPL's
        variables are gone). Call it between questions, from the thread that opened the session.
        Returns the corpus it replaces, which the caller releases (``Corpus.release``).

        Raises:
            SandboxError: the new worker failed to start.
        """
        assert self.plan is not None, "open() the session first"
        old, self.corpus = self.corpus, corpus
        self.meta = corpus_meta(corpus)
        self._corpus_event = records.corpus_event(corpus, load_s, self.level)
        self.plan = self.plan.over_corpus(self.settings, corpus.total_tokens)
        self.workers.use_corpus(corpus)
        return old

    def question_mode(self, question: str, note: str) -> tuple[str, str]:
        """``(mode, reason)`` of one question: the session's, except that auto mode keeps a
        question in the REPL when the corpus with it needs over half the root model's window."""
        plan, corpus = self.plan, self.corpus
        assert corpus is not None and plan is not None
        return plan.question_mode(direct_tokens(corpus, question + note))

    @property
    def mode(self) -> str:
        """The session's mode over its corpus (``rlm`` or ``direct``; ``""`` until it opens): the plan's."""
        return self.plan.mode if self.plan is not None else ""

    @property
    def level(self) -> Level | str:
        """The sandbox level (``""`` before :meth:`open` resolved it)."""
        return self.opening.level if self.opening is not None else ""

    @property
    def models(self) -> ModelChoice | None:
        """The root and sub-model (``None`` before :meth:`open` chose them)."""
        return self.opening.models if self.opening is not None else None

    @property
    def reason(self) -> str:
        """Why the session has its mode (the plan's ``mode_reason``)."""
        return self.plan.mode_reason if self.plan is not None else ""

    def worker_lane(self) -> Lane:
        """The session's REPL worker, started now when it is not yet (a session in direct mode has
        none until something needs the REPL helpers: ``rlm mcp``'s ``grep`` and ``search``). Its
        first start says what the sandbox level leaves open and which user the worker runs as: when
        model code is about to run, never before a usage error, once per session (not per sub-RLM
        worker) and on the terminal once per machine (``app.lane.LaneKeeper``).

        Raises:
            SandboxError: the worker failed to start.
        """
        return self.workers.get(self, self.opening.level_warning if self.opening is not None else None)

    @property
    def lane(self) -> Lane | None:
        """The session's REPL worker and relay, if started."""
        return self.workers.lane

    def pause(self) -> None:
        """Waiting for the user: ``--timeout`` does not run meanwhile."""
        if isinstance(self.budget, SessionBudget):
            self.budget.pause()

    def resume(self) -> None:
        """Back to work: ``--timeout`` runs again."""
        if isinstance(self.budget, SessionBudget):
            self.budget.resume()

    def reset(self) -> None:
        """Forget the conversation and start a fresh worker (every REPL variable is gone).

        Raises:
            SandboxError: the new worker failed to start.
        """
        self.turns.clear()
        self.workers.reset()

    def abort(self) -> None:
        """Stop every question in progress (Ctrl-C in a multi-question run): their model calls
        are refused from now on and the session's worker is stopped."""
        with self._lock:
            for client in self._active:
                client.cancelled.set()
        self.workers.stop()

    def close(self) -> None:
        """Stop the worker and delete a corpus loaded without the cache (idempotent)."""
        self.workers.close()
        if self.corpus is not None and self.corpus.temporary and self._own_corpus:
            shutil.rmtree(self.corpus.bundle_dir, ignore_errors=True)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- once per question -----------------------------------------------------------------------------
    def question_client(self, emit: Emit, settings: Settings | None = None) -> ModelClient:
        """The model client of one question (see the module docstring; ``settings``: the
        question's own, when it has some); the given client of a one-question session as is."""
        if self._given_client is not None:
            return self._given_client
        base = self.client
        usage = QuestionUsage(self.usage)
        budget = self._question_budget(self.budget, usage, settings or self.settings, settings is not None)
        qclient = QuestionClient(self.run_settings, usage, budget,
                                 cache=base.cache, backend=base.backend, limiter=base.limiter, said=base.said,
                                 windows=self.plan.windows() if self.plan is not None else None,
                                 notify=lambda m: emit(event("notice", 0, message=m, level="warning")))
        qclient.fatal = self.fatal
        return qclient

    def ask(self, question: str, *, emit: Emit, qid: QuestionId = None, lane: Lane | None = None, answer_type: str = "text",
            settings: Settings | None = None) -> AskOutcome:
        """Answer ``question`` with its own trajectory (``settings.trace`` or a new file under
        ``traces_dir()``), on ``lane`` (default: the session's worker): an
        ``app.question.QuestionRun``. ``emit`` receives the question's events. ``answer_type``:
        the type the answer must have (``rlm_cli.loop.typed``; its value is
        ``outcome.result.typed``). ``settings``: this question's own (``rlm audit``: a check's
        model), resolved like the session's; default the session's.

        Raises:
            PartialAnswerError / BudgetExceededError / MaxIterationsError: stopped without a final
                answer (partial, usage, corpus, sources and ``trace_path`` attached).
            ProviderError, UsageError (a question too large for direct mode), SandboxError.
            KeyboardInterrupt: Ctrl-C (the trajectory records it; the question's sub-RLMs stop).
        """
        return QuestionRun(self, question, emit=emit, qid=qid, lane=lane, answer_type=answer_type,
                           settings=settings).run()

    # -- what a question reads and writes of its session (``app.question.QuestionHost``) -------------
    def next_turn(self) -> int:
        """Number the next question (1, 2, ...; ``/reset`` does not start it again)."""
        with self._lock:
            self.asked += 1
            return self.asked

    def opening_events(self, turn: int) -> list[EventDict]:
        """What the session did once, as question ``turn``'s trajectory needs it: every event of
        the opening for the first question, the ``corpus`` event for the others; never the
        session's ``mode`` event (each question writes its own)."""
        events = self._events if turn == 1 else [self._corpus_event]
        return [ev for ev in events if ev is not None and ev is not self._mode_event]

    def history(self) -> list[tuple[str, str, str]]:
        """The conversation so far: ``(question, answer, status)`` of each earlier question."""
        return [(t.question, t.answer, t.status) for t in self.turns]

    def remember(self, question: str, answer: str, status: str, trace_path: Path | None) -> None:
        """Keep one finished question (for the conversation and ``/history``)."""
        with self._lock:
            self.turns.append(PastQuestion(question, answer, status, trace_path))

    def track(self, client: ModelClient, active: bool) -> None:
        """Count a question's ``client`` among those :meth:`abort` cancels (``active``), or no longer."""
        if not isinstance(client, QuestionClient):
            return
        with self._lock:
            if active:
                self._active.add(client)
            else:
                self._active.discard(client)

    def note_fatal(self, failure: CallFailed) -> None:
        """A fatal provider error (401/403/404): the session's later questions end on it (the first kept)."""
        self.fatal = self.fatal or failure

    def trace_path(self, run_id: str, turn: int) -> Path:
        """Where question ``turn``'s trajectory is written (``--trace FILE``, numbered, or a new file)."""
        return records.trace_path_for(self.settings.trace, self.numbered, run_id, turn)
