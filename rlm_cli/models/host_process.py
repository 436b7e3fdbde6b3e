"""The model host process itself (the parent's side is ``models.host.HostBackend``; the
protocol is in that module's docstring, sharing in ``models.shared``).

Started as ``python -c "...main()" SOCKET_PATH [--fd N]``: with ``--fd`` it serves the
listening socket the parent bound and passed down (a shared host), else it binds
``SOCKET_PATH`` itself (a host of one command). Its first stdin frame is the config:
``{"type": "config", "token", "parent", "shared": null | {"socket", "token", "lock", "log",
"idle"}}``.

Lifetime: a host of one command exits when its stdin closes (the parent is done or gone). A
shared host then stays while any command leases it (an open ``lease`` connection) or a request
runs, and exits once it has been unused for ``idle`` seconds, at once if no command got past its
arguments (one that failed on them leaves nothing behind: it never named its models), could not
import litellm, or was asked to ``stop``. A command answered wholly from the response cache sends
no model request, and may ask nothing at all (its windows given): it named its models, so the
host stays for the next command.
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
import shutil
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlm_cli import protocol
from rlm_cli.errors import UsageError
from rlm_cli.models.backend import LocalBackend
from rlm_cli.models.direct import DirectLane, HandOver
from rlm_cli.models.failures import describe_error

#: Operations answered before litellm is imported (they never wait for it).
_AT_ONCE = frozenset({"lease", "status", "stop", "models"})


def _peer(conn: socket.socket) -> tuple[int | None, int | None]:
    """``(pid, uid)`` of the process on the other end of a Unix socket (``SO_PEERCRED``), each
    ``None`` where the platform does not say."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None, None
    try:
        size = struct.calcsize("3i")
        pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, size))
    except (OSError, struct.error):
        return None, None
    return (pid if pid > 0 else None), uid


class _Host:
    """The host's state: the token, who may connect, litellm (once imported) and its failure,
    and for a shared host the counts its idle exit depends on."""

    def __init__(self, token: str, parent: int, shared: dict[str, Any] | None) -> None:
        self.token = token
        self.parent = parent
        self.shared = shared
        self.backend = LocalBackend()
        #: litellm imported (or failed to be: ``failure``): every request that needs it waits for this.
        self.ready = threading.Event()
        #: Something needs litellm (``need_litellm``): the host imports it then, not before.
        self.needed = threading.Event()
        #: The openai SDK for the first requests to a self-hosted model while litellm imports (``models.direct``).
        self.lane = DirectLane(self._litellm)
        #: The parent has asked for something: it is waiting on the host, so a warm-up would only
        #: compete with its request for this process's interpreter (see :func:`main`).
        self.asked = threading.Event()
        self.failure: str | None = None
        self.started = time.monotonic()
        self.state = threading.Condition()
        self.spawner_open = True
        self.leases = 0
        self.active: set[socket.socket] = set()
        #: Model requests received (``rlm host status``).
        self.requests = 0
        #: What shows the host is wanted: requests received (counted as they arrive), a command that
        #: named its models (``warm``: it got past its arguments), ``rlm host start`` (``keep``). A
        #: shared host that has none leaves at once.
        self.served = 0
        self.stopping = False
        self.closing = False
        self.last = time.monotonic()

    def allowed(self, conn: socket.socket, request: dict[str, Any]) -> bool:
        """The request carries the token and comes from the parent (a host of one command) or
        from this user (a shared host), where the kernel says who is on the other end."""
        if request.get("token") != self.token:
            return False
        pid, uid = _peer(conn)
        if self.shared is not None:
            return uid is None or uid == os.geteuid()
        return pid is None or pid == self.parent

    def serve(self, conn: socket.socket) -> None:
        """Answer one connection (see ``models.host``'s docstring)."""
        try:
            request = protocol.recv_message(conn)
        except (OSError, protocol.ProtocolError):
            return
        if not self.allowed(conn, request):
            return  # close without a word
        op = request.get("op")
        if op in _AT_ONCE:
            self._at_once(conn, str(op), request)
            return
        self.asked.set()
        with self.state:  # counted now, not once answered: the command may read the reply and end at once,
            self.active.add(conn)  # and a shared host that had served nothing would then leave at once
            self.requests += op == "complete"
            self.served += 1
        try:
            try:
                reply = self._early(conn, request)
                if reply is None:
                    self.need_litellm()
                    reply = self._answer(conn, request)
            except _Gone:
                return
            with contextlib.suppress(OSError):
                protocol.send_message(conn, reply)
        finally:
            with self.state:
                self.active.discard(conn)
                self.last = time.monotonic()
                self.state.notify_all()

    def _at_once(self, conn: socket.socket, op: str, request: dict[str, Any]) -> None:
        if op == "status":
            with self.state:
                status = {"ok": True, "pid": os.getpid(), "age_s": round(time.monotonic() - self.started, 1),
                          "idle_s": 0.0 if self._waited_on() or self.leases or self.spawner_open
                          else round(time.monotonic() - self.last, 1),
                          "idle_limit_s": (self.shared or {}).get("idle"), "leases": self.leases + self.spawner_open,
                          "requests": self.requests, "cwd": os.getcwd(), "stopping": self.stopping,
                          "litellm": ("failed" if self.failure is not None else "imported" if self.ready.is_set()
                                      else "importing" if self.needed.is_set() else "not needed yet")}
            with contextlib.suppress(OSError):
                protocol.send_message(conn, status)
            return
        if op == "models":  # a command that leased this host names its models (``need_models``)
            self.need_models([str(m) for m in request.get("models") or []])
            with contextlib.suppress(OSError):
                protocol.send_message(conn, {"ok": True})
            return
        if op == "stop":
            with self.state:
                self.stopping = True
                self.state.notify_all()
            with contextlib.suppress(OSError):
                protocol.send_message(conn, {"ok": True, "pid": os.getpid()})
            return
        with self.state:  # lease: held until the command closes the connection
            if self.closing or self.stopping or self.shared is None:
                ok = False
            else:
                ok = True
                self.leases += 1
                idle = request.get("idle")
                if isinstance(idle, (int, float)) and 0 < idle <= 86400:
                    self.shared["idle"] = float(idle)  # the latest command's RLM_HOST_IDLE
        try:
            protocol.send_message(conn, {"ok": ok, "pid": os.getpid()})
            if ok:
                while conn.recv(4096):
                    pass
        except OSError:
            pass
        finally:
            if ok:
                with self.state:
                    self.leases -= 1
                    self.last = time.monotonic()
                    self.state.notify_all()

    def need_models(self, models: list[str]) -> None:
        """Have litellm imported at once when a command's ``models`` include one the direct lane
        cannot serve (its import then overlaps the command's loading, as it did before the lane)."""
        self.lane.ready.wait()
        if not all(self.lane.knows(m) for m in models):
            self.needed.set()

    def need_litellm(self) -> None:
        """Have litellm imported (the host's main thread does it once asked) and wait until it is."""
        self.needed.set()
        self.ready.wait()

    def _litellm(self) -> Any:
        """The litellm module, once imported (waits for it).

        Raises:
            _Unavailable: litellm could not be imported (``failure``).
        """
        self.need_litellm()
        if self.failure is not None:
            raise _Unavailable(self.failure)
        return self.backend.load()

    def _early(self, conn: socket.socket, request: dict[str, Any]) -> dict[str, Any] | None:
        """The direct lane's reply to a ``facts`` or ``complete`` op that arrives before litellm is
        imported (``models.direct``), or ``None``: the op waits for litellm (it is imported, the
        lane does not take the request, or handed it over)."""
        op = request.get("op")
        if op not in ("facts", "complete") or self.ready.is_set():
            return None
        self.lane.ready.wait()
        if self.ready.is_set():
            return None
        if op == "facts":
            got = self.lane.facts(str(request.get("model")))
            return None if got is None else {"ok": True, "facts": list(got)}
        sent = request.get("request")
        if not isinstance(sent, dict) or not self.lane.takes(sent, request.get("router_config")):
            return None
        left = request.get("deadline_in")
        try:
            answer = self.lane.complete(sent, stream=bool(request.get("stream")), on_piece=_forward(conn),
                                        deadline=None if left is None else time.monotonic() + float(left))
        except HandOver:
            return None
        except _Unavailable:  # the lane needed litellm (to map a failure, to count tokens) and it is broken
            return {"ok": False, "unavailable": self.failure}
        except _Gone:
            raise
        except Exception as exc:  # noqa: BLE001 - a timeout, a stream broken after its text: the parent's policy
            return {"ok": False, "error": describe_error(exc)}
        return {"ok": True, "answer": answer.to_dict()}

    def _answer(self, conn: socket.socket, request: dict[str, Any]) -> dict[str, Any]:
        if self.failure is not None:
            return {"ok": False, "unavailable": self.failure}
        op = request.get("op")
        try:
            if op == "facts":
                return {"ok": True, "facts": list(self.backend.facts(str(request.get("model"))))}
            if op == "prices":
                got = self.backend.prices(str(request.get("model")))
                return {"ok": True, "prices": None if got is None else list(got)}
            if op == "keys":
                from rlm_cli.models import detect

                return {"ok": True, "missing": detect.missing_keys(self.backend.load(), str(request.get("model")))}
            if op == "router":
                groups = self.backend.router_groups(request.get("router_config"), scope=request.get("scope"))
                return {"ok": True, "groups": groups}
            if op != "complete":
                return {"ok": False, "error": {"names": ["ValueError"], "message": f"unknown op {op!r}"}}

            left = request.get("deadline_in")
            answer = self.backend.complete(request["request"], router_config=request.get("router_config"),
                                           stream=bool(request.get("stream")), on_piece=_forward(conn),
                                           deadline=None if left is None else time.monotonic() + float(left),
                                           scope=request.get("scope"))
            return {"ok": True, "answer": answer.to_dict()}
        except _Gone:
            raise
        except UsageError as exc:
            return {"ok": False, "usage": exc.message}
        except Exception as exc:  # noqa: BLE001 - every provider error goes back to the parent's policy
            return {"ok": False, "error": describe_error(exc)}

    # -- a shared host's exit ----------------------------------------------------------------------
    def _waited_on(self) -> bool:
        """Whether a command still waits for a request in progress: one that closed its
        connection (Ctrl-C, killed) does not keep a shared host from leaving, though litellm
        cannot be stopped mid-request. Call with ``state`` held."""
        for conn in self.active:
            try:
                ready, _, _ = select.select([conn], [], [], 0)
                if not ready or conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                    return True  # open (a command sends nothing after its request)
            except BlockingIOError:
                return True
            except OSError:
                continue
        return False

    def _unused_for(self) -> float | None:
        """Seconds left before an unused shared host should exit (``0``: now), or ``None`` while
        it is in use. Call with ``state`` held."""
        if self.spawner_open or self.leases or self._waited_on():
            return None
        if self.stopping or self.failure is not None or not self.served:
            return 0.0
        idle = float((self.shared or {}).get("idle") or 0)
        return max(0.0, idle - (time.monotonic() - self.last))

    def wait_to_leave(self) -> None:
        """Return once this shared host should exit, with the socket and token removed (if
        still its own) under the lock, so no command leases it meanwhile."""
        from rlm_cli.models.shared import HostFiles, locked, remove

        assert self.shared is not None
        files = HostFiles(*(Path(self.shared[k]) for k in ("socket", "token", "lock", "log")))
        try:
            mine = os.stat(files.socket).st_ino
        except OSError:
            mine = None
        while True:
            with self.state:
                left = self._unused_for()
                while left is None or left > 0:
                    # Requests in progress are checked every 2 s: a command that went away
                    # (Ctrl-C) does not notify.
                    self.state.wait(timeout=2.0 if left is None and self.active else left)
                    left = self._unused_for()
            with locked(files), self.state:
                if self._unused_for() != 0:
                    continue  # leased meanwhile
                self.closing = True
                remove(files, token=self.token, inode=mine if mine is not None else -1)
                return

    def terminate(self) -> None:
        """SIGTERM of a shared host (``kill``, a service manager): remove its socket and token (if
        still its own, under the lock, as an idle exit does) and exit; requests in progress are
        dropped. Runs in a thread of its own: the signal handler only starts it."""
        from rlm_cli.models.shared import HostFiles, locked, remove

        assert self.shared is not None
        files = HostFiles(*(Path(self.shared[k]) for k in ("socket", "token", "lock", "log")))
        try:
            with locked(files):
                remove(files, token=self.token)  # not if a newer host's token is there
        except OSError:
            pass  # the folder is gone: nothing of ours to remove
        os._exit(0)


class _Unavailable(Exception):
    """litellm could not be imported in this host (the lane needed it)."""


class _Gone(Exception):
    """The parent closed the connection while a reply was being streamed."""


def _forward(conn: socket.socket) -> Callable[[str], None]:
    """Send each streamed piece of a reply to the parent; raises ``_Gone`` once it stopped listening
    (Ctrl-C), which stops reading the stream."""
    def on_piece(text: str) -> None:
        try:
            protocol.send_message(conn, {"piece": text})
        except OSError:
            raise _Gone() from None
    return on_piece


def _read_control(host: _Host, host_dir: Path, warm: queue.Queue[list[str]]) -> None:
    """Read the parent's control frames from stdin. At end of file a host of one command removes
    its socket's folder and exits at once; a shared host is told its spawner is gone."""
    while True:
        try:
            msg = protocol.read_message_fd(0)
        except (OSError, protocol.ProtocolError):
            if host.shared is None:
                shutil.rmtree(host_dir, ignore_errors=True)
                os._exit(0)
            with host.state:
                host.spawner_open = False
                host.last = time.monotonic()
                host.state.notify_all()
            return
        if msg.get("type") == "warm":
            models = [str(m) for m in msg.get("models") or []]
            with host.state:  # the command got past its arguments: the host is wanted, asked or not
                host.served += 1  # (a run answered wholly from the response cache asks it nothing)
                host.state.notify_all()
            host.need_models(models)
            warm.put(models)
        elif msg.get("type") == "keep":  # rlm host start: wanted, though asked nothing yet, and litellm with it
            host.needed.set()
            with host.state:
                host.served += 1
                host.state.notify_all()


def main() -> None:
    """Entry point of the host process (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the parent
    path = sys.argv[1]
    inherited = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--fd" else None
    try:
        config = protocol.read_message_fd(0)
    except (OSError, protocol.ProtocolError):
        os._exit(0)
    shared = config.get("shared") if inherited is not None else None
    if shared is not None and not shared.get("cwd"):
        os.chdir("/")  # keeps no folder busy; the environment names no file by a relative path
    host = _Host(str(config.get("token")), int(config.get("parent") or os.getppid()), shared)

    class _Req(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            host.serve(self.request)

    class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True
        request_queue_size = 128

    if inherited is None:
        server = _Server(path, _Req)
        os.chmod(path, 0o600)
    else:
        server = _Server(path, _Req, bind_and_activate=False)
        server.socket.close()
        server.socket = socket.socket(fileno=inherited)
    threading.Thread(target=server.serve_forever, name="host-server", daemon=True).start()
    warm: queue.Queue[list[str]] = queue.Queue()
    threading.Thread(target=_read_control, args=(host, Path(path).parent, warm), name="host-control",
                     daemon=True).start()
    if shared is not None:
        def leave() -> None:
            host.wait_to_leave()
            os._exit(0)

        threading.Thread(target=leave, name="host-idle", daemon=True).start()
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=host.terminate, name="host-term",
                                                                  daemon=True).start())
    host.lane.load()  # the openai SDK (part of litellm's import anyway): the lane opens in under a second
    host.needed.wait()  # litellm only once something needs it (``models.direct``): a model the lane cannot serve
    try:
        host.backend.load()
    except Exception as exc:  # noqa: BLE001 - reported to every request
        host.failure = f"{type(exc).__name__}: {exc}"
    with host.state:
        host.state.notify_all()  # a failed import means a shared host leaves once unused
    host.ready.set()
    # Warm-ups, one after another, while the parent is still busy elsewhere (a cold corpus load):
    # once it has asked for anything, its first real request runs the same first-call path
    # itself, and a warm-up beside it would slow it down (one interpreter lock).
    while True:
        models = warm.get()
        if host.failure is None and not host.asked.is_set():
            host.backend.warm(models)
