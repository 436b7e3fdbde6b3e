"""One question of a session, start to end: :class:`QuestionRun`.

``Session.ask`` makes one per question. It owns what a question has of its own: its model
client (over the session's usage, budgets, cache and backend), its trajectory file and the
chain of event sinks that writes it (turns counted -> phases -> progress groups closed ->
sources kept -> trajectory + terminal), its mode, and its answer (direct, or the RLM loop on a
lane's worker with the relay routed to this question). What it reads of the session (the plan,
the corpus, the conversation so far, the events of the session's opening) is described by
:class:`QuestionHost`; it writes back only through that protocol's methods (``remember``,
``track``, ``note_fatal``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Protocol

from rlm_cli import __version__, interrupts
from rlm_cli.answer_types import AnswerType
from rlm_cli.app import records
from rlm_cli.app.lane import Lane, QuestionClient
from rlm_cli.app.outcome import AskOutcome, TurnCounter, attach_partial, run_sources, status_of
from rlm_cli.app.phases import PhaseTagger
from rlm_cli.app.plan import RunPlan
from rlm_cli.config import Settings
from rlm_cli.corpus import Corpus
from rlm_cli.errors import DoesNotFitError, ExitCode, PartialAnswerError, RLMError
from rlm_cli.events import Emit, EventDict, event
from rlm_cli.loop.direct import run_direct
from rlm_cli.loop.fitting import direct_tokens, fit_question
from rlm_cli.loop.meta import CorpusMeta
from rlm_cli.loop.orchestrator import Orchestrator
from rlm_cli.loop.policy import Policy
from rlm_cli.loop.prompts import session_note
from rlm_cli.loop.recursion import recursion_handler, sub_call_event
from rlm_cli.loop.typed import AnswerSpec, settle
from rlm_cli.models.client import ModelClient
from rlm_cli.models.failures import CallFailed
from rlm_cli.models.relay import Route
from rlm_cli.output.documents import support_object
from rlm_cli.output.progress import Progress
from rlm_cli.output.sources import SourceCollector
from rlm_cli.output.trace import TraceSink, TraceWriter, new_run_id
from rlm_cli.sandbox.level import Level


def answer_spec(kind: str, corpus: Corpus | None) -> AnswerSpec:
    """The :class:`~rlm_cli.loop.typed.AnswerSpec` of a question whose answer has type ``kind``
    (its name) over ``corpus``: a ``locations`` answer is checked against its files and their line
    counts.

    Raises:
        ValueError: ``kind`` names no answer type.
    """
    answer_type = AnswerType(kind)
    if not answer_type.placed or corpus is None:
        return AnswerSpec(answer_type)
    return AnswerSpec(answer_type, {f.path: f.lines for f in corpus.files})


#: A question's ``--questions`` id, as the file gave it (a string or a number), or ``None``.
QuestionId = str | int | float | None


class QuestionHost(Protocol):
    """What a question reads of its session (``app.session.Session``) and the few ways it writes
    back to it."""

    id: str
    paths: list[str]
    record: bool
    numbered: bool
    conversation: bool
    independent: bool
    hold_final: bool
    settings: Settings
    plan: RunPlan | None
    corpus: Corpus | None
    meta: CorpusMeta
    hide: tuple[str, ...]
    fatal: CallFailed | None

    @property
    def level(self) -> Level | str:
        """The sandbox level (the session's, resolved when it opened)."""
        ...

    @property
    def mode(self) -> str:
        """The session's mode over its corpus (its plan's)."""
        ...

    def next_turn(self) -> int:
        """Number this question (1, 2, ...: ``/reset`` does not start it again)."""
        ...

    def question_client(self, emit: Emit, settings: Settings | None = None) -> ModelClient:
        """The model client of one question."""
        ...

    def settings_for(self, settings: Settings) -> Settings:
        """A copy of ``settings`` with the session's decisions."""
        ...

    def question_mode(self, question: str, note: str) -> tuple[str, str]:
        """``(mode, reason)`` of one question."""
        ...

    def opening_events(self, turn: int) -> list[EventDict]:
        """What the session did once, as question ``turn``'s trajectory needs it (no ``mode``)."""
        ...

    def history(self) -> list[tuple[str, str, str]]:
        """The conversation so far: ``(question, answer, status)`` each."""
        ...

    def remember(self, question: str, answer: str, status: str, trace_path: Path | None) -> None:
        """Keep one finished question for the conversation."""
        ...

    def track(self, client: ModelClient, active: bool) -> None:
        """Count ``client`` among the questions in progress (``active``) or no longer."""
        ...

    def note_fatal(self, failure: CallFailed) -> None:
        """A fatal provider error: the session's later questions end on it too."""
        ...

    def trace_path(self, run_id: str, turn: int) -> Path:
        """Where question ``turn``'s trajectory is written."""
        ...

    def worker_lane(self) -> Lane:
        """The session's REPL worker, started when it is not yet."""
        ...


class QuestionRun:
    """One question over ``session`` (see the module docstring): ``emit`` receives its events,
    ``qid`` is its ``--questions`` id, ``lane`` the worker it runs on (default: the session's),
    ``answer_type`` the type its answer must have, ``settings`` its own (``rlm audit``: a check's
    model; default the session's). :meth:`run` answers it, once."""

    def __init__(self, session: QuestionHost, question: str, *, emit: Emit, qid: QuestionId = None,
                 lane: Lane | None = None, answer_type: str = "text", settings: Settings | None = None) -> None:
        self.session = session
        self.question = question
        self.emit = emit
        self.qid = qid
        self.lane = lane
        self.answer_type = answer_type
        self.settings = settings

    def run(self) -> AskOutcome:
        """Answer the question (``Session.ask`` documents what it returns and raises)."""
        session, question, emit = self.session, self.question, self.emit
        plan = session.plan
        assert plan is not None and session.corpus is not None, "open() the session first"
        interrupts.clear()
        turn = session.next_turn()
        client = session.question_client(lambda ev: sink(ev), self.settings)
        session.track(client, True)
        run_id = new_run_id()
        trace_path = session.trace_path(run_id, turn) if session.record else None
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
        extra = {"session": session.id, "turn": turn, "id": self.qid} if session.numbered else {}
        own = session.settings_for(self.settings or session.settings)
        if AnswerType(self.answer_type).typed:
            extra["answer_type"] = self.answer_type
        sink(event("header", 0, run_id=run_id, rlm_version=__version__, question=question, cwd=os.getcwd(),
                   paths=[p if p == "-" else os.path.abspath(p) for p in session.paths],
                   config=own.redacted(), **extra))
        note = session_note(session.history()) if session.conversation else ""
        mode, reason = session.question_mode(question, note)
        mode_event = event("mode", 0, mode=mode, reason=reason, **plan.mode_fields())
        if writer is not None:  # what the session did once, as this question's trajectory needs it
            quiet = TraceSink(writer, lambda ev: None, totals=totals)
            for ev in session.opening_events(turn):
                quiet(ev)
            quiet(mode_event)
        if mode != session.mode:
            emit(mode_event)
        try:
            outcome = self._answer(note, mode, turns, client, progress, own,
                                   answer_spec(self.answer_type, session.corpus))
            res = outcome.result
            outcome.sources, outcome.sources_omitted = run_sources(collector, res.answer, outcome.corpus, res.mode)
            sink(event("summary", 0, status=res.status, answer=res.answer, support=support_object(res), mode=res.mode,
                       iterations=res.iterations,
                       sub_calls=res.sub_calls, usage=outcome.usage, elapsed_s=round(time.monotonic() - started, 3),
                       sources=outcome.sources, sources_omitted=outcome.sources_omitted))
            session.remember(question, res.answer, res.status, trace_path)
        except RLMError as exc:
            if isinstance(exc, CallFailed) and exc.fatal:
                session.note_fatal(exc)
            records.record_failure(exc, client, collector, sink, started, trace_path, turns.root_turns, plan.policy.name)
            session.remember(question, exc.partial if isinstance(exc, PartialAnswerError) else "", status_of(exc),
                             trace_path)
            if (exc.exit_code in (ExitCode.USAGE, ExitCode.NO_MODEL) and not client.usage.records
                    and writer is not None and created):
                records.discard_trace(exc, writer, new_dirs)  # bad input that never reached a model leaves nothing behind
            raise
        except (KeyboardInterrupt, SystemExit) as exc:  # Ctrl-C, or SIGTERM (SystemExit 143, see cli)
            if isinstance(client, QuestionClient):
                client.cancelled.set()
            records.record_interrupted(exc, client, sink, started, turns.root_turns)
            session.remember(question, "", "interrupted", trace_path)
            raise
        finally:
            if writer is not None:
                writer.close()
            session.track(client, False)
            if not session.hold_final or sys.exc_info()[0] is not None:
                interrupts.clear()  # the next question, or the error's report, may be interrupted
        outcome.run_id, outcome.trace_path = run_id, trace_path
        return outcome

    def _answer(self, note: str, mode: str, emit: Emit, client: ModelClient, progress: Progress,
                s: Settings, spec: AnswerSpec) -> AskOutcome:
        """The question answered in ``mode`` (its events to ``emit``), with ``s`` its settings."""
        if mode == "direct":
            return self._direct(note, emit, client, s, spec)
        return self._rlm(note, emit, client, progress, s, spec)

    def _policy(self) -> Policy | None:
        """The loop's policy: the plan's object (``None`` without a plan: the loop reads the
        name in its settings)."""
        plan = self.session.plan
        return plan.policy if plan is not None else None

    def _direct(self, note: str, emit: Emit, client: ModelClient, s: Settings, spec: AnswerSpec) -> AskOutcome:
        session, question = self.session, self.question
        corpus = session.corpus
        assert corpus is not None and s.root_model_window is not None
        needed = direct_tokens(corpus, question + note)
        if needed > s.root_model_window:
            raise DoesNotFitError(f"--mode direct: the corpus needs {needed:,} tokens but the root model's input "
                                  f"window is {s.root_model_window:,}", hint="use --mode rlm (or auto)")
        try:
            result = run_direct(s, client, f"{note}\n\nQuestion: {question}" if note else question,
                                corpus.context, emit=emit, answer=spec, policy=self._policy())
        except PartialAnswerError as exc:
            attach_partial(exc, client, corpus, "direct", session.level)
            raise
        result.typed = settle(result.answer, spec, emit)
        return AskOutcome(result, corpus, client.usage.summary(), session.level)

    def _rlm(self, note: str, emit: Emit, client: ModelClient, progress: Progress, s: Settings,
             spec: AnswerSpec) -> AskOutcome:
        session = self.session
        corpus = session.corpus
        assert corpus is not None
        lane = self.lane or session.worker_lane()
        if lane.questions:  # an earlier question's code that changed or hooked the worker could rewrite this answer
            lane.fresh_if_hooked(emit)
        if lane.questions and session.independent:
            lane.clear()
        elif lane.questions:  # what earlier questions left in the REPL
            note = session_note(session.history() if session.conversation else [], lane.variables())
        lane.questions += 1
        question, cut = fit_question(s, self.question, session.meta, 0, note)
        if cut:
            emit(event("notice", 0, message=cut, level="warning"))
        handler = lane.handler
        policy = self._policy()
        handler.route_to(Route(client, recursion_handler(s, client, handler, session.level, emit, corpus, session.hide,
                                                         policy),
                               lambda info: emit(sub_call_event(info)), progress.on_request))
        orch = Orchestrator(s, client, handler, sandbox_level=session.level, emit=emit, hide_paths=session.hide,
                            answer=spec, policy=policy)
        try:
            result = orch.run(question, lane.sandbox.spec, session.meta, sandbox=lane.sandbox, note=note)
        except PartialAnswerError as exc:
            attach_partial(exc, client, corpus, "rlm", session.level)
            raise
        finally:
            if client.fatal is not None:
                session.note_fatal(client.fatal)
        if client.fatal is not None:  # e.g. a sub-call's 401 in the block that called FINAL
            raise client.fatal
        result.typed = settle(result.answer, spec, emit)
        return AskOutcome(result, corpus, client.usage.summary(), session.level)
