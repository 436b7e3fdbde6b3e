"""Find the files a run should read, the way ripgrep users expect, and decode them safely.

Rules (see :func:`discover`):

* paths may be files, folders or globs (``src/**/*.py``); ``-`` (stdin) is handled by the store;
* ``.git/`` is always skipped; dotfiles and dot-folders are skipped unless ``hidden``;
* ``.gitignore``, ``.ignore`` and ``.rlmignore`` files at any depth are honoured (gitignore
  syntax through pathspec; a deeper file overrides a shallower one, and an ignored folder is
  not entered) unless ``no_ignore``; one whose patterns take over :data:`IGNORE_FILE_SECONDS`
  to match stops the load with an error naming it, and a ``deadline`` (``--timeout``) stops it too;
* ``--exclude`` globs (gitignore syntax, relative to each folder argument) prune folders and
  skip files; ``--include`` globs keep only matching files; files named explicitly on the command
  line bypass the ignore files and ``--include`` (like ripgrep) but not ``--exclude``;
* a symlink whose real target lies outside every root (a PATH named, or the folder a glob starts
  from) is skipped, counted as ``symlink outside`` and named, unless ``follow`` (``--follow``);
  other links are followed, each file and folder read once (``rlm_cli.corpus.links``); a root
  that is itself a link is followed; a symlink loop, a broken link or an unreadable file or
  folder is skipped with a warning; FIFOs, sockets and devices are never opened;
* file names are kept as the OS gives them for opening, and shown (``SourceFile.display``) with
  U+FFFD for bytes that are not UTF-8 and for control characters (``links.display_text``);
* files over ``max_file_size`` bytes are skipped with a warning, or truncated to that size
  with ``truncate_large``;
* binary files (a NUL byte, or more than 30% control bytes, in the first 8 KiB) are skipped;
* text is decoded as UTF-8 (BOM stripped), UTF-16/UTF-32 when a BOM says so, and otherwise as
  Latin-1 when invalid UTF-8 sequences outnumber valid multi-byte characters (a legacy 8-bit
  file); a mostly-UTF-8 file keeps its valid characters and reads each byte that is not part of
  valid UTF-8 as Latin-1 (no byte is lost or replaced by U+FFFD). Decoding never raises.

Everything skipped is counted by reason in a :class:`LoadReport`, which the summary line and the
empty-corpus error read.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import glob
import os
import re
import signal
import stat
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pathspec

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import formats, links
from rlm_cli.errors import BudgetExceededError, UsageError

IGNORE_FILES = (".gitignore", ".ignore", ".rlmignore")
#: Bytes inspected for binary detection (the same window git and ripgrep use).
SNIFF_BYTES = 8192
#: Share of control bytes in the sniff window above which a file counts as binary.
BINARY_RATIO = 0.30
#: Warnings kept per skip reason (the summary still counts every file).
MAX_WARNINGS_PER_REASON = 20

# Control bytes that do not occur in text (tab, LF, VT, FF, CR, ESC, BEL and BS do).
_NON_TEXT = bytes(b for b in range(32) if b not in (7, 8, 9, 10, 11, 12, 13, 27)) + b"\x7f"
_BOMS_16_32 = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


@dataclass(slots=True)
class SourceFile:
    """A file selected for reading. ``display`` is its path as shown to the model (UTF-8 text:
    ``links.display_text``); ``path`` the path to open, as the OS gave it (``None`` for stdin);
    ``size`` in bytes, ``mtime_ns``, ``ctime_ns`` and ``ino`` from ``stat`` (the cache trusts a
    file whose four are unchanged; 0 when unknown)."""

    display: str
    path: str | None
    size: int
    mtime_ns: int
    ctime_ns: int = 0
    ino: int = 0


#: Skipped files named (path and reason) in a report; the counts cover every one.
MAX_NAMED_SKIPS = 200


@dataclass
class LoadReport:
    """What was skipped and why (counts by reason), warnings for stderr, and decoding notes.

    ``named`` lists ``(display path, reason)`` of the first :data:`MAX_NAMED_SKIPS` files or
    folders skipped (a folder's path ends with ``/``: it was not entered); ``last_skip`` is the
    latest one (:func:`read_source` sets it for the file it was asked to read).
    """

    skipped: Counter[str] = field(default_factory=Counter)
    warnings: list[str] = field(default_factory=list)
    decoded: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    last_skip: tuple[str, str] | None = None
    named: list[tuple[str, str]] = field(default_factory=list)

    def count_decoded(self, notes: str) -> None:
        """Count a loaded file's decoding notes (:attr:`Decoded.notes`, also kept in the index)."""
        for tag in filter(None, notes.split(",")):
            self.decoded[tag] += 1

    def count_kind(self, kind: str) -> None:
        """Count a loaded file's kind tags (:attr:`Decoded.kind`: ``jsonl,gz`` counts a jsonl and a gz)."""
        for tag in filter(None, kind.split(",")):
            self.kinds[tag] += 1

    def skip(self, reason: str, warning: str | None = None, *, path: str | None = None) -> None:
        """Count one skipped file under ``reason``, name it (``path``; the first
        :data:`MAX_NAMED_SKIPS`), and keep ``warning`` (at most 20 per reason)."""
        self.skipped[reason] += 1
        if path is not None:
            self.last_skip = (path, reason)
            if len(self.named) < MAX_NAMED_SKIPS:
                self.named.append((path, reason))
        if warning:
            n = self.skipped[reason]
            if n <= MAX_WARNINGS_PER_REASON:
                self.warnings.append(warning)
            elif n == MAX_WARNINGS_PER_REASON + 1:
                self.warnings.append(f"further files skipped as {reason!r} are counted in the summary only")


@dataclass(slots=True)
class Decoded:
    """A file's text, the UTF-8 bytes of that text, how it was decoded, and whether only its
    head was kept (``--truncate-large``). ``kind`` is what the file was read as, comma-separated
    (``""`` plain text; ``pdf``, ``notebook``, ``jsonl``, ``csv,gz``...: see
    ``rlm_cli.corpus.formats``); ``payload`` the parsed table of a Parquet or Excel file."""

    text: str
    data: bytes
    encoding: str
    truncated: bool = False
    kind: str = ""
    payload: dict[str, Any] | None = None
    #: The payload already encoded for the data file, and its summary, when the confined decoder
    #: parsed the file (``rlm_cli.corpus.decode``).
    encoded: bytes | None = None
    meta: dict[str, Any] | None = None

    @property
    def notes(self) -> str:
        """What the summary's "decoded" counts for this file: ``""`` for plain UTF-8, else the
        decoding and/or ``truncated``, comma-separated (kept in the index for cached files)."""
        tags = [] if self.encoding in ("utf-8", "utf-8-sig") else [self.encoding]
        return ",".join((["truncated"] if self.truncated else []) + tags)


#: Seconds the patterns of one ignore file may spend matching paths in one walk: a pathological
#: pattern (``*a*a*a*a*a*a*a*a*a*a*a*a*b``: its regex backtracks exponentially) stops the load
#: with an error naming the file, rather than hanging it or dropping its rules.
IGNORE_FILE_SECONDS = 5.0


class _Clock:
    """The time limits of one :func:`discover`: the ``--timeout`` deadline (checked at each entry
    of a walk) and each ignore file's matching time. In the main thread an interval timer
    (``SIGALRM``, every 0.25 s, only while a walk runs) interrupts a single runaway regex match;
    elsewhere a match is judged once it returns."""

    def __init__(self) -> None:
        self._local = threading.local()  # per thread: ``deadline``, and ``current`` (spec, since)

    def over(self) -> None:
        """Raise when this thread's walk is past its deadline.

        Raises:
            BudgetExceededError: ``--timeout`` ran out while the corpus was loading.
        """
        deadline = getattr(self._local, "deadline", None)
        if deadline is not None and time.monotonic() > deadline:
            raise BudgetExceededError("time budget reached while loading the corpus", budget="timeout",
                                      hint="raise --timeout, or name fewer files")

    def matching(self, spec: _Spec | None) -> None:
        """Say which spec this thread is matching with now (``None``: none)."""
        self._local.current = None if spec is None else (spec, time.monotonic())

    def _tick(self, signum: int, frame: Any) -> None:
        current = getattr(self._local, "current", None)  # the handler runs in the main thread
        if current is not None:
            spec, since = current
            if spec.used + time.monotonic() - since > IGNORE_FILE_SECONDS:
                self._local.current = None
                raise spec.too_slow()
            self.over()

    @contextlib.contextmanager
    def running(self, deadline: float | None) -> Iterator[None]:
        """Arm the limits for one walk in this thread (and the interval timer where it can run)."""
        self._local.deadline, self._local.current = deadline, None
        armed = (threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
                 and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN, None))
        if armed:
            signal.signal(signal.SIGALRM, self._tick)
            signal.setitimer(signal.ITIMER_REAL, 0.25, 0.25)
        try:
            yield
        finally:
            if armed:
                signal.setitimer(signal.ITIMER_REAL, 0, 0)
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
            self._local.deadline, self._local.current = None, None


_clock = _Clock()


class _Spec:
    """A pathspec ``GitIgnoreSpec`` with a fast negative answer: one combined regex says when no
    pattern can match (the usual case on a big tree), and only then is pathspec's exact
    gitignore logic skipped. Paths are relative, ``/``-separated, with ``/`` after a folder.
    ``source`` names the ignore file(s) the lines come from; ``used`` is the seconds spent matching."""

    def __init__(self, lines: list[str], source: str = "") -> None:
        self.source = source
        self.used = 0.0
        self.spec = pathspec.GitIgnoreSpec.from_lines(lines)
        self.any: re.Pattern[str] | None = None
        try:
            regexes = [getattr(p, "regex", None) for p in self.spec.patterns if p.include is not None]
            if any(rx is None for rx in regexes):
                raise TypeError("a pattern without a regex")
            parts = [re.sub(r"\(\?P<\w+>", "(?:", rx.pattern) for rx in regexes if rx is not None]
            self.any = re.compile("|".join(f"(?:{x})" for x in parts)) if parts else None
        except (re.error, AttributeError, TypeError):
            self.any = None

    def check(self, path: str) -> bool | None:
        """True: matched by an ignore pattern; False: re-included by a ``!`` pattern; None: no match.

        Raises:
            UsageError: the patterns took over :data:`IGNORE_FILE_SECONDS` in this walk.
        """
        since = time.monotonic()
        _clock.matching(self)
        try:
            if self.any is not None and self.any.match(path) is None:
                verdict = None
            else:
                verdict = self.spec.check_file(path).include
        finally:
            _clock.matching(None)
            self.used += time.monotonic() - since
        if self.used > IGNORE_FILE_SECONDS:
            raise self.too_slow()
        return verdict

    def too_slow(self) -> UsageError:
        """The error for patterns that took too long."""
        return UsageError(f"the ignore rules of {self.source} took over {IGNORE_FILE_SECONDS:g} s to match the "
                          "corpus's paths (a pattern whose regex backtracks, such as *a*a*a*a*a*a*a*b)",
                          hint="simplify that pattern, or pass --no-ignore")

    def match_file(self, path: str) -> bool:
        """True if the last matching pattern includes ``path`` (pathspec's ``match_file``)."""
        return bool(self.check(path))


def _compile(lines: list[str], source: str = "") -> _Spec | None:
    lines = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    return _Spec(lines, source) if lines else None


class _Walker:
    """Walks folder arguments applying the rules of the module docstring."""

    def __init__(self, options: CorpusOptions, report: LoadReport, bounds: links.Bounds | None = None) -> None:
        self.options = options
        self.report = report
        self.bounds = bounds if bounds is not None else links.Bounds([], follow=True)
        self.shown: set[str] = set()  # display paths given out (two names may display alike)
        self.include = _compile(list(options.include), "--include")
        self.exclude = _compile(list(options.exclude), "--exclude")
        self.seen: dict[tuple[int, int], SourceFile] = {}  # files already selected (dev, inode)
        self.visited: set[tuple[int, int]] = set()  # folders already walked
        # A file or folder reached through a link is read at its own path when the walk meets
        # that path too (a folder is walked at most twice: through a link, then at its own path).
        self.walked_direct: set[tuple[int, int]] = set()  # folders walked at a path without links
        self.linked: set[int] = set()  # ids of the selected files reached through a link
        self.dropped: set[int] = set()  # ids of those later met at their own path (left out)

    def file(self, full: str, shown: str, st: os.stat_result | None = None,
             via_link: bool = False) -> SourceFile | None:
        """Check one file (stat'ed, never opened); ``None`` when skipped (counted). ``via_link``:
        its path goes through a symlink (it gives way to the same file met at a path without)."""
        if st is None:
            try:
                st = os.stat(full)
            except OSError as exc:
                self._stat_failed(full, shown, exc)
                return None
        if not stat.S_ISREG(st.st_mode):
            kind = ("FIFO" if stat.S_ISFIFO(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode)
                    else "device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "special file")
            self.report.skip("special file", f"skipped {shown}: a {kind}, not a regular file (never opened)",
                             path=shown)
            return None
        key = (st.st_dev, st.st_ino)
        first = self.seen.get(key)
        if first is not None:  # the same file reached twice (two arguments, a symlink): read it once
            if via_link or id(first) not in self.linked or id(first) in self.dropped:
                return None
            self.dropped.add(id(first))  # first met through a link: read at its own path instead
        limit = self.options.max_file_size
        if st.st_size > limit and not self.options.truncate_large:
            self.report.skip("too large", f"skipped {shown}: {st.st_size:,} bytes is over --max-file-size "
                                          f"{limit:,} (raise it, or --truncate-large keeps the first {limit:,} bytes)",
                             path=shown)
            return None
        if st.st_size == 0:
            self.report.skip("empty", path=shown)
            return None
        sf = SourceFile(self._unique(shown, full), full, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        self.seen[key] = sf
        if via_link:
            self.linked.add(id(sf))
        return sf

    def _unique(self, shown: str, full: str) -> str:
        """``shown``, or another text form of it when a file already has that display path (two
        names whose bytes differ only where they are not UTF-8)."""
        if shown in self.shown:
            alt = shown[:len(shown) - len(links.display_text(os.path.basename(full)))] + links.escaped_text(
                os.path.basename(full))
            n = 2
            while alt in self.shown:
                alt, n = f"{shown}~{n}", n + 1
            shown = alt
        self.shown.add(shown)
        return shown

    def escapes(self, full: str, shown: str, is_dir: bool) -> bool:
        """Whether ``full`` (a symlink, or a path through one) resolves outside the roots; then it
        is skipped and counted."""
        if not self.bounds.escapes(full):
            return False
        name = shown + "/" if is_dir else shown
        self.report.skip(links.OUTSIDE, f"skipped {name}: a symlink to a path outside the corpus "
                                        "(--follow reads it)", path=name)
        return True

    def _stat_failed(self, full: str, shown: str, exc: OSError) -> None:
        if exc.errno == errno.ELOOP:
            self.report.skip("symlink loop", f"skipped {shown}: symlink loop", path=shown)
        elif exc.errno == errno.ENOENT and os.path.islink(full):
            self.report.skip("broken symlink", f"skipped {shown}: broken symlink", path=shown)
        else:
            self.report.skip("unreadable", f"skipped {shown}: {exc.strerror or exc}", path=shown)

    def walk(self, root: str, prefix: str) -> Iterator[SourceFile]:
        """Yield the selected files under folder ``root`` in path order; display = prefix + rel."""
        try:
            st = os.stat(root)
        except OSError as exc:
            self._stat_failed(root, prefix or root, exc)
            return
        root_key = (st.st_dev, st.st_ino)
        if root_key in self.walked_direct:
            return
        self.visited.add(root_key)
        self.walked_direct.add(root_key)
        # A stack of (entries iterator, folder rel path, ignore specs, ancestor folder keys), and
        # for each level whether its path goes through a symlink.
        stack = [self._open_dir(root, "", [], frozenset([root_key]))]
        vias = [False]
        while stack:
            item = stack[-1]
            entries, rel_dir, specs, ancestors = item
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                vias.pop()
                continue
            _clock.over()
            name = entry.name
            if name == ".git":
                continue
            rel = rel_dir + name
            shown = prefix + links.display_text(rel)
            try:
                is_dir = entry.is_dir()  # follows symlinks; False for a broken link
            except OSError:
                is_dir = False
            if name.startswith(".") and not self.options.hidden:
                self.report.skip("hidden", path=shown + "/" if is_dir else shown)
                continue
            if specs and _ignored(specs, rel, is_dir):
                self.report.skip("ignored", path=shown + "/" if is_dir else shown)
                continue
            if self.exclude is not None and self.exclude.match_file(rel + "/" if is_dir else rel):
                self.report.skip("excluded", path=shown + "/" if is_dir else shown)
                continue
            link = entry.is_symlink()
            if link and self.escapes(entry.path, shown, is_dir):
                continue
            via = vias[-1] or link
            if is_dir:
                try:
                    dst = entry.stat()
                except OSError as exc:
                    self._stat_failed(entry.path, shown, exc)
                    continue
                key = (dst.st_dev, dst.st_ino)
                if key in ancestors:
                    self.report.skip("symlink loop", f"skipped {shown}/: symlink loop (it leads back to a "
                                                     "folder above it)", path=shown + "/")
                    continue
                if key in (self.visited if via else self.walked_direct):
                    continue  # already walked (through another link, or at its own path)
                self.visited.add(key)
                if not via:
                    self.walked_direct.add(key)
                stack.append(self._open_dir(entry.path, rel + "/", specs, ancestors | {key}))
                vias.append(via)
                continue
            if self.include is not None and not self.include.match_file(rel):
                self.report.skip("not included", path=shown)
                continue
            try:
                fst = entry.stat()
            except OSError as exc:
                self._stat_failed(entry.path, shown, exc)
                continue
            sf = self.file(entry.path, shown, fst, via)
            if sf is not None:
                yield sf

    def _open_dir(self, path: str, rel_dir: str, specs: list[tuple[str, _Spec]],
                  ancestors: frozenset[tuple[int, int]]) -> tuple[Iterator[os.DirEntry[str]], str,
                                                                   list[tuple[str, _Spec]],
                                                                   frozenset[tuple[int, int]]]:
        try:
            with os.scandir(path) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            self.report.skip("unreadable", f"cannot list {rel_dir or path}: {exc.strerror or exc}",
                             path=rel_dir or path)
            entries = []
        if not self.options.no_ignore:
            names = {e.name for e in entries if e.name in IGNORE_FILES}
            if names:
                lines: list[str] = []
                for name in IGNORE_FILES:
                    if name in names:
                        try:
                            with open(os.path.join(path, name), encoding="utf-8", errors="replace") as fh:
                                lines.extend(fh.read().splitlines())
                        except OSError:
                            continue
                spec = _compile(lines, " and ".join(os.path.join(rel_dir, n) for n in IGNORE_FILES if n in names))
                if spec is not None:
                    specs = specs + [(rel_dir, spec)]
        return iter(entries), rel_dir, specs, ancestors


def _ignored(specs: list[tuple[str, _Spec]], rel: str, is_dir: bool) -> bool:
    """Gitignore verdict for ``rel`` (relative to the walked root): the deepest matching file wins."""
    for base, spec in reversed(specs):  # deepest ignore file first
        verdict = spec.check(rel[len(base):] + ("/" if is_dir else ""))
        if verdict is not None:
            return verdict
    return False


def discover(paths: list[str], options: CorpusOptions, report: LoadReport,
             deadline: float | None = None) -> list[SourceFile]:
    """Expand ``paths`` (files, folders, globs; not ``-``) into the files to read.

    Order: arguments in the order given; inside a folder, paths sorted by name (depth first).
    Display paths: for a single folder argument they are relative to it; otherwise relative to
    the current directory when inside it, else absolute.

    Raises:
        UsageError: a path that does not exist and matches no glob; an ignore file whose
            patterns took over :data:`IGNORE_FILE_SECONDS` to match.
        BudgetExceededError: ``deadline`` (``time.monotonic()``: ``--timeout``) passed.
    """
    with _clock.running(deadline):
        return _discover(paths, options, report)


def _discover(paths: list[str], options: CorpusOptions, report: LoadReport) -> list[SourceFile]:
    roots: list[str] = []
    globbed: list[str] = []  # the folders globs start from (also roots: links may lead there)
    matched: set[str] = set()  # roots found by a glob (not named: a link among them is checked)
    for raw in paths:
        if os.path.lexists(raw):
            roots.append(raw)
            continue
        matches = sorted(glob.glob(raw, recursive=True, include_hidden=options.hidden))
        if not matches:
            if any(c in raw for c in "*?["):
                hidden = "" if options.hidden else ", and dotfiles need --hidden"
                raise UsageError(f"no file matches the glob {raw}",
                                 hint=f"check the pattern: ** crosses folders{hidden}")
            raise UsageError(f"no such file or directory: {raw}", hint="check the path")
        globbed.append(links.glob_base(raw))
        found = [m for m in matches if os.path.basename(m) != ".git" and "/.git/" not in m]
        roots.extend(found)
        matched.update(found)
    bounds = links.Bounds([r for r in roots if r not in matched], follow=options.follow)
    for base in globbed:
        bounds.add(base)
    walker = _Walker(options, report, bounds)
    single_dir = len(roots) == 1 and os.path.isdir(roots[0])
    cwd = os.getcwd()
    out: list[SourceFile] = []
    for root in roots:
        if single_dir:
            shown = ""
        else:
            absolute = os.path.abspath(root)
            inside = absolute == cwd or absolute.startswith(cwd.rstrip(os.sep) + os.sep)
            shown = os.path.relpath(absolute, cwd) if inside else absolute
            shown = links.display_text(shown.replace(os.sep, "/"))
        if root in matched and not options.follow and _through_link(root) and walker.escapes(
                os.path.abspath(root), shown, os.path.isdir(root)):
            continue
        if os.path.isdir(root):
            out.extend(walker.walk(root, "" if single_dir else shown.rstrip("/") + "/"))
            continue
        name = os.path.basename(root)
        if walker.exclude is not None and (walker.exclude.match_file(shown) or walker.exclude.match_file(name)):
            report.skip("excluded", path=shown)
            continue
        sf = walker.file(root, shown)
        if sf is not None:
            out.append(sf)
    return [sf for sf in out if id(sf) not in walker.dropped]


def _through_link(path: str) -> bool:
    """Whether resolving ``path`` goes through a symlink (its real path is another)."""
    return os.path.realpath(path) != os.path.abspath(path)


def is_binary(head: bytes) -> bool:
    """True if ``head`` (the first 8 KiB) looks binary: a NUL byte, or over 30% control bytes.

    UTF-16/32 files with a BOM are text (they contain NULs by design).
    """
    if not head or head.startswith(_BOMS_16_32):
        return False
    if b"\x00" in head:
        return True
    nontext = len(head) - len(head.translate(None, _NON_TEXT))
    return nontext > BINARY_RATIO * len(head)


def decode_bytes(data: bytes) -> Decoded:
    """Decode a file's bytes (see the module docstring); never raises.

    Returns the text, its UTF-8 encoding (``data`` itself when it was valid UTF-8 without a BOM)
    and the name of the decoding used: ``utf-8``, ``utf-8-sig``, ``utf-16``, ``utf-32``,
    ``utf-8+latin-1`` (UTF-8 with some bytes that are not, read as Latin-1) or ``latin-1``.
    """
    if data.startswith(codecs.BOM_UTF8):
        body = data[3:]
        try:
            return Decoded(body.decode("utf-8"), body, "utf-8-sig")
        except UnicodeDecodeError:
            text = body.decode("utf-8", _LATIN1_FOR_INVALID)
            return Decoded(text, text.encode("utf-8"), "utf-8+latin-1")
    for bom, enc in ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
                     (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):
        if data.startswith(bom):
            text = data.decode(enc, "replace")
            return Decoded(text, text.encode("utf-8", "surrogatepass"), enc)
    try:
        return Decoded(data.decode("utf-8"), data, "utf-8")
    except UnicodeDecodeError:
        pass
    text = data.decode("utf-8", "replace")
    replaced = text.count("\ufffd") - data.count(b"\xef\xbf\xbd")  # minus genuine U+FFFD characters
    multibyte = len(text) - len(text.encode("ascii", "ignore")) - text.count("\ufffd")
    if replaced > multibyte:  # a legacy 8-bit file: every high byte is one invalid sequence
        text = data.decode("latin-1")
        return Decoded(text, text.encode("utf-8"), "latin-1")
    text = data.decode("utf-8", _LATIN1_FOR_INVALID)  # mostly UTF-8: keep it, read the stray bytes as Latin-1
    return Decoded(text, text.encode("utf-8"), "utf-8+latin-1")


def _latin1_for_invalid(err: UnicodeError) -> tuple[str, int]:
    """A ``codecs`` error handler: the bytes of an invalid UTF-8 sequence, read as Latin-1 (one
    character per byte, so nothing is lost, unlike U+FFFD)."""
    if not isinstance(err, UnicodeDecodeError):
        raise err
    return bytes(err.object[err.start:err.end]).decode("latin-1"), err.end


_LATIN1_FOR_INVALID = "rlm-latin-1-for-invalid"
codecs.register_error(_LATIN1_FOR_INVALID, _latin1_for_invalid)


def decode(data: bytes) -> str:
    """The text of :func:`decode_bytes` (never raises)."""
    return decode_bytes(data).text


def trim_partial_utf8(data: bytes) -> bytes:
    """Drop an incomplete UTF-8 sequence cut off at the end of ``data`` (after truncation)."""
    for back in range(1, min(4, len(data)) + 1):
        b = data[-back]
        if b < 0x80:
            return data
        if b >= 0xC0:  # a lead byte: how long should its sequence be?
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return data if back >= need else data[:-back]
    return data


def read_source(sf: SourceFile, options: CorpusOptions, report: LoadReport) -> Decoded | None:
    """Read and decode one file; ``None`` when it is binary, empty or unreadable (counted in
    ``report``, with ``report.last_skip`` naming the file and the reason).

    The first 8 KiB are read first, so a binary file is never read whole. The file is opened
    non-blocking and checked again to be a regular file, so a path swapped for a FIFO after
    :func:`discover` cannot hang the run. Compressed files, PDFs, notebooks, Parquet and Excel
    files are turned into text by ``rlm_cli.corpus.formats`` (their decompressed or rendered
    size counts against ``--max-file-size``) in the confined decoder (``rlm_cli.corpus.decode``,
    which also parses large JSON, JSONL, CSV and TSV files); one that cannot be read, or that
    exceeds the decoder's limits, is skipped with a warning.
    """
    from rlm_cli.corpus import decode

    assert sf.path is not None
    kind, comp = formats.kind_of(sf.path)
    cap = options.max_file_size
    limit = cap if options.truncate_large else -1
    cut = False
    child: Decoded | None = None
    try:
        fd = os.open(sf.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        with open(fd, "rb", buffering=0) as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                report.skip("special file", f"skipped {sf.display}: not a regular file", path=sf.display)
                return None
            head = _read_up_to(fh, SNIFF_BYTES)
            if decode.in_child(kind, comp, head):
                child, data = decode.decoder(options).decode_file(fd, sf, kind, comp, options), b""
            elif comp and formats.magic_matches(comp, head):
                fh.seek(0)
                data, cut = formats.decompress(fh, comp, cap, sf.display)
                if cut and not options.truncate_large:
                    report.skip("too large", f"skipped {sf.display}: over --max-file-size {cap:,} bytes once "
                                             "decompressed (raise it, or --truncate-large keeps the start)",
                                path=sf.display)
                    return None
                head = data[:SNIFF_BYTES]
            elif kind in formats.BINARY_KINDS:
                comp = ""
                if sf.size > cap:
                    report.skip("too large", f"skipped {sf.display}: {sf.size:,} bytes is over --max-file-size "
                                             f"{cap:,} (a {kind} file cannot be cut)", path=sf.display)
                    return None
                data = head + fh.readall() if len(head) == SNIFF_BYTES else head
            else:
                comp = ""
                if is_binary(head):
                    report.skip("binary", path=sf.display)
                    return None
                if len(head) < SNIFF_BYTES:
                    data = head
                elif limit < 0:
                    data = head + fh.readall()
                else:
                    data = head + _read_up_to(fh, limit + 1 - len(head))
    except OSError as exc:
        report.skip("unreadable", f"skipped {sf.display}: {exc.strerror or exc}", path=sf.display)
        return None
    except formats.Unreadable as exc:
        report.skip(exc.reason, str(exc) or None, path=sf.display)
        return None
    try:
        decoded = child if child is not None else _decode_kind(data, kind, comp, sf, options, cut)
        if child is None and decoded is not None and len(decoded.data) >= decode.CHILD_PARSE_BYTES \
                and decoded.kind.split(",")[0] in ("json", "jsonl", "csv", "tsv"):
            decode.decoder(options).parse(decoded, sf, options)
    except formats.Unreadable as exc:
        report.skip(exc.reason, str(exc), path=sf.display)
        return None
    if decoded is None:
        report.skip("binary", path=sf.display)
        return None
    if decoded.truncated:
        report.warnings.append(f"truncated {sf.display} to its first {len(decoded.data):,} of "
                               f"{'its decompressed bytes' if comp else f'{sf.size:,} bytes'} (--truncate-large)")
    if not decoded.text:
        report.skip("empty", path=sf.display)
        return None
    report.count_decoded(decoded.notes)
    return decoded


def _decode_kind(data: bytes, kind: str, comp: str, sf: SourceFile, options: CorpusOptions,
                 cut: bool) -> Decoded | None:
    """Turn a file's (decompressed) bytes into text by its kind; ``None`` when they are binary.

    Raises:
        formats.Unreadable: the file cannot be read as its kind.
    """
    tags = [kind] if kind else []
    if kind == "pdf":
        text = formats.pdf_text(data, sf.display)
        return Decoded(text, text.encode("utf-8", "surrogatepass"), "utf-8", kind=",".join(tags + [comp] * bool(comp)))
    if kind in ("parquet", "excel"):
        text, payload = formats.table_file(kind, data, sf.display, options.max_file_size, options.truncate_large)
        return Decoded(text, text.encode("utf-8", "surrogatepass"), "utf-8", kind=",".join(tags + [comp] * bool(comp)),
                       payload=payload)
    if comp and is_binary(data[:SNIFF_BYTES]):
        return None
    limit = options.max_file_size if options.truncate_large else -1
    if not comp and 0 <= limit < len(data):
        data, cut = data[:limit], True
    if cut:
        data = trim_partial_utf8(data)
    decoded = decode_bytes(data)
    decoded.truncated = cut
    if kind == "notebook":
        cells = formats.notebook_text(decoded.text)
        if cells is None:
            tags = []  # not a notebook's JSON: kept as the text it is
        else:
            decoded = Decoded(cells, cells.encode("utf-8", "surrogatepass"), decoded.encoding, cut)
    decoded.kind = ",".join(tags + [comp] * bool(comp))
    return decoded


def _read_up_to(fh: object, n: int) -> bytes:
    parts: list[bytes] = []
    got = 0
    while got < n:
        piece = fh.read(n - got)  # type: ignore[attr-defined]
        if not piece:
            break
        parts.append(piece)
        got += len(piece)
    return b"".join(parts)
