"""Start and drive the REPL worker at an isolation level: ``bwrap``, ``sandbox-exec``, ``process``
or ``none``. The worker module and protocol are the same at every level; only the command that
starts it differs (``sandbox.argv``). What each level does is said in ``sandbox.levels``.

:class:`Sandbox` owns one worker's life: its start (the scrubbed environment, the user it runs as,
the ``load`` message), each code block's exchange on the control channel with its timeout,
Ctrl-C and integrity check, its restart after a timeout or crash, and its kill with everything
it started (``sandbox.processes``, ``sandbox.reaper``).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm_cli import protocol
from rlm_cli.errors import SandboxError, UsageError
from rlm_cli.sandbox import argv, reaper
from rlm_cli.sandbox.ipc import sweep_worker_ipc
from rlm_cli.sandbox.level import Level
from rlm_cli.sandbox.paths import remove_tree
from rlm_cli.sandbox.probes import can_mount, confinement
from rlm_cli.sandbox.processes import (
    LIVE,
    LIVE_LOCK,
    MAX_SCRATCH_ENTRIES,
    become_subreaper,
    count_processes,
    exit_reason,
    format_bytes,
    kill_strays,
    left_running,
    ns_descendant,
    scratch_usage,
    start_ticks,
)
from rlm_cli.sandbox.results import ExecResult, WorkerCheck, parse_result, printed_note, timeout_note
from rlm_cli.sandbox.users import Drop, plan_drop, share_relay

#: Environment variables passed to the worker (everything else, keys included, is dropped).
ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
#: Seconds the worker gets to start and load the corpus.
START_TIMEOUT = 60.0
#: Seconds a block out of time gets, after SIGINT, to hand over what it printed before it is killed.
TIMEOUT_GRACE_S = 1.0
#: Seconds between two looks at the size of a scratch folder on the disk (no tmpfs could be
#: mounted; ``processes.MAX_SCRATCH_ENTRIES`` is the most entries it may hold).
SCRATCH_POLL_S = 0.1


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


class Sandbox:
    """One REPL worker process and its scratch folder.

    Use as a context manager; ``close()`` kills the worker with everything it started and
    deletes the scratch folder. Not thread-safe: one ``execute`` at a time. The worker dies with
    the *thread* that started (or, after a timeout or crash, restarted) it (Linux parent-death
    signal, also bwrap's ``--die-with-parent``): drive a sandbox from a thread that outlives it.
    """

    def __init__(self, level: Level | str, spec: WorkerSpec, *, socket_path: str, token: str,
                 limits: Limits | None = None, cell_timeout: float = 120.0) -> None:
        if level not in tuple(Level):
            raise ValueError(f"resolve the sandbox level first, got {level!r}")
        self.level = Level(level)
        self.spec = spec
        self.socket_path = socket_path
        self.token = token
        self.limits = limits or Limits()
        self.cell_timeout = cell_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.scratch: Path | None = None
        self._wfd = self._rfd = -1
        self.stderr_tail = b""
        self._drain: threading.Thread | None = None
        self._drain_stop = threading.Event()
        self._started_ticks = 0
        self._started_at = 0.0
        #: A code block is running (or was, when Ctrl-C cut ``execute`` short): close() kills at once.
        self._busy = False
        self.restarts = 0
        #: Notes of the last start: what happened (what an earlier, killed rlm left), and what it
        #: found of this machine, the same every run (shown once: ``sandbox.notices``).
        self.notes: list[str] = []
        self.machine_notes: list[str] = []
        #: The user the worker runs as after start (``None``: the parent's).
        self.drop: Drop | None = None
        #: Host paths the bwrap level hides besides home and the rlm folders (the corpus roots).
        self.hide_paths: tuple[str, ...] = ()
        #: Ctrl-C during ``execute``: with a grace above 0 (``rlm chat``), the block is interrupted in
        #: the worker and the worker kept when it answers within that many seconds (else restarted);
        #: with 0 (``rlm ask``) the KeyboardInterrupt simply propagates and the run ends.
        self.interrupt_grace_s = 0.0
        #: Why the REPL state was lost at the last Ctrl-C (``None``: kept, or none happened).
        self.interrupt_lost: str | None = None
        self._worker_ns_pid: int | None = None
        self._closed = False
        #: The scratch folder is on the host disk (no tmpfs), its size watched by a thread.
        self.scratch_on_disk = False
        self._watch: threading.Thread | None = None
        self._quota_hit: str | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the worker and wait until it has loaded the corpus.

        Raises:
            SandboxError: the worker failed to start or load within ``START_TIMEOUT`` seconds.
        """
        self.notes = []
        self.machine_notes = []
        self._closed = False
        self._busy = False
        try:
            self._start()
        except BaseException:
            self.close()  # a failed start leaves no worker and no scratch folder
            raise

    def _start(self) -> None:
        self.notes += reaper.sweep()  # what a killed rlm left (once per process)
        drop = self.prepare()
        if drop and drop.uid != os.geteuid() and os.path.exists(self.socket_path):
            note = share_relay(self.socket_path, drop.gid)
            if note:
                self.machine_notes.append(f"sandbox: {note}")
        p_read, c_write = os.pipe()
        c_read, p_write = os.pipe()
        try:
            self.launch(c_read, c_write, env={"PYTHONIOENCODING": "utf-8", "MALLOC_ARENA_MAX": "1"})
        except OSError as exc:
            for fd in (p_read, c_write, c_read, p_write):
                os.close(fd)
            raise SandboxError(f"cannot start the REPL worker: {exc}") from None
        os.close(c_read)
        os.close(c_write)
        self._rfd, self._wfd = p_read, p_write
        os.set_blocking(self._wfd, False)
        inside = self._inside_paths()
        config: dict[str, Any] = {
            "type": "load", "socket": inside["socket"], "token": self.token, **self.confinement(),
            "cwd": None if self.level.namespaced else str(self.scratch),
            "index_file": inside.get("index"), "context_file": inside.get("context"), "data_file": inside.get("data"),
            "context_text": self.spec.context_text, "sub_call_threads": self.limits.sub_call_threads,
            "scratch_tmpfs": self.limits.file_bytes if self.level.confined_on_host and can_mount() else None,
            "private_ipc": self.level.confined_on_host and can_mount(),
        }
        deadline = time.monotonic() + START_TIMEOUT
        try:
            protocol.write_message_fd(self._wfd, config, deadline)
            reply = protocol.read_message_fd(self._rfd, protocol.MAX_CONTROL_BYTES, deadline)
        except (OSError, protocol.ProtocolError) as exc:
            self._kill()
            detail = self.stderr_tail.decode("utf-8", "replace").strip().splitlines()[-3:]
            raise SandboxError(f"the REPL worker ({self.level}) failed to start: {exc}"
                               + (f": {' / '.join(detail)}" if detail else "")) from None
        if reply.get("type") != "ready":
            self._kill()
            if reply.get("kind") == "memory_limit":
                raise UsageError(str(reply.get("error")))
            raise SandboxError(f"the REPL worker ({self.level}) failed to start: {reply.get('error', reply)}")
        self.machine_notes += [str(n) for n in reply.get("notes", [])]
        pid = reply.get("pid")
        self._worker_ns_pid = pid if isinstance(pid, int) and not isinstance(pid, bool) else None
        self.scratch_on_disk = self.level.confined_on_host and reply.get("scratch") != "tmpfs"
        if self.scratch_on_disk:  # no tmpfs to bound it: its size is watched
            self._watch = threading.Thread(target=self._watch_scratch, args=(self.proc, self._drain_stop),
                                           name="sandbox-scratch", daemon=True)
            self._watch.start()

    # -- the start path, shared with the document decoder (corpus.decode) -------------------------
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
        self.stderr_tail = b""
        self._drain_stop = threading.Event()
        self._drain = threading.Thread(target=self._drain_stderr, args=(proc, self._drain_stop), name=name,
                                       daemon=True)
        self._drain.start()
        return proc

    def close(self) -> None:
        """Kill the worker (and every process it started) and delete the scratch folder. A block
        running in another thread then fails (``SandboxError``) instead of restarting the worker.

        An idle worker is asked to shut down first (0.5 s); one still running a block is not.
        """
        self._closed = True
        if self.proc is not None and self.proc.poll() is None and not self._busy:
            try:
                protocol.write_message_fd(self._wfd, {"type": "shutdown"}, time.monotonic() + 0.5)
                self.proc.wait(timeout=0.5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.stop()

    def stop(self) -> None:
        """Kill the process (and every process it started) and delete the scratch folder, without
        asking it to shut down first; the sandbox is closed (no restart)."""
        self._closed = True
        self._kill()
        if self.scratch is not None:
            remove_tree(self.scratch)
            self.scratch = None

    def _kill(self) -> None:
        if self.proc is not None:
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
            self._drain_stop.set()
            self.proc = None
        for fd in (self._rfd, self._wfd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._rfd = self._wfd = -1

    def restart(self) -> None:
        """Kill and start a fresh worker (REPL variables are lost; ``context`` is reloaded).

        Raises:
            SandboxError: the new worker failed to start, or the sandbox was closed.
        """
        if self._closed:
            raise SandboxError("the REPL worker was stopped")
        self._kill()
        if self.scratch is not None:
            remove_tree(self.scratch)
            self.scratch = None
        self.restarts += 1
        self.start()

    # -- running code ----------------------------------------------------------------------------
    def execute(self, code: str, cell: int = 0, *, timeout: float | None = None,
                map_output: bool = True) -> ExecResult:
        """Run ``code`` in the REPL and wait at most ``timeout`` seconds (default ``cell_timeout``)
        for its whole result. ``map_output=False``: rlm's own block, whose output is no source (it
        does not wait for the worker's line index).

        A timeout, a crash or a malformed control frame kills and restarts the worker and returns
        ``lost`` set (the model is told; the run goes on).

        Raises:
            SandboxError: the worker could not be restarted.
        """
        started = time.monotonic()
        limit = self.cell_timeout if timeout is None else max(0.1, min(timeout, self.cell_timeout))
        deadline = started + limit
        req_id = secrets.token_hex(8)
        self._busy = True
        try:
            if self.proc is None:
                raise protocol.ProtocolError("no worker")
            msg: dict[str, Any] = {"type": "exec", "code": code, "cell": cell, "id": req_id}
            if not map_output:
                msg["map"] = False
            protocol.write_message_fd(self._wfd, msg, deadline)
            while True:  # frames answering another request (stale or forged by model code) are dropped
                reply = protocol.read_message_fd(self._rfd, protocol.MAX_CONTROL_BYTES, deadline)
                if reply.get("id") == req_id:
                    break
            result = parse_result(reply)
            self._busy = False
        except KeyboardInterrupt:
            if self.interrupt_grace_s > 0:
                self._interrupt_block(req_id)
            raise
        except TimeoutError:
            lost = timeout_note(limit, self.cell_timeout)
            printed = self._printed_before_kill(req_id)
            if printed is not None:
                self.restart()
                lost += printed_note(printed.output, printed.output_chars)
                return ExecResult(printed.output, printed.output_chars, False, elapsed_s=time.monotonic() - started,
                                  lost=lost, helpers=printed.helpers, sources=printed.sources)
        except (OSError, protocol.ProtocolError) as exc:
            lost = self._failure(exc)
        else:
            return result
        self.restart()
        return ExecResult("", 0, False, elapsed_s=time.monotonic() - started, lost=lost)

    def _printed_before_kill(self, req_id: str) -> ExecResult | None:
        """What block ``req_id``, out of time, printed: the worker is sent SIGINT (the block ends
        with a KeyboardInterrupt and its result frame carries its output) and given
        :data:`TIMEOUT_GRACE_S` to answer; ``None`` when it does not (a block that catches the
        interrupt, or stuck in C code). The worker is restarted by the caller either way."""
        pid = self._worker_pid()
        if pid is None or self.proc is None or self.proc.poll() is not None:
            return None
        try:
            os.kill(pid, signal.SIGINT)
            deadline = time.monotonic() + TIMEOUT_GRACE_S
            while True:
                reply = protocol.read_message_fd(self._rfd, protocol.MAX_CONTROL_BYTES, deadline)
                if reply.get("id") == req_id:
                    result = parse_result(reply)
                    break
        except (TimeoutError, OSError, protocol.ProtocolError):
            return None
        output = result.output
        cut = output.rfind("Traceback (most recent call last):")
        if cut >= 0 and output.rstrip().endswith("KeyboardInterrupt"):  # the interrupt's own traceback
            result.output_chars -= len(output) - cut
            result.output = output[:cut]
        return result if result.output.strip() else None

    def check(self) -> WorkerCheck:
        """What earlier blocks left in the worker that could rewrite later answers: its own code
        changed (``integrity.Integrity``), hooks, threads, signal handlers or timers left to run
        during later code (``hooks.Hooks``), processes left running (:func:`left_running`), or no
        valid answer to the check within 10 s. An empty (false) :class:`WorkerCheck`: nothing,
        as far as it can tell.

        Call this between the questions of a session and restart the worker when it is true.
        """
        if self.proc is None or self.proc.poll() is not None:
            return WorkerCheck()  # a worker that is not running is started fresh anyway
        req_id = secrets.token_hex(8)
        deadline = time.monotonic() + 10.0
        try:
            protocol.write_message_fd(self._wfd, {"type": "check", "id": req_id}, deadline)
            while True:
                reply = protocol.read_message_fd(self._rfd, protocol.MAX_CONTROL_BYTES, deadline)
                if reply.get("id") == req_id:
                    break
        except (OSError, protocol.ProtocolError):
            return WorkerCheck(unanswered=True)
        changed, hooks = reply.get("changed"), reply.get("hooks")
        if reply.get("type") != "checked" or not isinstance(changed, list) or not isinstance(hooks, list):
            return WorkerCheck(unanswered=True)
        worker = self._worker_pid()
        left = left_running(self.proc.pid, worker, self._started_ticks) if worker is not None else []
        hooks = hooks[:20] + ([f"{len(left)} process{'es' if len(left) > 1 else ''} left running"] if left else [])
        return WorkerCheck([str(c)[:120] for c in changed[:20]], [str(h)[:120] for h in hooks])

    def _interrupt_block(self, req_id: str) -> None:
        """Ctrl-C while block ``req_id`` runs: send the worker SIGINT (its block ends with a
        KeyboardInterrupt) and read up to that block's answer, so the control channel is in step
        again and the REPL keeps its variables. When no answer comes within
        ``interrupt_grace_s`` (or Ctrl-C is pressed again) the worker is restarted instead, and
        ``interrupt_lost`` says so."""
        self.interrupt_lost = None
        pid = self._worker_pid()
        try:
            if pid is None:
                raise ProcessLookupError
            os.kill(pid, signal.SIGINT)
            deadline = time.monotonic() + self.interrupt_grace_s
            while True:
                reply = protocol.read_message_fd(self._rfd, protocol.MAX_CONTROL_BYTES, deadline)
                if reply.get("id") == req_id:
                    self._busy = False
                    return
        except (KeyboardInterrupt, TimeoutError, OSError, protocol.ProtocolError):
            pass
        self.interrupt_lost = "the REPL worker did not stop at Ctrl-C and was restarted"
        try:
            self.restart()
        except SandboxError as exc:
            self.interrupt_lost = f"the REPL worker did not stop at Ctrl-C and could not be restarted: {exc}"

    def _worker_pid(self) -> int | None:
        """The pid of the worker's Python process as this process sees it: the started process
        itself, or under bwrap the descendant whose innermost PID-namespace pid is the one the
        worker reported (``NSpid`` in ``/proc/PID/status``)."""
        if self.proc is None:
            return None
        if not self.level.namespaced:
            return self.proc.pid
        want = self._worker_ns_pid
        if want is None:
            return None
        return ns_descendant(self.proc.pid, want)

    def _watch_scratch(self, proc: subprocess.Popen[bytes], stop: threading.Event) -> None:
        """Kill the worker when its scratch folder on the disk (no tmpfs could be mounted) holds
        more than ``limits.file_bytes`` (or :data:`MAX_SCRATCH_ENTRIES` entries), counting the
        deleted files its processes still hold open; checked every :data:`SCRATCH_POLL_S` s (or
        four times as long as a look takes), so a fast disk may take a little more first."""
        scratch, quota = self.scratch, self.limits.file_bytes
        pause = SCRATCH_POLL_S
        while scratch is not None and not stop.wait(pause):
            began = time.monotonic()
            used, entries = scratch_usage(scratch, proc.pid)
            pause = max(SCRATCH_POLL_S, 4 * (time.monotonic() - began))  # a big tree is walked less often
            if used > quota or entries > MAX_SCRATCH_ENTRIES:
                self._quota_hit = (f"the scratch folder grew past its limit of {format_bytes(quota)} "
                                   f"({format_bytes(used)}, {entries:,} entries) and the worker was killed")
                for kill in (os.killpg, os.kill):
                    try:
                        kill(proc.pid, signal.SIGKILL)
                    except OSError:
                        pass
                return

    def _failure(self, exc: BaseException) -> str:
        """Why the control channel failed: the worker died (how), or it broke the protocol."""
        if self.proc is None:
            return "the REPL worker was not running"
        if self._quota_hit:
            hit, self._quota_hit = self._quota_hit, None
            return hit
        try:
            code = self.proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            return f"the REPL worker broke the control protocol ({exc}) and was killed"
        if self._drain is not None:
            self._drain.join(timeout=1.0)
        tail = self.stderr_tail.decode("utf-8", "replace").strip().splitlines()
        reason = exit_reason(code)
        return f"the REPL worker crashed ({reason}" + (f"; last stderr: {tail[-1][:200]}" if tail else "") + ")"

    def _drain_stderr(self, proc: subprocess.Popen[bytes], stop: threading.Event) -> None:
        """Keep the last 8 KiB of the worker's stderr; ends at EOF or when ``stop`` is set."""
        assert proc.stderr is not None
        fd = proc.stderr.fileno()
        try:
            import select

            while not stop.is_set():
                ready, _, _ = select.select([fd], [], [], 0.25)
                if not ready:
                    continue
                data = os.read(fd, 65536)
                if not data:
                    break
                self.stderr_tail = (self.stderr_tail + data)[-8192:]
        except (OSError, ValueError):
            pass
        finally:
            proc.stderr.close()

    # -- commands per level ----------------------------------------------------------------------
    def _corpus_files(self) -> dict[str, str]:
        """The bundle's files the worker loads (host paths by ``argv.INSIDE_CORPUS`` key)."""
        files: dict[str, str] = {}
        if self.spec.index_file and self.spec.context_file:
            files["index"] = str(self.spec.index_file)
            files["context"] = str(self.spec.context_file)
            if self.spec.data_file:
                files["data"] = str(self.spec.data_file)
        return files

    def _inside_paths(self) -> dict[str, str]:
        return argv.inside_paths(self.level, self.socket_path, self._corpus_files())

    def landlock_policy(self) -> dict[str, Any] | None:
        """The Landlock policy the worker applies (``argv.landlock_policy``; ``None``: none)."""
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
                               scratch=self.scratch, socket_path=self.socket_path, corpus=self._corpus_files(),
                               file_bytes=self.limits.file_bytes, drop=self.drop, hide_paths=self.hide_paths)
