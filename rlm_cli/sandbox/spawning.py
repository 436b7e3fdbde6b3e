"""Start one confined process at a sandbox level, and kill it with everything it started.

:class:`ConfinedProcess` is the start path the REPL worker (``launcher.Sandbox``) and the
document decoder (``corpus.decode``) share: the scratch folder and the user the process runs as
(:meth:`~ConfinedProcess.prepare`), the command at its level (``sandbox.argv``) with a scrubbed
environment (:meth:`~ConfinedProcess.launch`), the confinement it applies to itself
(:meth:`~ConfinedProcess.confinement`), the end of its stderr (``watchers.StderrTail``) and its
kill with everything it started (``sandbox.processes``, ``sandbox.reaper``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm_cli.sandbox import argv, reaper
from rlm_cli.sandbox.ipc import sweep_worker_ipc
from rlm_cli.sandbox.level import Level
from rlm_cli.sandbox.paths import remove_tree
from rlm_cli.sandbox.probes import confinement
from rlm_cli.sandbox.processes import LIVE, LIVE_LOCK, become_subreaper, count_processes, kill_strays, start_ticks
from rlm_cli.sandbox.users import Drop, plan_drop
from rlm_cli.sandbox.watchers import StderrTail

#: Environment variables passed to the worker (everything else, keys included, is dropped).
ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")


@dataclass
class Limits:
    """Resource limits for the worker: bytes, seconds and counts."""

    memory_bytes: int = 4 * 1024**3
    cpu_seconds: int = 3600
    #: Largest file the worker may write, and the size of its scratch tmpfs under bwrap.
    file_bytes: int = 512 * 1024**2
    open_files: int = 256
    #: Processes (threads count) beyond those the worker's user already has.
    extra_processes: int = 128
    #: Threads ``llm_query_batched`` sends its prompts from, at most (the parent lets
    #: ``--max-concurrency`` of them be in flight; a thread more than that only waits). Those over
    #: 32 are added to the process and open-file limits (each holds a socket while it waits).
    sub_call_threads: int = 32

    def rlimits(self, uid: int) -> dict[str, int]:
        """``setrlimit`` names and values for a worker running as ``uid``."""
        more = max(0, self.sub_call_threads - 32)
        processes = self.extra_processes + more
        return {"RLIMIT_AS": self.memory_bytes, "RLIMIT_CPU": self.cpu_seconds,
                "RLIMIT_FSIZE": self.file_bytes, "RLIMIT_NOFILE": self.open_files + more,
                "RLIMIT_CORE": 0, "RLIMIT_NPROC": count_processes(uid) + processes}


@dataclass
class WorkerSpec:
    """What the worker loads: a saved corpus bundle, or raw context text (``rlm_query``)."""

    index_file: Path | None = None
    context_file: Path | None = None
    context_text: str | None = None
    #: The bundle's parsed structured files (``data``, ``records()``), when it has any.
    data_file: Path | None = None


class ConfinedProcess:
    """One process started at a sandbox level, with its scratch folder.

    Call :meth:`prepare`, then :meth:`launch`; :meth:`stop` kills it with everything it started
    and deletes the scratch folder. The process dies with the *thread* that started it (Linux
    parent-death signal, also bwrap's ``--die-with-parent``).
    """

    def __init__(self, level: Level | str, spec: WorkerSpec, *, socket_path: str,
                 limits: Limits | None = None) -> None:
        if level not in tuple(Level):
            raise ValueError(f"resolve the sandbox level first, got {level!r}")
        self.level = Level(level)
        self.spec = spec
        self.socket_path = socket_path
        self.limits = limits or Limits()
        self.proc: subprocess.Popen[bytes] | None = None
        self.scratch: Path | None = None
        #: The user the process runs as after start (``None``: the parent's).
        self.drop: Drop | None = None
        #: Host paths the bwrap level hides besides home and the rlm folders (the corpus roots).
        self.hide_paths: tuple[str, ...] = ()
        self._stderr = StderrTail()
        #: The started process's start time in clock ticks (``/proc``), and in seconds since the
        #: epoch, a second early: how its processes and IPC objects are told from a reused pid's.
        self._started_ticks = 0
        self._started_at = 0.0

    @property
    def stderr_tail(self) -> bytes:
        """The last 8 KiB of the process's stderr (``watchers.StderrTail``)."""
        return self._stderr.tail

    def prepare(self) -> Drop | None:
        """Before a start: the scratch folder (made when there is none), the user the process will
        run as (:attr:`drop`; the scratch folder is given to it, except under bwrap, whose scratch
        is a tmpfs of its own) and, at the levels rlm reaps itself, this process made a child
        subreaper. Returns :attr:`drop`.

        Raises:
            OSError: the scratch folder cannot be made or given.
        """
        if self.scratch is None:
            self.scratch = Path(tempfile.mkdtemp(prefix=reaper.folder_prefix(reaper.SCRATCH_PREFIX)))
        self.drop = drop = plan_drop(self.level)[0]
        if drop and drop.uid != os.geteuid() and not self.level.namespaced:
            os.chown(self.scratch, drop.uid, drop.gid)
        if self.level.reaped:
            become_subreaper()
        return drop

    def launch(self, rfd: int, wfd: int, *, env: dict[str, str], name: str = "sandbox-stderr") -> None:
        """Start the process (:meth:`command` at this level, for the descriptors ``rfd`` it reads
        and ``wfd`` it writes, which may be one socket) with a scrubbed environment: only
        :data:`ENV_ALLOW`, ``HOME`` and ``TMPDIR`` at the scratch folder, no bytecode written, and
        ``env``. Call :meth:`prepare` first.

        Raises:
            OSError: the process could not be started.
        """
        cmd = self.command(rfd, wfd)
        full = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
        # MALLOC_ARENA_MAX=1 (in ``env``): glibc gives each new thread its own malloc arena, reserving
        # 64 MiB of address space each; under a tight RLIMIT_AS those reservations fail and every
        # allocation of the thread takes a slow path (the background search index took 108 s instead
        # of 2 s under --memory-limit 256M on the stdlib). One arena: the GIL serialises Python anyway.
        full.update(HOME=str(self.scratch), TMPDIR=str(self.scratch), PYTHONDONTWRITEBYTECODE="1")
        full.update(env)
        self.spawn(cmd, pass_fds=tuple(dict.fromkeys((rfd, wfd))), env=full, name=name)

    def confinement(self, *, cpu_limit: bool = True) -> dict[str, Any]:
        """What the started process applies to itself (the first message's confinement fields):
        ``limits`` (setrlimit names and values; none at the ``none`` level; without
        ``RLIMIT_CPU`` when not ``cpu_limit``), ``drop_to`` and ``keep_caps`` (:attr:`drop`),
        ``harden``, ``seccomp_filter`` (install the seccomp filter: :attr:`Level.seccomp`),
        ``seccomp`` (a filter that cannot be installed stops the start: where the kernel has
        seccomp) and ``landlock`` (:meth:`landlock_policy`)."""
        drop = self.drop
        limits = self.limits.rlimits(drop.uid if drop else os.geteuid()) if self.level.confined else {}
        if not cpu_limit:
            limits.pop("RLIMIT_CPU", None)
        return {"limits": limits, "drop_to": [drop.uid, drop.gid] if drop else None,
                "keep_caps": list(drop.keep_caps) if drop else [], "harden": self.level.confined,
                "seccomp_filter": self.level.seccomp, "seccomp": self.level.seccomp and confinement().seccomp,
                "landlock": self.landlock_policy()}

    def spawn(self, cmd: list[str], *, pass_fds: tuple[int, ...], env: dict[str, str],
              name: str = "sandbox-stderr") -> subprocess.Popen[bytes]:
        """Start ``cmd`` as this sandbox's process (:attr:`proc`) in a session of its own, from
        ``/``, with ``env`` and the descriptors ``pass_fds``: stdin and stdout closed, the last
        8 KiB of stderr kept in :attr:`stderr_tail` (by a thread called ``name``), its pid in
        ``processes.LIVE`` and, at the ``process`` and ``none`` levels, recorded for the reaper of
        a later rlm (``sandbox.reaper``). Set :attr:`drop` first.

        Raises:
            OSError: the process could not be started.
        """
        started_at = time.time() - 1.0  # IPC objects are stamped in whole seconds
        with LIVE_LOCK:
            self.proc = proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                stderr=subprocess.PIPE, pass_fds=pass_fds, cwd="/", env=env,
                                                start_new_session=True)
            LIVE.add(proc.pid)
        self._started_ticks = start_ticks(proc.pid)
        self._started_at = started_at
        if self.level.reaped:  # found and killed by the next rlm if this one is killed
            reaper.record(proc.pid, self._started_ticks, self.drop.uid if self.drop else os.geteuid())
        self._stderr.start(proc, name)
        return proc

    def stop(self) -> None:
        """Kill the process (and every process it started) and delete the scratch folder, without
        asking it to shut down first."""
        self.kill()
        self.remove_scratch()

    def remove_scratch(self) -> None:
        """Delete the scratch folder (a later :meth:`prepare` makes a new one)."""
        if self.scratch is not None:
            remove_tree(self.scratch)
            self.scratch = None

    def kill(self) -> None:
        """Kill the process, its session and, at the levels rlm reaps itself, every process it
        started (and the SysV IPC objects they made); wait for it (5 s at most)."""
        if self.proc is None:
            return
        pid = self.proc.pid
        uid = self.drop.uid if self.drop else os.geteuid()
        own_user = uid != os.geteuid()
        # The worker's processes, before they die: the SysV IPC objects they made are theirs.
        pids = set() if own_user or not self.level.reaped else \
            {pid, *reaper.session_members(pid, self._started_ticks, uid)}
        for kill in (os.killpg, os.kill):  # its session first, then the worker itself
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self.level.reaped:
            kill_strays(pid, self._started_ticks, self.drop.uid if self.drop else None)
            # Everything it started is still in its session (setsid is refused to model code).
            reaper.kill_session(pid, self._started_ticks, self.drop.uid if self.drop else None)
            reaper.forget(pid)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        with LIVE_LOCK:
            LIVE.discard(pid)
        if self.level.reaped:  # bwrap's IPC namespace went with the worker
            sweep_worker_ipc(uid=uid, since=self._started_at, own_user=own_user, pids=pids)
        self._stderr.stop()
        self.proc = None

    # -- commands per level ----------------------------------------------------------------------
    def corpus_files(self) -> dict[str, str]:
        """The bundle's files the worker loads (host paths by ``argv.INSIDE_CORPUS`` key)."""
        files: dict[str, str] = {}
        if self.spec.index_file and self.spec.context_file:
            files["index"] = str(self.spec.index_file)
            files["context"] = str(self.spec.context_file)
            if self.spec.data_file:
                files["data"] = str(self.spec.data_file)
        return files

    def landlock_policy(self) -> dict[str, Any] | None:
        """The Landlock policy the process applies (``argv.landlock_policy``; ``None``: none)."""
        return argv.landlock_policy(self.level, scratch=self.scratch, socket_path=self.socket_path,
                                    hide_paths=self.hide_paths)

    def python_argv(self, pkg_parent: str, rfd: int, wfd: int) -> list[str]:
        """The interpreter's argv running the worker with rlm's package in ``pkg_parent`` and the
        control pipes ``rfd`` (it reads) and ``wfd`` (it writes)."""
        return argv.python_argv("rlm_cli.sandbox.worker", pkg_parent, (rfd, wfd))

    def command(self, rfd: int, wfd: int) -> list[str]:
        """The argv starting the worker at this sandbox's level (``argv.level_argv``)."""
        assert self.scratch is not None or not self.level.namespaced
        return argv.level_argv(self.level, lambda parent: self.python_argv(parent, rfd, wfd),
                               scratch=self.scratch, socket_path=self.socket_path, corpus=self.corpus_files(),
                               file_bytes=self.limits.file_bytes, drop=self.drop, hide_paths=self.hide_paths)
