"""Trajectory housekeeping: ``rlm trace rm`` and ``rlm trace prune``.

Every run writes a trajectory to the traces folder (``output.trace.traces_dir``), about 25 KB each;
nothing removes them on its own (they are the record of what rlm did and what ``rlm replay`` runs
again), so these commands do, and only there: a path that resolves outside the traces folder,
or a file that is not a ``.jsonl`` trajectory, is refused before anything is removed.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from rlm_cli.errors import UsageError
from rlm_cli.output.trace import TraceInfo, find_trace, list_traces, traces_dir

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)


def parse_duration(text: str, flag: str) -> float:
    """Seconds in ``text``: a number and a unit, ``45s``, ``90m``, ``12h``, ``30d`` or ``2w``.

    Raises:
        UsageError: anything else (the message names ``flag``).
    """
    m = _DURATION.match(text)
    if not m:
        raise UsageError(f"{flag} {text!r} is not a duration", hint="e.g. 30d, 12h, 90m or 2w")
    return float(m.group(1)) * _UNITS[m.group(2).lower()]


def inside_traces(path: Path, folder: Path | None = None) -> Path:
    """``path`` resolved, when it is a ``.jsonl`` file directly in the traces folder.

    Raises:
        UsageError: it resolves elsewhere (a ``--trace FILE`` of your own, a link leading out), or
            is not a ``.jsonl`` file.
    """
    folder = (folder or traces_dir()).resolve()
    real = path.resolve()
    if real.parent != folder or real.suffix != ".jsonl" or not real.is_file():
        raise UsageError(f"{path} is not a trajectory in {folder}: rlm removes only those",
                         hint="remove a trajectory written with --trace FILE yourself")
    return real


@dataclass
class Removed:
    """What a removal did: the trajectories' ``paths`` and their ``bytes`` in all."""

    paths: list[Path]
    bytes: int


def remove(paths: list[Path], *, dry_run: bool = False) -> Removed:
    """Remove trajectory files (each checked with :func:`inside_traces` first, all before any is
    removed); with ``dry_run`` only say what would go. A file already gone counts as removed.

    Raises:
        UsageError: one of them is not a trajectory of the traces folder.
    """
    checked = [inside_traces(p) for p in paths]
    unique = list(dict.fromkeys(checked))
    size = 0
    for path in unique:
        try:
            size += path.stat().st_size
            if not dry_run:
                os.unlink(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise UsageError(f"cannot remove {path}: {exc.strerror or exc}") from None
    return Removed(unique, size)


def resolve_refs(refs: list[str]) -> list[Path]:
    """The trajectory files of ``refs`` (run ids, unique prefixes, ``last``, or ``.jsonl`` paths
    in the traces folder), every one resolved before anything is removed.

    Raises:
        UsageError: a ref matches nothing, or more than one trajectory, or lies outside the folder.
    """
    if not refs:
        raise UsageError("name the trajectories to remove", hint="rlm trace rm ID... (`rlm trace list` shows them)")
    return [inside_traces(find_trace(ref)) for ref in refs]


def select_prune(infos: list[TraceInfo], *, older_than_s: float | None, keep: int | None,
                 now: float | None = None) -> list[TraceInfo]:
    """The trajectories ``rlm trace prune`` removes from ``infos`` (newest first): those started
    over ``older_than_s`` seconds ago, and beyond the newest ``keep``; with both, only those that
    are both (``--keep`` always keeps that many).

    Raises:
        UsageError: neither rule is given.
    """
    if older_than_s is None and keep is None:
        raise UsageError("say which trajectories to prune", hint="--older-than 30d, --keep 100, or both")
    now = time.time() if now is None else now
    chosen = infos if keep is None else infos[keep:]
    if older_than_s is not None:
        chosen = [i for i in chosen if now - i.started > older_than_s]
    return chosen


def prune(*, older_than: str | None, keep: int | None, dry_run: bool = False) -> Removed:
    """``rlm trace prune``: remove (or with ``dry_run`` list) the trajectories :func:`select_prune` picks.

    Raises:
        UsageError: no rule, a bad duration, or a file that could not be removed.
    """
    older = None if older_than is None else parse_duration(older_than, "--older-than")
    chosen = select_prune(list_traces(), older_than_s=older, keep=keep)
    return remove([i.path for i in chosen], dry_run=dry_run)
