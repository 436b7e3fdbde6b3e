"""A real Anthropic Messages API-compatible HTTP server for tests: threaded, on 127.0.0.1 port 0.

``POST /v1/messages`` answers with a scripted reply (a string, or a callable ``(request) ->
str``; the ``default`` answers once the queue is empty), as a whole JSON message or, when the
request asks to stream, as Anthropic's server-sent events (``message_start`` ...
``message_stop``). Every request body is recorded in :attr:`FakeAnthropic.requests`.

It keeps a prompt cache as Anthropic does (https://docs.claude.com/en/docs/build-with-claude/prompt-caching):
the prompt is its content blocks in order (``system``, then each message's); a block marked
``cache_control`` is a breakpoint, and the prefix that ends at it is written to the cache
(``cache_creation_input_tokens``) unless it is there already or shorter than
:attr:`FakeAnthropic.min_cache_tokens`; the longest prefix written by an earlier request that
this prompt starts with, ending at or before its last breakpoint, is read from it
(``cache_read_input_tokens``). ``input_tokens`` is the rest. Tokens are counted as 4 characters
a token, 3 more a block. A request without breakpoints reads and writes nothing.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _blocks(content: Any) -> list[dict[str, Any]]:
    """A ``system`` value or a message's ``content`` as a list of content blocks."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def prompt_blocks(req: dict[str, Any]) -> list[tuple[str, bool]]:
    """``(the block as canonical JSON without cache_control, whether it is a breakpoint)`` for
    every block of the request's prompt, in order."""
    out = []
    for block in _blocks(req.get("system")):
        out.append(("system", block))
    for message in req.get("messages") or []:
        out += [(str(message.get("role")), block) for block in _blocks(message.get("content"))]
    return [(json.dumps([role, {k: v for k, v in b.items() if k != "cache_control"}], sort_keys=True),
             "cache_control" in b) for role, b in out]


def block_tokens(block: str) -> int:
    """The tokens the server counts for one block: 4 characters a token, 3 more a block."""
    return len(block) // 4 + 3


class FakeAnthropic:
    """The scripted server. Use ``url`` as ``--api-base`` with an ``anthropic/...`` model."""

    def __init__(self, min_cache_tokens: int = 1024) -> None:
        self.queue: deque[Any] = deque()
        self.default: Any = None
        self.requests: list[dict[str, Any]] = []
        #: ``(input_tokens, cache_read_input_tokens, cache_creation_input_tokens, output_tokens)`` of each reply.
        self.usages: list[tuple[int, int, int, int]] = []
        self.min_cache_tokens = min_cache_tokens
        self._written: set[str] = set()
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                req = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.rstrip("/").endswith("/v1/messages"):
                    self._send(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})
                    return
                with fake.lock:
                    fake.requests.append(req)
                    spec = fake.queue.popleft() if fake.queue else fake.default
                text = spec(req) if callable(spec) else str(spec or "")
                usage = fake.count(req, text)
                if req.get("stream"):
                    self._stream(req, text, usage)
                else:
                    self._send(200, {"id": f"msg_{len(fake.requests)}", "type": "message", "role": "assistant",
                                     "model": req.get("model"), "content": [{"type": "text", "text": text}],
                                     "stop_reason": "end_turn", "stop_sequence": None, "usage": usage})

            def _send(self, status: int, doc: dict[str, Any]) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _stream(self, req: dict[str, Any], text: str, usage: dict[str, int]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

                def event(kind: str, data: dict[str, Any]) -> None:
                    raw = f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()
                    self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
                    self.wfile.flush()

                start_usage = {**usage, "output_tokens": 1}
                event("message_start", {"message": {"id": f"msg_{len(fake.requests)}", "type": "message",
                                                    "role": "assistant", "model": req.get("model"), "content": [],
                                                    "stop_reason": None, "stop_sequence": None,
                                                    "usage": start_usage}})
                event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
                for i in range(0, len(text), 64):
                    event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text[i:i + 64]}})
                event("content_block_stop", {"index": 0})
                event("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                        "usage": {"output_tokens": usage["output_tokens"]}})
                event("message_stop", {})
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def count(self, req: dict[str, Any], text: str) -> dict[str, int]:
        """The reply's ``usage`` under the prompt cache (see the module docstring), recorded."""
        blocks = prompt_blocks(req)
        sizes = [block_tokens(b) for b, _ in blocks]
        marks = [i for i, (_, mark) in enumerate(blocks) if mark]
        digest, prefixes = hashlib.sha256(), []
        for block, _ in blocks:
            digest.update(block.encode() + b"\0")
            prefixes.append(digest.hexdigest())
        read = write = 0
        with self.lock:
            if marks:
                hits = [i for i in range(marks[-1] + 1) if prefixes[i] in self._written]
                read = sum(sizes[:hits[-1] + 1]) if hits else 0
                for i in marks:
                    if sum(sizes[:i + 1]) >= self.min_cache_tokens:
                        self._written.add(prefixes[i])
                write = max(0, sum(sizes[:marks[-1] + 1]) - read) if sum(sizes[:marks[-1] + 1]) >= \
                    self.min_cache_tokens else 0
            usage = {"input_tokens": sum(sizes) - read - write, "cache_read_input_tokens": read,
                     "cache_creation_input_tokens": write, "output_tokens": max(1, len(text) // 4)}
            self.usages.append((usage["input_tokens"], read, write, usage["output_tokens"]))
        return usage

    def breakpoints(self, req: dict[str, Any]) -> int:
        """How many ``cache_control`` breakpoints the request carries."""
        return sum(mark for _, mark in prompt_blocks(req))

    def close(self) -> None:
        """Stop the server."""
        self.server.shutdown()
        self.server.server_close()

