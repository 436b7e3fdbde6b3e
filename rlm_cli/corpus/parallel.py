"""Reading, chunking and counting the files of a large build in worker processes.

A build that reads more than ``build.EXACT_TOKENS_BYTES`` of new or changed files (a sampled build:
it counts the tokens of 1 chunk in ``indexing.sample_every``) spends its time in Python: reading and
decoding each file, chunking it, hashing each chunk, parsing structured files. One interpreter
runs that on one core, so :func:`read_many` hands it to a pool of processes, one per CPU: each
reads a batch of files with ``loader.read_source`` and returns, per file, what the store needs to
write it (the UTF-8 bytes, the counts, the chunks with the counted chunks' tokens, the parsed
payload) and the calls the file made on its ``LoadReport``, which the store replays in order, so
warnings, skips and counts are those of a sequential build. Results come back in the order of the
files; at most a few batches are in flight, which bounds the memory they hold.

Workers are fresh interpreters (``sys.executable -c``; forking a process that runs threads is
unsafe, and ``multiprocessing``'s spawn would run the caller's ``__main__`` again) talking
length-prefixed pickles over their stdin and stdout; they ignore SIGINT (rlm stops them) and end
when their stdin closes, so none outlives rlm.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import struct
import subprocess
import sys
from collections import deque
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import nofollow
from rlm_cli.corpus.loader import LoadReport, SourceFile

#: Files (and bytes of them) per task sent to a worker.
BATCH_FILES, BATCH_BYTES = 64, 4 * 1024 * 1024
#: The size asked for the pipe a worker answers on (Linux; at most ``/proc/sys/fs/pipe-max-size``,
#: 1 MiB by default): 16 times fewer wake-ups than the default 64 KiB for the 4 MiB a batch sends.
PIPE_BYTES = 1 << 20
#: Tasks in flight per worker: enough to keep it busy while rlm writes the results.
WINDOW_PER_WORKER = 3


@dataclass
class Read:
    """One file read by a worker. ``data`` is ``None`` when it was skipped (``events`` say why);
    otherwise the file's UTF-8 text bytes, its characters, lines, SHA-1, character width, decoding
    notes, kind, encoded structured payload and summary (``None`` for other files), and ``spans``
    (``indexing.sampled_spans``) whose counted chunks' tokens are ``counts``, in order."""

    display: str
    data: bytes | None = None
    chars: int = 0
    lines: int = 0
    sha1: str = ""
    width: int = 1
    notes: str = ""
    kind: str = ""
    payload: bytes | None = None
    dmeta: dict[str, Any] | None = None
    spans: list[list[Any]] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    #: ``("skip", reason, warning, path)``, ``("decoded", notes)`` and ``("warn", text)``, in order.
    events: list[tuple[Any, ...]] = field(default_factory=list)

    def replay(self, report: LoadReport) -> None:
        """Make on ``report`` the calls the file made on its own report in the worker."""
        for ev in self.events:
            if ev[0] == "skip":
                report.skip(ev[1], ev[2], path=ev[3])
            elif ev[0] == "decoded":
                report.count_decoded(ev[1])
            else:
                report.warnings.append(ev[1])

    def counted(self) -> Counted:
        """The counted chunks' tokens, answered like the store's token-counting jobs."""
        return Counted(self.counts)


class Counted:
    """Token counts already made (by a worker), with the ``result()`` of a finished future (a
    real ``Future`` per file costs a lock and a condition: 0.5 s on 16,000 files)."""

    __slots__ = ("counts",)

    def __init__(self, counts: list[int]) -> None:
        self.counts = counts

    def result(self) -> list[Any]:
        """The counts."""
        return self.counts


class _Events(list):  # type: ignore[type-arg]
    """A report's ``warnings`` that also records each warning appended to it as an event."""

    def __init__(self, events: list[tuple[Any, ...]]) -> None:
        super().__init__()
        self._events = events

    def append(self, text: Any) -> None:
        self._events.append(("warn", text))
        super().append(text)


class _Recorder(LoadReport):
    """A ``LoadReport`` that records the calls made on it (see :meth:`Read.replay`)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[Any, ...]] = []
        self.warnings = _Events(self.events)

    def skip(self, reason: str, warning: str | None = None, *, path: str | None = None) -> None:
        self.events.append(("skip", reason, warning, path))
        super().skip(reason, warning, path=path)

    def count_decoded(self, notes: str) -> None:
        self.events.append(("decoded", notes))
        super().count_decoded(notes)


def read_batch(batch: list[SourceFile], options: CorpusOptions, every: int) -> list[Read]:
    """Read, decode, chunk and sample-count ``batch`` (runs in a worker process), counting the
    tokens of 1 chunk in ``every`` (``indexing.sample_every``)."""
    from rlm_cli.corpus.tokens import encoding

    enc = encoding()
    with nofollow.kept():  # (the folders on the way are opened once for the batch)
        return [_read_one(sf, options, every, enc) for sf in batch]


def _read_one(sf: SourceFile, options: CorpusOptions, every: int, enc: Any) -> Read:
    """One file of :func:`read_batch` (``enc``: the tiktoken encoding counting the sampled chunks)."""
    from rlm_cli.corpus.indexing import parse_data, sampled_spans
    from rlm_cli.corpus.loader import read_source
    from rlm_cli.corpus.model import char_width, sha1_hex

    rec = _Recorder()
    decoded = read_source(sf, options, rec)
    if decoded is None:
        return Read(sf.display, events=rec.events)
    text = decoded.text
    payload, dmeta = parse_data(decoded)
    spans = sampled_spans(text, sf.display, options.chunk_tokens, every, decoded.data)
    counts = [len(enc.encode_ordinary(text[sp[0]:sp[1]])) for sp in spans if sp[6]]
    lines = spans[-1][3] if spans else 1  # the last chunk ends on the last line
    return Read(sf.display, decoded.data, len(text), lines, sha1_hex(decoded.data), char_width(text), decoded.notes,
                decoded.kind, None if payload is None else bytes(payload), dmeta, spans, counts, rec.events)


def _batches(sources: list[SourceFile]) -> Iterator[list[SourceFile]]:
    batch: list[SourceFile] = []
    size = 0
    for sf in sources:
        batch.append(sf)
        size += sf.size
        if len(batch) >= BATCH_FILES or size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def read_many(sources: list[SourceFile], options: CorpusOptions, processes: int,
              every: int) -> Generator[Read, None, None]:
    """:class:`Read` of each of ``sources``, in order, from ``processes`` worker processes (which
    count the tokens of 1 chunk in ``every``).

    Batch ``k`` goes to worker ``k % processes`` and every worker answers its batches in order, so
    the results are read back in the order of the files. Closing the generator (an error or
    Ctrl-C in the caller) kills the workers at once.

    Raises:
        ParallelReadError: a worker died, or reading a file raised in it (a bug: ``read_source``
            reports unreadable files instead of raising).
    """
    workers = [_start_worker() for _ in range(max(1, processes))]
    pending: deque[subprocess.Popen[bytes]] = deque()
    finished = False
    try:
        for k, batch in enumerate(_batches(sources)):
            worker = workers[k % len(workers)]
            _send(worker, (batch, options, every))
            pending.append(worker)
            if len(pending) >= len(workers) * WINDOW_PER_WORKER:
                yield from _receive(pending.popleft())
        while pending:
            yield from _receive(pending.popleft())
        finished = True
    finally:
        for worker in workers:
            if not finished and worker.poll() is None:
                worker.kill()
            if worker.stdin is not None:
                with contextlib.suppress(OSError):
                    worker.stdin.close()
            worker.wait()
            if worker.stdout is not None:
                worker.stdout.close()


class ParallelReadError(RuntimeError):
    """A worker process of :func:`read_many` failed (the message has its error)."""


_HEADER = struct.Struct(">Q")


def _start_worker() -> subprocess.Popen[bytes]:
    """A worker: this interpreter running :func:`serve`, with rlm's package importable."""
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = f"import sys; sys.path.insert(0, {package_root!r}); from rlm_cli.corpus.parallel import serve; serve()"
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    with contextlib.suppress(OSError, AttributeError, ImportError):  # Linux only; elsewhere the pipe stays as it is
        import fcntl

        fcntl.fcntl(proc.stdout.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    return proc


def _send(worker: subprocess.Popen[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    assert worker.stdin is not None
    try:
        worker.stdin.write(_HEADER.pack(len(data)) + data)
        worker.stdin.flush()
    except OSError as exc:
        raise ParallelReadError(f"a corpus reader process stopped ({exc})") from None


def _receive(worker: subprocess.Popen[bytes]) -> list[Read]:
    assert worker.stdout is not None
    head = worker.stdout.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise ParallelReadError(f"a corpus reader process died (exit status {worker.wait()})")
    size = _HEADER.unpack(head)[0]
    ok, value = pickle.loads(worker.stdout.read(size))  # noqa: S301 - our own child process
    if not ok:
        raise ParallelReadError(f"reading the corpus failed in a reader process: {value}")
    return value  # type: ignore[no-any-return]


def serve() -> None:
    """The worker's loop: read ``(batch, options, every)`` messages on stdin, answer each on stdout
    with ``(True, [Read])`` or ``(False, error text)``; end at EOF. Ignores SIGINT (Ctrl-C is
    rlm's to handle: it stops the workers)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from rlm_cli.output import workflow_guard

    rfd, out = sys.stdin.buffer, sys.stdout.buffer
    workflow_guard.install()  # its stderr is rlm's own: no runner command from a file's warnings (issue 47)
    sys.stdout = sys.stderr  # nothing else may write into the answers
    while True:
        head = rfd.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return
        batch, options, every = pickle.loads(rfd.read(_HEADER.unpack(head)[0]))  # noqa: S301 - from rlm
        try:
            answer: tuple[bool, Any] = (True, read_batch(batch, options, every))
        except Exception as exc:  # noqa: BLE001 - reported to rlm, which raises it
            answer = (False, f"{type(exc).__name__}: {exc}")
        data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(_HEADER.pack(len(data)) + data)
        out.flush()
