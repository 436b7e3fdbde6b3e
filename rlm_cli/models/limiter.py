"""The sub-call concurrency cap: :class:`AdaptiveLimiter` halves on a rate limit and grows back by
one per round of calls that go through (AIMD), so a provider's 429s slow a batch down instead of
failing it."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlm_cli.shapes import Concurrency


class AdaptiveLimiter:
    """A concurrency cap that adapts to rate limits (additive increase, multiplicative decrease).

    :meth:`acquire` blocks while ``in_flight >= int(limit)`` and returns the *epoch* the slot
    was granted in; :meth:`release` reports the outcome. A rate limit from the current epoch
    halves ``limit`` (floor 1) and starts a new epoch, so a burst of 429s from one round of
    requests halves it once; a success adds ``1 / limit`` (about +1 per round), up to ``maximum``.
    """

    def __init__(self, maximum: int) -> None:
        self.maximum = max(1, maximum)
        self.limit = float(self.maximum)
        self.in_flight = 0
        self.epoch = 0
        self.decreases = 0
        self.lowest = self.maximum
        self._cond = threading.Condition()

    def acquire(self, timeout: float | None = None) -> tuple[int, float]:
        """Wait for a slot; returns ``(epoch, limit when granted)``.

        Raises:
            TimeoutError: no slot within ``timeout`` seconds.
        """
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self.in_flight >= int(self.limit):
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError("no concurrency slot")
                self._cond.wait(left)
            self.in_flight += 1
            return self.epoch, self.limit

    def release(self, epoch: int, *, rate_limited: bool = False, success: bool = False) -> None:
        """Give the slot back and adapt the cap to the outcome."""
        with self._cond:
            self.in_flight -= 1
            if rate_limited and epoch == self.epoch:
                self.limit = max(1.0, self.limit / 2)
                self.epoch += 1
                self.decreases += 1
                self.lowest = min(self.lowest, int(self.limit))
            elif success and self.limit < self.maximum:
                self.limit = min(float(self.maximum), self.limit + 1.0 / self.limit)
            self._cond.notify_all()

    def summary(self) -> Concurrency:
        """``{"max", "lowest", "final", "decreases"}`` for the run's usage report."""
        with self._cond:
            return {"max": self.maximum, "lowest": self.lowest, "final": int(self.limit),
                    "decreases": self.decreases}
