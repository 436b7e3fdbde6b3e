"""Trajectory events, their JSONL files, and reading them back.

Every line is one JSON object with ``schema`` (version), ``type``, ``depth`` (0 for the root
loop, +1 per ``rlm_query`` level; a sub-call is one level below the loop that made it) and
``ts`` (Unix seconds). The first line has ``type: "header"``: the run id, the question, the
corpus paths and the configuration with secrets removed (``Settings.redacted()``). Every line
written by :class:`TraceSink` also carries ``total_tokens`` and ``total_cost_usd``: the run's
usage so far.

Event types and their main fields:

* ``header``: ``run_id``, ``rlm_version``, ``question``, ``paths``, ``config`` and ``signature``
  (this user's HMAC of the rest: :func:`signed_by_me` tells a trajectory of theirs from one
  made elsewhere, which ``rlm replay`` trusts with nothing).
* ``corpus``: ``files``, ``chars``, ``tokens``, ``chunks``, ``summary``, ``sandbox``.
* ``mode``: ``mode`` (``rlm``/``direct``), ``reason``, ``root_window``, ``sub_window``.
* ``iteration``: ``iteration``.
* ``root_call``: ``model``, ``response`` (full text), ``request_key``, ``request_tokens``
  (counted before sending), ``input_tokens``/``output_tokens``/``cost_usd`` (as reported),
  ``latency_s``, ``history`` (turns verbatim/compacted/omitted).
* ``code`` / ``output``: the block and what the model was shown of its output.
* ``sub_call``: ``model``, ``prompt_head``, ``prompt_chars``, ``request_key``, ``response``,
  tokens, cost, latency.
* ``recursion``: ``mode`` (``rlm`` or ``plain`` at the depth limit), ``prompt_chars``.
* ``notice``: ``message`` (``level`` ``warning`` for warnings; ``machine`` for a note about this
  machine, the same on every run of it, and ``verbose_only`` once such a note was shown on it:
  the terminal shows it again only with ``-v``).
* ``leads``: ``output`` (what ``leads(question)`` printed before the first root call, shown to
  the root model in its first message; empty when it found nothing; no event with
  ``--no-leads``), ``elapsed_s``, ``sources``.
* ``phase``: ``iteration``, ``phase`` (``explore``, ``decompose``, ``aggregate`` or
  ``terminate``) and ``helpers`` (what the iteration's code called; see ``rlm_cli.app.phases``);
  written once the iteration is over. ``output`` events carry ``helpers`` and ``phase`` too.
* ``final``: ``status``, ``answer``, ``iterations``.
* ``summary``: the run's outcome: ``status``, ``answer``, ``mode``, ``usage``, ``elapsed_s``,
  ``sources`` (see ``rlm_cli.output.sources``).

Transient events (:data:`TRANSIENT_TYPES`: ``stream``, the root model's reply as it arrives, and
``progress``, sub-call, sub-RLM and indexing progress) reach the terminal only: the trajectory
keeps the whole reply in ``root_call`` and the counts in ``sub_call`` events.

The vocabulary (the typed class of each event type, :func:`event`, :data:`Emit`) is
``rlm_cli.events``. This module reads and writes; it never renders (see ``render.py`` and
``trace_view.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TypedDict, TypeGuard

from rlm_cli.errors import UsageError

# The vocabulary lives in rlm_cli.events; these names stay importable from here.
from rlm_cli.events import SCHEMA_VERSION as SCHEMA_VERSION
from rlm_cli.events import TRANSIENT_TYPES as TRANSIENT_TYPES
from rlm_cli.events import Emit as Emit
from rlm_cli.events import EventDict, depth_of, is_type, of_type, whole
from rlm_cli.events import event as event
from rlm_cli.output.answer import json_text

#: Characters of a sub-call prompt kept in the trajectory (the response is kept whole).
PROMPT_HEAD_CHARS = 2_000

def request_key(model: str, messages: Sequence[Mapping[str, object]]) -> str:
    """A stable digest (hex, 24 chars) of one model request, used to match responses on replay."""
    blob = json.dumps({"model": model, "messages": messages}, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def new_run_id() -> str:
    """A sortable, unique run id: ``YYYYmmdd-HHMMSS-xxxxxx``."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def traces_dir() -> Path:
    """Where trajectories go by default: ``<user data dir>/traces`` (not created here)."""
    from rlm_cli.config import data_dir

    return data_dir() / "traces"


#: The field of a header line holding its signature (:func:`sign_header`).
SIGNATURE_FIELD = "signature"


def trace_key(*, create: bool) -> bytes | None:
    """This user's key signing the trajectories their rlm writes: 32 random bytes in
    ``<user data dir>/trace.key`` (mode 0600; out of the REPL worker's reach at every level but
    ``none``). ``create``: make it when it is missing. ``None`` when there is none (or it cannot be
    read or made: a trajectory is then written unsigned, and read as someone else's)."""
    from rlm_cli.config import data_dir

    path = data_dir() / "trace.key"
    for _ in range(2):
        try:
            with open(path, "rb") as fh:
                key = fh.read(64)
            if len(key) == 32:
                return key
            if key:
                return None  # not a key of ours: never overwritten
        except FileNotFoundError:
            pass
        except OSError:
            return None
        if not create:
            return None
        try:  # written whole under a temporary name, then linked: a concurrent run reads all or nothing
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = path.with_name(f".trace.key.{os.getpid()}.{secrets.token_hex(4)}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(secrets.token_bytes(32))
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # another run made it first: read theirs
            finally:
                os.unlink(tmp)
        except OSError:
            return None
    return None


def header_signature(header: Mapping[str, object], key: bytes) -> str:
    """HMAC-SHA256 (hex) of a header event as it reads back from its JSON line, without its
    :data:`SIGNATURE_FIELD`."""
    import hmac

    fields = {k: v for k, v in json.loads(json.dumps(header, ensure_ascii=False, default=str)).items()
              if k != SIGNATURE_FIELD}
    blob = json.dumps(fields, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hmac.new(key, blob.encode("ascii"), hashlib.sha256).hexdigest()


def sign_header(header: Mapping[str, object]) -> Mapping[str, object]:
    """``header`` with this user's signature (:func:`trace_key`), or unchanged when there is no key."""
    key = trace_key(create=True)
    return header if key is None else {**header, SIGNATURE_FIELD: header_signature(header, key)}


def signed_by_me(header: Mapping[str, object]) -> bool:
    """Whether this user's rlm wrote ``header`` (its signature is valid for this user's key)."""
    import hmac

    key = trace_key(create=False)
    mark = header.get(SIGNATURE_FIELD)
    return key is not None and isinstance(mark, str) and hmac.compare_digest(mark, header_signature(header, key))


def traces_usage(directory: Path | None = None) -> tuple[int, int]:
    """``(files, bytes)`` of the trajectories in ``directory`` (default :func:`traces_dir`)."""
    files = size = 0
    folder = directory or traces_dir()
    for p in folder.glob("*.jsonl") if folder.is_dir() else []:
        try:
            size += p.stat().st_size
            files += 1
        except OSError:
            continue
    return files, size


class TraceWriter:
    """Writes events to a JSONL file as they happen (thread-safe; flushed per line; mode 0600). A
    file already there is replaced: one file is one run (two runs in one file read as one tree).

    Raises:
        UsageError: the file cannot be created.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
            with contextlib.suppress(OSError):  # a file that was there keeps its mode otherwise
                os.fchmod(fd, 0o600)
        except OSError as exc:
            raise UsageError(f"cannot write the trajectory {path}: {exc.strerror or exc}",
                             hint="choose another --trace FILE") from None
        # A lone surrogate (from a corpus file's \ud800 escape, say) cannot be UTF-8: it is written as
        # its JSON escape, which reads back as the same string.
        self._fh: IO[str] | None = os.fdopen(fd, "a", encoding="utf-8", errors="backslashreplace")
        self._lock = threading.Lock()

    def write(self, ev: Mapping[str, object]) -> None:
        """Write one event as a line (a ``header`` signed: :func:`sign_header`)."""
        if is_type(ev, "header"):
            ev = sign_header(ev)
        line = json_text(ev, line=True).rstrip("\n")  # RFC 8259: a lone surrogate as its escape, NaN null
        with self._lock:
            if self._fh is not None:
                self._fh.write(line + "\n")
                self._fh.flush()

    def close(self) -> None:
        """Close the file."""
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


class TraceSink:
    """The ``emit`` target that writes each event to a :class:`TraceWriter`, stamped with the
    run's usage so far (``totals()`` returns ``(tokens, cost_usd or None)``), and forwards it to
    ``forward`` (the terminal renderer)."""

    def __init__(self, writer: TraceWriter | None, forward: Emit,
                 totals: Callable[[], tuple[int, float | None]] | None = None) -> None:
        self.writer = writer
        self.forward = forward
        self.totals = totals
        # Stamping and writing under one lock: events of concurrent sub-calls come from several
        # threads, and a total read before another thread's write reached the file after it
        # (1,210 then 1,204 tokens: a trajectory whose running totals went down).
        self._lock = threading.Lock()

    def __call__(self, ev: EventDict) -> None:
        if self.writer is not None and ev.get("type") not in TRANSIENT_TYPES:
            with self._lock:
                if self.totals is not None:
                    tokens, cost = self.totals()
                    ev = {**ev, "total_tokens": tokens, "total_cost_usd": None if cost is None else round(cost, 6)}
                self.writer.write(ev)
        self.forward(ev)


def read_trace(path: Path) -> list[EventDict]:
    """All events of a trajectory file (a torn last line from a killed run, or a line that is not
    UTF-8 or not a JSON object, is ignored).

    Raises:
        UsageError: the file cannot be read or has no header line.
    """
    events: list[EventDict] = []
    try:
        with open(path, "rb") as fh:
            for line in fh:
                try:
                    item = json.loads(line.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError):
                    continue
                if isinstance(item, dict):
                    events.append(item)
    except OSError as exc:
        raise UsageError(f"cannot read the trajectory {path}: {exc.strerror or exc}") from None
    if not events or not is_type(events[0], "header"):
        raise UsageError(f"{path} is not an rlm trajectory (no header line)")
    return events


def find_trace(ref: str, directory: Path | None = None) -> Path:
    """The trajectory file for ``ref``: a path to a file, a run id, a unique prefix of one, or
    ``last`` (the newest).

    Raises:
        UsageError: nothing, or more than one trajectory, matches.
    """
    candidate = Path(ref).expanduser()
    if candidate.suffix == ".jsonl" and candidate.is_file():
        return candidate
    directory = directory or traces_dir()
    files = sorted(directory.glob("*.jsonl")) if directory.is_dir() else []
    if ref in ("last", "latest"):
        if not files:
            raise UsageError(f"no trajectories in {directory}")
        return max(files, key=lambda p: (p.stat().st_mtime, p.name))
    exact = [p for p in files if p.stem == ref]
    matches = exact or [p for p in files if p.stem.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UsageError(f"no trajectory {ref!r} in {directory}", hint="see `rlm trace list`")
    raise UsageError(f"{ref!r} matches {len(matches)} trajectories", hint="give more of the id")


@dataclass
class TraceInfo:
    """One line of ``rlm trace list``."""

    run_id: str
    path: Path
    started: float
    question: str
    status: str
    mode: str
    answer: str
    tokens: int
    cost_usd: float | None
    elapsed_s: float | None
    #: Model calls that completed (root and sub-calls, cached ones included): with none, the run
    #: has no cost to show.
    calls: int = 0
    #: Bytes of the file.
    size: int = 0


class TraceInfoDoc(TypedDict):
    """One entry of ``rlm trace list --json`` (:func:`info_dict`)."""

    run_id: str
    path: str
    started: str
    question: str
    status: str
    mode: str
    tokens: int
    calls: int
    cost_usd: float | None
    elapsed_s: float | None


def info_dict(info: TraceInfo) -> TraceInfoDoc:
    """One entry of ``rlm trace list --json``: ``run_id``, ``path``, ``started`` (ISO 8601, UTC),
    ``question``, ``status``, ``mode``, ``tokens``, ``calls`` (model calls completed),
    ``cost_usd`` (None when unknown; 0 with no call completed) and ``elapsed_s`` (seconds; None for
    an incomplete run). The answer is in the file itself."""
    started = datetime.fromtimestamp(info.started, UTC).isoformat(timespec="seconds")
    return {"run_id": info.run_id, "path": str(info.path), "started": started, "question": info.question,
            "status": info.status, "mode": info.mode, "tokens": info.tokens, "calls": info.calls,
            "cost_usd": info.cost_usd, "elapsed_s": info.elapsed_s}


def completed_calls(events: Sequence[Mapping[str, object]]) -> int:
    """Model calls a run completed: from its summary's ``usage`` (root and sub-calls, abandoned
    ones left out: ``output.text.completed_calls``), else (no
    summary: a run killed outright, or stopped before it began) the ``root_call`` events and the
    ``sub_call`` events that carry a response."""
    summary = next(of_type(reversed(events), "summary"), None)
    usage = summary.get("usage") if summary else None
    if isinstance(usage, dict):
        from rlm_cli.output.text import completed_calls as of_usage

        return of_usage(usage)
    return sum(1 for e in events if is_type(e, "root_call")
               or (is_type(e, "sub_call") and "response" in e and not e.get("error")))


def summarize(path: Path) -> TraceInfo:
    """The :class:`TraceInfo` of one trajectory file (status ``incomplete`` when it has no summary).

    Raises:
        UsageError: the file is not a trajectory.
    """
    events = read_trace(path)
    head = events[0]
    summary = next(of_type(reversed(events), "summary"), None)
    last = events[-1]
    mode = next((str(e.get("mode")) for e in of_type(events, "mode")), "?")
    cost, elapsed = last.get("total_cost_usd"), summary.get("elapsed_s") if summary else None  # as the file holds them
    return TraceInfo(
        run_id=str(head.get("run_id", path.stem)), path=path, started=_timestamp(head.get("ts")),
        question=str(head.get("question", "")), status=str(summary.get("status")) if summary else "incomplete",
        mode=mode, answer=str(summary.get("answer", "")) if summary else "", tokens=whole(last.get("total_tokens")),
        cost_usd=cost if _finite(cost) else None, elapsed_s=elapsed if _finite(elapsed) else None,
        calls=completed_calls(events), size=_size(path))


def _finite(value: object) -> TypeGuard[float]:
    """Whether ``value``, read from a file, is a finite number (not ``NaN``, ``Infinity``, text)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _timestamp(value: object) -> float:
    """``value`` (Unix seconds, read from a file) when it is a time a date can be made of, else 0.0."""
    if not _finite(value):
        return 0.0
    try:
        datetime.fromtimestamp(value, UTC), datetime.fromtimestamp(value)  # trace list --json, trace list
    except (OverflowError, ValueError, OSError):  # years past 9999
        return 0.0
    return float(value)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def list_traces(directory: Path | None = None) -> list[TraceInfo]:
    """Every readable trajectory in ``directory`` (default :func:`traces_dir`), newest first."""
    directory = directory or traces_dir()
    infos = []
    for p in directory.glob("*.jsonl") if directory.is_dir() else []:
        try:
            infos.append(summarize(p))
        except UsageError:
            continue
    return sorted(infos, key=lambda i: (i.started, i.run_id), reverse=True)


@dataclass
class Node:
    """A node of the trajectory tree: an ``event`` (``None`` for the root) and its children."""

    event: EventDict | None
    children: list[Node] = field(default_factory=list)


def build_tree(events: list[EventDict]) -> Node:
    """Arrange a trajectory's events as a tree: iterations under the run (or under the
    ``rlm_query`` that started their loop), and each iteration's root call, code, output,
    sub-calls and recursions under it. The header is not part of the tree; a ``phase`` event
    labels its iteration's node (``phase`` and ``helpers`` are added to that node's event)."""
    root = Node(None)
    container: dict[int, Node] = {0: root}  # where iterations of each depth go
    current: dict[int, Node] = {}  # the open iteration of each depth
    for ev in events:
        if is_type(ev, "header"):
            continue
        depth = depth_of(ev)
        node = Node(ev)
        if is_type(ev, "iteration"):
            container.get(depth, root).children.append(node)
            current[depth] = node
            continue
        if is_type(ev, "phase"):  # a label of its iteration, not a node of its own
            label = _last_iteration(container.get(depth, root), ev.get("iteration"))
            if label is not None and label.event is not None:
                label.event = {**label.event, "phase": ev.get("phase"), "helpers": ev.get("helpers")}
            continue
        caller_owned = is_type(ev, "sub_call") or is_type(ev, "recursion")  # of the loop calling it, one depth up
        owner_depth = depth - 1 if caller_owned and depth > 0 else depth
        parent = current.get(owner_depth) or container.get(owner_depth, root)
        if (is_type(ev, "summary") or is_type(ev, "corpus") or is_type(ev, "mode")) and depth == 0:
            parent = root
        parent.children.append(node)
        if is_type(ev, "recursion") and ev.get("mode") == "rlm":
            container[depth] = node
            current.pop(depth, None)
        elif is_type(ev, "final"):
            current.pop(depth, None)
    return root


def _last_iteration(container: Node, iteration: object) -> Node | None:
    """The newest ``iteration`` node numbered ``iteration`` directly under ``container``."""
    for node in reversed(container.children):
        if node.event is not None and is_type(node.event, "iteration") and node.event.get("iteration") == iteration:
            return node
    return None
