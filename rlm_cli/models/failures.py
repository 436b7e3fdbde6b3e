"""What a failed model request means: the errors raised for it (:class:`CallFailed`,
:class:`PromptTooLargeError`); how a provider's error is classified for the retry policy
(:func:`classify_error`) and how long it asks to wait (:func:`retry_after_s`); and how an error
raised in the model host process is carried back (:func:`describe_error` there,
:class:`RemoteCallError` here) so that it is classified like the litellm exception itself."""

from __future__ import annotations

import email.utils
import re
import time
from typing import Any

from rlm_cli.config import EXAMPLE_MODEL
from rlm_cli.errors import ExitCode, ProviderError, RLMError

#: Headers of a failed reply kept for the retry policy (``retry_after_s``).
RETRY_HEADERS = ("retry-after", "retry-after-ms")


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


class EmptyReplyError(Exception):
    """A provider answered a request with HTTP 200 but no reply in it: no ``choices``, or a
    choice without message content. Retried like an outage (a proxy or a local server between
    two states gives such bodies); the message says what came back."""


def check_reply(response: Any, *, streamed_nothing: bool = False) -> None:
    """Raise when a chat completion (litellm's ``ModelResponse``, a streamed one rebuilt) holds
    no reply: no choices, no message, or message content ``None`` (an empty string is a reply,
    except from a stream that sent no text at all: ``streamed_nothing``).

    Raises:
        EmptyReplyError: the message names what was missing (and the ``finish_reason``).
    """
    choices = getattr(response, "choices", None)
    if not choices:
        raise EmptyReplyError("the provider answered HTTP 200 with no choices (an empty reply)")
    first = choices[0]
    message = getattr(first, "message", None)
    finish = getattr(first, "finish_reason", None)
    why = f", finish_reason {finish!r}" if finish else ""
    if message is None:
        raise EmptyReplyError(f"the provider answered HTTP 200 with a choice without a message{why}")
    if getattr(message, "content", None) is None or (streamed_nothing and not message.content):
        raise EmptyReplyError(f"the provider answered HTTP 200 with a message without content{why}")


#: litellm's words for a 200 reply whose body it could not read as a chat completion.
_UNREADABLE_BODY = re.compile(r"Expecting value|JSONDecodeError|Unterminated string|Extra data: line|"
                              r"Invalid control character|Expecting ',' delimiter|Expecting property name")
#: litellm's words for a body without ``choices`` (``{}``, or an error object sent with status 200).
_NO_CHOICES = re.compile(r"response with no 'choices'")
#: litellm's words for a stream that ended without a finish_reason (no choices, or cut short).
_STREAM_UNFINISHED = re.compile(r"Stream ended before a finish_reason was received")
#: ... and how it names the 200 reply it could not read (its status may then say 500).
_REPLY_200 = re.compile(r"Received response - <APIResponse \[200")


def reply_failure(exc: BaseException) -> str | None:
    """What came back, in words, when ``exc`` is about a 200 reply that held no chat completion
    (:class:`EmptyReplyError`, or litellm failing to parse the body); else ``None``."""
    names = error_class_names(exc)
    if "EmptyReplyError" in names:
        return short_error(exc)
    text = str(exc)
    if _NO_CHOICES.search(text):
        return "the provider answered HTTP 200 with no choices (an empty reply)"
    if _STREAM_UNFINISHED.search(text):
        return "the provider's streamed reply (HTTP 200) ended before it was complete (no finish_reason)"
    if _UNREADABLE_BODY.search(text) and (_REPLY_200.search(text) or http_status(exc) in (None, 200)):
        return "the provider answered HTTP 200 with a body that is not a chat completion (not JSON)"
    return None


class ReplyTimeoutError(Exception):
    """A streamed reply still running when its ``--request-timeout`` ran out (retried like a
    timeout)."""


class RemoteCallError(Exception):
    """A provider error raised in the model host, carried over: ``class_names`` (the litellm
    exception's class and its bases), ``status_code``, the retry headers, the message and
    ``causes`` (:func:`cause_chain` of the original: what the HTTP client met underneath)."""

    def __init__(self, message: str, *, class_names: list[str], status_code: int | None = None,
                 headers: dict[str, str] | None = None, causes: list[str] | None = None) -> None:
        super().__init__(message)
        self.class_names = frozenset(class_names)
        self.status_code = status_code
        self.litellm_response_headers = dict(headers or {})
        self.causes = list(causes or [])


def cause_chain(exc: BaseException) -> list[str]:
    """``"ClassName: message"`` (each cut at 200 characters) of the exceptions under ``exc``
    (``__cause__``, else ``__context__``), outermost first, at most 8; a :class:`RemoteCallError`'s
    carried ones. litellm words a refused connection, a dropped one and a server that closed
    without answering alike (``Connection error.``): only the HTTP client's own errors under it
    tell them apart."""
    carried = getattr(exc, "causes", None)
    if isinstance(carried, list):
        return [str(c) for c in carried]
    out: list[str] = []
    seen = {id(exc)}
    cur = exc.__cause__ or exc.__context__
    while cur is not None and id(cur) not in seen and len(out) < 8:
        seen.add(id(cur))
        out.append(f"{type(cur).__name__}: {str(cur)[:200]}")
        cur = cur.__cause__ or cur.__context__
    return out


#: The HTTP client's errors for a connection that was never made (refused, no such host, no route).
_NO_CONNECTION = re.compile(r"^(ConnectError|ConnectTimeout|ConnectionRefusedError|gaierror|NameResolutionError)\b")
#: ... for a reply that did not come in time, once connected.
_TIMED_OUT = re.compile(r"^(ReadTimeout|WriteTimeout|PoolTimeout|TimeoutError|TimeoutException)\b")
#: ... for a connection the server closed: before answering, or in the middle of the reply.
_CLOSED = re.compile(r"^(RemoteProtocolError|ReadError|ConnectionResetError|BrokenPipeError|IncompleteRead)\b")


def transport_failure(exc: BaseException) -> str | None:
    """What happened to the connection of a failed request: ``"connect"`` (none was made: refused,
    unknown host), ``"timeout"`` (connected, no whole reply in time), ``"no_answer"`` (the server
    closed the connection without answering), ``"dropped"`` (it closed it in the middle of the
    reply); ``None`` when the connection was not the problem (an HTTP error, a bad body)."""
    chain = cause_chain(exc)
    names = error_class_names(exc)
    if any(_NO_CONNECTION.match(c) for c in chain):
        return "connect"
    if names & {"Timeout", "APITimeoutError", "ReplyTimeoutError", "TimeoutError"} or any(_TIMED_OUT.match(c) for c in chain):
        return "timeout"
    closed = [c for c in chain if _CLOSED.match(c)]
    if closed:
        return "no_answer" if any("without sending a response" in c for c in closed) else "dropped"
    if "APIConnectionError" in names or "connection error" in str(exc).lower():
        return "connect"  # litellm's words without the client's error under them: as before
    return None


def transport_words(transport: str | None, timeout: float, where: str) -> str:
    """What happened to the connection (:func:`transport_failure`) to ``where`` (the API base, or
    "the provider"), in words; ``""`` for ``None``. ``timeout``: the seconds the request had."""
    return {"connect": f"could not connect to {where}",
            "timeout": f"timed out after {timeout:g} s without a whole reply",
            "no_answer": f"{where} closed the connection without answering",
            "dropped": f"the connection to {where} dropped in the middle of the reply"}.get(transport or "", "")


def failure_hint(transport: str | None, model: str, where: str, *, empty: bool) -> str:
    """What to do about a request to ``where`` that failed after its retries: by what happened to
    its connection (:func:`transport_failure`), or ``empty``: a 200 without a reply."""
    if transport == "connect":
        return "check --api-base and that the server is running"
    if transport == "timeout":
        return ("the server took the request but did not answer in time: raise --request-timeout for slow "
                "or long replies, or check that it is not overloaded")
    if transport in ("no_answer", "dropped"):
        return "the server took the request, then closed the connection: check its log: it may have crashed"
    if empty:
        return f"check that {where} serves OpenAI-style chat completions for {model}"
    return "the provider kept failing; try again later or raise --retries"


def failure_words(exc: BaseException, model: str, api_base: str | None, timeout: float) -> tuple[str, str]:
    """``(what happened, what to do once the retries are spent)`` for a failed request to
    ``model``: what came back when a 200 held no reply (:func:`reply_failure`), else what happened
    to the connection (:func:`transport_failure`: a server that was up never reads as one that
    could not be reached), else the provider's first line. ``timeout``: the seconds it had."""
    where = api_base or "the provider"
    empty = reply_failure(exc)
    transport = None if empty else transport_failure(exc)
    words = "" if "ReplyTimeoutError" in error_class_names(exc) else transport_words(transport, timeout, where)
    return empty or words or short_error(exc), failure_hint(transport, model, where, empty=bool(empty))


def describe_error(exc: BaseException) -> dict[str, Any]:
    """What :class:`RemoteCallError` needs of a litellm exception: ``names``, ``status``,
    ``message``, the retry ``headers`` (``retry-after``, ``retry-after-ms``) and ``causes``
    (:func:`cause_chain`)."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or getattr(
        exc, "litellm_response_headers", None) or {}
    kept: dict[str, str] = {}
    for name in RETRY_HEADERS:
        try:
            value = headers.get(name) or headers.get(name.title())
        except (AttributeError, TypeError):
            value = None
        if value:
            kept[name] = str(value)
    status = getattr(exc, "status_code", None)
    return {"names": [cls.__name__ for cls in type(exc).__mro__], "message": str(exc),
            "status": status if isinstance(status, int) else None, "headers": kept, "causes": cause_chain(exc)}

def error_class_names(exc: BaseException) -> frozenset[str]:
    """The class names an error answers to: a :class:`RemoteCallError`'s carried names, else the
    names in the exception's MRO."""
    carried = getattr(exc, "class_names", None)
    if isinstance(carried, frozenset):
        return carried
    return frozenset(cls.__name__ for cls in type(exc).__mro__)

def short_error(exc: BaseException) -> str:
    """The first line of an error, without litellm's ``litellm.XError: XError:`` prefixes."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else type(exc).__name__
    if "No deployments available" in first:  # litellm Router's words when every deployment cools down
        return ("no deployment of the Router group could take the call: each failed and is cooling down "
                "(check that the servers of --router-config answer)")
    for _ in range(3):
        head, sep, rest = first.partition(": ")
        if sep and head.replace("litellm.", "").replace("_", "").isalnum() and head.endswith(
                ("Error", "Exception", "Timeout")) and rest:
            first = rest
        else:
            break
    return first[:500] or type(exc).__name__


#: The openai client's words for a call made without any API key (litellm passes them on as an
#: ``APIError`` without a status, which would otherwise count as an outage and be retried).
_NO_KEY = re.compile(r"Missing credentials|api_key client option must be set", re.IGNORECASE)


def classify_error(exc: BaseException) -> str:
    """What a litellm/openai exception means for retrying: ``rate_limit``, ``retry`` (5xx,
    timeout, connection, malformed body, a 200 without a reply), ``auth`` (401/403), ``not_found`` (404, unknown
    provider), ``context_window``, or ``bad_request`` (other 4xx and anything unrecognised)."""
    names = error_class_names(exc)
    status = http_status(exc)
    if "ContextWindowExceededError" in names:
        return "context_window"
    if names & {"Timeout", "APITimeoutError", "ReplyTimeoutError", "EmptyReplyError", "TimeoutError"}:
        return "retry"  # TimeoutError: Python's own (a socket's, or a stream past its deadline in the backend)
    if status in (401, 403) or names & {"AuthenticationError", "PermissionDeniedError"} or _NO_KEY.search(str(exc)):
        return "auth"
    if ("LiteLLMUnknownProvider" in names or status == 404 or "NotFoundError" in names
            or "LLM Provider NOT provided" in str(exc)):  # a model name without its provider/
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

def http_status(exc: BaseException) -> int | None:
    """The HTTP status an error carries (``status_code``), or ``None``."""
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None

def hint_for(kind: str) -> str:
    """What to do next about a failure of kind ``kind`` (see :func:`classify_error`); ``""`` when nothing."""
    return {"auth": "check your API key (--api-key, RLM_API_KEY or the provider's variable) and its permissions; "
                    "with --api-base only --api-key or RLM_API_KEY is sent, never the provider's variable",
            "not_found": f"check --model / --sub-model (provider/name, e.g. {EXAMPLE_MODEL}) and --api-base",
            "context_window": "the prompt is too large for the model: split it",
            "bad_request": "the provider rejected the request"}.get(kind, "")
