"""The model host: litellm in its own process, started first, so that its import (about 3 s on a
quiet machine, more on a busy one) runs beside loading the corpus and starting the REPL worker
instead of before them.

``rlm ask`` and ``rlm chat`` start it as the first thing they do (:class:`HostBackend`); the
process imports the openai SDK (under a second), then litellm once something needs it: at once
when told which models the run uses (``warm``, or ``models`` from a command that leased it) and
one of them is not a self-hosted ``openai/`` model, else when a request needs it. Until then the
*direct lane* (``models.direct``) sends a self-hosted model's requests with the SDK, as litellm
would, so that a session's first command does not wait for litellm's import. Once litellm is
in and as long as the parent has asked for nothing yet, the host runs litellm's first-call path
for each model without a request (``backend.LocalBackend.warm``), and serves model requests for
``ModelClient``. By
default the host is *shared* (``models.shared``): a later command with the same user and
environment leases the running host instead of starting one, so it pays no litellm import at
all; the host exits once unused for ``RLM_HOST_IDLE`` seconds (default 300). With
``RLM_HOST_IDLE=0`` each command has a host of its own that ends with it. Everything else of the
model layer
(budgets, retries, the response cache, concurrency, usage, the worker's relay) stays in the
parent: the host only sends requests and prices replies. The parent never imports litellm, so it
also exits without tearing litellm's millions of objects down; the host ends with ``os._exit``.

Channels:

* **stdin** (a pipe from the parent that started it, ``rlm_cli.protocol`` frames): first
  ``{"type": "config", "token", "parent", "shared"}``, then any number of ``{"type": "warm",
  "models": [...]}`` and ``{"type": "keep"}`` (a shared host stays its idle period though it
  answered nothing: ``rlm host start``). End of file (the parent closed it, exited or was
  killed) makes a host of one command remove its socket and exit at once, so it never outlives
  its parent; a shared host then follows its idle rule (``models.host_process``).
* **a Unix socket** in a private 0700 folder (the parent's temporary one, or the user's runtime
  folder for a shared host), one request per connection: the
  parent sends ``{"token", "op", ...}`` with ``op`` one of ``complete`` (``request``,
  ``router_config``, ``stream``, ``deadline_in``: seconds left before the reply must be whole,
  ``scope``: the command, which has a Router of its own), ``facts`` (``model``), ``prices``
  (``model``), ``keys`` (``model``: the variables litellm says it lacks) or ``router``
  (``router_config``, ``scope``). A ``complete`` reply is zero or more
  ``{"piece": text}`` frames (streamed text as it arrives), then ``{"ok": true, "answer": {...}}``
  (``backend.Answer``) or ``{"ok": false, "error": {names, status, message, headers}}`` (a
  provider error, raised by the parent as ``RemoteCallError``), ``{"ok": false, "usage": msg}``
  (a bad ``--router-config``) or ``{"ok": false, "unavailable": msg}`` (litellm failed to import).
  Besides, ``lease`` (held open while a command uses a shared host), ``models`` (a command
  that leased the host names the models it uses), ``status`` and ``stop`` (``rlm host``). A
  connection is served only when it carries the token and, where the kernel says who is on the
  other end (``SO_PEERCRED``), comes from the parent process itself (a host of one command) or
  from this user (a shared host): the REPL worker can reach neither the folder
  (another user, or Landlock) nor the token, nor, through them, the provider.

Closing the connection (Ctrl-C in the parent) stops reading a stream; the provider's reply is
dropped.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from rlm_cli import protocol
from rlm_cli.errors import RLMError, UsageError
from rlm_cli.models import shared as shared_hosts
from rlm_cli.models.backend import Answer, OnPiece
from rlm_cli.models.failures import RemoteCallError
from rlm_cli.sockets import private_socket_dir

#: Seconds the parent waits for the host's socket to appear (its interpreter starting).
START_TIMEOUT_S = 60.0
_PKG_PARENT = str(Path(__file__).resolve().parent.parent.parent)  # the folder holding rlm_cli/


class HostUnavailable(RLMError):
    """The model host process died or could not import litellm (exit 1: a broken install)."""


class HostBackend:
    """The parent's side of the model host: finds or starts the process at once (``__init__``)
    and sends it requests; the same interface as ``LocalBackend`` (``complete``, ``facts``,
    ``router_groups``). Thread-safe: one connection per request. ``close()`` lets it go.

    ``shared``: lease or start the shared host of this command's key (``models.shared``); the
    default follows ``RLM_HOST_IDLE`` (shared unless it is 0). ``reused`` says whether a running
    host was leased (its litellm already imported) rather than started.

    Raises:
        UsageError: ``RLM_HOST_IDLE`` is invalid.
    """

    def __init__(self, *, warm: list[str] | None = None, shared: bool | None = None) -> None:
        self.started = time.monotonic()
        self._token = secrets.token_hex(16)
        #: This command among those a shared host serves (each has a Router of its own).
        self._scope = secrets.token_hex(8)
        self._stdin_lock = threading.Lock()
        self._up = False
        self._facts: dict[str, tuple[int | None, bool]] = {}
        self._prices: dict[str, tuple[float, float] | None] = {}
        self._routers: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.reused = False
        self._lease: socket.socket | None = None
        self._files: shared_hosts.HostFiles | None = None
        self._cwd: str | None = None
        self.pid = 0
        self._err: IO[bytes]
        plan = shared_hosts.for_this_command() if shared is not False else shared_hosts.Sharing(None, "not asked")
        #: One line for ``-v``: how this command got its model host.
        self.sharing = plan.why
        if plan.files is None or not self._share(plan):
            self._files = None
            self.dir = private_socket_dir("rlm-host-")  # 0700: only this user may enter
            self.socket_path = str(self.dir / "host.sock")
            self._err = open(self.dir / "host.err", "w+b")  # noqa: SIM115 - read on failure, closed in close()
            self._spawn([self.socket_path], None)
            self.pid = self.proc.pid if self.proc is not None else 0
            if not self.sharing.startswith("a host"):
                self.sharing = f"a host of this command only ({self.sharing})"
        if warm and not self.reused:
            self.warm(warm)
        elif warm:  # a leased host: it imports litellm now if the lane cannot serve these models
            with contextlib.suppress(RLMError, RemoteCallError, OSError, protocol.ProtocolError):
                self._call({"op": "models", "models": list(warm)})

    def _spawn(self, args: list[str], listener: socket.socket | None) -> None:
        boot = (f"import sys; sys.path.insert(0, {_PKG_PARENT!r}); "
                "from rlm_cli.models.host_process import main; main()")
        fds = () if listener is None else (listener.fileno(),)
        self.proc = subprocess.Popen([sys.executable, "-c", boot, *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=self._err, start_new_session=True,
                                     pass_fds=fds)
        shared = None
        if self._files is not None:
            shared = {**self._files.to_dict(), "idle": shared_hosts.idle_seconds(), "cwd": self._cwd}
        self._send_control({"type": "config", "token": self._token, "parent": os.getpid(), "shared": shared})

    def _share(self, plan: shared_hosts.Sharing) -> bool:
        """Lease the running shared host of ``plan``, or start it on a socket bound here.
        ``False`` when a host is there but will not lease (the caller starts a host of its own)."""
        files = plan.files
        assert files is not None
        self._files = files
        self._cwd = plan.cwd
        self.dir = files.socket.parent
        self.socket_path = str(files.socket)
        with shared_hosts.locked(files):
            try:
                leased = shared_hosts.lease(files, shared_hosts.idle_seconds())
            except OSError as exc:
                self.sharing = f"a host of its own ({exc})"
                return False
            if leased is not None:
                self._lease, self._token, self.pid = leased.conn, leased.token, leased.pid
                self.reused = self._up = True
                self.sharing = f"shared, leased (pid {self.pid})"
                self._err = open(os.devnull, "w+b")  # noqa: SIM115 - closed in close()
                return True
            listener = shared_hosts.listen(files)
            try:
                self._err = os.fdopen(os.open(files.log, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600),
                                      "w+b")
                os.fchmod(self._err.fileno(), 0o600)
                self._spawn([self.socket_path, "--fd", str(listener.fileno())], listener)
                self.pid = self.proc.pid if self.proc is not None else 0
                shared_hosts.write_token(files, self._token, self.pid)
            finally:
                listener.close()  # the host holds its own copy
        self.sharing = f"shared, started (pid {self.pid}; stays {shared_hosts.idle_seconds():g} s once unused)"
        self._up = True  # the socket listens already: requests wait in its queue while the host starts
        return True

    def warm(self, models: list[str]) -> None:
        """Ask the host to run litellm's first-call path for ``models`` once litellm is imported
        (no request is sent; see ``LocalBackend.warm``). Returns at once."""
        self._send_control({"type": "warm", "models": [m for m in models if m]})

    def keep(self) -> None:
        """Ask a shared host this command started to stay its idle period once the command is
        gone, though it was asked nothing (``rlm host start``; an unused host otherwise leaves at
        once). Returns at once."""
        self._send_control({"type": "keep"})

    def _send_control(self, message: dict[str, Any]) -> None:
        with self._stdin_lock:
            stdin = None if self.proc is None else self.proc.stdin
            if stdin is None or stdin.closed:
                return
            try:
                protocol.write_message_fd(stdin.fileno(), message)
            except OSError:  # the host is gone; the next request says so
                pass

    def close(self) -> None:
        """Let the host go: a host of this command ends (closing its stdin ends it at once) and
        its folder is removed; a shared host stays for the next command until it is idle."""
        with self._stdin_lock:
            if self.proc is not None and self.proc.stdin is not None and not self.proc.stdin.closed:
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass
        if self._lease is not None:
            self._lease.close()
            self._lease = None
        if self._files is None and self.proc is not None:
            try:
                self.proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            shutil.rmtree(self.dir, ignore_errors=True)
        self._err.close()

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
        message = {"op": "complete", "request": request, "stream": stream, "scope": self._scope,
                   "router_config": None if router_config is None else os.path.abspath(router_config),
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

    def prices(self, model: str) -> tuple[float, float] | None:
        """USD per input and output token from litellm's map, in the host (cached; ``None``:
        unknown price)."""
        with self._lock:
            if model in self._prices:
                return self._prices[model]
        got = self._call({"op": "prices", "model": model}).get("prices")
        known = (float(got[0]), float(got[1])) if isinstance(got, list) and len(got) == 2 else None
        with self._lock:
            self._prices[model] = known
        return known

    def missing_keys(self, model: str) -> list[str]:
        """The variables litellm's ``validate_environment`` says ``model`` lacks in the host's
        environment (this command's: ``detect.missing_keys``); ``[]`` from a host that predates it."""
        try:
            return [str(n) for n in self._call({"op": "keys", "model": model}).get("missing") or []]
        except RemoteCallError:  # a shared host of an older rlm: "unknown op"
            return []

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
            known = {str(k): str(v) for k, v in self._call({"op": "router", "router_config": key, "scope": self._scope})["groups"].items()}
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
                if self._up or self.proc is None or self.proc.poll() is not None or time.monotonic() > deadline:
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
                              status_code=err.get("status"), headers=err.get("headers") or {},
                              causes=[str(c) for c in err.get("causes") or []])

    def _died(self) -> HostUnavailable:
        """The error for a host that went away, with the last line it wrote on stderr."""
        code = None
        if self.proc is not None:
            try:
                code = self.proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                pass
        gone = code is not None or (self.pid > 0 and _gone_soon(self.pid))
        try:
            if self.reused and self._files is not None:
                tail = self._files.log.read_text("utf-8", "replace").strip().splitlines()
            else:
                self._err.seek(0)
                tail = self._err.read().decode("utf-8", "replace").strip().splitlines()
        except (OSError, ValueError):
            tail = []
        which = f"the shared model host (pid {self.pid})" if self._files is not None else "the model host process"
        how = (f"exited with status {code}" if code is not None else "exited" if gone
               else "closed the connection without an answer")
        hint = "rerun with --debug; if it repeats, report it"
        if self._files is not None:
            hint = ("run the command again (it starts a new host); if it repeats, set RLM_HOST_IDLE=0 for a "
                    "model host per command and rerun with --debug")
        return HostUnavailable(f"{which} {how}" + (f": {tail[-1][:300]}" if tail else ""), hint=hint)


def _gone_soon(pid: int, wait_s: float = 1.0) -> bool:
    """Whether process ``pid`` is gone (or a zombie) within ``wait_s`` seconds.

    A killed process closes its sockets before the kernel marks it a zombie, so a client that saw
    the connection close can look at the process a moment too early; this polls for up to
    ``wait_s`` (seconds) before calling it alive.
    """
    deadline = time.monotonic() + wait_s
    while _alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            return True
        return True
