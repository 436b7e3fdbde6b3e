"""Reading and writing a corpus bundle on disk: ``index.json``, its context file and data file.

Cache: one bundle directory per (roots, options) under ``cache_dir()/index``
(:func:`cache_key`). A second run on an unchanged tree reads only ``index.json`` and checks
the context file's size and SHA-1 (a file over :data:`FULL_VERIFY_BYTES`: its size, mtime and
inode, as recorded when it was written; when they differ, its SHA-1). The chunks of a bundle
read back are made into objects only when used (``model.CachedChunks``).

Writes are atomic (:func:`atomic_write`): a file is written to a temporary name and renamed; a
killed run leaves at most a stray temporary file, which a later run deletes
(``rlm_cli.corpus.cleanup``). Each process holds a shared ``flock`` on the context file it uses
(:func:`pin`), and old context files are deleted only when no process holds one.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm_cli.config import CorpusOptions, cache_dir
from rlm_cli.corpus.loader import LoadReport
from rlm_cli.corpus.model import (
    CHUNK_FIELDS,
    FILE_FIELDS,
    INDEX_VERSION,
    OPTIONAL_FILE_FIELDS,
    OPTIONAL_SKIP_FIELDS,
    PYTHON_TAG,
    SKIP_FIELDS,
    CachedChunks,
    Corpus,
    FileEntry,
    stat_key,
)
from rlm_cli.corpus.tokens import DEFAULT_ENCODING
from rlm_cli.protocol import unpack_columns

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no pinning; old context files are kept a day
    fcntl = None  # type: ignore[assignment]

#: A context or data file larger than this is checked by its size, mtime and inode, as recorded
#: when it was written, instead of its SHA-1 (which takes 0.7 s per GB), when those still match.
FULL_VERIFY_BYTES = 64 * 1024**2


def _needs_digest(path: Path, recorded: Any) -> bool:
    """Whether ``path`` must be hashed to be trusted: small, or changed since it was recorded."""
    key = stat_key(path)
    return key is None or key[0] <= FULL_VERIFY_BYTES or key != recorded


class CorruptCache(Exception):
    """A bundle that cannot be trusted (the message says why)."""


@dataclass
class CachedBundle:
    """A bundle read back from the cache: the parsed index and its context file."""

    index: dict[str, Any]
    context_file: Path

    @property
    def files(self) -> dict[str, list[Any]]:
        """The index's file columns (:data:`~rlm_cli.corpus.model.FILE_FIELDS`...)."""
        return self.index["files"]  # type: ignore[no-any-return]

    @property
    def chunks(self) -> dict[str, list[Any]]:
        """The index's chunk columns (:data:`~rlm_cli.corpus.model.CHUNK_FIELDS`)."""
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


def read_index(directory: Path, *, verify: bool = True) -> CachedBundle | None:
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
        files = index["files"] = unpack_columns(index["files"])
        chunks = index["chunks"] = unpack_columns(index["chunks"])
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
    return CachedBundle(index, context_file)


def data_name(context_file: Path) -> str:
    """The name of the data file that belongs to ``context_file`` (``context-X.txt`` -> ``data-X.bin``)."""
    return "data-" + context_file.name.removeprefix("context-").removesuffix(".txt") + ".bin"


def corpus_from_index(cached: CachedBundle, report: LoadReport) -> Corpus:
    """The :class:`Corpus` of a bundle read back (its chunks made on first use); the decoding
    notes and kinds of its files are counted in ``report``."""
    f, c, idx = cached.files, cached.chunks, cached.index
    paths = f["path"]
    files = list(map(FileEntry, *(f[k] for k in (*FILE_FIELDS, *OPTIONAL_FILE_FIELDS))))
    chunks = CachedChunks(c, paths)
    report.count_files(f["notes"], f["kind"])
    sk = idx["skipped"]
    data_file = cached.context_file.parent / idx["data_file"] if idx["data_file"] else None
    return Corpus(files, chunks, cached.context_file, idx["context_chars"], idx["context_bytes"], idx["digest"],
                  report, idx["encoding"], idx["chunk_tokens"], from_cache=len(files), data_file=data_file,
                  data_bytes=idx["data_bytes"], data_digest=idx["data_digest"],
                  skipped_files=[tuple(row) for row in zip(*(sk[k] for k in (*SKIP_FIELDS, *OPTIONAL_SKIP_FIELDS)),
                                                             strict=True)])


def lock(fd: int, *, exclusive: bool, wait: bool = True) -> bool:
    """``flock`` the file; False if ``wait`` is off and another process holds a conflicting lock."""
    if fcntl is None:
        return True
    op = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if wait else fcntl.LOCK_NB)
    try:
        fcntl.flock(fd, op)
        return True
    except OSError:
        return False


def pin(path: Path) -> int | None:
    """Open ``path`` with a shared lock held until the process exits (or the fd is closed)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    lock(fd, exclusive=False)
    return fd

def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (mode 0600) through a temporary file in its folder and a rename.

    Raises:
        OSError: the file cannot be written (the temporary file is removed).
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            os.fchmod(fh.fileno(), 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_index(corpus: Corpus, scan_ns: int, roots: list[str], options: CorpusOptions,
                report: LoadReport) -> None:
    """Save ``corpus.index_dict`` as its bundle's ``index.json`` (``scan_ns``: when the files
    were listed, ``time.time_ns()``); a failure to write is a warning in ``report``, not an error."""
    meta = {"roots": [os.path.abspath(p) for p in roots], "include": options.include, "exclude": options.exclude,
            "hidden": options.hidden, "no_ignore": options.no_ignore, "written": time.time()}
    try:
        atomic_write(corpus.index_file, json.dumps(corpus.index_dict(scan_ns=scan_ns, meta=meta),
                                                    separators=(",", ":")).encode())
    except OSError as exc:
        report.warnings.append(f"cannot write the corpus cache index in {corpus.bundle_dir} "
                               f"({exc.strerror or exc})")

