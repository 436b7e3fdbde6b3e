"""The budgets (``--max-cost``, ``--max-tokens``, ``--max-sub-calls``, ``--timeout``): enforced by
the parent across the root model, sub-calls and recursive children; the REPL worker can neither
see nor raise them.

**Tokens and cost are reserved before a request is sent.** Each request reserves its worst case:
its input tokens (counted by the client with tiktoken, plus a margin) and the most output it may
get (its ``max_tokens``), priced with litellm's price map for a priced model. It is sent only if
what was spent, plus what the requests in flight reserved, plus its own reservation stays within
``--max-tokens`` and ``--max-cost``; when only the reservations in flight stand in the way it
waits for them to settle; near the end of a budget its ``max_tokens`` is lowered to what is left
(:data:`MIN_REPLY_TOKENS` at least); when even that does not fit, the budget is reached and no
further request starts. On return the reservation is replaced by what the provider counted.

So no request is sent that could cross a budget, and the *overshoot is bounded by the excess of
the requests in flight at once over their reservations*: input tokens the provider counts beyond
the client's estimate (output is capped by ``max_tokens``, which providers honour). With a
provider counting like tiktoken's ``o200k_base`` (OpenAI) it is zero; at ``--max-concurrency 1``
it is at most one request's excess; after a reply shows an excess, the client raises its input
estimate for that model by the ratio seen. A request that fails is charged nothing.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from rlm_cli.config import Settings
from rlm_cli.errors import BudgetExceededError
from rlm_cli.models.usage import Usage

#: A request is not sent when less than this many output tokens would be left for its reply
#: (or its own cap, if lower): the budget is then reached.
MIN_REPLY_TOKENS = 16


@dataclass
class Reservation:
    """What one request holds of the budgets until it settles: ``tokens`` (input + output),
    ``cost_usd`` (0 for an unpriced model) and ``max_output`` (the ``max_tokens`` it may ask for,
    at most what it asked)."""

    tokens: int
    cost_usd: float
    max_output: int


class Budget:
    """Limits enforced by the parent across root calls, sub-calls and recursive children.

    :meth:`check` runs before every request and raises :class:`BudgetExceededError` once a
    limit is reached; from then on every call is refused with the same error. Sub-calls are
    counted when they *start* (so concurrent calls cannot overshoot ``--max-sub-calls``);
    tokens and cost are reserved by :meth:`reserve` before a request is sent and released by
    :meth:`settle` once its usage is recorded (see the module docstring for the bound).
    """

    def __init__(self, settings: Settings, usage: Usage, *, started: float | None = None) -> None:
        self.settings = settings
        self.usage = usage
        self.started = time.monotonic() if started is None else started
        self.deadline = None if settings.timeout is None else self.started + settings.timeout
        self.sub_calls_started = 0
        self._exceeded: BudgetExceededError | None = None
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        self._reserved_tokens = 0
        self._reserved_cost = 0.0
        self._in_flight = 0

    @property
    def exceeded(self) -> BudgetExceededError | None:
        """The error of the first call refused for a budget, or ``None``.

        A limit crossed by the answers of calls already running is noticed by the next
        :meth:`check` (the next call), so a code block whose last sub-calls cross it can still
        finish with ``FINAL``; one that asked for a refused call cannot.
        """
        with self._lock:
            return self._exceeded

    def remaining_s(self) -> float | None:
        """Seconds left before ``--timeout`` (``None`` without one; may be negative)."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    def check(self, *, sub_call: bool = False, counted: bool = False) -> None:
        """Raise if a budget is spent; with ``sub_call`` also count one sub-call against
        ``--max-sub-calls`` (refusing it when none is left). ``counted`` marks a request of a
        sub-call already counted (its first attempt or a retry): the sub-call budget, which that
        call was granted, does not stop it (a retry after a server failed is the same call); the
        other limits do.

        Raises:
            BudgetExceededError: a limit is reached (the same one on every later call, each raise a
                fresh copy: what a question attaches to it, its partial answer and counts, stays
                that question's).
        """
        s = self.settings
        with self._lock:
            if self._exceeded is None:
                err = self._evaluate()
                if err is None and sub_call:
                    if s.max_sub_calls is not None and self.sub_calls_started >= s.max_sub_calls:
                        err = BudgetExceededError(f"sub-call budget of {s.max_sub_calls:,} calls reached",
                                                  budget="sub_calls", hint="raise --max-sub-calls")
                    else:
                        self.sub_calls_started += 1
                self._exceeded = err
            if self._exceeded is not None:
                if counted and self._exceeded.budget == "sub_calls":
                    late = self._evaluate()
                    if late is not None:
                        raise late
                    return
                raise fresh(self._exceeded)

    @property
    def reserves(self) -> bool:
        """Whether a token or cost budget is set (requests then need a :meth:`reserve`)."""
        return self.settings.max_tokens is not None or self.settings.max_cost is not None

    def reserve(self, input_tokens: int, max_output: int, prices: tuple[float, float] | None) -> Reservation:
        """Reserve a request's worst case before it is sent: ``input_tokens`` and up to
        ``max_output`` output tokens, priced at ``prices`` (USD per input and per output token;
        ``None`` for an unpriced model, which the cost budget cannot count). Waits while only
        the reservations in flight leave too little; lowers ``max_output`` to what is left near
        the end of a budget (see the module docstring).

        Raises:
            BudgetExceededError: a limit is reached, or this request cannot fit even with nothing
                else in flight (the same error on every later call).
        """
        with self._settled:
            while True:
                if self._exceeded is None:
                    self._exceeded = self._evaluate()
                if self._exceeded is not None:
                    raise fresh(self._exceeded)
                out = self._room(input_tokens, max_output, prices)
                if out >= min(MIN_REPLY_TOKENS, max_output):
                    cost = 0.0 if prices is None else input_tokens * prices[0] + out * prices[1]
                    r = Reservation(input_tokens + out, cost, out)
                    self._reserved_tokens += r.tokens
                    self._reserved_cost += r.cost_usd
                    self._in_flight += 1
                    return r
                if self._in_flight == 0:
                    self._exceeded = self._no_room(input_tokens, max_output, prices)
                    raise fresh(self._exceeded)
                left = self.remaining_s()
                self._settled.wait(timeout=None if left is None else max(0.01, left))

    def settle(self, reservation: Reservation) -> None:
        """Release ``reservation`` (call it after the request's usage is recorded, or when the
        request failed) and wake the requests waiting for room."""
        with self._settled:
            self._reserved_tokens -= reservation.tokens
            self._reserved_cost -= reservation.cost_usd
            self._in_flight -= 1
            self._settled.notify_all()

    def _room(self, input_tokens: int, max_output: int, prices: tuple[float, float] | None) -> int:
        """Output tokens a request of ``input_tokens`` may ask for now (negative: none)."""
        s = self.settings
        out = max_output
        if s.max_tokens is not None:
            out = min(out, s.max_tokens - self.usage.total_tokens - self._reserved_tokens - input_tokens)
        if s.max_cost is not None and prices is not None:
            left = s.max_cost - self.usage.known_cost_usd - self._reserved_cost - input_tokens * prices[0]
            if prices[1] > 0:
                out = min(out, math.floor(left / prices[1] + 1e-9) if left >= 0 else -1)
            elif left < 0:
                out = -1
        return out

    def _no_room(self, input_tokens: int, max_output: int, prices: tuple[float, float] | None) -> BudgetExceededError:
        s = self.settings
        need = input_tokens + min(MIN_REPLY_TOKENS, max_output)
        if s.max_tokens is not None and self.usage.total_tokens + need > s.max_tokens:
            return BudgetExceededError(f"token budget of {s.max_tokens:,} tokens reached ({self.usage.total_tokens:,} "
                                       f"used; the next request needs up to {need:,})", budget="tokens",
                                       hint="raise --max-tokens")
        assert s.max_cost is not None and prices is not None
        cost = input_tokens * prices[0] + min(MIN_REPLY_TOKENS, max_output) * prices[1]
        return BudgetExceededError(f"cost budget of ${s.max_cost:g} reached (${self.usage.known_cost_usd:.4f} spent; "
                                   f"the next request may cost up to ${cost:.4f})", budget="cost",
                                   hint="raise --max-cost")

    def _evaluate(self) -> BudgetExceededError | None:
        s = self.settings
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return BudgetExceededError(f"time budget of {s.timeout:g} s reached", budget="timeout",
                                       hint="raise --timeout")
        if s.max_tokens is not None and self.usage.total_tokens >= s.max_tokens:
            return BudgetExceededError(f"token budget of {s.max_tokens:,} tokens reached "
                                       f"({self.usage.total_tokens:,} used)", budget="tokens",
                                       hint="raise --max-tokens")
        if s.max_cost is not None and self.usage.known_cost_usd >= s.max_cost:
            return BudgetExceededError(f"cost budget of ${s.max_cost:g} reached "
                                       f"(${self.usage.known_cost_usd:.4f} spent)", budget="cost",
                                       hint="raise --max-cost")
        return None


def fresh(err: BudgetExceededError) -> BudgetExceededError:
    """A new :class:`BudgetExceededError` saying what ``err`` says (message, budget, hint), with
    nothing a question attached to ``err`` (a session's later questions meet the same budget)."""
    return BudgetExceededError(err.message, budget=err.budget, hint=err.hint)
