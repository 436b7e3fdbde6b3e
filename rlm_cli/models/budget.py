"""The budgets (``--max-cost``, ``--max-tokens``, ``--max-sub-calls``, ``--timeout``): checked by
the parent before every request across the root model, sub-calls and recursive children; the REPL
worker can neither see nor raise them."""

from __future__ import annotations

import threading
import time

from rlm_cli.config import Settings
from rlm_cli.errors import BudgetExceededError
from rlm_cli.models.usage import Usage


class Budget:
    """Limits enforced by the parent across root calls, sub-calls and recursive children.

    :meth:`check` runs before every request and raises :class:`BudgetExceededError` once a
    limit is reached; from then on every call is refused with the same error. Sub-calls are
    counted when they *start* (so concurrent calls cannot overshoot ``--max-sub-calls``);
    tokens and cost can overshoot by what the requests already in flight use.
    """

    def __init__(self, settings: Settings, usage: Usage, *, started: float | None = None) -> None:
        self.settings = settings
        self.usage = usage
        self.started = time.monotonic() if started is None else started
        self.deadline = None if settings.timeout is None else self.started + settings.timeout
        self.sub_calls_started = 0
        self._exceeded: BudgetExceededError | None = None
        self._lock = threading.Lock()

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

    def check(self, *, sub_call: bool = False) -> None:
        """Raise if a budget is spent; with ``sub_call`` also count one sub-call against
        ``--max-sub-calls`` (refusing it when none is left).

        Raises:
            BudgetExceededError: a limit is reached (the same error on every later call).
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
                raise self._exceeded

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
