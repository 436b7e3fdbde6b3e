"""The threads that watch a started sandbox process: :class:`StderrTail` keeps the end of its
stderr (the reason a start or a crash reports), :class:`ScratchWatch` kills it when its scratch
folder on the host disk (no tmpfs could be mounted) grows past its limit.

Each runs as a daemon thread with a stop event of its own; ``spawning.ConfinedProcess`` and
``launcher.Sandbox`` start them with the process and stop them when they kill it.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time
from pathlib import Path

from rlm_cli.sandbox.processes import MAX_SCRATCH_ENTRIES, format_bytes, scratch_usage

#: Bytes of a process's stderr kept (its last lines say why it failed).
STDERR_TAIL_BYTES = 8192
#: Seconds between two looks at the size of a scratch folder on the disk (no tmpfs could be
#: mounted; ``processes.MAX_SCRATCH_ENTRIES`` is the most entries it may hold).
SCRATCH_POLL_S = 0.1


class StderrTail:
    """The last :data:`STDERR_TAIL_BYTES` of one process's stderr (:attr:`tail`), read by a thread
    from :meth:`start` until end of file or :meth:`stop`."""

    def __init__(self) -> None:
        self.tail = b""
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self, proc: subprocess.Popen[bytes], name: str) -> None:
        """Start reading ``proc``'s stderr (a pipe) in a daemon thread called ``name``; :attr:`tail`
        starts empty."""
        self.tail = b""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(proc, self._stop), name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop reading (within a quarter of a second); what was read stays in :attr:`tail`."""
        self._stop.set()

    def join(self, timeout: float) -> None:
        """Wait at most ``timeout`` seconds for the reader to reach the end of the stream."""
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def _read(self, proc: subprocess.Popen[bytes], stop: threading.Event) -> None:
        """Keep the last bytes of ``proc``'s stderr; ends at EOF or when ``stop`` is set."""
        assert proc.stderr is not None
        fd = proc.stderr.fileno()
        try:
            while not stop.is_set():
                ready, _, _ = select.select([fd], [], [], 0.25)
                if not ready:
                    continue
                data = os.read(fd, 65536)
                if not data:
                    break
                self.tail = (self.tail + data)[-STDERR_TAIL_BYTES:]
        except (OSError, ValueError):
            pass
        finally:
            proc.stderr.close()


class ScratchWatch:
    """A thread that kills ``proc`` (its session first, then itself) when ``scratch``, on the
    host disk, holds more than ``quota`` bytes or ``processes.MAX_SCRATCH_ENTRIES`` entries,
    counting the deleted files its processes still hold open; :meth:`take_hit` then says so."""

    def __init__(self, proc: subprocess.Popen[bytes], scratch: Path, quota: int) -> None:
        self._stop = threading.Event()
        self._hit: str | None = None
        self._thread = threading.Thread(target=self._watch, args=(proc, scratch, quota), name="sandbox-scratch",
                                        daemon=True)

    def start(self) -> None:
        """Start watching."""
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (at the next look)."""
        self._stop.set()

    def take_hit(self) -> str | None:
        """Why the process was killed, once (``None``: it was not, or this was already taken)."""
        hit, self._hit = self._hit, None
        return hit

    def _watch(self, proc: subprocess.Popen[bytes], scratch: Path, quota: int) -> None:
        """Checked every :data:`SCRATCH_POLL_S` s (or four times as long as a look takes), so a
        fast disk may take a little more first."""
        pause = SCRATCH_POLL_S
        while not self._stop.wait(pause):
            began = time.monotonic()
            used, entries = scratch_usage(scratch, proc.pid)
            pause = max(SCRATCH_POLL_S, 4 * (time.monotonic() - began))  # a big tree is walked less often
            if used > quota or entries > MAX_SCRATCH_ENTRIES:
                self._hit = (f"the scratch folder grew past its limit of {format_bytes(quota)} "
                             f"({format_bytes(used)}, {entries:,} entries) and the worker was killed")
                for kill in (os.killpg, os.kill):
                    try:
                        kill(proc.pid, signal.SIGKILL)
                    except OSError:
                        pass
                return
