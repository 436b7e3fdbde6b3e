"""The standard streams as a Unix command finds them: closed (``>&-``, ``2>&-``, ``<&-``), full
(``> /dev/full``, ``2> /dev/full``) or a pipe whose reader went away (``| true``, ``| head -1``).

What rlm does with each, decided here for every command (``commands.exits`` applies it):

* a closed descriptor 0, 1 or 2 is reopened on ``/dev/null`` before anything else, so no file or
  socket rlm opens later can take its number (a relay socket on fd 2 sent the diagnostics into
  it) and Python's ``sys.stdin``/``sys.stdout``/``sys.stderr`` are never ``None``;
* a closed stdout is a usage error before any work (exit 2: there is nowhere to write the
  answer), unless ``--output FILE`` takes the answer; a closed stderr or stdin only loses what
  would have gone there (as for ``ls 2>&-``);
* a pipe whose reader is gone, at the start or while rlm works, stops rlm quietly with exit 141
  (128 + SIGPIPE, as a shell reports a command a closed pipe stopped), before it spends another
  model call: :class:`ReaderWatch` polls the pipe and interrupts the run;
* a full stderr drops the diagnostics and the run goes on (:class:`TolerantStderr`); a full
  stdout is one error line when the answer is written (``output.answer.write_text``).
"""

from __future__ import annotations

import errno
import os
import select
import signal
import stat
import sys
import threading
from types import FrameType
from typing import IO, Any

#: Seconds between two looks at stdout's and stderr's pipes for a reader that went away.
POLL_S = 0.2
_STD_NAMES = ("stdin", "stdout", "stderr")


def reopen_closed() -> set[str]:
    """Reopen each closed standard descriptor (0, 1, 2) on ``/dev/null`` and give Python a stream
    for it; the names (``stdin``, ``stdout``, ``stderr``) of those that were closed."""
    closed: set[str] = set()
    for fd, name in enumerate(_STD_NAMES):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        closed.add(name)
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, "r" if fd == 0 else "w", encoding="utf-8", errors="replace",  # noqa: SIM115
                                    closefd=False))
    return closed


def reader_gone(fd: int) -> bool:
    """Whether ``fd`` is a pipe or socket whose reading end is closed (``poll`` reports
    ``POLLERR``/``POLLHUP`` on it); ``False`` for files, terminals and anything poll cannot tell."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)) or not hasattr(select, "poll"):
        return False
    poller = select.poll()
    poller.register(fd, 0)  # POLLERR and POLLHUP are always reported
    try:
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except OSError:
        return False


#: The signal :class:`ReaderWatch` interrupts the main thread with: a private one, so that it works
#: where SIGINT is ignored (a background job of a script: ``rlm ask ... | head &``).
WATCH_SIGNAL = signal.SIGUSR2


def _reader_gone_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # handled as a Ctrl-C, and ``ReaderWatch.fired`` makes it exit 141


class ReaderWatch:
    """A daemon thread that watches stdout and stderr (when they are pipes or sockets) for a
    reader that went away, and then interrupts the main thread (a real signal, :data:`WATCH_SIGNAL`,
    so a blocking call returns at once, whatever SIGINT's disposition); :attr:`fired` tells
    ``commands.exits`` to end with exit 141, quietly."""

    def __init__(self) -> None:
        self.fired = threading.Event()
        self._fds = [fd for fd in (1, 2) if _is_pipe(fd)]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start watching (nothing to do when neither stream is a pipe). Call from the main thread:
        it installs the handler of :data:`WATCH_SIGNAL`."""
        if self._fds and self._thread is None:
            signal.signal(WATCH_SIGNAL, _reader_gone_interrupt)
            self._thread = threading.Thread(target=self._run, name="rlm-reader-watch", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop watching (the answer is being written: a reader that leaves now gets EPIPE)."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            if any(reader_gone(fd) for fd in self._fds):
                self.fired.set()
                os.kill(os.getpid(), WATCH_SIGNAL)
                return


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class TolerantStderr:
    """``sys.stderr`` that loses what it cannot write (a full disk, ``2> /dev/full``, an I/O
    error) instead of failing the run; a reader that went away still raises ``BrokenPipeError``
    (exit 141). Everything else is the wrapped stream's."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        #: Whether a write was lost.
        self.lost = False

    def write(self, text: str) -> int:
        """Write ``text``, or lose it (see the class docstring)."""
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            return self._lose(exc, len(text))

    def flush(self) -> None:
        """Flush, or lose what was buffered."""
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            self._lose(exc, 0)

    def _lose(self, exc: OSError, n: int) -> int:
        if exc.errno == errno.EPIPE:
            raise BrokenPipeError(*exc.args) from None
        self.lost = True
        # From now on stderr is /dev/null: what the layers below still buffer drains there, so
        # no later write or the flush at exit fails again.
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)
            self._stream.flush()
        except (OSError, ValueError):
            pass
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
