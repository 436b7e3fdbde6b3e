"""``ModelClient``: every model request of a run, root calls and sub-calls, through one policy:
budgets, retries, the response cache, the concurrency cap, input windows, streaming, and the
usage of each request. litellm itself runs in the client's backend (``models.backend``: in this
process, or ``models.host``: in the model host process).

Policy, all enforced here in the parent process (the worker can neither see nor raise it):

* **Concurrency**: sub-calls pass an :class:`AdaptiveLimiter` capped at ``--max-concurrency``.
  A 429 halves the cap (once per round of requests started under the old cap); every success
  adds ``1/cap``, so the cap grows back by one per round that goes through (AIMD).
* **Retries**: 429, 5xx, timeouts, malformed bodies and dropped connections are retried up to
  ``--retries`` times with exponential backoff and jitter (0.5 s, 1 s, 2 s... up to 20 s), or
  after the provider's ``Retry-After``/``retry-after-ms`` when it sends one (up to 120 s; longer
  gives up). A 429 met while the cap was above 1 lowers the cap and is retried without using up
  ``--retries`` (at most :data:`MAX_FREE_RATE_LIMIT_RETRIES` times). 401/403/404 and other
  4xx are never retried. A 401/403/404 on any call is *fatal*: it is kept in
  ``ModelClient.fatal`` and every later call raises it, so the run stops with exit 4. Any other
  failure of a sub-call reaches the model's code as an error string.
* **Budgets**: :class:`Budget` is checked before every request (and retry); with
  ``--max-tokens`` or ``--max-cost`` each attempt first *reserves* its worst case: its input
  tokens (tiktoken's count times ``estimate.INPUT_MARGIN``, or the larger ratio a reply of that model
  showed) and its ``max_tokens``, priced (``models.budget``: nothing is sent that could cross a
  budget; the last requests get a lowered ``max_tokens``, and are then not cached). A reply
  without token counts is counted with tiktoken (said once per model) and priced from them. Once
  a limit is reached no further request starts.
* **Replies**: a streamed reply must end within ``--request-timeout`` (else it is cut and retried
  like a timeout); a reply over ``backend.MAX_REPLY_CHARS`` is cut there, said once.
* **Windows**: a sub-call prompt larger than the sub-model's input window is refused before
  sending (:class:`PromptTooLargeError`, ``models.estimate``).
* **Cache**: with ``llm_cache`` on, answers are replayed from :class:`~rlm_cli.models.llm_cache.LLMCache`.
  The n-th identical request of a run is keyed apart from the first, so asking the same prompt
  twice in a run still gets two samples, and a rerun replays both.
* **Streaming**: a call given ``on_delta`` (root calls) asks the provider to stream
  (``stream=True`` with ``stream_options.include_usage``) and hands each piece of text to
  ``on_delta`` as it arrives; ``on_delta(None)`` means "forget what was shown, the request is
  sent again" (a retry after a stream broke). Usage comes from the provider's usage chunk, else
  from litellm's count, else from tiktoken; cost from litellm's price map as for any call. A
  provider that refuses to stream (a 400 naming ``stream``) or answers a streamed request with a
  plain JSON body is asked again without streaming, and its model is not streamed again in the
  run; the whole reply then reaches ``on_delta`` at once, as does a cached answer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlm_cli.config import Settings
from rlm_cli.errors import ProviderError
from rlm_cli.models.backend import MAX_REPLY_CHARS, Backend, LocalBackend
from rlm_cli.models.budget import Budget, Reservation
from rlm_cli.models.detect import DEFAULT_WINDOW
from rlm_cli.models.estimate import Estimate, check_window, counted_tokens
from rlm_cli.models.failures import CallFailed
from rlm_cli.models.limiter import AdaptiveLimiter
from rlm_cli.models.llm_cache import LLMCache
from rlm_cli.models.messages import valid_messages
from rlm_cli.models.pricing import Pricing
from rlm_cli.models.sending import OnDelta, Sending
from rlm_cli.models.usage import CallRecord, Flight, Usage


@dataclass
class Completion:
    """A model answer: ``text`` and the request's :class:`CallRecord`."""

    text: str
    record: CallRecord


Notify = Callable[[str], None]


class ModelClient(Pricing, Sending):
    """Calls models through litellm (or a litellm Router with ``--router-config``); every
    request is checked against ``budget``, counted in ``usage``, retried per the module policy,
    and answered from the response cache when possible. Thread-safe.

    ``notify`` receives warnings worth showing the user (one line each). ``windows``: input
    windows already resolved (a session's run plan: ``{model: (tokens, source)}``), reported by
    :meth:`input_window_source` as they were resolved.
    """

    def __init__(self, settings: Settings, usage: Usage | None = None, budget: Budget | None = None, *,
                 cache: LLMCache | None = None, notify: Notify | None = None,
                 started: float | None = None, backend: Backend | None = None,
                 limiter: AdaptiveLimiter | None = None, windows: dict[str, tuple[int, str]] | None = None,
                 said: set[str] | None = None) -> None:
        self.settings = settings
        self.usage = usage or Usage()
        self.budget = budget or Budget(settings, self.usage, started=started)
        self.cache = cache if cache is not None else (LLMCache() if settings.llm_cache else None)
        self.notify = notify
        #: Where litellm runs: this process (the default) or a model host process.
        self.backend: Backend = backend if backend is not None else LocalBackend()
        self.limiter = limiter or AdaptiveLimiter(settings.max_concurrency)
        self.usage.limiter = self.usage.limiter or self.limiter
        #: The first fatal provider error (401/403/404): every later call raises it.
        self.fatal: CallFailed | None = None
        self._router_models: dict[str, str] | None = None
        self._info_lock = threading.Lock()
        self._windows: dict[str, tuple[int, str]] = dict(windows or {})
        #: Warnings said once (shared by the questions of a session: once per run, not per question).
        self.said: set[str] = set() if said is None else said
        self._seen: dict[str, int] = {}
        self._prices: dict[str, tuple[float, float] | None] = {}
        #: Per model: the largest ratio of a provider's input count to tiktoken's seen in this run.
        self._ratios: dict[str, float] = {}
        #: Models whose provider could not stream in this run (asked without streaming since).
        self._no_stream: set[str] = set()

    # -- setup -------------------------------------------------------------------------------------
    def litellm(self) -> Any:
        """The litellm module of the in-process backend, imported on first use (it takes seconds).

        Raises:
            ProviderError: the backend is a model host process (litellm is not in this process).
        """
        if not isinstance(self.backend, LocalBackend):
            raise ProviderError("litellm runs in the model host process, not in this one")
        return self.backend.load()

    def router_models(self) -> dict[str, str]:
        """``{Router model group: its first deployment's model}`` (``{}`` without ``--router-config``).

        Raises:
            UsageError: the ``--router-config`` file is unreadable or invalid.
        """
        if self._router_models is None:
            groups = self.backend.router_groups(self.settings.router_config) if self.settings.router_config else {}
            with self._info_lock:
                self._router_models = dict(groups)
        return self._router_models

    def allowed_models(self) -> set[str]:
        """Models the worker may name in ``llm_query(..., model=...)``: the root and sub-model and
        the Router's model groups (so code cannot switch to a pricier model)."""
        names = {m for m in (self.settings.model, self.settings.effective_sub_model) if m}
        return names | set(self.router_models())

    def input_window(self, model: str) -> int:
        """The input window (tokens) used for ``model`` (see :meth:`input_window_source`)."""
        return self.input_window_source(model)[0]

    def input_window_source(self, model: str) -> tuple[int, str]:
        """``(tokens, source)``: as resolved already (the ``windows`` given), else
        ``--sub-model-window`` / ``--root-model-window`` when ``model`` is that model (``"flag"``),
        else litellm's map (``"model info"``, even when it equals the default; a Router group: its
        first deployment's), else ``(DEFAULT_WINDOW, "default")``."""
        s = self.settings
        known = self._windows.get(model)  # a dict read is atomic; the lock guards the write
        if known is not None:
            return known
        if model == s.effective_sub_model and s.sub_model_window:
            return s.sub_model_window, "flag"
        if model == s.model and s.root_model_window:
            return s.root_model_window, "flag"
        window = self.backend.facts(self.router_models().get(model, model))[0]
        known = (window, "model info") if window else (DEFAULT_WINDOW, "default")
        with self._info_lock:
            self._windows[model] = known
        return known

    def price_known(self, model: str) -> bool:
        """Whether litellm's bundled price map prices ``model``."""
        return self.backend.facts(model)[1]

    # -- calls -----------------------------------------------------------------------------------
    def complete(self, messages: list[dict[str, Any]], *, model: str, role: str, depth: int = 0,
                 on_delta: OnDelta | None = None, temperature: float | None = None) -> Completion:
        """One chat completion (``role`` is ``"root"`` or ``"sub"``); with ``on_delta`` the reply
        is streamed to it as it is generated (see the module docstring). ``temperature``, when
        given, replaces ``--temperature`` for this request (the loop resamples a model that
        repeats itself).

        Raises:
            CallFailed: a fatal error earlier in the run, or this request failed for good
                (``fatal`` for auth/permission/unknown model); a ``ProviderError``, exit 4.
            PromptTooLargeError: a sub-call prompt is over the model's input window (not sent).
            BudgetExceededError: a budget is spent (checked before each request and retry).
        """
        if self.fatal is not None:
            raise self.fatal
        messages = valid_messages(messages)
        sub = role == "sub"
        if sub:
            check_window(messages, model, self.input_window(model), self.usage)
        self.budget.check(sub_call=sub)
        started = time.monotonic()
        key = None
        if self.cache is not None:
            base = None if self._uses_router(model) else self._destination(model)[0]
            params = self._cache_params(model, temperature)
            key = LLMCache.key(model, messages, api_base=base, params=params)
            with self._info_lock:  # the n-th identical request of a run replays the n-th answer
                seen = self._seen[key] = self._seen.get(key, -1) + 1
            if seen:
                key = LLMCache.key(model, messages, api_base=base, params={**params, "occurrence": seen})
            hit = self.cache.get(key)
            if hit is not None:
                # Nothing was sent, so nothing was spent; but an unpriced model stays unknown.
                cost_hit = None if hit.get("cost_usd") is None else 0.0
                record = CallRecord(model, role, depth, 0, 0, cost_hit, time.monotonic() - started, cached=True)
                self.usage.add(record)
                if on_delta is not None:
                    on_delta(hit["text"])
                return Completion(hit["text"], record)
        held: list[Reservation] = []  # the reservation of the attempt that answered, settled below
        estimate = Estimate(messages) if self.budget.reserves else None
        flight, landed = Flight(self.usage, model, role), None
        try:
            answer, attempts = self._send_with_retries(messages, model=model, gated=sub, on_delta=on_delta,
                                                       temperature=temperature, estimate=estimate, held=held,
                                                       on_send=flight.sent)
            text, tin, tout = answer.text, answer.input_tokens, answer.output_tokens
            if not tin or (not tout and text):  # a provider that sent no counts: counted here
                tin, tout = counted_tokens(messages, text, tin, tout)
                self._say_once(f"uncounted:{model}", f"{model} sent no token counts; rlm counts its requests with "
                                                     "tiktoken (o200k_base) for the usage and the budgets")
                cost = self._cost(answer, model, counted=(tin, tout))
            else:
                self._learn_ratio(model, tin, estimate)
                cost = self._cost(answer, model)
            if answer.cut == "size":
                self._say(f"the reply of {model} was {answer.chars:,} characters; only the first "
                          f"{MAX_REPLY_CHARS:,} were kept")
            record = landed = CallRecord(model, role, depth, tin, tout, cost, time.monotonic() - started,
                                         attempts=attempts, cache_read_tokens=answer.cache_read_tokens,
                                         cache_write_tokens=answer.cache_write_tokens)
        except CallFailed:
            raise  # the provider answered with a failure: failed_calls counts it
        except BaseException:  # the run stopped before its answer (--timeout, Ctrl-C): Flight.end
            landed = CallRecord(model, role, depth, 0, 0, 0.0, time.monotonic() - started, abandoned=True)
            raise
        finally:
            flight.end(landed)
            for reservation in held:
                self.budget.settle(reservation)
        lowered = any(r.max_output < self.reply_cap(model) for r in held)
        if key is not None and self.cache is not None and not lowered and not answer.cut:
            self.cache.put(key, {"model": model, "text": text, "input_tokens": tin, "output_tokens": tout,
                                 "cost_usd": cost, "created": time.time()})
        return Completion(text, record)

    def _uses_router(self, model: str) -> bool:
        return model in self.router_models()

    def reply_cap(self, model: str) -> int:
        """``max_tokens`` asked of ``model``: :func:`~rlm_cli.models.window.reply_tokens` of its input window."""
        from rlm_cli.models.window import reply_tokens

        return reply_tokens(self.input_window(model))

    def _sampling(self, model: str, temperature: float | None = None) -> dict[str, Any]:
        """The sampling parameters of a request to ``model``: ``max_tokens`` (see
        :meth:`reply_cap`) and ``temperature`` (this request's, else ``--temperature`` when set)."""
        params: dict[str, Any] = {"max_tokens": self.reply_cap(model)}
        if temperature is None:
            temperature = self.settings.temperature
        if temperature is not None:
            params["temperature"] = temperature
        return params

    def _cache_params(self, model: str, temperature: float | None = None) -> dict[str, Any]:
        params = self._sampling(model, temperature)
        if self._uses_router(model):
            params["router"] = self.router_models()[model]
        return params

    def _say(self, message: str) -> None:
        if self.notify:
            self.notify(message)

    def _say_once(self, key: str, message: str) -> None:
        with self._info_lock:
            first = key not in self.said
            self.said.add(key)
        if first:
            self._say(message)

