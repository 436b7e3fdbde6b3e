"""The model layer: ``ModelClient`` calls providers through litellm and counts usage per request;
``LMHandler`` is the Unix-socket server that relays the worker's sub-calls to it.

Socket protocol (``rlm_cli.protocol`` frames, one request per connection): the worker sends
``{"token", "type": "completion", "prompt": str | [messages], "model": str | None}`` or
``{"token", "type": "rlm_query", "prompt": str, "context": str | None}`` and reads
``{"ok": true, "text": str}`` or ``{"ok": false, "error": str}``. A connection whose token is
unknown is closed without an answer. The token also tells the handler the *depth* of the
worker that is calling, so the depth limit never depends on what the worker says.

**Why a request is always served at its own worker's depth.** The worker's code is hostile, so
its token is not a secret from it (the worker keeps it in a closure, out of plain attributes, but
code can read its own memory) and the depth limit cannot rest on the token alone. Three rules:

1. *A token is good only from its own worker.* :meth:`LMHandler.register` binds a token to the
   worker's process (``bind``; the orchestrator gives the launcher's pid, re-read on every
   request so a restarted worker keeps its token). Every connection's peer is read from the
   kernel (``SO_PEERCRED`` on Linux; it reports the peer's pid translated into *our* PID
   namespace, so it works for a bwrap worker in its own namespace too) and must be that
   process or one of its descendants (``/proc/PID/stat`` parents). A token handed to another
   worker (a sub-RLM, a sibling) is refused there like an unknown one. Where the kernel gives
   no peer (a platform without ``SO_PEERCRED``/``LOCAL_PEERPID``), nothing is served.
2. *A worker that waits for a sub-RLM is served nothing.* From the moment a worker's
   ``rlm_query`` starts a sub-RLM until it returns, every other request carrying that worker's
   token is refused (with an error string). Otherwise a parent could relay its child's requests
   (another thread of the parent serving a socket the child reaches, e.g. an abstract Unix
   socket at the ``process`` level) and the child would recurse at the parent's depth.
3. *The depth comes from the registry*, never from the request.

So every request is answered at the depth of the worker that sent it, and a loop at depth
``d + 1`` runs only while its parent at depth ``d`` is blocked: nesting never exceeds
``--max-depth``. The price: a worker's ``rlm_query`` calls that start sub-RLMs run one at a
time, and its other threads cannot call models meanwhile.

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
* **Budgets**: :class:`Budget` is checked before every request (and retry); once a limit is
  reached no further request starts.
* **Windows**: a sub-call prompt larger than the sub-model's input window is refused before
  sending (:class:`PromptTooLargeError`).
* **Cache**: with ``llm_cache`` on, answers are replayed from :class:`~rlm_cli.llm_cache.LLMCache`.
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

litellm is imported lazily, on the first model call, by the client's backend: in this process
(``llm_backend.LocalBackend``) or in a model host process (``llm_host.HostBackend``).
"""

from __future__ import annotations

import email.utils
import math
import os
import random
import secrets
import socket
import socketserver
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm_cli import models, protocol
from rlm_cli.config import Settings
from rlm_cli.errors import BudgetExceededError, ExitCode, ProviderError, RLMError
from rlm_cli.llm_backend import Answer, Backend, LocalBackend, error_class_names, short_error
from rlm_cli.llm_cache import LLMCache

#: Largest request frame accepted from the worker (a sub-call prompt): 64 MiB.
MAX_REQUEST_BYTES = 64 * 1024 * 1024
#: First backoff (seconds); doubled per retry, with jitter, up to :data:`MAX_BACKOFF_S`.
BASE_BACKOFF_S = 0.5
MAX_BACKOFF_S = 20.0
#: A ``Retry-After`` longer than this many seconds is not waited for: the call fails.
MAX_RETRY_AFTER_S = 120.0
#: Rate-limit retries that do not count against ``--retries`` (while concurrency can still drop).
MAX_FREE_RATE_LIMIT_RETRIES = 10
#: Tokens added per message (and per request) to the prompt's text tokens for the window check.
MESSAGE_OVERHEAD_TOKENS = 4


class PromptTooLargeError(RLMError):
    """A sub-call prompt exceeds the sub-model's input window; it was not sent."""

    exit_code = ExitCode.USAGE


class CallFailed(ProviderError):
    """A model request failed for good (exit 4 when it escapes).

    ``fatal`` failures (authentication, permission, unknown model) concern every later call
    too, so the run stops; other failures concern only this prompt. ``status`` is the HTTP
    status when there was one.
    """

    def __init__(self, message: str, *, fatal: bool, status: int | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.fatal = fatal
        self.status = status


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

    def summary(self) -> dict[str, int]:
        """``{"max", "lowest", "final", "decreases"}`` for the run's usage report."""
        with self._cond:
            return {"max": self.maximum, "lowest": self.lowest, "final": int(self.limit),
                    "decreases": self.decreases}


@dataclass
class Completion:
    """A model answer: ``text`` and the request's :class:`CallRecord`."""

    text: str
    record: CallRecord


Notify = Callable[[str], None]
#: Receives each streamed piece of a reply; ``None`` says the pieces so far are void (retry).
OnDelta = Callable[["str | None"], None]


class ModelClient:
    """Calls models through litellm (or a litellm Router with ``--router-config``); every
    request is checked against ``budget``, counted in ``usage``, retried per the module policy,
    and answered from the response cache when possible. Thread-safe.

    ``notify`` receives warnings worth showing the user (one line each).
    """

    def __init__(self, settings: Settings, usage: Usage | None = None, budget: Budget | None = None, *,
                 cache: LLMCache | None = None, notify: Notify | None = None,
                 started: float | None = None, backend: Backend | None = None,
                 limiter: AdaptiveLimiter | None = None) -> None:
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
        self._windows: dict[str, int] = {}
        self._warned: set[str] = set()
        self._seen: dict[str, int] = {}
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
        """The input window (tokens) used for ``model``: ``--sub-model-window`` /
        ``--root-model-window`` when ``model`` is that model, else litellm's map (for a Router
        group: its first deployment's model), else :data:`models.DEFAULT_WINDOW`."""
        s = self.settings
        if model == s.effective_sub_model and s.sub_model_window:
            return s.sub_model_window
        if model == s.model and s.root_model_window:
            return s.root_model_window
        target = self.router_models().get(model, model)
        with self._info_lock:
            known = self._windows.get(model)
        if known is None:
            known = self.backend.facts(target)[0] or models.DEFAULT_WINDOW
            with self._info_lock:
                self._windows[model] = known
        return known

    def price_known(self, model: str) -> bool:
        """Whether litellm's bundled price map prices ``model``."""
        return self.backend.facts(model)[1]

    # -- calls -----------------------------------------------------------------------------------
    def complete(self, messages: list[dict[str, Any]], *, model: str, role: str, depth: int = 0,
                 on_delta: OnDelta | None = None) -> Completion:
        """One chat completion (``role`` is ``"root"`` or ``"sub"``); with ``on_delta`` the reply
        is streamed to it as it is generated (see the module docstring).

        Raises:
            CallFailed: a fatal error earlier in the run, or this request failed for good
                (``fatal`` for auth/permission/unknown model); a ``ProviderError``, exit 4.
            PromptTooLargeError: a sub-call prompt is over the model's input window (not sent).
            BudgetExceededError: a budget is spent (checked before each request and retry).
        """
        if self.fatal is not None:
            raise self.fatal
        sub = role == "sub"
        if sub:
            self._check_window(messages, model)
        self.budget.check(sub_call=sub)
        started = time.monotonic()
        key = None
        if self.cache is not None:
            base = None if self._uses_router(model) else self.settings.api_base
            params = self._cache_params(model)
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
        answer, attempts = self._send_with_retries(messages, model=model, gated=sub, on_delta=on_delta)
        text, tin, tout = answer.text, answer.input_tokens, answer.output_tokens
        if on_delta is not None:  # streamed: a provider without a usage chunk is counted here
            tin, tout = _counted_tokens(messages, text, tin, tout)
        cost = self._cost(answer, model)
        record = CallRecord(model, role, depth, tin, tout, cost, time.monotonic() - started, attempts=attempts)
        self.usage.add(record)
        if key is not None and self.cache is not None:
            self.cache.put(key, {"model": model, "text": text, "input_tokens": tin, "output_tokens": tout,
                                 "cost_usd": cost, "created": time.time()})
        return Completion(text, record)

    def _uses_router(self, model: str) -> bool:
        return model in self.router_models()

    def _cache_params(self, model: str) -> dict[str, Any]:
        if self._uses_router(model):
            return {"router": self.router_models()[model]}
        return {}

    def _check_window(self, messages: list[dict[str, Any]], model: str) -> None:
        window = self.input_window(model)
        texts = [_content_text(m.get("content")) for m in messages]
        # A token is at least one byte, so a prompt of at most `window` bytes always fits.
        if sum(len(t.encode("utf-8", "surrogatepass")) for t in texts) + MESSAGE_OVERHEAD_TOKENS * (
                len(texts) + 1) <= window:
            return
        from rlm_cli.corpus.tokens import count_tokens_batch

        tokens = sum(count_tokens_batch(texts)) + MESSAGE_OVERHEAD_TOKENS * (len(texts) + 1)
        if tokens > window:
            self.usage.count("refused_oversized")
            raise PromptTooLargeError(
                f"prompt of about {tokens:,} tokens is over the input window of {model} ({window:,} tokens); "
                f"it was not sent. Split it into pieces of at most about {window * 3 // 4:,} tokens "
                "(e.g. chunk_text) and query each piece")

    def _send_with_retries(self, messages: list[dict[str, Any]], *, model: str, gated: bool,
                           on_delta: OnDelta | None = None) -> tuple[Answer, int]:
        """Send one request, retrying per the module policy; ``(answer, attempts)``. With
        ``on_delta`` the reply is streamed (falling back to a whole reply, see the module docstring)."""
        s = self.settings
        retries_used = 0
        free_rate_limits = 0
        attempts = 0
        while True:
            self.budget.check()
            timeout = s.request_timeout
            remaining = self.budget.remaining_s()
            if remaining is not None:  # in 0.5 s steps: litellm reuses its HTTP client per timeout value
                timeout = min(timeout, max(0.5, math.ceil(remaining * 2) / 2))
            epoch, limit = 0, 1.0
            if gated:
                try:
                    epoch, limit = self.limiter.acquire(timeout=remaining)
                except TimeoutError:  # the deadline passed while waiting for a slot
                    continue  # budget.check() raises
            attempts += 1
            kind = "ok"
            stream = on_delta is not None and model not in self._no_stream
            try:
                answer = self.backend.complete(
                    self._request(messages, model, timeout), router_config=self._router_file(model),
                    stream=stream, on_piece=on_delta if stream else None, deadline=self.budget.deadline)
                if stream:
                    self.budget.check()  # --timeout passed while the stream was read: refused like any request
            except BudgetExceededError:  # --timeout passed while a stream was read
                kind = "budget"
                raise
            except RLMError:  # not the provider: the model host is gone, or --router-config is bad
                kind = "local"
                raise
            except Exception as exc:  # noqa: BLE001 - litellm raises many provider-specific types
                error = exc
                kind = classify_error(exc)
            finally:
                if gated:
                    self.limiter.release(epoch, rate_limited=kind == "rate_limit", success=kind == "ok")
            if kind == "ok" and answer.not_streamed:
                self._stop_streaming(model, "answered a streamed request with a plain reply")
                continue  # asked again, without streaming; not a retry
            if kind == "ok":
                if on_delta is not None and not stream:
                    on_delta(answer.text)  # the whole reply at once
                return answer, attempts
            if stream and on_delta is not None:
                on_delta(None)  # whatever was shown of this attempt is void
            if stream and kind == "bad_request" and "stream" in str(error).lower():
                self._stop_streaming(model, "refused to stream")
                continue
            status = _status(error)
            message = f"model {model}: {short_error(error)}"
            if kind in ("auth", "not_found"):
                failed = CallFailed(message, fatal=True, status=status, hint=_hint(kind))
                self.fatal = self.fatal or failed
                raise failed from None
            if kind in ("bad_request", "context_window"):
                self.usage.count("failed_calls")
                raise CallFailed(message, fatal=False, status=status, hint=_hint(kind)) from None
            if kind == "rate_limit":
                self.usage.count("rate_limited")
                free = gated and limit > 1 and free_rate_limits < MAX_FREE_RATE_LIMIT_RETRIES
            else:
                free = False
            if not free and retries_used >= s.retries:
                self.usage.count("failed_calls")
                # litellm reports a refused connection as InternalServerError (500) "Connection error."
                unreachable = ("APIConnectionError" in error_class_names(error)
                               or "connection error" in str(error).lower())
                hint = (f"could not connect to {s.api_base or 'the provider'}: check --api-base and that the "
                        "server is running" if unreachable else
                        "the provider kept failing; try again later or raise --retries")
                raise CallFailed(f"{message} (after {attempts} attempts)", fatal=False, status=status,
                                 hint=hint) from None
            if free:
                free_rate_limits += 1
            else:
                retries_used += 1
            delay = retry_after_s(error)
            if delay is None:
                step = retries_used + free_rate_limits
                delay = min(MAX_BACKOFF_S, BASE_BACKOFF_S * 2 ** (step - 1)) * random.uniform(0.5, 1.0)
            elif delay > MAX_RETRY_AFTER_S:
                self.usage.count("failed_calls")
                raise CallFailed(f"{message} (the provider asks to retry after {delay:.0f} s)", fatal=False,
                                 status=status, hint="wait and run again") from None
            else:
                delay *= random.uniform(1.0, 1.1)  # never earlier than asked
            self.usage.count("retries")
            remaining = self.budget.remaining_s()
            time.sleep(max(0.0, delay if remaining is None else min(delay, remaining)))

    def _request(self, messages: list[dict[str, Any]], model: str, timeout: float) -> dict[str, Any]:
        """The request for the backend: model, messages, timeout, and the base URL and key."""
        request: dict[str, Any] = {"model": model, "messages": messages, "timeout": timeout}
        if self.settings.api_base:
            request["api_base"] = self.settings.api_base
        key = self.settings.effective_api_key
        if key:
            request["api_key"] = key
        return request

    def _router_file(self, model: str) -> str | None:
        """The ``--router-config`` file when ``model`` is one of its model groups, else ``None``."""
        return str(self.settings.router_config) if self._uses_router(model) else None

    def _stop_streaming(self, model: str, why: str) -> None:
        with self._info_lock:
            first = model not in self._no_stream
            self._no_stream.add(model)
        if first and self.notify:
            self.notify(f"{model} {why}: its replies are shown once complete")

    def _cost(self, answer: Answer, model: str) -> float | None:
        """Cost in USD from litellm's offline price map; ``None`` when the model is not priced."""
        if answer.cost_usd is None or not answer.priced:
            if self.settings.max_cost is not None and model not in self._warned:
                self._warned.add(model)
                if self.notify:
                    self.notify(f"the price of {model} is unknown, so --max-cost cannot count its calls")
            return None
        return float(answer.cost_usd)


def classify_error(exc: BaseException) -> str:
    """What a litellm/openai exception means for retrying: ``rate_limit``, ``retry`` (5xx,
    timeout, connection, malformed body), ``auth`` (401/403), ``not_found`` (404, unknown
    provider), ``context_window``, or ``bad_request`` (other 4xx and anything unrecognised)."""
    names = error_class_names(exc)
    status = _status(exc)
    if "ContextWindowExceededError" in names:
        return "context_window"
    if names & {"Timeout", "APITimeoutError"}:
        return "retry"
    if status in (401, 403) or names & {"AuthenticationError", "PermissionDeniedError"}:
        return "auth"
    if "LiteLLMUnknownProvider" in names or status == 404 or "NotFoundError" in names:
        return "not_found"
    if status == 429 or names & {"RateLimitError", "RouterRateLimitError"}:
        return "rate_limit"
    if names & {"APIConnectionError", "ServiceUnavailableError", "InternalServerError", "BadGatewayError"}:
        return "retry"
    if status in (408, 409, 425) or (isinstance(status, int) and status >= 500):
        return "retry"
    if "APIError" in names and status is None:
        return "retry"
    return "bad_request"


def retry_after_s(exc: BaseException) -> float | None:
    """Seconds the provider asked to wait (``retry-after-ms`` or ``Retry-After`` as seconds or an
    HTTP date), or ``None``."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or getattr(
        exc, "litellm_response_headers", None)
    if not headers:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms:
            return max(0.0, float(ms) / 1000)
        value = headers.get("retry-after") or headers.get("Retry-After")
    except (AttributeError, TypeError, ValueError):
        return None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(str(value))
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def _hint(kind: str) -> str:
    return {"auth": "check your API key (--api-key, RLM_API_KEY or the provider's variable) and its permissions",
            "not_found": "check --model / --sub-model and --api-base",
            "context_window": "the prompt is too large for the model: split it",
            "bad_request": "the provider rejected the request"}.get(kind, "")


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def _counted_tokens(messages: list[dict[str, Any]], text: str, tin: int, tout: int) -> tuple[int, int]:
    """``(input, output)`` tokens of a streamed call: the provider's numbers, or tiktoken's
    count (``o200k_base``, plus message overhead) where one is missing."""
    if tin and (tout or not text):
        return tin, tout
    from rlm_cli.corpus.tokens import count_tokens
    from rlm_cli.history import request_tokens

    return tin or request_tokens(messages), tout or (count_tokens(text) if text else 0)


RlmQueryHandler = Callable[[str, "str | None", int], str]
SubCallObserver = Callable[[dict[str, Any]], None]
#: ``(stage, depth, request, reply)``: ``start`` before an authenticated request is served,
#: ``end`` with the reply about to be sent (for progress displays; must not raise).
RequestObserver = Callable[[str, int, dict[str, Any], "dict[str, Any] | None"], None]


@dataclass
class _Registration:
    """A worker known to the relay: its depth, how to find its process (``owner`` returns the
    pid the launcher started, or ``None`` while there is none), and whether it is waiting for a
    sub-RLM it started."""

    depth: int
    owner: Callable[[], int | None] | None = None
    waiting: bool = False


class LMHandler:
    """Unix-socket server relaying worker requests to :class:`ModelClient`.

    One thread per connection, so ``llm_query_batched`` runs concurrently (the client caps it
    at ``--max-concurrency``). Socket file lives in a private 0711 folder; use as a context
    manager or call ``close()``, which removes both. Who may ask what: see the module docstring.
    """

    #: Refusal sent to a worker's other threads while its ``rlm_query`` sub-RLM runs.
    WAITING = ("this REPL is waiting for its rlm_query (a sub-RLM is running); its other requests are refused "
               "until that returns: call rlm_query from one thread at a time")

    def __init__(self, client: ModelClient, *, on_rlm_query: RlmQueryHandler | None = None,
                 on_sub_call: SubCallObserver | None = None, on_request: RequestObserver | None = None) -> None:
        self.client = client
        self.on_rlm_query = on_rlm_query
        self.on_sub_call = on_sub_call
        self.on_request = on_request
        self._tokens: dict[str, _Registration] = {}
        self._lock = threading.Lock()
        self.dir = Path(tempfile.mkdtemp(prefix="rlm-lm-"))
        os.chmod(self.dir, 0o711)
        self.socket_path = str(self.dir / "lm.sock")
        handler = self

        class _Req(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                handler._handle(self.request)

        class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True
            request_queue_size = 128  # a batch of 64+ prompts connects at once

        self._server = _Server(self.socket_path, _Req)
        os.chmod(self.socket_path, 0o666)  # the worker may run as another user; token and peer guard it
        # A short poll interval: close() waits for the serving loop to notice, on Ctrl-C too.
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="lm-handler", daemon=True)
        self._thread.start()

    def __enter__(self) -> LMHandler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def register(self, depth: int, owner: Callable[[], int | None] | None = None) -> str:
        """A new random token for a worker at ``depth``, served only once bound to its process
        (``owner`` here or :meth:`bind` later)."""
        token = secrets.token_hex(16)
        with self._lock:
            self._tokens[token] = _Registration(depth, owner)
        return token

    def bind(self, token: str, owner: Callable[[], int | None]) -> None:
        """Serve ``token`` only to connections from the process ``owner()`` returns (the pid the
        launcher started: the worker, or bwrap above it) and its descendants; ``owner`` is called
        on every request, so a restarted worker keeps its token and a stopped one (``None``)
        gets nothing.

        Raises:
            KeyError: ``token`` is not registered.
        """
        with self._lock:
            self._tokens[token].owner = owner

    def unregister(self, token: str) -> None:
        """Forget a worker's token; its later requests are refused."""
        with self._lock:
            self._tokens.pop(token, None)

    def recurses(self, depth: int) -> bool:
        """Whether an ``rlm_query`` from a worker at ``depth`` starts a sub-RLM (a loop at
        ``depth + 1`` below ``--max-depth``) rather than a plain sub-call."""
        return depth + 1 < self.client.settings.max_depth

    def close(self) -> None:
        """Stop serving and remove the socket and its folder."""
        self._server.shutdown()
        self._server.server_close()
        try:
            os.unlink(self.socket_path)
        except OSError:
            pass
        try:
            os.rmdir(self.dir)
        except OSError:
            pass

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        try:
            request = protocol.recv_message(conn, MAX_REQUEST_BYTES)
        except (OSError, protocol.ProtocolError):
            return
        with self._lock:
            reg = self._tokens.get(str(request.get("token", "")))
        if reg is None or not self._from_owner(conn, reg):
            return  # unknown, or used outside its own worker: close without a word
        # A sub-RLM holds its parent: nothing else of the parent is served until it returns.
        holds = request.get("type") == "rlm_query" and self.recurses(reg.depth)
        with self._lock:
            refused = reg.waiting
            if holds and not refused:
                reg.waiting = True
        conn.settimeout(None)
        self._observe("start", reg.depth, request, None)
        try:
            if refused:
                reply = {"ok": False, "error": self.WAITING}
            else:
                reply = self._serve(request, reg.depth)
        except BudgetExceededError as exc:
            reply = {"ok": False, "error": f"budget exceeded: {exc.message}; no further model calls are allowed"}
        except CallFailed as exc:
            stop = "; the run will stop" if exc.fatal else ""
            reply = {"ok": False, "error": f"{exc.message}{stop}"}
        except RLMError as exc:
            reply = {"ok": False, "error": exc.message}
        except Exception as exc:  # noqa: BLE001 - never kill the server thread silently
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        finally:
            if holds and not refused:
                with self._lock:
                    reg.waiting = False
        self._observe("end", reg.depth, request, reply)
        try:
            protocol.send_message(conn, reply)
        except OSError:
            pass

    def _observe(self, stage: str, depth: int, request: dict[str, Any], reply: dict[str, Any] | None) -> None:
        if self.on_request is not None:
            try:
                self.on_request(stage, depth, request, reply)
            except Exception:  # noqa: BLE001, S110 - a display problem must not fail a request
                pass

    @staticmethod
    def _from_owner(conn: socket.socket, reg: _Registration) -> bool:
        """Whether the peer of ``conn`` is the registered worker's process or below it."""
        owner = reg.owner() if reg.owner is not None else None
        pid = peer_pid(conn)
        return owner is not None and pid is not None and descends_from(pid, owner)

    def _serve(self, request: dict[str, Any], depth: int) -> dict[str, Any]:
        kind = request.get("type")
        if kind == "completion":
            prompt = request.get("prompt")
            messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
            model = request.get("model") or self.client.settings.effective_sub_model
            assert model is not None
            allowed = self.client.allowed_models()
            if str(model) not in allowed:
                return {"ok": False, "error": f"model {model!r} is not available to code; omit model= or use one "
                                              f"of {sorted(allowed)}"}
            started = time.monotonic()
            result = self.client.complete(messages, model=str(model), role="sub", depth=depth + 1)
            if self.on_sub_call:
                self.on_sub_call({"depth": depth, "model": model, "prompt_chars": sum(
                    len(str(m.get("content", ""))) for m in messages), "answer_chars": len(result.text),
                    "input_tokens": result.record.input_tokens, "output_tokens": result.record.output_tokens,
                    "cost_usd": result.record.cost_usd, "latency_s": round(time.monotonic() - started, 3),
                    "cached": result.record.cached,
                    "response": result.text, "messages": messages})  # for trajectories and replay
            return {"ok": True, "text": result.text}
        if kind == "rlm_query":
            if self.on_rlm_query is None:
                return {"ok": False, "error": "rlm_query is not available in this run"}
            ctx = request.get("context")
            text = self.on_rlm_query(str(request.get("prompt", "")), None if ctx is None else str(ctx), depth)
            return {"ok": True, "text": text}
        return {"ok": False, "error": f"unknown request type {kind!r}"}


#: ``getsockopt`` level and option of macOS's ``LOCAL_PEERPID`` (``sys/un.h``).
_SOL_LOCAL, _LOCAL_PEERPID = 0, 0x002


def peer_pid(conn: socket.socket) -> int | None:
    """The pid of the process that connected ``conn`` (a Unix stream socket), as the kernel
    recorded it at ``connect()``, in this process's PID namespace: ``SO_PEERCRED`` on Linux
    (``struct ucred``: pid, uid, gid as three ints), ``LOCAL_PEERPID`` on macOS; ``None`` when
    the platform gives none."""
    try:
        if hasattr(socket, "SO_PEERCRED"):
            size = struct.calcsize("3i")
            pid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, size))[0]
            return pid if pid > 0 else None
        if sys.platform == "darwin":
            pid = struct.unpack("i", conn.getsockopt(_SOL_LOCAL, _LOCAL_PEERPID, struct.calcsize("i")))[0]
            return pid if pid > 0 else None
    except (OSError, struct.error):
        return None
    return None


def descends_from(pid: int, ancestor: int) -> bool:
    """Whether process ``pid`` is ``ancestor`` or one of its descendants, following parent pids
    through ``/proc/PID/stat`` (Linux). Without ``/proc`` only ``pid == ancestor`` counts."""
    for _ in range(256):  # deeper than any real process tree
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                pid = int(fh.read().rsplit(b")", 1)[1].split()[1])  # field 4: ppid
        except (OSError, IndexError, ValueError):
            return False
    return False
