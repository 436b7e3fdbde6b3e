"""What a run's model calls used: one :class:`CallRecord` per request (who asked, tokens, cost,
seconds) and :class:`Usage`, their thread-safe totals with the counters of retries, rate limits,
failed calls and refused prompts, summarised for ``--json`` and the closing line."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from rlm_cli.models.limiter import AdaptiveLimiter


@dataclass
class CallRecord:
    """One model answer: who asked, tokens in/out, cost in USD (``None`` if unknown), seconds.

    A ``cached`` record was replayed from the response cache: nothing was sent, so its tokens
    and cost are 0.
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

@dataclass
class Usage:
    """Thread-safe totals of every :class:`CallRecord` of a run (root, sub-calls, children),
    plus counters of retries, rate limits, failed calls and refused prompts."""

    records: list[CallRecord] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=lambda: {
        "retries": 0, "rate_limited": 0, "failed_calls": 0, "refused_oversized": 0})
    #: The sub-call limiter, reported as ``"concurrency"`` in :meth:`summary` when set.
    limiter: AdaptiveLimiter | None = field(default=None, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, record: CallRecord) -> None:
        """Append one request's usage."""
        with self.lock:
            self.records.append(record)

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name`` (``retries``, ``rate_limited``, ...)."""
        with self.lock:
            self.counters[name] = self.counters.get(name, 0) + n

    @property
    def sub_calls(self) -> int:
        """Number of answered sub-calls so far (cache replays included)."""
        with self.lock:
            return sum(1 for r in self.records if r.role == "sub")

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

    def summary(self) -> dict[str, Any]:
        """``{"by_model": {model: G}, "root": G, "sub": G, "total_tokens", "cost_usd", "cached_calls",
        "retries", "rate_limited", "failed_calls", "refused_oversized", "concurrency"}`` where each group ``G`` is
        ``{"calls", "cached_calls", "input_tokens", "output_tokens", "cost_usd", "latency_s"}``;
        ``cost_usd`` is ``None`` (JSON null) when a price is unknown, never a made-up zero."""
        def agg(rows: list[CallRecord]) -> dict[str, Any]:
            costs = [r.cost_usd for r in rows]
            return {"calls": len(rows), "cached_calls": sum(1 for r in rows if r.cached),
                    "input_tokens": sum(r.input_tokens for r in rows),
                    "output_tokens": sum(r.output_tokens for r in rows),
                    "cost_usd": None if any(c is None for c in costs) else round(sum(c or 0 for c in costs), 6),
                    "latency_s": round(sum(r.latency_s for r in rows), 3)}
        with self.lock:
            rows = list(self.records)
            counters = dict(self.counters)
        models_ = sorted({r.model for r in rows})
        return {"by_model": {m: agg([r for r in rows if r.model == m]) for m in models_},
                "root": agg([r for r in rows if r.role == "root"]),
                "sub": agg([r for r in rows if r.role == "sub"]),
                "total_tokens": sum(r.input_tokens + r.output_tokens for r in rows),
                "cost_usd": agg(rows)["cost_usd"],
                "cached_calls": sum(1 for r in rows if r.cached),
                **counters,
                **({"concurrency": self.limiter.summary()} if self.limiter is not None else {})}
