"""A real OpenAI-compatible HTTP server for tests: threaded, on 127.0.0.1 port 0.

Replies are scripted per requested model name (``root``, ``sub``...): each entry of a model's
queue is a string (the reply text), a callable ``(request_json) -> str`` or a :class:`Reply`
for HTTP-level behaviour (status codes, headers, delays, malformed bodies, dropped connections).
When a model's queue is empty its ``default`` (if any) answers. Every request is recorded.

A request with ``"stream": true`` is answered as OpenAI does: ``text/event-stream`` (chunked
transfer encoding), one ``data: {chat.completion.chunk}`` event per piece of the reply, a usage
chunk when ``stream_options.include_usage`` asks for one, then ``data: [DONE]``. ``Reply`` fields
make it slow (``stream_delay_s`` between pieces), omit the usage chunk (``stream_usage=False``),
break it (``stream_cut_after``: the connection drops after that many pieces), or answer like a
provider that cannot stream (``no_stream=True``: the plain JSON body).
Setting ``FakeLLM.refuse_stream`` answers every streamed request with a 400 instead.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ReplySpec = "str | Callable[[dict[str, Any]], str] | Reply"


@dataclass
class Reply:
    """An HTTP-level scripted reply."""

    text: str | Callable[[dict[str, Any]], str] = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    raw_body: bytes | None = None  # sent as is (malformed JSON)
    drop: bool = False  # close the connection without an answer
    cut_after: int | None = None  # send the headers and this many bytes of the body, then close
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    #: Streamed replies: characters per chunk, seconds before each chunk, usage chunk or not,
    #: and ``no_stream`` to ignore ``stream`` and answer with one JSON body.
    stream_chunk_chars: int = 64
    stream_delay_s: float = 0.0
    stream_usage: bool = True
    no_stream: bool = False
    #: Streamed replies: drop the connection after this many text pieces (a broken stream).
    stream_cut_after: int | None = None
    #: False: the reply carries no ``usage`` (a server that does not count), streamed or not.
    usage: bool = True
    #: Streamed replies: send the text again and again, numbered, never ending (``text`` is one piece).
    endless: bool = False
    #: Streamed replies: after the headers, keep the connection alive with SSE comments (``: ping``,
    #: one a second) for this many seconds before the first event, as a busy server does while
    #: the request waits for the model (sse-starlette's pings; llama.cpp's server).
    ping_for_s: float = 0.0
    #: A 200 without a reply, streamed or not: ``choices`` is empty (every chunk's, when streamed).
    no_choices: bool = False
    #: A 200 whose one choice has a message (or deltas) without ``content``.
    no_content: bool = False
    #: ``usage.prompt_tokens_details.cached_tokens`` to report (the input served from the prompt cache).
    cached_tokens: int | None = None


#: A 200 body that is not JSON at all (a captive portal, a misrouted proxy), streamed or not.
NOT_JSON = b"<html><body>Service temporarily rerouted</body></html>"


class FakeLLM:
    """The scripted server. Use ``url`` as ``--api-base``; ``script(model, *replies)`` queues
    replies; ``requests`` lists every chat request body received."""

    def __init__(self) -> None:
        self.queues: dict[str, deque[Any]] = defaultdict(deque)
        self.defaults: dict[str, Any] = {}
        self.requests: list[dict[str, Any]] = []
        #: The HTTP headers of each chat request, in the order of :attr:`requests`.
        self.request_headers: list[dict[str, str]] = []
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.models_list = ["root", "sub"]
        #: When set, GET /api/tags answers like an Ollama server with these model names.
        self.ollama_models: list[str] | None = None
        #: When set, a chat request arriving while more than this many are in flight gets a 429
        #: (with ``Retry-After: rate_limit_retry_after`` when that is set); ``rate_limited`` counts them.
        self.max_concurrent: int | None = None
        self.rate_limit_retry_after: str | None = None
        self.rate_limited = 0
        #: When true, a request asking to stream gets a 400 (a provider without streaming).
        self.refuse_stream = False
        #: ``time.monotonic()`` when each streamed chunk was written: ``(model, text piece, time)``.
        self.stream_log: list[tuple[str, str, float]] = []
        #: When set, counts the tokens of a text for the default ``usage`` (else 4 characters a
        #: token): with :func:`openai_tokens` the server counts as OpenAI does.
        self.count_tokens: Callable[[str], int] | None = None
        #: ``(model, prompt_tokens, completion_tokens)`` of every reply sent with status 200, as the
        #: server counted them (what a provider would bill), whether or not it sent ``usage``.
        self.billed: list[tuple[str, int, int]] = []
        #: When true, the server caches prompts as OpenAI does on its own: a request that begins
        #: with the messages of an earlier one (at least 1,024 tokens of them) reports those
        #: tokens as ``usage.prompt_tokens_details.cached_tokens``.
        self.implicit_cache = False
        self._prefixes: set[str] = set()
        #: The model names of the ``ping_for_s`` replies whose pings are over (the reply is due):
        #: a client gone before has not waited for it, however slow the machine.
        self.pings_over: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out as separate writes

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/api/tags" and fake.ollama_models is not None:
                    body = json.dumps({"models": [{"name": m, "model": m, "size": 1} for m in fake.ollama_models]})
                    self._send(200, body.encode(), {})
                elif self.path.rstrip("/").endswith("/models"):
                    body = json.dumps({"object": "list", "data": [
                        {"id": m, "object": "model", "owned_by": "test"} for m in fake.models_list]}).encode()
                    self._send(200, body, {})
                else:
                    self._send(404, b'{"error": "not found"}', {})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                req = json.loads(self.rfile.read(length) or b"{}")
                with fake.lock:
                    fake.requests.append(req)
                    fake.request_headers.append({k.lower(): v for k, v in self.headers.items()})
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                    limited = fake.max_concurrent is not None and fake.in_flight > fake.max_concurrent
                    fake.rate_limited += limited
                try:
                    if limited:
                        retry = {"Retry-After": fake.rate_limit_retry_after} if fake.rate_limit_retry_after else {}
                        self._send(429, b'{"error": {"message": "too many concurrent requests", "code": 429}}', retry)
                        return
                    fake._answer(self, req)
                finally:
                    with fake.lock:
                        fake.in_flight -= 1

            def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

        class Server(ThreadingHTTPServer):
            #: A listen backlog as real servers have (uvicorn: 2048); socketserver's 5 makes the
            #: kernel reset connections when 64 sub-calls connect at once on a loaded machine.
            request_queue_size = 256

            def handle_error(self, request: Any, client_address: Any) -> None:
                if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
                    super().handle_error(request, client_address)  # a client that hung up is no news

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def script(self, model: str, *replies: Any) -> None:
        """Queue replies for ``model`` (the name after the provider prefix, e.g. ``root``)."""
        self.queues[model].extend(replies)

    def default(self, model: str, reply: Any) -> None:
        """The reply used when ``model``'s queue is empty."""
        self.defaults[model] = reply

    def chat_requests(self, model: str) -> list[dict[str, Any]]:
        """Requests received for ``model``."""
        return [r for r in self.requests if r.get("model") == model]

    def close(self) -> None:
        """Stop the server."""
        self.server.shutdown()
        self.server.server_close()

    def _answer(self, handler: Any, req: dict[str, Any]) -> None:
        model = str(req.get("model", ""))
        if req.get("stream") and self.refuse_stream:  # refused before a scripted reply is used
            body = json.dumps({"error": {"message": "stream is not supported by this server", "type": "error",
                                         "code": 400}}).encode()
            handler._send(400, body, {})
            return
        with self.lock:
            spec = self.queues[model].popleft() if self.queues[model] else self.defaults.get(model)
        if spec is None:
            spec = Reply(status=500, raw_body=json.dumps({"error": {"message": f"no scripted reply for {model}"}}).encode())
        if not isinstance(spec, Reply):
            spec = Reply(text=spec)
        if spec.delay_s:
            time.sleep(spec.delay_s)
        if spec.drop:
            handler.close_connection = True
            handler.connection.shutdown(2)
            return
        if spec.raw_body is not None:
            handler._send(spec.status, spec.raw_body, spec.headers)
            return
        if spec.status != 200:
            body = json.dumps({"error": {"message": f"scripted status {spec.status}", "type": "error",
                                         "code": spec.status}}).encode()
            handler._send(spec.status, body, spec.headers)
            return
        text = spec.text(req) if callable(spec.text) else spec.text
        messages = req.get("messages", [])
        if self.count_tokens is not None:  # as OpenAI counts: 3 tokens a message and 3 a request
            prompt_default = sum(self.count_tokens(str(m.get("content", ""))) + 3 for m in messages) + 3
            completion_default = self.count_tokens(text)
        else:
            prompt_default = max(1, sum(len(str(m.get("content", ""))) for m in messages) // 4)
            completion_default = max(1, len(text) // 4)
        usage: dict[str, Any] = {"prompt_tokens": spec.prompt_tokens if spec.prompt_tokens is not None else prompt_default,
                 "completion_tokens": spec.completion_tokens if spec.completion_tokens is not None
                 else completion_default}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        cached = spec.cached_tokens if spec.cached_tokens is not None else self._cached(messages)
        if cached:
            usage["prompt_tokens_details"] = {"cached_tokens": min(cached, usage["prompt_tokens"])}
        with self.lock:
            self.billed.append((model, usage["prompt_tokens"], usage["completion_tokens"]))
        if req.get("stream") and not spec.no_stream:
            self._stream(handler, req, spec, model, text, usage)
            return
        doc: dict[str, Any] = {
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": text}}]}
        if spec.no_choices:
            doc["choices"] = []
        elif spec.no_content:
            doc["choices"][0]["message"] = {"role": "assistant"}
        if spec.usage:
            doc["usage"] = usage
        body = json.dumps(doc).encode()
        if spec.cut_after is not None:  # the connection dies in the middle of the answer
            handler.close_connection = True
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body[:spec.cut_after])
            handler.wfile.flush()
            handler.connection.shutdown(2)
            return
        handler._send(200, body, spec.headers)


    def _cached(self, messages: list[dict[str, Any]]) -> int:
        """Under :attr:`implicit_cache`: the tokens of the longest run of leading messages an
        earlier request began with (4 characters a token), 0 under 1,024; remembers this one's."""
        if not self.implicit_cache:
            return 0
        keys = [json.dumps(messages[:n + 1], sort_keys=True) for n in range(len(messages))]
        sizes = list(itertools.accumulate(len(str(m.get("content", ""))) // 4 for m in messages))
        with self.lock:
            hit = max((n for n, k in enumerate(keys) if k in self._prefixes), default=-1)
            self._prefixes.update(keys)
        return sizes[hit] if hit >= 0 and sizes[hit] >= 1024 else 0

    def _stream(self, handler: Any, req: dict[str, Any], spec: Reply, model: str, text: str,
                usage: dict[str, Any]) -> None:
        """Answer as a server-sent event stream with chunked transfer encoding."""
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Transfer-Encoding", "chunked")
        for k, v in spec.headers.items():
            handler.send_header(k, v)
        handler.end_headers()
        ident = f"chatcmpl-{len(self.requests)}"
        created = int(time.time())
        until = time.monotonic() + spec.ping_for_s
        while time.monotonic() < until:
            raw_ping = b": ping\n\n"
            try:
                handler.wfile.write(f"{len(raw_ping):x}\r\n".encode() + raw_ping + b"\r\n")
                handler.wfile.flush()
            except OSError:
                return  # the client left
            time.sleep(min(1.0, max(0.0, until - time.monotonic())))
        if spec.ping_for_s:
            with self.lock:
                self.pings_over.append(model)

        def event(payload: dict[str, Any] | str) -> None:
            data = payload if isinstance(payload, str) else json.dumps(payload)
            raw = f"data: {data}\n\n".encode()
            handler.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
            handler.wfile.flush()

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"id": ident, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        step = max(1, spec.stream_chunk_chars)
        pieces: Any = [text[i:i + step] for i in range(0, len(text), step)] or [""]
        if spec.endless:  # numbered: litellm stops a stream that repeats one chunk
            pieces = (f"{text}{n} " for n in itertools.count())
        if spec.no_choices or spec.no_content:  # a 200 stream that carries no reply
            if spec.no_choices:
                event({"id": ident, "object": "chat.completion.chunk", "created": created, "model": model,
                       "choices": []})
            else:
                event(chunk({"role": "assistant"}))
                event(chunk({}, "stop"))
            event("[DONE]")
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
            return
        event(chunk({"role": "assistant", "content": ""}))
        for n, piece in enumerate(pieces):
            if spec.stream_cut_after is not None and n >= spec.stream_cut_after:
                handler.close_connection = True
                handler.connection.shutdown(2)
                return
            if spec.stream_delay_s:
                time.sleep(spec.stream_delay_s)
            with self.lock:
                self.stream_log.append((model, piece, time.monotonic()))
            event(chunk({"content": piece}))
        event(chunk({}, "stop"))
        if spec.usage and spec.stream_usage and (req.get("stream_options") or {}).get("include_usage"):
            event({"id": ident, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": [], "usage": usage})
        event("[DONE]")
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()


def openai_tokens(text: str) -> int:
    """Tokens of ``text`` as OpenAI's newer models count them (tiktoken ``o200k_base``)."""
    from rlm_cli.corpus.tokens import count_tokens

    return count_tokens(text)


def repl(code: str) -> str:
    """A root-model reply consisting of one ```repl block."""
    return f"Let me run some code.\n```repl\n{code.strip()}\n```"


def last_user(req: dict[str, Any]) -> str:
    """The content of the last user message of a request."""
    users = [m for m in req.get("messages", []) if m.get("role") == "user"]
    return str(users[-1]["content"]) if users else ""


def question_message(req: dict[str, Any]) -> str:
    """The content of the loop's first user message (corpus metadata and ``Question: ...``),
    wherever it is in the request (the leads turn, and later turns, come after it)."""
    return next((str(m["content"]) for m in req.get("messages", []) if m.get("role") == "user"
                 and "Question: " in str(m.get("content", ""))), "")


def task_messages(req: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages of a request from the loop's first user message (the one asking the question)
    on: the system prompt and the worked example's turns before it left out."""
    messages = req.get("messages", [])
    for i, m in enumerate(messages):
        content = str(m.get("content", ""))
        if m.get("role") == "user" and "\nQuestion: " in content:
            return messages[i:]
    return [m for m in messages if m.get("role") != "system"]


def turn(req: dict[str, Any]) -> int:
    """How many replies the root model has given in this loop so far (0 on its first turn)."""
    return sum(1 for m in task_messages(req) if m.get("role") == "assistant")


def first_prompt(req: dict[str, Any]) -> str:
    """The loop's first user message: the corpus description, a session's note and the question."""
    task = task_messages(req)
    return str(task[0].get("content", "")) if task else ""
