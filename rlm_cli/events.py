"""The vocabulary of trajectory events: one typed class per event type, and the builder.

An event is a plain ``dict`` (what ``emit`` callbacks pass, what a trajectory line holds, what
``rlm replay`` reads back from old files); each type's shape is a :class:`~typing.TypedDict`
here, so a reader can be typed against it and :func:`event` can refuse a type or a field that
is not in the vocabulary. Every event has ``schema`` (:data:`SCHEMA_VERSION`), ``type``,
``depth`` and ``ts`` (Unix seconds), in that order, then its fields in the order given; a
trajectory line also carries ``total_tokens`` and ``total_cost_usd`` (``output.trace.TraceSink``).
What each field means is in ``rlm_cli.output.trace``'s docstring.

Reading events: :func:`is_type` (``if is_type(ev, "final"): ...``, where mypy then knows ``ev`` as a
:class:`FinalEvent`) and :func:`of_type` (the events of one type among many), never a bare
``ev.get("type") == "final"``: a type name outside the vocabulary fails there (mypy, and a
``ValueError`` at run time) instead of never matching. ``tests/test_events.py`` checks that every
type name the code compares an event's type with is in the vocabulary.

Adding an event type: a class here, its entry in :data:`VOCABULARY` and :data:`EventType`, and (if
the terminal shows it) a handler in ``rlm_cli.output.render`` (see ``docs/extending.md``).

This module imports nothing of the project but the JSON shapes of ``rlm_cli.shapes`` (data
only): every package may emit events, and ``output`` only receives them.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal, NotRequired, TypedDict, TypeGuard, overload

from rlm_cli.shapes import SourceDoc, SupportDoc, UsageDoc

SCHEMA_VERSION = 1
#: The name of every event type (the keys of :data:`VOCABULARY`), as :func:`is_type` and
#: :func:`of_type` take it: a name outside it is a type error for mypy (and a ``ValueError`` at run
#: time). A constant holding type names is typed with it (``frozenset[EventType]``).
EventType = Literal[
    "header", "corpus", "mode", "iteration", "prompt", "leads", "root_call", "code", "output", "check",
    "sub_call", "recursion", "notice", "phase", "typed", "final", "summary", "stream", "progress",
]
#: Event types shown on the terminal but never written to the trajectory.
TRANSIENT_TYPES: frozenset[EventType] = frozenset({"stream", "progress"})
#: An event as it travels: what :func:`event` builds, what :data:`Emit` passes and what a trajectory
#: line holds once read back. Its values are of the types its class here gives (a file read back
#: may hold anything), so a reader narrows the dict with :func:`is_type` / :func:`of_type` (then
#: mypy knows each field's type) or narrows the value it reads (``isinstance``).
EventDict = dict[str, object]
#: The event callback every part of a run reports through, one :func:`event` dict at a time (the
#: session's ``output.trace.TraceSink`` writes the trajectory and forwards to the terminal renderer).
Emit = Callable[[EventDict], None]


class Event(TypedDict):
    """What every event has (``total_*``: stamped on trajectory lines, the run's usage so far)."""

    schema: int
    depth: int
    ts: float
    total_tokens: NotRequired[int]
    total_cost_usd: NotRequired[float | None]


class HeaderEvent(Event, total=False):
    """The first line of a trajectory (``signature``: added when it is written)."""

    type: Literal["header"]
    run_id: str
    rlm_version: str
    question: str
    cwd: str
    paths: list[str]
    config: dict[str, Any]
    signature: str
    session: str
    turn: int
    id: str
    answer_type: str


class CorpusEvent(Event, total=False):
    """The corpus as loaded (``skipped``: ``{"path", "reason"}`` rows, the first ones named)."""

    type: Literal["corpus"]
    summary: str
    files: int
    chars: int
    tokens: int
    chunks: int
    load_s: float
    sandbox: str
    skipped: list[dict[str, str]]
    skipped_count: int


class ModeEvent(Event, total=False):
    """The mode of a question (``rlm``/``direct``), why, and the plan's windows and policy."""

    type: Literal["mode"]
    mode: str
    reason: str
    root_window: int | None
    root_window_source: str
    sub_window: int | None
    sub_window_source: str
    policy: str
    policy_requested: str | None
    policy_reason: str


class IterationEvent(Event, total=False):
    """An iteration of a loop begins (``phase``, ``helpers``: never written, added when read back
    by ``output.trace.build_tree`` from the iteration's ``phase`` event)."""

    type: Literal["iteration"]
    iteration: int
    phase: str
    helpers: dict[str, int]


class PromptEvent(Event, total=False):
    """The first messages of a loop: system prompt, first user message, examples."""

    type: Literal["prompt"]
    system: str
    first: str
    examples: list[dict[str, Any]]


class LeadsEvent(Event, total=False):
    """What ``leads(question)`` printed before the first root call."""

    type: Literal["leads"]
    code: str
    output: str
    elapsed_s: float
    sources: list[list[Any]]


class RootCallEvent(Event, total=False):
    """One root-model call (``history``: turns verbatim/compacted/omitted/truncated)."""

    type: Literal["root_call"]
    model: str
    response: str
    request_key: str
    request_tokens: int
    history: dict[str, int]
    direct: bool
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    latency_s: float


class CodeEvent(Event, total=False):
    """A code block the worker runs."""

    type: Literal["code"]
    iteration: int
    block: int
    code: str


class OutputEvent(Event, total=False):
    """What a code block printed, as the model was shown it (``phase``: added by ``app.phases``)."""

    type: Literal["output"]
    iteration: int
    block: int
    output: str
    output_chars: int
    elapsed_s: float
    sub_calls: int
    lost: str | None
    helpers: dict[str, int]
    sources: list[list[Any]]
    default_caps: list[Any]
    phase: str


class CheckEvent(Event, total=False):
    """An answer check's verdict on a candidate answer."""

    type: Literal["check"]
    check: str
    verdict: str
    fired: int
    iteration: int
    source: str
    written_out: bool
    answer: str
    limit_reached: bool
    note: str
    waived: bool
    rewritten: str
    objections: list[str]


class SubCallEvent(Event, total=False):
    """One ``llm_query`` (or plain ``rlm_query``) call, one depth below its caller."""

    type: Literal["sub_call"]
    model: str
    prompt_chars: int
    answer_chars: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    latency_s: float
    cached: bool
    response: str
    request_key: str
    prompt_head: str


class RecursionEvent(Event, total=False):
    """An ``rlm_query`` starts a child: ``mode`` ``rlm``, or ``plain`` at the depth limit."""

    type: Literal["recursion"]
    mode: str
    prompt_chars: int
    context_chars: int
    prompt_head: str


class NoticeEvent(Event, total=False):
    """A note or a warning (``machine``: the same on every run of this machine)."""

    type: Literal["notice"]
    message: str
    level: str
    machine: bool
    verbose_only: bool


class PhaseEvent(Event, total=False):
    """The phase of a finished iteration and the helpers its code called."""

    type: Literal["phase"]
    iteration: int
    phase: str
    helpers: dict[str, int]


class TypedAnswerEvent(Event, total=False):
    """A typed answer (``--answer-type``) as parsed."""

    type: Literal["typed"]
    answer_type: str
    ok: bool
    value: Any
    problem: str | None
    dropped: list[str]


class FinalEvent(Event, total=False):
    """A loop ends."""

    type: Literal["final"]
    status: str
    iterations: int
    answer: str
    answer_chars: int
    policy: str
    support: SupportDoc


class SummaryEvent(Event, total=False):
    """The run's outcome (the last line of a trajectory)."""

    type: Literal["summary"]
    status: str
    answer: str
    signal: str
    exit_code: int
    error: str
    mode: str
    iterations: int
    sub_calls: int
    usage: UsageDoc | None
    elapsed_s: float
    support: SupportDoc
    sources: list[SourceDoc]
    sources_omitted: int


class StreamEvent(Event, total=False):
    """Transient: the root model's reply as it arrives (``state`` start, delta or restart)."""

    type: Literal["stream"]
    state: str
    model: str
    text: str


class ProgressEvent(Event, total=False):
    """Transient: progress of a group of sub-calls or sub-RLMs, or of corpus indexing (``kind``)."""

    type: Literal["progress"]
    kind: str
    group: int
    batch: bool
    done: int
    failed: int
    in_flight: int
    total: int
    elapsed_s: float
    tokens: int
    cost_usd: float | None
    finished: bool
    files: int
    files_total: int
    bytes: int
    bytes_total: int
    rate_bps: int


#: Every event type by its ``type`` name.
VOCABULARY: dict[str, type[Event]] = {
    "header": HeaderEvent, "corpus": CorpusEvent, "mode": ModeEvent, "iteration": IterationEvent,
    "prompt": PromptEvent, "leads": LeadsEvent, "root_call": RootCallEvent, "code": CodeEvent,
    "output": OutputEvent, "check": CheckEvent, "sub_call": SubCallEvent, "recursion": RecursionEvent,
    "notice": NoticeEvent, "phase": PhaseEvent, "typed": TypedAnswerEvent, "final": FinalEvent,
    "summary": SummaryEvent, "stream": StreamEvent, "progress": ProgressEvent,
}

#: The fields each type's :func:`event` call may give (every field but ``schema``, ``type``,
#: ``depth`` and ``ts``, which :func:`event` sets, and the ``total_*`` stamped on writing).
_COMMON = frozenset(Event.__annotations__) | {"type"}
FIELDS: dict[str, frozenset[str]] = {
    name: frozenset(cls.__annotations__) - _COMMON for name, cls in VOCABULARY.items()  # a TypedDict's keys, inherited ones too
}


def event(type_: str, depth: int = 0, **fields: object) -> EventDict:
    """A trajectory event dict: ``schema``, ``type``, ``depth``, ``ts`` (rounded to ms), then
    ``fields`` in the order given. With ``RLM_STRICT_EVENTS=1`` (the test suite sets it) a type
    outside :data:`VOCABULARY` or a field outside its :data:`FIELDS` raises; in a user's run it
    is written as given: a mistake in the code that emits an event must not cost an answer.

    Raises:
        ValueError: strict only: an unknown type or field (a mistake in rlm's code, never in
            the user's input).
    """
    if os.environ.get("RLM_STRICT_EVENTS") == "1":
        allowed = FIELDS.get(type_)
        if allowed is None:
            raise ValueError(f"unknown trajectory event type {type_!r} (add it to rlm_cli.events)")
        unknown = fields.keys() - allowed
        if unknown:
            raise ValueError(f"event {type_!r} has no field {', '.join(sorted(unknown))} (see rlm_cli.events)")
    return {"schema": SCHEMA_VERSION, "type": type_, "depth": depth, "ts": round(time.time(), 3), **fields}


def depth_of(ev: Mapping[str, object]) -> int:
    """The ``depth`` of the event ``ev`` (0 for the root loop; 0 when it has none, as an old or
    foreign trajectory line may not, or one that is not a whole number: :func:`whole`, or text
    of one)."""
    value = ev.get("depth", 0)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:  # a corrupt or edited file
            return 0
    return whole(value)


def whole(value: object) -> int:
    """``value`` as a whole number when it is a finite number (a float's integer part), else 0: a
    count read back from a line of a file anyone may edit, where JSON as Python reads it may
    also hold ``NaN``, ``Infinity`` or ``1e999`` (which ``int()`` refuses)."""
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, float) and math.isfinite(value) else 0


def _known(type_: str) -> str:
    """``type_`` itself when it is in :data:`VOCABULARY`.

    Raises:
        ValueError: it is not (a mistake in rlm's code: a reader would never match it).
    """
    if type_ not in VOCABULARY:
        raise ValueError(f"unknown trajectory event type {type_!r} (see rlm_cli.events.VOCABULARY)")
    return type_


@overload
def is_type(ev: Mapping[str, Any], type_: Literal["header"]) -> TypeGuard[HeaderEvent]: ...
@overload
def is_type(ev: Mapping[str, Any], type_: Literal["corpus"]) -> TypeGuard[CorpusEvent]: ...
@overload
def is_type(ev: Mapping[str, Any], type_: Literal["mode"]) -> TypeGuard[ModeEvent]: ...
@overload
def is_type(ev: Mapping[str, Any], type_: Literal["iteration"]) -> TypeGuard[IterationEvent]: ...
@overload
def is_type(ev: Mapping[str, Any], type_: Literal["prompt"]) -> TypeGuard[PromptEvent]: ...
@overload
def is_type(ev: Mapping[str, Any], type_: Literal["leads"]) -> TypeGuard[LeadsEvent]: ...
@overload
def is_type(ev: Mapping[str, Any], type_: Literal["root_call"]) -> TypeGuard[RootCallEvent]: ...
@overload
def is_type(ev: Mapping[str, Any], type_: Literal["code"]) -> TypeGuard[CodeEvent]: ...
@overload
def is_type(ev: Mapping[str, Any], type_: Literal["output"]) -> TypeGuard[OutputEvent]: ...
@overload
def is_type(ev: Mapping[str, Any], type_: Literal["check"]) -> TypeGuard[CheckEvent]: ...
@overload
def is_type(ev: Mapping[str, Any], type_: Literal["sub_call"]) -> TypeGuard[SubCallEvent]: ...
@overload
def is_type(ev: Mapping[str, Any], type_: Literal["recursion"]) -> TypeGuard[RecursionEvent]: ...
@overload
def is_type(ev: Mapping[str, Any], type_: Literal["notice"]) -> TypeGuard[NoticeEvent]: ...
@overload
def is_type(ev: Mapping[str, Any], type_: Literal["phase"]) -> TypeGuard[PhaseEvent]: ...
@overload
def is_type(ev: Mapping[str, Any], type_: Literal["typed"]) -> TypeGuard[TypedAnswerEvent]: ...
@overload
def is_type(ev: Mapping[str, Any], type_: Literal["final"]) -> TypeGuard[FinalEvent]: ...
@overload
def is_type(ev: Mapping[str, Any], type_: Literal["summary"]) -> TypeGuard[SummaryEvent]: ...
@overload
def is_type(ev: Mapping[str, Any], type_: Literal["stream"]) -> TypeGuard[StreamEvent]: ...
@overload
def is_type(ev: Mapping[str, Any], type_: Literal["progress"]) -> TypeGuard[ProgressEvent]: ...


def is_type(ev: Mapping[str, Any], type_: EventType) -> bool:
    """Whether the event ``ev`` (a dict as emitted, or a trajectory line as read back) is of type
    ``type_``; for mypy, ``ev`` is that type's class where it is (``is_type(ev, "final")``: a
    :class:`FinalEvent`). Only ``type`` is read: the fields of an event read back from a file are
    as it holds them (old trajectories lack newer ones), so a reader still reads them with ``.get``.

    Raises:
        ValueError: ``type_`` is not in :data:`VOCABULARY`, whatever ``ev`` is (a misspelt name
            fails where it is written instead of never matching).
    """
    return ev.get("type") == _known(type_)


@overload
def of_type(events: Iterable[Mapping[str, Any]], type_: Literal["header"]) -> Iterator[HeaderEvent]: ...
@overload
def of_type(events: Iterable[Mapping[str, Any]], type_: Literal["corpus"]) -> Iterator[CorpusEvent]: ...
@overload
def of_type(events: Iterable[Mapping[str, Any]], type_: Literal["mode"]) -> Iterator[ModeEvent]: ...
@overload
def of_type(events: Iterable[Mapping[str, Any]], type_: Literal["iteration"]) -> Iterator[IterationEvent]: ...
@overload
def of_type(events: Iterable[Mapping[str, Any]], type_: Literal["prompt"]) -> Iterator[PromptEvent]: ...
@overload
def of_type(events: Iterable[Mapping[str, Any]], type_: Literal["leads"]) -> Iterator[LeadsEvent]: ...
@overload
def of_type(events: Iterable[Mapping[str, Any]], type_: Literal["root_call"]) -> Iterator[RootCallEvent]: ...
@overload
def of_type(events: Iterable[Mapping[str, Any]], type_: Literal["code"]) -> Iterator[CodeEvent]: ...
@overload
def of_type(events: Iterable[Mapping[str, Any]], type_: Literal["output"]) -> Iterator[OutputEvent]: ...
@overload
def of_type(events: Iterable[Mapping[str, Any]], type_: Literal["check"]) -> Iterator[CheckEvent]: ...
@overload
def of_type(events: Iterable[Mapping[str, Any]], type_: Literal["sub_call"]) -> Iterator[SubCallEvent]: ...
@overload
def of_type(events: Iterable[Mapping[str, Any]], type_: Literal["recursion"]) -> Iterator[RecursionEvent]: ...
@overload
def of_type(events: Iterable[Mapping[str, Any]], type_: Literal["notice"]) -> Iterator[NoticeEvent]: ...
@overload
def of_type(events: Iterable[Mapping[str, Any]], type_: Literal["phase"]) -> Iterator[PhaseEvent]: ...
@overload
def of_type(events: Iterable[Mapping[str, Any]], type_: Literal["typed"]) -> Iterator[TypedAnswerEvent]: ...
@overload
def of_type(events: Iterable[Mapping[str, Any]], type_: Literal["final"]) -> Iterator[FinalEvent]: ...
@overload
def of_type(events: Iterable[Mapping[str, Any]], type_: Literal["summary"]) -> Iterator[SummaryEvent]: ...
@overload
def of_type(events: Iterable[Mapping[str, Any]], type_: Literal["stream"]) -> Iterator[StreamEvent]: ...
@overload
def of_type(events: Iterable[Mapping[str, Any]], type_: Literal["progress"]) -> Iterator[ProgressEvent]: ...


def of_type(events: Iterable[Mapping[str, Any]], type_: EventType) -> Iterator[Any]:
    """The events of type ``type_`` among ``events``, in their order, typed as that type's class
    (``of_type(events, "summary")``: :class:`SummaryEvent` each; ``next(of_type(reversed(events),
    "summary"), None)``: the last one or ``None``). Lazy: ``events`` is read as it is iterated.

    Raises:
        ValueError: ``type_`` is not in :data:`VOCABULARY`, at the call (before any event is read).
    """
    name = _known(type_)
    return (ev for ev in events if ev.get("type") == name)
