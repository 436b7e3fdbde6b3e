"""Loading a corpus through its on-disk cache: :func:`load_corpus` and :func:`derive_corpus`.

A :class:`~rlm_cli.corpus.model.Corpus` is saved as a *bundle* (``rlm_cli.corpus.bundle``):
one bundle directory per (roots, options) under ``cache_dir()/index``. A file is reused
when its path, size, ``mtime_ns``, ``ctime_ns`` and inode match the index (:func:`same_stat`:
``cp -p``, ``rsync -a`` and ``tar x`` restore the mtime but cannot restore the ctime) and its
mtime is older than the index's scan by more than :data:`RACY_NS` (otherwise it is re-read and
reused only if its content hash still matches: an edit within the same clock tick cannot go
unnoticed). Reused files keep their chunks and token counts and their bytes are copied from the
old context file; only new or changed files are read, chunked and tokenized
(``rlm_cli.corpus.build``). A second run on an unchanged tree reads only ``index.json`` and
checks the context file (``bundle.read_index``).

Writes are atomic: the context file is written to a temporary name and renamed to its content
digest, then ``index.json`` is replaced; a killed run leaves at most a stray temporary file,
which a later run deletes. Each process holds a shared ``flock`` on the context file it uses,
and old context files are deleted only when no process holds one, so a concurrent run never
loses its bundle (``rlm_cli.corpus.cleanup``). An unreadable or inconsistent bundle is rebuilt
with a warning.
"""

from __future__ import annotations

import atexit
import contextlib
import mmap
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import nofollow, walklog
from rlm_cli.corpus.build import BundleWriter, OnProgress, add_text, build_bundle, empty_message
from rlm_cli.corpus.bundle import (
    CachedBundle,
    CorruptCache,
    cache_key,
    corpus_from_index,
    index_root,
    pin,
    read_index,
    write_index,
)
from rlm_cli.corpus.cleanup import collect_garbage, remove_old_versions
from rlm_cli.corpus.loader import Decoded, LoadReport, SourceFile, read_source
from rlm_cli.corpus.model import Corpus, sha1_hex
from rlm_cli.corpus.tokens import DEFAULT_ENCODING
from rlm_cli.corpus.walk import discover
from rlm_cli.errors import BudgetExceededError, EmptyCorpusError

STDIN_NAME = "<stdin>"
#: A file modified less than this long before the index's scan is re-hashed on the next load
#: (and a folder changed less than this long before a walk is listed again: ``walklog``).
RACY_NS = walklog.RACY_NS


def load_corpus(paths: list[str], options: CorpusOptions, *, stdin_bytes: bytes | None = None,
                on_warning: Callable[[str], None] | None = None, on_progress: OnProgress | None = None,
                deadline: float | None = None) -> Corpus:
    """Load ``paths`` (``'-'`` = ``stdin_bytes``) into a saved, chunk-indexed :class:`Corpus`.

    With ``options.use_cache`` (and no stdin) the bundle lives in the user cache dir and is
    reused and refreshed; otherwise it is written to a temporary folder that is deleted at exit
    (``corpus.temporary``). Warnings (skipped files, a rebuilt cache) go to ``on_warning``; each
    file of a (re)build is reported to ``on_progress`` (a cache hit reads no file and reports none).

    ``deadline`` (a ``time.monotonic()`` value: ``--timeout``) bounds the walk (every entry, and
    each ignore file's matching: ``walk.discover``) and the reading (every file).

    Raises:
        UsageError: a path does not exist; an ignore file's patterns take too long to match.
        EmptyCorpusError: no readable text file remained; the message names the reasons.
        BudgetExceededError: ``deadline`` passed while loading.
    """
    try:
        with nofollow.kept():  # (the folders on the way to the files, opened once for the walk and the reads)
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
    stdin = SourceFile(STDIN_NAME, None, len(stdin_bytes or b""), 0) if "-" in paths else None
    use_cache = bool(options.use_cache and file_paths and stdin is None)
    directory: Path | None = index_root() / cache_key(file_paths, options) if use_cache else None
    sources = walklog.replay(directory, file_paths, options, report, deadline) if directory is not None else None
    log = walklog.WalkLog(file_paths) if sources is None and directory is not None else None
    if sources is None:
        sources = discover(file_paths, options, report, deadline, log) if file_paths else []
    if deadline is not None:
        on_progress = _until(deadline, on_progress)
    try:
        if not sources and stdin is None:
            message, hint = empty_message(report)
            raise EmptyCorpusError(message, hint=hint)
        old: CachedBundle | None = None
        if directory is not None:
            old = _read_cached(directory, report)
        held = pin(old.context_file) if old is not None else None
        if held is None:
            old = None  # (its context file vanished between the check and the pin: rebuild)
        states = _classify(sources, old)
        prefetched: dict[str, Decoded] = {}
        if old is not None and held is not None and _is_hit(sources, states, old, options, prefetched):
            for sf, state in zip(sources, states, strict=True):
                if state.startswith("skip:"):
                    report.skip(state[5:], path=sf.display)
            corpus = corpus_from_index(old, report)
            corpus.hold(held)
            if "check" in states:  # verified racy files: record the new scan so they are trusted later
                write_index(corpus, scan_ns, file_paths, options, report)
            else:
                _touch(old.context_file.parent / "index.json")
            if log is not None and directory is not None:
                walklog.save(directory, log, options)
            return corpus
        if held is not None:
            os.close(held)
        if directory is not None:
            fresh = [d for d in (directory, *directory.parents) if not d.exists()]  # deepest first
            try:
                directory.mkdir(mode=0o700, parents=True, exist_ok=True)
                corpus = build_bundle(list(zip(sources, states, strict=True)), stdin, stdin_bytes, old, options,
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
            corpus = build_bundle(list(zip(sources, states, strict=True)), stdin, stdin_bytes, None, options, report, tmp,
                            prefetched, on_progress)
            corpus.temporary = True
            write_index(corpus, scan_ns, file_paths, options, report)
            return corpus
        write_index(corpus, scan_ns, file_paths, options, report)
        if log is not None:
            walklog.save(directory, log, options)
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


def _read_cached(directory: Path, report: LoadReport) -> CachedBundle | None:
    try:
        return read_index(directory)
    except CorruptCache as exc:
        report.warnings.append(f"the corpus cache in {directory} is corrupt ({exc}); rebuilding it")
        return None


def _classify(sources: list[SourceFile], old: CachedBundle | None) -> list[str]:
    """Per source: ``'same'`` (trust the cache), ``'check'`` (re-read, compare hash), ``'new'``,
    or ``'skip:REASON'`` (an unchanged file the cache remembers as binary or empty)."""
    if old is None:
        return ["new"] * len(sources)
    f, sk = old.files, old.index["skipped"]
    paths = f["path"]
    pos: dict[str, int] | None = None  # made when the sources stop following the index's order
    skip_pos = {p: i for i, p in enumerate(sk["path"])}
    trusted_before = int(old.index.get("scan_ns", 0)) - RACY_NS
    states = []
    n = len(paths)
    guess = 0  # the index row the next source most likely has (the walk's order is the index's)
    for sf in sources:
        if guess < n and paths[guess] == sf.display:
            i = guess
        else:
            if pos is None:
                pos = {p: i for i, p in enumerate(paths)}
            i = pos.get(sf.display, -1)
        if i >= 0:
            guess = i + 1
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


def _is_hit(sources: list[SourceFile], states: list[str], old: CachedBundle, options: CorpusOptions,
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
        if decoded is None or sha1_hex(decoded.data) != f["sha1"][n]:
            if decoded is not None:
                prefetched[sf.display] = decoded
            return False
    if checks:
        for k in ("mtime_ns", "ctime_ns", "ino"):
            f[k] = list(f[k])  # (a packed column may be an int32 array: an inode number may not fit)
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


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass

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
    writer = BundleWriter(tmp, options, report)
    of = old.files
    try:
        with open(old.context_file, "rb") as fh, \
                (mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if old.index["context_bytes"]
                 else contextlib.nullcontext(b"")) as mm:  # type: ignore[attr-defined]
            for i, path in enumerate(of["path"]):
                sf = SourceFile(path, None, of["size"][i], of["mtime_ns"][i])
                if path in replace:
                    add_text(writer, sf, replace[path])
                else:
                    writer.add(sf, mm[of["bstart"][i]:of["bend"][i]], of["chars"][i], of["lines"][i],
                               of["sha1"][i], of["width"][i], of["notes"][i], old_i=i)
            for path, text in add:
                add_text(writer, SourceFile(path, None, len(text.encode("utf-8")), time.time_ns()), text)
            files, chunks, final, digest = writer.finish(old)
    except BaseException:
        writer.abort()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    corpus = Corpus(files, chunks, final, writer.chars, writer.nbytes, digest, report, DEFAULT_ENCODING,
                    base.chunk_tokens, reindexed=len(replace) + len(add), temporary=True)
    corpus.hold(writer.keep_open())
    write_index(corpus, time.time_ns(), [], options, report)
    return corpus
