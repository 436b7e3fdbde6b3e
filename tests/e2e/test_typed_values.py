"""A typed answer that is not of its type never exits 0, and answers and ``--json`` documents are
RFC 8259 whatever the answer holds (issue 47, items 5 and the answer's part of 2): ``maybe`` for
``--answer-type bool`` exits 9 with nothing on stdout; ``NaN``/``Infinity`` are not JSON; a lone
surrogate is kept (escaped) in JSON and replaced in plain text; 50,000 nested ``[`` is no crash."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rlm_cli.errors import ExitCode
from rlm_cli.loop.typed import AnswerSpec, parse_value
from rlm_cli.output.answer import json_text
from rlm_cli.output.documents import answer_text
from tests.support.cli import model_flags, run_rlm, two_file_repo
from tests.support.fake_llm import FakeLLM, repl

NOT_OF_TYPE = int(ExitCode.NOT_OF_TYPE)


def strict_json(text: str) -> object:
    """``text`` parsed as RFC 8259 JSON: no NaN/Infinity, valid UTF-8 (a lone surrogate cannot be
    encoded, so it must be an escape)."""
    text.encode("utf-8")  # raises on a raw lone surrogate

    def no_constant(name: str) -> object:
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=no_constant)


@pytest.mark.parametrize(("kind", "answer", "problem"), [
    ("bool", "maybe", "not True or False"),
    ("json", '{"a": NaN}', "not JSON"),
    ("json", "[Infinity]", "not JSON"),
    ("number", "1e999", "not a finite number"),
    ("json", "[" * 50_000 + "]" * 50_000, "nested"),
    ("list", "[[[[" * 30 + "]]]]" * 30, "nested"),
])
def test_a_value_not_of_its_type_has_no_value(kind: str, answer: str, problem: str) -> None:
    value = parse_value(answer, AnswerSpec(kind))
    assert not value.ok and value.value is None and problem in value.problem


def test_the_plain_answer_of_a_value_not_of_its_type_is_nothing() -> None:
    doc = {"answer": "maybe", "answer_type": "bool", "value": None, "status": "final", "sources": []}
    assert answer_text(doc) == answer_text(doc, cite=True) == ""  # no Sources: list under nothing either
    assert answer_text({**doc, "value": True}) == "true\n"
    assert answer_text({"answer": "maybe", "status": "final"}) == "maybe\n"  # a text question: as always


def test_json_documents_are_rfc_8259_whatever_they_hold() -> None:
    doc = {"answer": "a\ud800b", "value": ["\udfff", {"k\ud83d": 1}], "cost": math.nan, "big": math.inf}
    back = strict_json(json_text(doc))
    assert back == {"answer": "a\ud800b", "value": ["\udfff", {"k\ud83d": 1}], "cost": None, "big": None}
    assert "é中" in json_text({"a": "é中"})  # other characters stay as they are


def test_a_value_not_of_its_type_exits_9_with_nothing_on_stdout(tmp_path: Path, llm: FakeLLM) -> None:
    root = two_file_repo(tmp_path)
    llm.script("root", repl("FINAL('maybe')"), repl("FINAL('maybe')"))
    plain = run_rlm("ask", str(root), "Is foo defined?", "--answer-type", "bool", *model_flags(llm), "--policy",
                    "paper")
    assert plain.code == NOT_OF_TYPE, plain.stderr
    assert plain.stdout == ""  # never the untyped text
    assert "not a well-typed bool" in plain.stderr and "Traceback" not in plain.stderr


def test_json_answers_are_rfc_8259_and_a_lone_surrogate_or_deep_nesting_is_no_crash(tmp_path: Path,
                                                                                      llm: FakeLLM) -> None:
    """One run, four ``json`` questions: ``[Infinity]`` (not JSON: no value), a lone surrogate
    (kept, escaped), 50,000 nested ``[`` (no value, said why), a value; the worst code is 9."""
    root = two_file_repo(tmp_path)
    code = {"inf": "FINAL('[Infinity]')", "lone": "data = ['\\ud800', 'ok']\nFINAL_VAR('data')",
            "deep": "FINAL('[' * 50000 + ']' * 50000)", "ok": "data = {'n': len(files)}\nFINAL_VAR('data')"}
    for name in code:  # the answer_type check sends an ill-typed answer back once: it comes again
        llm.script("root", *[repl(code[name])] * (2 if name in ("inf", "deep") else 1))
    questions = [a for name in code for a in ("--question", f"Give the data ({name}).")]
    res = run_rlm("ask", str(root), *questions, "--answer-type", "json", *model_flags(llm), "--json",
                  "--policy", "paper")
    assert res.code == NOT_OF_TYPE, res.stderr
    docs = [strict_json(line) for line in res.stdout.splitlines()]
    values = {d["question"][len("Give the data ("):-2]: (d["value"], d.get("value_problem", "")) for d in docs}  # type: ignore[index]
    assert values["inf"][0] is None and "not JSON" in values["inf"][1]
    assert values["lone"] == (["\ud800", "ok"], "")
    assert values["deep"][0] is None and "nested" in values["deep"][1]
    assert values["ok"] == ({"n": 2}, "")
    assert "Traceback" not in res.stderr


def test_a_lone_surrogate_in_a_plain_answer_is_replaced(tmp_path: Path, llm: FakeLLM) -> None:
    root = two_file_repo(tmp_path)
    llm.script("root", repl("FINAL('\\ud800 is the name')"))
    text = run_rlm("ask", str(root), "What is the name?", *model_flags(llm), "--policy", "paper")
    assert text.code == 0 and text.stdout == "\ufffd is the name\n", text.stderr
