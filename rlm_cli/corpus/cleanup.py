"""Deleting what no run needs any more from the corpus cache: old context and temporary files
of a bundle folder, and bundle folders of another layout version.

A context file is deleted only when no process holds its shared lock (``bundle.pin``), so a
concurrent run never loses its bundle; on a system without ``flock`` old context files are
kept a day.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

from rlm_cli.corpus.bundle import data_name, fcntl, lock
from rlm_cli.corpus.model import INDEX_VERSION


def collect_garbage(directory: Path, keep: Path | None) -> int:
    """Delete context and temporary files in ``directory`` other than ``keep`` that no process
    holds (see the module docstring), each context file with its data file. Returns the number
    of files deleted."""
    removed = 0
    for path in list(directory.glob("context-*.txt")) + list(directory.glob(".context-*.tmp")) + list(
            directory.glob(".index-*.tmp")) + list(directory.glob(".walk-*.tmp")) + list(directory.glob(".data-*.tmp")) + [
            d for d in directory.glob("data-*.bin") if not (directory / ("context-" + d.name[5:-4] + ".txt")).exists()]:
        if keep is not None and path.name in (keep.name, data_name(keep)):
            continue
        if path.name.startswith((".index-", ".walk-", ".data-", "data-")):  # not locked while written: only collect old ones
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
            elif not lock(fd, exclusive=True, wait=False):
                continue  # in use by another run
            path.unlink(missing_ok=True)
            removed += 1
            if path.name.startswith("context-"):
                (directory / data_name(path)).unlink(missing_ok=True)
        finally:
            os.close(fd)
    return removed


#: The start of every ``index.json`` (``version`` is its first key), read without parsing the rest.
VERSION_HEAD = re.compile(rb'^\{\s*"version"\s*:\s*(\d+)\s*,')


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
                m = VERSION_HEAD.match(fh.read(32))
        except OSError:
            continue  # no index: a bundle being written, or not ours
        if m is None or int(m[1]) == INDEX_VERSION:
            continue
        fds: list[int] = []
        try:
            for path in d.iterdir():
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                fds.append(fd)
                if path.name.startswith((".context-", "context-")) and not lock(fd, exclusive=True, wait=False):
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
