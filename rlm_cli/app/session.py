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
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rlm_cli import __version__, interrupts
from rlm_cli.app import records
from rlm_cli.app.lane import Lane, QuestionClient, QuestionUsage, SessionBudget
from rlm_cli.app.outcome import AskOutcome, PastQuestion, TurnCounter, attach_partial, run_sources, status_of
from rlm_cli.app.phases import PhaseTagger
from rlm_cli.app.plan import ModelChoice, RunPlan, choose_models, make_plan
from rlm_cli.app.planning import answer_spec
from rlm_cli.config import Settings
from rlm_cli.corpus import Corpus, check_paths, load_corpus
from rlm_cli.corpus.tokens import encoding
from rlm_cli.errors import DoesNotFitError, ExitCode, PartialAnswerError, RLMError
from rlm_cli.events import Emit, event
from rlm_cli.loop.direct import run_direct
from rlm_cli.loop.fitting import choose_mode, direct_tokens, fit_question
from rlm_cli.loop.meta import corpus_meta
from rlm_cli.loop.orchestrator import Orchestrator
from rlm_cli.loop.prompts import session_note
from rlm_cli.loop.recursion import recursion_handler, sub_call_event
from rlm_cli.loop.typed import AnswerSpec, settle
from rlm_cli.loop.workers import level_notices
from rlm_cli.models.backend import check_router_file
from rlm_cli.models.budget import Budget
from rlm_cli.models.client import ModelClient
from rlm_cli.models.failures import CallFailed
from rlm_cli.models.relay import Route
from rlm_cli.models.usage import Usage
from rlm_cli.output.documents import support_object
from rlm_cli.output.progress import Progress, index_callback
from rlm_cli.output.sources import SourceCollector
from rlm_cli.output.trace import TraceSink, TraceWriter, new_run_id
from rlm_cli.sandbox.launcher import WorkerSpec
from rlm_cli.sandbox.level import Level
from rlm_cli.sandbox.levels import resolve_level
from rlm_cli.sandbox.memory import check_workers_fit

#: Seconds a Ctrl-C in ``rlm chat`` gives the running code block to stop before the worker is
#: restarted (losing its variables).
INTERRUPT_GRACE_S = 3.0


class Session:
    """One corpus, model layer and worker for several questions (see the module docstring).

    ``emit`` receives the session's own events (loading, notices, the mode) as they happen; the
    first question's trajectory gets them too. ``backend`` is where litellm runs (a started
    ``models.host.HostBackend``, or in this process); ``client`` replaces the model client for a
    one-question session (``rlm replay``); ``corpus`` is an already loaded corpus the caller
    keeps. ``conversation`` shows each question the earlier ones; ``numbered`` makes ``--trace
    FILE`` one file per question (``FILE`` with ``-N`` before its suffix) and adds ``session``,
    ``turn`` and ``id`` to the trajectory headers.
    """

    def __init__(self, settings: Settings, paths: list[str], *, emit: Emit, stdin_bytes: bytes | None = None,
                 backend: Any = None, client: ModelClient | None = None, corpus: Corpus | None = None,
                 record: bool = True, conversation: bool = False, numbered: bool = False,
                 interrupt_grace_s: float = 0.0) -> None:
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
        self._client = client  # made by open() once the models are chosen, unless given
        #: The models chosen (``open``, before the corpus loads), then everything ``open`` decided.
        self.models: ModelChoice | None = None
        self.plan: RunPlan | None = None
        self.corpus = corpus
        self._own_corpus = corpus is None
        self.level: Level | str = ""
        self.mode = ""
        self.hide = tuple(os.path.abspath(p) for p in paths if p != "-")
        self.lane: Lane | None = None
        self.turns: list[PastQuestion] = []
        self.fatal: CallFailed | None = None
        self._events: list[dict[str, Any]] = []  # the session's events, for the first trajectory
        self._corpus_event: dict[str, Any] | None = None
        self._mode_event: dict[str, Any] | None = None
        self._noted = False
        self._level_warning: str | None = None
        self.reason = ""
        self.meta: dict[str, Any] = {}
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
        return self.models.settings_for(settings) if self.models is not None else settings

    def _keep(self, emit: Emit) -> Emit:
        def keep(ev: dict[str, Any]) -> None:
            if ev.get("type") not in ("stream", "progress"):
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
                records.record_stopped_open(self._trace_path(self.id, 1), run_id=self.id, question=first_question,
                                    paths=self.paths, config=self.run_settings.redacted(), events=self._events, exc=exc,
                                    elapsed_s=time.monotonic() - self.started)
            raise

    def _open(self, first_question: str) -> None:
        s, emit = self.settings, self.emit
        check_paths(self.paths if self.corpus is None else [])  # a mistyped PATH: exit 2 before a model is sought
        models = self._choose_models()
        self.level, level_warning = resolve_level(s.sandbox)  # said when the worker starts
        self._level_warning = level_warning
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
        self.plan = plan = make_plan(s, self.client, models, self.level, level_warning)
        self.mode, self.reason = choose_mode(s, corpus.total_tokens, plan.root_window.tokens)
        self.mode, self.reason = self._question_mode(first_question, "")
        self._mode_event = event("mode", 0, mode=self.mode, reason=self.reason, **plan.mode_fields())
        emit(self._mode_event)
        if self.mode == "rlm":
            self.worker_lane()
        elif self.lane is not None:
            self.lane.close()
            self.lane = None

    def _choose_models(self) -> ModelChoice:
        """The root and sub-model (autodetected when none is configured, said as a notice), checked
        against ``--router-config``, warmed on the backend; the session's client is made for them.

        Raises:
            NoModelError, UsageError (a bad ``--router-config`` file).
        """
        emit = self.emit
        self.models = models = choose_models(self.settings, lambda message: emit(event("notice", 0, message=message)))
        s = self.run_settings
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
        self.mode, self.reason = choose_mode(self.settings, corpus.total_tokens, self.plan.root_window.tokens)
        if self.lane is not None:
            self.lane.sandbox.spec = WorkerSpec(index_file=corpus.index_file, context_file=corpus.context_file,
                                                data_file=corpus.data_file)
            self.lane.reset()
        return old

    def _question_mode(self, question: str, note: str) -> tuple[str, str]:
        """``(mode, reason)`` of one question: the session's, except that auto mode keeps a
        question in the REPL when the corpus with it needs over half the root model's window."""
        plan, corpus = self.plan, self.corpus
        assert corpus is not None and plan is not None
        needed = direct_tokens(corpus, question + note)
        window = plan.root_window.tokens
        if self.mode == "direct" and plan.mode_rule == "auto" and needed > window // 2:
            return "rlm", (f"the corpus is small, but with the question it needs {needed:,} tokens, over half "
                           f"the root model's window of {window:,}, so it stays in the REPL")
        return self.mode, self.reason

    def worker_lane(self) -> Lane:
        """The session's REPL worker, started now when it is not yet (a session in direct mode has
        none until something needs the REPL helpers: ``rlm mcp``'s ``grep`` and ``search``). Its
        first start says what the sandbox level leaves open and which user the worker runs as: when
        model code is about to run, never before a usage error, once per session (not per sub-RLM
        worker) and on the terminal once per machine (``loop.workers.level_notices``).

        Raises:
            SandboxError: the worker failed to start.
        """
        if self.lane is None:
            assert self.corpus is not None
            check_workers_fit(self.corpus, 1, self.settings.memory_limit)  # before a worker can be killed for memory
            self.lane = Lane(self)
            for ev in [] if self._noted else level_notices(self.level, self._level_warning):
                self.emit(ev)
            self._noted = True
        return self.lane

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
        if self.lane is not None:
            self.lane.reset()

    def abort(self) -> None:
        """Stop every question in progress (Ctrl-C in a multi-question run): their model calls
        are refused from now on and the session's worker is stopped."""
        with self._lock:
            for client in self._active:
                client.cancelled.set()
        if self.lane is not None:
            self.lane.sandbox.close()

    def close(self) -> None:
        """Stop the worker and delete a corpus loaded without the cache (idempotent)."""
        if self.lane is not None:
            self.lane.close()
            self.lane = None
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
        qclient = QuestionClient(self.run_settings, usage, self.question_budget(usage, settings or self.settings),
                                 cache=base.cache,
                                 backend=base.backend, limiter=base.limiter,
                                 notify=lambda m: emit(event("notice", 0, message=m, level="warning")))
        qclient.fatal = self.fatal
        return qclient

    def question_budget(self, usage: Usage, settings: Settings) -> Budget:
        """The budget a question's model calls are checked against (``usage``: the question's
        own; ``settings``: the question's): the session's, whose limits hold for every question
        together; ``rlm mcp`` gives each question a budget of its own, ``rlm audit`` a check with
        ``max_cost`` one within the session's."""
        return self.budget

    def ask(self, question: str, *, emit: Emit, qid: Any = None, lane: Lane | None = None, answer_type: str = "text",
            settings: Settings | None = None) -> AskOutcome:
        """Answer ``question`` with its own trajectory (``settings.trace`` or a new file under
        ``traces_dir()``), on ``lane`` (default: the session's worker). ``emit`` receives the
        question's events. ``answer_type``: the type the answer must have (``rlm_cli.loop.typed``;
        its value is ``outcome.result.typed``). ``settings``: this question's own (``rlm audit``: a
        check's model), resolved like the session's; default the session's.

        Raises:
            PartialAnswerError / BudgetExceededError / MaxIterationsError: stopped without a final
                answer (partial, usage, corpus, sources and ``trace_path`` attached).
            ProviderError, UsageError (a question too large for direct mode), SandboxError.
            KeyboardInterrupt: Ctrl-C (the trajectory records it; the question's sub-RLMs stop).
        """
        interrupts.clear()
        with self._lock:
            self.asked += 1
            turn = self.asked
        client = self.question_client(lambda ev: sink(ev), settings)
        if isinstance(client, QuestionClient):
            with self._lock:
                self._active.add(client)
        run_id = new_run_id()
        trace_path = self._trace_path(run_id, turn) if self.record else None
        created = trace_path is not None and not trace_path.exists()
        new_dirs = [d for d in trace_path.parents if not d.exists()] if created and trace_path is not None else []
        writer = TraceWriter(trace_path) if trace_path is not None else None
        totals = lambda: (client.usage.total_tokens, client.usage.cost_usd)  # noqa: E731
        # Events flow: turns counted -> phases -> progress groups closed -> sources kept -> trajectory + terminal.
        progress = Progress(TraceSink(writer, emit, totals=totals), totals)
        collector = SourceCollector(progress)
        sink = PhaseTagger(collector)
        turns = TurnCounter(sink)
        started = time.monotonic()
        extra = {"session": self.id, "turn": turn, "id": qid} if self.numbered else {}
        own = self.settings_for(settings or self.settings)
        if answer_type != "text":
            extra["answer_type"] = answer_type
        sink(event("header", 0, run_id=run_id, rlm_version=__version__, question=question, cwd=os.getcwd(),
                   paths=[p if p == "-" else os.path.abspath(p) for p in self.paths],
                   config=own.redacted(), **extra))
        note = session_note(self._history()) if self.conversation else ""
        mode, reason = self._question_mode(question, note)
        assert self.plan is not None, "open() the session first"
        mode_event = event("mode", 0, mode=mode, reason=reason, **self.plan.mode_fields())
        if writer is not None:  # what the session did once, as this question's trajectory needs it
            quiet = TraceSink(writer, lambda ev: None, totals=totals)
            for ev in self._events if turn == 1 else [self._corpus_event]:
                if ev is not None and ev is not self._mode_event:
                    quiet(ev)
            quiet(mode_event)
        if mode != self.mode:
            emit(mode_event)
        try:
            outcome = self._answer(question, note, mode, turns, client, progress, lane, own,
                                   answer_spec(answer_type, self.corpus))
            res = outcome.result
            outcome.sources, outcome.sources_omitted = run_sources(collector, res.answer, outcome.corpus, res.mode)
            sink(event("summary", 0, status=res.status, answer=res.answer, support=support_object(res), mode=res.mode,
                       iterations=res.iterations,
                       sub_calls=res.sub_calls, usage=outcome.usage, elapsed_s=round(time.monotonic() - started, 3),
                       sources=outcome.sources, sources_omitted=outcome.sources_omitted))
            self._remember(question, res.answer, res.status, trace_path)
        except RLMError as exc:
            if isinstance(exc, CallFailed) and exc.fatal:
                self.fatal = self.fatal or exc
            records.record_failure(exc, client, collector, sink, started, trace_path, turns.root_turns, self.plan.policy.name)
            self._remember(question, exc.partial if isinstance(exc, PartialAnswerError) else "", status_of(exc),
                           trace_path)
            if (exc.exit_code in (ExitCode.USAGE, ExitCode.NO_MODEL) and not client.usage.records
                    and writer is not None and created):
                records.discard_trace(exc, writer, new_dirs)  # bad input that never reached a model leaves nothing behind
            raise
        except (KeyboardInterrupt, SystemExit) as exc:  # Ctrl-C, or SIGTERM (SystemExit 143, see cli)
            if isinstance(client, QuestionClient):
                client.cancelled.set()
            records.record_interrupted(exc, client, sink, started, turns.root_turns)
            self._remember(question, "", "interrupted", trace_path)
            raise
        finally:
            if writer is not None:
                writer.close()
            with self._lock:
                self._active.discard(client)  # type: ignore[arg-type]
            if not self.hold_final or sys.exc_info()[0] is not None:
                interrupts.clear()  # the next question, or the error's report, may be interrupted
        outcome.run_id, outcome.trace_path = run_id, trace_path
        return outcome

    def _answer(self, question: str, note: str, mode: str, emit: Emit, client: ModelClient, progress: Progress,
                lane: Lane | None, s: Settings, spec: AnswerSpec) -> AskOutcome:
        corpus = self.corpus
        assert corpus is not None and s.root_model_window is not None
        if mode == "direct":
            needed = direct_tokens(corpus, question + note)
            if needed > s.root_model_window:
                raise DoesNotFitError(f"--mode direct: the corpus needs {needed:,} tokens but the root model's input "
                                      f"window is {s.root_model_window:,}", hint="use --mode rlm (or auto)")
            try:
                result = run_direct(s, client, f"{note}\n\nQuestion: {question}" if note else question,
                                    corpus.context, emit=emit, answer=spec)
            except PartialAnswerError as exc:
                attach_partial(exc, client, corpus, "direct", self.level)
                raise
            result.typed = settle(result.answer, spec, emit)
            return AskOutcome(result, corpus, client.usage.summary(), self.level)
        lane = lane or self.worker_lane()
        if lane.questions:  # an earlier question's code that changed or hooked the worker could rewrite this answer
            lane.fresh_if_hooked(emit)
        if lane.questions and self.independent:
            lane.clear()
        elif lane.questions:  # what earlier questions left in the REPL
            note = session_note(self._history() if self.conversation else [], lane.variables())
        lane.questions += 1
        question, cut = fit_question(s, question, self.meta, 0, note)
        if cut:
            emit(event("notice", 0, message=cut, level="warning"))
        handler = lane.handler
        handler.route_to(Route(client, recursion_handler(s, client, handler, self.level, emit, corpus, self.hide),
                               lambda info: emit(sub_call_event(info)), progress.on_request))
        orch = Orchestrator(s, client, handler, sandbox_level=self.level, emit=emit, hide_paths=self.hide, answer=spec)
        try:
            result = orch.run(question, lane.sandbox.spec, self.meta, sandbox=lane.sandbox, note=note)
        except PartialAnswerError as exc:
            attach_partial(exc, client, corpus, "rlm", self.level)
            raise
        finally:
            if client.fatal is not None:
                self.fatal = self.fatal or client.fatal
        if client.fatal is not None:  # e.g. a sub-call's 401 in the block that called FINAL
            raise client.fatal
        result.typed = settle(result.answer, spec, emit)
        return AskOutcome(result, corpus, client.usage.summary(), self.level)

    def _history(self) -> list[tuple[str, str, str]]:
        return [(t.question, t.answer, t.status) for t in self.turns]

    def _remember(self, question: str, answer: str, status: str, trace_path: Path | None) -> None:
        with self._lock:
            self.turns.append(PastQuestion(question, answer, status, trace_path))

    def _trace_path(self, run_id: str, turn: int) -> Path:
        return records.trace_path_for(self.settings.trace, self.numbered, run_id, turn)
