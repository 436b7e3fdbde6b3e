"""``.answer`` of a partial run (issue 23): after a budget stop or the iteration limit it holds
only what the model said or its code computed; rlm's notes for the model (tracebacks, hints,
a failed sub-call's ``Error: ...`` string) stay in the trajectory. Through the ``rlm`` command."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import model_flags, run_rlm, two_file_repo
from tests.support.fake_llm import FakeLLM, repl

#: Turn 1: computes a figure, then fails (rlm answers with a traceback and a hint for the model).
FAILING_BLOCK = repl("x = 41 + 1\nprint('computed', x)\nundefined_name + 1")
FOR_THE_MODEL = ("Traceback", "NameError", "hint:", "[note:", "Error: budget exceeded", "Continue.",
                 "iterations left", "FINAL(")


def _trace_text(doc: dict) -> str:
    return Path(doc["trace"]).read_text()


def test_a_budget_stop_answers_with_what_the_code_computed_only(tmp_path: Path, llm: FakeLLM) -> None:
    llm.default("sub", "the sub-model says hi")
    llm.script("root", FAILING_BLOCK, repl("a = llm_query('one')\nb = llm_query('two')\nprint(a, b)"))
    res = run_rlm("ask", str(two_file_repo(tmp_path)), "q?", *model_flags(llm), "--json", "--max-sub-calls", "1",
                  "--no-leads", "--no-llm-cache")
    assert res.code == 6, res.stderr
    doc = json.loads(res.stdout)
    assert doc["status"] == "budget_exceeded" and doc["partial"] is True and doc["budget"] == "sub_calls"
    answer = doc["answer"]
    assert "the sub-model says hi" in answer and "[a sub-call failed]" in answer
    for note in FOR_THE_MODEL:
        assert note not in answer, (note, answer)
    assert "budget exceeded" in _trace_text(doc)  # the note itself is kept in the trajectory


def test_the_iteration_limit_answers_with_what_the_model_said_and_computed(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", FAILING_BLOCK)
    llm.default("root", "Still reading the files; x looked like the count.")
    res = run_rlm("ask", str(two_file_repo(tmp_path)), "q?", *model_flags(llm), "--json", "--max-iterations", "1",
                  "--no-leads", "--no-llm-cache")
    assert res.code == 5, res.stderr
    doc = json.loads(res.stdout)
    assert doc["status"] == "max_iterations" and doc["partial"] is True
    answer = doc["answer"]
    assert "Still reading the files" in answer or "computed 42" in answer, answer
    for note in FOR_THE_MODEL:
        assert note not in answer, (note, answer)
    trace = _trace_text(doc)
    assert "Traceback" in trace and "NameError" in trace  # what the model was shown stays there


def test_a_partial_plain_answer_on_stdout_is_clean_too(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", FAILING_BLOCK, repl("print('partial figure', x * 2)\nundefined_again"))
    llm.default("root", "```repl\nprint(x)\n```")  # the last request (for the best answer): code only
    res = run_rlm("ask", str(two_file_repo(tmp_path)), "q?", *model_flags(llm), "--max-iterations", "2",
                  "--no-leads", "--no-llm-cache")
    assert res.code == 5, res.stderr
    assert res.stdout.strip()
    for note in FOR_THE_MODEL:
        assert note not in res.stdout, (note, res.stdout)
