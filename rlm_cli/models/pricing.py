"""What a model's requests cost and reserve: prices from litellm's map, the worst case a request
reserves under ``--max-tokens``/``--max-cost`` (``models.budget``), how much a provider counts
over tiktoken, and a reply's cost. A part of :class:`~rlm_cli.models.client.ModelClient`, which
holds the state these methods read."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

from rlm_cli.config import Settings
from rlm_cli.errors import RLMError
from rlm_cli.models.backend import Answer, Backend
from rlm_cli.models.budget import Budget, Reservation
from rlm_cli.models.caching import CACHE_WRITE_PRICE, needs_breakpoints
from rlm_cli.models.estimate import INPUT_MARGIN, Estimate


class Pricing:
    """The pricing and reservation methods of ``ModelClient`` (which sets the attributes below)."""

    settings: Settings
    backend: Backend
    budget: Budget
    notify: Callable[[str], None] | None
    _info_lock: threading.Lock
    _prices: dict[str, tuple[float, float] | None]
    _ratios: dict[str, float]
    said: set[str]

    def router_models(self) -> dict[str, str]:
        """``{Router model group: its first deployment's model}`` (``ModelClient`` says how)."""
        raise NotImplementedError

    def reply_cap(self, model: str) -> int:
        """``max_tokens`` asked of ``model`` (``ModelClient`` says how)."""
        raise NotImplementedError

    def _reserve(self, estimate: Estimate, model: str) -> Reservation:
        """Reserve a request's worst case (``models.budget``): its input tokens (tiktoken's count
        times :data:`INPUT_MARGIN`, or the larger ratio a reply of ``model`` showed) and its reply
        cap, priced for a priced model (its input at the cache-write price where requests carry
        breakpoints: ``models.caching.CACHE_WRITE_PRICE``).

        Raises:
            BudgetExceededError: it cannot fit the budget.
        """
        with self._info_lock:
            ratio = max(INPUT_MARGIN, self._ratios.get(model, 0.0))
        tokens = math.ceil(estimate.tokens() * ratio)
        prices = self.prices(model)
        if prices is not None and self.settings.prompt_cache and needs_breakpoints(self.router_models().get(model, model)):
            prices = (prices[0] * CACHE_WRITE_PRICE, prices[1])  # every input token may be a cache write
        return self.budget.reserve(tokens, self.reply_cap(model), prices)

    def prices(self, model: str) -> tuple[float, float] | None:
        """USD per input and output token of ``model`` (a Router group: its first deployment's
        model) per litellm's map, the dearest tier; ``None`` when unknown. Cached."""
        with self._info_lock:
            if model in self._prices:
                return self._prices[model]
        target = self.router_models().get(model, model)
        try:
            got = self.backend.prices(target)
        except RLMError:
            got = None
        with self._info_lock:
            self._prices[model] = got
        return got

    def _learn_ratio(self, model: str, input_tokens: int, estimate: Estimate | None) -> None:
        """Remember by how much ``model``'s provider counted more input tokens than tiktoken did."""
        if estimate is None or not estimate.counted:
            return
        ratio = input_tokens / max(1, estimate.tokens())
        with self._info_lock:
            if ratio > self._ratios.get(model, 0.0):
                self._ratios[model] = ratio

    def _cost(self, answer: Answer, model: str, counted: tuple[int, int] | None = None) -> float | None:
        """Cost in USD from litellm's offline price map; ``None`` when the model is not priced.
        ``counted``: the ``(input, output)`` tokens rlm counted for a reply without counts,
        priced here (litellm priced it from no tokens)."""
        if counted is not None and answer.priced:
            rates = self.prices(model)
            if rates is not None:
                return counted[0] * rates[0] + counted[1] * rates[1]
        if answer.cost_usd is None or not answer.priced:
            if self.settings.max_cost is not None and model not in self.said:
                self.said.add(model)
                if self.notify:
                    self.notify(f"the price of {model} is unknown, so --max-cost cannot count its calls")
            return None
        return float(answer.cost_usd)
