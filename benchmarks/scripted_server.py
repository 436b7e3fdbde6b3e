"""A standalone scripted OpenAI-compatible server for the scale benchmarks (not for tests:
those use ``tests/support/fake_llm.py``).

    python benchmarks/scripted_server.py --concurrency 8 --latency 0.5 [--root-reply FILE]

It prints ``PORT <n>`` on stdout once it listens on 127.0.0.1 and serves until its stdin closes
(so it dies with the benchmark that started it). It behaves like one model server with a fixed
number of slots (vLLM's ``max_num_seqs``, llama.cpp's ``--parallel``): at most ``--concurrency``
requests are answered at once, each after ``--latency`` seconds; the others wait in a queue. A
request for a model whose name starts with ``root`` is answered with the text of ``--root-reply``
(the same reply every time: a benchmark's root model writes one code block that calls
``FINAL``), any other with ``ok``. Usage is deterministic: prompt tokens are the characters of
the messages over 4 (at least 1), completion tokens those of the reply over 4 (at least 1), so a
benchmark can check rlm's sums exactly. ``stream: true`` is answered as a server-sent event
stream with a usage chunk. ``GET /v1/models`` lists ``root`` and ``sub``. ``GET /stats`` returns
``{"requests", "in_flight", "max_in_flight", "prompt_tokens", "completion_tokens"}`` (the tokens of
the replies sent).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def make_server(concurrency: int, latency: float, root_reply: str, port: int = 0) -> ThreadingHTTPServer:
    """The server (not yet serving): ``concurrency`` slots, ``latency`` seconds per request."""
    slots = threading.BoundedSemaphore(concurrency)
    lock = threading.Lock()
    stats = {"requests": 0, "in_flight": 0, "max_in_flight": 0, "prompt_tokens": 0, "completion_tokens": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                body = {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "bench"}
                                                   for m in ("root", "sub")]}
            elif self.path.rstrip("/") == "/stats":
                with lock:
                    body = dict(stats)
            else:
                self._send(404, b'{"error": "not found"}', "application/json")
                return
            self._send(200, json.dumps(body).encode(), "application/json")

        def do_POST(self) -> None:
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            with slots:  # a full server queues the request, as a real one does
                with lock:
                    stats["requests"] += 1
                    stats["in_flight"] += 1
                    stats["max_in_flight"] = max(stats["max_in_flight"], stats["in_flight"])
                try:
                    time.sleep(latency)
                    self._answer(req)
                finally:
                    with lock:
                        stats["in_flight"] -= 1

        def _answer(self, req: dict[str, Any]) -> None:
            model = str(req.get("model", ""))
            text = root_reply if model.startswith("root") else "ok"
            prompt_chars = sum(len(str(m.get("content", ""))) for m in req.get("messages", []))
            usage = {"prompt_tokens": max(1, prompt_chars // 4), "completion_tokens": max(1, len(text) // 4)}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            with lock:
                stats["prompt_tokens"] += usage["prompt_tokens"]
                stats["completion_tokens"] += usage["completion_tokens"]
            ident, created = f"chatcmpl-{stats['requests']}", int(time.time())
            if not req.get("stream"):
                body = {"id": ident, "object": "chat.completion", "created": created, "model": model,
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": text}}], "usage": usage}
                self._send(200, json.dumps(body).encode(), "application/json")
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def event(payload: Any) -> None:
                raw = f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n".encode()
                self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")

            def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
                return {"id": ident, "object": "chat.completion.chunk", "created": created, "model": model,
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

            event(chunk({"role": "assistant", "content": text}))
            event(chunk({}, "stop"))
            if (req.get("stream_options") or {}).get("include_usage"):
                event({"id": ident, "object": "chat.completion.chunk", "created": created, "model": model,
                       "choices": [], "usage": usage})
            event("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _send(self, status: int, body: bytes, ctype: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024

        def handle_error(self, request: Any, client_address: Any) -> None:
            if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
                super().handle_error(request, client_address)

    return Server(("127.0.0.1", port), Handler)


class Process:
    """A scripted server in a process of its own (:func:`start`); ``url`` is its ``/v1`` base."""

    def __init__(self, concurrency: int, latency: float, root_reply: str | None = None) -> None:
        cmd = [sys.executable, __file__, "--concurrency", str(concurrency), "--latency", str(latency)]
        if root_reply is not None:
            cmd += ["--root-reply", root_reply]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("PORT "):
            self.close()
            raise RuntimeError(f"the scripted server did not start: {line!r}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict[str, int]:
        """The server's ``/stats`` document."""
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=10) as resp:  # noqa: S310
            return json.loads(resp.read())  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop the server (closing its stdin) and reap it."""
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=8, help="requests answered at once (default 8)")
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per request (default 0.5)")
    parser.add_argument("--root-reply", help="file holding the reply to models named root*")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    reply = open(args.root_reply, encoding="utf-8").read() if args.root_reply else "FINAL(ok)"
    server = make_server(args.concurrency, args.latency, reply, args.port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"PORT {server.server_address[1]}", flush=True)
    sys.stdin.read()  # until the benchmark closes our stdin (or dies)
    server.shutdown()


if __name__ == "__main__":
    main()
