"""Sending one request: its attempts, their retries and backoff, streaming and its fallback, and
the request itself (``models.client``'s module docstring states the policy). A part of
:class:`~rlm_cli.models.client.ModelClient`, which holds the state these methods read.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlm_cli.config import Settings
from rlm_cli.errors import BudgetExceededError, RLMError
from rlm_cli.models.backend import Answer, Backend
from rlm_cli.models.budget import Budget, Reservation
from rlm_cli.models.caching import needs_breakpoints, with_breakpoints
from rlm_cli.models.estimate import Estimate
from rlm_cli.models.failures import (
    CallFailed,
    ReplyTimeoutError,
    classify_error,
    failure_words,
    hint_for,
    http_status,
    retry_after_s,
)
from rlm_cli.models.keys import key_travels
from rlm_cli.models.limiter import AdaptiveLimiter
from rlm_cli.models.usage import Usage

#: First backoff (seconds); doubled per retry, with jitter, up to :data:`MAX_BACKOFF_S`.
BASE_BACKOFF_S = 0.5
MAX_BACKOFF_S = 20.0
#: A ``Retry-After`` longer than this many seconds is not waited for: the call fails.
MAX_RETRY_AFTER_S = 120.0
#: Rate-limit retries that do not count against ``--retries`` (while concurrency can still drop).
MAX_FREE_RATE_LIMIT_RETRIES = 10

#: Receives each streamed piece of a reply; ``None`` says the pieces so far are void (retry).
OnDelta = Callable[[str | None], None]


@dataclass
class Tries:
    """Where one request stands: requests sent (``attempts``; one asked again without streaming
    counts once), ``--retries`` used, rate-limit retries that did not use one, and whether a
    streamed request was answered with a plain reply (said once it is answered)."""

    attempts: int = 0
    retries: int = 0
    free_rate_limits: int = 0
    plain_pending: bool = False


@dataclass
class Attempt:
    """One attempt's end: ``kind`` (``ok`` or ``classify_error``'s kind of ``error``), the
    ``answer`` when ``ok``, and its reservation when the caller settles it."""

    kind: str
    answer: Answer | None = None
    error: Exception | None = None
    reservation: Reservation | None = None


class Sending:
    """The sending methods of ``ModelClient`` (which sets the attributes below)."""

    settings: Settings
    backend: Backend
    budget: Budget
    usage: Usage
    limiter: AdaptiveLimiter
    notify: Callable[[str], None] | None
    fatal: CallFailed | None
    _info_lock: threading.Lock
    _no_stream: set[str]

    def _reserve(self, estimate: Estimate, model: str) -> Reservation:
        raise NotImplementedError  # models.pricing

    def _sampling(self, model: str, temperature: float | None = None) -> dict[str, Any]:
        raise NotImplementedError  # models.client

    def _uses_router(self, model: str) -> bool:
        raise NotImplementedError  # models.client

    def router_models(self) -> dict[str, str]:
        raise NotImplementedError  # models.client

    def _say(self, message: str) -> None:
        raise NotImplementedError  # models.client

    def _send_with_retries(self, messages: list[dict[str, Any]], *, model: str, gated: bool,
                           on_delta: OnDelta | None = None, temperature: float | None = None,
                           estimate: Estimate | None = None,
                           held: list[Reservation] | None = None,
                           on_send: Callable[[], None] | None = None) -> tuple[Answer, int]:
        """Send one request, retrying per the module policy; ``(answer, attempts)``. With
        ``on_delta`` the reply is streamed (falling back to a whole reply, see the module docstring).
        With ``estimate`` (a token or cost budget is set) each attempt first reserves its worst
        case; the reservation of the attempt that answers is appended to ``held`` (the caller
        settles it once the usage is recorded), a failed attempt's is settled here. ``on_send`` is
        called as each attempt goes out.

        Raises:
            CallFailed: the request failed for good (see :meth:`_retry_delay`).
            BudgetExceededError: a budget is spent (checked before each attempt).
        """
        if not gated and self.settings.prompt_cache and needs_breakpoints(self.router_models().get(model, model)):
            messages = with_breakpoints(messages)  # a root call to a provider that caches only marked prefixes
        tries = Tries()
        while True:
            self.budget.check(counted=gated)  # a sub-call's attempts spend the one sub-call it was granted
            timeout = self.settings.request_timeout
            remaining = self.budget.remaining_s()
            if remaining is not None:  # in 0.5 s steps: litellm reuses its HTTP client per timeout value
                timeout = min(timeout, max(0.5, math.ceil(remaining * 2) / 2))
            epoch, limit = 0, 1.0
            if gated:
                try:
                    epoch, limit = self.limiter.acquire(timeout=remaining)
                except TimeoutError:  # the deadline passed while waiting for a slot
                    continue  # budget.check() raises
            stream = on_delta is not None and model not in self._no_stream
            shown: list[str] = []  # pieces of this attempt's stream already passed on

            def piece(text: str | None, shown: list[str] = shown) -> None:
                shown.append(text or "")
                if on_delta is not None:
                    on_delta(text)

            request = (messages, model, timeout, temperature, estimate)
            done = self._attempt(request, stream, piece, (gated, epoch), on_send, tries)
            answer = done.answer
            if answer is not None and answer.not_streamed:  # asked again, not streamed: the same attempt, and
                tries.plain_pending, tries.attempts = self._stop_streaming(model, None), tries.attempts - 1
                continue  # said once answered
            if answer is not None:
                if tries.plain_pending:
                    self._say(f"{model} answered a streamed request with a plain reply: its replies are shown "
                              "once complete")
                if done.reservation is not None:
                    if held is None:
                        self.budget.settle(done.reservation)
                    else:
                        held.append(done.reservation)
                if on_delta is not None and not stream:
                    on_delta(answer.text)  # the whole reply at once
                return answer, tries.attempts
            assert done.error is not None
            if stream and done.kind == "bad_request" and "stream" in str(done.error).lower():
                self._stop_streaming(model, "refused to stream")
                tries.attempts -= 1  # asked again without streaming: the same attempt
                if on_delta is not None and any(shown):
                    on_delta(None)  # whatever was shown of this attempt is void: it is asked again
                continue
            delay = self._retry_delay(done, model, timeout, gated and limit > 1, tries)
            remaining = self.budget.remaining_s()
            if remaining is not None and remaining <= 0:
                self.budget.check(counted=gated)  # --timeout passed during the attempt: no retry, none counted
            self.usage.count("retries")
            if self.notify:  # a slow or failing provider is never silent (issue 48: 3 retries said nothing)
                what = failure_words(done.error, model, self.settings.api_base, timeout)[0]
                wait = f"{delay:.1f}" if delay < 10 else f"{delay:.0f}"  # 0.5 s is not "0 s"
                self.notify(f"model {model}: {what}; retrying (attempt {tries.attempts + 1}) in {wait} s")
            if on_delta is not None and any(shown):
                on_delta(None)  # whatever was shown of this attempt is void: it is asked again
            time.sleep(max(0.0, delay if remaining is None else min(delay, remaining)))

    def _attempt(self, request: tuple[list[dict[str, Any]], str, float, float | None, Estimate | None],
                 stream: bool, piece: OnDelta, gate: tuple[bool, int], on_send: Callable[[], None] | None,
                 tries: Tries) -> Attempt:
        """Send one attempt of ``request`` (messages, model, timeout in seconds, temperature and
        the budget's estimate), streamed to ``piece`` when ``stream``; release the concurrency slot
        (``gate``: gated or not, and the limiter's epoch) and settle a reservation nothing is
        charged for. A provider's failure is returned (its kind classified), not raised.

        Raises:
            BudgetExceededError: a reservation that cannot fit, or ``--timeout`` passed during a stream.
            RLMError: not the provider: the model host is gone, or ``--router-config`` is bad.
        """
        messages, model, timeout, temperature, estimate = request
        gated, epoch = gate
        done = Attempt("ok")
        try:
            if estimate is not None:
                done.reservation = self._reserve(estimate, model)
            # A whole reply must arrive within the request's timeout (a stream too) and --timeout.
            deadline = time.monotonic() + timeout
            if self.budget.deadline is not None:
                deadline = min(deadline, self.budget.deadline)
            tries.attempts += 1
            if on_send is not None:
                on_send()
            done.answer = self.backend.complete(
                self._request(messages, model, timeout, temperature,
                              None if done.reservation is None else done.reservation.max_output),
                router_config=self._router_file(model),
                stream=stream, on_piece=piece if stream else None, deadline=deadline)
            if stream:
                self.budget.check()  # --timeout passed while the stream was read: refused like any request
            if done.answer.cut == "time":  # the stream was still running at --request-timeout
                raise ReplyTimeoutError(f"the streamed reply did not end within --request-timeout "
                                        f"({self.settings.request_timeout:g} s)")
        except BudgetExceededError:  # a reservation that cannot fit, or --timeout passed during a stream
            done.kind = "budget"
            raise
        except RLMError:  # not the provider: the model host is gone, or --router-config is bad
            done.kind = "local"
            raise
        except Exception as exc:  # noqa: BLE001 - litellm raises many provider-specific types
            done.error, done.kind, done.answer = exc, classify_error(exc), None
        finally:
            if gated:
                self.limiter.release(epoch, rate_limited=done.kind == "rate_limit", success=done.kind == "ok")
            if done.reservation is not None and (done.kind != "ok" or (done.answer is not None
                                                                       and done.answer.not_streamed)):
                self.budget.settle(done.reservation)  # nothing is charged for a failed attempt
                done.reservation = None
        return done

    def _retry_delay(self, failed: Attempt, model: str, timeout: float, may_lower: bool, tries: Tries) -> float:
        """Seconds to wait before retrying the attempt that ``failed`` (its error and kind), or
        raise when it is not retried: 401/403/404 (fatal: kept in :attr:`fatal`), other 4xx,
        ``--retries`` used up, or a ``Retry-After`` over :data:`MAX_RETRY_AFTER_S`. A 429 met while
        the concurrency cap could still drop (``may_lower``) does not use up a retry.

        Raises:
            CallFailed: the request is not retried.
        """
        error = failed.error
        assert error is not None
        status = http_status(error)
        what, gave_up_hint = failure_words(error, model, self.settings.api_base, timeout)
        message = f"model {model}: {what}"
        kind = failed.kind
        if kind in ("auth", "not_found"):
            failure = CallFailed(message, fatal=True, status=status, hint=hint_for(kind))
            self.fatal = self.fatal or failure
            raise failure from None
        if kind in ("bad_request", "context_window"):
            self.usage.count("failed_calls")
            raise CallFailed(message, fatal=False, status=status, hint=hint_for(kind)) from None
        free = False
        if kind == "rate_limit":
            self.usage.count("rate_limited")
            free = may_lower and tries.free_rate_limits < MAX_FREE_RATE_LIMIT_RETRIES
        if not free and tries.retries >= self.settings.retries:
            self.usage.count("failed_calls")
            raise CallFailed(f"{message} (after {tries.attempts} attempt{'s' if tries.attempts > 1 else ''})",
                             fatal=False, status=status, hint=gave_up_hint) from None
        if free:
            tries.free_rate_limits += 1
        else:
            tries.retries += 1
        delay = retry_after_s(error)
        if delay is None:
            step = tries.retries + tries.free_rate_limits
            return min(MAX_BACKOFF_S, BASE_BACKOFF_S * 2 ** (step - 1)) * random.uniform(0.5, 1.0)
        if delay > MAX_RETRY_AFTER_S:
            self.usage.count("failed_calls")
            raise CallFailed(f"{message} (the provider asks to retry after {delay:.0f} s)", fatal=False,
                             status=status, hint="wait and run again") from None
        return delay * random.uniform(1.0, 1.1)  # never earlier than asked

    def _request(self, messages: list[dict[str, Any]], model: str, timeout: float,
                 temperature: float | None = None, max_output: int | None = None) -> dict[str, Any]:
        """The request for the backend: model, messages, timeout, the sampling parameters
        (:meth:`_sampling`: the reply cap, lowered to ``max_output`` when a budget's reservation
        did, and ``--temperature``), and the base URL and key."""
        sampling = self._sampling(model, temperature)
        if max_output is not None and max_output < sampling["max_tokens"]:
            sampling["max_tokens"] = max(1, max_output)
        request: dict[str, Any] = {"model": model, "messages": messages, "timeout": timeout,
                                   "sampling": sampling}
        base, key = self._destination(model)
        if base:
            request["api_base"] = base
        if key:
            request["api_key"] = key
        return request

    def _destination(self, model: str) -> tuple[str | None, str | None]:
        """``(api_base, api_key)`` a request for ``model`` carries: the invoker's, only when they
        are meant for it (``models.keys.key_travels``: the root or sub-model, or their provider);
        ``(None, None)`` for any other model, which litellm sends to its own provider."""
        s = self.settings
        if not key_travels(model, (s.model, s.effective_sub_model)):
            return None, None
        return s.api_base, s.effective_api_key

    def _router_file(self, model: str) -> str | None:
        """The ``--router-config`` file when ``model`` is one of its model groups, else ``None``."""
        return str(self.settings.router_config) if self._uses_router(model) else None

    def _stop_streaming(self, model: str, why: str | None) -> bool:
        """Ask ``model`` without streaming from now on; say ``why`` the first time (``None``: the
        caller says it later). True the first time."""
        with self._info_lock:
            first = model not in self._no_stream
            self._no_stream.add(model)
        if first and why and self.notify:
            self.notify(f"{model} {why}: its replies are shown once complete")
        return first
