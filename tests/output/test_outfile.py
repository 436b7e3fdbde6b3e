"""``--output FILE``: the answer or the document written atomically, nothing left on failure."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from rlm_cli.errors import UsageError
from rlm_cli.output.outfile import check_writable, write_atomic
from tests.support.cli import model_flags, run_rlm
from tests.support.fake_llm import FakeLLM, repl


def test_write_atomic_replaces_keeps_the_mode_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "answer.txt"
    write_atomic(target, "first\n")
    umask = os.umask(0)
    os.umask(umask)
    assert target.read_text() == "first\n" and stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
    os.chmod(target, 0o640)
    write_atomic(target, "second ✓\n")
    assert target.read_text(encoding="utf-8") == "second ✓\n" and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answer.txt"]


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    folder = tmp_path / "taken"
    (folder / "inside").mkdir(parents=True)  # a non-empty folder where the file should go: rename fails
    with pytest.raises(UsageError, match="cannot write"):
        write_atomic(folder, "text")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
    assert [p.name for p in folder.iterdir()] == ["inside"]


def test_check_writable(tmp_path: Path) -> None:
    assert check_writable(tmp_path / "x.json") == tmp_path / "x.json"
    with pytest.raises(UsageError, match="does not exist"):
        check_writable(tmp_path / "no" / "x.json")
    with pytest.raises(UsageError, match="is a folder"):
        check_writable(tmp_path)


def _corpus(tmp_path: Path) -> Path:
    root = tmp_path / "c"
    root.mkdir()
    (root / "a.txt").write_text("the answer is 42, written in a plain text file\n")
    return root


def test_output_writes_the_answer_or_the_document_instead_of_stdout(tmp_path: Path, llm: FakeLLM) -> None:
    corpus = _corpus(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    llm.script("root", repl("print(read_file('a.txt'))"), repl("FINAL('42 (a.txt:1)')"))
    res = run_rlm("ask", str(corpus), "q?", *model_flags(llm), "--output", str(out / "answer.txt"), "--cite")
    assert res.code == 0, res.stderr
    assert res.stdout == "" and f"wrote {out / 'answer.txt'}" in res.stderr
    assert (out / "answer.txt").read_text() == "42 (a.txt:1)\n\nSources:\n- a.txt:1\n"
    llm.script("root", repl("print(len(context))"), repl("FINAL('again')"))
    res = run_rlm("ask", str(corpus), "q2?", *model_flags(llm), "--json", "-o", str(out / "result.json"))
    assert res.code == 0, res.stderr
    assert res.stdout == "" and json.loads((out / "result.json").read_text())["answer"] == "again"
    assert sorted(p.name for p in out.iterdir()) == ["answer.txt", "result.json"]  # no temporary files


def test_output_is_checked_before_the_run_and_errors_go_there_under_json(tmp_path: Path, llm: FakeLLM) -> None:
    corpus = _corpus(tmp_path)
    res = run_rlm("ask", str(corpus), "q?", *model_flags(llm), "--output", str(tmp_path / "nope" / "a.txt"))
    assert res.code == 2 and "the folder" in res.stderr and "does not exist" in res.stderr
    assert llm.requests == [] and not (tmp_path / "nope").exists()
    res = run_rlm("ask", str(tmp_path / "missing"), "q?", *model_flags(llm), "--json", "-o", str(tmp_path / "r.json"))
    assert res.code == 2 and res.stdout == ""
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["status"] == "error" and doc["exit_code"] == 2


def test_output_reaches_every_delivery_a_list_an_estimate_and_a_partial_answer(tmp_path: Path, llm: FakeLLM) -> None:
    """The file of ``--output`` is carried to each delivery (issue 50): a list of questions (the
    answers under their headers, written at the end), ``--estimate`` and a run stopped early."""
    corpus = _corpus(tmp_path)
    llm.script("root", repl("print(len(context))"), repl("FINAL('one')"), repl("print(len(context))"),
               repl("FINAL('two')"))
    res = run_rlm("ask", str(corpus), "--question", "a?", "--question", "b?", *model_flags(llm),
                  "-o", str(tmp_path / "list.txt"))
    assert res.code == 0, res.stderr
    assert res.stdout == "" and f"wrote {tmp_path / 'list.txt'}" in res.stderr
    assert (tmp_path / "list.txt").read_text() == "## [1] a?\n\none\n\n## [2] b?\n\ntwo\n"
    res = run_rlm("ask", str(corpus), "q?", *model_flags(llm), "--estimate", "--json", "-o", str(tmp_path / "e.json"))
    assert res.code == 0, res.stderr
    assert res.stdout == "" and json.loads((tmp_path / "e.json").read_text())["schema"].startswith("estimate")
    llm.script("root", repl("x = 1"), "Perhaps 42.")
    res = run_rlm("ask", str(corpus), "q?", *model_flags(llm), "--max-iterations", "1", "--retries", "0", "--json",
                  "-o", str(tmp_path / "p.json"))
    assert res.code == 5 and res.stdout == "", res.stderr
    assert json.loads((tmp_path / "p.json").read_text())["status"] == "max_iterations"
