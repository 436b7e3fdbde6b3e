"""What a run's model calls used: one :class:`CallRecord` per request (who asked, tokens, cost,
seconds) and :class:`Usage`, their thread-safe totals with the counters of retries, rate limits,
failed calls and refused prompts, summarised for ``--json`` and the closing line."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from rlm_cli.models.limiter import AdaptiveLimiter

if TYPE_CHECKING:
    from rlm_cli.shapes import UsageDoc, UsageGroup

#: The counters of :class:`Usage` (beside its call records), in the order ``--json`` gives them.
Counter = Literal["retries", "rate_limited", "failed_calls", "refused_oversized"]


@dataclass
class CallRecord:
    """One model answer: who asked, tokens in/out, cost in USD (``None`` if unknown), seconds.

    A ``cached`` record was replayed from the response cache: nothing was sent, so its tokens
    and cost are 0. ``cache_read_tokens``/``cache_write_tokens``: of ``input_tokens``, those the
    provider served from its prompt cache and those it wrote to it (``models.caching``).
    """

    model: str
    role: str  # "root" or "sub"
    depth: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    latency_s: float
    cached: bool = False
    attempts: int = 1
    #: Sent, but the run stopped before its answer came (``--timeout``, another budget, Ctrl-C):
    #: the provider got it; its tokens and cost are not known (counted 0).
    abandoned: bool = False
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

@dataclass
class Usage:
    """Thread-safe totals of every :class:`CallRecord` of a run (root, sub-calls, children),
    plus counters of retries, rate limits, failed calls and refused prompts."""

    records: list[CallRecord] = field(default_factory=list)
    counters: dict[Counter, int] = field(default_factory=lambda: {
        "retries": 0, "rate_limited": 0, "failed_calls": 0, "refused_oversized": 0})
    #: The sub-call limiter, reported as ``"concurrency"`` in :meth:`summary` when set.
    limiter: AdaptiveLimiter | None = field(default=None, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: Calls sent and not answered yet, by ``(model, role)``: counted as calls (abandoned ones
    #: when the run's usage is read before they end), so that the calls reported are the requests
    #: a provider got.
    flying: dict[tuple[str, str], int] = field(default_factory=dict)

    def add(self, record: CallRecord) -> None:
        """Append one request's usage."""
        with self.lock:
            self.records.append(record)

    def took_off(self, model: str, role: str) -> None:
        """A call of ``role`` to ``model`` was sent: it counts until :meth:`landed`."""
        with self.lock:
            self.flying[(model, role)] = self.flying.get((model, role), 0) + 1

    def landed(self, model: str, role: str, record: CallRecord | None) -> None:
        """A call :meth:`took_off` ended: with its ``record`` (answered or abandoned), or none (it
        failed: ``failed_calls`` counts it), in one step."""
        with self.lock:
            key = (model, role)
            self.flying[key] = self.flying.get(key, 0) - 1
            if self.flying[key] <= 0:
                del self.flying[key]
            if record is not None:
                self.records.append(record)

    def _flying(self, role: str | None = None, model: str | None = None) -> int:
        return sum(n for (m, r), n in self.flying.items() if (role is None or r == role) and (model is None or m == model))

    def count(self, name: Counter, n: int = 1) -> None:
        """Add ``n`` to counter ``name`` (``retries``, ``rate_limited``, ...)."""
        with self.lock:
            self.counters[name] = self.counters.get(name, 0) + n

    @property
    def sub_calls(self) -> int:
        """Number of sub-calls so far: answered (cache replays included), abandoned, and in flight."""
        with self.lock:
            return sum(1 for r in self.records if r.role == "sub") + self._flying("sub")

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens sent to and received from providers (cache replays are 0)."""
        with self.lock:
            return sum(r.input_tokens + r.output_tokens for r in self.records)

    @property
    def cost_usd(self) -> float | None:
        """Total cost in USD; ``None`` when any request's cost is unknown."""
        with self.lock:
            if any(r.cost_usd is None for r in self.records):
                return None
            return sum(r.cost_usd or 0.0 for r in self.records)

    @property
    def known_cost_usd(self) -> float:
        """The sum of the costs that are known (requests of unpriced models count 0)."""
        with self.lock:
            return sum(r.cost_usd or 0.0 for r in self.records)

    def summary(self) -> UsageDoc:
        """``{"by_model": {model: G}, "root": G, "sub": G, "total_tokens", "cost_usd", "cached_calls",
        "retries", "rate_limited", "failed_calls", "refused_oversized", "concurrency"}`` where each group ``G`` is
        ``{"calls", "cached_calls", "input_tokens", "cache_read_tokens", "cache_write_tokens",
        "output_tokens", "cost_usd", "latency_s"}`` (the cache tokens: of ``input_tokens``, those
        the provider's prompt cache served and those written to it)
        plus ``abandoned_calls`` when some were (sent, not answered before the run stopped: in
        ``calls``, with no tokens or cost counted); ``cost_usd`` is ``None`` (JSON null) when a
        price is unknown, never a made-up zero."""
        with self.lock:
            rows = list(self.records)
            counters = dict(self.counters)
            flying = dict(self.flying)

        def agg(rows: list[CallRecord], up: int = 0) -> UsageGroup:
            costs = [r.cost_usd for r in rows]
            group: UsageGroup = {"calls": len(rows) + up, "cached_calls": sum(1 for r in rows if r.cached),
                     "input_tokens": sum(r.input_tokens for r in rows),
                     "cache_read_tokens": sum(r.cache_read_tokens for r in rows),
                     "cache_write_tokens": sum(r.cache_write_tokens for r in rows),
                     "output_tokens": sum(r.output_tokens for r in rows),
                     "cost_usd": None if any(c is None for c in costs) else round(sum(c or 0 for c in costs), 6),
                     "latency_s": round(sum(r.latency_s for r in rows), 3)}
            abandoned = sum(1 for r in rows if r.abandoned) + up
            if abandoned:
                group["abandoned_calls"] = abandoned
            return group

        def up(role: str | None = None, model: str | None = None) -> int:
            return sum(n for (m, r), n in flying.items() if (role is None or r == role) and (model is None or m == model))

        models_ = sorted({r.model for r in rows} | {m for m, _ in flying})
        doc: UsageDoc = {"by_model": {m: agg([r for r in rows if r.model == m], up(model=m)) for m in models_},
                         "root": agg([r for r in rows if r.role == "root"], up("root")),
                         "sub": agg([r for r in rows if r.role == "sub"], up("sub")),
                         "total_tokens": sum(r.input_tokens + r.output_tokens for r in rows),
                         "cost_usd": agg(rows)["cost_usd"],
                         "cached_calls": sum(1 for r in rows if r.cached),
                         "retries": counters["retries"], "rate_limited": counters["rate_limited"],
                         "failed_calls": counters["failed_calls"], "refused_oversized": counters["refused_oversized"]}
        if self.limiter is not None:
            doc["concurrency"] = self.limiter.summary()
        return doc


class Flight:
    """One call's way to the provider: a call from its first attempt sent (:meth:`sent`:
    ``Usage.took_off``) to its :meth:`end`, so that a call the provider got counts even when the
    run stopped before its answer (its record then says ``abandoned``)."""

    def __init__(self, usage: Usage, model: str, role: str) -> None:
        self.usage, self.model, self.role = usage, model, role
        self.up = False

    def sent(self) -> None:
        """An attempt goes out (the first one makes it a call)."""
        if not self.up:
            self.up = True
            self.usage.took_off(self.model, self.role)

    def end(self, record: CallRecord | None) -> None:
        """The call ended with ``record`` (an abandoned one counts only if it was sent), or none
        (it failed: ``failed_calls`` counts it)."""
        if self.up:
            self.usage.landed(self.model, self.role, record)
        elif record is not None and not record.abandoned:
            self.usage.add(record)
