"""Start and drive the REPL worker at an isolation level: ``bwrap``, ``sandbox-exec``, ``process``
or ``none``. The worker module and protocol are the same at every level; only the command that
starts it differs.

What each level does (the README has the user-facing table):

* every level: a separate process, a scrubbed environment (no API keys; ``HOME`` and ``TMPDIR``
  point at a fresh scratch folder that is the working directory and is deleted on close), its
  own session (Ctrl-C reaches the parent only), stdout discarded, stderr tail kept for crash
  reports, a per-cell timeout after which the worker is killed and restarted.
* ``process``: plus ``setrlimit`` limits (address space, CPU seconds, processes, file size,
  open files, no core dumps); when run as root the worker drops to ``nobody`` first, because
  Linux does not apply the process limit to root.
* ``bwrap``: plus bubblewrap namespaces: no network (``--unshare-net``), private PID/IPC/UTS,
  the filesystem read-only, ``/tmp``, the home folder, the rlm config/cache/data folders and
  the corpus folders hidden; the corpus reaches the worker only as the bundle files.
* ``sandbox-exec`` (macOS): plus a profile that denies network except Unix sockets.
"""

from __future__ import annotations

import os
import platform
import pwd
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm_cli import protocol
from rlm_cli.errors import SandboxError, UsageError

LEVELS = ("auto", "bwrap", "sandbox-exec", "process", "none")
#: Environment variables passed to the worker (everything else, keys included, is dropped).
ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
#: Seconds the worker gets to start and load the corpus.
START_TIMEOUT = 60.0
_PKG_DIR = Path(__file__).resolve().parent.parent  # .../rlm_cli
_bwrap_ok: bool | None = None


def bwrap_available() -> bool:
    """True if ``bwrap`` exists and can create the namespaces we use (probed once per process)."""
    global _bwrap_ok
    if _bwrap_ok is None:
        exe = shutil.which("bwrap")
        _bwrap_ok = False
        if exe and sys.platform.startswith("linux"):
            try:
                probe = subprocess.run([exe, *_bwrap_ns_flags(), "--ro-bind", "/", "/", "--dev", "/dev",
                                        "--proc", "/proc", "true"], capture_output=True, timeout=10)
                _bwrap_ok = probe.returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                _bwrap_ok = False
    return _bwrap_ok


def _bwrap_ns_flags() -> list[str]:
    flags = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    if os.geteuid() != 0:
        flags.insert(0, "--unshare-user")
    return flags


def resolve_level(requested: str) -> tuple[str, str | None]:
    """Map ``auto`` to the strongest available level; return ``(level, warning or None)``.

    Raises:
        UsageError: an unknown level, or one that is not available here.
    """
    if requested not in LEVELS:
        raise UsageError(f"unknown sandbox {requested!r}", hint=f"use one of {', '.join(LEVELS)}")
    has_sbx = sys.platform == "darwin" and shutil.which("sandbox-exec") is not None
    if requested == "auto":
        if bwrap_available():
            return "bwrap", None
        if has_sbx:
            return "sandbox-exec", None
        return "process", ("sandbox: bubblewrap is not available, so model code runs as a plain process "
                           "with resource limits and no API keys, but it CAN reach the network and read "
                           "your files (install bubblewrap: apt-get install bubblewrap)")
    if requested == "bwrap" and not bwrap_available():
        raise UsageError("--sandbox bwrap: bubblewrap is not installed or cannot create namespaces here",
                         hint="install bubblewrap or use --sandbox process")
    if requested == "sandbox-exec" and not has_sbx:
        raise UsageError("--sandbox sandbox-exec is only available on macOS")
    if requested == "none":
        return "none", "sandbox: none; model code runs unconfined, without resource limits"
    return requested, None


@dataclass
class Limits:
    """Resource limits for the worker: bytes, seconds and counts."""

    memory_bytes: int = 4 * 1024**3
    cpu_seconds: int = 3600
    file_bytes: int = 1024**3
    open_files: int = 256
    #: Processes (threads count) beyond those the worker's user already has.
    extra_processes: int = 128

    def rlimits(self, uid: int) -> dict[str, int]:
        """``setrlimit`` names and values for a worker running as ``uid``."""
        return {"RLIMIT_AS": self.memory_bytes, "RLIMIT_CPU": self.cpu_seconds,
                "RLIMIT_FSIZE": self.file_bytes, "RLIMIT_NOFILE": self.open_files,
                "RLIMIT_CORE": 0, "RLIMIT_NPROC": _count_processes(uid) + self.extra_processes}


def _count_processes(uid: int) -> int:
    """Threads owned by ``uid`` now (RLIMIT_NPROC counts threads per real user)."""
    total = 0
    try:
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    st = os.stat(f"/proc/{pid}")
                    if st.st_uid == uid:
                        total += max(1, len(os.listdir(f"/proc/{pid}/task")))
                except OSError:
                    continue
    except OSError:
        return 512
    return total


@dataclass
class ExecResult:
    """What one code block produced. ``lost`` says why the REPL state was lost (timeout or
    crash), in which case the worker was restarted with ``context`` reloaded."""

    output: str
    output_chars: int
    ok: bool
    final: str | None = None
    final_error: str | None = None
    elapsed_s: float = 0.0
    lost: str | None = None


@dataclass
class WorkerSpec:
    """What the worker loads: a saved corpus bundle, or raw context text (``rlm_query``)."""

    index_file: Path | None = None
    context_file: Path | None = None
    context_text: str | None = None


class Sandbox:
    """One REPL worker process and its scratch folder.

    Use as a context manager; ``close()`` kills the worker's whole process group and deletes
    the scratch folder. Not thread-safe: one ``execute`` at a time.
    """

    def __init__(self, level: str, spec: WorkerSpec, *, socket_path: str, token: str,
                 limits: Limits | None = None, cell_timeout: float = 120.0) -> None:
        if level not in LEVELS or level == "auto":
            raise ValueError(f"resolve the sandbox level first, got {level!r}")
        self.level = level
        self.spec = spec
        self.socket_path = socket_path
        self.token = token
        self.limits = limits or Limits()
        self.cell_timeout = cell_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.scratch: Path | None = None
        self._wfd = self._rfd = -1
        self._stderr_tail = b""
        self.restarts = 0
        self.notes: list[str] = []
        #: Host paths the bwrap level hides besides home and the rlm folders (the corpus roots).
        self.hide_paths: tuple[str, ...] = ()

    # -- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _drop_to(self) -> tuple[int, int] | None:
        if self.level == "process" and not all(_world_readable(p) for p in _python_roots()):
            self.notes.append("running as root with an interpreter that other users cannot read, so the "
                              "worker stays root and the process-count limit does not apply")
            return None
        if self.level in ("process", "bwrap") and os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("nobody")
                return pw.pw_uid, pw.pw_gid
            except KeyError:
                return 65534, 65534
        return None

    def start(self) -> None:
        """Start the worker and wait until it has loaded the corpus.

        Raises:
            SandboxError: the worker failed to start or load within ``START_TIMEOUT`` seconds.
        """
        if self.scratch is None:
            self.scratch = Path(tempfile.mkdtemp(prefix="rlm-scratch-"))
        drop = self._drop_to()
        if drop:
            os.chown(self.scratch, *drop)
        p_read, c_write = os.pipe()
        c_read, p_write = os.pipe()
        argv = self._command(c_read, c_write)
        env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
        env.update(HOME=str(self.scratch), TMPDIR=str(self.scratch), PYTHONDONTWRITEBYTECODE="1",
                   PYTHONIOENCODING="utf-8")
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, pass_fds=(c_read, c_write),
                                         cwd=self.scratch, env=env, start_new_session=True)
        except OSError as exc:
            for fd in (p_read, c_write, c_read, p_write):
                os.close(fd)
            raise SandboxError(f"cannot start the REPL worker: {exc}") from None
        os.close(c_read)
        os.close(c_write)
        self._rfd, self._wfd = p_read, p_write
        threading.Thread(target=self._drain_stderr, args=(self.proc,), daemon=True).start()
        inside = self._inside_paths()
        config: dict[str, Any] = {
            "type": "load", "socket": inside["socket"], "token": self.token,
            "limits": self.limits.rlimits(drop[0] if drop else os.geteuid()) if self.level != "none" else {},
            "drop_to": list(drop) if drop else None,
            "index_file": inside.get("index"), "context_file": inside.get("context"),
            "context_text": self.spec.context_text,
        }
        try:
            protocol.write_message_fd(self._wfd, config)
            reply = self._read(START_TIMEOUT)
        except (OSError, protocol.ProtocolError, TimeoutError) as exc:
            detail = self._stderr_tail.decode("utf-8", "replace").strip().splitlines()[-3:]
            self._kill()
            raise SandboxError(f"the REPL worker ({self.level}) failed to start: {exc}"
                               + (f": {' / '.join(detail)}" if detail else "")) from None
        if reply.get("type") != "ready":
            self._kill()
            raise SandboxError(f"the REPL worker failed to start: {reply.get('error', reply)}")
        self.notes = list(reply.get("notes", []))

    def close(self) -> None:
        """Kill the worker (its whole process group) and delete the scratch folder."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                protocol.write_message_fd(self._wfd, {"type": "shutdown"})
                self.proc.wait(timeout=0.5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None

    def _kill(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            if self.proc.stderr:
                self.proc.stderr.close()
            self.proc = None
        for fd in (self._rfd, self._wfd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._rfd = self._wfd = -1

    def restart(self) -> None:
        """Kill and start a fresh worker (REPL variables are lost; ``context`` is reloaded)."""
        self._kill()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None
        self.restarts += 1
        self.start()

    # -- running code ----------------------------------------------------------------------------
    def execute(self, code: str, cell: int = 0) -> ExecResult:
        """Run ``code`` in the REPL and wait at most ``cell_timeout`` seconds.

        A timeout or a crash kills and restarts the worker and returns ``lost`` set.

        Raises:
            SandboxError: the worker could not be restarted.
        """
        started = time.monotonic()
        try:
            if self.proc is None:
                raise protocol.ProtocolError("no worker")
            protocol.write_message_fd(self._wfd, {"type": "exec", "code": code, "cell": cell})
            reply = self._read(self.cell_timeout)
        except TimeoutError:
            self.restart()
            return ExecResult("", 0, False, elapsed_s=time.monotonic() - started,
                              lost=f"the cell timed out after {self.cell_timeout:g} s and was killed")
        except (OSError, protocol.ProtocolError):
            why = self._death_reason()
            self.restart()
            return ExecResult("", 0, False, elapsed_s=time.monotonic() - started,
                              lost=f"the REPL worker crashed ({why})")
        return ExecResult(output=str(reply.get("output", "")), output_chars=int(reply.get("output_chars", 0)),
                          ok=bool(reply.get("ok")), final=_opt_str(reply.get("final")),
                          final_error=_opt_str(reply.get("final_error")),
                          elapsed_s=float(reply.get("elapsed_s", 0.0)))

    def _read(self, timeout: float) -> dict[str, Any]:
        ready, _, _ = select.select([self._rfd], [], [], timeout)
        if not ready:
            raise TimeoutError(f"no answer within {timeout:g} s")
        return protocol.read_message_fd(self._rfd)

    def _death_reason(self) -> str:
        if self.proc is None:
            return "not running"
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return "it stopped answering"
        tail = self._stderr_tail.decode("utf-8", "replace").strip().splitlines()
        # bwrap reports the child's status as its own exit code (128 + signal for signals).
        if code < 0 or code > 128:
            sig = -code if code < 0 else code - 128
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = f"signal {sig}"
            reason = f"killed by {name}"
        else:
            reason = f"exit status {code}"
        return reason + (f"; last stderr: {tail[-1][:200]}" if tail else "")

    def _drain_stderr(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        try:
            for line in iter(lambda: proc.stderr.read1(4096), b""):  # type: ignore[union-attr,attr-defined]
                self._stderr_tail = (self._stderr_tail + line)[-8192:]
        except (OSError, ValueError):
            pass

    # -- commands per level ----------------------------------------------------------------------
    def _inside_paths(self) -> dict[str, str]:
        paths = {"socket": self.socket_path}
        if self.spec.index_file and self.spec.context_file:
            paths["index"] = str(self.spec.index_file)
            paths["context"] = str(self.spec.context_file)
        if self.level == "bwrap":
            paths["socket"] = "/tmp/rlm/sock/" + os.path.basename(self.socket_path)
            if "index" in paths:
                paths["index"] = "/tmp/rlm/corpus/index.json"
                paths["context"] = "/tmp/rlm/corpus/context.txt"
        return paths

    def _python_argv(self, pkg_parent: str, rfd: int, wfd: int) -> list[str]:
        boot = (f"import sys; sys.path.insert(0, {pkg_parent!r}); "
                "from rlm_cli.sandbox.worker import main; main()")
        return [sys.executable, "-I", "-c", boot, str(rfd), str(wfd)]

    def _command(self, rfd: int, wfd: int) -> list[str]:
        if self.level in ("process", "none"):
            return self._python_argv(str(_PKG_DIR.parent), rfd, wfd)
        if self.level == "sandbox-exec":
            profile = ("(version 1)(allow default)(deny network*)"
                       "(allow network* (remote unix-socket))")
            return ["sandbox-exec", "-p", profile, *self._python_argv(str(_PKG_DIR.parent), rfd, wfd)]
        return self._bwrap_command(rfd, wfd)

    def _bwrap_command(self, rfd: int, wfd: int) -> list[str]:
        assert self.scratch is not None
        from rlm_cli.config import cache_dir, config_dir, data_dir

        args = ["bwrap", *_bwrap_ns_flags(), "--die-with-parent", "--new-session",
                "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        hidden = {str(Path.home()), str(config_dir()), str(cache_dir()), str(data_dir()),
                  "/run", "/var/run", "/var/tmp", "/var/log", "/root", "/home", "/etc/ssh"}
        hidden.update(self.hide_paths)
        real = {os.path.realpath(p) for p in hidden if os.path.exists(p)} - {"/", "/tmp"}
        for path in sorted(real, key=len):
            if os.path.isdir(path):
                args += ["--tmpfs", path]
            else:
                args += ["--ro-bind", "/dev/null", path]
        # Re-expose what the worker needs to run: the interpreter and the worker module. Parent
        # folders that bwrap creates inside a hidden tmpfs must be traversable by ``nobody``.
        made: set[str] = set()
        for keep in _python_roots():
            for anc in reversed(Path(keep).parents):
                a = str(anc)
                if a not in made and any(a.startswith(h + "/") for h in real):
                    args += ["--perms", "0755", "--dir", a]
                    made.add(a)
            args += ["--ro-bind", keep, keep]
        for inner in ("/tmp/rlm", "/tmp/rlm/pkg", "/tmp/rlm/sock", "/tmp/rlm/corpus"):
            args += ["--perms", "0755", "--dir", inner]
        args += ["--ro-bind", str(_PKG_DIR), "/tmp/rlm/pkg/rlm_cli",
                 "--bind", str(self.scratch), str(self.scratch),
                 "--ro-bind", os.path.dirname(self.socket_path), "/tmp/rlm/sock",
                 "--chdir", str(self.scratch)]
        if self.spec.index_file and self.spec.context_file:
            args += ["--ro-bind", str(self.spec.index_file), "/tmp/rlm/corpus/index.json",
                     "--ro-bind", str(self.spec.context_file), "/tmp/rlm/corpus/context.txt"]
        if os.geteuid() == 0:
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        return [*args, *self._python_argv("/tmp/rlm/pkg", rfd, wfd)]


def _python_roots() -> list[str]:
    """Folders the worker's interpreter needs: its prefixes and the real executable's folder."""
    return sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix,
                                                  os.path.dirname(os.path.realpath(sys.executable)))})


def _world_readable(path: str) -> bool:
    """True if every folder from ``/`` down to ``path`` lets other users in (mode o+x)."""
    p = Path(path)
    for part in [*reversed(p.parents), p]:
        try:
            if not os.stat(part).st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def describe(level: str) -> str:
    """One line saying what ``level`` protects, for ``rlm doctor`` and ``-v``."""
    return {
        "bwrap": "bubblewrap: no network, read-only filesystem, home/config/corpus hidden, resource limits",
        "sandbox-exec": "macOS sandbox-exec: no network (Unix sockets only), resource limits",
        "process": "plain process: no API keys, resource limits; network and your files ARE reachable",
        "none": "none: a separate process without limits; nothing is protected",
    }.get(level, level) + f" ({platform.system()})"

