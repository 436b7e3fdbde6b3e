"""Typed answers (``rlm_cli.loop.typed``): the ``answer_type`` check stays silent on every
well-typed answer however it is written (the stay-silent table), fires on ill-typed ones, and the
typed value of each is what ``--json``'s ``value`` holds."""

from __future__ import annotations

from typing import Any

import pytest

from rlm_cli.answer_types import AnswerType
from rlm_cli.loop.checks import Candidate, Judge
from rlm_cli.loop.typed import (
    INSTRUCTIONS,
    AnswerSpec,
    TypeCheck,
    asked,
    check_type,
    location_parts,
    parse_value,
    settle,
    typed_checks,
)

LINES = {"json/decoder.py": 356, "json/encoder.py": 443, "email/parser.py": 131, "Lib/tool.py": 20,
         "pkg/tool.py": 9}


def spec(kind: str) -> AnswerSpec:
    return AnswerSpec(kind, LINES)


def cand(answer: str, *, written: bool = True) -> Candidate:
    return Candidate("Does it?", answer, written, "block", 2, 0, True, "", (), (), "")


#: (type, answer text as FINAL makes it, the value). Every one is well typed: the check must stay
#: silent. Texts are what models give: literals, computed values (FINAL(n), FINAL_VAR of a list,
#: which FINAL writes as JSON), Python reprs, words, bullets, fences, hit dicts from grep.
WELL_TYPED: list[tuple[str, str, Any]] = [
    ("bool", "True", True), ("bool", "False", False), ("bool", "false", False), ("bool", "Yes.", True),
    ("bool", "no", False), ("bool", " `True` ", True), ("bool", "```\nFalse\n```", False),
    ("int", "42", 42), ("int", "0", 0), ("int", "1,234", 1234), ("int", "-3", -3), ("int", "12.0", 12),
    ("int", "7.", 7),
    ("number", "3.5", 3.5), ("number", "10", 10), ("number", "1e-3", 0.001), ("number", "1,234.5", 1234.5),
    ("list", '[\n  "a",\n  "b"\n]', ["a", "b"]), ("list", "[]", []), ("list", "['x', 'y']", ["x", "y"]),
    ("list", "('x', 2)", ["x", 2]), ("list", "- first item\n- second item", ["first item", "second item"]),
    ("list", "{'b', 'a'}", ["a", "b"]),
    ("locations", '[\n  "json/decoder.py:12",\n  "json/encoder.py:40-52"\n]',
     ["json/decoder.py:12", "json/encoder.py:40-52"]),
    ("locations", "json/decoder.py:12", ["json/decoder.py:12"]),
    ("locations", "json/decoder.py:12, email/parser.py:3", ["json/decoder.py:12", "email/parser.py:3"]),
    ("locations", "./json/decoder.py:1", ["json/decoder.py:1"]),
    ("locations", "/usr/lib/python3.11/json/decoder.py:5", ["json/decoder.py:5"]),
    ("locations", "decoder.py:5", ["json/decoder.py:5"]),
    ("locations", "json/decoder.py#L10-L20", ["json/decoder.py:10-20"]),
    ("locations", '[{"file": "email/parser.py", "line": 7, "text": "import re"}]', ["email/parser.py:7"]),
    ("locations", "[]", []), ("locations", "None", []),
    ("locations", "- json/decoder.py:3\n- json/decoder.py:3", ["json/decoder.py:3"]),
    ("json", '{"a": 1}', {"a": 1}), ("json", "[1, 2]", [1, 2]), ("json", "{'k': None}", {"k": None}),
    ("json", "3", 3), ("json", '"s"', "s"),
    ("text", "anything at all", "anything at all"),
]

#: (type, answer, what the note must say): ill-typed answers, sent back once.
ILL_TYPED: list[tuple[str, str, str]] = [
    ("bool", "Probably not, pickle is only used on local files.", "not True or False"),
    ("bool", "1", "not True or False"),
    ("int", "about 12", "not a whole number"), ("int", "12.5", "not a whole number"), ("int", "True", "whole"),
    ("number", "nan", "not a number"), ("number", "twelve", "not a number"),
    ("list", "a, b and c", "not a list"), ("list", "42", "not a list"),
    ("locations", "It is called in the decoder.", "not a list of locations"),
    ("locations", '["nope.py:3", "json/decoder.py:999"]', "none of its locations"),
    ("locations", "tool.py:3", "none of its locations"),  # two files named tool.py: which one?
    ("json", "not json at all", "not JSON"),
]


@pytest.mark.parametrize(("kind", "text", "value"), WELL_TYPED)
def test_the_check_stays_silent_on_well_typed_answers(kind: str, text: str, value: Any) -> None:
    got = parse_value(text, spec(kind))
    assert got.ok and got.value == value and got.problem == ""
    for written in (True, False):
        assert TypeCheck(spec(kind)).review(cand(text, written=written)).action == "accept"


@pytest.mark.parametrize(("kind", "text", "said"), ILL_TYPED)
def test_the_check_sends_ill_typed_answers_back_saying_what_is_wrong(kind: str, text: str, said: str) -> None:
    got = parse_value(text, spec(kind))
    assert not got.ok and got.value is None and said in got.problem
    verdict = TypeCheck(spec(kind)).review(cand(text))
    assert verdict.action == "send_back"
    assert said in verdict.note and INSTRUCTIONS[kind] in verdict.note


def test_locations_that_are_not_in_the_corpus_are_dropped_and_kept_apart() -> None:
    got = parse_value('["json/decoder.py:3", "nope.py:1", "json/decoder.py:400", "json/decoder.py:9-3"]',
                      spec("locations"))
    assert got.ok and got.value == ["json/decoder.py:3"]
    assert got.dropped == ("nope.py:1", "json/decoder.py:400", "json/decoder.py:9-3")
    assert location_parts({"path": "a.py", "start_line": 2, "end_line": 5}) == ("a.py", 2, 5)
    assert location_parts({"path": "a.py", "line": True}) is None
    assert location_parts("a.py") is None


def test_judge_sends_back_once_then_accepts_and_text_adds_no_check() -> None:
    events: list[dict[str, Any]] = []
    judge = Judge(typed_checks(spec("int")), events.append)
    assert judge.review(cand("a dozen")).answer is None
    assert judge.review(cand("a dozen")).answer == "a dozen"  # past its limit: the run ends on it
    assert [(e["check"], e["verdict"]) for e in events] == [("answer_type", "send_back"), ("answer_type", "accept")]
    assert events[1]["limit_reached"] is True
    assert typed_checks(AnswerSpec("text")) == [] and typed_checks(None) == []


def test_the_model_is_told_the_type_after_the_question_and_text_is_unchanged() -> None:
    assert asked("Is pickle used?", AnswerSpec("bool")) == f"Is pickle used?\n\n{INSTRUCTIONS['bool']}"
    assert asked("Is pickle used?", AnswerSpec("text")) == "Is pickle used?"
    assert asked("Is pickle used?", None) == "Is pickle used?"
    assert set(INSTRUCTIONS) == {kind for kind in AnswerType if kind.typed}  # every typed type is told
    with pytest.raises(ValueError, match="choose from text, bool"):
        check_type("boolean")


def test_settle_reports_the_value_drops_and_ill_typed_answers() -> None:
    events: list[dict[str, Any]] = []
    assert settle("whatever", AnswerSpec("text"), events.append) is None and events == []
    value = settle('["json/decoder.py:2", "x.py:1"]', spec("locations"), events.append)
    assert value is not None and value.value == ["json/decoder.py:2"]
    assert events[0]["type"] == "typed" and events[0]["dropped"] == ["x.py:1"]
    assert "1 location(s) not in the corpus dropped" in events[1]["message"]
    events.clear()
    value = settle("maybe", spec("bool"), events.append)
    assert value is not None and value.value is None
    assert events[0]["ok"] is False and "its value is null" in events[1]["message"]


def test_a_text_answer_keeps_file_names_with_commas_colons_semicolons_and_spaces() -> None:
    """Issue 47: ``a,b.py:4`` named one corpus file, and was split into two locations."""
    names = {"svc/comma,colon;name.py": 9, "svc/sp ace %41 #x.py": 9, "svc/a:b.py": 9, "svc/uni-é-中.py": 9}
    got = parse_value("svc/comma,colon;name.py:4, svc/sp ace %41 #x.py:2-3; svc/a:b.py:1\nsvc/uni-é-中.py:9",
                      AnswerSpec("locations", names))
    assert got.ok and got.value == ["svc/comma,colon;name.py:4", "svc/sp ace %41 #x.py:2-3", "svc/a:b.py:1",
                                    "svc/uni-é-中.py:9"] and not got.dropped
    # a name that is no corpus file and holds a separator is not read as one: prose stays prose
    assert parse_value("see svc/a:b.py:1", AnswerSpec("locations", names)).value is None
