"""Starting a REPL worker for a loop: the one place a ``Sandbox`` is built for a relay.

The root loop of a session (``app.session.Lane``) and every loop that brings no worker of its
own (a sub-RLM, a one-off run: ``Orchestrator.run``) start theirs here, so the limits, the hidden
paths and the relay's per-worker token are set the same way for both.
"""

from __future__ import annotations

from typing import Any

from rlm_cli.config import Settings
from rlm_cli.events import Emit, event
from rlm_cli.models.relay import LMHandler
from rlm_cli.sandbox.launcher import Limits, Sandbox, WorkerSpec
from rlm_cli.sandbox.level import Level
from rlm_cli.sandbox.notices import shown_before
from rlm_cli.sandbox.users import run_notes


def new_worker(handler: LMHandler, level: Level | str, spec: WorkerSpec, settings: Settings, *, depth: int,
               hide_paths: tuple[str, ...] = (), interrupt_grace_s: float = 0.0) -> Sandbox:
    """A worker (not started yet) at sandbox ``level`` over ``spec``, with the run's limits
    (``settings.memory_limit`` bytes, ``max_concurrency`` sub-call threads, ``cell_timeout``
    seconds per block), ``hide_paths`` hidden from it and ``interrupt_grace_s`` seconds for a
    block to stop on Ctrl-C. ``handler`` issues a token for ``depth`` and serves it only to this
    worker's process (and its descendants), restarted or not."""
    token = handler.register(depth)
    sandbox = Sandbox(level, spec, socket_path=handler.socket_path, token=token,
                      limits=Limits(memory_bytes=settings.memory_limit, sub_call_threads=settings.max_concurrency),
                      cell_timeout=settings.cell_timeout)
    sandbox.hide_paths = hide_paths
    sandbox.interrupt_grace_s = interrupt_grace_s
    handler.bind(token, lambda: getattr(sandbox.proc, "pid", None))
    return sandbox


def start_worker(sandbox: Sandbox, emit: Emit, depth: int) -> None:
    """Start ``sandbox`` and report its notes as ``notice`` events at ``depth``: what happened at
    its start, and what it found about this machine (:func:`machine_notice`).

    Raises:
        SandboxError: the worker failed to start.
    """
    sandbox.start()
    for note in sandbox.notes:
        emit(event("notice", depth, message=note))
    for note in sandbox.machine_notes:
        emit(machine_notice(note, depth))


def level_notices(level: Level | str, warning: str | None) -> list[dict[str, Any]]:
    """The ``notice`` events of a session's first worker at sandbox ``level``: the ``warning`` of
    the level (what it leaves open on this machine) and the worker's user (``users.run_notes``),
    each a :func:`machine_notice`."""
    notes = [machine_notice(warning, level="warning")] if warning else []
    return notes + [machine_notice(note) for note in run_notes(level)]


def machine_notice(message: str, depth: int = 0, *, level: str | None = None) -> dict[str, Any]:
    """The ``notice`` event of a note that is the same on every run of this machine (what the
    sandbox level leaves open, the worker's user): marked ``verbose_only`` once it was shown on
    this machine (``sandbox.notices``), so the terminal shows it again only with ``-v``; the
    trajectory keeps it every time."""
    fields: dict[str, Any] = {"message": message, "machine": True}
    if level:
        fields["level"] = level
    if shown_before(message):
        fields["verbose_only"] = True
    return event("notice", depth, **fields)
