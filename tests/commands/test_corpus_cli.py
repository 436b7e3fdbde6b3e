"""``rlm index``, ``rlm stats``, ``rlm cache info/clear`` (in-process through ``cli.main``) and
``rlm ask`` end to end with a scripted root model that greps and cites ``path:line``."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from rlm_cli.commands import app as cli
from rlm_cli.config import cache_dir
from tests.support.cli import model_flags, run_rlm
from tests.support.fake_llm import FakeLLM, last_user, repl


def make_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return root


def rlm(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``rlm ARGS`` in this process through ``cli.main`` (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["rlm", *args])
    with pytest.raises(SystemExit) as info:
        cli.main()
    out = capsys.readouterr()
    return int(info.value.code or 0), out.out, out.err


REPO = {
    "src/server.py": "import socket\n\n\ndef serve(port=8080):\n    # the retry policy lives here\n"
                     "    retries = 5\n    return retries\n",
    "src/client.py": "def connect():\n    return None\n",
    "docs/README.md": "# Server\n\nSee serve().\n",
    "logo.png": b"\x89PNG\r\n\x1a\n\x00\x00",
    ".env": "SECRET=1\n",
}


def test_index_builds_then_reuses_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    repo = make_tree(tmp_path / "repo", REPO)
    code, out, err = rlm(monkeypatch, capsys, "index", str(repo))
    assert code == 0 and out == ""
    assert re.search(r"loaded 3 files, \d+ bytes, \d+ tokens, 3 chunks; skipped 1 binary, 1 hidden in [\d.]+ s; "
                     r"cache: ", err)
    code, out, err = rlm(monkeypatch, capsys, "index", str(repo), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["from_cache"] == 3 and doc["reindexed"] == 0
    assert doc["skipped"] == {"binary": 1, "hidden": 1} and doc["files"] == 3
    assert doc["bundle"].startswith(str(cache_dir() / "index"))
    assert "(all from cache)" in err


def test_stats_json_and_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    repo = make_tree(tmp_path / "repo", REPO)
    code, out, _ = rlm(monkeypatch, capsys, "stats", str(repo), "--json", "--top", "2")
    doc = json.loads(out)
    assert code == 0
    assert [r["type"] for r in doc["by_type"]] == [".py", ".md"]
    assert doc["by_type"][0]["files"] == 2 and doc["by_type"][0]["tokens"] > doc["by_type"][1]["tokens"]
    assert [r["path"] for r in doc["largest"]] == ["src/server.py", "src/client.py"]  # 7 tokens vs 6 for README
    assert doc["tokens"] == sum(r["tokens"] for r in doc["by_type"])
    code, out, err = rlm(monkeypatch, capsys, "stats", str(repo), "--include", "*.py")
    assert code == 0
    assert "by file type" in out and "Largest files" in out and "src/server.py" in out
    assert "docs/README.md" not in out
    assert "loaded 2 files" in err


def test_stats_says_what_context_takes_in_the_repl_and_which_files_widen_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    repo = make_tree(tmp_path / "repo", {**REPO, "docs/emoji.md": "# Launch 🚀\n", "docs/ru.md": "# Сервер\n"})
    code, out, _ = rlm(monkeypatch, capsys, "stats", str(repo), "--json")
    ctx = json.loads(out)["context"]
    assert code == 0
    assert ctx["bytes_per_char"] == 4 and ctx["memory_bytes"] == ctx["chars"] * 4 + 80
    assert ctx["wide_files_count"] == 2 and ctx["astral_files_count"] == 1
    assert ctx["wide_files"] == [{"path": "docs/emoji.md", "bytes_per_char": 4, "chars": 11},
                                 {"path": "docs/ru.md", "bytes_per_char": 2, "chars": 9}]
    code, out, err = rlm(monkeypatch, capsys, "stats", str(repo), "--top", "1")
    out = " ".join(out.split())  # rich wraps a table title to the table's width
    assert "context in the REPL worker" in out and "Files with characters beyond U+00FF (1 more: raise --top)" in out
    assert "docs/emoji.md" in out and "docs/ru.md" not in out
    assert ("2 file(s) hold characters beyond U+00FF, 1 of them beyond U+FFFF, so all of context takes 4 bytes "
            "per character") in err
    code, out, err = rlm(monkeypatch, capsys, "stats", str(repo), "--top", "0")
    assert "2 file(s) hold characters beyond U+00FF" in err and "Files with characters beyond" not in out
    code, out, err = rlm(monkeypatch, capsys, "stats", str(repo / "missing"), "--json")
    assert code == 2 and json.loads(out)["exit_code"] == 2 and "no such file" in json.loads(out)["error"]
    code, out, err = rlm(monkeypatch, capsys, "stats", str(repo), "--exclude", "emoji.md", "--json")
    ctx = json.loads(out)["context"]
    assert ctx["bytes_per_char"] == 2 and [r["path"] for r in ctx["wide_files"]] == ["docs/ru.md"]
    code, out, err = rlm(monkeypatch, capsys, "stats", str(repo), "--exclude", "*.md")
    assert "Files with characters beyond" not in out and "characters beyond" not in err


def test_cache_info_and_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    repo = make_tree(tmp_path / "repo", REPO)
    rlm(monkeypatch, capsys, "index", str(repo))
    make_tree(cache_dir(), {"llm/ab/cd.json": "{}", "keep-me.txt": "not ours"})
    code, out, _ = rlm(monkeypatch, capsys, "cache", "info", "--json")
    info = json.loads(out)
    assert code == 0 and info["path"] == str(cache_dir())
    sizes = {c["name"]: c for c in info["caches"]}
    assert sizes["index"]["files"] == 2 and sizes["llm"]["files"] == 1
    [bundle] = info["bundles"]
    assert bundle["roots"] == [str(repo)] and bundle["files"] == 3 and bundle["tokens"] > 0
    code, out, err = rlm(monkeypatch, capsys, "cache", "clear", "index")
    assert code == 0 and "removed index/ (2 files" in err
    assert not (cache_dir() / "index").exists() and (cache_dir() / "llm").exists()
    code, out, err = rlm(monkeypatch, capsys, "cache", "clear")
    assert code == 0 and "llm/ (1 files" in err
    assert sorted(p.name for p in cache_dir().iterdir()) == ["keep-me.txt"]  # unknown files are left alone
    code, _, err = rlm(monkeypatch, capsys, "cache", "clear", "bogus")
    assert code == 2 and "unknown cache 'bogus'" in err


def test_empty_corpus_and_stdin_are_usage_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    repo = make_tree(tmp_path / "repo", {"a.bin": b"\x00\x01\x02", ".hidden": "x"})
    code, out, err = rlm(monkeypatch, capsys, "index", str(repo))
    assert code == 2 and out == ""
    assert "the corpus is empty: every file was skipped (1 hidden, 1 binary)" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2
    code, _, err = rlm(monkeypatch, capsys, "index", "-")
    assert code == 2 and "stdin" in err
    code, _, err = rlm(monkeypatch, capsys, "stats", str(repo / "nope"))
    assert code == 2 and "no such file or directory" in err


def test_ask_end_to_end_cites_path_and_line_found_with_grep_and_read_file(tmp_path: Path, llm: FakeLLM,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    repo = make_tree(tmp_path / "repo", REPO)
    rlm(monkeypatch, capsys, "index", str(repo))  # warm the cache; ask must reuse it
    llm.script(
        "root",
        repl("hits = grep(r'retry policy')\nprint(hits)"),
        repl("h = hits[0]\nprint(read_file(h['file'], h['line'], h['line'] + 1))"),
        repl("FINAL(f\"The retry policy is at {h['file']}:{h['line']} (retries = 5).\")"),
    )
    res = run_rlm("ask", str(repo), "Where is the retry policy?", *model_flags(llm), "--mode", "rlm")
    assert res.code == 0, res.stderr
    assert res.stdout == "The retry policy is at src/server.py:5 (retries = 5).\n"
    assert "(all from cache)" in res.stderr
    seen = [last_user(r) for r in llm.chat_requests("root")]
    assert "{'file': 'src/server.py', 'line': 5, 'text': '    # the retry policy lives here'}" in seen[1]
    assert "5:     # the retry policy lives here\n6:     retries = 5" in seen[2]


def test_ask_without_cache_and_with_chunk_tokens(tmp_path: Path, llm: FakeLLM) -> None:
    lines = "".join(f"def handler_{i}(event):\n    return {i}\n\n\n" for i in range(200))
    repo = make_tree(tmp_path / "repo", {"handlers.py": lines})
    llm.script("root", repl("print(len(chunks), chunks[1]['start_line'])"),
               repl("FINAL(str(grep('handler_150')[0]['line']))"))
    res = run_rlm("ask", str(repo), "Where is handler 150?", *model_flags(llm), "--mode", "rlm", "--no-cache",
                  "--chunk-tokens", "100", "--json")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["answer"] == str(150 * 4 + 1)
    assert doc["corpus"]["chunks"] > 5
    assert not (cache_dir() / "index").exists()  # --no-cache wrote nothing to the cache
    assert re.search(r"^\d+ \d+$", last_user(llm.chat_requests("root")[1]), re.M)


def test_index_and_stats_count_files_by_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import gzip

    root = make_tree(tmp_path / "mixed", {"t.csv": "a,b\n1,2\n", "r.jsonl": '{"x": 1}\n', "plain.txt": "hi\n",
                                          "app.log.gz": gzip.compress(b"boot ok\n")})
    code, out, err = rlm(monkeypatch, capsys, "index", str(root), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["kinds"] == {"csv": 1, "gz": 1, "jsonl": 1} and "read as 1 csv, 1 gz, 1 jsonl" in doc["summary"]
    code, out, err = rlm(monkeypatch, capsys, "stats", str(root), "--json")
    assert code == 0 and json.loads(out)["kinds"] == {"csv": 1, "gz": 1, "jsonl": 1}


def test_ask_names_skipped_files_with_verbose_and_in_json(tmp_path: Path, llm: FakeLLM) -> None:
    root = make_tree(tmp_path / "repo", {
        "a_ok.txt": "alpha\n", "b_big.log": "x" * 3000, "c_logo.png": b"\x89PNG\r\n\x1a\n\x00\x00", ".env": "S=1\n",
        "d_build/out.txt": "built\n", ".gitignore": "d_build/\n", "e_empty.txt": "",
        **{f"z_blob_{i:03d}.bin": b"\x00\x01" for i in range(230)}})
    llm.script("root", repl("print(len(context))"), repl("FINAL('done')"))
    res = run_rlm("ask", str(root), "q?", *model_flags(llm), "--max-file-size", "1K", "-v", "--json")
    assert res.code == 0, res.stderr
    corpus = json.loads(res.stdout)["corpus"]
    assert corpus["files"] == 1 and corpus["skipped_count"] == 236
    named = {(row["path"], row["reason"]) for row in corpus["skipped"]}
    assert {("b_big.log", "too large"), ("c_logo.png", "binary"), (".env", "hidden"), (".gitignore", "hidden"),
            ("d_build/", "ignored"), ("e_empty.txt", "empty"), ("z_blob_000.bin", "binary")} <= named
    assert len(corpus["skipped"]) == 200  # named up to a cap; skipped_count counts them all
    for line in ("skipped b_big.log (too large)", "skipped c_logo.png (binary)", "skipped d_build/ (ignored)",
                 "skipped .env (hidden)", "... and 36 more skipped"):
        assert line in res.stderr, line
    quiet = run_rlm("ask", str(root), "q?", *model_flags(llm), "--max-file-size", "1K")  # cached now, no -v
    assert "skipped c_logo.png" not in quiet.stderr and "binary" in quiet.stderr  # counted, not named


def test_a_file_with_stray_latin_1_bytes_keeps_them_as_latin_1(tmp_path: Path, llm: FakeLLM) -> None:
    root = make_tree(tmp_path / "repo", {
        "people.txt": "naïve 漢字 line\n".encode() + "name: Müller\n".encode("latin-1"),
        "legacy.txt": "café crème\n".encode("latin-1")})
    llm.script("root", repl("print(grep('M.ller'), grep('caf'))"), repl("FINAL('done')"))
    res = run_rlm("ask", str(root), "q?", *model_flags(llm))
    assert res.code == 0, res.stderr
    shown = last_user(llm.chat_requests("root")[1])
    assert "name: Müller" in shown and "café crème" in shown and "\ufffd" not in shown
    assert "decoded 1 latin-1, 1 utf-8+latin-1" in res.stderr
