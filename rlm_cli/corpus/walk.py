"""Find the files a run should read, the way ripgrep users expect.

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
  with ``truncate_large`` (when read); empty files are skipped.

Nothing is opened by a path the kernel would resolve through a link (``rlm_cli.corpus.nofollow``):
each root and each symlink met is resolved once (``os.path.realpath``), that real path is what is
checked against the roots and what is opened, folders are listed through a descriptor opened a
component at a time with ``O_NOFOLLOW``, and entries are ``stat``'ed relative to it. Files are
only ``stat``'ed here, never opened; ``rlm_cli.corpus.loader`` reads them at the real path kept in
each :class:`SourceFile`. Everything skipped is counted by reason in a
:class:`~rlm_cli.corpus.loader.LoadReport`.
"""

from __future__ import annotations

import errno
import glob
import os
import stat
from collections.abc import Iterator
from typing import Any, Protocol

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import links, nofollow
from rlm_cli.corpus.ignore import IGNORE_FILES, Spec, clock, compile_rules, ignored
from rlm_cli.corpus.loader import LoadReport, SourceFile, binary_anyway, os_failure
from rlm_cli.corpus.nofollow import list_folder
from rlm_cli.errors import UsageError


class WalkRecorder(Protocol):
    """What a walk tells the record of what it read (``rlm_cli.corpus.walklog.WalkLog``, which
    replays it later; described here so that the walk does not import its recorder): something it
    cannot replay (``untrusted``), a PATH argument, a folder listed with its stat, an ignore file
    read, a symlink followed, a file taken, a path skipped with its reason."""

    def untrusted(self) -> None: ...
    def root(self, path: str, prefix: str, is_dir: bool) -> None: ...
    def folder(self, path: str, st: os.stat_result) -> None: ...
    def ignore_file(self, path: str) -> None: ...
    def link(self, path: str) -> None: ...
    def file(self, rel: str, shown: str, via_link: bool) -> None: ...
    def skip(self, reason: str, warning: str | None, path: str) -> None: ...


class Walker:
    """Walks folder arguments applying the rules of the module docstring."""

    def __init__(self, options: CorpusOptions, report: LoadReport, bounds: links.Bounds | None = None,
                 log: WalkRecorder | None = None) -> None:
        self.options = options
        self.report = report
        #: What this walk read, kept to replay it later (``rlm_cli.corpus.walklog``); None: not kept.
        self.log = log
        self._in_file = False  # inside the stat of a file: its skips depend on the stat (not logged)
        self.bounds = bounds if bounds is not None else links.Bounds([], follow=True)
        self.shown: set[str] = set()  # display paths given out (two names may display alike)
        self.include = compile_rules(list(options.include), "--include", walked=False)
        self.exclude = compile_rules(list(options.exclude), "--exclude")
        self.seen: dict[tuple[int, int], SourceFile] = {}  # files already selected (dev, inode)
        self.visited: set[tuple[int, int]] = set()  # folders already walked
        # A file or folder reached through a link is read at its own path when the walk meets
        # that path too (a folder is walked at most twice: through a link, then at its own path).
        self.walked_direct: set[tuple[int, int]] = set()  # folders walked at a path without links
        self.linked: set[int] = set()  # ids of the selected files reached through a link
        self.dropped: set[int] = set()  # ids of those later met at their own path (left out)

    def file(self, full: str, shown: str, st: os.stat_result | None = None,
             via_link: bool = False, link: bool | None = None, real: str | None = None) -> SourceFile | None:
        """Check one file (stat'ed, never opened); ``None`` when skipped (counted). ``via_link``:
        its path goes through a symlink (it gives way to the same file met at a path without);
        ``link``: ``full`` itself is a symlink, let in (``None``: look); ``real``: its real path,
        resolved by the walk (``None``: resolved here, once, and skipped as a symlink outside
        when it is outside the corpus), and ``st`` the ``lstat`` of that (``None``: taken here).

        The file is later opened at ``real`` without following a link anywhere on the way, and
        read only if it is still the one stat'ed here (``loader.open_checked``)."""
        if link is None:
            link = os.path.islink(full)
        if real is None:
            try:
                real = os.path.realpath(full)
            except OSError as exc:  # (a link that changes while it is resolved)
                self._stat_failed(full, shown, exc)
                return None
            if not self.bounds.contains(real):
                self._skip(links.OUTSIDE, f"skipped {shown}: a symlink to a path outside the corpus "
                                          "(--follow reads it)", path=shown)
                return None
        if st is None:
            try:
                st = _lstat_real(real, full)
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
            if binary_anyway(full, real):  # raising --max-file-size would not read it: no advice to
                self.report.skip("binary", path=shown)
            else:
                self.report.skip("too large", f"skipped {shown}: {st.st_size:,} bytes is over --max-file-size "
                                              f"{limit:,} (raise it, or --truncate-large keeps the first {limit:,} "
                                              "bytes)", path=shown)
            return None
        if st.st_size == 0:
            self.report.skip("empty", path=shown)
            return None
        if shown in self.shown:
            shown = self._unique(shown, full)
        else:
            self.shown.add(shown)
        sf = SourceFile(shown, full, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev, link, real)
        self.seen[key] = sf
        if via_link:
            self.linked.add(id(sf))
        return sf

    def _unique(self, shown: str, full: str) -> str:
        """Another text form of ``shown``, which a file already has as its display path (two
        names whose bytes differ only where they are not UTF-8)."""
        alt = shown[:len(shown) - len(links.display_text(os.path.basename(full)))] + links.escaped_text(
            os.path.basename(full))
        n = 2
        while alt in self.shown:
            alt, n = f"{shown}~{n}", n + 1
        self.shown.add(alt)
        return alt

    def _ignore_lines(self, real: str, rel: str) -> list[str]:
        """The lines of the ignore file at real path ``real`` (``rel`` as shown); ``[]`` with an
        "unreadable" skip and a warning when it cannot be read, is not a regular file (a FIFO named
        ``.gitignore`` is opened without blocking) or is a symlink (not followed, as git does)."""
        data, why = nofollow.read_small(real)
        if data is not None:
            return data.decode("utf-8", "replace").splitlines()
        self._skip("unreadable", f"cannot read {rel}: {why}; its ignore rules are not applied", path=rel)
        return []

    def _skip(self, reason: str, warning: str | None = None, *, path: str) -> None:
        """``report.skip``, logged as a step of the walk unless it depends on a file's own stat
        (those are decided again when the walk is replayed)."""
        self.report.skip(reason, warning, path=path)
        if self.log is not None and not self._in_file:
            self.log.skip(reason, warning, path)

    def escapes(self, real: str, shown: str, is_dir: bool, broken: bool) -> bool:
        """Whether a symlink (or a path through one) whose real path is ``real`` (resolved once, by
        the caller) leads outside the roots; then it is skipped and counted (``broken``: it leads
        nowhere, and is called a broken symlink wherever it points)."""
        if self.bounds.contains(real):
            return False
        name = shown + "/" if is_dir else shown
        if broken:  # a dangling link says so whatever it points at (as -L does)
            self._skip("broken symlink", f"skipped {name}: broken symlink", path=name)
            return True
        self._skip(links.OUTSIDE, f"skipped {name}: a symlink to a path outside the corpus "
                                 "(--follow reads it)", path=name)
        return True

    def _stat_failed(self, full: str, shown: str, exc: OSError) -> None:
        if exc.errno == errno.ELOOP:
            self._skip("symlink loop", f"skipped {shown}: symlink loop", path=shown)
        elif exc.errno == errno.ENOENT and os.path.islink(full):
            self._skip("broken symlink", f"skipped {shown}: broken symlink", path=shown)
        else:
            reason, words = os_failure(exc, full)
            self._skip(reason, f"skipped {shown}: {words}", path=shown)

    def walk(self, root: str, prefix: str, real: str | None = None) -> Iterator[SourceFile]:
        """Yield the selected files under folder ``root`` (``real``: its real path, ``None``: resolved
        here; a root is followed, the user named it) in path order; display = prefix + rel."""
        try:
            real = os.path.realpath(root) if real is None else real
            st = os.stat(real)
        except OSError as exc:
            if self.log is not None:
                self.log.untrusted()
            self._stat_failed(root, prefix or root, exc)
            return
        root_key = (st.st_dev, st.st_ino)
        if root_key in self.walked_direct:
            return
        self.visited.add(root_key)
        self.walked_direct.add(root_key)
        # A stack of (entries iterator, folder rel path, ignore specs, ancestor folder keys), and
        # for each level whether its path goes through a symlink.
        stack = [self._open_dir(root, real, "", [], frozenset([root_key]), st)]
        vias = [False]
        while stack:
            entries, rel_dir, specs, ancestors = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                vias.pop()
                continue
            clock.over()
            if entry.name == ".git":
                continue
            rel = rel_dir + entry.name
            shown = prefix + links.display_text(rel)
            is_dir = entry.is_dir()  # a link: whether its target is a folder (False for a broken link)
            link = entry.is_symlink()
            if link and self.log is not None:  # (before the skips too: an ignore rule may depend on is_dir)
                self.log.link(entry.path)
            if self._left_out(entry, rel, shown, is_dir, specs, link):
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
                    self._skip("symlink loop", f"skipped {shown}/: symlink loop (it leads back to a "
                                               "folder above it)", path=shown + "/")
                    continue
                if key in (self.visited if via else self.walked_direct):
                    continue  # already walked (through another link, or at its own path)
                self.visited.add(key)
                if not via:
                    self.walked_direct.add(key)
                stack.append(self._open_dir(entry.path, entry.real, rel + "/", specs, ancestors | {key}, dst))
                vias.append(via)
                continue
            sf = self._take_file(entry, rel, shown, via, link)
            if sf is not None:
                yield sf

    def _left_out(self, entry: nofollow.FolderEntry, rel: str, shown: str, is_dir: bool,
                  specs: list[tuple[str, Spec]], link: bool) -> bool:
        """Whether the walk leaves ``entry`` (``rel`` in its root, shown as ``shown``) out: hidden,
        ignored, excluded, or a symlink out of bounds (each counted)."""
        where = shown + "/" if is_dir else shown
        if entry.name.startswith(".") and not self.options.hidden:
            self._skip("hidden", path=where)
            return True
        if specs and ignored(specs, rel, is_dir):
            self._skip("ignored", path=where)
            return True
        if self.exclude is not None and self.exclude.match_file(rel + "/" if is_dir else rel):
            self._skip("excluded", path=where)
            return True
        return link and self.escapes(entry.real, shown, is_dir, entry.broken())

    def _take_file(self, entry: nofollow.FolderEntry, rel: str, shown: str, via: bool, link: bool) -> SourceFile | None:
        """The :class:`SourceFile` of the file ``entry`` met by the walk, or ``None`` when it is
        not included, cannot be stat'ed or is skipped (:meth:`file`; each counted)."""
        if self.include is not None and not self.include.match_file(rel):
            self._skip("not included", path=shown)
            return None
        if self.log is not None:
            self.log.file(rel, shown, via)
        self._in_file = True  # (an exception ends the walk, and its log is not kept)
        try:
            fst = entry.stat()
        except OSError as exc:
            self._stat_failed(entry.path, shown, exc)
            self._in_file = False
            return None
        sf = self.file(entry.path, shown, fst, via, link, entry.real)
        self._in_file = False
        return sf

    def _open_dir(self, path: str, real: str, rel_dir: str, specs: list[tuple[str, Spec]],
                  ancestors: frozenset[tuple[int, int]], st: os.stat_result) -> tuple[
                      Iterator[Any], str, list[tuple[str, Spec]], frozenset[tuple[int, int]]]:
        """List folder ``path`` (``real``: its real path; ``st``: the ``lstat`` of that, taken
        before listing it) and read its ignore files.

        The folder is listed through a descriptor opened at ``real`` without following a link
        anywhere on the way and checked to be the folder ``st`` describes (``nofollow.list_folder``):
        a folder swapped for a link out of the corpus after it was checked is never listed."""
        if self.log is not None:
            self.log.folder(path, st)
        try:
            entries = list_folder(path, real, st)
        except OSError as exc:
            if exc.errno == errno.ESTALE:
                self._skip("unreadable", f"cannot list {rel_dir or path}: it changed into another after the corpus "
                           "was checked", path=rel_dir or path)
            else:
                reason, words = os_failure(exc, path)
                self._skip(reason, f"cannot list {rel_dir or path}: {words}", path=rel_dir or path)
            entries = []
        if not self.options.no_ignore:
            names = {e.name for e in entries if e.name in IGNORE_FILES}
            if names:
                lines: list[str] = []
                for name in IGNORE_FILES:
                    if name in names:
                        if self.log is not None:
                            self.log.ignore_file(os.path.join(path, name))
                        lines.extend(self._ignore_lines(os.path.join(real, name), rel_dir + name))
                spec = compile_rules(lines, " and ".join(os.path.join(rel_dir, n) for n in IGNORE_FILES if n in names),
                                     lenient=True)
                if spec is not None:
                    specs = specs + [(rel_dir, spec)]
        return iter(entries), rel_dir, specs, ancestors


def discover(paths: list[str], options: CorpusOptions, report: LoadReport,
             deadline: float | None = None, log: WalkRecorder | None = None) -> list[SourceFile]:
    """Expand ``paths`` (files, folders, globs; not ``-``) into the files to read.

    Order: arguments in the order given; inside a folder, paths sorted by name (depth first).
    Display paths: for a single folder argument they are relative to it; otherwise relative to
    the current directory when inside it, else absolute. ``log`` (``rlm_cli.corpus.walklog``)
    records what the walk read, so that a later load can replay it without listing folders.

    Raises:
        UsageError: a path that does not exist and matches no glob; an ignore file whose
            patterns took over ``ignore.IGNORE_FILE_SECONDS`` to match.
        BudgetExceededError: ``deadline`` (``time.monotonic()``: ``--timeout``) passed.
    """
    with clock.running(deadline), nofollow.kept():
        return _discover(paths, options, report, log)


def check_paths(paths: list[str]) -> None:
    """Fail early on a PATH that is not a glob and does not exist (``-``, stdin, is left out):
    the same error :func:`discover` gives, before anything slower (finding a model) runs.

    Raises:
        UsageError: ``no such file or directory: PATH``.
    """
    for raw in paths:
        if raw != "-" and not any(c in raw for c in "*?[") and not os.path.lexists(raw):
            raise UsageError(f"no such file or directory: {raw}", hint="check the path")


def _discover(paths: list[str], options: CorpusOptions, report: LoadReport,
              log: WalkRecorder | None) -> list[SourceFile]:
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
        if log is not None:
            log.untrusted()  # (a glob's matches are not replayed)
        globbed.append(links.glob_base(raw))
        found = [m for m in matches if os.path.basename(m) != ".git" and "/.git/" not in m]
        roots.extend(found)
        matched.update(found)
    bounds = links.Bounds([r for r in roots if r not in matched], follow=options.follow)
    for base in globbed:
        bounds.add(base)
    walker = Walker(options, report, bounds, log)
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
        try:
            real = os.path.realpath(root)  # (once: what is checked is what is opened)
        except OSError as exc:  # (a link that changes while it is resolved)
            if log is not None:
                log.untrusted()
            walker._stat_failed(root, shown or root, exc)
            continue
        if root in matched and walker.escapes(real, shown, os.path.isdir(real), not os.path.exists(real)):
            continue
        if os.path.isdir(real):
            prefix = "" if single_dir else shown.rstrip("/") + "/"
            if log is not None:
                log.root(root, prefix, True)
            out.extend(walker.walk(root, prefix, real))
            continue
        if log is not None:
            log.root(root, shown, False)
        name = os.path.basename(root)
        if walker.exclude is not None and (walker.exclude.match_file(shown) or walker.exclude.match_file(name)):
            walker._skip("excluded", path=shown)
            continue
        if log is not None:
            log.file("", shown, False)
        walker._in_file = True
        sf = walker.file(root, shown, real=real)
        walker._in_file = False
        if sf is not None:
            out.append(sf)
    return [sf for sf in out if id(sf) not in walker.dropped]



def _lstat_real(real: str, full: str) -> os.stat_result:
    """The ``lstat`` of the real path ``real`` of ``full``: what will be opened there. A symlink
    found there is a loop (resolving ``full`` stopped at it) or one swapped in since.

    Raises:
        OSError: it cannot be stat'ed; ``ELOOP`` for a symlink.
    """
    st = os.lstat(real)
    if stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), full)
    return st
