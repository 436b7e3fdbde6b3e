"""The chunk-indexed context store and its on-disk cache.

A :class:`Corpus` is one string ``context`` (each file's text behind a header line
``==> path <==``), the list of :class:`FileEntry` with character offsets into ``context``, and
the list of :class:`Chunk`. It is saved as a *bundle* of two files, ``context-<digest>.txt``
(UTF-8) and ``index.json``, which the REPL worker reads directly.

Cache: one bundle directory per (roots, options) under ``cache_dir()/index``. Each file is
keyed by path, size and mtime (ns); an unchanged file reuses its text (sliced out of the cached
context) and its chunks, so only edited files are read, chunked and tokenized again. Writes are
atomic (temp file, then ``os.replace``; the index is written last and names its context file),
so a killed run never leaves a half-written bundle; an unreadable or inconsistent bundle is
rebuilt with a warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlm_cli.config import CorpusOptions, cache_dir
from rlm_cli.corpus.chunker import split_text
from rlm_cli.corpus.loader import LoadReport, SourceFile, decode, discover, is_binary, read_text
from rlm_cli.corpus.tokens import DEFAULT_ENCODING, count_tokens_batch
from rlm_cli.errors import EmptyCorpusError

#: Bump when the bundle layout changes; older bundles are rebuilt.
INDEX_VERSION = 1
STDIN_NAME = "<stdin>"


def header_line(path: str) -> str:
    """The line that precedes each file's text in ``context``."""
    return f"==> {path} <==\n"


@dataclass
class FileEntry:
    """One file in ``context``: its text is ``context[start:end]``.

    ``size`` is in bytes on disk, ``chars`` in characters, ``tokens`` in ``encoding`` tokens.
    """

    path: str
    size: int
    mtime_ns: int
    chars: int
    lines: int
    tokens: int
    start: int
    end: int
    sha1: str
    first_chunk: int
    n_chunks: int


@dataclass
class Chunk:
    """A piece of one file: ``context[start:end]``, lines ``start_line..end_line`` (1-based,
    inclusive), ``tokens`` tokens, ``sha1`` of its text."""

    id: int
    path: str
    start_line: int
    end_line: int
    start: int
    end: int
    tokens: int
    sha1: str


@dataclass
class Corpus:
    """A loaded corpus. ``report`` says what was skipped and why."""

    context: str
    files: list[FileEntry]
    chunks: list[Chunk]
    report: LoadReport = field(default_factory=LoadReport)
    encoding: str = DEFAULT_ENCODING
    bundle_dir: Path | None = None
    context_file: Path | None = None
    from_cache: int = 0  # files reused from the cache

    @property
    def total_tokens(self) -> int:
        """Tokens in all files' text (headers excluded)."""
        return sum(f.tokens for f in self.files)

    @property
    def total_bytes(self) -> int:
        """Bytes of all files on disk."""
        return sum(f.size for f in self.files)

    def index_dict(self) -> dict[str, Any]:
        """The JSON document saved as ``index.json`` (and read by the worker)."""
        return {
            "version": INDEX_VERSION,
            "encoding": self.encoding,
            "context_file": self.context_file.name if self.context_file else None,
            "context_chars": len(self.context),
            "files": [asdict(f) for f in self.files],
            "chunks": [asdict(c) for c in self.chunks],
        }

    def save_bundle(self, directory: Path) -> Path:
        """Write ``context-<digest>.txt`` then ``index.json`` atomically into ``directory``.

        Returns the index path. Older context files in the directory are removed afterwards.
        """
        directory.mkdir(parents=True, exist_ok=True)
        data = self.context.encode("utf-8", "surrogatepass")
        digest = hashlib.blake2b(data, digest_size=12).hexdigest()
        ctx_path = directory / f"context-{digest}.txt"
        if not ctx_path.exists():
            _atomic_write(ctx_path, data)
        self.context_file = ctx_path
        self.bundle_dir = directory
        index_path = directory / "index.json"
        _atomic_write(index_path, json.dumps(self.index_dict(), separators=(",", ":")).encode())
        for old in directory.glob("context-*.txt"):
            if old != ctx_path:
                old.unlink(missing_ok=True)
        return index_path

    def summary(self) -> str:
        """One line for stderr: files, bytes, tokens, chunks and skipped files by reason."""
        line = (f"loaded {len(self.files):,} files, {self.total_bytes:,} bytes, "
                f"{self.total_tokens:,} tokens, {len(self.chunks):,} chunks")
        if self.from_cache:
            line += f" ({self.from_cache:,} from cache)"
        if self.report.skipped:
            parts = ", ".join(f"{n:,} {reason}" for reason, n in sorted(self.report.skipped.items()))
            line += f"; skipped {parts}"
        return line


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)  # the sandboxed worker may run as another user and must read it
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def cache_key(paths: list[str], options: CorpusOptions) -> str:
    """Directory name of the bundle for these roots and options (a digest, 24 hex chars)."""
    spec = {
        "roots": [os.path.abspath(p) for p in paths],
        "include": options.include, "exclude": options.exclude, "hidden": options.hidden,
        "no_ignore": options.no_ignore, "max_file_size": options.max_file_size,
        "truncate_large": options.truncate_large, "chunk_tokens": options.chunk_tokens,
        "version": INDEX_VERSION, "encoding": DEFAULT_ENCODING,
    }
    return hashlib.blake2b(json.dumps(spec, sort_keys=True).encode(), digest_size=12).hexdigest()


def _read_cached(directory: Path, report: LoadReport) -> tuple[dict[str, Any], str] | None:
    index_path = directory / "index.json"
    if not index_path.exists():
        return None
    try:
        index = json.loads(index_path.read_bytes())
        if index.get("version") != INDEX_VERSION:
            return None
        context = (directory / index["context_file"]).read_bytes().decode("utf-8", "surrogatepass")
        if len(context) != index["context_chars"]:
            raise ValueError("context length does not match the index")
        return index, context
    except (OSError, ValueError, KeyError, TypeError) as exc:
        report.warnings.append(f"corpus cache at {directory} was unreadable ({exc}); rebuilding it")
        return None


def build(sources: list[tuple[SourceFile, str]], options: CorpusOptions,
          reused: dict[str, tuple[dict[str, Any], list[dict[str, Any]], str]] | None = None,
          report: LoadReport | None = None) -> Corpus:
    """Assemble ``context``, files and chunks from ``(source, text)`` pairs.

    ``reused`` maps a display path to ``(file entry, chunk entries, text)`` from the cache; those
    files keep their token counts and chunk boundaries instead of being chunked again.
    """
    reused = reused or {}
    parts: list[str] = []
    files: list[FileEntry] = []
    chunks: list[Chunk] = []
    pending: list[tuple[int, str]] = []  # (chunk id, chunk text) needing a token count
    pos = 0
    for sf, text in sources:
        head = header_line(sf.display)
        parts.append(head)
        pos += len(head)
        start = pos
        parts.append(text)
        pos += len(text)
        tail = "\n\n" if not text.endswith("\n") else "\n"
        parts.append(tail)
        first = len(chunks)
        cached = reused.get(sf.display)
        if cached is not None:
            entry, cchunks, _ = cached
            for c in cchunks:
                chunks.append(Chunk(len(chunks), sf.display, c["start_line"], c["end_line"],
                                    start + c["rel_start"], start + c["rel_end"], c["tokens"], c["sha1"]))
            sha = entry["sha1"]
        else:
            for sp in split_text(text, sf.display, options.chunk_tokens):
                piece = text[sp.start:sp.end]
                chunks.append(Chunk(len(chunks), sf.display, sp.start_line, sp.end_line, start + sp.start,
                                    start + sp.end, 0, hashlib.sha1(piece.encode("utf-8", "surrogatepass")).hexdigest()))
                pending.append((len(chunks) - 1, piece))
            sha = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()
        files.append(FileEntry(sf.display, sf.size, sf.mtime_ns, len(text),
                               text.count("\n") + (0 if not text or text.endswith("\n") else 1),
                               0, start, start + len(text), sha, first, len(chunks) - first))
        pos += len(tail)
    counts = count_tokens_batch([t for _, t in pending], threads=max(2, os.cpu_count() or 2))
    for (cid, _), n in zip(pending, counts, strict=False):
        chunks[cid].tokens = n
    for f in files:
        f.tokens = sum(c.tokens for c in chunks[f.first_chunk:f.first_chunk + f.n_chunks])
    return Corpus("".join(parts), files, chunks, report or LoadReport(), from_cache=len(
        [1 for sf, _ in sources if sf.display in reused]))


def load_corpus(paths: list[str], options: CorpusOptions, *, stdin_bytes: bytes | None = None,
                on_warning: Callable[[str], None] | None = None) -> Corpus:
    """Load ``paths`` (``'-'`` = ``stdin_bytes``) into a saved, chunk-indexed :class:`Corpus`.

    With ``options.use_cache`` the bundle lives in the user cache dir and is reused; without it
    the bundle is written to a fresh temporary directory that the caller should remove
    (``corpus.bundle_dir``) when done.

    Raises:
        UsageError: a path does not exist.
        EmptyCorpusError: no readable text file remained; the message names the reasons.
    """
    report = LoadReport()
    file_paths = [p for p in paths if p != "-"]
    sources = discover(file_paths, options, report) if file_paths else []
    directory: Path | None = None
    cached: tuple[dict[str, Any], str] | None = None
    if options.use_cache and file_paths and "-" not in paths:
        directory = cache_dir() / "index" / cache_key(file_paths, options)
        cached = _read_cached(directory, report)
    reused: dict[str, tuple[dict[str, Any], list[dict[str, Any]], str]] = {}
    if cached is not None:
        index, old_context = cached
        old_files = {f["path"]: f for f in index["files"]}
        for sf in sources:
            entry = old_files.get(sf.display)
            if entry and entry["size"] == sf.size and entry["mtime_ns"] == sf.mtime_ns:
                cks = index["chunks"][entry["first_chunk"]:entry["first_chunk"] + entry["n_chunks"]]
                rel = [dict(c, rel_start=c["start"] - entry["start"], rel_end=c["end"] - entry["start"]) for c in cks]
                reused[sf.display] = (entry, rel, old_context[entry["start"]:entry["end"]])
        same = (len(reused) == len(sources) == len(index["files"])
                and [f["path"] for f in index["files"]] == [s.display for s in sources])
        if same:
            corpus = Corpus(old_context, [FileEntry(**f) for f in index["files"]],
                            [Chunk(**c) for c in index["chunks"]], report, index["encoding"],
                            directory, directory / index["context_file"], from_cache=len(sources))
            _flush_warnings(report, on_warning)
            return corpus
    texts: list[tuple[SourceFile, str]] = []
    for sf in sources:
        if sf.display in reused:
            texts.append((sf, reused[sf.display][2]))
            continue
        text = read_text(sf, options, report)
        if text is not None:
            texts.append((sf, text))
    if stdin_bytes is not None and "-" in paths:
        if is_binary(stdin_bytes[:8192]):
            report.skip("binary", "skipped <stdin>: binary data")
        else:
            texts.append((SourceFile(STDIN_NAME, None, len(stdin_bytes), 0), decode(stdin_bytes)))
    texts = [(sf, t) for sf, t in texts if t]
    if not texts:
        _flush_warnings(report, on_warning)
        raise EmptyCorpusError(_empty_message(report), hint="see --include, --hidden, --no-ignore")
    corpus = build(texts, options, reused, report)
    corpus.save_bundle(directory if directory is not None else Path(tempfile.mkdtemp(prefix="rlm-corpus-")))
    _flush_warnings(report, on_warning)
    return corpus


def _flush_warnings(report: LoadReport, on_warning: Callable[[str], None] | None) -> None:
    if on_warning:
        for w in report.warnings:
            on_warning(w)


def _empty_message(report: LoadReport) -> str:
    if not report.skipped:
        return "the corpus is empty: no files found (or only empty files)"
    reasons = ", ".join(f"{n:,} {r}" for r, n in Counter(report.skipped).most_common())
    return f"the corpus is empty: every file was skipped ({reasons})"
