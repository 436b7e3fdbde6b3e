"""The data model of a loaded corpus: :class:`FileEntry`, :class:`Chunk` and :class:`Corpus`.

A :class:`Corpus` is the list of :class:`FileEntry`, the list of :class:`Chunk` and one UTF-8
*context file* holding ``context``: each file's text behind a header line ``==> path <==`` and
followed by a blank line. Offsets (``start``/``end``) are in characters of ``context``; the
REPL worker reads the same files (the *bundle*: ``index.json``, ``context-<sha1>.txt`` and, when
the corpus has structured files, ``data-<sha1>.bin``: their parsed payloads, written once at
indexing by ``rlm_cli.corpus.structured`` and reused for unchanged files like their chunks).
The parent process never needs the whole ``context`` in memory: it is written file by file and
:attr:`Corpus.context` decodes it only when asked. The columns of ``index.json`` are named
here (:data:`FILE_FIELDS`...); ``rlm_cli.corpus.bundle`` reads and writes them.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import re
import shutil
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from rlm_cli.corpus.loader import LoadReport
from rlm_cli.corpus.tokens import DEFAULT_ENCODING
from rlm_cli.output.text import plural
from rlm_cli.protocol import BUNDLE_VERSION, pack_column

if TYPE_CHECKING:
    from rlm_cli.sandbox.launcher import WorkerSpec

#: The bundle layout version (shared with the worker through ``protocol``).
INDEX_VERSION = BUNDLE_VERSION
#: The data file is written with :mod:`marshal`, whose format may change between Python
#: versions: a bundle written by another version is rebuilt.
PYTHON_TAG = f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}"
FILE_FIELDS = ("path", "size", "mtime_ns", "chars", "lines", "tokens", "start", "end", "bstart", "bend", "sha1",
               "first_chunk", "n_chunks", "width", "notes", "kind", "dstart", "dend", "dmeta")
CHUNK_FIELDS = ("file", "start_line", "end_line", "start", "end", "tokens", "sha1")
SKIP_FIELDS = ("path", "size", "mtime_ns", "reason")
#: File columns an index written by an earlier release may lack (then: 0 for every file; a file
#: whose ``ctime_ns`` or ``ino`` is 0 is re-hashed once, then trusted by all four of its stat fields).
OPTIONAL_FILE_FIELDS = ("estimated", "ctime_ns", "ino")
#: Columns of the skipped files an earlier release may lack (then: 0 for every file).
OPTIONAL_SKIP_FIELDS = ("ctime_ns", "ino")
#: Skip reasons decided by a file's content: remembered in the index so that an unchanged binary
#: file is not read again (permissions can change without a new mtime, so "unreadable" is not).
CACHED_SKIPS = ("binary", "empty")


def header_line(path: str) -> str:
    """The line that precedes each file's text in ``context``."""
    return f"==> {path} <==\n"


#: Characters beyond U+00FF (stored at 2 or 4 bytes each) and beyond U+FFFF (4 bytes each).
_WIDE = re.compile("[\u0100-\U0010ffff]")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def char_width(text: str) -> int:
    """Bytes per character CPython needs to hold ``text`` (PEP 393 "flexible string
    representation"): 1 when every character is at most U+00FF, 2 up to U+FFFF, 4 beyond.

    A ``str`` takes the width of its widest character, so ``context`` in the REPL worker takes
    ``chars * max(width of every file)`` bytes: one emoji anywhere makes the whole corpus 4 bytes
    per character. About 10 ms per MB of non-ASCII text; ASCII text is answered at once.
    """
    if text.isascii():
        return 1
    if _ASTRAL.search(text):
        return 4
    return 2 if _WIDE.search(text) else 1


def sha1_hex(data: bytes | memoryview) -> str:
    """The SHA-1 of ``data`` in hex (40 chars): a file's or a chunk's ``sha1``."""
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()


@dataclass(slots=True)
class FileEntry:
    """One file in ``context``: its text is ``context[start:end]`` (characters) and
    ``context_bytes[bstart:bend]`` (bytes of the context file).

    ``size`` is in bytes on disk, ``chars`` in characters, ``lines`` counts lines (a last line
    without a newline counts), ``tokens`` is the sum of its chunks' tokens, ``sha1`` is the
    SHA-1 of its UTF-8 text; its chunks are ``chunks[first_chunk:first_chunk + n_chunks]``;
    ``width`` is the bytes per character its text and header line need in a ``str`` (1, 2 or 4:
    see :func:`char_width`); ``notes`` says how it was decoded when not plain UTF-8
    (``latin-1``, ``truncated``...: :attr:`Decoded.notes`); ``kind`` what it was read as
    (:attr:`Decoded.kind`: ``""``, ``pdf``, ``jsonl,gz``...). A structured file's parsed payload
    is ``data_file`` bytes ``dstart:dend`` (0, 0 for none) and ``dmeta`` its summary
    (:func:`rlm_cli.corpus.structured.summarize`). ``estimated`` counts its chunks whose
    ``tokens`` is an estimate rather than tiktoken's count (see ``build.EXACT_TOKENS_BYTES``).
    """

    path: str
    size: int
    mtime_ns: int
    chars: int
    lines: int
    tokens: int
    start: int
    end: int
    bstart: int
    bend: int
    sha1: str
    first_chunk: int
    n_chunks: int
    width: int = 1
    notes: str = ""
    kind: str = ""
    dstart: int = 0
    dend: int = 0
    dmeta: dict[str, Any] | None = None
    #: How many of its chunks have an estimated token count (see ``build.EXACT_TOKENS_BYTES``).
    estimated: int = 0
    #: ``st_ctime_ns`` and ``st_ino`` when it was read (with ``size`` and ``mtime_ns``: the cache key).
    ctime_ns: int = 0
    ino: int = 0


@dataclass(slots=True)
class Chunk:
    """A piece of one file: ``context[start:end]``, lines ``start_line..end_line`` of the file
    (1-based, inclusive), ``tokens`` tokens, ``sha1`` of its UTF-8 text."""

    id: int
    path: str
    start_line: int
    end_line: int
    start: int
    end: int
    tokens: int
    sha1: str


class CachedChunks(Sequence[Chunk]):
    """The chunks of a bundle read back from the cache: ``len()`` answers from the index's
    columns, and the :class:`Chunk` objects are made on first use (most runs only count them:
    270,000 of them take a second to make on a 1 GB corpus)."""

    def __init__(self, columns: dict[str, list[Any]], paths: list[str]) -> None:
        self.columns = columns
        self._paths = paths
        self._n = len(columns["start"])
        self._made: list[Chunk] | None = None

    def _list(self) -> list[Chunk]:
        if self._made is None:
            c, paths = self.columns, self._paths
            self._made = [Chunk(i, paths[fi], sl, el, s, e, t, h) for i, (fi, sl, el, s, e, t, h)
                          in enumerate(zip(*(c[k] for k in CHUNK_FIELDS), strict=True))]
        return self._made

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> Chunk: ...
    @overload
    def __getitem__(self, i: slice) -> list[Chunk]: ...
    def __getitem__(self, i: int | slice) -> Chunk | list[Chunk]:
        return self._list()[i]

    def __iter__(self) -> Iterator[Chunk]:
        return iter(self._list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CachedChunks):
            other = other._list()
        return self._list() == other

    __hash__ = None  # type: ignore[assignment]  # mutable, like the list it stands for

    def __repr__(self) -> str:
        return repr(self._list())


@dataclass
class Corpus:
    """A loaded corpus: files, chunks and the saved bundle holding ``context``.

    ``report`` says what was skipped and why; ``from_cache`` counts files reused from the cache
    and ``reindexed`` files read and chunked in this load. ``temporary`` bundles (``--no-cache``,
    stdin) are deleted at exit. ``data_file`` holds the parsed payloads of the structured files
    (``None`` when there are none), named after the context file's digest: it lives and is
    deleted with that file, under the same lock.
    """

    files: list[FileEntry]
    chunks: Sequence[Chunk]
    context_file: Path
    chars: int
    context_bytes: int
    digest: str
    report: LoadReport = field(default_factory=LoadReport)
    encoding: str = DEFAULT_ENCODING
    chunk_tokens: int = 2000
    from_cache: int = 0
    reindexed: int = 0
    temporary: bool = False
    #: Files read and skipped for a reason in ``CACHED_SKIPS``: ``(path, size, mtime_ns, reason,
    #: ctime_ns, ino)``.
    skipped_files: list[tuple[str, int, int, str, int, int]] = field(default_factory=list, repr=False)
    data_file: Path | None = None
    data_bytes: int = 0
    data_digest: str = ""
    _context: str | None = field(default=None, repr=False)
    _pin: int | None = field(default=None, repr=False)

    @property
    def bundle_dir(self) -> Path:
        """The folder holding ``index.json`` and the context file."""
        return self.context_file.parent

    @property
    def index_file(self) -> Path:
        """The bundle's ``index.json``."""
        return self.context_file.parent / "index.json"

    def worker_spec(self) -> WorkerSpec:
        """What a REPL worker loads to hold this corpus: its bundle (index, context and data files)."""
        from rlm_cli.sandbox.launcher import WorkerSpec

        return WorkerSpec(index_file=self.index_file, context_file=self.context_file, data_file=self.data_file)

    @property
    def context(self) -> str:
        """The whole corpus as one string (decoded from the context file on first access).

        Raises:
            OSError: the context file disappeared (only if deleted by hand during the run).
        """
        if self._context is None:
            self._context = read_context(self.context_file)
        return self._context

    def hold(self, fd: int | None) -> None:
        """Keep ``fd`` (an open descriptor of the context file holding a shared lock: see
        ``bundle.pin``) until :meth:`release`, so that no cleanup deletes the file meanwhile."""
        self._pin = fd

    def release(self) -> None:
        """Let go of the bundle once nothing reads it any more (``rlm mcp``, after a reload):
        close the shared lock that keeps its context file from being collected (a later load
        deletes the file when no process holds it) and delete a temporary bundle. Idempotent."""
        if self._pin is not None:
            with contextlib.suppress(OSError):
                os.close(self._pin)
            self._pin = None
        if self.temporary:
            shutil.rmtree(self.bundle_dir, ignore_errors=True)

    def head(self, n: int = 300) -> str:
        """The first ``n`` characters of ``context`` without decoding all of it."""
        if self._context is not None:
            return self._context[:n]
        with open(self.context_file, "rb") as fh:
            return fh.read(n * 4).decode("utf-8", "ignore")[:n]

    @property
    def total_tokens(self) -> int:
        """Tokens in all files' text (headers excluded); partly estimated when
        :attr:`tokens_estimated`."""
        return sum(f.tokens for f in self.files)

    @property
    def tokens_estimated(self) -> bool:
        """Whether some chunks' token counts are estimates (a large build: see ``build.EXACT_TOKENS_BYTES``)."""
        return any(f.estimated for f in self.files)

    @property
    def char_width(self) -> int:
        """Bytes per character of ``context`` as a Python ``str`` (1, 2 or 4; see :func:`char_width`)."""
        return max((f.width for f in self.files), default=1)

    @property
    def context_memory(self) -> int:
        """Bytes the ``context`` string takes in a Python process (``chars * char_width``, plus
        the object header); the REPL worker holds exactly one such string."""
        return self.chars * self.char_width + 80

    @property
    def total_bytes(self) -> int:
        """Bytes of all files on disk."""
        return sum(f.size for f in self.files)

    def summary(self) -> str:
        """One line for stderr: files, bytes, tokens, chunks, cache use and skipped files by reason."""
        about = "about " if self.tokens_estimated else ""
        line = (f"loaded {plural(len(self.files), 'file')}, {plural(self.total_bytes, 'byte')}, "
                f"{about}{plural(self.total_tokens, 'token')}, {plural(len(self.chunks), 'chunk')}")
        if self.from_cache and not self.reindexed:
            line += " (all from cache)"
        elif self.from_cache:
            line += f" ({self.from_cache:,} from cache, {self.reindexed:,} re-indexed)"
        if self.report.skipped:
            parts = ", ".join(f"{n:,} {reason}" for reason, n in sorted(self.report.skipped.items()))
            line += f"; skipped {parts}"
        if self.report.decoded:
            parts = ", ".join(f"{n:,} {how}" for how, n in sorted(self.report.decoded.items()))
            line += f"; decoded {parts}"
        if self.report.kinds:
            parts = ", ".join(f"{n:,} {kind}" for kind, n in sorted(self.report.kinds.items()))
            line += f"; read as {parts}"
        return line

    def index_dict(self, *, scan_ns: int, meta: dict[str, Any] | None = None) -> dict[str, Any]:
        """The JSON document saved as ``index.json`` (columns of files and chunks)."""
        cached = self.chunks.columns if isinstance(self.chunks, CachedChunks) else None
        if cached is not None:
            chunk_columns = {k: cached[k] for k in CHUNK_FIELDS}
        else:
            file_pos = {f.path: i for i, f in enumerate(self.files)}
            chunk_columns = {"file": [file_pos[c.path] for c in self.chunks],
                             **{k: list(map(attrgetter(k), self.chunks)) for k in CHUNK_FIELDS[1:]}}
        return {
            "version": INDEX_VERSION, "encoding": self.encoding, "chunk_tokens": self.chunk_tokens,
            "scan_ns": scan_ns, "context_file": self.context_file.name, "context_chars": self.chars,
            "context_bytes": self.context_bytes, "digest": self.digest, "meta": meta or {},
            "python": PYTHON_TAG, "data_file": self.data_file.name if self.data_file else None,
            "data_bytes": self.data_bytes, "data_digest": self.data_digest,
            "totals": {"files": len(self.files), "bytes": self.total_bytes, "tokens": self.total_tokens,
                       "chunks": len(self.chunks)},
            "files": {k: pack_column(list(map(attrgetter(k), self.files)))
                      for k in (*FILE_FIELDS, *OPTIONAL_FILE_FIELDS)},
            "chunks": {k: pack_column(v) for k, v in chunk_columns.items()},
            "skipped": {k: [row[i] for row in self.skipped_files]
                        for i, k in enumerate((*SKIP_FIELDS, *OPTIONAL_SKIP_FIELDS))},
            "context_stat": stat_key(self.context_file), "data_stat": stat_key(self.data_file),
        }



def stat_key(path: Path | None) -> list[int] | None:
    """``[size, mtime_ns, inode]`` of ``path`` (``None`` when there is no such file)."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def read_context(path: Path) -> str:
    """Decode a context file (UTF-8) into one string.

    The file is mapped, not read: its bytes stay in the page cache (which the kernel can drop)
    instead of a private copy, so the process's own memory peaks at the string alone.
    """
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            return ""
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return str(mm, "utf-8")
