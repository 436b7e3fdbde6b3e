"""The answer types as one type with their traits (``rlm_cli.answer_types``, issue 50), and no
module of ``rlm_cli`` that decides by comparing a type's name instead of asking the type."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from rlm_cli.answer_types import NAMES, AnswerType
from rlm_cli.loop.typed import check_type

PACKAGE = Path(__file__).resolve().parent.parent / "rlm_cli"


def test_the_names_read_and_write_as_plain_strings() -> None:
    assert [check_type(name) for name in NAMES] == list(AnswerType)  # one list: --answer-type's choices
    for name in NAMES:
        kind = AnswerType(name)
        assert kind == name and f"{kind}" == name and json.dumps(kind) == json.dumps(name)
    with pytest.raises(ValueError):
        AnswerType("txt")


@pytest.mark.parametrize(("name", "typed", "counted", "placed", "numeric", "whole"), [
    ("text", False, False, False, False, False), ("bool", True, False, False, False, False),
    ("int", True, False, False, True, True), ("number", True, False, False, True, False),
    ("list", True, True, False, False, False), ("locations", True, True, True, False, False),
    ("json", True, False, False, False, False)])
def test_traits(name: str, typed: bool, counted: bool, placed: bool, numeric: bool, whole: bool) -> None:
    kind = AnswerType(name)
    assert (kind.typed, kind.counted, kind.placed, kind.numeric, kind.whole) == (typed, counted, placed, numeric, whole)
    assert kind.value_words


@pytest.mark.parametrize(("name", "good", "bad"), [
    ("text", "a", 1), ("bool", True, 1), ("int", 3, True), ("int", -1, 1.5), ("number", 1.5, "1.5"),
    ("number", 2, False), ("list", [1, "a"], "a"), ("locations", ["a.py:1"], ["a.py:1", 2])])
def test_fits_an_expected_value(name: str, good: Any, bad: Any) -> None:
    assert AnswerType(name).fits(good) and not AnswerType(name).fits(bad)


def test_a_json_check_takes_any_toml_value() -> None:
    assert all(AnswerType.JSON.fits(v) for v in ({"a": [1]}, [1], "a", 1.5, True))


def _names(node: ast.expr) -> set[str]:
    """The strings ``node`` is (a constant, or a tuple, list or set of constants), when each is
    the name of an answer type; empty otherwise."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    found = {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}
    return found if items and len(found) == len(items) and found <= set(NAMES) else set()


def _operand(node: ast.expr) -> str:
    """The name an operand ends with (``c.type`` -> ``type``), or ``""``."""
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def name_decisions(source: str) -> list[int]:
    """The lines of ``source`` that decide by an answer type's name: a comparison of ``type`` or
    ``answer_type`` (anywhere) with such names, or, in a module that imports
    ``rlm_cli.answer_types``, any comparison with them or a dict keyed by three or more of them.
    (Elsewhere ``kind == "number"`` is a token's or a file's kind, not an answer type.)"""
    tree = ast.parse(source)
    typed = "rlm_cli.answer_types" in {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names(b) and a is not b and (typed or _operand(a) in ("type", "answer_type"))
                   for a in sides for b in sides):
                lines.append(node.lineno)
        elif isinstance(node, ast.Dict) and typed:
            if len(set().union(*(_names(k) for k in node.keys if k is not None))) >= 3:
                lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("source", [
    'if check.type != "locations":\n    pass\n',
    'ok = answer_type in ("int", "number")\n',
    'from rlm_cli.answer_types import AnswerType\nok = kind == "list"\n',
    'from rlm_cli.answer_types import AnswerType\nTOLD = {"bool": "a", "int": "b", "json": "c"}\n',
])
def test_the_scan_finds_a_decision_by_name(source: str) -> None:
    assert name_decisions(source)


def test_no_module_decides_by_an_answer_types_name() -> None:
    found = [f"{p.relative_to(PACKAGE.parent)}:{line}" for p in sorted(PACKAGE.rglob("*.py"))
             if p.name != "answer_types.py" for line in name_decisions(p.read_text(encoding="utf-8"))]
    assert found == [], "ask the AnswerType (its traits), never compare its name"
    assert not name_decisions('kind = "json"\nok = kind == "json"\n')  # a file's kind, not an answer type
