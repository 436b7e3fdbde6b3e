"""Typed answers through the ``rlm`` command against the scripted server: the model is told the
type, a wrong-typed answer goes back once, ``--json`` carries ``value`` (valid by the schema),
``-q``/``--questions`` take a type per question, and ``text`` is as it always was."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from jsonschema import Draft202012Validator

from rlm_cli.loop.typed import INSTRUCTIONS
from tests.support.cli import model_flags, run_rlm, two_file_repo
from tests.support.fake_llm import FakeLLM, first_prompt, last_user, repl


def _validator() -> Draft202012Validator:
    schema = json.loads((resources.files("rlm_cli") / "schemas" / "ask-result.v1.json").read_text("utf-8"))
    return Draft202012Validator(schema)


def test_a_bool_question_is_told_its_type_and_a_wrong_typed_answer_goes_back_once(tmp_path: Path,
                                                                                   llm: FakeLLM) -> None:
    root = two_file_repo(tmp_path)
    llm.script("root", repl("print(grep('def foo'))"), repl("FINAL('Yes, it is defined in a.py')"),
               repl("FINAL(True)"))
    res = run_rlm("ask", str(root), "Is foo defined?", "--answer-type", "bool", *model_flags(llm), "--json")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert (doc["answer"], doc["answer_type"], doc["value"]) == ("True", "bool", True)
    assert not list(_validator().iter_errors(doc))
    first = llm.chat_requests("root")[0]
    assert f"Question: Is foo defined?\n\n{INSTRUCTIONS['bool']}" in first_prompt(first)
    note = last_user(llm.chat_requests("root")[2])
    assert "not a well-typed bool: it is not True or False" in note
    events = [json.loads(line) for line in Path(doc["trace"]).read_text().splitlines()]
    typed = [e for e in events if e["type"] == "typed"]
    assert typed == [{**typed[0], "answer_type": "bool", "ok": True, "value": True}]
    assert [e["verdict"] for e in events if e["type"] == "check" and e["check"] == "answer_type"] == [
        "send_back", "accept"]
    # plain output: the value as a script reads it
    llm.script("root", repl("print(grep('def foo'))"), repl("FINAL(len(grep('def ')))"))
    res = run_rlm("ask", str(root), "How many functions?", "--answer-type", "int", *model_flags(llm))
    assert res.code == 0 and res.stdout == "1\n", res.stderr


def test_text_is_as_it_always_was(tmp_path: Path, llm: FakeLLM) -> None:
    root = two_file_repo(tmp_path)
    for extra in ([], ["--answer-type", "text"]):
        llm.script("root", repl("print(grep('def foo'))"), repl("FINAL('in a.py')"))
        res = run_rlm("ask", str(root), "Where is foo?", *model_flags(llm), "--json", *extra)
        doc = json.loads(res.stdout)
        assert res.code == 0 and doc["answer"] == "in a.py"
        assert not {"answer_type", "value", "value_problem", "dropped"} & set(doc)
        assert "Answer type" not in first_prompt(llm.chat_requests("root")[-1])
        assert not [e for e in map(json.loads, Path(doc["trace"]).read_text().splitlines())
                    if e["type"] == "typed" or e.get("check") == "answer_type"]


def test_locations_that_do_not_exist_are_dropped_and_said(tmp_path: Path, llm: FakeLLM) -> None:
    root = two_file_repo(tmp_path)
    llm.script("root", repl("print(grep('return'))"),
               repl("locs = ['a.py:2', 'gone.py:3', 'b.py:9', 'a.py:1-2']\nFINAL_VAR('locs')"))
    res = run_rlm("ask", str(root), "Where does code return?", "--answer-type", "locations", *model_flags(llm))
    assert res.code == 0, res.stderr
    assert res.stdout == "a.py:2\na.py:1-2\n"
    assert "2 location(s) not in the corpus dropped from the answer: gone.py:3, b.py:9" in res.stderr


def test_an_answer_still_wrong_after_the_note_has_a_null_value(tmp_path: Path, llm: FakeLLM) -> None:
    root = two_file_repo(tmp_path)
    llm.script("root", repl("print(grep('def'))"), repl("FINAL('one or two')"), repl("FINAL('one or two')"))
    res = run_rlm("ask", str(root), "How many?", "--answer-type", "int", *model_flags(llm), "--json")
    doc = json.loads(res.stdout)
    # not of its type: exit 9 (ExitCode.NOT_OF_TYPE), the document says why
    assert res.code == 9 and doc["value"] is None and doc["value_problem"] == "it is not a whole number"
    assert not list(_validator().iter_errors(doc))
    assert "not a well-typed int (it is not a whole number): its value is null" in res.stderr


def test_direct_mode_sends_a_wrong_typed_reply_back_once(tmp_path: Path, llm: FakeLLM) -> None:
    root = two_file_repo(tmp_path)
    llm.script("root", "foo returns 42, so probably yes.", "FINAL(True)")
    res = run_rlm("ask", str(root), "Does foo return 42?", "--answer-type", "bool", "--mode", "direct",
                  *model_flags(llm), "--json")
    doc = json.loads(res.stdout)
    assert res.code == 0 and doc["mode"] == "direct" and doc["value"] is True and doc["iterations"] == 2
    second = llm.chat_requests("root")[1]["messages"]
    assert second[-2] == {"role": "assistant", "content": "foo returns 42, so probably yes."}
    assert "not a well-typed bool" in second[-1]["content"]


def test_questions_file_types_per_question_and_usage_errors(tmp_path: Path, llm: FakeLLM) -> None:
    root = two_file_repo(tmp_path)
    qfile = tmp_path / "q.jsonl"
    qfile.write_text('{"id": "n", "question": "How many files?", "type": "int"}\n'
                     '{"id": "names", "question": "Which files?", "type": "list"}\n'
                     '{"id": "free", "question": "Describe them"}\n')
    llm.script("root", repl("print(len(files))"), repl("FINAL(len(files))"),
               repl("names = sorted(f['path'] for f in files)\nprint(names)"), repl("FINAL_VAR('names')"),
               repl("print(files)"), repl("FINAL('two small files')"))
    res = run_rlm("ask", str(root), "--questions", str(qfile), *model_flags(llm), "--json")
    assert res.code == 0, res.stderr
    docs = {d["id"]: d for d in map(json.loads, res.stdout.splitlines())}
    assert (docs["n"]["value"], docs["names"]["value"]) == (2, ["a.py", "b.py"])
    assert "value" not in docs["free"] and docs["free"]["answer"] == "two small files"
    assert all(not list(_validator().iter_errors(d)) for d in docs.values())
    qfile.write_text('{"id": 1, "question": "a?", "type": "boolean"}\n')
    res = run_rlm("ask", str(root), "--questions", str(qfile), *model_flags(llm))
    assert res.code == 2 and 'line 1: "type" must be one of text, bool' in res.stderr
    res = run_rlm("ask", str(root), "q?", "--answer-type", "yesno", *model_flags(llm))
    assert res.code == 2 and "--answer-type: unknown answer type 'yesno'" in res.stderr and not res.stdout
