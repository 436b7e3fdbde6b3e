"""The answer types as one type with their traits (``rlm_cli.answer_types``, issue 50)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rlm_cli.answer_types import NAMES, AnswerType
from rlm_cli.loop.typed import TYPES


def test_the_names_are_the_loops_types_and_read_write_as_plain_strings() -> None:
    assert NAMES == TYPES  # one list: the loop's TYPES and --answer-type's choices
    for name in NAMES:
        kind = AnswerType(name)
        assert kind == name and f"{kind}" == name and json.dumps(kind) == json.dumps(name)
    with pytest.raises(ValueError):
        AnswerType("txt")


@pytest.mark.parametrize(("name", "typed", "counted", "placed", "numeric"), [
    ("text", False, False, False, False), ("bool", True, False, False, False), ("int", True, False, False, True),
    ("number", True, False, False, True), ("list", True, True, False, False),
    ("locations", True, True, True, False), ("json", True, False, False, False)])
def test_traits(name: str, typed: bool, counted: bool, placed: bool, numeric: bool) -> None:
    kind = AnswerType(name)
    assert (kind.typed, kind.counted, kind.placed, kind.numeric) == (typed, counted, placed, numeric)
    assert kind.value_words


@pytest.mark.parametrize(("name", "good", "bad"), [
    ("text", "a", 1), ("bool", True, 1), ("int", 3, True), ("int", -1, 1.5), ("number", 1.5, "1.5"),
    ("number", 2, False), ("list", [1, "a"], "a"), ("locations", ["a.py:1"], ["a.py:1", 2])])
def test_fits_an_expected_value(name: str, good: Any, bad: Any) -> None:
    assert AnswerType(name).fits(good) and not AnswerType(name).fits(bad)


def test_a_json_check_takes_any_toml_value() -> None:
    assert all(AnswerType.JSON.fits(v) for v in ({"a": [1]}, [1], "a", 1.5, True))
