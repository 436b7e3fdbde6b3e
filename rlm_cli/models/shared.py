"""The shared model host: one model host process per user and environment, reused by every
``rlm`` command that would start an identical one, until it has been idle for ``RLM_HOST_IDLE``
seconds (the latest command's value).

Why: ``import litellm`` takes about 3 s of a warm ``rlm ask`` (issue 14), and only a process that
outlives one command can take it off the critical path. The pattern is that of sccache's server
or Gradle's daemon: started on first use, found again through a socket at a fixed place, gone
after an idle period. ``RLM_HOST_IDLE=0`` gives every command its own host (the behaviour before).

Which host a command may reuse: the one whose key (:func:`fingerprint`) is equal, a hash of
rlm's version and model-layer sources, the interpreter, the user, the network namespace and the environment (every
variable but the shell's bookkeeping ones in :data:`VOLATILE_ENV`, a CI step's own (:data:`STEP_ENV`,
``INPUT_*``) and rlm's own ``RLM_*``, which
only the command reads: what they resolve to, a model, a key, an API base, travels in each
request). A host holds the environment it was started with (API keys, proxies,
``LITELLM_*``), so a command whose environment differs in any other way gets a host of its own.
The host runs in ``/`` (it keeps no folder busy) unless a variable names an existing file by a
relative path (:func:`needs_cwd`); then it runs in the command's folder, which joins the key.

Files, all in :func:`host_dir` (the user's runtime folder, ``0700``, refused unless it is this
user's and nobody else's): for each key ``host-KEY.sock`` (the listening socket, ``0600``),
``host-KEY.token`` (the secret every request carries, ``0600``), ``host-KEY.lock`` (``flock``
serialising "find or start" against the host's own exit) and ``host-KEY.log`` (its stderr).
The REPL worker can reach none of them: it runs as another user or under Landlock, which hides
the temporary and runtime folders, and the token is checked on every connection together with
the peer's user id (``SO_PEERCRED``).

Races, all under the lock: a command leases an existing host (an open connection the host
counts) or binds a new socket itself and starts the host on it (the socket listens before the
host's interpreter is up, so requests queue instead of failing); a host leaves only after
re-checking, under the lock, that nobody leased it meanwhile, and removes its files only if the
socket is still its own (same inode). A host that does not answer a lease in
:data:`LEASE_TIMEOUT_S` is left alone (the command starts a host of its own); ``rlm host stop``
kills it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import socket
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm_cli import protocol
from rlm_cli.config import runtime_path
from rlm_cli.errors import UsageError
from rlm_cli.sockets import fits, shared_socket_dir

#: The variable that sets the idle period, in seconds; ``0`` turns sharing off.
IDLE_ENV = "RLM_HOST_IDLE"
#: Seconds a shared host waits unused before it exits (sccache's server waits 600 s; a model host
#: holds about 200 MB, so half that).
DEFAULT_IDLE_S = 300.0
#: Environment variables left out of the key: they change between two commands of one shell
#: session without changing anything litellm reads.
VOLATILE_ENV = frozenset({
    "_", "PWD", "OLDPWD", "SHLVL", "COLUMNS", "LINES", "TERM", "COLORTERM", "TERM_PROGRAM",
    "TERM_PROGRAM_VERSION", "TERM_SESSION_ID", "WINDOWID", "PS1", "PS2", "PS4", "PROMPT_COMMAND",
    "SSH_TTY", "TMUX_PANE", "STY", "WINDOW", "LS_COLORS", "HISTFILE", "HISTSIZE", "HISTCONTROL",
    "RANDOM", "SECONDS", "LINENO", "PYTEST_CURRENT_TEST", IDLE_ENV,
})
#: Variables a CI runner sets anew for each step of one job, none of which litellm reads (GitHub
#: Actions: the step's command files, its action, its inputs ``INPUT_*``; issue 48: 10 hosts piled
#: up over the steps of one job).
STEP_ENV = frozenset({
    "GITHUB_OUTPUT", "GITHUB_STATE", "GITHUB_ENV", "GITHUB_PATH", "GITHUB_STEP_SUMMARY", "GITHUB_ACTION",
    "GITHUB_ACTION_PATH", "GITHUB_ACTION_REF", "GITHUB_ACTION_REPOSITORY", "GITHUB_ACTION_STATUS",
})
STEP_PREFIXES = ("INPUT_", "STATE_")
_MODEL_SOURCES = ("protocol.py", "models/backend.py", "models/host.py", "models/host_process.py",
                  "models/shared.py", "models/failures.py", "models/detect.py")
_PKG = Path(__file__).resolve().parent.parent


def idle_seconds(environ: Any = None) -> float:
    """The idle period from ``RLM_HOST_IDLE`` (seconds, ``0``: no sharing; default
    :data:`DEFAULT_IDLE_S`).

    Raises:
        UsageError: the value is not a number of seconds from 0 to 86400.
    """
    raw = (os.environ if environ is None else environ).get(IDLE_ENV, "").strip()
    if not raw:
        return DEFAULT_IDLE_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 86400:
        raise UsageError(f"{IDLE_ENV}={raw!r} is not a number of seconds",
                         hint=f"set {IDLE_ENV} to seconds from 0 (a model host per command) to 86400")
    return value


def unsafe_dir(path: Path) -> str | None:
    """Why ``path`` may not hold shared hosts (``None``: it may): it must be a folder of this
    user's, closed to others, in a folder nobody else may rename it out of."""
    try:
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode):
            return f"{path} is not a folder"
        if info.st_uid != os.geteuid():
            return f"{path} belongs to another user"
        if info.st_mode & 0o077:
            return f"{path} is open to other users (mode {oct(info.st_mode & 0o777)}; it must be 0700)"
        up = os.lstat(path.parent)
        if (not stat.S_ISDIR(up.st_mode) or up.st_uid not in (0, os.geteuid())
                or (up.st_mode & 0o022 and not up.st_mode & stat.S_ISVTX)):
            return f"{path.parent} may be written by other users"
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    return None


def socket_folder(folder: Path) -> Path:
    """Where the sockets of the shared hosts of ``folder`` (:func:`host_dir`) are: ``folder``, or
    when its path leaves no room for a socket, a short private folder
    (:func:`rlm_cli.sockets.shared_socket_dir`).

    Raises:
        OSError: the socket path fits nowhere.
    """
    return shared_socket_dir(folder)


def host_dir(*, create: bool = True) -> Path | None:
    """The folder of shared hosts (:func:`runtime_path`), created ``0700`` when ``create``;
    ``None`` when it is missing or not safe (:func:`unsafe_dir`), and then no host is shared."""
    path = runtime_path()
    if create:
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            path.mkdir(mode=0o700, exist_ok=True)
        except OSError:
            return None
    return None if unsafe_dir(path) else path


def needs_cwd(environ: Any = None) -> bool:
    """Whether the environment names a file or folder by a relative path (one that exists from
    the working folder, e.g. ``GOOGLE_APPLICATION_CREDENTIALS=key.json``): the host must then run
    in the command's folder, and only commands of that folder share it. Otherwise the host runs
    in ``/`` and keeps no folder busy (an unmount, a deleted folder)."""
    env = os.environ if environ is None else environ
    for name, value in env.items():
        if name in VOLATILE_ENV or name.startswith("RLM_") or not value or len(value) > 1024:
            continue
        if not os.path.isabs(value) and "\0" not in value and os.path.exists(value):
            return True
    return False


def _network_namespace() -> str:
    """This process's network namespace (Linux: ``net:[INODE]``; ``""`` elsewhere). A host sends its
    requests from the namespace it was started in, so a command in another one (``unshare -n``,
    ``ip netns exec``, a container sharing the runtime folder) must not lease it: its loopback
    servers are not the host's."""
    try:
        return os.readlink("/proc/self/ns/net")
    except OSError:
        return ""


def fingerprint(environ: Any = None, cwd: str | None = None) -> str:
    """The key of the host this command may share (16 hex digits; see the module docstring):
    ``cwd`` (a folder, or ``None`` for a host that runs in ``/``) is part of it."""
    env = os.environ if environ is None else environ
    digest = hashlib.sha256()
    from rlm_cli import __version__

    digest.update(f"{__version__}\0{os.path.realpath(sys.executable)}\0{sys.version}\0{os.geteuid()}\0"
                  f"{cwd or '/'}\0{_network_namespace()}\0".encode("utf-8", "surrogateescape"))
    for rel in _MODEL_SOURCES:
        try:
            info = os.stat(_PKG / rel)
            digest.update(f"{rel}:{info.st_mtime_ns}:{info.st_size}\0".encode())
        except OSError:
            digest.update(f"{rel}:-\0".encode())
    for name in sorted(k for k in env if k not in VOLATILE_ENV and k not in STEP_ENV
                       and not k.startswith(("RLM_", *STEP_PREFIXES))):
        digest.update(f"{name}={env[name]}\0".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class HostFiles:
    """The files of one shared host (see the module docstring)."""

    socket: Path
    token: Path
    lock: Path
    log: Path

    @classmethod
    def of(cls, folder: Path, key: str) -> HostFiles:
        """The files of the host ``key`` in ``folder``; its socket in :func:`socket_folder` (``folder``
        itself unless its path is too long for a socket).

        Raises:
            OSError: the socket path fits nowhere (see :func:`rlm_cli.sockets.socket_temp_dir`).
        """
        base = folder / f"host-{key}"
        sock = socket_folder(folder) / f"host-{key}.sock"
        return cls(sock, Path(f"{base}.token"), Path(f"{base}.lock"), Path(f"{base}.log"))

    def to_dict(self) -> dict[str, str]:
        """The paths as strings (sent to the host in its config)."""
        return {"socket": str(self.socket), "token": str(self.token), "lock": str(self.lock), "log": str(self.log)}


@dataclass(frozen=True)
class Sharing:
    """Whether this command shares a model host: ``files`` of the host (``None``: a host of its
    own, and ``why`` says why), and ``cwd``: the folder the host runs in (``None``: ``/``)."""

    files: HostFiles | None
    why: str
    cwd: str | None = None


def for_this_command() -> Sharing:
    """How this command gets its model host (see :class:`Sharing`).

    Raises:
        UsageError: ``RLM_HOST_IDLE`` is invalid.
    """
    if idle_seconds() <= 0:
        return Sharing(None, f"{IDLE_ENV}=0")
    folder = host_dir()
    if folder is None:
        return Sharing(None, f"no safe runtime folder: {unsafe_dir(runtime_path())}")
    cwd = None
    if needs_cwd():
        try:
            cwd = os.getcwd()
        except OSError:
            return Sharing(None, "the working folder is gone")
    try:
        files = HostFiles.of(folder, fingerprint(cwd=cwd))
        if files.socket.parent != folder:
            files.socket.parent.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        return Sharing(None, f"no folder for the host's socket: {exc.strerror or exc}")
    problem = unsafe_dir(files.socket.parent) if files.socket.parent != folder else None
    if problem or not fits(files.socket):
        return Sharing(None, f"no safe folder for the host's socket: {problem or files.socket}")
    return Sharing(files, "shared", cwd)


@contextlib.contextmanager
def locked(files: HostFiles) -> Iterator[None]:
    """Hold the host's lock file (``flock``, exclusive) for the block. A host that leaves
    removes the file while holding it, so the lock is taken again if the path no longer names
    the file locked (the usual check, else two holders could lock two files)."""
    while True:
        fd = os.open(files.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.stat(files.lock).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(fd)
            raise
        if same:
            break
        os.close(fd)
    try:
        yield
    finally:
        os.close(fd)  # releases the lock


def _token_file(files: HostFiles) -> list[str]:
    try:
        return files.token.read_text().split()
    except OSError:
        return []


def read_token(files: HostFiles) -> str | None:
    """The host's token, or ``None`` when there is none (no host, or it left)."""
    fields = _token_file(files)
    return fields[0] if fields else None


def host_pid(files: HostFiles) -> int | None:
    """The host's pid as its starter recorded it beside the token, or ``None``."""
    fields = _token_file(files)
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def write_token(files: HostFiles, token: str, pid: int) -> None:
    """Write the token file (``TOKEN PID``) ``0600`` atomically (a reader sees the old file or
    the whole new one)."""
    tmp = files.token.with_name(files.token.name + f".{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{token} {pid}\n")
    os.replace(tmp, files.token)


class NoHost(Exception):
    """Nothing listens on the host's socket (no file, or a stale one of a host that died)."""


def ask(files: HostFiles, message: dict[str, Any], *, timeout: float = 10.0) -> tuple[socket.socket, dict[str, Any]]:
    """Send ``message`` (with the token) to the host and read one reply: ``(connection, reply)``;
    the caller closes the connection.

    Raises:
        NoHost: there is no token or socket, or nothing listens on the socket.
        OSError, protocol.ProtocolError: a host is there but did not answer in ``timeout`` seconds
            or closed the connection (a wrong token, or it is leaving).
    """
    token = read_token(files)
    if token is None:
        raise NoHost(str(files.socket))
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(timeout)
        try:
            conn.connect(str(files.socket))
        except (FileNotFoundError, ConnectionRefusedError):
            raise NoHost(str(files.socket)) from None
        protocol.send_message(conn, {"token": token, **message})
        reply = protocol.recv_message(conn)
        conn.settimeout(None)
    except BaseException:
        conn.close()
        raise
    return conn, reply


@dataclass(frozen=True)
class Lease:
    """A lease of a running shared host: the open connection (the host stays while it is open),
    the token for requests, and the host's pid."""

    conn: socket.socket
    token: str
    pid: int


#: Seconds a command waits for a running host to lease (it answers leases at once, even while it
#: imports litellm); a host silent that long is treated as hung and the command starts its own.
LEASE_TIMEOUT_S = 5.0


def lease(files: HostFiles, idle: float) -> Lease | None:
    """Lease the running host, or ``None`` when there is none (the caller may then start one on
    the same path). Call it under :func:`locked`.

    ``idle`` (seconds) becomes the host's idle period: the latest command's ``RLM_HOST_IDLE``.

    Raises:
        OSError: a host is there but would not lease (silent past :data:`LEASE_TIMEOUT_S`, or
            leaving after ``rlm host stop``): the caller must leave its socket alone.
    """
    try:
        conn, reply = ask(files, {"op": "lease", "idle": idle}, timeout=LEASE_TIMEOUT_S)
    except NoHost:
        return None
    except protocol.ProtocolError as exc:
        raise OSError(f"the shared model host closed the connection ({exc})") from None
    token = read_token(files)
    if not reply.get("ok") or token is None:
        conn.close()
        raise OSError("the shared model host is stopping")
    return Lease(conn, token, int(reply.get("pid") or 0))


def listen(files: HostFiles) -> socket.socket:
    """A new listening socket at the host's path (a stale one removed first), ``0600``. Call it
    under :func:`locked`.

    Raises:
        OSError: the socket cannot be made.
    """
    with contextlib.suppress(FileNotFoundError):
        files.socket.unlink()
    files.socket.parent.mkdir(mode=0o700, exist_ok=True)  # a separate socket folder may have been removed
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old = os.umask(0o177)
        try:
            sock.bind(str(files.socket))
        finally:
            os.umask(old)
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock


def remove(files: HostFiles, *, token: str | None, inode: int | None = None) -> None:
    """Remove a host's socket, token file, log and lock file, unless they belong to a newer
    host already: the socket must still be the one with ``inode`` and the token file hold
    ``token`` (each when given). Call it under :func:`locked`."""
    try:
        if inode is not None and os.stat(files.socket).st_ino != inode:
            return
    except OSError:
        pass
    if token is not None and read_token(files) not in (token, None):
        return
    for path in (files.socket, files.token, files.log, files.lock):
        with contextlib.suppress(OSError):
            path.unlink()
    if files.socket.parent != files.lock.parent:  # a separate socket folder goes with its last socket
        with contextlib.suppress(OSError):
            files.socket.parent.rmdir()
