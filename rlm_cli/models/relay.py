"""``LMHandler``: the Unix-socket relay between the REPL worker and the model client. It serves
``llm_query``/``llm_query_batched`` sub-calls through ``models.client.ModelClient`` (whose policy
applies: budgets, retries, concurrency) and hands ``rlm_query`` to the runner's sub-RLM loop.

Socket protocol (``rlm_cli.protocol`` frames, one request per connection): the worker sends a
*hello* ``{"token", "type": "completion" | "rlm_query" | "window"}`` (at most
``protocol.MAX_HELLO_BYTES``), then the request: ``{"prompt": str | [messages], "model": str | None}``
(a completion), ``{"prompt": str, "context": str | None}`` (an rlm_query) or ``{"model": str | None}``
(a window: what one sub-call of that model may hold, for ``llm_map``'s packing; no model is
called), and reads ``{"ok": true, "text": str}`` (a window's text is the JSON
``{"window": tokens, "reply": tokens}``: the input window and the reply cap every sub-call of the
model is held to) or ``{"ok": false, "error": str}``. The token also tells the handler the *depth* of the worker
that is calling, so the depth limit never depends on what the worker says.

**Nothing is read before the caller is known.** A connection is accepted, its peer read from
the kernel (``SO_PEERCRED``), and closed at once, before a byte is read and before a thread is
started for it, unless that peer is a registered worker or one of its descendants (rule 1
below). Then the hello must arrive whole within :data:`HELLO_TIMEOUT_S` seconds and carry that
worker's token; only then is the request read, capped by its type (:data:`MAX_REQUEST_BYTES`),
within :data:`REQUEST_READ_TIMEOUT_S` seconds, and while the frames being read by all
connections together announce at most :data:`MAX_PENDING_BYTES` (a frame's buffer grows with
the bytes that arrive, never with what its header announces). At most :data:`MAX_CONNECTIONS`
connections (or ``--max-concurrency``, when higher) are served at once; more wait in the kernel's
listen queue. The socket lives in a
fresh folder of mode 0700, the socket itself 0600: only rlm's user reaches it. When the worker
runs as another user (``nobody``, rlm being root), the launcher gives both a private group of
that worker (folder 0710, socket 0660; ``users.share_relay``), so neither other local users
nor the workers of other runs can connect.

**Sub-calls carry text only.** A completion's messages are rebuilt before they reach litellm:
roles ``system``, ``user`` and ``assistant``, each with text content (a string, or a list of
``{"type": "text", "text": ...}`` parts, joined); any other part (``image_url``, ``file``,
``input_audio``...) or key is refused with an error naming it, since litellm would fetch a
URL in such a part from this process, outside the sandbox.

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

import contextlib
import json
import os
import secrets
import socket
import socketserver
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rlm_cli import protocol
from rlm_cli.errors import BudgetExceededError, RLMError
from rlm_cli.models.client import ModelClient
from rlm_cli.models.failures import CallFailed
from rlm_cli.sockets import private_socket_dir

#: Largest request frame accepted from the worker, by request type: a sub-call prompt (no model's
#: input window holds more than a few MiB of text), and an ``rlm_query`` with its context.
MAX_REQUEST_BYTES = {"completion": 32 * 1024 * 1024, "rlm_query": 64 * 1024 * 1024, "window": 4096}
#: Connections served at once (a batch of sub-calls uses up to 32); the rest wait in the kernel.
MAX_CONNECTIONS = 64
#: Bytes the request frames being read by all connections may announce together.
MAX_PENDING_BYTES = 256 * 1024 * 1024
#: Seconds a connection has to send its whole hello, and then its whole request.
HELLO_TIMEOUT_S = 5.0
REQUEST_READ_TIMEOUT_S = 60.0
#: Seconds a worker has to take its answer.
REPLY_SEND_TIMEOUT_S = 60.0
#: Message roles a sub-call may carry.
ROLES = ("system", "user", "assistant")
RlmQueryHandler = Callable[[str, "str | None", int], str]
SubCallObserver = Callable[[dict[str, Any]], None]
#: ``(stage, depth, request, reply)``: ``start`` before an authenticated request is served,
#: ``end`` with the reply about to be sent (for progress displays; must not raise).
RequestObserver = Callable[[str, int, dict[str, Any], "dict[str, Any] | None"], None]


@dataclass(frozen=True)
class Route:
    """Who serves the worker's requests for one question: the model ``client`` (its budgets and
    usage are the question's), the ``rlm_query`` handler, and the observers of sub-calls and of
    requests (progress). A session's relay outlives its questions; each question gives it a
    route of its own in one call (:meth:`LMHandler.route_to`), never by attribute writes."""

    client: ModelClient
    on_rlm_query: RlmQueryHandler | None = None
    on_sub_call: SubCallObserver | None = None
    on_request: RequestObserver | None = None


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

    One thread per connection (at most :data:`MAX_CONNECTIONS`, or ``--max-concurrency`` when
    that is higher), so ``llm_query_batched`` runs
    concurrently (the client caps it at ``--max-concurrency``). The socket file lives in a
    private 0700 folder; use as a context manager or call ``close()``, which removes both. Who
    may ask what, and what is read from whom: see the module docstring.
    """

    #: Refusal sent to a worker's other threads while its ``rlm_query`` sub-RLM runs.
    WAITING = ("this REPL is waiting for its rlm_query (a sub-RLM is running); its other requests are refused "
               "until that returns: call rlm_query from one thread at a time")

    def __init__(self, client: ModelClient, *, on_rlm_query: RlmQueryHandler | None = None,
                 on_sub_call: SubCallObserver | None = None, on_request: RequestObserver | None = None) -> None:
        self.route = Route(client, on_rlm_query, on_sub_call, on_request)
        self._tokens: dict[str, _Registration] = {}
        self._lock = threading.Lock()
        # --max-concurrency above the cap is the user's own choice of a bound (a cluster's slots).
        slots = max(MAX_CONNECTIONS, int(getattr(client.settings, "max_concurrency", 0) or 0))
        self._slots = threading.BoundedSemaphore(slots)
        self._pending = 0
        self._closing = False
        #: Connections closed unread (peer not a worker) or at the hello (bad token, frame too large).
        self.refused = 0
        # rlm's pid in the name: a later rlm removes the folder if this one is killed (sandbox.reaper).
        # A folder whose socket path fits sun_path whatever TMPDIR is (rlm_cli.sockets).
        self.dir = private_socket_dir(f"rlm-lm-{os.getpid()}-")
        self.socket_path = str(self.dir / "lm.sock")
        handler = self

        class _Req(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                try:
                    handler._handle(self.request)
                finally:
                    handler._slots.release()

        class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True
            request_queue_size = max(128, 2 * slots)  # a whole batch connects at once

            def verify_request(self, request: Any, client_address: Any) -> bool:
                return handler._admitted(request)

            def process_request(self, request: Any, client_address: Any) -> None:
                while not handler._slots.acquire(timeout=0.05):  # the rest wait in the listen queue
                    if handler._closing:
                        self.shutdown_request(request)
                        return
                try:
                    super().process_request(request, client_address)
                except BaseException:
                    handler._slots.release()
                    raise

        old_umask = os.umask(0o177)  # the socket is made 0600, never briefly wider
        try:
            self._server = _Server(self.socket_path, _Req)
        finally:
            os.umask(old_umask)
        os.chmod(self.socket_path, 0o600)
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

    def route_to(self, route: Route) -> None:
        """Serve the requests of the next question with ``route`` (requests in progress finish
        with the route they started with)."""
        self.route = route

    @property
    def client(self) -> ModelClient:
        """The model client of the current route."""
        return self.route.client

    def recurses(self, depth: int) -> bool:
        """Whether an ``rlm_query`` from a worker at ``depth`` starts a sub-RLM (a loop at
        ``depth + 1`` below ``--max-depth``) rather than a plain sub-call."""
        return depth + 1 < self.client.settings.max_depth

    def close(self) -> None:
        """Stop serving and remove the socket and its folder."""
        self._closing = True
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

    def _admitted(self, conn: socket.socket) -> bool:
        """Whether the peer of a new connection is a registered worker or below it (read from the
        kernel, before anything is read from the connection); counts the refused ones."""
        pid = peer_pid(conn)
        with self._lock:
            owners = [reg.owner for reg in self._tokens.values() if reg.owner is not None]
        for owner in owners:
            try:
                root = owner()
            except Exception:  # noqa: BLE001 - a stopped worker has no pid
                root = None
            if pid is not None and root is not None and descends_from(pid, root):
                return True
        with self._lock:
            self.refused += 1
        return False

    @contextlib.contextmanager
    def _receiving(self, size: int) -> Iterator[None]:
        """Count ``size`` announced bytes against :data:`MAX_PENDING_BYTES` while a frame is read.

        Raises:
            ProtocolError: the frames being read would announce more than that together.
        """
        with self._lock:
            if self._pending + size > MAX_PENDING_BYTES:
                raise protocol.ProtocolError("the relay is receiving too much at once")
            self._pending += size
        try:
            yield
        finally:
            with self._lock:
                self._pending -= size

    def _read_request(self, conn: socket.socket) -> tuple[_Registration, dict[str, Any]] | None:
        """The hello and then the request of a connection, or ``None`` (closed unanswered)."""
        try:
            hello = protocol.recv_message(conn, protocol.MAX_HELLO_BYTES, time.monotonic() + HELLO_TIMEOUT_S)
        except (OSError, protocol.ProtocolError):
            with self._lock:
                self.refused += 1
            return None
        with self._lock:
            reg = self._tokens.get(str(hello.get("token", "")))
        if reg is None or not self._from_owner(conn, reg):
            with self._lock:
                self.refused += 1
            return None  # unknown, or used outside its own worker: close without a word
        kind = hello.get("type")
        cap = MAX_REQUEST_BYTES.get(kind) if isinstance(kind, str) else None
        if cap is None:
            return reg, {"type": kind}  # answered: unknown request type
        try:
            request = protocol.recv_message(conn, cap, time.monotonic() + REQUEST_READ_TIMEOUT_S,
                                            admit=self._receiving)
        except (OSError, protocol.ProtocolError):
            return None
        request["type"] = kind
        return reg, request

    def _handle(self, conn: socket.socket) -> None:
        got = self._read_request(conn)
        if got is None:
            return
        reg, request = got
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
            conn.settimeout(REPLY_SEND_TIMEOUT_S)
            protocol.send_message(conn, reply)
        except OSError:
            pass

    def _observe(self, stage: str, depth: int, request: dict[str, Any], reply: dict[str, Any] | None) -> None:
        on_request = self.route.on_request
        if on_request is not None:
            try:
                on_request(stage, depth, request, reply)
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
        route = self.route  # the whole request is served by the route it started with
        client = route.client
        if kind == "completion":
            try:
                messages = text_messages(request.get("prompt"))
            except ValueError as exc:
                return {"ok": False, "error": str(exc)}
            model = request.get("model") or client.settings.effective_sub_model
            assert model is not None
            allowed = client.allowed_models()
            if str(model) not in allowed:
                return {"ok": False, "error": f"model {model!r} is not available to code; omit model= or use one "
                                              f"of {sorted(allowed)}"}
            started = time.monotonic()
            result = client.complete(messages, model=str(model), role="sub", depth=depth + 1)
            if route.on_sub_call:
                route.on_sub_call({"depth": depth, "model": model, "prompt_chars": sum(
                    len(str(m.get("content", ""))) for m in messages), "answer_chars": len(result.text),
                    "input_tokens": result.record.input_tokens, "output_tokens": result.record.output_tokens,
                    "cost_usd": result.record.cost_usd, "latency_s": round(time.monotonic() - started, 3),
                    "cached": result.record.cached,
                    "response": result.text, "messages": messages})  # for trajectories and replay
            return {"ok": True, "text": result.text}
        if kind == "window":
            model = request.get("model") or client.settings.effective_sub_model
            if str(model) not in client.allowed_models():
                return {"ok": False, "error": f"model {model!r} is not available to code"}
            return {"ok": True, "text": json.dumps({"window": client.input_window(str(model)),
                                                    "reply": client.reply_cap(str(model))})}
        if kind == "rlm_query":
            if route.on_rlm_query is None:
                return {"ok": False, "error": "rlm_query is not available in this run"}
            ctx = request.get("context")
            text = route.on_rlm_query(str(request.get("prompt", "")), None if ctx is None else str(ctx), depth)
            return {"ok": True, "text": text}
        return {"ok": False, "error": f"unknown request type {kind!r}"}

def text_messages(prompt: Any) -> list[dict[str, str]]:
    """A sub-call's prompt as chat messages of text only: a string is one user message; a list
    of messages is rebuilt as ``{"role", "content"}`` with roles from :data:`ROLES` and text
    content (a list of ``text`` parts is joined). Nothing else reaches litellm.

    Raises:
        ValueError: a message that is not a dict, another role, or a part that is not text
            (``image_url``, ``file``...: litellm would fetch its URL outside the sandbox); the
            message is the error the model's code sees.
    """
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if not isinstance(prompt, list) or not prompt:
        return [{"role": "user", "content": "" if prompt is None else str(prompt)}]
    out: list[dict[str, str]] = []
    for n, message in enumerate(prompt, 1):
        if not isinstance(message, dict):
            raise ValueError(f"sub-call message {n} is a {type(message).__name__}, not a dict with role and content")
        role = message.get("role", "user")
        if role not in ROLES:
            raise ValueError(f"sub-call message {n} has role {str(role)[:40]!r}; use one of {', '.join(ROLES)}")
        extra = sorted(str(k)[:40] for k in message if k not in ("role", "content"))
        if extra:
            raise ValueError(f"sub-call message {n} has {', '.join(map(repr, extra))}; messages carry only role "
                             "and content")
        content = message.get("content")
        if isinstance(content, list):
            texts = []
            for part in content:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                if not (isinstance(part, dict) and kind == "text" and isinstance(part.get("text"), str)
                        and set(part) <= {"type", "text"}):
                    raise ValueError(f"sub-call message {n} has a part of type {str(kind)[:40]!r}; sub-calls carry "
                                     "text only (no images, files, audio or URLs to fetch)")
                texts.append(part["text"])
            content = "\n".join(texts)
        elif content is None:
            content = ""
        elif not isinstance(content, str):
            raise ValueError(f"sub-call message {n} has content of type {type(content).__name__}; give text")
        out.append({"role": str(role), "content": content})
    return out


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
