"""litellm itself: the one place that imports it, sends a request, reads a stream, builds a Router
and prices a reply.

:class:`LocalBackend` does this in the calling process. The ``rlm ask``/``rlm chat`` commands run
the same class in a separate *model host* process (``models.host``), so that importing
litellm (seconds) happens beside loading the corpus and starting the REPL worker instead of
before them. Policy (budgets, retries, the cache, concurrency, windows) is not here: it stays in
``ModelClient`` (``models.client``), which talks to either backend through the same three
calls: :meth:`LocalBackend.complete`, :meth:`LocalBackend.facts` and
:meth:`LocalBackend.router_groups`.

A failed request raises litellm's own exception here; the model host sends its class names,
HTTP status, message and retry headers instead, and the client raises a :class:`RemoteCallError`
carrying them, which ``classify_error`` and ``retry_after_s`` read like the original.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rlm_cli.models.caching import cache_tokens
from rlm_cli.models.failures import check_reply
from rlm_cli.models.router_file import build_router


@dataclass
class Answer:
    """One provider reply, reduced to what the client needs.

    ``input_tokens``/``output_tokens`` are the provider's counts (0 when it sent none);
    ``cost_usd`` is litellm's cost of the reply (``None`` when it computed none) and ``priced``
    says whether the model it was priced as is in litellm's bundled price map (when not, the
    cost is unknown, not zero). ``not_streamed`` marks a streamed request that the provider
    answered with a plain body; ``text`` is then empty and the request must be sent again
    without streaming. ``cut`` says why the reply is incomplete: ``"time"`` (a stream still
    running at the deadline), ``"size"`` (longer than :data:`MAX_REPLY_CHARS`: the rest was
    dropped), ``""`` when whole; ``chars`` is its length before a ``size`` cut.
    ``cache_read_tokens``/``cache_write_tokens``: of ``input_tokens``, those the provider read
    from its prompt cache and those it wrote to it (``models.caching.cache_tokens``).
    """

    text: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    priced: bool = False
    not_streamed: bool = False
    cut: str = ""
    chars: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The answer as a JSON-able dict (the model host's reply)."""
        return dict(vars(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Answer:
        """The answer from :meth:`to_dict`'s shape (unknown keys ignored)."""
        known = {k: data[k] for k in vars(cls()) if k in data}
        return cls(**known)

OnPiece = Callable[[str], None]
#: Characters of a reply kept: far beyond any ``max_tokens`` rlm asks for (16,384 tokens); a
#: longer reply (a broken or hostile server) is cut here and the client says so.
MAX_REPLY_CHARS = 1_000_000
#: Routers a model host keeps (one per command and Router file; a shared host serves many commands).
ROUTERS_KEPT = 16


class _Abandoned(Exception):
    """Raised in a stream's reader thread once its caller stopped waiting (``within_deadline``)."""


class _StreamDeadline(TimeoutError):
    """No whole streamed reply by the deadline (``within_deadline``): a ``TimeoutError``, so it is
    classified, worded ("timed out after N s without a whole reply") and retried as litellm's own
    timeout would be, whichever of the two fires first."""


#: Seconds a streamed request may run past its deadline before the caller stops waiting for it
#: (the reader thread then drops whatever still comes; see ``within_deadline``).
STREAM_GRACE_S = 0.25


class Backend(Protocol):
    """Where litellm runs for a ``ModelClient``: :class:`LocalBackend` or the model host's client."""

    def complete(self, request: dict[str, Any], *, router_config: str | Path | None = None, stream: bool = False,
                 on_piece: OnPiece | None = None, deadline: float | None = None) -> Answer:
        """Send one chat completion (see :meth:`LocalBackend.complete`)."""
        ...

    def facts(self, model: str) -> tuple[int | None, bool]:
        """``(input window or None, price known)`` (see :meth:`LocalBackend.facts`)."""
        ...

    def prices(self, model: str) -> tuple[float, float] | None:
        """USD per input and output token, or ``None`` (see :meth:`LocalBackend.prices`)."""
        ...

    def router_groups(self, router_config: str | Path | None) -> dict[str, str]:
        """The Router's model groups (see :meth:`LocalBackend.router_groups`)."""
        ...

@dataclass
class LocalBackend:
    """litellm in this process, imported on first use (it takes seconds). Thread-safe."""

    _litellm: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _routers: OrderedDict[str, tuple[Any, dict[str, str]]] = field(default_factory=OrderedDict, repr=False)
    _facts: dict[str, tuple[int | None, bool]] = field(default_factory=dict, repr=False)

    def load(self) -> Any:
        """The litellm module (imported once, quietly and offline: see ``config.prepare_offline_env``)."""
        with self._lock:
            if self._litellm is None:
                from rlm_cli.config import prepare_offline_env

                prepare_offline_env()
                import litellm

                from rlm_cli.models import detect

                litellm.suppress_debug_info = True
                litellm.telemetry = False
                detect.remember_bundled_prices(litellm)
                self._litellm = litellm
        return self._litellm

    def router_groups(self, router_config: str | Path | None, *, scope: str | None = None) -> dict[str, str]:
        """``{model group: its first deployment's model}`` of the Router file (``{}`` without one).
        ``scope``: see :meth:`complete`.

        Raises:
            UsageError: the file is unreadable or invalid (see :func:`build_router`).
        """
        return self._router(router_config, scope)[1] if router_config else {}

    def _router(self, router_config: str | Path, scope: str | None) -> tuple[Any, dict[str, str]]:
        """The Router of ``router_config`` for ``scope`` (one command): a Router keeps state (the
        deployments it cooled down after failures), and a shared model host serves many commands,
        so each command has a Router of its own; the last :data:`ROUTERS_KEPT` are kept."""
        try:  # a shared model host outlives one command: an edited file is read again
            info = os.stat(router_config)
            key = f"{router_config}\0{info.st_mtime_ns}\0{info.st_size}\0{scope}"
        except OSError:
            key = f"{router_config}\0{scope}"
        litellm = self.load()
        with self._lock:
            if key not in self._routers:
                self._routers[key] = build_router(litellm, Path(router_config))
                while len(self._routers) > ROUTERS_KEPT:
                    self._routers.popitem(last=False)
            self._routers.move_to_end(key)
            return self._routers[key]

    def facts(self, model: str) -> tuple[int | None, bool]:
        """``(input window in tokens or None, whether the price is known)`` per litellm's map."""
        from rlm_cli.models import detect

        litellm = self.load()
        with self._lock:
            if model not in self._facts:
                self._facts[model] = (detect.input_window(litellm, model), detect.price_known(litellm, model))
            return self._facts[model]

    def prices(self, model: str) -> tuple[float, float] | None:
        """``(USD per input token, USD per output token)`` per litellm's map (the dearest tier),
        or ``None`` when the price is unknown (``detect.prices``)."""
        from rlm_cli.models import detect

        return detect.prices(self.load(), model)

    def warm(self, models_: list[str]) -> None:
        """Run litellm's first-call path once per model without a request (``mock_response``):
        a process's first completion imports provider modules and loads a tokenizer (0.3-1 s),
        which the model host does here while the corpus loads. Best effort: failures are ignored."""
        litellm = self.load()
        for model in dict.fromkeys(models_):
            try:
                self.facts(model)
                messages = [{"role": "user", "content": "warm-up"}]
                stream = litellm.completion(model=model, messages=messages, mock_response="ok", stream=True,
                                            api_key="warm-up")
                litellm.stream_chunk_builder(list(stream), messages=messages)
                litellm.completion(model=model, messages=messages, mock_response="ok", api_key="warm-up")
            except Exception:  # noqa: BLE001, S112 - a model litellm cannot mock is warmed by its first call
                continue

    def complete(self, request: dict[str, Any], *, router_config: str | Path | None = None, stream: bool = False,
                 on_piece: OnPiece | None = None, deadline: float | None = None, scope: str | None = None) -> Answer:
        """Send one chat completion: ``request`` holds ``model``, ``messages``, ``timeout``,
        ``sampling`` (``max_tokens``, ``temperature``: passed as they are) and, without a Router,
        ``api_base``/``api_key`` when set. With ``stream`` each piece of text goes
        to ``on_piece`` as it arrives and reading stops at ``deadline`` (``time.monotonic()``).
        ``scope`` names the command a shared model host serves: its Router calls go through a
        Router of its own, so a run cut off mid-call (its calls counted as failures, deployments
        cooled down) leaves the next command's Router untouched.

        Raises:
            Exception: whatever litellm raises for the request or a broken stream.
            UsageError: the Router file is invalid.
        """
        litellm = self.load()
        router, groups = self._router(router_config, scope) if router_config else (None, {})
        model = str(request["model"])
        kwargs: dict[str, Any] = {"model": model, "messages": request["messages"], "timeout": request["timeout"],
                                  "num_retries": 0}
        kwargs.update(request.get("sampling") or {})
        call: Callable[..., Any]
        if router is not None and model in groups:
            call = router.completion
        else:
            call = litellm.completion
            kwargs["max_retries"] = 0
            for key in ("api_base", "api_key"):
                if request.get(key):
                    kwargs[key] = request[key]
        if not stream:
            return self._answer(call(**kwargs), model, groups)

        def read(forward: OnPiece | None) -> Answer:
            raw = call(**kwargs, stream=True, stream_options={"include_usage": True})
            return self._read_stream(raw, request["messages"], model, groups, forward, deadline)

        return read(on_piece) if deadline is None else within_deadline(deadline, read, on_piece)

    def _read_stream(self, stream: Any, messages: list[dict[str, Any]], model: str, groups: dict[str, str],
                     on_piece: OnPiece | None, deadline: float | None) -> Answer:
        litellm = self.load()
        chunks: list[Any] = []
        shown = False
        chars, cut = 0, ""
        try:
            for chunk in stream:
                piece = _delta_text(chunk)
                if chars + len(piece) > MAX_REPLY_CHARS:
                    cut = "size"  # the rest is dropped: this chunk and what follows
                    break
                chunks.append(chunk)
                chars += len(piece)
                if piece:
                    shown = True
                    if on_piece is not None:
                        on_piece(piece)
                if deadline is not None and time.monotonic() >= deadline:
                    cut = "time"
                    break
        finally:
            close_stream(stream)
        hidden = getattr(stream, "_hidden_params", None) or {}
        ctype = str((hidden.get("additional_headers") or {}).get("llm_provider-content-type", ""))
        if not shown and (ctype and "event-stream" not in ctype or not chunks):
            return Answer(not_streamed=True)
        response = litellm.stream_chunk_builder(chunks, messages=messages)
        if response is None:
            return Answer(not_streamed=True)
        answer = self._answer(response, model, groups, streamed_nothing=not shown and not cut)
        if cut:
            answer.cut, answer.chars = cut, max(answer.chars, chars)
        return answer

    def _answer(self, response: Any, model: str, groups: dict[str, str], *, streamed_nothing: bool = False) -> Answer:
        """Text, tokens and cost of a whole reply (a streamed one rebuilt by litellm); a text over
        :data:`MAX_REPLY_CHARS` is cut to it (``cut="size"``).

        Raises:
            EmptyReplyError: the response holds no reply (no choices, or no message content).
        """
        check_reply(response, streamed_nothing=streamed_nothing)
        usage = getattr(response, "usage", None)
        hidden = getattr(response, "_hidden_params", None) or {}
        priced_as = str(hidden.get("litellm_model_name") or groups.get(model, model))
        cost = hidden.get("response_cost")
        # a cost litellm computed above zero is a price it knows (a Router deployment's own
        # input_cost_per_token); zero for a model outside the bundled map is unknown, not free
        priced = self.facts(priced_as)[1] or bool(isinstance(cost, (int, float)) and cost > 0)
        if not cost and not priced:
            cost = None
        if cost is None and priced:  # a streamed reply, rebuilt: priced here
            try:
                cost = self.load().completion_cost(completion_response=response, model=priced_as)
            except Exception:  # noqa: BLE001 - litellm could not price it after all: unknown
                cost = None
        text = _response_text(response)
        chars = len(text)
        cut = "size" if chars > MAX_REPLY_CHARS else ""
        read, write = cache_tokens(usage)
        return Answer(text=text[:MAX_REPLY_CHARS], input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                      output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                      cost_usd=None if cost is None else float(cost), priced=priced, cut=cut, chars=chars,
                      cache_read_tokens=read, cache_write_tokens=write)

def within_deadline(deadline: float, read: Callable[[OnPiece | None], Answer], on_piece: OnPiece | None) -> Answer:
    """``read(forward)`` (a streamed request, start to end) in a thread of its own, waited for
    until ``deadline`` (``time.monotonic()``) plus :data:`STREAM_GRACE_S`. The stream's own
    check of the deadline runs only as chunks arrive, and the request's timeout only while no
    byte does: a busy server that keeps the connection open with SSE comments (``: ping``
    every 15 s, as sse-starlette and llama.cpp's server send) defeats both, and ``--timeout
    4`` waited 26 s. Past the deadline the thread is left to end on its own; pieces it
    reads from then on go nowhere.

    Raises:
        TimeoutError: no whole reply by the deadline (classified and retried as a timeout).
        Exception: whatever ``read`` raised.
    """
    box: dict[str, Any] = {}
    gate = threading.Lock()
    left = threading.Event()

    def forward(piece: str) -> None:
        with gate:
            if left.is_set():
                raise _Abandoned  # the caller gave up on this request: stop reading it
            if on_piece is not None:
                on_piece(piece)

    def work() -> None:
        try:
            box["answer"] = read(forward)
        except _Abandoned:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            box["error"] = exc

    worker = threading.Thread(target=work, name="rlm-stream", daemon=True)
    worker.start()
    try:
        worker.join(max(0.0, deadline - time.monotonic()) + STREAM_GRACE_S)
    except BaseException:  # Ctrl-C while waiting: nothing more of this reply reaches the caller
        with gate:
            left.set()
        raise
    with gate:
        if worker.is_alive():
            left.set()
            raise _StreamDeadline("the server kept the connection open without a whole reply by the deadline")
    if "error" in box:
        raise box["error"]
    return box["answer"]


def close_stream(stream: Any) -> None:
    """Close a provider's stream (litellm's or the openai SDK's) once read or abandoned; a stream
    without ``close``, or one that complains at being closed once finished, is left as it is."""
    close = getattr(stream, "close", None)
    if callable(close):
        try:
            close()
        except Exception:  # noqa: BLE001, S110 - closing a finished stream may complain
            pass


def _response_text(response: Any) -> str:
    try:
        return response.choices[0].message.content or ""
    except (AttributeError, IndexError, TypeError):
        return ""

def _delta_text(chunk: Any) -> str:
    try:
        return chunk.choices[0].delta.content or ""
    except (AttributeError, IndexError, TypeError):
        return ""
