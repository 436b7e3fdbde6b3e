"""A session's REPL lanes and the model layer of one question.

A :class:`Lane` is one REPL worker at depth 0 and the relay serving it; a session has one, and
``rlm ask --jobs N`` one per thread (``app.batch``). :class:`QuestionUsage`,
:class:`SessionBudget` and :class:`QuestionClient` give each question of a session its own
usage records and Ctrl-C over the session's totals and budgets (``app.session``).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

from rlm_cli.config import Settings
from rlm_cli.corpus import Corpus
from rlm_cli.errors import InterruptedRunError
from rlm_cli.events import Emit, event
from rlm_cli.loop.workers import level_notices, new_worker, start_worker
from rlm_cli.models.budget import Budget
from rlm_cli.models.client import Completion, ModelClient, OnDelta
from rlm_cli.models.relay import LMHandler
from rlm_cli.models.usage import CallRecord, Counter, Usage
from rlm_cli.sandbox.memory import check_workers_fit
from rlm_cli.sandbox.results import WorkerCheck


class LaneOwner(Protocol):
    """What a lane needs of its session (``app.session.Session``)."""

    settings: Settings
    corpus: Corpus | None
    hide: tuple[str, ...]
    interrupt_grace_s: float
    emit: Emit

    @property
    def level(self) -> str:
        """The sandbox level."""
        ...

    @property
    def client(self) -> ModelClient:
        """The session's model client."""
        ...


class QuestionUsage(Usage):
    """One question's usage: its own records and counters, each also added to the session's
    ``parent`` (which the budgets read)."""

    def __init__(self, parent: Usage) -> None:
        super().__init__()
        self.parent = parent
        self.limiter = parent.limiter

    def add(self, record: CallRecord) -> None:
        """Append one request's usage here and to the session."""
        super().add(record)
        self.parent.add(record)

    def count(self, name: Counter, n: int = 1) -> None:
        """Add ``n`` to counter ``name`` here and in the session."""
        super().count(name, n)
        self.parent.count(name, n)

    def took_off(self, model: str, role: str) -> None:
        """A call was sent, here and in the session."""
        super().took_off(model, role)
        self.parent.took_off(model, role)

    def landed(self, model: str, role: str, record: CallRecord | None) -> None:
        """A call ended, here and in the session."""
        super().landed(model, role, record)
        self.parent.landed(model, role, record)


class SessionBudget(Budget):
    """The session's budgets; :meth:`pause`/:meth:`resume` keep time spent waiting for the user
    out of ``--timeout`` (the deadline moves by the pause)."""

    def __init__(self, settings: Settings, usage: Usage, *, started: float | None = None) -> None:
        super().__init__(settings, usage, started=started)
        self._paused_at: float | None = None

    def pause(self) -> None:
        """Stop the ``--timeout`` clock (idempotent)."""
        if self._paused_at is None:
            self._paused_at = time.monotonic()

    def resume(self) -> None:
        """Restart the ``--timeout`` clock, moving the deadline by the time paused."""
        if self._paused_at is not None:
            if self.deadline is not None:
                self.deadline += time.monotonic() - self._paused_at
            self._paused_at = None


class QuestionClient(ModelClient):
    """A question's model client: refuses every call once ``cancelled`` is set (Ctrl-C), so the
    sub-RLM loops of an interrupted question stop at their next model call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cancelled = threading.Event()

    def complete(self, messages: list[dict[str, Any]], *, model: str, role: str, depth: int = 0,
                 on_delta: OnDelta | None = None, temperature: float | None = None) -> Completion:
        """``ModelClient.complete``, unless the question was interrupted.

        Raises:
            InterruptedRunError: the question was interrupted (Ctrl-C).
        """
        if self.cancelled.is_set():
            raise InterruptedRunError("interrupted (Ctrl-C)")
        return super().complete(messages, model=model, role=role, depth=depth, on_delta=on_delta,
                                temperature=temperature)


class Lane:
    """One REPL worker at depth 0 and the relay serving it, for questions one after another.

    The worker dies with the thread that started it (see ``Sandbox``): create, use and close a
    lane in one thread. Before each question :meth:`Session.ask` points the relay at that
    question's client and event sink.
    """

    def __init__(self, session: LaneOwner) -> None:
        s, corpus = session.settings, session.corpus
        assert corpus is not None
        self.handler = LMHandler(session.client)
        self.sandbox = new_worker(self.handler, session.level, corpus.worker_spec(), s, depth=0, hide_paths=session.hide,
                                  interrupt_grace_s=session.interrupt_grace_s)
        self.questions = 0
        try:
            start_worker(self.sandbox, session.emit, 0)
        except BaseException:
            self.handler.close()
            raise

    def variables(self) -> str:
        """The worker's ``SHOW_VARS()`` listing (``""`` when it cannot be read)."""
        result = self.sandbox.execute("_rlm_vars = SHOW_VARS()\ndel _rlm_vars", cell=0, timeout=10.0,
                                      map_output=False)
        return "" if result.lost or not result.ok else result.output

    def clear(self) -> None:
        """Delete every variable of the REPL namespace, keeping the worker (``context`` and the
        helpers are put back before the next block): questions run with ``--jobs`` start clean."""
        self.sandbox.execute("for _rlm_k in [k for k in globals() if not (k.startswith('__') and k.endswith('__'))]:\n"
                             "    globals().pop(_rlm_k, None)\nglobals().pop('_rlm_k', None)", cell=0, timeout=10.0,
                             map_output=False)

    def fresh_if_hooked(self, emit: Emit) -> bool:
        """Replace the worker, with a warning to ``emit``, when earlier code changed it or left
        anything in it that would run during later code (``Sandbox.check``); whether it did.

        Raises:
            SandboxError: the new worker failed to start.
        """
        found = self.sandbox.check()
        if found:
            self.reset()
            emit(event("notice", 0, level="warning", message=replaced_worker_note(found)))
        return bool(found)

    def reset(self) -> None:
        """A fresh worker: every variable is gone; ``context`` and the helpers are loaded again.

        Raises:
            SandboxError: the new worker failed to start.
        """
        self.sandbox.restart()
        self.questions = 0

    def close(self) -> None:
        """Stop the worker and the relay (idempotent)."""
        self.sandbox.close()
        self.handler.close()


class LaneKeeper:
    """The lifecycle of a session's own lane (worker and relay): started on first need, with what
    the sandbox level leaves open said once per session (``loop.workers.level_notices``), pointed
    at a new corpus, replaced, stopped and closed. ``rlm ask --jobs N``'s other lanes are the
    batch's own (``app.batch``)."""

    def __init__(self) -> None:
        self.lane: Lane | None = None
        self._noted = False

    def get(self, owner: LaneOwner, level_warning: str | None) -> Lane:
        """The lane, started now when it is not yet; its first start says ``level_warning`` (what
        ``--sandbox auto`` could not get) and what the level leaves open, through ``owner.emit``.

        Raises:
            SandboxError: the worker failed to start.
            UsageError: the corpus is too large for the worker's ``--memory-limit``.
        """
        if self.lane is None:
            assert owner.corpus is not None
            check_workers_fit(owner.corpus, 1, owner.settings.memory_limit)  # before a worker can be killed for memory
            self.lane = Lane(owner)
            for ev in [] if self._noted else level_notices(owner.level, level_warning):
                owner.emit(ev)
            self._noted = True
        return self.lane

    def use_corpus(self, corpus: Corpus) -> None:
        """Restart the lane's worker (if any) on ``corpus``'s bundle: its variables are gone.

        Raises:
            SandboxError: the new worker failed to start.
        """
        if self.lane is not None:
            self.lane.sandbox.spec = corpus.worker_spec()
            self.lane.reset()

    def reset(self) -> None:
        """A fresh worker (when there is one).

        Raises:
            SandboxError: the new worker failed to start.
        """
        if self.lane is not None:
            self.lane.reset()

    def stop(self) -> None:
        """Stop the worker now (Ctrl-C in a multi-question run); the lane stays until :meth:`close`."""
        if self.lane is not None:
            self.lane.sandbox.close()

    def close(self) -> None:
        """Stop the worker and the relay and forget the lane (idempotent)."""
        if self.lane is not None:
            self.lane.close()
            self.lane = None


def replaced_worker_note(found: WorkerCheck) -> str:
    """The warning of a worker replaced between questions because of what ``found`` names."""
    what = []
    if found.changed:
        what.append(f"changed the REPL worker's own code ({', '.join(found.changed[:3])})")
    if found.hooks:
        what.append(f"left code in the REPL worker that would run during later questions ({', '.join(found.hooks[:3])})")
    if found.unanswered:
        what.append("left the REPL worker unable to answer its check")
    return (f"an earlier question's code {' and '.join(what)}; a fresh worker was started, so the REPL variables "
            "of earlier questions are gone")
