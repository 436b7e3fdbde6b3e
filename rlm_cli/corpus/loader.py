"""Find the files a run should read, the way ripgrep users expect, and decode them safely.

Rules (see ``discover``): ``.git/`` is always skipped; dotfiles are skipped unless
``hidden``; ``.gitignore``, ``.ignore`` and ``.rlmignore`` files (at any depth, gitignore
syntax through pathspec) are honoured unless ``no_ignore``; ``--include``/``--exclude`` globs
(gitignore syntax) filter paths relative to each root; FIFOs, sockets and devices are never
opened; symlink loops and unreadable files are skipped with a reason.
"""

from __future__ import annotations

import codecs
import glob
import os
import stat
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from rlm_cli.config import CorpusOptions
from rlm_cli.errors import UsageError

IGNORE_FILES = (".gitignore", ".ignore", ".rlmignore")
#: Bytes inspected for binary detection (the same window git and ripgrep use).
SNIFF_BYTES = 8192
#: Share of non-text bytes in the sniff window above which a file counts as binary.
BINARY_RATIO = 0.30
_TEXT_CONTROL = {7, 8, 9, 10, 12, 13, 27}


@dataclass
class SourceFile:
    """A file selected for reading: ``display`` is its path as shown to the model."""

    display: str
    path: Path | None  # None for stdin
    size: int  # bytes
    mtime_ns: int


@dataclass
class LoadReport:
    """What was loaded and what was skipped, for the summary line on stderr."""

    skipped: Counter[str] = field(default_factory=Counter)
    warnings: list[str] = field(default_factory=list)

    def skip(self, reason: str, warning: str | None = None) -> None:
        """Count one skipped file under ``reason``; keep ``warning`` for stderr."""
        self.skipped[reason] += 1
        if warning:
            self.warnings.append(warning)


def _compile(lines: list[str]) -> pathspec.PathSpec | None:
    lines = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    return pathspec.GitIgnoreSpec.from_lines(lines) if lines else None


def _read_ignore_spec(directory: str) -> pathspec.PathSpec | None:
    lines: list[str] = []
    for name in IGNORE_FILES:
        try:
            with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as fh:
                lines.extend(fh.read().splitlines())
        except OSError:
            continue
    return _compile(lines)


def _ignored(specs: list[tuple[str, pathspec.PathSpec]], full: str, is_dir: bool) -> bool:
    verdict = False
    for base, spec in specs:  # deeper specs come later and override (gitignore semantics)
        rel = os.path.relpath(full, base).replace(os.sep, "/")
        if is_dir:
            rel += "/"
        result = spec.check_file(rel)
        if result.include is not None:
            verdict = bool(result.include)
    return verdict


def discover(paths: list[str], options: CorpusOptions, report: LoadReport) -> list[SourceFile]:
    """Expand ``paths`` (files, folders, globs; not ``-``) into the files to read, sorted per root.

    Display paths: for a single folder argument they are relative to it; otherwise relative to
    the current directory when inside it, else absolute.

    Raises:
        UsageError: a path that does not exist and matches no glob.
    """
    include = _compile(options.include)
    exclude = _compile(options.exclude)
    roots: list[str] = []
    for raw in paths:
        if os.path.lexists(raw):
            roots.append(raw)
            continue
        matches = sorted(glob.glob(raw, recursive=True, include_hidden=options.hidden))
        if not matches:
            raise UsageError(f"no such file or directory: {raw}", hint="check the path")
        roots.extend(matches)
    single_dir = len(roots) == 1 and os.path.isdir(roots[0])
    cwd = os.getcwd()
    out: list[SourceFile] = []
    seen: set[tuple[int, int]] = set()

    def display(full: str, root: str) -> str:
        if single_dir:
            return os.path.relpath(full, root).replace(os.sep, "/")
        absolute = os.path.abspath(full)
        if absolute == cwd or absolute.startswith(cwd + os.sep):
            return os.path.relpath(absolute, cwd).replace(os.sep, "/")
        return absolute

    for root in roots:
        if os.path.isdir(root):
            root_specs: list[tuple[str, pathspec.PathSpec]] = []
            for sf in _walk(root, options, report, root_specs):
                rel = os.path.relpath(sf, root).replace(os.sep, "/")
                if include and not include.match_file(rel):
                    continue
                if exclude and exclude.match_file(rel):
                    continue
                entry = _stat_file(sf, display(sf, root), options, report, seen)
                if entry:
                    out.append(entry)
        else:
            name = os.path.basename(root)
            if exclude and exclude.match_file(name):
                continue
            entry = _stat_file(root, display(root, root), options, report, seen)
            if entry:
                out.append(entry)
    return out


def _walk(root: str, options: CorpusOptions, report: LoadReport,
          specs: list[tuple[str, pathspec.PathSpec]]) -> Iterator[str]:
    """Yield regular-file paths under ``root`` in sorted order, applying ignore rules."""
    try:
        st = os.stat(root)
    except OSError as exc:
        report.skip("unreadable", f"cannot read {root}: {exc.strerror}")
        return
    visited_dirs: set[tuple[int, int]] = {(st.st_dev, st.st_ino)}
    # Iterative DFS keeps deep trees off the Python recursion limit.
    pending: list[tuple[str, list[tuple[str, pathspec.PathSpec]]]] = [(root, list(specs))]
    while pending:
        directory, dir_specs = pending.pop()
        if not options.no_ignore:
            spec = _read_ignore_spec(directory)
            if spec is not None:
                dir_specs = dir_specs + [(directory, spec)]
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            report.skip("unreadable", f"cannot list {directory}: {exc.strerror}")
            continue
        subdirs: list[str] = []
        for entry in entries:
            name = entry.name
            if name == ".git":
                continue
            if name.startswith(".") and not options.hidden:
                report.skip("hidden")
                continue
            full = entry.path
            try:
                is_dir = entry.is_dir()  # follows symlinks
            except OSError:
                is_dir = False
            if dir_specs and _ignored(dir_specs, full, is_dir):
                report.skip("ignored")
                continue
            if is_dir:
                try:
                    dst = os.stat(full)
                except OSError as exc:
                    report.skip("unreadable", f"cannot read {full}: {exc.strerror}")
                    continue
                key = (dst.st_dev, dst.st_ino)
                if key in visited_dirs:
                    report.skip("symlink loop", f"skipped {full}: symlink loop")
                    continue
                visited_dirs.add(key)
                subdirs.append(full)
            else:
                yield full
        for sub in reversed(subdirs):
            pending.append((sub, dir_specs))


def _stat_file(full: str, shown: str, options: CorpusOptions, report: LoadReport,
               seen: set[tuple[int, int]]) -> SourceFile | None:
    try:
        st = os.stat(full)
    except OSError as exc:
        reason = "symlink loop" if exc.errno == 40 else "unreadable"
        report.skip(reason, f"skipped {shown}: {exc.strerror}")
        return None
    if not stat.S_ISREG(st.st_mode):
        report.skip("special file", f"skipped {shown}: not a regular file")
        return None
    key = (st.st_dev, st.st_ino)
    if key in seen:
        return None  # the same file reached twice (two arguments, a symlink): read it once
    seen.add(key)
    if st.st_size > options.max_file_size and not options.truncate_large:
        report.skip("too large", f"skipped {shown}: {st.st_size:,} bytes is over --max-file-size "
                                 f"{options.max_file_size:,} (use --truncate-large to keep its head)")
        return None
    return SourceFile(display=shown, path=Path(full), size=st.st_size, mtime_ns=st.st_mtime_ns)


def is_binary(head: bytes) -> bool:
    """True if ``head`` (the first 8 KiB) looks binary: a NUL byte, or over 30% non-text bytes.

    UTF-16/32 files with a BOM are text (they contain NULs by design).
    """
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        return False
    if b"\x00" in head:
        return True
    if not head:
        return False
    nontext = sum(1 for b in head if b < 32 and b not in _TEXT_CONTROL)
    return nontext / len(head) > BINARY_RATIO


def decode(data: bytes) -> str:
    """Decode bytes: UTF-8 (BOM stripped); UTF-16/32 with a BOM; Latin-1 as a last resort.

    Never raises: invalid UTF-8 in a mostly-UTF-8 file becomes U+FFFD replacement characters.
    """
    if data.startswith(codecs.BOM_UTF8):
        return data[3:].decode("utf-8", "replace")
    for bom, enc in ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
                     (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):
        if data.startswith(bom):
            return data.decode(enc, "replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # Mostly valid UTF-8 with a few bad bytes: keep UTF-8 with replacements. A file that
        # fails early and often is more likely a legacy 8-bit encoding: Latin-1 maps every byte.
        bad = data[exc.start:exc.start + 4096].decode("utf-8", "replace").count("\ufffd")
        if exc.start < 64 and bad > 8:
            return data.decode("latin-1")
        return data.decode("utf-8", "replace")


def read_text(sf: SourceFile, options: CorpusOptions, report: LoadReport) -> str | None:
    """Read and decode one file; ``None`` when it is binary or unreadable (counted in ``report``)."""
    assert sf.path is not None
    try:
        fd = os.open(sf.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for a FIFO since the stat
                report.skip("special file", f"skipped {sf.display}: not a regular file")
                return None
            limit = options.max_file_size if options.truncate_large else -1
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = fh.read(limit) if limit >= 0 else fh.read()
        finally:
            os.close(fd)
    except OSError as exc:
        report.skip("unreadable", f"skipped {sf.display}: {exc.strerror}")
        return None
    if is_binary(data[:SNIFF_BYTES]):
        report.skip("binary")
        return None
    if options.truncate_large and sf.size > options.max_file_size:
        report.warnings.append(f"truncated {sf.display} to its first {options.max_file_size:,} bytes")
    return decode(data)

