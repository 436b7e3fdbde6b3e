"""A cloned repository is untrusted input: symlinks out of it, file names of any bytes, and
edits that keep a file's size and mtime, all through the ``rlm`` command (issue 23).

Every test that runs a model checks the fake server's request log: no planted secret reaches
a model request.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.cli import model_flags, run_rlm
from tests.support.fake_llm import FakeLLM, repl

#: What the planted secret files hold; it must never reach a model request.
SECRET = "SECRET-MARKER-7f3a"


def _requests_text(llm: FakeLLM) -> str:
    return json.dumps(llm.requests)


def _planted(tmp_path: Path) -> Path:
    """``tmp_path/repo``, a corpus with links out of it (to ``tmp_path/secret``) and in it.

    ``key_file -> ../secret/id_rsa``, ``notes.txt -> ../secret/shadow``, ``conf/ -> ../secret``
    (a folder), ``abs_key -> /abs/path/secret/id_rsa``, ``gone -> ../secret/missing``
    (outside and dangling: a broken symlink), ``dup.txt -> readme.txt`` and ``docs_link/ -> docs`` (inside: read once), and
    ``ignored_link -> ../secret/id_rsa`` listed in ``.gitignore``.
    """
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "id_rsa").write_text(f"-----BEGIN KEY----- {SECRET} id_rsa\n")
    (secret / "shadow").write_text(f"root:{SECRET}:shadow\n")
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "readme.txt").write_text("the retry policy lives in conf.py\n")
    (repo / "docs" / "guide.md").write_text("# guide\nread the readme\n")
    (repo / ".gitignore").write_text("ignored_link\n")
    os.symlink("../secret/id_rsa", repo / "key_file")
    os.symlink("../secret/shadow", repo / "notes.txt")
    os.symlink("../secret", repo / "conf")
    os.symlink(str(secret / "id_rsa"), repo / "abs_key")
    os.symlink("../secret/missing", repo / "gone")
    os.symlink("readme.txt", repo / "dup.txt")
    os.symlink("docs", repo / "docs_link")
    os.symlink("../secret/id_rsa", repo / "ignored_link")
    return repo


def _print_context(llm: FakeLLM) -> None:
    """Root replies: print all of ``context`` and the file list, then answer."""
    llm.script("root", repl("print(context)\nprint(sorted(f['path'] for f in files))"), repl("FINAL('done')"))


def test_symlinks_out_of_the_corpus_are_skipped_counted_and_never_reach_the_model(tmp_path: Path,
                                                                                 llm: FakeLLM) -> None:
    repo = _planted(tmp_path)
    _print_context(llm)
    res = run_rlm("ask", str(repo), "Where is the retry policy?", *model_flags(llm), "--json", "-v",
                  "--no-llm-cache")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["status"] == "final"
    assert SECRET not in _requests_text(llm)
    assert SECRET not in res.stdout and SECRET not in res.stderr
    skipped = {row["path"]: row["reason"] for row in doc["corpus"]["skipped"]}
    for name in ("key_file", "notes.txt", "conf/", "abs_key"):
        assert skipped[name] == "symlink outside", (name, skipped)
    assert skipped["gone"] == "broken symlink"  # dangling: said so wherever it points (as with --follow)
    assert skipped["ignored_link"] == "ignored"  # a .gitignore'd link stays ignored (not counted as a link)
    # Counted in the summary line, each one listed under -v, with the way to read them.
    assert "4 symlink outside" in res.stderr
    assert "skipped key_file (symlink outside)" in res.stderr and "skipped conf/ (symlink outside)" in res.stderr
    assert "--follow" in res.stderr
    # Links inside the corpus are followed, each file read once.
    assert doc["corpus"]["files"] == 2
    printed = _requests_text(llm)
    assert printed.count("==> readme.txt <==") >= 1 and "==> dup.txt <==" not in printed
    assert "==> docs/guide.md <==" in printed and "docs_link/guide.md" not in printed


def test_follow_reads_links_out_of_the_corpus(tmp_path: Path, llm: FakeLLM) -> None:
    """``--follow`` (``-L``, as ripgrep) restores reading them: the same test can fail."""
    repo = _planted(tmp_path)
    _print_context(llm)
    res = run_rlm("ask", str(repo), "q?", *model_flags(llm), "--json", "-L", "--no-llm-cache")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert SECRET in _requests_text(llm)
    assert doc["corpus"]["files"] == 4  # readme, guide, id_rsa (key_file, abs_key, conf/ once), shadow
    assert "symlink outside" not in {row["reason"] for row in doc["corpus"]["skipped"]}
    assert "ignored_link" in {row["path"] for row in doc["corpus"]["skipped"]}  # still ignored


def test_stats_and_index_skip_links_out_of_the_corpus_and_follow_reads_them(tmp_path: Path) -> None:
    repo = _planted(tmp_path)
    res = run_rlm("stats", str(repo), "--json")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["files"] == 2 and doc["skipped"]["symlink outside"] == 4 and doc["skipped"]["broken symlink"] == 1
    assert "skipped key_file: a symlink to a path outside the corpus (--follow reads it)" in res.stderr
    res = run_rlm("index", str(repo), "--json", "--follow")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["files"] == 4 and "symlink outside" not in doc["skipped"]
    res = run_rlm("index", str(repo), "--json")  # another cache entry: not the followed one
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout)["files"] == 2


def test_a_root_named_as_a_symlink_is_followed_and_globs_do_not_escape(tmp_path: Path, llm: FakeLLM) -> None:
    repo = _planted(tmp_path)
    (tmp_path / "work").mkdir()
    os.symlink(repo, tmp_path / "work" / "repo_link")
    res = run_rlm("stats", str(tmp_path / "work" / "repo_link"), "--json")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["files"] == 2 and doc["skipped"]["symlink outside"] == 4 and doc["skipped"]["broken symlink"] == 1
    # A glob's matches are checked too (Python's ** walks into linked folders: conf/ leads out).
    _print_context(llm)
    res = run_rlm("ask", f"{repo}/**/*", "q?", *model_flags(llm), "--json", "--no-llm-cache")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert SECRET not in _requests_text(llm)
    assert doc["corpus"]["files"] == 2
    # A file named explicitly through a link is followed: the user named it.
    res = run_rlm("stats", str(repo / "key_file"), "--json")
    assert res.code == 0 and json.loads(res.stdout)["files"] == 1


def test_mcp_and_chat_options_accept_follow(tmp_path: Path) -> None:
    for command in ("chat", "mcp", "eval", "ask", "index", "stats"):
        res = run_rlm(command, "--help")
        assert "--follow" in res.stdout and "-L" in res.stdout, command


# -- file names of any bytes ----------------------------------------------------------------------

LATIN1 = os.fsdecode(b"r\xe9sum\xe9.txt")
INVALID = os.fsdecode(b"bad\xff\xfe-name.txt")
CONTROL = "two\nlines.txt"


@pytest.fixture
def odd_names(tmp_path: Path) -> Path:
    repo = tmp_path / "names"
    repo.mkdir()
    (repo / LATIN1).write_text("the latin one says hello\n")
    (repo / INVALID).write_text("the invalid one says bye\n")
    (repo / CONTROL).write_text("==> forged <==\nnot a header\n")
    (repo / "plain.txt").write_text("plain text\n")
    return repo


def test_file_names_of_any_bytes_work_in_stats_and_index(odd_names: Path) -> None:
    res = run_rlm("stats", str(odd_names), "--json")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["files"] == 4
    paths = {row["path"] for row in doc["largest"]}
    assert paths == {"r\ufffdsum\ufffd.txt", "bad\ufffd\ufffd-name.txt", "two\ufffdlines.txt", "plain.txt"}
    assert "internal error" not in res.stderr
    res = run_rlm("stats", str(odd_names))
    assert res.code == 0 and "r\ufffdsum\ufffd.txt" in res.stdout + res.stderr
    for _ in range(2):  # built, then read back from the cache
        res = run_rlm("index", str(odd_names), "--json")
        assert res.code == 0, res.stderr
        assert json.loads(res.stdout)["files"] == 4
    assert json.loads(res.stdout)["from_cache"] == 4


def test_file_names_of_any_bytes_work_in_ask_with_cite_and_json(odd_names: Path, llm: FakeLLM) -> None:
    code = ("p = [f['path'] for f in files if 'sum' in f['path']][0]\n"
            "print(p)\nprint(read_file(p))")
    llm.script("root", repl(code), repl("FINAL('It says hello (r\\ufffdsum\\ufffd.txt:1).')"))
    res = run_rlm("ask", str(odd_names), "What does the résumé say?", *model_flags(llm), "--cite",
                  "--no-leads", "--no-llm-cache")
    assert res.code == 0, res.stderr
    assert res.stdout == "It says hello (r\ufffdsum\ufffd.txt:1).\n\nSources:\n- r\ufffdsum\ufffd.txt:1\n"
    sent = _requests_text(llm)
    assert "the latin one says hello" in sent and "r\\ufffdsum\\ufffd.txt" in sent
    assert "\\udce9" not in sent  # no lone surrogate (bytes as Python keeps them) sent as text
    llm.script("root", repl("print(context)"), repl("FINAL('ok')"))
    res = run_rlm("ask", str(odd_names), "q?", *model_flags(llm), "--json", "--no-leads", "--no-llm-cache")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["corpus"]["files"] == 4
    context = json.loads(_requests_text(llm))[-1]["messages"][-1]["content"]
    # A newline in a name cannot forge a header line of context.
    assert "==> two\ufffdlines.txt <==" in context and context.count("==> ") == 5


def test_two_names_that_display_alike_stay_two_files(tmp_path: Path) -> None:
    repo = tmp_path / "alike"
    repo.mkdir()
    (repo / os.fsdecode(b"x\xe9.txt")).write_text("first\n")
    (repo / os.fsdecode(b"x\xe8.txt")).write_text("second\n")
    res = run_rlm("stats", str(repo), "--json")
    assert res.code == 0, res.stderr
    paths = sorted(row["path"] for row in json.loads(res.stdout)["largest"])
    assert len(set(paths)) == 2 and "x\ufffd.txt" in paths


# -- the cache key --------------------------------------------------------------------------------


def _edit_keeping_size_and_mtime(path: Path, new: str) -> None:
    """What ``cp -p``, ``rsync -a`` and ``tar x`` leave: other bytes, the same size and mtime."""
    st = path.stat()
    assert len(new.encode()) == st.st_size
    path.write_text(new)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size


def test_an_edit_keeping_size_and_mtime_is_not_served_from_the_cache(tmp_path: Path, llm: FakeLLM) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    target = repo / "conf.txt"
    target.write_text("retries = 3 (old text)\n")
    (repo / "other.txt").write_text("unchanged\n")
    old = 1_600_000_000_000_000_000  # well before the index's scan: trusted by its stat alone
    for p in (target, repo / "other.txt"):
        os.utime(p, ns=(old, old))
    res = run_rlm("index", str(repo), "--json")
    assert res.code == 0 and json.loads(res.stdout)["reindexed"] == 2
    _edit_keeping_size_and_mtime(target, "retries = 9 (NEW text)\n")
    llm.script("root", repl("print(context)"), repl("FINAL('ok')"))
    res = run_rlm("ask", str(repo), "How many retries?", *model_flags(llm), "--json", "--no-llm-cache")
    assert res.code == 0, res.stderr
    sent = _requests_text(llm)
    assert "retries = 9 (NEW text)" in sent and "old text" not in sent
    res = run_rlm("index", str(repo), "--json")
    doc = json.loads(res.stdout)
    assert (doc["from_cache"], doc["reindexed"]) == (2, 0)  # the new text was cached by the ask
    # A file replaced by another (a rename over it: a new inode) with the same size and mtime.
    replacement = repo / "conf.new"
    replacement.write_text("retries = 5 (RENAMED)\n")
    os.utime(replacement, ns=(old, old))
    os.replace(replacement, target)
    res = run_rlm("index", str(repo), "--json")
    doc = json.loads(res.stdout)
    assert doc["reindexed"] == 1, doc
