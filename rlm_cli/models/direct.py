"""The direct lane of the model host: the first requests of a session to a self-hosted
OpenAI-compatible model, sent with the openai SDK while litellm is still importing (issue 49).

litellm's import takes 3-5 s (it grows with each release); the openai SDK, which litellm itself
sends these requests with and imports as part of its own import, takes about 0.8 s. A model host
that has just started imports the SDK first, then litellm; a request that arrives in between
takes this lane when all of these hold (:meth:`DirectLane.takes`):

* litellm is not imported yet in this host (once it is, every request goes through it);
* the model is ``openai/NAME`` (litellm's OpenAI provider: vLLM, llama.cpp, LM Studio, Ollama's
  ``/v1``...), not a ``--router-config`` group;
* litellm's bundled price map (read here as the file litellm reads, which it does under
  ``LITELLM_LOCAL_MODEL_COST_MAP``) knows neither ``NAME`` nor ``openai/NAME``, and ``NAME`` has
  no ``:`` (``ft:`` models are priced as their base): for such a model litellm sends the
  parameters as they are and prices nothing. A model litellm knows (``openai/gpt-5-mini``) may
  get its parameters mapped (``max_completion_tokens`` for reasoning models) and has a price:
  both are litellm's, so its request waits for litellm;
* the request has a key (``--api-key``, or ``OPENAI_API_KEY`` as litellm would read it) and only
  the fields litellm passes on unchanged for such a model (``max_tokens``, ``temperature``).

The body sent is litellm's body for such a request, and whatever comes back ends as litellm's
path would end it, without sending the request again (``tests/models/test_direct_lane.py`` sends
each case through both and compares the bodies on the wire, the ``Answer``, the pieces streamed,
and a failure's class names, status, classification and words):

* a whole reply becomes the same :class:`~rlm_cli.models.backend.Answer` (a reply without usage
  counts 0 tokens as litellm's does; a stream without a usage chunk, as llama-cpp-python's server
  sends them, is estimated as litellm estimates it: :func:`estimate_like_litellm`);
* a 200 without a reply (no choices, no content, a body that is not JSON, a stream that ended
  without a ``finish_reason``) is the :class:`~rlm_cli.models.failures.EmptyReplyError` the
  client's check raises on litellm's reply;
* an HTTP error or a timeout: the host waits for litellm, which maps the SDK's exception with its
  own mapping (``exception_type``), as its OpenAI provider does;
* a refused or dropped connection is raised as it is, without waiting for litellm: the client
  reads what happened from the HTTP client's error under it (``failures.transport_failure``), as
  it reads litellm's, and classifies, words and retries it alike (litellm would call it a 500);
* a 400 that litellm answers itself (a reply cut at its output limit, roles that must
  alternate: it rebuilds or resends) is *handed over* (:class:`HandOver`): the host sends the
  request again through litellm, the one case sent twice;
* a stream that breaks after text was shown is raised as it is (the pieces cannot be taken back).
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlm_cli.models.backend import MAX_REPLY_CHARS, Answer, OnPiece, close_stream, within_deadline
from rlm_cli.models.caching import cache_tokens
from rlm_cli.models.failures import EmptyReplyError, check_reply

#: The provider prefix of the models the lane can serve (litellm's OpenAI provider).
PREFIX = "openai/"
#: Request sampling fields litellm passes on unchanged for a model it does not know.
PLAIN_FIELDS = frozenset({"max_tokens", "temperature"})
#: Request fields the lane understands; one more (a field a later rlm adds) sends it to litellm.
REQUEST_FIELDS = frozenset({"model", "messages", "timeout", "sampling", "api_base", "api_key"})
#: litellm's words for the 400s its OpenAI provider answers by sending the request again, reshaped.
LITELLM_RESENDS = ("Conversation roles must alternate user/assistant", "user and assistant roles should be alternating",
                   "Last message must have role `user`", "unknown field: parameter index is not a valid field")
#: ``failures.reply_failure``'s words for a 200 whose body is not a chat completion.
NOT_JSON_WORDS = "the provider answered HTTP 200 with a body that is not a chat completion (not JSON)"
#: How litellm (``litellm_core_utils.token_counter``) estimates the tokens of a model it does not
#: know when the provider counted none: its default encoding, per message, per name, for the
#: reply's primer, and the longest text it counts exactly (longer ones it extrapolates).
LITELLM_ENCODING = "cl100k_base"
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMER = 3
EXACT_CHARS = 4_000_000
#: litellm encodes a text in pieces of this many characters and sums their tokens
#: (``TIKTOKEN_ENCODE_CHUNK_SIZE_CHARS``, which sets it there, sets it here too).
ENCODE_CHUNK_CHARS = 1024
#: SDK clients (one per API base and key) a host keeps.
CLIENTS_KEPT = 16
#: litellm's default API base for ``openai/`` models without one (litellm ``main.completion``).
OPENAI_BASE = "https://api.openai.com/v1"


class HandOver(Exception):  # noqa: N818 - not an error: a request the lane leaves to litellm
    """The lane leaves this request to litellm (see the module docstring); ``why`` says what it met."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def price_map_path() -> Path | None:
    """The price map file of the installed litellm (``model_prices_and_context_window_backup.json``),
    found without importing litellm; ``None`` when litellm is not installed or has none."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "model_prices_and_context_window_backup.json"
    return path if path.is_file() else None


class DirectLane:
    """The openai SDK, imported by :meth:`load`, and the rule of which requests it may send.
    Thread-safe (the SDK's client is; one client per API base and key, kept)."""

    def __init__(self, litellm: Callable[[], Any]) -> None:
        """``litellm``: returns the litellm module once imported (blocks until then; raises when
        it could not be): the lane asks for it only on a failure (to map it as litellm does) and
        for a stream without usage whose messages litellm counts its own way."""
        self._litellm = litellm
        self._openai: Any = None
        self._known: frozenset[str] = frozenset()
        self._clients: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()
        self.ready = threading.Event()

    def load(self) -> None:
        """Import the openai SDK and read the names of litellm's bundled price map (about 0.8 s
        and 30 ms); the lane stays closed when either fails or litellm would read another map."""
        try:
            from rlm_cli.config import prepare_offline_env

            prepare_offline_env()  # as litellm's import will: its bundled map, unless the user asked otherwise
            path = price_map_path()
            if path is None or not _truthy(os.environ.get("LITELLM_LOCAL_MODEL_COST_MAP")):
                return
            with open(path, encoding="utf-8") as fh:
                known = frozenset(str(k).lower() for k in json.load(fh))  # a name in other case too
            import openai

            self._known, self._openai = known, openai
        except Exception:  # noqa: BLE001, S110 - no lane: every request waits for litellm, as before
            pass
        finally:
            self.ready.set()

    def knows(self, model: str) -> bool:
        """Whether ``model`` is one the lane may serve without litellm (see the module docstring):
        ``openai/NAME`` with ``NAME`` unknown to litellm's bundled map."""
        if self._openai is None or not model.startswith(PREFIX):
            return False
        name = model[len(PREFIX):]
        return (bool(name) and ":" not in name and name.lower() not in self._known
                and model.lower() not in self._known)

    def facts(self, model: str) -> tuple[int | None, bool] | None:
        """``(None, False)`` (no window, no price: litellm knows nothing of it) for a model the lane
        serves, else ``None`` (ask litellm)."""
        return (None, False) if self.knows(model) else None

    def takes(self, request: dict[str, Any], router_config: Any) -> bool:
        """Whether the lane may send ``request`` (a ``complete`` op's; see the module docstring)."""
        if router_config or not self.knows(str(request.get("model"))):
            return False
        if set(request) - REQUEST_FIELDS or set(request.get("sampling") or {}) - PLAIN_FIELDS:
            return False
        return bool(request.get("api_key") or os.environ.get("OPENAI_API_KEY"))

    def _client(self, base: str, key: str) -> Any:
        """The SDK's client for ``base`` and ``key`` (its connection pool kept; the last
        :data:`CLIENTS_KEPT`: a shared host serves many commands)."""
        with self._lock:
            got = self._clients.pop((base, key), None)
            if got is None:
                got = self._openai.OpenAI(api_key=key, base_url=base, max_retries=0,
                                          organization=os.environ.get("OPENAI_ORGANIZATION") or None)
            self._clients[(base, key)] = got
            while len(self._clients) > CLIENTS_KEPT:
                self._clients.pop(next(iter(self._clients)))
            return got

    def complete(self, request: dict[str, Any], *, stream: bool, on_piece: OnPiece | None,
                 deadline: float | None) -> Answer:
        """Send ``request`` (one the lane :meth:`takes`) and return its :class:`Answer`, as
        ``backend.LocalBackend.complete`` would for the same reply.

        Raises:
            HandOver: litellm must handle this request (it was not answered, or not wholly).
            litellm.Timeout, litellm.RateLimitError, litellm.InternalServerError...: no reply within
                the request's timeout, an HTTP 429, 5xx... (``_as_litellm``).
            Exception: a stream broken after its text was passed to ``on_piece``.
        """
        base = (request.get("api_base") or os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE")
                or OPENAI_BASE)
        key = str(request.get("api_key") or os.environ.get("OPENAI_API_KEY"))
        client = self._client(str(base), key)
        body: dict[str, Any] = {"model": str(request["model"])[len(PREFIX):], "messages": request["messages"],
                                **(request.get("sampling") or {}), "timeout": float(request["timeout"])}
        model = str(request["model"])
        if not stream:
            try:
                got = client.chat.completions.with_raw_response.create(**body).parse()
            except Exception as exc:  # noqa: BLE001 - mapped as litellm maps it
                raise self._chained(exc, model)  # noqa: B904 - its cause is set there (never itself)
            return self._whole(got)

        def read(forward: OnPiece | None) -> Answer:
            try:
                raw = client.chat.completions.with_raw_response.create(**body, stream=True,
                                                                      stream_options={"include_usage": True})
                chunks, kind = raw.parse(), str(raw.headers.get("content-type", ""))
            except Exception as exc:  # noqa: BLE001 - mapped as litellm maps it
                raise self._chained(exc, model)  # noqa: B904 - its cause is set there (never itself)
            return self._streamed(chunks, kind, forward, deadline, request["messages"], model)

        return read(on_piece) if deadline is None else within_deadline(deadline, read, on_piece)

    def _chained(self, exc: Exception, model: str) -> Exception:
        """:meth:`_failed`'s exception for ``exc``, with ``exc`` as its cause when it is another one
        (never itself: ``failures.cause_chain`` reads what the HTTP client met under it)."""
        failure = self._failed(exc, model)
        if failure is not exc and failure.__cause__ is None:
            failure.__cause__ = exc
        return failure

    def _failed(self, exc: Exception, model: str) -> Exception:
        """What litellm's path raises for ``exc`` (the SDK's, sending the request or reading a
        stream before its text): :class:`HandOver` for a 400 litellm answers itself, an
        ``EmptyReplyError`` for a body that is not JSON, else litellm's mapped exception."""
        openai = self._openai
        if isinstance(exc, (HandOver, EmptyReplyError)):
            return exc
        if isinstance(exc, openai.BadRequestError):
            self._litellm()  # imported, so that its helpers can be
            from litellm.llms.openai.common_utils import is_output_token_limit_error

            if is_output_token_limit_error(exc) or any(w in str(exc) for w in LITELLM_RESENDS):
                return HandOver(f"HTTP 400 litellm answers itself: {str(exc)[:200]}")
        if isinstance(exc, (ValueError, openai.APIResponseValidationError)):  # json.JSONDecodeError is one
            return EmptyReplyError(NOT_JSON_WORDS)
        if not isinstance(exc, openai.OpenAIError):
            return exc
        if isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError):
            return exc  # refused or dropped: read from the HTTP client's error under it, as litellm's is
        return self._as_litellm(exc, model)

    def _as_litellm(self, exc: Any, model: str) -> Exception:
        """litellm's exception for the SDK's ``exc`` (an HTTP error, a connection error, a
        timeout), built by litellm's own mapping (``exception_type``) from what its OpenAI provider
        passes it: for an HTTP error an ``OpenAIError`` with the status, the error's ``message``
        (else the body) and the headers (``Retry-After``); a timeout as it is."""
        litellm = self._litellm()
        from litellm.llms.openai.common_utils import OpenAIError

        openai = self._openai
        wrapped: Exception = exc  # a timeout: litellm maps the SDK's own exception
        if isinstance(exc, openai.APIStatusError):
            body = getattr(exc, "body", None)
            message = body.get("message") if isinstance(body, dict) else None
            wrapped = OpenAIError(status_code=exc.status_code, headers=exc.response.headers,
                                  message=message if isinstance(message, str) else exc.response.text)
        try:
            litellm.exception_type(model=model, original_exception=wrapped, custom_llm_provider="openai")
        except Exception as mapped:  # noqa: BLE001 - exception_type raises the mapped exception
            return mapped
        return wrapped

    @staticmethod
    def _whole(response: Any) -> Answer:
        """The :class:`Answer` of a reply as ``LocalBackend._answer`` makes it of litellm's.

        Raises:
            EmptyReplyError: no reply in it (``failures.check_reply``), or a body that is not JSON.
        """
        if not hasattr(response, "model_dump"):  # the SDK hands back the text of a body it could not read
            raise EmptyReplyError(NOT_JSON_WORDS)
        check_reply(response)
        usage = getattr(response, "usage", None)
        text = response.choices[0].message.content or ""
        read, write = cache_tokens(usage)
        return Answer(text=text[:MAX_REPLY_CHARS], input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                      output_tokens=int(getattr(usage, "completion_tokens", 0) or 0), cost_usd=None, priced=False,
                      cut="size" if len(text) > MAX_REPLY_CHARS else "", chars=len(text),
                      cache_read_tokens=read, cache_write_tokens=write)

    def _streamed(self, chunks: Any, kind: str, on_piece: OnPiece | None, deadline: float | None,
                  messages: list[dict[str, Any]], model: str) -> Answer:
        """Read a stream as ``LocalBackend._read_stream`` does (pieces to ``on_piece``, cut at
        :data:`MAX_REPLY_CHARS` or ``deadline``) and end it as litellm's path ends it (see the
        module docstring): a plain body is ``not_streamed``."""
        kept: list[Any] = []
        parts: list[str] = []
        usage: Any = None
        finish = ""
        chars, cut = 0, ""
        try:
            for chunk in chunks:
                usage = getattr(chunk, "usage", None) or usage
                for choice in getattr(chunk, "choices", None) or []:
                    finish = finish or str(getattr(choice, "finish_reason", None) or "")
                piece = ""
                if getattr(chunk, "choices", None):
                    piece = getattr(chunk.choices[0].delta, "content", None) or ""
                if chars + len(piece) > MAX_REPLY_CHARS:
                    cut = "size"
                    break
                kept.append(chunk)
                chars += len(piece)
                if piece:
                    parts.append(piece)
                    if on_piece is not None:
                        on_piece(piece)
                if deadline is not None and time.monotonic() >= deadline:
                    cut = "time"
                    break
        except Exception as exc:
            if parts:
                raise
            raise self._chained(exc, model)  # noqa: B904 - its cause is set there (never itself)
        finally:
            close_stream(chunks)
        if not parts and not cut and (kind and "event-stream" not in kind or not kept):
            return Answer(not_streamed=True)
        if not cut and not finish:
            raise EmptyReplyError("the provider's streamed reply (HTTP 200) ended before it was complete "
                                  "(no finish_reason)")
        if not parts and not cut:
            raise EmptyReplyError(f"the provider answered HTTP 200 with a message without content, "
                                  f"finish_reason {finish!r}")
        text = "".join(parts)
        if usage is None:  # a server that counts nothing in a stream (llama-cpp-python): litellm estimates
            counted = estimate_like_litellm(messages, text)
            if counted is not None:
                return Answer(text=text, input_tokens=counted[0], output_tokens=counted[1], cost_usd=None,
                              priced=False, cut=cut, chars=chars)
            litellm = self._litellm()  # a message litellm counts its own way (not plain text): its count
            rebuilt = litellm.stream_chunk_builder([litellm.ModelResponseStream(**c.model_dump()) for c in kept],
                                                   messages=messages)
            usage = getattr(rebuilt, "usage", None)
        read, write = cache_tokens(usage)
        return Answer(text=text, input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                      output_tokens=int(getattr(usage, "completion_tokens", 0) or 0), cost_usd=None,
                      priced=False, cut=cut, chars=chars, cache_read_tokens=read, cache_write_tokens=write)


def estimate_like_litellm(messages: list[dict[str, Any]], text: str) -> tuple[int, int] | None:
    """``(input tokens, output tokens)`` of a streamed reply that came without usage, as litellm
    estimates them for a model it does not know (``stream_chunk_builder`` -> ``token_counter``):
    tiktoken's :data:`LITELLM_ENCODING` on pieces of :data:`ENCODE_CHUNK_CHARS` characters,
    :data:`TOKENS_PER_MESSAGE` per message plus every string
    field of it (role, content, name: :data:`TOKENS_PER_NAME` more), :data:`REPLY_PRIMER` for the
    reply; the reply's text alone for the output. ``None`` when a message holds anything but strings
    (content parts, tool calls) or a text beyond :data:`EXACT_CHARS` (litellm then counts its own
    way: the caller asks litellm)."""
    from rlm_cli.corpus.tokens import count_tokens

    fields = [(key, value) for message in messages for key, value in message.items() if value is not None]
    if any(not isinstance(value, str) and key in ("content", "tool_calls", "function_call") for key, value in fields):
        return None
    texts = [value for _key, value in fields if isinstance(value, str)] + [text]
    if any(len(t) > EXACT_CHARS for t in texts):
        return None
    try:
        size = max(1, int(os.environ.get("TIKTOKEN_ENCODE_CHUNK_SIZE_CHARS") or ENCODE_CHUNK_CHARS))
    except ValueError:
        size = ENCODE_CHUNK_CHARS

    def count(t: str) -> int:  # as litellm counts: piece by piece of ``size`` characters, summed
        return sum(count_tokens(t[at:at + size], LITELLM_ENCODING) for at in range(0, len(t), size))

    prompt = sum(TOKENS_PER_MESSAGE + sum(count(v) + (TOKENS_PER_NAME if k == "name" else 0)
                                          for k, v in message.items() if isinstance(v, str))
                 for message in messages)
    return prompt + REPLY_PRIMER, count(text)
