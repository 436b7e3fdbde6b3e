"""Loading rules of ``rlm_cli.corpus.loader`` on real folders: ignore files, globs, hidden files,
binary detection, decoding, links, special files, size limits and the empty-corpus error."""

from __future__ import annotations

import codecs
import json
import os
import random
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import loader
from rlm_cli.corpus.loader import LoadReport, decode_bytes, is_binary, read_source
from rlm_cli.corpus.store import load_corpus
from rlm_cli.corpus.walk import discover
from rlm_cli.errors import EmptyCorpusError, UsageError
from tests.support.cli import rlm_argv

ROOT = Path(__file__).resolve().parents[2]


def make_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    """Create ``files`` (relative path -> text or bytes) under ``root``."""
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")
    return root


def shown(root: Path, **opts: object) -> tuple[list[str], LoadReport]:
    report = LoadReport()
    found = discover([str(root)], CorpusOptions(**opts), report)  # type: ignore[arg-type]
    return [sf.display for sf in found], report


# -- ignore files, hidden files, .git ------------------------------------------------------------

def test_gitignore_ignore_and_rlmignore_apply_at_any_depth_and_deeper_files_win(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "repo", {
        ".gitignore": "*.log\nbuild/\n",
        "app.py": "x", "debug.log": "x", "build/out.py": "x",
        "pkg/.ignore": "secret.py\n!keep.log\n",
        "pkg/secret.py": "x", "pkg/keep.log": "x", "pkg/other.log": "x", "pkg/mod.py": "x",
        "pkg/deep/.rlmignore": "/local.txt\n",
        "pkg/deep/local.txt": "x", "pkg/deep/more/local.txt": "x",
    })
    paths, report = shown(root)
    assert paths == ["app.py", "pkg/deep/more/local.txt", "pkg/keep.log", "pkg/mod.py"]
    # build/ (a folder: not entered), debug.log, other.log, secret.py, deep/local.txt
    assert report.skipped["ignored"] == 5
    assert report.skipped["hidden"] == 3  # the three ignore files themselves are dotfiles


def test_no_ignore_reads_everything_but_git_and_hidden(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "repo", {".gitignore": "*.log\n", "a.log": "x", ".git/config": "x",
                                         ".env": "KEY=1", ".github/ci.yml": "x"})
    assert shown(root, no_ignore=True)[0] == ["a.log"]
    paths, _ = shown(root, no_ignore=True, hidden=True)
    assert paths == [".env", ".github/ci.yml", ".gitignore", "a.log"]  # .git/ is always skipped


def test_hidden_files_and_folders_are_counted_when_skipped(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "r", {".hidden.py": "x", ".cache/a.py": "x", "seen.py": "x"})
    paths, report = shown(root)
    assert paths == ["seen.py"] and report.skipped["hidden"] == 2
    assert shown(root, hidden=True)[0] == [".cache/a.py", ".hidden.py", "seen.py"]


def test_ignored_folder_with_reincluded_file_stays_out_like_git(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "r", {".gitignore": "logs/\n!logs/keep.txt\n", "logs/keep.txt": "x", "a.txt": "x"})
    assert shown(root)[0] == ["a.txt"]


# -- include / exclude / globs / explicit files ---------------------------------------------------

def test_include_and_exclude_globs_use_gitignore_syntax(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "r", {"src/a.py": "x", "src/b.txt": "x", "tests/t.py": "x",
                                      "src/vendor/v.py": "x", "README.md": "x"})
    assert shown(root, include=["*.py"])[0] == ["src/a.py", "src/vendor/v.py", "tests/t.py"]
    paths, report = shown(root, include=["*.py"], exclude=["tests/", "vendor"])
    assert paths == ["src/a.py"]
    assert report.skipped["excluded"] == 2 and report.skipped["not included"] == 2
    assert shown(root, include=["src/"])[0] == ["src/a.py", "src/b.txt", "src/vendor/v.py"]


def test_excluded_folder_is_not_entered(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "r", {"a.py": "x"})
    (root / "site-packages").mkdir()
    os.symlink("..", root / "site-packages" / "loop")  # would warn if the folder were walked
    paths, report = shown(root, exclude=["site-packages/"])
    assert paths == ["a.py"]
    assert report.skipped == {"excluded": 1} and not report.warnings


def test_glob_arguments_and_several_roots_show_paths_relative_to_cwd(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    make_tree(tmp_path, {"p/src/a.py": "x", "p/src/deep/b.py": "x", "p/src/c.txt": "x", "q/d.md": "x"})
    monkeypatch.chdir(tmp_path)
    report = LoadReport()
    found = discover(["p/src/**/*.py", "q"], CorpusOptions(), report)
    assert [sf.display for sf in found] == ["p/src/a.py", "p/src/deep/b.py", "q/d.md"]
    with pytest.raises(UsageError, match=r"no file matches the glob nope/\*\.zzz .*dotfiles need --hidden"):
        discover(["nope/*.zzz"], CorpusOptions(), LoadReport())
    with pytest.raises(UsageError, match="no such file or directory: nope"):
        discover(["nope"], CorpusOptions(), LoadReport())


def test_explicit_file_bypasses_ignore_files_but_not_exclude(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_tree(tmp_path, {".gitignore": "*.log\n", "app.log": "x", "b.log": "x"})
    monkeypatch.chdir(tmp_path)
    report = LoadReport()
    found = discover(["app.log", "b.log"], CorpusOptions(exclude=["b.*"]), report)
    assert [sf.display for sf in found] == ["app.log"]
    assert report.skipped["excluded"] == 1


def test_the_same_file_given_twice_or_through_a_link_is_read_once(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "r", {"a.py": "x"})
    os.symlink("a.py", root / "alias.py")
    assert shown(root)[0] == ["a.py"]


# -- binary detection and decoding ----------------------------------------------------------------

def test_binary_detection() -> None:
    assert is_binary(b"PK\x03\x04\x00\x00")
    assert is_binary(bytes(range(1, 32)) * 10)  # mostly control bytes, no NUL
    assert not is_binary(b"plain text\twith tabs\r\n" * 100)
    assert not is_binary("é ü ß 漢字".encode() * 100)  # UTF-8 high bytes are text
    assert not is_binary(codecs.BOM_UTF16_LE + "hi".encode("utf-16-le"))  # NULs, but a BOM says UTF-16
    assert not is_binary(b"")
    mostly_text = b"a" * 800 + bytes([1, 2, 3]) * 50  # 150 control bytes in 950: under 30%
    assert not is_binary(mostly_text)


def test_binary_files_are_skipped_and_counted(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "r", {"img.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "ctrl.dat": bytes(range(1, 9)) * 200,
                                      "ok.txt": "text\n"})
    corpus = load_corpus([str(root)], CorpusOptions(use_cache=False))
    assert [f.path for f in corpus.files] == ["ok.txt"]
    assert corpus.report.skipped["binary"] == 2
    assert "skipped 2 binary" in corpus.summary()


@pytest.mark.parametrize(("data", "text", "how"), [
    (codecs.BOM_UTF8 + "héllo\n".encode(), "héllo\n", "utf-8-sig"),
    (codecs.BOM_UTF16_LE + "héllo 漢\n".encode("utf-16-le"), "héllo 漢\n", "utf-16"),
    (codecs.BOM_UTF16_BE + "héllo 漢\n".encode("utf-16-be"), "héllo 漢\n", "utf-16"),
    (codecs.BOM_UTF32_LE + "hé😀\n".encode("utf-32-le"), "hé😀\n", "utf-32"),
    ("café über naïve\n".encode("latin-1"), "café über naïve\n", "latin-1"),
    ("ok 漢字 and ü\n".encode() + b"\xff" + b"\n", "ok 漢字 and ü\n\xff\n", "utf-8+latin-1"),
    ("naïve ".encode() + "Müller\n".encode("latin-1"), "naïve Müller\n", "utf-8+latin-1"),
    (codecs.BOM_UTF8 + "ü".encode() + b"\xe9\n", "üé\n", "utf-8+latin-1"),
    (b"plain ascii\n", "plain ascii\n", "utf-8"),
])
def test_decoding_with_bom_and_fallbacks(data: bytes, text: str, how: str) -> None:
    decoded = decode_bytes(data)
    assert (decoded.text, decoded.encoding) == (text, how)
    assert decoded.data == text.encode("utf-8")  # the bytes written to the context file


def test_decoding_never_raises_on_random_bytes() -> None:
    rng = random.Random(5)
    for _ in range(300):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
        d = decode_bytes(data)
        assert d.data == d.text.encode("utf-8")


def test_bad_encodings_load_and_are_reported_in_the_summary(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "r", {"legacy.txt": "Größe café\n".encode("latin-1"),
                                      "win.txt": codecs.BOM_UTF16_LE + "wide text\n".encode("utf-16-le")})
    corpus = load_corpus([str(root)], CorpusOptions(use_cache=False))
    assert "==> legacy.txt <==\nGröße café\n" in corpus.context
    assert "==> win.txt <==\nwide text\n" in corpus.context
    assert "decoded 1 latin-1, 1 utf-16" in corpus.summary()


# -- links, special files, unreadable files -------------------------------------------------------

def test_symlink_loops_and_broken_links_are_skipped_with_warnings(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "r", {"sub/a.py": "x"})
    os.symlink("..", root / "sub" / "up")  # folder loop
    os.symlink("self.txt", root / "self.txt")  # a link to itself: ELOOP
    os.symlink("missing.txt", root / "dangling.txt")
    paths, report = shown(root)
    assert paths == ["sub/a.py"]
    assert report.skipped["symlink loop"] == 2 and report.skipped["broken symlink"] == 1
    assert any("sub/up/: symlink loop" in w for w in report.warnings)
    assert any("dangling.txt: broken symlink" in w for w in report.warnings)


def test_fifos_sockets_and_devices_are_never_opened(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "r", {"a.txt": "x"})
    os.mkfifo(root / "pipe")  # opening it for reading would block forever
    os.symlink("/dev/zero", root / "zero")  # reading it would never end
    sock = socket.socket(socket.AF_UNIX)
    here = os.getcwd()
    os.chdir(root)  # bound by a relative name: tmp_path may be too long for a socket path
    try:
        sock.bind("sock")
    finally:
        os.chdir(here)
    try:
        corpus = load_corpus([str(root)], CorpusOptions(use_cache=False, follow=True))  # /dev is outside
    finally:
        sock.close()
    assert [f.path for f in corpus.files] == ["a.txt"]
    assert corpus.report.skipped["special file"] == 3
    text = "\n".join(corpus.report.warnings)
    assert "pipe: a FIFO" in text and "zero: a device" in text and "sock: a socket" in text


def test_a_path_swapped_for_a_fifo_after_discovery_is_not_read(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "r", {"a.txt": "x"})
    report = LoadReport()
    [sf] = discover([str(root)], CorpusOptions(), report)
    os.unlink(root / "a.txt")
    os.mkfifo(root / "a.txt")
    assert read_source(sf, CorpusOptions(), report) is None  # returns at once: opened non-blocking
    assert report.skipped["special file"] == 1


_UNREADABLE_SCRIPT = """
import json, sys
from rlm_cli.config import CorpusOptions
from rlm_cli.corpus.store import load_corpus
c = load_corpus([sys.argv[1]], CorpusOptions(use_cache=False))
print(json.dumps({"files": [f.path for f in c.files], "skipped": c.report.skipped, "warnings": c.report.warnings}))
"""


def test_unreadable_files_and_folders_are_skipped_with_a_warning(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "r", {"ok.txt": "fine\n", "secret.txt": "x\n", "locked/inner.txt": "x\n"})
    os.chmod(root / "secret.txt", 0)
    os.chmod(root / "locked", 0)
    cmd = [sys.executable, "-c", _UNREADABLE_SCRIPT, str(root)]
    if os.geteuid() == 0:  # root reads anything; drop the capabilities that let it
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv to drop CAP_DAC_OVERRIDE")
        cmd = [setpriv, "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search", *cmd]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        os.chmod(root / "locked", 0o755)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["files"] == ["ok.txt"]
    assert doc["skipped"] == {"unreadable": 2}
    assert any("secret.txt: Permission denied" in w for w in doc["warnings"])
    assert any("cannot list locked/: Permission denied" in w for w in doc["warnings"])


# -- size limits ---------------------------------------------------------------------------------

def test_files_over_max_file_size_are_skipped_with_a_warning(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "r", {"big.log": "x" * 5000 + "\n", "small.txt": "ok\n"})
    warnings: list[str] = []
    corpus = load_corpus([str(root)], CorpusOptions(max_file_size=1000, use_cache=False), on_warning=warnings.append)
    assert [f.path for f in corpus.files] == ["small.txt"]
    assert corpus.report.skipped["too large"] == 1
    assert any("big.log: 5,001 bytes is over --max-file-size 1,000" in w for w in warnings)


def test_truncate_large_keeps_the_head_and_never_splits_a_character(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "r", {"big.txt": "é" * 600})  # 1,200 bytes of 2-byte characters
    warnings: list[str] = []
    corpus = load_corpus([str(root)], CorpusOptions(max_file_size=1001, truncate_large=True, use_cache=False),
                         on_warning=warnings.append)
    [f] = corpus.files
    assert corpus.context[f.start:f.end] == "é" * 500  # 1,001 bytes would cut the 501st in half
    assert any("truncated big.txt to its first 1,000 of 1,200 bytes" in w for w in warnings)
    assert loader.trim_partial_utf8("a😀".encode()[:-1]) == b"a"
    assert loader.trim_partial_utf8("a😀".encode()) == "a😀".encode()


# -- empty result --------------------------------------------------------------------------------

def test_empty_result_names_the_reasons(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "r", {".gitignore": "*.txt\n", "a.txt": "x", "b.bin": b"\x00\x01", ".env": "x"})
    with pytest.raises(EmptyCorpusError) as info:
        load_corpus([str(root)], CorpusOptions(use_cache=False))
    msg = str(info.value)
    assert "every file was skipped (2 hidden, 1 ignored, 1 binary)" in msg
    assert "--hidden" in msg and "--no-ignore" in msg
    assert info.value.exit_code == 2
    (tmp_path / "empty").mkdir()
    with pytest.raises(EmptyCorpusError, match="no files found"):
        load_corpus([str(tmp_path / "empty")], CorpusOptions())


def test_a_whitelist_gitignore_keeps_what_git_keeps(tmp_path: Path) -> None:
    """``*`` then ``!*/`` then ``!*.py`` (ignore everything, but walk every folder and keep the
    Python files): git keeps every ``.py`` file at any depth; pathspec 1.1.1 alone ignored every
    folder (its ``*`` shortcut cannot say it matched a folder), so only root files were read."""
    files = {f"{d}{name}": "x\n" for d in ("", "a/", "a/b/", "x/", "x/y/") for name in ("f.py", "n.txt")}
    root = make_tree(tmp_path / "r", {**files, ".gitignore": "*\n!*/\n!*.py\n"})
    assert shown(root)[0] == ["a/b/f.py", "a/f.py", "f.py", "x/f.py", "x/y/f.py"]
    (root / ".gitignore").write_text("x/**\n!*.py\n")  # what is in x, not x itself: x/f.py comes back
    assert "x/f.py" in shown(root)[0] and "x/y/f.py" not in shown(root)[0] and "x/n.txt" not in shown(root)[0]


#: Patterns the comparison with git draws from: folder-only, negated, anchored, ``**`` and ``*`` forms.
_GIT_POOL = ["*", "!*/", "!*.py", "*.txt", "a/", "!a/", "a/*", "!a/b/", "b", "!b", "**/c", "/x", "x/**", "*.log",
             "!keep.log", "d*/", "!d1/", "!*.txt", "*/", "!x/", "a/**/f.py", "!**/c/", "**", "!**/", "b/", "!a/b/c/",
             "x/**/", "a/**/", "!a/**/"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_gitignore_verdicts_match_git_on_random_rule_sets(tmp_path: Path) -> None:
    """120 random .gitignore files at the root and in ``a/`` over a tree of 11 folders: the files
    read are exactly those ``git ls-files --others --exclude-standard`` lists (with pathspec's
    own verdicts 52 in 300 differed)."""
    dirs = ["", "a", "a/b", "a/b/c", "b", "x", "x/y", "d1", "d2", "c", "d1/c"]
    root = make_tree(tmp_path / "r", {f"{d}/{f}".lstrip("/"): d + f for d in dirs
                                      for f in ("f.py", "n.txt", "keep.log", "z.log")})
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    rng = random.Random(3)
    checked = 0
    for _ in range(120):
        lines = rng.sample(_GIT_POOL, rng.randint(1, 5))
        (root / ".gitignore").write_text("\n".join(lines) + "\n")
        (root / "a" / ".gitignore").write_text("\n".join(rng.sample(_GIT_POOL, rng.randint(0, 3))) + "\n")
        out = subprocess.run(["git", "-C", str(root), "ls-files", "--others", "--exclude-standard"],
                             capture_output=True, text=True, check=True).stdout.split()
        git = set(out) - {".gitignore", "a/.gitignore"}
        ours = {sf.display for sf in discover([str(root)], CorpusOptions(use_cache=False), LoadReport())}
        assert ours == git, lines
        checked += len(git)
    assert checked > 500  # the rule sets kept files, not only ignored them


def test_an_ignore_file_that_cannot_be_read_is_named_and_a_fifo_does_not_block(tmp_path: Path) -> None:
    """A folder named ``.gitignore`` and a FIFO named ``.ignore`` (a hostile corpus: a plain
    ``open`` of a FIFO waits for a writer forever) are each skipped with a warning that says their
    rules are not applied; the readable ignore files still count."""
    root = make_tree(tmp_path / "r", {"a.py": "x\n", "b.log": "x\n", "sub/c.py": "x\n", "sub/d.tmp": "x\n",
                                      ".rlmignore": "*.log\n"})
    (root / ".gitignore").mkdir()
    os.mkfifo(root / "sub" / ".ignore")
    (root / "sub" / ".rlmignore").write_text("*.tmp\n")
    proc = subprocess.run([*rlm_argv(), "stats", str(root), "--json", "--no-cache"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "cannot read .gitignore: not a regular file; its ignore rules are not applied" in proc.stderr
    assert "cannot read sub/.ignore: not a regular file" in proc.stderr
    paths, report = shown(root)
    assert paths == ["a.py", "sub/c.py"]  # *.log and *.tmp still ignored
    assert report.skipped["unreadable"] == 2
