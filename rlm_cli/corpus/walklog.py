"""Replaying a walk instead of listing every folder again: the warm load of a large tree.

Listing a folder tree costs far more than checking it did not change: ``os.scandir``, sorting,
and the ignore rules for each of 110,000 files took 1.2 s of a 1.5 s warm load of a 1 GB corpus
(``benchmarks/bench_scale.py``), while ``stat`` of its 12,800 folders takes 20 ms. A
:class:`WalkLog` records, during a walk (``walk.discover``):

* every folder listed, with its ``stat`` taken *before* listing it: a folder's ``mtime`` and
  ``ctime`` change whenever an entry is added, removed or renamed in it (and ``ctime`` on a
  ``chmod``), so an unchanged folder lists the same names;
* every ignore file read, with its ``stat`` (an edit in place changes its own times, not its
  folder's);
* every symlink met, with its real path and the kind of what it points to (a link two hops away
  may be re-pointed without any listed folder changing);
* the walk's steps in order: each file it went on to ``stat`` (by path), and each skip it made
  without looking at a file's own ``stat`` (hidden, ignored, excluded, not included, a symlink
  outside the corpus...).

:func:`replay` checks all of that and, when every folder, ignore file and link is as recorded,
replays the steps: each file is ``stat``'ed and judged again exactly as the walk does (size
limit, empty, special file, read once by inode), so a changed file is seen as changed and the
cache rules of ``rlm_cli.corpus.store`` apply unchanged. Anything else (a changed folder, a
missing log, another current directory, a glob among the paths) means a full walk, which writes
a new log. A folder, ignore file or link target changed less than ``store.RACY_NS`` before the
recorded walk is not trusted (the same rule as for files: file system clocks are coarse, so a
second change within the same tick could leave the times as recorded).
"""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import links, nofollow
from rlm_cli.corpus.bundle import atomic_write
from rlm_cli.corpus.ignore import clock
from rlm_cli.corpus.loader import LoadReport, SourceFile
from rlm_cli.corpus.walk import Walker

#: The name of the log in a bundle folder.
WALK_FILE = "walk.json"
#: Bumped whenever the walk's rules (``rlm_cli.corpus.walk``) change what a walk would find.
WALK_LOG_VERSION = 2
#: A folder, ignore file or link target changed less than this long before the walk is not
#: trusted (the value of ``rlm_cli.corpus.store.RACY_NS``, which imports this module).
RACY_NS = 2_000_000_000


def _kind(path: str) -> str:
    """What ``path`` is after following links: ``dir``, ``file``, ``other`` or ``missing``."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "missing"
    return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


@dataclass
class WalkLog:
    """What one walk read and decided (see the module docstring); filled by ``walk.Walker``."""

    paths: list[str]
    scan_ns: int = field(default_factory=time.time_ns)
    cwd: str = field(default_factory=os.getcwd)
    #: ``[path, dev, ino, mtime_ns, ctime_ns]`` of each folder listed.
    folders: list[list[Any]] = field(default_factory=list)
    #: ``[path, dev, ino, size, mtime_ns, ctime_ns]`` of each ignore file read.
    ignore_files: list[list[Any]] = field(default_factory=list)
    #: ``[path, real path, kind]`` of each symlink met (and of each root).
    links: list[list[str]] = field(default_factory=list)
    #: Per root: ``{"path", "prefix", "dir", "steps"}``; a step is a file (``rel``, or
    #: ``[rel, shown, via_link]`` when ``shown`` is not ``prefix + rel`` or it came through a
    #: link) or a skip (``{"r": reason, "w": warning, "p": path}``).
    roots: list[dict[str, Any]] = field(default_factory=list)
    trusted: bool = True

    def untrusted(self) -> None:
        """Mark this walk as one that cannot be replayed (a glob, a root that could not be read)."""
        self.trusted = False

    def root(self, path: str, prefix: str, is_dir: bool) -> None:
        """Start the steps of root ``path`` (displayed under ``prefix``; a file root: its display)."""
        self.link(path)
        self.roots.append({"path": path, "prefix": prefix, "dir": is_dir, "steps": []})

    def folder(self, path: str, st: os.stat_result) -> None:
        """Record folder ``path`` about to be listed (``st``: its ``stat``, taken before)."""
        self.folders.append([path, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns])

    def ignore_file(self, path: str) -> None:
        """Record ignore file ``path`` about to be read (an unreadable one makes the log untrusted)."""
        try:
            st = os.stat(path)
        except OSError:
            self.trusted = False
            return
        self.ignore_files.append([path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns])

    def link(self, path: str) -> None:
        """Record the symlink (or root) ``path``: its real path and what it leads to."""
        self.links.append([path, os.path.realpath(path), _kind(path)])

    def file(self, rel: str, shown: str, via_link: bool) -> None:
        """Record a file the walk goes on to ``stat`` (``rel`` to the current root)."""
        if not self.roots:  # (outside any root's steps: a glob's match, never replayed)
            self.trusted = False
            return
        prefix = self.roots[-1]["prefix"] if self.roots[-1]["dir"] else None
        steps = self.roots[-1]["steps"]
        if prefix is not None and not via_link and shown == prefix + rel:
            steps.append(rel)
        else:
            steps.append([rel, shown, via_link])

    def skip(self, reason: str, warning: str | None, path: str) -> None:
        """Record a skip that did not depend on a file's own ``stat``."""
        if not self.roots:
            self.trusted = False
            return
        self.roots[-1]["steps"].append({"r": reason, "w": warning, "p": path})

    def settled(self) -> bool:
        """Whether every recorded time is older than the walk by :data:`RACY_NS` (else the log
        would not be trusted, and is not worth saving)."""
        limit = self.scan_ns - RACY_NS
        return (all(f[3] < limit and f[4] < limit for f in self.folders)
                and all(f[4] < limit and f[5] < limit for f in self.ignore_files))


def _key(paths: list[str], options: CorpusOptions, cwd: str) -> dict[str, Any]:
    """What a walk's result depends on besides the files: paths as given, the walk options (they
    also choose the bundle folder, ``bundle.cache_key``: kept here too, so a log is never
    replayed under other options), the current directory (display paths are relative to it) and
    the rules' version."""
    return {"version": WALK_LOG_VERSION, "paths": list(paths), "cwd": cwd, "include": list(options.include),
            "exclude": list(options.exclude), "hidden": options.hidden, "no_ignore": options.no_ignore,
            "follow": options.follow, "max_file_size": options.max_file_size,
            "truncate_large": options.truncate_large}


def _packed(steps: list[Any]) -> list[Any]:
    """``steps`` with each run of plain file steps (``rel`` strings) joined by NUL, the one
    character no file name holds: one JSON string parses far faster than 100,000 short ones."""
    out: list[Any] = []
    run: list[str] = []
    for step in steps:
        if type(step) is str:
            run.append(step)
            continue
        if run:
            out.append("\0".join(run))
            run = []
        out.append(step)
    if run:
        out.append("\0".join(run))
    return out


def save(directory: Path, log: WalkLog, options: CorpusOptions) -> None:
    """Write ``log`` as ``directory/walk.json`` (atomically, mode 0600) when it can be replayed;
    otherwise remove an older log there. A failure to write is ignored: the next load walks."""
    path = directory / WALK_FILE
    try:
        if not (log.trusted and log.settled()):
            path.unlink(missing_ok=True)
            return
        roots = [{**r, "steps": _packed(r["steps"])} for r in log.roots]
        doc = {"key": _key(log.paths, options, log.cwd), "scan_ns": log.scan_ns, "folders": log.folders,
               "ignore_files": log.ignore_files, "links": log.links, "roots": roots}
        atomic_write(path, json.dumps(doc, separators=(",", ":")).encode())
    except OSError:
        pass


def _safe_rel(rel: str) -> bool:
    """Whether ``rel`` (or each part of a NUL-joined run of them) stays under its root: not
    absolute and no ``..`` part."""
    return not rel.startswith("/") and "\0/" not in rel and "/../" not in "/" + rel.replace("\0", "/") + "/"


def _well_formed(root: Any) -> bool:
    """Whether one root of a log has the shape :meth:`WalkLog.root` and ``_packed`` give it (a
    log edited by hand or damaged is not replayed)."""
    if not (isinstance(root, dict) and isinstance(root.get("prefix"), str) and isinstance(root.get("dir"), bool)
            and isinstance(root.get("steps"), list)):
        return False
    for step in root["steps"]:
        if type(step) is str:
            if not _safe_rel(step):
                return False
        elif type(step) is list:
            if not (len(step) == 3 and isinstance(step[0], str) and isinstance(step[1], str)
                    and isinstance(step[2], bool) and _safe_rel(step[0])):
                return False
        elif type(step) is dict:
            if not (isinstance(step.get("r"), str) and isinstance(step.get("p"), str)
                    and (step.get("w") is None or isinstance(step.get("w"), str))):
                return False
        else:
            return False
    return True


def replay(directory: Path, paths: list[str], options: CorpusOptions, report: LoadReport,
           deadline: float | None = None) -> list[SourceFile] | None:
    """The files ``walk.discover(paths, options, ...)`` would find now, from the log in
    ``directory``, with the same skips counted in ``report``; ``None`` (``report`` untouched)
    when there is no usable log or anything it recorded changed: then walk.

    Raises:
        BudgetExceededError: ``deadline`` (``time.monotonic()``: ``--timeout``) passed.
    """
    try:
        doc = json.loads((directory / WALK_FILE).read_bytes())
        if doc["key"] != _key(paths, options, os.getcwd()):
            return None
        if type(doc["scan_ns"]) is not int:
            return None
        limit = doc["scan_ns"] - RACY_NS
        if any(not os.path.lexists(p) for p in paths):
            return None  # (the walk's own error names it)
        for path, dev, ino, mtime, ctime in doc["folders"]:
            st = os.stat(path)
            if (st.st_ino != ino or st.st_mtime_ns != mtime or st.st_ctime_ns != ctime or st.st_dev != dev
                    or mtime >= limit or ctime >= limit):
                return None
        for path, dev, ino, size, mtime, ctime in doc["ignore_files"]:
            st = os.stat(path)
            if ((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) != (dev, ino, size, mtime, ctime)
                    or mtime >= limit or ctime >= limit):
                return None
        for path, real, kind in doc["links"]:
            if os.path.realpath(path) != real or _kind(path) != kind:
                return None
        roots = doc["roots"]
        if [r["path"] for r in roots] != [p for p in paths] or any(
                os.path.isdir(r["path"]) != r["dir"] for r in roots):
            return None
        if not all(_well_formed(r) for r in roots):
            return None
        reals = [os.path.join(os.path.realpath(r["path"]), "") for r in roots]  # (a plain step's: + rel)
    except OSError:
        return None
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError):
        return None  # (malformed: the next walk writes a good one)
    walker = Walker(options, report, links.Bounds(list(paths), follow=options.follow))
    out: list[SourceFile] = []
    file, keep = walker.file, out.append
    with clock.running(deadline), nofollow.kept():
        for r, real in zip(roots, reals, strict=True):
            base, prefix, is_dir = r["path"], r["prefix"], r["dir"]
            head = os.path.join(base, "")  # (os.path.join(base, rel) is head + rel)
            for step in r["steps"]:
                clock.over()  # (once per run of files: a few milliseconds at most)
                if type(step) is str:  # a run of plain file steps (see _packed)
                    for rel in step.split("\0"):
                        sf = file(head + rel, prefix + rel, None, False, False, real + rel)  # (plain: no link)
                        if sf is not None:
                            keep(sf)
                    continue
                if type(step) is list:
                    rel, shown, via = step
                    sf = file(head + rel if is_dir else base, shown, None, via)
                    if sf is not None:
                        keep(sf)
                else:
                    report.skip(step["r"], step["w"], path=step["p"])
    return [sf for sf in out if id(sf) not in walker.dropped]
