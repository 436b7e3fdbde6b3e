"""Building a bundle: writing the context file and laying out files and chunks.

A file is reused from the old bundle when the store says it is unchanged: its chunks and token
counts are kept and its bytes copied from the old context file; only new or changed files are
read, chunked and tokenized (``rlm_cli.corpus.indexing``). The context file is written to a
temporary name and renamed to its content digest; on any failure (Ctrl-C included) the
temporary files are removed.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus.bundle import CachedBundle, data_name, lock
from rlm_cli.corpus.indexing import (
    SAMPLE_EVERY,
    corrections,
    count_pieces,
    estimated_tokens,
    extension,
    index_text,
    parse_data,
    sample_every,
    sampled_spans,
)
from rlm_cli.corpus.loader import (
    Decoded,
    LoadReport,
    SourceFile,
    compression_of,
    decode_bytes,
    is_binary,
    read_piped,
    read_source,
)
from rlm_cli.corpus.model import CACHED_SKIPS, Chunk, Corpus, FileEntry, char_width, header_line, sha1_hex
from rlm_cli.corpus.parallel import Counted
from rlm_cli.corpus.tokens import DEFAULT_ENCODING, TokenPool, default_threads
from rlm_cli.errors import EmptyCorpusError

#: A build that reads more than this many bytes of new or changed files counts the tokens of a
#: sample of its chunks and estimates the others (tiktoken counts about 18 MB a second per core,
#: so counting all of a 1 GB corpus would take a minute on 2 cores, 15 times reading it).
EXACT_TOKENS_BYTES = 64 * 1024**2

#: ``on_progress(files_done, files_total, bytes_done, bytes_total)``: called after each file of a
#: build (bytes are sizes on disk); ``rlm_cli.output.progress.index_callback`` makes events of it.
OnProgress = Callable[[int, int, int, int], None]


@dataclass
class _Pending:
    """A file in the new bundle: reused from ``old`` (index ``old_i``) or waiting on ``job``.

    In a sampled build (see :data:`EXACT_TOKENS_BYTES`) ``spans`` holds the file's chunks (from
    :func:`sampled_spans`) and ``job`` the token counts of its counted ones.
    """

    entry: FileEntry
    old_i: int = -1
    job: Future[Any] | Counted | None = None
    spans: list[list[Any]] | None = None


class BundleWriter:
    """Writes the context file (to a temporary name) and lays out the new files and chunks."""

    def __init__(self, directory: Path, options: CorpusOptions, report: LoadReport, *,
                 sample_tokens: bool = False, every: int = SAMPLE_EVERY) -> None:
        self.directory = directory
        self.options = options
        self.report = report
        #: Count the tokens of a sample of the new chunks only (see :data:`EXACT_TOKENS_BYTES`).
        self.sample_tokens = sample_tokens
        #: 1 chunk in this many is counted in a sampled build (``indexing.sample_every``).
        self.every = every
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".context-", suffix=".tmp")
        self.tmp = Path(tmp)
        self.fh: IO[bytes] = os.fdopen(fd, "wb", buffering=1 << 20)
        lock(fd, exclusive=True)  # a concurrent cleanup must not delete this file while we write it
        self.hasher = hashlib.sha1(usedforsecurity=False)
        self.chars = 0
        self.nbytes = 0
        self.files: list[_Pending] = []
        self.pool: TokenPool | None = None
        # The data file (parsed payloads), opened with the first structured file.
        self.dtmp: Path | None = None
        self.dfh: IO[bytes] | None = None
        self.dhasher = hashlib.sha1(usedforsecurity=False)
        self.dbytes = 0
        self.data_file: Path | None = None

    def _put_data(self, blob: bytes | memoryview) -> tuple[int, int]:
        if self.dfh is None:
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".data-", suffix=".tmp")
            self.dtmp = Path(tmp)
            self.dfh = os.fdopen(fd, "wb", buffering=1 << 20)
        start = self.dbytes
        self.dfh.write(blob)
        self.dhasher.update(blob)
        self.dbytes += len(blob)
        return start, self.dbytes

    def _put(self, data: bytes | memoryview, chars: int) -> None:
        self.fh.write(data)
        self.hasher.update(data)
        self.chars += chars
        self.nbytes += len(data)

    def add(self, sf: SourceFile, data: bytes | memoryview, chars: int, lines: int, sha1: str, width: int,
            notes: str, old_i: int = -1, text: str | None = None, kind: str = "",
            payload: bytes | memoryview | None = None, dmeta: dict[str, Any] | None = None,
            spans: list[list[Any]] | None = None, counted: Counted | None = None) -> None:
        """Append one file: reused (``old_i`` >= 0), to be chunked from ``text``, or chunked
        already (``spans`` of :func:`sampled_spans` and ``counted``, the tokens of its counted
        chunks: a worker process read it); ``width`` is :func:`char_width` of its text, ``notes``
        its decoding notes, ``kind`` what it was read as; ``payload`` (its encoded parsed data)
        goes to the data file, ``dmeta`` to the index."""
        head = header_line(sf.display)
        hb = head.encode("utf-8")
        self._put(hb, len(head))
        start, bstart = self.chars, self.nbytes
        self._put(data, chars)
        end, bend = self.chars, self.nbytes
        ends_nl = bool(len(data)) and data[-1:] == b"\n"
        self._put(b"\n" if ends_nl else b"\n\n", 1 if ends_nl else 2)
        dstart, dend = self._put_data(payload) if payload else (0, 0)
        entry = FileEntry(sf.display, sf.size, sf.mtime_ns, chars, lines, 0, start, end, bstart, bend, sha1, 0, 0,
                          max(width, char_width(head)), notes, kind, dstart, dend, dmeta if payload else None,
                          ctime_ns=sf.ctime_ns, ino=sf.ino)
        pending = _Pending(entry, old_i)
        if spans is not None:
            pending.spans, pending.job = spans, counted
        elif old_i < 0:
            assert text is not None
            if self.pool is None:
                self.pool = TokenPool()
            if self.sample_tokens:  # chunked here; the pool threads only count (tiktoken frees the GIL)
                pending.spans = sampled_spans(text, sf.display, self.options.chunk_tokens, self.every)
                bounds = [(sp[0], sp[1]) for sp in pending.spans if sp[6]]
                if bounds:
                    pending.job = self.pool.submit(count_pieces, text, bounds)
            else:
                pending.job = self.pool.submit(index_text, text, sf.display, self.options.chunk_tokens)
        self.files.append(pending)

    def _corrections(self) -> tuple[dict[str, float], float]:
        """:func:`indexing.corrections` of the counted chunks of this build."""
        def samples() -> Iterator[tuple[str, float, int]]:
            for p in self.files:
                if p.spans is None or p.job is None:
                    continue
                counts = iter(p.job.result())
                ext = extension(p.entry.path)
                for sp in p.spans:
                    if sp[6]:
                        yield ext, sp[4], next(counts)
        return corrections(samples())

    def finish(self, old: CachedBundle | None) -> tuple[list[FileEntry], list[Chunk], Path, str]:
        """Wait for the token counts, lay out chunks and rename the context file to its digest."""
        try:
            if self.pool is not None:
                self.pool.close()
            factors, overall = self._corrections() if self.sample_tokens else ({}, 1.0)
            files: list[FileEntry] = []
            chunks: list[Chunk] = []
            for p in self.files:
                e = p.entry
                e.first_chunk = len(chunks)
                if p.spans is not None:
                    counts = iter(p.job.result() if p.job is not None else ())
                    factor = factors.get(extension(e.path), overall)
                    for s, en, sl, el, guess, h, counted in p.spans:
                        tok = next(counts) if counted else estimated_tokens(guess, factor)
                        e.estimated += not counted
                        chunks.append(Chunk(len(chunks), e.path, sl, el, e.start + s, e.start + en, tok, h))
                elif p.job is not None:
                    for s, en, sl, el, tok, h in p.job.result():
                        chunks.append(Chunk(len(chunks), e.path, sl, el, e.start + s, e.start + en, tok, h))
                else:
                    assert old is not None
                    oc, of = old.chunks, old.files
                    first = of["first_chunk"][p.old_i]
                    shift = e.start - of["start"][p.old_i]
                    e.estimated = of["estimated"][p.old_i]
                    for j in range(first, first + of["n_chunks"][p.old_i]):
                        chunks.append(Chunk(len(chunks), e.path, oc["start_line"][j], oc["end_line"][j],
                                            oc["start"][j] + shift, oc["end"][j] + shift, oc["tokens"][j],
                                            oc["sha1"][j]))
                e.n_chunks = len(chunks) - e.first_chunk
                e.tokens = sum(c.tokens for c in chunks[e.first_chunk:])
                files.append(e)
            self.fh.flush()
            os.fchmod(self.fh.fileno(), 0o600)  # private: the worker reads it before dropping privileges
            digest = self.hasher.hexdigest()
            final = self.directory / f"context-{digest[:24]}.txt"
            if self.dfh is not None and self.dtmp is not None:  # the data file first: it dies with the context file
                self.dfh.flush()
                os.fchmod(self.dfh.fileno(), 0o600)
                self.dfh.close()
                self.data_file = self.directory / data_name(final)
                os.replace(self.dtmp, self.data_file)
            os.replace(self.tmp, final)
            return files, chunks, final, digest
        except BaseException:
            self.abort()
            raise

    def keep_open(self) -> int:
        """Hand over the open descriptor (still locked) and stop owning it."""
        fd = os.dup(self.fh.fileno())
        self.fh.close()
        return fd

    def abort(self) -> None:
        """Drop queued work and remove the temporary file (on any failure, Ctrl-C included)."""
        if self.pool is not None:
            self.pool.close(cancel=True)
        for fh in (self.fh, self.dfh):
            try:
                if fh is not None:
                    fh.close()
            except OSError:
                pass
        self.tmp.unlink(missing_ok=True)
        if self.dtmp is not None:
            self.dtmp.unlink(missing_ok=True)


class _Progress:
    """Counts the files of a build as they are done and tells ``on_progress`` (files done, files
    in all, bytes done, bytes in all)."""

    def __init__(self, sources: list[tuple[SourceFile, str]], on_progress: OnProgress | None) -> None:
        self.on_progress = on_progress
        self.files_total, self.bytes_total = len(sources), sum(sf.size for sf, _ in sources)
        self.files_done = self.bytes_done = 0

    def __call__(self, sf: SourceFile) -> None:
        self.files_done += 1
        self.bytes_done += sf.size
        if self.on_progress is not None:
            self.on_progress(self.files_done, self.files_total, self.bytes_done, self.bytes_total)


def build_bundle(sources: list[tuple[SourceFile, str]], stdin: SourceFile | None, stdin_bytes: bytes | None,
                 old: CachedBundle | None, options: CorpusOptions, report: LoadReport, directory: Path,
                 prefetched: dict[str, Decoded] | None = None, on_progress: OnProgress | None = None) -> Corpus:
    """Write a new bundle into ``directory``; ``sources`` pairs each file with ``'same'``
    (reuse without reading), ``'check'`` (read; reuse if its hash matches) or ``'new'``.
    ``prefetched`` holds files already read while checking the cache (not read again);
    ``on_progress`` hears of every file done."""
    prefetched = prefetched or {}
    done = _Progress(sources, on_progress)
    old_pos = {p: i for i, p in enumerate(old.files["path"])} if old is not None else {}
    to_read = sum(sf.size for sf, state in sources if state in ("new", "check")) + len(stdin_bytes or b"")
    writer = BundleWriter(directory, options, report, sample_tokens=to_read > EXACT_TOKENS_BYTES,
                          every=sample_every(to_read))
    mm: mmap.mmap | None = None
    dmm: mmap.mmap | None = None
    reads: Generator[Any, None, None] | None = None
    try:
        if old is not None and any(state != "new" for _, state in sources):
            mm, dmm = _map_old(old)
        from_cache = 0
        skipped_files: list[tuple[str, int, int, str, int, int]] = []
        if writer.sample_tokens and default_threads() > 1:  # a large build: read in worker processes
            from rlm_cli.corpus import parallel

            need = [sf for sf, state in sources if not state.startswith("skip:")
                    and not (state == "same" and mm is not None) and sf.display not in prefetched]
            reads = parallel.read_many(need, options, default_threads(), writer.every)
        for sf, state in sources:
            if state.startswith("skip:"):
                report.skip(state[5:], path=sf.display)
                skipped_files.append((sf.display, sf.size, sf.mtime_ns, state[5:], sf.ctime_ns, sf.ino))
                done(sf)
                continue
            i = old_pos.get(sf.display, -1)
            if state == "same" and mm is not None:
                assert old is not None
                _add_same(writer, sf, old, i, mm, dmm, report)
                from_cache += 1
                done(sf)
                continue
            decoded = prefetched.pop(sf.display, None)
            if decoded is not None:  # read while checking the cache, with a report of its own
                report.count_decoded(decoded.notes)
            elif reads is not None:
                read = next(reads)
                assert read.display == sf.display, (read.display, sf.display)
                read.replay(report)
                if read.data is None:
                    _remember_skip(report, sf, skipped_files)
                else:
                    from_cache += _add_read(writer, sf, read, i, old, dmm, report)
                done(sf)
                continue
            else:
                decoded = read_source(sf, options, report)
            if decoded is None:
                _remember_skip(report, sf, skipped_files)
            else:
                from_cache += _add_decoded(writer, sf, decoded, i, old, dmm, report)
            done(sf)
        if stdin is not None and stdin_bytes is not None:
            _add_stdin(writer, stdin, stdin_bytes, options, report)
        if not writer.files:
            message, hint = empty_message(report)
            raise EmptyCorpusError(message, hint=hint)
        files, chunks, final, digest = writer.finish(old)
    except BaseException:
        writer.abort()
        raise
    finally:
        if reads is not None:
            reads.close()  # stops the worker processes (at once, when the build did not finish)
        for m in (mm, dmm):
            if m is not None:
                m.close()
    return _held_corpus(writer, (files, chunks, final, digest), report, options, from_cache, skipped_files)


def _held_corpus(writer: BundleWriter, written: tuple[list[FileEntry], list[Chunk], Path, str], report: LoadReport,
                 options: CorpusOptions, from_cache: int,
                 skipped_files: list[tuple[str, int, int, str, int, int]]) -> Corpus:
    """The :class:`Corpus` of the bundle ``writer`` finished (``written``: its files, chunks,
    final folder and digest), holding a shared lock on it (readers may share it, cleanup may not
    delete it); ``from_cache`` files were the old bundle's."""
    files, chunks, final, digest = written
    corpus = Corpus(files, chunks, final, writer.chars, writer.nbytes, digest, report, DEFAULT_ENCODING,
                    options.chunk_tokens, from_cache=from_cache, reindexed=len(files) - from_cache,
                    skipped_files=skipped_files, data_file=writer.data_file, data_bytes=writer.dbytes,
                    data_digest=writer.dhasher.hexdigest() if writer.data_file else "")
    fd = writer.keep_open()
    lock(fd, exclusive=False)  # downgrade: readers may share it, cleanup may not delete it
    corpus.hold(fd)
    return corpus


def _add_same(writer: BundleWriter, sf: SourceFile, old: CachedBundle, i: int, mm: mmap.mmap,
              dmm: mmap.mmap | None, report: LoadReport) -> None:
    """Add file ``sf``, unchanged since the old bundle, from that bundle's row ``i`` (not read)."""
    of = old.files
    writer.add(sf, mm[of["bstart"][i]:of["bend"][i]], of["chars"][i], of["lines"][i],
               of["sha1"][i], of["width"][i], of["notes"][i], old_i=i, **_old_data(of, i, dmm))
    report.count_decoded(of["notes"][i])
    report.count_kind(of["kind"][i])


def _remember_skip(report: LoadReport, sf: SourceFile,
                   skipped_files: list[tuple[str, int, int, str, int, int]]) -> None:
    """Keep ``sf`` in the index's skipped files when it was just skipped for a reason of
    :data:`CACHED_SKIPS` (so an unchanged binary file is not read again)."""
    if report.last_skip is not None and report.last_skip[0] == sf.display and report.last_skip[1] in CACHED_SKIPS:
        skipped_files.append((sf.display, sf.size, sf.mtime_ns, report.last_skip[1], sf.ctime_ns, sf.ino))


def _old_data(of: dict[str, list[Any]], i: int, dmm: mmap.mmap | None) -> dict[str, Any]:
    """The kind, encoded payload and summary of file ``i`` of an old bundle, for :meth:`BundleWriter.add`."""
    a, b = of["dstart"][i], of["dend"][i]
    payload = dmm[a:b] if dmm is not None and b > a else None
    return {"kind": of["kind"][i], "payload": payload, "dmeta": of["dmeta"][i] if payload else None}


_HINTS = {
    "hidden": "--hidden includes dotfiles", "ignored": "--no-ignore stops honouring .gitignore/.ignore/.rlmignore",
    "not included": "check the --include globs", "excluded": "check the --exclude globs",
    "too large": "raise --max-file-size or use --truncate-large", "binary": "binary files are never read",
    "unreadable": "check the file permissions", "empty": "the files are empty",
    "path too long": "move the files to a shorter path: the system opens none longer",
}


def empty_message(report: LoadReport) -> tuple[str, str]:
    """``(message, hint)`` for an empty corpus, naming the reasons files were skipped."""
    if not report.skipped:
        return "the corpus is empty: no files found", "check the paths"
    reasons = Counter(report.skipped).most_common()
    listed = ", ".join(f"{n:,} {r}" for r, n in reasons)
    hints = "; ".join(_HINTS[r] for r, _ in reasons if r in _HINTS) or "see rlm ask --help"
    return f"the corpus is empty: every file was skipped ({listed})", hints


def add_text(writer: BundleWriter, sf: SourceFile, text: str) -> None:
    """Append ``text`` to ``writer`` as the file ``sf`` (UTF-8, to be chunked and counted)."""
    data = text.encode("utf-8")
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    writer.add(sf, data, len(text), lines, sha1_hex(data), char_width(text), "", text=text)


def _map_old(old: CachedBundle) -> tuple[mmap.mmap | None, mmap.mmap | None]:
    """The old bundle's context file and data file, mapped for reading (``None`` when empty)."""
    mm = dmm = None
    with open(old.context_file, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if old.index["context_bytes"] else None
    if old.index["data_file"] and old.index["data_bytes"]:
        with open(old.context_file.parent / old.index["data_file"], "rb") as fh:
            dmm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    return mm, dmm


def _add_read(writer: BundleWriter, sf: SourceFile, read: Any, i: int, old: CachedBundle | None,
              dmm: mmap.mmap | None, report: LoadReport) -> int:
    """Add a file a reader process read (``read``: a ``parallel`` result with data) at old row ``i``
    (-1: none); 1 when its content was the old bundle's (touched, not changed), else 0."""
    report.count_kind(read.kind)
    if i >= 0 and old is not None and old.files["sha1"][i] == read.sha1 and old.files["kind"][i] == read.kind:
        writer.add(sf, read.data, read.chars, read.lines, read.sha1, read.width, read.notes, old_i=i,
                   **_old_data(old.files, i, dmm))  # touched, not changed
        return 1
    writer.add(sf, read.data, read.chars, read.lines, read.sha1, read.width, read.notes,
               kind=read.kind, payload=read.payload, dmeta=read.dmeta, spans=read.spans, counted=read.counted())
    return 0


def _add_decoded(writer: BundleWriter, sf: SourceFile, decoded: Decoded, i: int, old: CachedBundle | None,
                 dmm: mmap.mmap | None, report: LoadReport) -> int:
    """Add a file read in this process at old row ``i`` (-1: none); 1 when its content was the old
    bundle's (touched, not changed), else 0."""
    sha1 = sha1_hex(decoded.data)
    lines = decoded.text.count("\n") + (0 if decoded.text.endswith("\n") else 1)
    width = char_width(decoded.text)
    report.count_kind(decoded.kind)
    if i >= 0 and old is not None and old.files["sha1"][i] == sha1 and old.files["kind"][i] == decoded.kind:
        writer.add(sf, decoded.data, len(decoded.text), lines, sha1, width, decoded.notes,
                   old_i=i, **_old_data(old.files, i, dmm))  # touched, not changed
        return 1
    payload, dmeta = parse_data(decoded)
    writer.add(sf, decoded.data, len(decoded.text), lines, sha1, width, decoded.notes, text=decoded.text,
               kind=decoded.kind, payload=payload, dmeta=dmeta)
    return 0


def _add_stdin(writer: BundleWriter, stdin: SourceFile, stdin_bytes: bytes, options: CorpusOptions,
               report: LoadReport) -> None:
    """Add what was piped in (``-``): compressed (decoded in the confined decoder, as a ``.gz``
    file is), binary (skipped), empty (skipped) or text."""
    if compression_of(stdin_bytes):  # decompressed as a .gz file is, in the confined decoder
        piped = read_piped(stdin_bytes, stdin, options, report)
        if piped is not None:
            lines = piped.text.count("\n") + (0 if piped.text.endswith("\n") else 1)
            report.count_kind(piped.kind)
            writer.add(stdin, piped.data, len(piped.text), lines, sha1_hex(piped.data),
                       char_width(piped.text), piped.notes, text=piped.text, kind=piped.kind)
    elif is_binary(stdin_bytes[:8192]):
        report.skip("binary", "skipped <stdin>: binary data", path=stdin.display)
    else:
        d = decode_bytes(stdin_bytes)
        if d.text:
            lines = d.text.count("\n") + (0 if d.text.endswith("\n") else 1)
            report.count_decoded(d.notes)
            writer.add(stdin, d.data, len(d.text), lines, sha1_hex(d.data), char_width(d.text), d.notes,
                       text=d.text)
        else:
            report.skip("empty", path=stdin.display)
