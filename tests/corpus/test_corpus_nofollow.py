"""``rlm_cli.corpus.nofollow``: paths opened a component at a time without following a link, the
folder descriptors kept on the way (and closed), and what the walk does with it."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import pytest

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import nofollow
from rlm_cli.corpus.loader import LoadReport, read_source
from rlm_cli.corpus.walk import discover

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="openat and O_NOFOLLOW")


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "r"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f.txt").write_text("inside\n")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "f.txt").write_text("SECRET\n")
    return root


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else len(os.listdir("/dev/fd"))


def test_a_file_opens_at_its_real_path_and_a_link_anywhere_on_the_way_is_refused(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    fd = nofollow.open_file(str(root / "a" / "b" / "f.txt"))
    assert os.read(fd, 100) == b"inside\n"
    os.close(fd)
    (root / "a" / "b" / "f.txt").unlink()
    os.symlink(tmp_path / "secret" / "f.txt", root / "a" / "b" / "f.txt")
    with pytest.raises(nofollow.Replaced):  # the file itself is a link now
        nofollow.open_file(str(root / "a" / "b" / "f.txt"))
    os.rename(root / "a", tmp_path / "a_moved")
    os.symlink(tmp_path / "secret", root / "a")
    with pytest.raises(nofollow.Replaced):  # a folder on the way is a link now
        nofollow.open_folder(str(root / "a"))
    with pytest.raises(OSError) as info:  # a path that was never resolved is refused, not walked
        nofollow.open_file(str(root / ".." / "secret" / "f.txt"))
    assert info.value.errno == errno.EINVAL


def test_the_kept_chain_closes_every_descriptor_it_opened(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "c").mkdir()
    (root / "c" / "g.txt").write_text("g\n")
    before = _open_fds()
    with nofollow.kept():
        for rel in ("a/b/f.txt", "c/g.txt", "a/b/f.txt"):
            os.close(nofollow.open_file(str(root / rel)))
        assert _open_fds() > before  # (the folders on the way stay open while inside)
    assert _open_fds() == before
    os.close(nofollow.open_file(str(root / "c" / "g.txt")))  # outside: nothing kept
    assert _open_fds() == before


def test_a_symlinked_ignore_file_is_not_followed_and_links_inside_are_still_read(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (tmp_path / "rules").write_text("*.txt\n")
    os.symlink(tmp_path / "rules", root / ".gitignore")
    os.symlink("b/f.txt", root / "a" / "alias.txt")  # a link inside the corpus: read once, at its own path
    os.symlink("a/b", root / "b_link")  # a folder link inside
    report, options = LoadReport(), CorpusOptions()
    found = discover([str(root)], options, report)
    assert [sf.display for sf in found] == ["a/b/f.txt"]
    assert any("cannot read .gitignore: it is a symlink (not followed)" in w for w in report.warnings)
    texts = [d.text for sf in found if (d := read_source(sf, options, report))]
    assert texts == ["inside\n"]


def test_a_folder_swapped_between_the_walk_and_the_read_is_not_read(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    report, options = LoadReport(), CorpusOptions()
    [sf] = discover([str(root)], options, report)
    os.rename(root / "a", tmp_path / "a_moved")
    os.symlink(tmp_path / "secret", root / "a")  # secret/f.txt is not where a/b/f.txt leads, but a link is refused
    (tmp_path / "secret" / "b").mkdir()
    os.link(tmp_path / "secret" / "f.txt", tmp_path / "secret" / "b" / "f.txt")
    assert read_source(sf, options, report) is None
    assert report.skipped["replaced while loading"] == 1
