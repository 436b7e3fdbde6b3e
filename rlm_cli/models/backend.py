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

from rlm_cli.errors import UsageError
from rlm_cli.models.failures import check_reply, short_error


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
    """

    text: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    priced: bool = False
    not_streamed: bool = False
    cut: str = ""
    chars: int = 0

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
    """Raised in a stream's reader thread once its caller stopped waiting (``LocalBackend._within``)."""


class _StreamDeadline(TimeoutError):
    """No whole streamed reply by the deadline (``LocalBackend._within``): a ``TimeoutError``, so it is
    classified, worded ("timed out after N s without a whole reply") and retried as litellm's own
    timeout would be, whichever of the two fires first."""


#: Seconds a streamed request may run past its deadline before the caller stops waiting for it
#: (the reader thread then drops whatever still comes; see ``LocalBackend._within``).
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

        return read(on_piece) if deadline is None else self._within(deadline, read, on_piece)

    @staticmethod
    def _within(deadline: float, read: Callable[[OnPiece | None], Answer], on_piece: OnPiece | None) -> Answer:
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
            close = getattr(stream, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:  # noqa: BLE001, S110 - closing a finished stream may complain
                    pass
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
        return Answer(text=text[:MAX_REPLY_CHARS], input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                      output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                      cost_usd=None if cost is None else float(cost), priced=priced, cut=cut, chars=chars)

def read_router_file(path: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The ``model_list`` and ``router_settings`` of a ``--router-config`` file (YAML or JSON),
    checked for shape without importing litellm (cheap: ``Session.open`` calls it before the
    corpus loads, so a bad file fails in well under a second).

    Returns:
        ``(model_list, router_settings)``: litellm's deployment dicts and the Router keyword
        arguments (``{}`` when the file has none).

    Raises:
        UsageError: unreadable file, over :data:`MAX_ROUTER_FILE_BYTES`, bad YAML/JSON (with its
            line and column; aliases are refused), or no ``model_list``.
    """
    import yaml

    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_ROUTER_FILE_BYTES + 1)
        if len(raw) > MAX_ROUTER_FILE_BYTES:
            raise UsageError(f"--router-config: {path} is over {MAX_ROUTER_FILE_BYTES // 1024**2} MiB; a Router file "
                             "lists deployments", hint="give the path of a litellm Router/proxy YAML file")
        data = yaml.load(raw.decode("utf-8", "replace"), Loader=_no_alias_loader())  # noqa: S506 - a SafeLoader
    except OSError as exc:
        raise UsageError(f"--router-config: cannot read {path}: {short_error(exc)}",
                         hint="give the path of a litellm Router/proxy YAML file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or short_error(exc)
        raise UsageError(f"--router-config: {path} is not valid YAML: {problem}{where}",
                         hint="fix the file; README, \"A cluster of model servers\", shows one") from None
    if isinstance(data, list):
        data = {"model_list": data}
    model_list = data.get("model_list") if isinstance(data, dict) else None
    if not isinstance(model_list, list) or not model_list or not all(
            isinstance(d, dict) and d.get("model_name") and isinstance(d.get("litellm_params"), dict)
            and d["litellm_params"].get("model") for d in model_list):
        raise UsageError(f"--router-config: {path} needs a model_list of "
                         "{model_name, litellm_params: {model, ...}} entries")
    settings = data.get("router_settings") if isinstance(data, dict) else None
    if settings is not None and not isinstance(settings, dict):
        raise UsageError(f"--router-config: router_settings in {path} must be a mapping of Router arguments")
    return model_list, dict(settings or {})


#: The largest ``--router-config`` file read (a Router file lists deployments: kilobytes).
MAX_ROUTER_FILE_BYTES = 4 * 1024**2


def _no_alias_loader() -> Any:
    """PyYAML's ``SafeLoader`` refusing aliases (``*name``): a file of nested aliases (a "billion
    laughs") is a few hundred bytes that anything walking the result (litellm's Router copies its
    deployments) expands without end; a Router file needs none."""
    import yaml

    class NoAliasLoader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.events.AliasEvent):
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted in a Router file",
                                                  mark)
            return super().compose_node(parent, index)

    return NoAliasLoader


def keyless_deployments(model_list: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``model_list`` with :data:`~rlm_cli.config.PLACEHOLDER_API_KEY` as the ``api_key`` of every
    deployment that names a server (``api_base``/``base_url``) but no key: litellm would otherwise
    send that server the key of the provider's own endpoint from the environment
    (``OPENAI_API_KEY``...), as ``--api-base`` without ``--api-key`` never does. A deployment with
    no server of its own goes to its provider, which the environment's key is meant for."""
    from rlm_cli.config import PLACEHOLDER_API_KEY

    out = []
    for d in model_list:
        params = dict(d["litellm_params"])
        if (params.get("api_base") or params.get("base_url")) and not params.get("api_key"):
            params["api_key"] = PLACEHOLDER_API_KEY
        out.append({**d, "litellm_params": params})
    return out


def check_router_file(path: str | Path, models: list[str | None]) -> list[str]:
    """Read the ``--router-config`` file (:func:`read_router_file`) and check ``models``
    (``--model``, ``--sub-model``) against its model groups: a name that is not a group goes to
    the provider as is, so a mistyped group (``flet``, or ``openai/fleet`` for the group
    ``fleet``) would fail there, after the corpus has loaded, or reach another server. Checked
    only when no model names a group (else the other is meant to go to its provider). Near:
    ``difflib`` ratio of at least 0.75, or the group after a provider prefix.

    Returns:
        Warnings for the user: the file is not used when no model names one of its groups.

    Raises:
        UsageError: the file is invalid, or a model is a near miss of a group.
    """
    import difflib

    groups = sorted({str(d["model_name"]) for d in read_router_file(path)[0]})
    named = [m for m in dict.fromkeys(models) if m]
    if any(m in groups for m in named):
        return []  # the other model, if any, is meant to go to its provider directly
    for model in named:
        bare = model.split("/", 1)[-1]
        close = [bare] if bare in groups else difflib.get_close_matches(model, groups, n=1, cutoff=0.75)
        if close:
            raise UsageError(f"--router-config: {model!r} is not a model group of {path}; did you mean {close[0]!r}?",
                             hint=f"its groups: {', '.join(groups)}")
    return [f"--router-config {path} is not used: none of its model groups ({', '.join(groups)}) is --model or "
            f"--sub-model (name one, e.g. --sub-model {groups[0]})"]


def build_router(litellm: Any, path: Path) -> tuple[Any, dict[str, str]]:
    """A ``litellm.Router`` from a YAML or JSON file and ``{model group: first deployment's model}``.

    The file holds ``model_list`` (litellm's format: ``[{"model_name": ..., "litellm_params":
    {"model": ..., "api_base": ..., "api_key": ...}}]``) and optionally ``router_settings``
    (Router keyword arguments such as ``routing_strategy`` or ``fallbacks``); a litellm proxy
    ``config.yaml`` works as is. Retries stay with rlm (the Router's own are turned off). A
    deployment with a server and no key gets a placeholder key (:func:`keyless_deployments`).

    Raises:
        UsageError: unreadable file, bad YAML/JSON, no ``model_list``, or litellm refused it.
    """
    model_list, settings = read_router_file(path)
    model_list = keyless_deployments(model_list)
    settings.update(num_retries=0)
    try:
        router = litellm.Router(model_list=model_list, **settings)
    except Exception as exc:  # noqa: BLE001 - litellm validates the configuration its own way
        lines = [line.strip() for line in str(exc).strip().splitlines()[:3] if line.strip()]  # pydantic: field, why
        raise UsageError(f"--router-config: litellm refused {path}: {'; '.join(lines)[:500] or short_error(exc)}"
                         ) from None
    groups: dict[str, str] = {}
    for d in model_list:
        groups.setdefault(str(d["model_name"]), str(d["litellm_params"]["model"]))
    return router, groups


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
