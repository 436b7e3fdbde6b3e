"""Several questions in one ``rlm ask`` run (``-q``, ``--questions``, ``--jobs``), through the real
command against the scripted model server."""

from __future__ import annotations

import json
import threading
from importlib import resources
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from rlm_cli.app.batch import Question, read_questions
from rlm_cli.errors import UsageError, worst_exit_code
from tests.support.cli import model_flags, run_rlm, two_file_repo
from tests.support.fake_llm import FakeLLM, Reply, first_prompt, last_user, repl, turn


def _validator() -> Draft202012Validator:
    schema = json.loads((resources.files("rlm_cli") / "schemas" / "ask-result.v1.json").read_text("utf-8"))
    return Draft202012Validator(schema)


def test_json_lines_one_per_question_with_own_trajectories_and_the_worst_exit_code(
        tmp_path: Path, llm: FakeLLM) -> None:
    root = two_file_repo(tmp_path)
    llm.script("root",
               repl("hits = grep('def foo')\nprint(hits)"), repl("FINAL(hits[0]['file'])"),   # 1: answered
               repl("print(len(hits))"), Reply(status=400),                                  # 2: fails mid-way
               repl("print(hits[0]['line'])"), "No FINAL yet, still looking.",                 # 3: iteration limit
               "The best I have: line 1.",
               repl("print(sorted(f['path'] for f in files))"), repl("FINAL('a.py and b.py')"))  # 4: answered
    res = run_rlm("ask", str(root), "--question", "where is foo?", "--question", "how many hits?", "--question", "which line?",
                  "--question", "which files?", *model_flags(llm), "--json", "--max-iterations", "2")
    assert res.code == 4, res.stderr  # the worst of 0, 4, 5, 0: the provider failure
    docs = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(d["id"], d["question"], d["status"]) for d in docs] == [
        (1, "where is foo?", "final"), (2, "how many hits?", "error"), (3, "which line?", "max_iterations"),
        (4, "which files?", "final")]
    assert docs[0]["answer"] == "a.py" and docs[3]["answer"] == "a.py and b.py"
    assert docs[1]["exit_code"] == 4 and "400" in docs[1]["error"] and docs[1]["answer"] is None
    assert docs[2]["partial"] is True and docs[2]["answer"] == "The best I have: line 1."
    validator = _validator()
    for d in docs:
        assert not list(validator.iter_errors(d)), d
    # every question has its own trajectory, its own usage, and the REPL carried `hits` over
    traces = [Path(d["trace"]) for d in docs]
    assert len(set(traces)) == 4 and all(t.is_file() for t in traces)
    headers = [json.loads(t.read_text().splitlines()[0]) for t in traces]
    assert [(h["turn"], h["id"], h["question"]) for h in headers] == [
        (1, 1, "where is foo?"), (2, 2, "how many hits?"), (3, 3, "which line?"), (4, 4, "which files?")]
    assert len({h["session"] for h in headers}) == 1
    summaries = [json.loads(t.read_text().splitlines()[-1]) for t in traces]
    assert [s["status"] for s in summaries] == ["final", "error", "max_iterations", "final"]
    assert docs[0]["usage"]["root"]["calls"] == 2 and docs[3]["usage"]["root"]["calls"] == 2
    second = llm.chat_requests("root")[2]
    assert "hits: list len=1" in first_prompt(second)  # told which variables exist
    assert "1" in last_user(llm.chat_requests("root")[3])  # print(len(hits)) worked: `hits` was kept
    assert "4 questions: 2 answered, 1 partial, 1 failed; exit code 4 (the worst)" in res.stderr


def test_questions_file_jsonl_plain_output_and_one_load(tmp_path: Path, llm: FakeLLM) -> None:
    root = two_file_repo(tmp_path)
    qfile = tmp_path / "q.jsonl"
    qfile.write_text('{"id": "defs", "question": "where is foo?"}\n\n{"id": "ones", "question": "where is x?"}\n')
    llm.script("root", repl("print(grep('def foo'))"), repl("FINAL('a.py')"),
               repl("print(grep('x = '))"), repl("FINAL('b.py')"))
    res = run_rlm("ask", str(root), "--questions", str(qfile), *model_flags(llm))
    assert res.code == 0, res.stderr
    assert res.stdout == "## [defs] where is foo?\n\na.py\n\n## [ones] where is x?\n\nb.py\n"
    assert res.stderr.count("corpus ") == 1  # loaded once
    assert "2 questions: 2 answered, 0 partial, 0 failed\n" in res.stderr


def test_jobs_run_questions_at_once_in_their_own_workers(tmp_path: Path, llm: FakeLLM) -> None:
    root = two_file_repo(tmp_path)
    both_started = threading.Barrier(2, timeout=60)  # one after another would never get past this

    def answer(req: dict) -> str:  # each question's loop: look for the others' variables, make its own
        asked = first_prompt(req)
        mine = next(n for n in ("first", "second", "third") if f"Question: {n}" in asked)
        if turn(req) == 0:
            if mine != "third":  # the third runs after one of them, in the same worker
                both_started.wait()
            return repl(f"print(sorted(k for k in globals() if k.startswith('seen_')))\nseen_{mine} = 1")
        return repl(f"FINAL('{mine}')")

    llm.default("root", answer)
    res = run_rlm("ask", str(root), "--question", "first", "--question", "second", "--question", "third", "--jobs", "2",
                  *model_flags(llm), "--json")
    assert res.code == 0, res.stderr
    docs = sorted((json.loads(line) for line in res.stdout.splitlines()), key=lambda d: d["id"])
    assert [(d["id"], d["answer"], d["status"]) for d in docs] == [
        (1, "first", "final"), (2, "second", "final"), (3, "third", "final")]
    outputs = [last_user(r) for r in llm.chat_requests("root") if turn(r) > 0]
    assert len(outputs) == 3 and all(o.startswith("Output:\n[]") for o in outputs)  # none saw another's


def test_list_usage_errors_run_nothing(tmp_path: Path, llm: FakeLLM) -> None:
    root = two_file_repo(tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "question": "a"}\n{"id": 1, "question": "b"}\n')
    res = run_rlm("ask", str(root), "--questions", str(bad), *model_flags(llm))
    assert res.code == 2 and "two questions have the id 1" in res.stderr and not res.stdout
    bad.write_text('{"id": 1, "question": "a"}\nnot json\n')
    res = run_rlm("ask", str(root), "--questions", str(bad), *model_flags(llm), "--json")
    assert res.code == 2 and "line 2: not JSON" in res.stderr
    assert json.loads(res.stdout)["status"] == "error"
    bad.write_text('{"id": 1, "question": "a"}\n{"id": NaN, "question": "b"}\n')  # JSON as Python reads it
    res = run_rlm("ask", str(root), "--questions", str(bad), *model_flags(llm))  # before: written as a null id
    assert res.code == 2 and 'line 2: "id" must be a string or a finite number' in res.stderr, res.stderr
    res = run_rlm("ask", str(root), "--question", "  ", *model_flags(llm))
    assert res.code == 2 and "empty" in res.stderr
    assert not llm.requests


def test_question_makes_every_argument_a_path_and_q_is_quiet(tmp_path: Path, llm: FakeLLM) -> None:
    root = two_file_repo(tmp_path)
    other = tmp_path / "more"
    other.mkdir()
    (other / "c.txt").write_text("hello\n")
    llm.script("root", repl("print(len(files))"), repl("FINAL(str(len(files)))"))
    res = run_rlm("ask", str(root), str(other), "--question", "how many files?", "-q", *model_flags(llm))
    assert res.code == 0 and res.stdout == "## [1] how many files?\n\n3\n"  # every argument was a PATH
    assert res.stderr == ""
    res = run_rlm("ask", str(root), "question?", "--question")
    assert res.code == 2 and "--question" in res.stderr


def test_worst_exit_code_ranks_severity() -> None:
    assert worst_exit_code([]) == 0
    assert worst_exit_code([0, 5, 0]) == 5
    assert worst_exit_code([5, 6]) == 6
    assert worst_exit_code([6, 2]) == 2
    assert worst_exit_code([2, 4, 6]) == 4
    assert worst_exit_code([4, 1, 0]) == 1
    assert worst_exit_code([0, 7]) == 7 and worst_exit_code([7, 5]) == 5  # unsupported: just above answered
    assert worst_exit_code([7, 9]) == 9 and worst_exit_code([9, 5]) == 5  # not of its type: above unsupported
    assert worst_exit_code([6, 8]) == 8 and worst_exit_code([8, 2]) == 2  # an audit check failed: above a budget
    assert worst_exit_code([2, 3]) == 3 and worst_exit_code([3, 4]) == 4  # no model: never reported as 1
    assert worst_exit_code([0, 130]) == 1  # a code outside the ranking counts as an internal error


def test_read_questions_formats(tmp_path: Path) -> None:
    plain = tmp_path / "q.txt"
    plain.write_text("first\n\n  second  \n")
    assert read_questions(["zero"], str(plain), stdin_is_corpus=False) == [
        Question(1, "zero"), Question(2, "first"), Question(3, "second")]
    jsonl = tmp_path / "q.jsonl"
    jsonl.write_text('{"question": "no id"}\n{"id": "b", "question": "with id"}\n')
    assert read_questions([], str(jsonl), stdin_is_corpus=False) == [Question(1, "no id"), Question("b", "with id")]
    with pytest.raises(UsageError, match="cannot both"):
        read_questions([], "-", stdin_is_corpus=True)
    with pytest.raises(UsageError, match="no question"):
        read_questions([], None, stdin_is_corpus=False)
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n")
    with pytest.raises(UsageError, match="no questions in it") as err:
        read_questions([], str(blank), stdin_is_corpus=False)
    assert "one question per line" in str(err.value.hint)
