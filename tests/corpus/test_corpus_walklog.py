"""Replaying a walk (``rlm_cli.corpus.walklog``): a warm load finds exactly what a walk would,
and any change a walk would see (a file added, removed or renamed, an ignore file edited in
place, a link re-pointed two hops away, a file edited or emptied) is seen."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import store, walklog
from rlm_cli.corpus.loader import LoadReport, SourceFile
from rlm_cli.corpus.store import load_corpus
from rlm_cli.corpus.walk import discover

LATER_NS = 3_000_000_000  # a log "taken 3 s later": every time in it counts as settled


def tree(root: Path) -> Path:
    """A tree with most of what the walk's rules look at."""
    files: dict[str, bytes] = {
        "a.py": b"x = 1\n", "src/b.py": b"def b():\n    return 2\n", "src/deep/c.md": b"# c\n",
        ".hidden.txt": b"secret-ish\n", "build/out.txt": b"built\n", "src/.gitignore": b"*.log\n",
        "src/app.log": b"log line\n", ".gitignore": b"build/\n", "empty.txt": b"",
        "big.txt": b"y" * 5000, "skip/me.py": b"pass\n",
        os.fsdecode(b"notes/r\xe9sum\xe9.txt"): b"a Latin-1 file name\n",  # not UTF-8
    }
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    outside = root.parent / (root.name + "-outside")
    (outside / "hop").mkdir(parents=True, exist_ok=True)
    (outside / "target.txt").write_text("outside the corpus\n")
    (root / "src" / "inner.txt").write_text("inside\n")
    (root / "link-in.txt").symlink_to(root / "src" / "inner.txt")
    (root / "link-out.txt").symlink_to(outside / "target.txt")
    # Two hops: the listed folder holds a link to a link outside the corpus, which leads back in.
    (outside / "hop" / "second").symlink_to(root / "a.py")
    (root / "two-hops.py").symlink_to(outside / "hop" / "second")
    return root


def options(**kw: object) -> CorpusOptions:
    return CorpusOptions(max_file_size=4000, exclude=["skip/"], **kw)  # type: ignore[arg-type]


def walk(root: Path, opts: CorpusOptions, bundle: Path) -> tuple[list[SourceFile], LoadReport]:
    """A full walk that saves its log in ``bundle`` as if it had run 3 s later (settled)."""
    report = LoadReport()
    log = walklog.WalkLog([str(root)], scan_ns=time.time_ns() + LATER_NS)
    files = discover([str(root)], opts, report, log=log)
    bundle.mkdir(exist_ok=True)
    walklog.save(bundle, log, opts)
    return files, report


def same_report(a: LoadReport, b: LoadReport) -> bool:
    return (a.skipped, a.warnings, a.named) == (b.skipped, b.warnings, b.named)


def test_a_replay_finds_what_a_walk_finds_with_the_same_skips(tmp_path: Path) -> None:
    root, bundle = tree(tmp_path / "repo"), tmp_path / "bundle"
    files, report = walk(root, options(), bundle)
    assert (bundle / walklog.WALK_FILE).exists()
    shown = [f.display for f in files]
    assert "a.py" in shown and "src/deep/c.md" in shown and "notes/r\ufffdsum\ufffd.txt" in shown
    assert "link-out.txt" not in shown and ".hidden.txt" not in shown and "src/app.log" not in shown
    assert {"hidden", "ignored", "excluded", "empty", "too large", "symlink outside"} <= set(report.skipped)
    again = LoadReport()
    replayed = walklog.replay(bundle, [str(root)], options(), again)
    assert replayed == files
    assert same_report(again, report)
    assert replayed[shown.index("notes/r\ufffdsum\ufffd.txt")].path == files[shown.index(
        "notes/r\ufffdsum\ufffd.txt")].path  # the name as the OS gave it, still openable


def _add(root: Path) -> None:
    (root / "src" / "deep" / "new.py").write_text("new = 1\n")


def _remove(root: Path) -> None:
    (root / "src" / "b.py").unlink()


def _rename(root: Path) -> None:
    (root / "src" / "b.py").rename(root / "src" / "b2.py")


def _edit_ignore_file_in_place(root: Path) -> None:
    with open(root / "src" / ".gitignore", "a") as fh:
        fh.write("deep/\n")


def _repoint_second_hop(root: Path) -> None:
    hop = root.parent / (root.name + "-outside") / "hop" / "second"
    hop.unlink()
    hop.symlink_to(root.parent / (root.name + "-outside") / "target.txt")


def _replace_folder_by_file(root: Path) -> None:
    for p in (root / "src" / "deep").iterdir():
        p.unlink()
    (root / "src" / "deep").rmdir()
    (root / "src" / "deep").write_text("now a file\n")


@pytest.mark.parametrize("change", [_add, _remove, _rename, _edit_ignore_file_in_place, _repoint_second_hop,
                                    _replace_folder_by_file], ids=lambda f: f.__name__.strip("_"))
def test_a_change_a_walk_would_see_makes_the_load_walk_again(tmp_path: Path, change: object) -> None:
    root, bundle = tree(tmp_path / "repo"), tmp_path / "bundle"
    walk(root, options(), bundle)
    change(root)  # type: ignore[operator]
    report = LoadReport()
    assert walklog.replay(bundle, [str(root)], options(), report) is None
    assert report == LoadReport()  # untouched: the walk that follows counts the skips


def test_edited_and_emptied_files_are_judged_again_from_their_stat(tmp_path: Path) -> None:
    root, bundle = tree(tmp_path / "repo"), tmp_path / "bundle"
    walk(root, options(), bundle)
    with open(root / "a.py", "w") as fh:  # edited in place: no folder changes
        fh.write("x = 2  # longer now\n")
    (root / "src" / "b.py").write_bytes(b"")  # emptied
    with open(root / "big.txt", "w") as fh:  # now under --max-file-size
        fh.write("small\n")
    report = LoadReport()
    replayed = walklog.replay(bundle, [str(root)], options(), report)
    expected_report = LoadReport()
    expected = discover([str(root)], options(), expected_report)
    assert replayed == expected
    assert same_report(report, expected_report)
    by_name = {f.display: f for f in replayed}
    assert by_name["a.py"].size == len("x = 2  # longer now\n")
    assert "src/b.py" not in by_name and "big.txt" in by_name


def test_a_log_is_used_only_for_the_same_paths_options_and_folder(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    root, bundle = tree(tmp_path / "repo"), tmp_path / "bundle"
    walk(root, options(), bundle)
    assert walklog.replay(bundle, [str(root)], options(hidden=True), LoadReport()) is None
    assert walklog.replay(bundle, [str(root) + "/"], options(), LoadReport()) is None
    monkeypatch.chdir(tmp_path)
    assert walklog.replay(bundle, [str(root)], options(), LoadReport()) is None  # another current folder


def test_a_log_of_a_tree_changed_just_before_the_walk_is_not_kept(tmp_path: Path) -> None:
    root, bundle = tree(tmp_path / "repo"), tmp_path / "bundle"
    walk(root, options(), bundle)
    log = walklog.WalkLog([str(root)])  # now: the tree was made less than 2 s ago
    discover([str(root)], options(), LoadReport(), log=log)
    assert not log.settled()
    walklog.save(bundle, log, options())
    assert not (bundle / walklog.WALK_FILE).exists()  # (and the older log is gone too)


def test_a_glob_or_a_malformed_log_means_a_walk(tmp_path: Path) -> None:
    root, bundle = tree(tmp_path / "repo"), tmp_path / "bundle"
    bundle.mkdir()
    log = walklog.WalkLog([str(root / "src" / "*.py")], scan_ns=time.time_ns() + LATER_NS)
    discover([str(root / "src" / "*.py")], options(), LoadReport(), log=log)
    assert not log.trusted
    walk(root, options(), bundle)
    (bundle / walklog.WALK_FILE).write_text('{"key": ')
    assert walklog.replay(bundle, [str(root)], options(), LoadReport()) is None


def test_a_warm_load_replays_the_walk_and_still_sees_a_new_file(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    root = tree(tmp_path / "repo")
    old = time.time() - 3600
    for dirpath, _, names in os.walk(root):
        for n in names:
            os.utime(os.path.join(dirpath, n), (old, old), follow_symlinks=False)
    first = load_corpus([str(root)], options())
    time.sleep(2.1)  # the folders' own times (ctime cannot be set back) must be settled
    load_corpus([str(root)], options())  # walks again (the first log was not settled) and keeps a log
    assert (first.bundle_dir / walklog.WALK_FILE).exists()

    def no_walk(*a: object, **k: object) -> None:
        raise AssertionError("the unchanged tree was walked")

    monkeypatch.setattr(store, "discover", no_walk)
    warm = load_corpus([str(root)], options())
    assert [f.path for f in warm.files] == [f.path for f in first.files]
    assert warm.report.skipped == first.report.skipped
    monkeypatch.undo()
    (root / "src" / "deep" / "new.py").write_text("new = 1\n")
    seen = load_corpus([str(root)], options())
    assert "src/deep/new.py" in [f.path for f in seen.files]


def test_an_ignored_link_whose_target_changes_kind_makes_the_load_walk_again(tmp_path: Path) -> None:
    # `build/` ignores the link while it leads to a folder; once it leads to a file it is read.
    root, bundle, outside = tmp_path / "repo", tmp_path / "bundle", tmp_path / "out"
    (outside / "t").mkdir(parents=True)
    root.mkdir()
    (root / "a.txt").write_text("hello\n")
    (root / ".gitignore").write_text("build/\n")
    (root / "build").symlink_to(outside / "t")
    opts = options(follow=True)
    _, report = walk(root, opts, bundle)
    assert report.skipped["ignored"] == 1
    (outside / "t").rmdir()
    (outside / "t").write_text("now a file\n")
    assert walklog.replay(bundle, [str(root)], opts, LoadReport()) is None
    assert "build" in [f.display for f in discover([str(root)], opts, LoadReport())]


@pytest.mark.parametrize("damage", [
    lambda d: d["roots"][0].__setitem__("steps", [123]),
    lambda d: d["roots"][0].__setitem__("steps", [["a"]]),
    lambda d: d["roots"][0].__setitem__("steps", [{"x": 1}]),
    lambda d: d["roots"][0].pop("prefix"),
    lambda d: d["roots"][0].__setitem__("prefix", None),
    lambda d: d.__setitem__("scan_ns", 1e400),
    lambda d: d["roots"][0].__setitem__("steps", ["../../../../etc/hostname"]),
    lambda d: d["roots"][0].__setitem__("steps", [["a.py\0/etc/hostname", "x", False]]),
], ids=["int step", "short step", "bad skip", "no prefix", "null prefix", "huge scan time", "dot-dot", "absolute"])
def test_a_damaged_log_of_the_right_key_is_not_replayed(tmp_path: Path, damage: object) -> None:
    import json

    root, bundle = tree(tmp_path / "repo"), tmp_path / "bundle"
    walk(root, options(), bundle)
    doc = json.loads((bundle / walklog.WALK_FILE).read_text())
    damage(doc)  # type: ignore[operator]
    (bundle / walklog.WALK_FILE).write_text(json.dumps(doc))
    report = LoadReport()
    assert walklog.replay(bundle, [str(root)], options(), report) is None
    assert report == LoadReport()


def test_a_deeply_nested_log_is_not_replayed(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / walklog.WALK_FILE).write_text("[" * 200_000)
    assert walklog.replay(bundle, [str(tmp_path)], options(), LoadReport()) is None
