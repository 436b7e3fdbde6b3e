"""A file of the corpus flipped between a hard link to a harmless file and a symlink to a secret
outside the corpus while the corpus loads (issue 47, item 6): the secret never reaches the text
loaded (what ``context`` holds), and the load never fails.

Two adversaries:

* a scheduled one, which makes the race happen on purpose: a profile hook (``sys.setprofile``,
  the loader's own thread) flips ``docs/x.txt`` before some of the file system calls the loader
  makes (``stat``, ``lstat``, ``readlink``, ``open``, ``scandir``...), chosen at random with a
  seed per load, so that 300 loads try 300 interleavings of checks and opens, the same ones on
  every run; a loader that checks a path and then opens it again by path reads the secret in
  some of them;
* a real one: a separate process flipping the file as fast as it can (an atomic exchange of two
  names where the system has one) while the folder is loaded 300 times.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus.loader import LoadReport, read_source
from rlm_cli.corpus.walk import discover

#: What the planted secret holds; it must never come out.
SECRET = "SECRET-KEY-47-6"
#: The file system calls before which the scheduled adversary may flip the file.
_FS_CALLS = {"stat", "lstat", "open", "readlink", "scandir", "listdir", "is_symlink", "is_dir", "is_file"}


def _plant(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A secret in a home folder, and a repository whose ``docs/x.txt`` is a hard link to a harmless
    file of it; returns ``(repo, harmless file, secret)``."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    secret = home / ".ssh" / "id_rsa"
    secret.write_text(f"-----BEGIN KEY----- {SECRET}\n")
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "readme.md").write_text("the retry policy lives in conf.py\n")
    harmless = repo / "harmless.txt"
    harmless.write_text("nothing to see here\n")
    os.link(harmless, repo / "docs" / "x.txt")
    return repo, harmless, secret


def _load(repo: Path) -> list[str]:
    """The texts a cold load of ``repo`` reads (``walk.discover``, then ``loader.read_source`` for
    each file, as the store does): what ``context`` would hold."""
    options, report = CorpusOptions(use_cache=False), LoadReport()
    return [d.text for sf in discover([str(repo)], options, report) if (d := read_source(sf, options, report))]


def _exchanger(x: Path, other: Path) -> Callable[[], None] | None:
    """A function that swaps the names ``x`` and ``other`` atomically (``renameat2`` with
    ``RENAME_EXCHANGE``, Linux 3.15+), once swapped already; ``None`` where the system has none."""
    import ctypes

    if not sys.platform.startswith("linux"):
        return None
    exchange = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    a, b = os.fsencode(x), os.fsencode(other)
    if exchange is None or exchange(-100, a, -100, b, 2) != 0:  # AT_FDCWD, RENAME_EXCHANGE
        return None
    return lambda: None if exchange(-100, a, -100, b, 2) == 0 else pytest.fail("renameat2 failed")


def _flipper(x: Path, harmless: Path, secret: Path, other: Path) -> Callable[[], None]:
    """A function that flips ``x`` between the hard link to ``harmless`` it is and a symlink to
    ``secret``: one atomic exchange with ``other`` (Linux), else a rename of a fresh link over it."""
    os.symlink(secret, other)
    exchange = _exchanger(x, other)
    if exchange is not None:
        return exchange
    tmp = str(other) + ".new"

    def flip() -> None:
        if os.path.islink(x):
            os.link(harmless, tmp)
        else:
            os.symlink(secret, tmp)
        os.replace(tmp, x)
    return flip


@pytest.mark.parametrize("what", ["file", "folder"])
def test_scheduled_flips_between_each_check_and_open_never_read_the_secret(tmp_path: Path, what: str) -> None:
    """``file``: ``docs/x.txt`` flips between the hard link and a symlink to the secret;
    ``folder``: ``docs`` flips between the folder and a symlink to the secret's folder, which
    holds a ``x.txt`` too (the secret)."""
    repo, harmless, secret = _plant(tmp_path)
    if what == "file":
        flip = _flipper(repo / "docs" / "x.txt", harmless, secret, tmp_path / "other.txt")
    else:
        os.link(secret, secret.parent / "x.txt")
        os.symlink(secret.parent, tmp_path / "other")
        found = _exchanger(repo / "docs", tmp_path / "other")
        if found is None:
            pytest.skip("no atomic exchange of a folder and a link here (renameat2, Linux)")
        flip = found

    def hook_for(rng: random.Random) -> Callable[[FrameType, str, Any], None]:
        def hook(frame: FrameType, event: str, arg: Any) -> None:
            if event == "c_call" and getattr(arg, "__name__", "") in _FS_CALLS and rng.random() < 0.5:
                flip()
        return hook

    leaked: list[int] = []
    failed: list[str] = []
    for seed in range(300):
        sys.setprofile(hook_for(random.Random(seed)))
        try:
            texts = _load(repo)
        except OSError as exc:  # (a load must not fail either: the walk skips what changed under it)
            failed.append(f"{seed}: {exc!r}")
            continue
        finally:
            sys.setprofile(None)
        if any(SECRET in t for t in texts):
            leaked.append(seed)
    assert not leaked and not failed, (f"the secret was read in {len(leaked)} of 300 loads (seeds {leaked[:10]}); "
                                       f"{len(failed)} loads failed: {failed[:3]}")


_SWAPPER = r"""
import ctypes, os, sys
x, harmless, secret, spare, ready = sys.argv[1:6]
other = os.path.join(spare, "x.txt")
os.symlink(secret, other)
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
a, b = os.fsencode(x), os.fsencode(other)
exchange = getattr(libc, "renameat2", None)
open(ready, "w").close()
while True:
    if exchange is None or exchange(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
        exchange = None  # (no renameat2 here: a rename of a fresh link each time)
        os.symlink(secret, other + ".l")
        os.replace(other + ".l", x)
        os.link(harmless, other + ".h")
        os.replace(other + ".h", x)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks and hard links as on POSIX")
def test_a_process_flipping_the_file_during_300_loads_never_gets_the_secret_read(tmp_path: Path) -> None:
    repo, harmless, secret = _plant(tmp_path)
    ready, spare = tmp_path / "ready", tmp_path / "spare"
    spare.mkdir()
    swapper = subprocess.Popen([sys.executable, "-c", _SWAPPER, str(repo / "docs" / "x.txt"), str(harmless),
                                str(secret), str(spare), str(ready)])
    leaked = 0
    try:
        while not ready.exists():
            assert swapper.poll() is None, "the swapper did not start"
        for _ in range(300):
            leaked += any(SECRET in t for t in _load(repo))
    finally:
        swapper.kill()
        swapper.wait()
    assert leaked == 0, f"the secret was read in {leaked} of 300 loads"
