"""Transient progress events for the terminal: the root model's reply as it streams, sub-calls and
sub-RLMs in flight, and corpus indexing.

These events (``stream`` and ``progress``, see ``trace.TRANSIENT_TYPES``) go to the renderer
only, never to the trajectory. Nothing here prints.

* :func:`stream_callback` turns a root call's streamed pieces into ``stream`` events
  (``state``: ``start`` when the request is sent, ``delta`` with ``text``, ``restart`` when a
  broken stream is sent again).
* :class:`Progress` counts the worker's sub-call and ``rlm_query`` requests as the LMHandler
  serves them (its ``on_request`` hook) and emits ``progress`` events per *group*: one
  ``llm_query_batched`` call (``total`` known), or the single ``llm_query`` calls or the
  ``rlm_query`` calls of one code block (``total`` = started so far). A group is over when its
  batch is done, or when its code block ends (the ``output`` event, seen by wrapping ``emit``).
  Events are sent at most every :data:`MIN_INTERVAL_S` per group, but always for a group's first
  request, for each quarter of a batch completed, and for its end.
  Each event carries ``kind`` (``sub_calls`` or ``sub_rlms``), ``group``, ``batch`` (bool),
  ``done``, ``failed``, ``in_flight``, ``total``, ``elapsed_s``, the run's ``tokens`` and
  ``cost_usd`` so far (``None`` when a model is not priced) and ``finished``.
* :func:`index_callback` turns ``load_corpus``'s per-file progress into ``progress`` events of
  kind ``index`` (``files``, ``files_total``, ``bytes``, ``bytes_total``, ``rate_bps``,
  ``elapsed_s``, ``finished``), after :data:`INDEX_QUIET_S` seconds and at most every
  :data:`MIN_INTERVAL_S`.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlm_cli.events import Emit, EventDict, depth_of, event, is_type

#: Seconds between two progress events of one group (its start and end are always sent).
MIN_INTERVAL_S = 0.1
#: Indexing shorter than this shows no progress (small corpora load in a blink).
INDEX_QUIET_S = 0.5


def stream_callback(emit: Emit, depth: int, model: str) -> Callable[[str | None], None]:
    """Emit ``stream`` ``start`` now and return the ``on_delta`` for ``ModelClient.complete``."""
    emit(event("stream", depth, state="start", model=model))

    def on_delta(text: str | None) -> None:
        if text is None:
            emit(event("stream", depth, state="restart", model=model))
        elif text:
            emit(event("stream", depth, state="delta", model=model, text=text))

    return on_delta


#: Progress group ids, unique in the process (``Renderer`` drops late events of a finished group by id).
_GROUP_IDS = itertools.count(1)


@dataclass
class _Group:
    id: int
    kind: str  # "sub_calls" or "sub_rlms"
    depth: int
    batch: bool
    total: int
    started_at: float
    started: int = 0
    done: int = 0
    failed: int = 0
    last_sent: float = 0.0
    finished: bool = False
    #: The most calls of the group seen running at once.
    peak: int = 0

    @property
    def in_flight(self) -> int:
        """Calls of the group running. In a batch, a call that just finished leaves its slot to
        the next one, which the worker's thread sends at once: between the two the count would
        read one low (an event is sent right at a finish), so a batch counts the most seen
        running at once, never more than are left."""
        running = self.started - self.done - self.failed
        if not self.batch:
            return running
        return min(self.total - self.done - self.failed, max(running, self.peak))

    @property
    def quarter(self) -> int:
        """How many quarters of a batch are done (0 to 4; 0 for other groups)."""
        return 4 * (self.done + self.failed) // self.total if self.batch and self.total else 0


class Progress:
    """Sub-call and sub-RLM progress (see the module docstring). Call it as the ``emit`` target
    (it forwards every event) and give :meth:`on_request` to the LMHandler.

    ``totals()`` returns the run's ``(tokens, cost_usd or None)`` so far.
    """

    def __init__(self, forward: Emit, totals: Callable[[], tuple[int, float | None]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.forward = forward
        self.totals = totals
        self.clock = clock
        self._lock = threading.Lock()
        self._groups: dict[tuple[Any, ...], _Group] = {}
        self._ids = _GROUP_IDS  # unique in the process: a renderer outlives the questions of a session

    def __call__(self, ev: EventDict) -> None:
        if is_type(ev, "output") or is_type(ev, "final"):  # the block (or loop) is over: so are its groups
            depth = depth_of(ev)
            with self._lock:
                keys = [k for k, g in self._groups.items() if g.depth == depth]
                for g in [self._groups.pop(k) for k in keys]:
                    if not g.finished:
                        g.finished = True
                        self.forward(self._progress(g))
        self.forward(ev)

    def on_request(self, stage: str, depth: int, request: dict[str, Any], reply: dict[str, Any] | None) -> None:
        """The LMHandler's hook: ``stage`` is ``start`` or ``end`` (with the ``reply`` sent back)
        for a request of the worker at ``depth``."""
        kind = {"completion": "sub_calls", "rlm_query": "sub_rlms"}.get(str(request.get("type")))
        if kind is None:
            return
        batch = request.get("batch") if kind == "sub_calls" else None
        size = batch.get("size") if isinstance(batch, dict) else None
        bid = batch.get("id") if isinstance(batch, dict) else None
        is_batch = isinstance(size, int) and size > 0 and not isinstance(size, bool)
        key: tuple[Any, ...] = (depth, kind, bid if is_batch else None)
        now = self.clock()
        send = False
        with self._lock:
            g = self._groups.get(key)
            if g is None:
                if stage != "start":
                    return
                g = self._groups[key] = _Group(next(self._ids), kind, depth, is_batch,
                                               int(size) if is_batch else 0, now)  # type: ignore[arg-type]
                send = True
            quarter = g.quarter
            if stage == "start":
                g.started += 1
                g.peak = max(g.peak, g.started - g.done - g.failed)
                if not g.batch:
                    g.total = g.started
            elif reply is not None and reply.get("ok"):
                g.done += 1
            else:
                g.failed += 1
            send = send or g.quarter != quarter  # every quarter of a batch is reported
            if g.batch and g.done + g.failed >= g.total and g.in_flight == 0:
                g.finished = True
                self._groups.pop(key, None)
            if g.finished or send or now - g.last_sent >= MIN_INTERVAL_S:
                g.last_sent = now
                send = True
            if send:  # under the lock: the counts as of this request, and sent in their order
                self.forward(self._progress(g))

    def _progress(self, g: _Group) -> EventDict:
        """The ``progress`` event of ``g`` as it stands. Taken and forwarded under the lock: a
        quarter's event built once another thread had counted the next sub-call, or forwarded
        after that thread's, would say the next quarter, and this one would never be shown (a
        batch of 8 showed 2/8, 6/8, 8/8)."""
        tokens, cost = self.totals()
        return event("progress", g.depth, kind=g.kind, group=g.id, batch=g.batch, done=g.done,
                     failed=g.failed, in_flight=g.in_flight, total=g.total,
                     elapsed_s=round(self.clock() - g.started_at, 3), tokens=tokens,
                     cost_usd=None if cost is None else round(cost, 6), finished=g.finished)


def index_callback(emit: Emit, clock: Callable[[], float] = time.monotonic) -> Callable[[int, int, int, int], None]:
    """An ``on_progress(files_done, files_total, bytes_done, bytes_total)`` for ``load_corpus``
    that emits ``index`` progress events (see the module docstring)."""
    started = clock()
    last = [0.0, False]  # time of the last event, whether one was sent

    def on_progress(files: int, files_total: int, nbytes: int, bytes_total: int) -> None:
        now = clock()
        elapsed = now - started
        finished = files >= files_total
        if elapsed < INDEX_QUIET_S and not (finished and last[1]):
            return
        if not finished and now - float(last[0]) < MIN_INTERVAL_S:
            return
        if finished and not last[1]:
            return  # a load that never showed progress needs no last line either
        last[0], last[1] = now, True
        emit(event("progress", 0, kind="index", files=files, files_total=files_total, bytes=nbytes,
                   bytes_total=bytes_total, rate_bps=round(nbytes / elapsed) if elapsed > 0 else 0,
                   elapsed_s=round(elapsed, 3), finished=finished))

    return on_progress
