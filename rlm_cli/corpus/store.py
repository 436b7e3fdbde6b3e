"""The chunk-indexed context store and its on-disk cache.

A :class:`Corpus` is the list of :class:`FileEntry`, the list of :class:`Chunk` and one UTF-8
*context file* holding ``context``: each file's text behind a header line ``==> path <==`` and
followed by a blank line. Offsets (``start``/``end``) are in characters of ``context``; the
REPL worker reads the same files (the *bundle*: ``index.json``, ``context-<sha1>.txt`` and, when
the corpus has structured files, ``data-<sha1>.bin``: their parsed payloads, written once at
indexing by ``rlm_cli.corpus.structured`` and reused for unchanged files like their chunks).
The parent process never needs the whole ``context`` in memory: it is written file by file and
:attr:`Corpus.context` decodes it only when asked.

Cache: one bundle directory per (roots, options) under ``cache_dir()/index``. A file is reused
when its path, size, ``mtime_ns``, ``ctime_ns`` and inode match the index (:func:`same_stat`:
``cp -p``, ``rsync -a`` and ``tar x`` restore the mtime but cannot restore the ctime) and its
mtime is older than the index's scan by more than :data:`RACY_NS` (otherwise it is re-read and
reused only if its content hash still matches: an edit within the same clock tick cannot go
unnoticed). Reused files keep their
chunks and token counts and their bytes are copied from the old context file; only new or
changed files are read, chunked and tokenized. A second run on an unchanged tree reads only
``index.json`` and checks the context file's size and SHA-1 (a file over
:data:`FULL_VERIFY_BYTES`: its size, mtime and inode, as recorded when it was written; when they
differ, its SHA-1). The chunks of a bundle read back are made into objects only when used.

Writes are atomic: the context file is written to a temporary name and renamed to its content
digest, then ``index.json`` is replaced; a killed run leaves at most a stray temporary file,
which a later run deletes. Each process holds a shared ``flock`` on the context file it uses,
and old context files are deleted only when no process holds one, so a concurrent run never
loses its bundle. An unreadable or inconsistent bundle is rebuilt with a warning.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import mmap
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, overload

from rlm_cli.config import CorpusOptions, cache_dir
from rlm_cli.corpus import structured
from rlm_cli.corpus.chunker import split_text
from rlm_cli.corpus.loader import Decoded, LoadReport, SourceFile, decode_bytes, discover, is_binary, read_source
from rlm_cli.corpus.parallel import Counted
from rlm_cli.corpus.tokens import DEFAULT_ENCODING, TokenPool, default_threads
from rlm_cli.errors import BudgetExceededError, EmptyCorpusError
from rlm_cli.protocol import BUNDLE_VERSION

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no pinning; old context files are kept a day
    fcntl = None  # type: ignore[assignment]

#: The bundle layout version (shared with the worker through ``protocol``).
INDEX_VERSION = BUNDLE_VERSION
#: The data file is written with :mod:`marshal`, whose format may change between Python
#: versions: a bundle written by another version is rebuilt.
PYTHON_TAG = f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}"
STDIN_NAME = "<stdin>"
#: A file modified less than this long before the index's scan is re-hashed on the next load.
RACY_NS = 2_000_000_000
#: A chunk whose exact token count exceeds the target by this factor is split again.
OVERSIZE = 1.5
#: A build that reads more than this many bytes of new or changed files counts the tokens of a
#: sample of its chunks and estimates the others (tiktoken counts about 18 MB a second per core,
#: so counting all of a 1 GB corpus would take a minute on 2 cores, 15 times reading it).
EXACT_TOKENS_BYTES = 64 * 1024**2
#: In such a build, 1 chunk in this many (chosen by the chunk's SHA-1, so the same chunks in
#: every build) is counted; the others get ``bytes / (bytes per token)`` measured on the counted
#: chunks of the same file extension (of all of them when an extension has too few).
SAMPLE_EVERY = 16
#: Counted chunks an extension needs for a correction of its own.
MIN_SAMPLE_CHUNKS = 8
#: UTF-8 bytes per token assumed when deciding whether a chunk is too large (code and English: about 4).
PRIOR_BYTES_PER_TOKEN = 4.0
#: Tokens per UTF-8 byte of ASCII letters and whitespace, of other ASCII (digits, punctuation)
#: and of non-ASCII bytes: a least-squares fit of o200k_base on 100 MB of Python, text and logs
#: (within 5% per chunk at the median, 16% at the 90th percentile once a build's sample corrects it).
TOKENS_PER_BYTE = (0.165, 0.71, 0.45)
#: A chunk is split again when its guess over this margin is still over the target (the guess
#: is within 10% for most chunks, and a needless split makes two small chunks).
GUESS_MARGIN = 1.1
_WORDS = bytes(range(65, 91)) + bytes(range(97, 123)) + b" \t\n\r"
_HIGH = bytes(range(128, 256))
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


def _sha1(data: bytes | memoryview) -> str:
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
    ``tokens`` is an estimate rather than tiktoken's count (see :data:`EXACT_TOKENS_BYTES`).
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
    #: How many of its chunks have an estimated token count (see :data:`EXACT_TOKENS_BYTES`).
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


class _CachedChunks(Sequence[Chunk]):
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
        if isinstance(other, _CachedChunks):
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

    @property
    def context(self) -> str:
        """The whole corpus as one string (decoded from the context file on first access).

        Raises:
            OSError: the context file disappeared (only if deleted by hand during the run).
        """
        if self._context is None:
            self._context = read_context(self.context_file)
        return self._context

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
        """Whether some chunks' token counts are estimates (a large build: see :data:`EXACT_TOKENS_BYTES`)."""
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
        line = (f"loaded {len(self.files):,} files, {self.total_bytes:,} bytes, "
                f"{about}{self.total_tokens:,} tokens, {len(self.chunks):,} chunks")
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
        cached = self.chunks.columns if isinstance(self.chunks, _CachedChunks) else None
        if cached is not None:
            chunk_columns = {k: cached[k] for k in CHUNK_FIELDS}
        else:
            file_pos = {f.path: i for i, f in enumerate(self.files)}
            chunk_columns = {"file": [file_pos[c.path] for c in self.chunks],
                             **{k: [getattr(c, k) for c in self.chunks] for k in CHUNK_FIELDS[1:]}}
        return {
            "version": INDEX_VERSION, "encoding": self.encoding, "chunk_tokens": self.chunk_tokens,
            "scan_ns": scan_ns, "context_file": self.context_file.name, "context_chars": self.chars,
            "context_bytes": self.context_bytes, "digest": self.digest, "meta": meta or {},
            "python": PYTHON_TAG, "data_file": self.data_file.name if self.data_file else None,
            "data_bytes": self.data_bytes, "data_digest": self.data_digest,
            "totals": {"files": len(self.files), "bytes": self.total_bytes, "tokens": self.total_tokens,
                       "chunks": len(self.chunks)},
            "files": {k: [getattr(f, k) for f in self.files] for k in (*FILE_FIELDS, *OPTIONAL_FILE_FIELDS)},
            "chunks": chunk_columns,
            "skipped": {k: [row[i] for row in self.skipped_files]
                        for i, k in enumerate((*SKIP_FIELDS, *OPTIONAL_SKIP_FIELDS))},
            "context_stat": _stat_key(self.context_file), "data_stat": _stat_key(self.data_file),
        }


#: A context or data file larger than this is checked by its size, mtime and inode, as recorded
#: when it was written, instead of its SHA-1 (which takes 0.7 s per GB), when those still match.
FULL_VERIFY_BYTES = 64 * 1024**2


def _stat_key(path: Path | None) -> list[int] | None:
    """``[size, mtime_ns, inode]`` of ``path`` (``None`` when there is no such file)."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _needs_digest(path: Path, recorded: Any) -> bool:
    """Whether ``path`` must be hashed to be trusted: small, or changed since it was recorded."""
    key = _stat_key(path)
    return key is None or key[0] <= FULL_VERIFY_BYTES or key != recorded


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


class CorruptCache(Exception):
    """A bundle that cannot be trusted (the message says why)."""


@dataclass
class _Cached:
    """A bundle read back from the cache: the parsed index and its context file."""

    index: dict[str, Any]
    context_file: Path

    @property
    def files(self) -> dict[str, list[Any]]:
        return self.index["files"]  # type: ignore[no-any-return]

    @property
    def chunks(self) -> dict[str, list[Any]]:
        return self.index["chunks"]  # type: ignore[no-any-return]


def cache_key(paths: list[str], options: CorpusOptions) -> str:
    """Directory name of the bundle for these roots and options (a digest, 24 hex chars).

    The current directory is part of the key unless the only argument is a folder, because it
    decides the display paths then.
    """
    single_dir = len(paths) == 1 and os.path.isdir(paths[0])
    spec = {
        "roots": [os.path.abspath(p) for p in paths], "cwd": None if single_dir else os.getcwd(),
        "include": options.include, "exclude": options.exclude, "hidden": options.hidden,
        "no_ignore": options.no_ignore, "max_file_size": options.max_file_size,
        "truncate_large": options.truncate_large, "chunk_tokens": options.chunk_tokens,
        "version": INDEX_VERSION, "encoding": DEFAULT_ENCODING,
        **({"follow": True} if options.follow else {}),
    }
    return hashlib.blake2b(json.dumps(spec, sort_keys=True).encode(), digest_size=12).hexdigest()


def index_root() -> Path:
    """The folder holding one bundle folder per (roots, options)."""
    return cache_dir() / "index"


def read_index(directory: Path, *, verify: bool = True) -> _Cached | None:
    """Read and check the bundle in ``directory``; ``None`` if there is none (or an old version).

    With ``verify`` the context file's SHA-1 is checked too (about 20 ms per 30 MB), unless it is
    over :data:`FULL_VERIFY_BYTES` and its size, mtime and inode are still those recorded.

    Raises:
        CorruptCache: the bundle exists but is unreadable or inconsistent.
    """
    index_path = directory / "index.json"
    try:
        raw = index_path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CorruptCache(f"cannot read {index_path.name}: {exc.strerror or exc}") from None
    try:
        index = json.loads(raw)
        if not isinstance(index, dict):
            raise CorruptCache("index.json is not an object")
        if index.get("version") != INDEX_VERSION or index.get("python") != PYTHON_TAG:
            return None
        files, chunks = index["files"], index["chunks"]
        n_files, n_chunks = len(files["path"]), len(chunks["start"])
        skipped = index["skipped"]
        for k in OPTIONAL_FILE_FIELDS:
            files.setdefault(k, [0] * n_files)
        for k in OPTIONAL_SKIP_FIELDS:
            skipped.setdefault(k, [0] * len(skipped["path"]))
        if any(len(files[k]) != n_files for k in (*FILE_FIELDS, *OPTIONAL_FILE_FIELDS)) or any(len(chunks[k]) != n_chunks
                                                                     for k in CHUNK_FIELDS) or any(
                len(skipped[k]) != len(skipped["path"]) for k in (*SKIP_FIELDS, *OPTIONAL_SKIP_FIELDS)):
            raise CorruptCache("index.json has columns of different lengths")
        if n_files and (files["first_chunk"][-1] + files["n_chunks"][-1] != n_chunks
                        or files["end"][-1] > index["context_chars"]):
            raise CorruptCache("index.json does not match its chunks")
        context_file = directory / str(index["context_file"])
        if os.path.basename(context_file.name) != context_file.name or not context_file.name.startswith("context-"):
            raise CorruptCache("index.json names a bad context file")
        data_file = None
        if index["data_file"] is not None:
            data_file = directory / str(index["data_file"])
            if data_file.name != data_name(context_file):
                raise CorruptCache("index.json names a bad data file")
            if any(e > index["data_bytes"] for e in files["dend"]):
                raise CorruptCache("index.json does not match its data file")
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise CorruptCache(f"index.json is malformed ({type(exc).__name__}: {exc})") from None
    try:
        size = context_file.stat().st_size
    except OSError as exc:
        raise CorruptCache(f"its context file is missing ({exc.strerror or exc})") from None
    if size != index["context_bytes"]:
        raise CorruptCache(f"its context file has {size:,} bytes instead of {index['context_bytes']:,}")
    if verify and _needs_digest(context_file, index.get("context_stat")):
        with open(context_file, "rb") as fh:
            digest = hashlib.file_digest(fh, lambda: hashlib.sha1(usedforsecurity=False)).hexdigest()
        if digest != index["digest"]:
            raise CorruptCache("its context file does not match its checksum")
    if data_file is not None:
        try:
            size = data_file.stat().st_size
        except OSError as exc:
            raise CorruptCache(f"its data file is missing ({exc.strerror or exc})") from None
        if size != index["data_bytes"]:
            raise CorruptCache(f"its data file has {size:,} bytes instead of {index['data_bytes']:,}")
        if verify and _needs_digest(data_file, index.get("data_stat")):
            with open(data_file, "rb") as fh:
                digest = hashlib.file_digest(fh, lambda: hashlib.sha1(usedforsecurity=False)).hexdigest()
            if digest != index["data_digest"]:
                raise CorruptCache("its data file does not match its checksum")
    return _Cached(index, context_file)


def data_name(context_file: Path) -> str:
    """The name of the data file that belongs to ``context_file`` (``context-X.txt`` -> ``data-X.bin``)."""
    return "data-" + context_file.name.removeprefix("context-").removesuffix(".txt") + ".bin"


def _corpus_from_index(cached: _Cached, report: LoadReport) -> Corpus:
    f, c, idx = cached.files, cached.chunks, cached.index
    paths = f["path"]
    files = list(map(FileEntry, *(f[k] for k in (*FILE_FIELDS, *OPTIONAL_FILE_FIELDS))))
    chunks = _CachedChunks(c, paths)
    for notes, kind in zip(f["notes"], f["kind"], strict=True):
        report.count_decoded(notes)
        report.count_kind(kind)
    sk = idx["skipped"]
    data_file = cached.context_file.parent / idx["data_file"] if idx["data_file"] else None
    return Corpus(files, chunks, cached.context_file, idx["context_chars"], idx["context_bytes"], idx["digest"],
                  report, idx["encoding"], idx["chunk_tokens"], from_cache=len(files), data_file=data_file,
                  data_bytes=idx["data_bytes"], data_digest=idx["data_digest"],
                  skipped_files=[tuple(row) for row in zip(*(sk[k] for k in (*SKIP_FIELDS, *OPTIONAL_SKIP_FIELDS)),
                                                             strict=True)])


# -- building -----------------------------------------------------------------------------------

def _index_file(enc: Any, text: str, path: str, target: int) -> list[tuple[int, int, int, int, int, str]]:
    """Chunk one file and count each chunk's tokens (runs in a :class:`TokenPool` thread).

    Returns ``(start, end, start_line, end_line, tokens, sha1)`` per chunk, offsets relative to
    the file. A chunk far over ``target`` tokens (dense text: CJK, minified code) is split again
    with the characters-per-token ratio measured on it.
    """
    out: list[tuple[int, int, int, int, int, str]] = []
    for sp in split_text(text, path, target):
        piece = text[sp.start:sp.end]
        n = len(enc.encode_ordinary(piece))
        if n > target * OVERSIZE and len(piece) > 64:
            subs = split_text(piece, path, target, chars_per_token=max(0.25, 0.9 * len(piece) / n))
            if len(subs) > 1:
                for sub in subs:
                    sub_piece = piece[sub.start:sub.end]
                    out.append((sp.start + sub.start, sp.start + sub.end, sp.start_line + sub.start_line - 1,
                                sp.start_line + sub.end_line - 1, len(enc.encode_ordinary(sub_piece)),
                                _sha1(sub_piece.encode("utf-8"))))
                continue
        out.append((sp.start, sp.end, sp.start_line, sp.end_line, n, _sha1(piece.encode("utf-8"))))
    return out


def _sampled_spans(text: str, path: str, target: int) -> list[list[Any]]:
    """Chunk one file without counting its tokens (a large build: :data:`EXACT_TOKENS_BYTES`).

    Returns ``[start, end, start_line, end_line, guess, sha1, counted]`` per chunk, offsets
    relative to the file; ``guess`` is :func:`_guess_tokens` of its text and ``counted`` marks the
    1 chunk in :data:`SAMPLE_EVERY` (by SHA-1) whose tokens will be counted. A chunk far over
    ``target`` by its guess (over :data:`GUESS_MARGIN`) or by :data:`PRIOR_BYTES_PER_TOKEN` is
    split again, as :func:`_index_file` splits one whose count is (a guess can miss: such a chunk
    may hold up to about twice the target).
    """
    out: list[list[Any]] = []
    for sp in split_text(text, path, target):
        piece = text[sp.start:sp.end]
        data = piece.encode("utf-8", "surrogatepass")
        g = _guess_tokens(data)
        guess = max(len(data) / PRIOR_BYTES_PER_TOKEN, g / GUESS_MARGIN)
        if guess > target * OVERSIZE and len(piece) > 64:
            subs = split_text(piece, path, target, chars_per_token=max(0.25, 0.9 * len(piece) / guess))
            if len(subs) > 1:
                for sub in subs:
                    sub_data = piece[sub.start:sub.end].encode("utf-8", "surrogatepass")
                    h = _sha1(sub_data)
                    out.append([sp.start + sub.start, sp.start + sub.end, sp.start_line + sub.start_line - 1,
                                sp.start_line + sub.end_line - 1, _guess_tokens(sub_data), h, _is_sample(h)])
                continue
        h = _sha1(data)
        out.append([sp.start, sp.end, sp.start_line, sp.end_line, g, h, _is_sample(h)])
    return out


def _guess_tokens(data: bytes) -> float:
    """Tokens of UTF-8 ``data`` by :data:`TOKENS_PER_BYTE` (before a build's sample corrects it)."""
    n = len(data)
    rest = len(data.translate(None, _WORDS))  # bytes that are neither ASCII letters nor whitespace
    high = 0 if data.isascii() else n - len(data.translate(None, _HIGH))
    a, b, c = TOKENS_PER_BYTE
    return a * (n - rest) + b * (rest - high) + c * high


def _is_sample(sha1: str) -> bool:
    """Whether a chunk of a large build is one of the 1 in :data:`SAMPLE_EVERY` counted exactly."""
    return int(sha1[:4], 16) % SAMPLE_EVERY == 0


def _count_pieces(enc: Any, text: str, bounds: list[tuple[int, int]]) -> list[int]:
    """Tokens of ``text[start:end]`` for each bound (runs in a :class:`TokenPool` thread)."""
    return [len(enc.encode_ordinary(text[a:b])) for a, b in bounds]


def _extension(path: str) -> str:
    """The lowercased extension of ``path`` (``""`` for none): the group of a bytes-per-token ratio."""
    name = path.rsplit("/", 1)[-1]
    dot = name.rfind(".")
    return name[dot:].lower() if dot > 0 else ""


@dataclass
class _Pending:
    """A file in the new bundle: reused from ``old`` (index ``old_i``) or waiting on ``job``.

    In a sampled build (see :data:`EXACT_TOKENS_BYTES`) ``spans`` holds the file's chunks (from
    :func:`_sampled_spans`) and ``job`` the token counts of its counted ones.
    """

    entry: FileEntry
    old_i: int = -1
    job: Future[Any] | Counted | None = None
    spans: list[list[Any]] | None = None


class _Writer:
    """Writes the context file (to a temporary name) and lays out the new files and chunks."""

    def __init__(self, directory: Path, options: CorpusOptions, report: LoadReport, *,
                 sample_tokens: bool = False) -> None:
        self.directory = directory
        self.options = options
        self.report = report
        #: Count the tokens of a sample of the new chunks only (see :data:`EXACT_TOKENS_BYTES`).
        self.sample_tokens = sample_tokens
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".context-", suffix=".tmp")
        self.tmp = Path(tmp)
        self.fh: IO[bytes] = os.fdopen(fd, "wb", buffering=1 << 20)
        _lock(fd, exclusive=True)  # a concurrent cleanup must not delete this file while we write it
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
        already (``spans`` of :func:`_sampled_spans` and ``counted``, the tokens of its counted
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
                pending.spans = _sampled_spans(text, sf.display, self.options.chunk_tokens)
                bounds = [(sp[0], sp[1]) for sp in pending.spans if sp[6]]
                if bounds:
                    pending.job = self.pool.submit(_count_pieces, text, bounds)
            else:
                pending.job = self.pool.submit(_index_file, text, sf.display, self.options.chunk_tokens)
        self.files.append(pending)

    def _corrections(self) -> tuple[dict[str, float], float]:
        """Counted over guessed tokens (:func:`_guess_tokens`) by extension, and overall, on the
        counted chunks of this build: what an uncounted chunk's guess is multiplied by."""
        by_ext: dict[str, list[float]] = {}
        for p in self.files:
            if p.spans is None or p.job is None:
                continue
            counts = iter(p.job.result())
            acc = by_ext.setdefault(_extension(p.entry.path), [0.0, 0, 0])
            for sp in p.spans:
                if sp[6]:
                    acc[0] += sp[4]
                    acc[1] += next(counts)
                    acc[2] += 1
        guessed, counted = sum(a[0] for a in by_ext.values()), sum(a[1] for a in by_ext.values())
        overall = counted / guessed if guessed else 1.0
        return {e: a[1] / a[0] for e, a in by_ext.items() if a[0] and a[2] >= MIN_SAMPLE_CHUNKS}, overall

    def finish(self, old: _Cached | None) -> tuple[list[FileEntry], list[Chunk], Path, str]:
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
                    factor = factors.get(_extension(e.path), overall)
                    for s, en, sl, el, guess, h, counted in p.spans:
                        tok = next(counts) if counted else max(1, round(guess * factor))
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


def _lock(fd: int, *, exclusive: bool, wait: bool = True) -> bool:
    """``flock`` the file; False if ``wait`` is off and another process holds a conflicting lock."""
    if fcntl is None:
        return True
    op = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if wait else fcntl.LOCK_NB)
    try:
        fcntl.flock(fd, op)
        return True
    except OSError:
        return False


def _pin(path: Path) -> int | None:
    """Open ``path`` with a shared lock held until the process exits (or the fd is closed)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    _lock(fd, exclusive=False)
    return fd


def collect_garbage(directory: Path, keep: Path | None) -> int:
    """Delete context and temporary files in ``directory`` other than ``keep`` that no process
    holds (see the module docstring), each context file with its data file. Returns the number
    of files deleted."""
    removed = 0
    for path in list(directory.glob("context-*.txt")) + list(directory.glob(".context-*.tmp")) + list(
            directory.glob(".index-*.tmp")) + list(directory.glob(".data-*.tmp")) + [
            d for d in directory.glob("data-*.bin") if not (directory / ("context-" + d.name[5:-4] + ".txt")).exists()]:
        if keep is not None and path.name in (keep.name, data_name(keep)):
            continue
        if path.name.startswith((".index-", ".data-", "data-")):  # not locked while written: only collect old ones
            try:
                if time.time() - path.stat().st_mtime < 600:
                    continue
            except OSError:
                continue
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue
        try:
            if fcntl is None:
                if time.time() - os.fstat(fd).st_mtime < 86400:
                    continue
            elif not _lock(fd, exclusive=True, wait=False):
                continue  # in use by another run
            path.unlink(missing_ok=True)
            removed += 1
            if path.name.startswith("context-"):
                (directory / data_name(path)).unlink(missing_ok=True)
        finally:
            os.close(fd)
    return removed


#: The start of every ``index.json`` (``version`` is its first key), read without parsing the rest.
_VERSION_HEAD = re.compile(rb'^\{\s*"version"\s*:\s*(\d+)\s*,')


def remove_old_versions(root: Path, *, keep: Path | None = None) -> int:
    """Delete bundle folders under ``root`` written with another :data:`INDEX_VERSION` (no run of
    this version can use them) unless a process still holds one of their context files. Returns
    the number of folders removed. Never raises."""
    removed = 0
    try:
        folders = [d for d in root.iterdir() if d.is_dir() and not d.is_symlink() and d != keep]
    except OSError:
        return 0
    for d in folders:
        try:
            with open(d / "index.json", "rb") as fh:
                m = _VERSION_HEAD.match(fh.read(32))
        except OSError:
            continue  # no index: a bundle being written, or not ours
        if m is None or int(m[1]) == INDEX_VERSION:
            continue
        fds: list[int] = []
        try:
            for path in d.iterdir():
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                fds.append(fd)
                if path.name.startswith((".context-", "context-")) and not _lock(fd, exclusive=True, wait=False):
                    break  # in use by a run of the other version
            else:
                shutil.rmtree(d)
                removed += 1
        except OSError:
            pass
        finally:
            for fd in fds:
                os.close(fd)
    return removed


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            os.fchmod(fh.fileno(), 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


#: ``on_progress(files_done, files_total, bytes_done, bytes_total)``: called after each file of a
#: build (bytes are sizes on disk); ``rlm_cli.output.progress.index_callback`` makes events of it.
OnProgress = Callable[[int, int, int, int], None]


def _build(sources: list[tuple[SourceFile, str]], stdin: SourceFile | None, stdin_bytes: bytes | None,
           old: _Cached | None, options: CorpusOptions, report: LoadReport, directory: Path,
           prefetched: dict[str, Decoded] | None = None, on_progress: OnProgress | None = None) -> Corpus:
    """Write a new bundle into ``directory``; ``sources`` pairs each file with ``'same'``
    (reuse without reading), ``'check'`` (read; reuse if its hash matches) or ``'new'``.
    ``prefetched`` holds files already read while checking the cache (not read again);
    ``on_progress`` hears of every file done."""
    prefetched = prefetched or {}
    files_total = len(sources)
    bytes_total = sum(sf.size for sf, _ in sources)
    files_done = bytes_done = 0

    def done(sf: SourceFile) -> None:
        nonlocal files_done, bytes_done
        files_done += 1
        bytes_done += sf.size
        if on_progress is not None:
            on_progress(files_done, files_total, bytes_done, bytes_total)
    old_pos = {p: i for i, p in enumerate(old.files["path"])} if old is not None else {}
    to_read = sum(sf.size for sf, state in sources if state in ("new", "check")) + len(stdin_bytes or b"")
    writer = _Writer(directory, options, report, sample_tokens=to_read > EXACT_TOKENS_BYTES)
    mm: mmap.mmap | None = None
    dmm: mmap.mmap | None = None
    reads: Generator[Any, None, None] | None = None
    try:
        if old is not None and any(state != "new" for _, state in sources):
            with open(old.context_file, "rb") as fh:
                mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if old.index["context_bytes"] else None
            if old.index["data_file"] and old.index["data_bytes"]:
                with open(old.context_file.parent / old.index["data_file"], "rb") as fh:
                    dmm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        from_cache = 0
        skipped_files: list[tuple[str, int, int, str, int, int]] = []
        if writer.sample_tokens and default_threads() > 1:  # a large build: read in worker processes
            from rlm_cli.corpus import parallel

            need = [sf for sf, state in sources if not state.startswith("skip:")
                    and not (state == "same" and mm is not None) and sf.display not in prefetched]
            reads = parallel.read_many(need, options, default_threads())
        for sf, state in sources:
            if state.startswith("skip:"):
                report.skip(state[5:], path=sf.display)
                skipped_files.append((sf.display, sf.size, sf.mtime_ns, state[5:], sf.ctime_ns, sf.ino))
                done(sf)
                continue
            i = old_pos.get(sf.display, -1)
            if state == "same" and mm is not None:
                of = old.files  # type: ignore[union-attr]
                writer.add(sf, mm[of["bstart"][i]:of["bend"][i]], of["chars"][i], of["lines"][i],
                           of["sha1"][i], of["width"][i], of["notes"][i], old_i=i,
                           **_old_data(of, i, dmm))
                report.count_decoded(of["notes"][i])
                report.count_kind(of["kind"][i])
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
                elif i >= 0 and old is not None and old.files["sha1"][i] == read.sha1 \
                        and old.files["kind"][i] == read.kind:
                    report.count_kind(read.kind)
                    writer.add(sf, read.data, read.chars, read.lines, read.sha1, read.width, read.notes, old_i=i,
                               **_old_data(old.files, i, dmm))  # touched, not changed
                    from_cache += 1
                else:
                    report.count_kind(read.kind)
                    writer.add(sf, read.data, read.chars, read.lines, read.sha1, read.width, read.notes,
                               kind=read.kind, payload=read.payload, dmeta=read.dmeta, spans=read.spans,
                               counted=read.counted())
                done(sf)
                continue
            else:
                decoded = read_source(sf, options, report)
            if decoded is None:
                _remember_skip(report, sf, skipped_files)
                done(sf)
                continue
            sha1 = _sha1(decoded.data)
            lines = decoded.text.count("\n") + (0 if decoded.text.endswith("\n") else 1)
            width = char_width(decoded.text)
            report.count_kind(decoded.kind)
            if i >= 0 and old is not None and old.files["sha1"][i] == sha1 and old.files["kind"][i] == decoded.kind:
                writer.add(sf, decoded.data, len(decoded.text), lines, sha1, width, decoded.notes,
                           old_i=i, **_old_data(old.files, i, dmm))  # touched, not changed
                from_cache += 1
            else:
                payload, dmeta = _parse_data(decoded)
                writer.add(sf, decoded.data, len(decoded.text), lines, sha1, width, decoded.notes, text=decoded.text,
                           kind=decoded.kind, payload=payload, dmeta=dmeta)
            done(sf)
        if stdin is not None and stdin_bytes is not None:
            if is_binary(stdin_bytes[:8192]):
                report.skip("binary", "skipped <stdin>: binary data", path=stdin.display)
            else:
                d = decode_bytes(stdin_bytes)
                if d.text:
                    lines = d.text.count("\n") + (0 if d.text.endswith("\n") else 1)
                    report.count_decoded(d.notes)
                    writer.add(stdin, d.data, len(d.text), lines, _sha1(d.data), char_width(d.text), d.notes,
                               text=d.text)
                else:
                    report.skip("empty", path=stdin.display)
        if not writer.files:
            message, hint = _empty_message(report)
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
    corpus = Corpus(files, chunks, final, writer.chars, writer.nbytes, digest, report, DEFAULT_ENCODING,
                    options.chunk_tokens, from_cache=from_cache, reindexed=len(files) - from_cache,
                    skipped_files=skipped_files, data_file=writer.data_file, data_bytes=writer.dbytes,
                    data_digest=writer.dhasher.hexdigest() if writer.data_file else "")
    corpus._pin = writer.keep_open()
    _lock(corpus._pin, exclusive=False)  # downgrade: readers may share it, cleanup may not delete it
    return corpus


def _remember_skip(report: LoadReport, sf: SourceFile,
                   skipped_files: list[tuple[str, int, int, str, int, int]]) -> None:
    """Keep ``sf`` in the index's skipped files when it was just skipped for a reason of
    :data:`CACHED_SKIPS` (so an unchanged binary file is not read again)."""
    if report.last_skip is not None and report.last_skip[0] == sf.display and report.last_skip[1] in CACHED_SKIPS:
        skipped_files.append((sf.display, sf.size, sf.mtime_ns, report.last_skip[1], sf.ctime_ns, sf.ino))


def _old_data(of: dict[str, list[Any]], i: int, dmm: mmap.mmap | None) -> dict[str, Any]:
    """The kind, encoded payload and summary of file ``i`` of an old bundle, for :meth:`_Writer.add`."""
    a, b = of["dstart"][i], of["dend"][i]
    payload = dmm[a:b] if dmm is not None and b > a else None
    return {"kind": of["kind"][i], "payload": payload, "dmeta": of["dmeta"][i] if payload else None}


def _parse_data(decoded: Decoded) -> tuple[bytes | None, dict[str, Any] | None]:
    """The encoded payload and summary of a structured file (``None, None`` for other files):
    a Parquet/Excel payload read by the loader, or JSON/JSONL/CSV/TSV text parsed now."""
    kind = decoded.kind.split(",")[0]
    if decoded.encoded is not None:  # parsed by the confined decoder (rlm_cli.corpus.decode)
        return decoded.encoded, decoded.meta
    if decoded.payload is not None:
        payload = decoded.payload
        meta = structured.summarize(payload)
    elif kind in structured.TEXT_DATA_KINDS:
        payload, meta = structured.parse(kind, decoded.text)
    else:
        return None, None
    return structured.encode(payload), meta


def load_corpus(paths: list[str], options: CorpusOptions, *, stdin_bytes: bytes | None = None,
                on_warning: Callable[[str], None] | None = None, on_progress: OnProgress | None = None,
                deadline: float | None = None) -> Corpus:
    """Load ``paths`` (``'-'`` = ``stdin_bytes``) into a saved, chunk-indexed :class:`Corpus`.

    With ``options.use_cache`` (and no stdin) the bundle lives in the user cache dir and is
    reused and refreshed; otherwise it is written to a temporary folder that is deleted at exit
    (``corpus.temporary``). Warnings (skipped files, a rebuilt cache) go to ``on_warning``; each
    file of a (re)build is reported to ``on_progress`` (a cache hit reads no file and reports none).

    ``deadline`` (a ``time.monotonic()`` value: ``--timeout``) bounds the walk (every entry, and
    each ignore file's matching: ``loader.discover``) and the reading (every file).

    Raises:
        UsageError: a path does not exist; an ignore file's patterns take too long to match.
        EmptyCorpusError: no readable text file remained; the message names the reasons.
        BudgetExceededError: ``deadline`` passed while loading.
    """
    try:
        return _load_corpus(paths, options, stdin_bytes, on_warning, on_progress, deadline)
    finally:
        from rlm_cli.corpus import decode

        decode.close_decoder()  # its child served this load only


def _load_corpus(paths: list[str], options: CorpusOptions, stdin_bytes: bytes | None,
                 on_warning: Callable[[str], None] | None, on_progress: OnProgress | None,
                 deadline: float | None) -> Corpus:
    report = LoadReport()
    scan_ns = time.time_ns()
    file_paths = [p for p in paths if p != "-"]
    sources = discover(file_paths, options, report, deadline) if file_paths else []
    if deadline is not None:
        on_progress = _until(deadline, on_progress)
    stdin = SourceFile(STDIN_NAME, None, len(stdin_bytes or b""), 0) if "-" in paths else None
    use_cache = bool(options.use_cache and file_paths and stdin is None)
    try:
        if not sources and stdin is None:
            message, hint = _empty_message(report)
            raise EmptyCorpusError(message, hint=hint)
        old: _Cached | None = None
        directory: Path | None = None
        if use_cache:
            directory = index_root() / cache_key(file_paths, options)
            old = _read_cached(directory, report)
        pin = _pin(old.context_file) if old is not None else None
        if pin is None:
            old = None  # (its context file vanished between the check and the pin: rebuild)
        states = _classify(sources, old)
        prefetched: dict[str, Decoded] = {}
        if old is not None and pin is not None and _is_hit(sources, states, old, options, prefetched):
            for sf, state in zip(sources, states, strict=True):
                if state.startswith("skip:"):
                    report.skip(state[5:], path=sf.display)
            corpus = _corpus_from_index(old, report)
            corpus._pin = pin
            if "check" in states:  # verified racy files: record the new scan so they are trusted later
                _write_index(corpus, scan_ns, file_paths, options, report)
            else:
                _touch(old.context_file.parent / "index.json")
            return corpus
        if pin is not None:
            os.close(pin)
        if directory is not None:
            fresh = [d for d in (directory, *directory.parents) if not d.exists()]  # deepest first
            try:
                directory.mkdir(mode=0o700, parents=True, exist_ok=True)
                corpus = _build(list(zip(sources, states, strict=True)), stdin, stdin_bytes, old, options,
                                report, directory, prefetched, on_progress)
            except BaseException as exc:
                with contextlib.suppress(OSError):  # nothing usable was written (an empty corpus,
                    for folder in fresh:                # Ctrl-C): leave no folder it made behind
                        folder.rmdir()
                if not isinstance(exc, OSError):
                    raise
                report.warnings.append(f"cannot write the corpus cache in {directory} ({exc.strerror or exc}); "
                                       "using a temporary copy")
                directory = None
                old = None
                states = ["new"] * len(sources)
        if directory is None:
            tmp = Path(tempfile.mkdtemp(prefix="rlm-corpus-"))
            os.chmod(tmp, 0o700)  # private; the worker loads the bundle before dropping privileges
            atexit.register(shutil.rmtree, tmp, True)
            corpus = _build(list(zip(sources, states, strict=True)), stdin, stdin_bytes, None, options, report, tmp,
                            prefetched, on_progress)
            corpus.temporary = True
            _write_index(corpus, scan_ns, file_paths, options, report)
            return corpus
        _write_index(corpus, scan_ns, file_paths, options, report)
        collect_garbage(directory, corpus.context_file)
        if old is None:  # a new bundle folder: maybe the first run after an upgrade of the layout
            remove_old_versions(directory.parent, keep=directory)
        return corpus
    finally:
        if on_warning:
            for w in report.warnings:
                on_warning(w)


def _until(deadline: float, on_progress: OnProgress | None) -> OnProgress:
    """``on_progress``, after a check that ``deadline`` has not passed.

    The returned callback raises BudgetExceededError past ``deadline``.
    """
    def progress(files_done: int, files_total: int, bytes_done: int, bytes_total: int) -> None:
        if time.monotonic() > deadline:
            raise BudgetExceededError(f"time budget reached while loading the corpus ({files_done:,} of "
                                      f"{files_total:,} files read)", budget="timeout",
                                      hint="raise --timeout, or name fewer files")
        if on_progress is not None:
            on_progress(files_done, files_total, bytes_done, bytes_total)

    return progress


def _read_cached(directory: Path, report: LoadReport) -> _Cached | None:
    try:
        return read_index(directory)
    except CorruptCache as exc:
        report.warnings.append(f"the corpus cache in {directory} is corrupt ({exc}); rebuilding it")
        return None


def _classify(sources: list[SourceFile], old: _Cached | None) -> list[str]:
    """Per source: ``'same'`` (trust the cache), ``'check'`` (re-read, compare hash), ``'new'``,
    or ``'skip:REASON'`` (an unchanged file the cache remembers as binary or empty)."""
    if old is None:
        return ["new"] * len(sources)
    f, sk = old.files, old.index["skipped"]
    pos = {p: i for i, p in enumerate(f["path"])}
    skip_pos = {p: i for i, p in enumerate(sk["path"])}
    trusted_before = int(old.index.get("scan_ns", 0)) - RACY_NS
    states = []
    for sf in sources:
        i = pos.get(sf.display, -1)
        settled = sf.mtime_ns < trusted_before
        if i < 0:
            j = skip_pos.get(sf.display, -1)
            if j >= 0 and settled and same_stat(sk, j, sf):
                states.append("skip:" + sk["reason"][j])
            else:
                states.append("new")
        elif settled and same_stat(f, i, sf):
            states.append("same")
        else:
            states.append("check")
    return states


def _is_hit(sources: list[SourceFile], states: list[str], old: _Cached, options: CorpusOptions,
            prefetched: dict[str, Decoded]) -> bool:
    """True if the cached bundle is exactly this corpus. Racy or touched files of unchanged size
    are re-read and hash-checked; what they read is kept in ``prefetched`` for the rebuild."""
    f = old.files
    live = [i for i, s in enumerate(states) if not s.startswith("skip:")]
    if len(live) != len(f["path"]) or any(states[i] == "new" for i in live):
        return False
    if any(sources[i].display != p for i, p in zip(live, f["path"], strict=True)):
        return False
    checks = [(i, n) for n, i in enumerate(live) if states[i] == "check"]  # (source index, file index)
    if any(sources[i].size != f["size"][n] for i, n in checks):
        return False  # a size changed: certainly edited, no need to read anything now
    for i, n in checks:
        sf = sources[i]
        decoded = read_source(sf, options, LoadReport())
        if decoded is None or _sha1(decoded.data) != f["sha1"][n]:
            if decoded is not None:
                prefetched[sf.display] = decoded
            return False
    for i, n in checks:
        f["mtime_ns"][n], f["ctime_ns"][n], f["ino"][n] = sources[i].mtime_ns, sources[i].ctime_ns, sources[i].ino
    return True


def same_stat(columns: dict[str, list[Any]], i: int, sf: SourceFile) -> bool:
    """Whether row ``i`` of an index's file (or skipped-file) columns records ``sf``'s ``stat``
    exactly: size, ``mtime_ns``, ``ctime_ns`` and inode. ``ctime`` cannot be set by ``touch``,
    ``cp -p``, ``rsync -a`` or ``tar x`` (the kernel sets it on every write or ``utime``), and a
    file replaced by a rename has another inode; a row without them (an older index) never matches."""
    return (columns["size"][i] == sf.size and columns["mtime_ns"][i] == sf.mtime_ns
            and columns["ctime_ns"][i] == sf.ctime_ns != 0 and columns["ino"][i] == sf.ino != 0)


def _write_index(corpus: Corpus, scan_ns: int, roots: list[str], options: CorpusOptions,
                 report: LoadReport) -> None:
    meta = {"roots": [os.path.abspath(p) for p in roots], "include": options.include, "exclude": options.exclude,
            "hidden": options.hidden, "no_ignore": options.no_ignore, "written": time.time()}
    try:
        _atomic_write(corpus.index_file, json.dumps(corpus.index_dict(scan_ns=scan_ns, meta=meta),
                                                    separators=(",", ":")).encode())
    except OSError as exc:
        report.warnings.append(f"cannot write the corpus cache index in {corpus.bundle_dir} "
                               f"({exc.strerror or exc})")


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


_HINTS = {
    "hidden": "--hidden includes dotfiles", "ignored": "--no-ignore stops honouring .gitignore/.ignore/.rlmignore",
    "not included": "check the --include globs", "excluded": "check the --exclude globs",
    "too large": "raise --max-file-size or use --truncate-large", "binary": "binary files are never read",
    "unreadable": "check the file permissions", "empty": "the files are empty",
}


def _empty_message(report: LoadReport) -> tuple[str, str]:
    """``(message, hint)`` for an empty corpus, naming the reasons files were skipped."""
    if not report.skipped:
        return "the corpus is empty: no files found", "check the paths"
    reasons = Counter(report.skipped).most_common()
    listed = ", ".join(f"{n:,} {r}" for r, n in reasons)
    hints = "; ".join(_HINTS[r] for r, _ in reasons if r in _HINTS) or "see rlm ask --help"
    return f"the corpus is empty: every file was skipped ({listed})", hints


def derive_corpus(base: Corpus, *, replace: dict[str, str] | None = None,
                  add: list[tuple[str, str]] | None = None) -> Corpus:
    """A temporary corpus equal to ``base`` with some files' text replaced and files appended,
    built in memory from ``base``'s bundle: the files on disk are never read or changed.

    ``replace`` maps a path of ``base`` to its new text; ``add`` lists ``(path, text)`` files
    appended after ``base``'s files (a path already in ``base`` is refused). Unchanged files keep
    their bytes and chunks; only replaced and added files are chunked and tokenized. The bundle
    lives in a private temporary folder (``temporary``), deleted at exit. ``rlm eval`` uses this
    to plant needles and generated records without touching the user's files.

    Raises:
        KeyError: a path in ``replace`` is not in ``base``.
        ValueError: a path in ``add`` is already in ``base``.
        CorruptCache: ``base``'s bundle cannot be read back.
    """
    replace = dict(replace or {})
    add = list(add or [])
    old = read_index(base.bundle_dir, verify=False)
    if old is None:
        raise CorruptCache(f"the bundle in {base.bundle_dir} is gone or of another version")
    known = set(old.files["path"])
    missing = [p for p in replace if p not in known]
    if missing:
        raise KeyError(f"not in the corpus: {missing[:3]}")
    if any(p in known for p, _ in add):
        raise ValueError("an added path is already in the corpus")
    tmp = Path(tempfile.mkdtemp(prefix="rlm-corpus-"))
    os.chmod(tmp, 0o700)
    atexit.register(shutil.rmtree, tmp, True)
    options = CorpusOptions(chunk_tokens=base.chunk_tokens, use_cache=False)
    report = LoadReport()
    writer = _Writer(tmp, options, report)
    of = old.files
    try:
        with open(old.context_file, "rb") as fh, \
                (mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if old.index["context_bytes"]
                 else contextlib.nullcontext(b"")) as mm:  # type: ignore[attr-defined]
            for i, path in enumerate(of["path"]):
                sf = SourceFile(path, None, of["size"][i], of["mtime_ns"][i])
                if path in replace:
                    _add_text(writer, sf, replace[path])
                else:
                    writer.add(sf, mm[of["bstart"][i]:of["bend"][i]], of["chars"][i], of["lines"][i],
                               of["sha1"][i], of["width"][i], of["notes"][i], old_i=i)
            for path, text in add:
                _add_text(writer, SourceFile(path, None, len(text.encode("utf-8")), time.time_ns()), text)
            files, chunks, final, digest = writer.finish(old)
    except BaseException:
        writer.abort()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    corpus = Corpus(files, chunks, final, writer.chars, writer.nbytes, digest, report, DEFAULT_ENCODING,
                    base.chunk_tokens, reindexed=len(replace) + len(add), temporary=True)
    corpus._pin = writer.keep_open()
    _write_index(corpus, time.time_ns(), [], options, report)
    return corpus


def _add_text(writer: _Writer, sf: SourceFile, text: str) -> None:
    data = text.encode("utf-8")
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    writer.add(sf, data, len(text), lines, _sha1(data), char_width(text), "", text=text)
