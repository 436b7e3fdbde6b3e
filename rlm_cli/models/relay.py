"""``LMHandler``: the Unix-socket relay between the REPL worker and the model client. It serves
``llm_query``/``llm_query_batched`` sub-calls through ``models.client.ModelClient`` (whose policy
applies: budgets, retries, concurrency) and hands ``rlm_query`` to the runner's sub-RLM loop.

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
"""

from __future__ import annotations

import os
import secrets
import socket
import socketserver
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm_cli import protocol
from rlm_cli.errors import BudgetExceededError, RLMError
from rlm_cli.models.client import ModelClient
from rlm_cli.models.failures import CallFailed

#: Largest request frame accepted from the worker (a sub-call prompt): 64 MiB.
MAX_REQUEST_BYTES = 64 * 1024 * 1024
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
