"""Start and drive the REPL worker at an isolation level: ``bwrap``, ``sandbox-exec``, ``process``
or ``none``. The worker module and protocol are the same at every level; only the command that
starts it differs (``sandbox.argv``). What each level does is said in ``sandbox.levels``.

:class:`Sandbox` owns one worker's life: its start (the ``load`` message, on the start path of
``sandbox.spawning``: the scrubbed environment, the user it runs as), each code block's exchange
on the control channel with its timeout, Ctrl-C and integrity check, its restart after a timeout
or crash, and its stop. Spawning and the kill with everything it started are
``sandbox.spawning``; the threads that watch the process (its stderr, its scratch folder on the
disk) are ``sandbox.watchers``.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from typing import Any

from rlm_cli import protocol
from rlm_cli.errors import SandboxError, UsageError
from rlm_cli.sandbox import argv, reaper
from rlm_cli.sandbox.level import Level
from rlm_cli.sandbox.probes import can_mount
from rlm_cli.sandbox.processes import exit_reason, left_running, ns_descendant
from rlm_cli.sandbox.results import ExecResult, WorkerCheck, parse_result, printed_note, timeout_note
from rlm_cli.sandbox.spawning import ConfinedProcess, Limits, WorkerSpec
from rlm_cli.sandbox.users import share_relay
from rlm_cli.sandbox.watchers import ScratchWatch

__all__ = ["START_TIMEOUT", "TIMEOUT_GRACE_S", "Limits", "Sandbox", "WorkerSpec"]

#: Seconds the worker gets to start and load the corpus.
START_TIMEOUT = 60.0
#: Seconds a block out of time gets, after SIGINT, to hand over what it printed before it is killed.
TIMEOUT_GRACE_S = 1.0


class Sandbox(ConfinedProcess):
    """One REPL worker process and its scratch folder: its start (through the start path of
    ``spawning.ConfinedProcess``), each code block's exchange on the control channel, Ctrl-C and
    the integrity check, its restart after a timeout or crash, and its stop.

    Use as a context manager; ``close()`` kills the worker with everything it started and
    deletes the scratch folder. Not thread-safe: one ``execute`` at a time. The worker dies with
    the *thread* that started (or, after a timeout or crash, restarted) it (Linux parent-death
    signal, also bwrap's ``--die-with-parent``): drive a sandbox from a thread that outlives it.
    """

    def __init__(self, level: Level | str, spec: WorkerSpec, *, socket_path: str, token: str,
                 limits: Limits | None = None, cell_timeout: float = 120.0) -> None:
        super().__init__(level, spec, socket_path=socket_path, limits=limits)
        self.token = token
        self.cell_timeout = cell_timeout
        self._wfd = self._rfd = -1
        #: A code block is running (or was, when Ctrl-C cut ``execute`` short): close() kills at once.
        self._busy = False
        self.restarts = 0
        #: Notes of the last start: what happened (what an earlier, killed rlm left), and what it
        #: found of this machine, the same every run (shown once: ``sandbox.notices``).
        self.notes: list[str] = []
        self.machine_notes: list[str] = []
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
        self._watch: ScratchWatch | None = None

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
            self.kill()
            detail = self.stderr_tail.decode("utf-8", "replace").strip().splitlines()[-3:]
            raise SandboxError(f"the REPL worker ({self.level}) failed to start: {exc}"
                               + (f": {' / '.join(detail)}" if detail else "")) from None
        if reply.get("type") != "ready":
            self.kill()
            if reply.get("kind") == "memory_limit":
                raise UsageError(str(reply.get("error")))
            raise SandboxError(f"the REPL worker ({self.level}) failed to start: {reply.get('error', reply)}")
        self.machine_notes += [str(n) for n in reply.get("notes", [])]
        pid = reply.get("pid")
        self._worker_ns_pid = pid if isinstance(pid, int) and not isinstance(pid, bool) else None
        self.scratch_on_disk = self.level.confined_on_host and reply.get("scratch") != "tmpfs"
        if self.scratch_on_disk and self.proc is not None and self.scratch is not None:  # no tmpfs: watched
            self._watch = ScratchWatch(self.proc, self.scratch, self.limits.file_bytes)
            self._watch.start()

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
        super().stop()

    def kill(self) -> None:
        """Kill the worker with everything it started (``ConfinedProcess.kill``), stop watching its
        scratch folder and close the control channel."""
        if self._watch is not None:
            self._watch.stop()
            self._watch = None
        super().kill()
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
        self.kill()
        self.remove_scratch()
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
            result = parse_result(self._reply_to(req_id, deadline))
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
            result = parse_result(self._reply_to(req_id, time.monotonic() + TIMEOUT_GRACE_S))
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
            reply = self._reply_to(req_id, deadline)
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
            self._reply_to(req_id, time.monotonic() + self.interrupt_grace_s)
            self._busy = False
            return
        except (KeyboardInterrupt, TimeoutError, OSError, protocol.ProtocolError):
            pass
        self.interrupt_lost = "the REPL worker did not stop at Ctrl-C and was restarted"
        try:
            self.restart()
        except SandboxError as exc:
            self.interrupt_lost = f"the REPL worker did not stop at Ctrl-C and could not be restarted: {exc}"

    def _reply_to(self, req_id: str, deadline: float) -> dict[str, Any]:
        """The next control frame answering request ``req_id``, read by ``deadline`` (monotonic
        seconds); frames answering another request (stale, or forged by model code) are dropped.

        Raises:
            TimeoutError: none came by ``deadline``.
            OSError, protocol.ProtocolError: the channel broke.
        """
        while True:
            reply = protocol.read_message_fd(self._rfd, protocol.MAX_CONTROL_BYTES, deadline)
            if reply.get("id") == req_id:
                return reply

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

    def _failure(self, exc: BaseException) -> str:
        """Why the control channel failed: the worker died (how), or it broke the protocol."""
        if self.proc is None:
            return "the REPL worker was not running"
        hit = self._watch.take_hit() if self._watch is not None else None
        if hit:
            return hit
        try:
            code = self.proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            return f"the REPL worker broke the control protocol ({exc}) and was killed"
        self._stderr.join(timeout=1.0)
        tail = self.stderr_tail.decode("utf-8", "replace").strip().splitlines()
        reason = exit_reason(code)
        return f"the REPL worker crashed ({reason}" + (f"; last stderr: {tail[-1][:200]}" if tail else "") + ")"

    def _inside_paths(self) -> dict[str, str]:
        return argv.inside_paths(self.level, self.socket_path, self.corpus_files())
