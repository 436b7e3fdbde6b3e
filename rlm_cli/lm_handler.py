"""The model layer: ``ModelClient`` calls providers through litellm and counts usage per request;
``LMHandler`` is the Unix-socket server that relays the worker's sub-calls to it.

Socket protocol (``rlm_cli.protocol`` frames, one request per connection): the worker sends
``{"token", "type": "completion", "prompt": str | [messages], "model": str | None}`` or
``{"token", "type": "rlm_query", "prompt": str, "context": str | None}`` and reads
``{"ok": true, "text": str}`` or ``{"ok": false, "error": str}``. A connection whose token is
unknown is closed without an answer. The token also tells the handler the *depth* of the
worker that is calling, so the depth limit never depends on what the worker says.

litellm is imported lazily, on the first model call.
"""

from __future__ import annotations

import os
import secrets
import socket
import socketserver
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm_cli import protocol
from rlm_cli.config import Settings, prepare_offline_env
from rlm_cli.errors import BudgetExceededError, ProviderError

#: Largest request frame accepted from the worker (a sub-call prompt): 64 MiB.
MAX_REQUEST_BYTES = 64 * 1024 * 1024


@dataclass
class CallRecord:
    """One model request: who made it, tokens in/out, cost in USD (None if unknown), seconds."""

    model: str
    role: str  # "root" or "sub"
    depth: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    latency_s: float


@dataclass
class Usage:
    """Thread-safe totals of every :class:`CallRecord` of a run (root, sub-calls, children)."""

    records: list[CallRecord] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, record: CallRecord) -> None:
        """Append one request's usage."""
        with self.lock:
            self.records.append(record)

    @property
    def sub_calls(self) -> int:
        """Number of sub-call requests made so far."""
        with self.lock:
            return sum(1 for r in self.records if r.role == "sub")

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens of every request."""
        with self.lock:
            return sum(r.input_tokens + r.output_tokens for r in self.records)

    @property
    def cost_usd(self) -> float | None:
        """Total cost in USD; ``None`` when any request's cost is unknown."""
        with self.lock:
            if any(r.cost_usd is None for r in self.records):
                return None
            return sum(r.cost_usd or 0.0 for r in self.records)

    def summary(self) -> dict[str, Any]:
        """``{"by_model": {model: {...}}, "root": {...}, "sub": {...}, "total_tokens", "cost_usd"}``."""
        def agg(rows: list[CallRecord]) -> dict[str, Any]:
            costs = [r.cost_usd for r in rows]
            return {"calls": len(rows), "input_tokens": sum(r.input_tokens for r in rows),
                    "output_tokens": sum(r.output_tokens for r in rows),
                    "cost_usd": None if any(c is None for c in costs) else round(sum(c or 0 for c in costs), 6)}
        with self.lock:
            rows = list(self.records)
        models = sorted({r.model for r in rows})
        return {"by_model": {m: agg([r for r in rows if r.model == m]) for m in models},
                "root": agg([r for r in rows if r.role == "root"]),
                "sub": agg([r for r in rows if r.role == "sub"]),
                "total_tokens": sum(r.input_tokens + r.output_tokens for r in rows),
                "cost_usd": agg(rows)["cost_usd"]}


class Budget:
    """Limits enforced by the parent across root calls, sub-calls and recursive children.

    ``check()`` raises :class:`BudgetExceededError` once any limit is reached; after that every
    further call is refused (``exceeded`` holds the first message).
    """

    def __init__(self, settings: Settings, usage: Usage) -> None:
        self.settings = settings
        self.usage = usage
        self.started = time.monotonic()
        self.exceeded: BudgetExceededError | None = None

    def check(self, *, sub_call: bool = False) -> None:
        """Raise if a budget is spent (``sub_call`` also checks ``--max-sub-calls``)."""
        if self.exceeded is None:
            s = self.settings
            err: BudgetExceededError | None = None
            if s.timeout is not None and time.monotonic() - self.started >= s.timeout:
                err = BudgetExceededError(f"time budget of {s.timeout:g} s reached", budget="timeout")
            elif s.max_tokens is not None and self.usage.total_tokens >= s.max_tokens:
                err = BudgetExceededError(f"token budget of {s.max_tokens:,} tokens reached", budget="tokens")
            elif s.max_cost is not None and (self.usage.cost_usd or 0.0) >= s.max_cost:
                err = BudgetExceededError(f"cost budget of ${s.max_cost:g} reached", budget="cost")
            elif sub_call and s.max_sub_calls is not None and self.usage.sub_calls >= s.max_sub_calls:
                err = BudgetExceededError(f"sub-call budget of {s.max_sub_calls:,} calls reached",
                                          budget="sub_calls")
            self.exceeded = err
        if self.exceeded is not None:
            raise self.exceeded


@dataclass
class Completion:
    """A model answer: ``text`` and the request's :class:`CallRecord`."""

    text: str
    record: CallRecord


class ModelClient:
    """Calls models through litellm; every request is counted in ``usage`` and checked against
    ``budget``. Thread-safe (each request is independent)."""

    def __init__(self, settings: Settings, usage: Usage | None = None, budget: Budget | None = None) -> None:
        self.settings = settings
        self.usage = usage or Usage()
        self.budget = budget or Budget(settings, self.usage)
        self._litellm: Any = None
        self._import_lock = threading.Lock()
        self._sub_gate = threading.BoundedSemaphore(max(1, settings.max_concurrency))

    def litellm(self) -> Any:
        """The litellm module, imported on first use (it takes seconds)."""
        with self._import_lock:
            if self._litellm is None:
                prepare_offline_env()
                import litellm

                litellm.suppress_debug_info = True
                litellm.telemetry = False
                self._litellm = litellm
        return self._litellm

    def complete(self, messages: list[dict[str, Any]], *, model: str, role: str, depth: int = 0) -> Completion:
        """One chat completion.

        Raises:
            BudgetExceededError: a budget is spent (checked before the request).
            ProviderError: the provider failed after retries (auth, bad request, outage).
        """
        self.budget.check(sub_call=role == "sub")
        if role == "sub":
            with self._sub_gate:
                return self._complete(messages, model=model, role=role, depth=depth)
        return self._complete(messages, model=model, role=role, depth=depth)

    def _complete(self, messages: list[dict[str, Any]], *, model: str, role: str, depth: int) -> Completion:
        litellm = self.litellm()
        s = self.settings
        started = time.monotonic()
        kwargs: dict[str, Any] = {"model": model, "messages": messages, "timeout": s.request_timeout,
                                  "num_retries": s.retries}
        if s.api_base:
            kwargs["api_base"] = s.api_base
        if s.effective_api_key:
            kwargs["api_key"] = s.effective_api_key
        try:
            response = litellm.completion(**kwargs)
        except Exception as exc:  # noqa: BLE001 - litellm raises many provider-specific types
            raise ProviderError(f"model {model} failed: {_short_error(exc)}",
                                hint="check --model, --api-base and your API key") from None
        text = response.choices[0].message.content or ""
        usage = getattr(response, "usage", None)
        tin = int(getattr(usage, "prompt_tokens", 0) or 0)
        tout = int(getattr(usage, "completion_tokens", 0) or 0)
        cost: float | None
        try:
            cost = float(litellm.completion_cost(completion_response=response, model=model))
        except Exception:  # noqa: BLE001 - unknown model: cost unknown, not zero
            cost = None
        record = CallRecord(model, role, depth, tin, tout, cost, time.monotonic() - started)
        self.usage.add(record)
        return Completion(text, record)


def _short_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else type(exc).__name__
    return first[:500]


RlmQueryHandler = Callable[[str, "str | None", int], str]
SubCallObserver = Callable[[dict[str, Any]], None]


class LMHandler:
    """Unix-socket server relaying worker requests to :class:`ModelClient`.

    One thread per connection, so ``llm_query_batched`` runs concurrently (the client caps it
    at ``--max-concurrency``). Socket file lives in a private 0711 folder; use as a context
    manager or call ``close()``, which removes both.
    """

    def __init__(self, client: ModelClient, *, on_rlm_query: RlmQueryHandler | None = None,
                 on_sub_call: SubCallObserver | None = None) -> None:
        self.client = client
        self.on_rlm_query = on_rlm_query
        self.on_sub_call = on_sub_call
        self._tokens: dict[str, int] = {}
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

        self._server = _Server(self.socket_path, _Req)
        os.chmod(self.socket_path, 0o666)  # the worker may run as another user; the token guards it
        self._thread = threading.Thread(target=self._server.serve_forever, name="lm-handler", daemon=True)
        self._thread.start()

    def __enter__(self) -> LMHandler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def register(self, depth: int) -> str:
        """A new random token for a worker at ``depth``."""
        token = secrets.token_hex(16)
        with self._lock:
            self._tokens[token] = depth
        return token

    def unregister(self, token: str) -> None:
        """Forget a worker's token; its later requests are refused."""
        with self._lock:
            self._tokens.pop(token, None)

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
            depth = self._tokens.get(str(request.get("token", "")))
        if depth is None:
            return  # unauthenticated: close without a word
        conn.settimeout(None)
        try:
            reply = self._serve(request, depth)
        except BudgetExceededError as exc:
            reply = {"ok": False, "error": f"budget exceeded: {exc.message}; no further model calls are allowed"}
        except ProviderError as exc:
            reply = {"ok": False, "error": exc.message}
        except Exception as exc:  # noqa: BLE001 - never kill the server thread silently
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        try:
            protocol.send_message(conn, reply)
        except OSError:
            pass

    def _serve(self, request: dict[str, Any], depth: int) -> dict[str, Any]:
        kind = request.get("type")
        if kind == "completion":
            prompt = request.get("prompt")
            messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
            model = request.get("model") or self.client.settings.effective_sub_model
            assert model is not None
            started = time.monotonic()
            result = self.client.complete(messages, model=str(model), role="sub", depth=depth + 1)
            if self.on_sub_call:
                self.on_sub_call({"depth": depth, "model": model, "prompt_chars": sum(
                    len(str(m.get("content", ""))) for m in messages), "answer_chars": len(result.text),
                    "input_tokens": result.record.input_tokens, "output_tokens": result.record.output_tokens,
                    "cost_usd": result.record.cost_usd, "latency_s": round(time.monotonic() - started, 3),
                    "response": result.text, "messages": messages})  # for trajectories and replay
            return {"ok": True, "text": result.text}
        if kind == "rlm_query":
            if self.on_rlm_query is None:
                return {"ok": False, "error": "rlm_query is not available in this run"}
            ctx = request.get("context")
            text = self.on_rlm_query(str(request.get("prompt", "")), None if ctx is None else str(ctx), depth)
            return {"ok": True, "text": text}
        return {"ok": False, "error": f"unknown request type {kind!r}"}
