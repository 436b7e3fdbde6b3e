"""The model host: litellm in its own process, started first, so that its import (about 3 s on a
quiet machine, more on a busy one) runs beside loading the corpus and starting the REPL worker
instead of before them.

``rlm ask`` and ``rlm chat`` start it as the first thing they do (:class:`HostBackend`); the
process imports litellm at once, then, when told which models the run uses (``warm``) and as
long as the parent has asked for nothing yet, runs litellm's first-call path for each without a
request (``backend.LocalBackend.warm``), and serves model requests for ``ModelClient`` until the
parent goes away. Everything else of the model layer
(budgets, retries, the response cache, concurrency, usage, the worker's relay) stays in the
parent: the host only sends requests and prices replies. The parent never imports litellm, so it
also exits without tearing litellm's millions of objects down; the host ends with ``os._exit``.

Channels:

* **stdin** (a pipe from the parent, ``rlm_cli.protocol`` frames): first ``{"type": "config",
  "token", "parent"}``, then any number of ``{"type": "warm", "models": [...]}``. End of file
  (the parent closed it, exited or was killed) makes the host remove its socket and exit at once,
  so it never outlives the parent.
* **a Unix socket** in a private 0700 folder the parent made, one request per connection: the
  parent sends ``{"token", "op", ...}`` with ``op`` one of ``complete`` (``request``,
  ``router_config``, ``stream``, ``deadline_in``: seconds left before ``--timeout``), ``facts``
  (``model``) or ``router`` (``router_config``). A ``complete`` reply is zero or more
  ``{"piece": text}`` frames (streamed text as it arrives), then ``{"ok": true, "answer": {...}}``
  (``backend.Answer``) or ``{"ok": false, "error": {names, status, message, headers}}`` (a
  provider error, raised by the parent as ``RemoteCallError``), ``{"ok": false, "usage": msg}``
  (a bad ``--router-config``) or ``{"ok": false, "unavailable": msg}`` (litellm failed to import).
  A connection is served only when it carries the token and, where the kernel says who is on the
  other end (``SO_PEERCRED``), comes from the parent process itself: the REPL worker can reach
  neither the folder (another user, or Landlock) nor, through it, the provider.

Closing the connection (Ctrl-C in the parent) stops reading a stream; the provider's reply is
dropped.
"""

from __future__ import annotations

import os
import queue
import secrets
import shutil
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

from rlm_cli import protocol
from rlm_cli.errors import RLMError, UsageError
from rlm_cli.models.backend import Answer, LocalBackend, OnPiece
from rlm_cli.models.failures import RemoteCallError, describe_error

#: Seconds the parent waits for the host's socket to appear (its interpreter starting).
START_TIMEOUT_S = 60.0
_PKG_PARENT = str(Path(__file__).resolve().parent.parent)


class HostUnavailable(RLMError):
    """The model host process died or could not import litellm (exit 1: a broken install)."""


class HostBackend:
    """The parent's side of the model host: starts the process at once (``__init__``) and sends
    it requests; the same interface as ``LocalBackend`` (``complete``, ``facts``,
    ``router_groups``). Thread-safe: one connection per request. ``close()`` ends the process."""

    def __init__(self, *, warm: list[str] | None = None) -> None:
        self.started = time.monotonic()
        self.dir = Path(tempfile.mkdtemp(prefix="rlm-host-"))  # 0700: only this user may enter
        self.socket_path = str(self.dir / "host.sock")
        self._token = secrets.token_hex(16)
        self._err: IO[bytes] = open(self.dir / "host.err", "w+b")  # noqa: SIM115 - read on failure, closed in close()
        boot = (f"import sys; sys.path.insert(0, {_PKG_PARENT!r}); "
                "from rlm_cli.models.host import main; main()")
        self.proc = subprocess.Popen([sys.executable, "-c", boot, self.socket_path], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=self._err, start_new_session=True)
        self._stdin_lock = threading.Lock()
        self._send_control({"type": "config", "token": self._token, "parent": os.getpid()})
        self._up = False
        self._facts: dict[str, tuple[int | None, bool]] = {}
        self._routers: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        if warm:
            self.warm(warm)

    # -- lifecycle -----------------------------------------------------------------------------------
    def warm(self, models: list[str]) -> None:
        """Ask the host to run litellm's first-call path for ``models`` once litellm is imported
        (no request is sent; see ``LocalBackend.warm``). Returns at once."""
        self._send_control({"type": "warm", "models": [m for m in models if m]})

    def _send_control(self, message: dict[str, Any]) -> None:
        with self._stdin_lock:
            stdin = self.proc.stdin
            if stdin is None or stdin.closed:
                return
            try:
                protocol.write_message_fd(stdin.fileno(), message)
            except OSError:  # the host is gone; the next request says so
                pass

    def close(self) -> None:
        """End the host (closing its stdin ends it at once), reap it and remove its folder."""
        with self._stdin_lock:
            if self.proc.stdin is not None and not self.proc.stdin.closed:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._err.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> HostBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests --------------------------------------------------------------------------------------
    def complete(self, request: dict[str, Any], *, router_config: str | Path | None = None, stream: bool = False,
                 on_piece: OnPiece | None = None, deadline: float | None = None) -> Answer:
        """One chat completion in the host (see ``LocalBackend.complete``); streamed pieces reach
        ``on_piece`` as the host reads them.

        Raises:
            RemoteCallError: the provider or litellm failed (classified like litellm's errors).
            UsageError: the Router file is invalid.
            HostUnavailable: the host died or cannot import litellm.
        """
        message = {"op": "complete", "request": request, "stream": stream,
                   "router_config": None if router_config is None else str(router_config),
                   "deadline_in": None if deadline is None else deadline - time.monotonic()}
        with self._connect() as conn:
            protocol.send_message(conn, {"token": self._token, **message})
            while True:
                reply = self._receive(conn)
                if "piece" in reply:
                    if on_piece is not None:
                        on_piece(str(reply["piece"]))
                    continue
                return Answer.from_dict(self._result(reply)["answer"])

    def facts(self, model: str) -> tuple[int | None, bool]:
        """``(input window or None, price known)`` from litellm's map, in the host (cached)."""
        with self._lock:
            known = self._facts.get(model)
        if known is None:
            window, priced = self._call({"op": "facts", "model": model})["facts"]
            known = (None if window is None else int(window), bool(priced))
            with self._lock:
                self._facts[model] = known
        return known

    def router_groups(self, router_config: str | Path | None) -> dict[str, str]:
        """The Router's ``{model group: first deployment's model}``, built in the host.

        Raises:
            UsageError: the Router file is unreadable or invalid.
        """
        if not router_config:
            return {}
        key = str(router_config)
        with self._lock:
            known = self._routers.get(key)
        if known is None:
            known = {str(k): str(v) for k, v in self._call({"op": "router", "router_config": key})["groups"].items()}
            with self._lock:
                self._routers[key] = known
        return known

    def _call(self, message: dict[str, Any]) -> dict[str, Any]:
        with self._connect() as conn:
            protocol.send_message(conn, {"token": self._token, **message})
            return self._result(self._receive(conn))

    def _connect(self) -> socket.socket:
        """A connection to the host, waiting for its socket while it starts.

        Raises:
            HostUnavailable: the host exited, or its socket did not appear in time.
        """
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.connect(self.socket_path)
                self._up = True
                return conn
            except (FileNotFoundError, ConnectionRefusedError):
                conn.close()
                if self._up or self.proc.poll() is not None or time.monotonic() > deadline:
                    raise self._died() from None
                time.sleep(0.005)
            except BaseException:
                conn.close()
                raise

    def _receive(self, conn: socket.socket) -> dict[str, Any]:
        try:
            return protocol.recv_message(conn)
        except (OSError, protocol.ProtocolError):
            raise self._died() from None

    def _result(self, reply: dict[str, Any]) -> dict[str, Any]:
        if reply.get("ok"):
            return reply
        if "usage" in reply:
            raise UsageError(str(reply["usage"]))
        if "unavailable" in reply:
            raise HostUnavailable(f"the model host cannot use litellm: {reply['unavailable']}",
                                  hint="reinstall rlm's dependencies (pip install litellm)")
        err = reply.get("error") or {}
        raise RemoteCallError(str(err.get("message", "unknown error")), class_names=list(err.get("names") or []),
                              status_code=err.get("status"), headers=err.get("headers") or {})

    def _died(self) -> HostUnavailable:
        """The error for a host that went away, with the last line it wrote on stderr."""
        try:
            code = self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            code = None
        try:
            self._err.seek(0)
            tail = self._err.read().decode("utf-8", "replace").strip().splitlines()
        except (OSError, ValueError):
            tail = []
        how = "is not answering" if code is None else f"exited with status {code}"
        return HostUnavailable(f"the model host process {how}" + (f": {tail[-1][:300]}" if tail else ""),
                               hint="rerun with --debug; if it repeats, report it")


# -- the host process --------------------------------------------------------------------------------

def _peer_pid(conn: socket.socket) -> int | None:
    """The pid of the process on the other end of a Unix socket (``SO_PEERCRED``), or ``None``
    where the platform does not say."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    try:
        size = struct.calcsize("3i")
        pid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, size))[0]
    except (OSError, struct.error):
        return None
    return pid if pid > 0 else None


class _Host:
    """The host's state: the token, the parent's pid, litellm (once imported) and its failure."""

    def __init__(self, token: str, parent: int) -> None:
        self.token = token
        self.parent = parent
        self.backend = LocalBackend()
        self.ready = threading.Event()
        #: The parent has asked for something: it is waiting on the host, so a warm-up would only
        #: compete with its request for this process's interpreter (see :func:`main`).
        self.asked = threading.Event()
        self.failure: str | None = None

    def serve(self, conn: socket.socket) -> None:
        """Answer one connection (see the module docstring)."""
        try:
            request = protocol.recv_message(conn)
        except (OSError, protocol.ProtocolError):
            return
        peer = _peer_pid(conn)
        if request.get("token") != self.token or (peer is not None and peer != self.parent):
            return  # not the parent: close without a word
        self.asked.set()
        self.ready.wait()
        try:
            reply = self._answer(conn, request)
        except _Gone:
            return
        try:
            protocol.send_message(conn, reply)
        except OSError:
            pass

    def _answer(self, conn: socket.socket, request: dict[str, Any]) -> dict[str, Any]:
        if self.failure is not None:
            return {"ok": False, "unavailable": self.failure}
        op = request.get("op")
        try:
            if op == "facts":
                return {"ok": True, "facts": list(self.backend.facts(str(request.get("model"))))}
            if op == "router":
                return {"ok": True, "groups": self.backend.router_groups(request.get("router_config"))}
            if op != "complete":
                return {"ok": False, "error": {"names": ["ValueError"], "message": f"unknown op {op!r}"}}

            def on_piece(text: str) -> None:
                try:
                    protocol.send_message(conn, {"piece": text})
                except OSError:
                    raise _Gone() from None  # the parent stopped listening (Ctrl-C): stop reading

            left = request.get("deadline_in")
            answer = self.backend.complete(request["request"], router_config=request.get("router_config"),
                                           stream=bool(request.get("stream")), on_piece=on_piece,
                                           deadline=None if left is None else time.monotonic() + float(left))
            return {"ok": True, "answer": answer.to_dict()}
        except _Gone:
            raise
        except UsageError as exc:
            return {"ok": False, "usage": exc.message}
        except Exception as exc:  # noqa: BLE001 - every provider error goes back to the parent's policy
            return {"ok": False, "error": describe_error(exc)}


class _Gone(Exception):
    """The parent closed the connection while a reply was being streamed."""


def _read_control(host_dir: Path, warm: queue.Queue[list[str]]) -> None:
    """Read the parent's control frames from stdin; at end of file remove the socket's folder
    and exit at once (the parent is gone or done)."""
    while True:
        try:
            msg = protocol.read_message_fd(0)
        except (OSError, protocol.ProtocolError):
            shutil.rmtree(host_dir, ignore_errors=True)
            os._exit(0)
        if msg.get("type") == "warm":
            warm.put([str(m) for m in msg.get("models") or []])


def main() -> None:
    """Entry point of the host process: ``python -c ... SOCKET_PATH`` (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the parent
    path = sys.argv[1]
    try:
        config = protocol.read_message_fd(0)
    except (OSError, protocol.ProtocolError):
        os._exit(0)
    host = _Host(str(config.get("token")), int(config.get("parent") or os.getppid()))

    class _Req(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            host.serve(self.request)

    class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True
        request_queue_size = 128

    server = _Server(path, _Req)
    os.chmod(path, 0o600)
    threading.Thread(target=server.serve_forever, name="host-server", daemon=True).start()
    warm: queue.Queue[list[str]] = queue.Queue()
    threading.Thread(target=_read_control, args=(Path(path).parent, warm), name="host-control", daemon=True).start()
    try:
        host.backend.load()
    except Exception as exc:  # noqa: BLE001 - reported to every request
        host.failure = f"{type(exc).__name__}: {exc}"
    host.ready.set()
    # Warm-ups, one after another, until stdin closes (the control thread exits then). A warm-up
    # helps only while the parent is still busy (a cold corpus load): once it has asked for
    # anything, its first real request runs the same first-call path itself, and a warm-up beside
    # it would slow it down (one interpreter lock), so none is started any more.
    while True:
        models = warm.get()
        if host.failure is None and not host.asked.is_set():  # only while the parent is busy elsewhere
            host.backend.warm(models)
