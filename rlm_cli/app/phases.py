"""The phase of each iteration, inferred from what its code did in the REPL worker.

The RLM method runs in four phases: **explore** (look at the corpus's structure or text:
``files``, ``chunks``, ``context``, ``grep``, ``search``, ``read_file``, ``chunk_text``),
**decompose** (send pieces to sub-calls or sub-RLMs: ``llm_query``, ``llm_query_batched``,
``llm_map``, ``rlm_query``), **aggregate** (run code that combines variables without new reads or calls) and
**terminate** (the iteration whose ``FINAL`` ended the loop). The worker counts the helper calls of
every block (``rlm_cli.sandbox.observe``) and reports them with its result; the orchestrator puts
them on ``output`` events as ``helpers``.

:class:`PhaseTagger` wraps the event callback: it adds ``phase`` to each ``output`` event and
emits one ``phase`` event per iteration (``iteration``, ``phase``, ``helpers``: the counts of all
its blocks) once the iteration is over: before the next ``iteration`` event of the same loop, or
before its ``final`` event. An iteration whose reply ran no code gets a phase only when it ended
the loop. Loops are told apart by thread and depth (a sub-RLM's loop runs in its own thread).
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

from rlm_cli.events import Emit, EventDict, depth_of, event, is_type

#: Helper names whose use is a look at the corpus (explore) or a model call (decompose).
EXPLORE = frozenset({"grep", "read_file", "search", "leads", "chunk_text", "files", "chunks", "context"})
DECOMPOSE = frozenset({"llm_query", "llm_query_batched", "llm_map", "rlm_query"})



def block_phase(helpers: dict[str, int]) -> str:
    """The phase of one code block from its helper counts: ``decompose`` when it called a model,
    else ``explore`` when it read the corpus, else ``aggregate``."""
    used = {k for k, v in helpers.items() if v}
    if used & DECOMPOSE:
        return "decompose"
    if used & EXPLORE:
        return "explore"
    return "aggregate"


def iteration_phase(helpers: dict[str, int], *, ran_code: bool, finished: bool) -> str | None:
    """The phase of an iteration: ``terminate`` when it ended the loop, else the phase of all its
    blocks' counts together, or ``None`` when it ran no code."""
    if finished:
        return "terminate"
    return block_phase(helpers) if ran_code else None


@dataclass
class _Open:
    iteration: int
    helpers: Counter[str] = field(default_factory=Counter)
    blocks: int = 0


class PhaseTagger:
    """An ``emit`` wrapper adding phases (see the module docstring); forwards every event."""

    def __init__(self, forward: Emit) -> None:
        self.forward = forward
        self._open: dict[tuple[int, int], _Open] = {}
        self._lock = threading.Lock()

    def __call__(self, ev: EventDict) -> None:
        depth = depth_of(ev)
        key = (threading.get_ident(), depth)
        if is_type(ev, "iteration"):
            self._close(key, depth, finished=False)
            with self._lock:
                self._open[key] = _Open(int(ev.get("iteration", 0)))
        elif is_type(ev, "output"):
            helpers = ev.get("helpers") or {}
            with self._lock:
                state = self._open.get(key)
                if state is not None:
                    state.helpers.update(helpers)
                    state.blocks += 1
            ev = {**ev, "phase": block_phase(helpers)}
        elif is_type(ev, "final"):
            self._close(key, depth, finished=ev.get("status") == "final")
        elif is_type(ev, "summary"):
            with self._lock:
                keys = list(self._open)
            for k in keys:
                self._close(k, k[1], finished=False)
        self.forward(ev)

    def _close(self, key: tuple[int, int], depth: int, *, finished: bool) -> None:
        with self._lock:
            state = self._open.pop(key, None)
        if state is None:
            return
        phase = iteration_phase(dict(state.helpers), ran_code=state.blocks > 0, finished=finished)
        if phase is not None:
            self.forward(event("phase", depth, iteration=state.iteration, phase=phase,
                               helpers=dict(state.helpers)))
