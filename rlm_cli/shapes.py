"""The JSON shapes of a run's outcome that every layer passes along: its usage (``models.usage``
builds it), the ranges of the corpus it looked at (``output.sources``) and its answer's support
verdict (``loop.support``), each a :class:`~typing.TypedDict` of the object ``rlm ask --json``
writes (``rlm_cli/schemas/ask-result.v1.json``'s ``$defs``: ``usage``, ``group``, ``source``,
``support``). Data only: the module imports nothing of the project, so the error tree
(``errors.RunReport``), the event vocabulary and the documents can all name these shapes.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict


class UsageGroup(TypedDict):
    """The usage of a group of calls (the root model's, the sub-calls', one model's: the schema's
    ``$defs.group``): tokens, USD (``None`` when a model is not priced) and seconds;
    ``abandoned_calls`` only when some calls were sent and never answered."""

    calls: int
    cached_calls: int
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    cost_usd: float | None
    latency_s: float
    abandoned_calls: NotRequired[int]


class Concurrency(TypedDict):
    """The sub-call limiter's concurrency (``models.limiter.AdaptiveLimiter.summary``)."""

    max: int
    lowest: int
    final: int
    decreases: int


class UsageDoc(TypedDict):
    """A run's ``usage`` (``models.usage.Usage.summary()``; the schema's ``$defs.usage``):
    the groups, the totals and the counters; ``concurrency`` when sub-calls had a limiter,
    ``replay_s`` for ``rlm replay``'s seconds."""

    by_model: dict[str, UsageGroup]
    root: UsageGroup
    sub: UsageGroup
    total_tokens: int
    cost_usd: float | None
    cached_calls: int
    retries: int
    rate_limited: int
    failed_calls: int
    refused_oversized: int
    concurrency: NotRequired[Concurrency]
    replay_s: NotRequired[float]


class SourceDoc(TypedDict):
    """A range of lines of one corpus file the run looked at (the schema's ``$defs.source``:
    1-based, inclusive), how (``output.sources.HOW_ORDER``) and whether the answer cites it."""

    path: str
    start_line: int
    end_line: int
    how: list[str]
    cited: bool


class SupportDoc(TypedDict):
    """The ``support`` object (the schema's ``$defs.support``): ``verdict`` one of ``observed``,
    ``computed``, ``unsupported``, ``partial``."""

    verdict: str
    unsupported: list[str]
    objections: list[str]
    reason: str


def no_usage() -> UsageDoc:
    """The ``usage`` of a run that asked no model: every group and counter at 0, what
    ``models.usage.Usage().summary()`` gives before its first call (``tests/test_shapes.py`` holds
    the two equal). For a document whose run stopped before its usage was taken."""
    group: UsageGroup = {"calls": 0, "cached_calls": 0, "input_tokens": 0, "cache_read_tokens": 0,
                         "cache_write_tokens": 0, "output_tokens": 0, "cost_usd": 0, "latency_s": 0}
    return {"by_model": {}, "root": group, "sub": group.copy(), "total_tokens": 0, "cost_usd": 0, "cached_calls": 0,
            "retries": 0, "rate_limited": 0, "failed_calls": 0, "refused_oversized": 0}
