"""The trajectory event vocabulary (``rlm_cli.events``): every event the code builds is in it."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest

from rlm_cli import events
from rlm_cli.events import FIELDS, TRANSIENT_TYPES, VOCABULARY, EventType, event, is_type, of_type
from rlm_cli.output.render import HANDLERS

PACKAGE = Path(events.__file__).parent


def _event_calls() -> list[tuple[str, ast.Call]]:
    """Every call of a function named ``event`` in ``rlm_cli/``, with where it is."""
    calls = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if name == "event":
                    calls.append((f"{path.relative_to(PACKAGE.parent)}:{node.lineno}", node))
    return calls


def test_every_event_call_uses_a_type_and_fields_of_the_vocabulary() -> None:
    calls = _event_calls()
    assert len(calls) > 40  # the scan found the call sites
    problems = []
    for where, call in calls:
        first = call.args[0] if call.args else None
        if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
            problems.append(f"{where}: the type is not a literal")
            continue
        if first.value not in VOCABULARY:
            problems.append(f"{where}: unknown type {first.value!r}")
            continue
        named = {kw.arg for kw in call.keywords if kw.arg is not None}  # **fields are checked at run time
        if named - FIELDS[first.value]:
            problems.append(f"{where}: {first.value!r} has no field {sorted(named - FIELDS[first.value])}")
    assert not problems, "\n".join(problems)


def test_event_keeps_the_order_and_refuses_what_is_not_in_the_vocabulary() -> None:
    ev = event("notice", 2, message="m", level="warning")
    assert list(ev) == ["schema", "type", "depth", "ts", "message", "level"]
    assert ev["schema"] == events.SCHEMA_VERSION and ev["type"] == "notice" and ev["depth"] == 2
    with pytest.raises(ValueError, match="unknown trajectory event type 'notise'"):
        event("notise", 0, message="m")
    with pytest.raises(ValueError, match="no field mesage"):
        event("notice", 0, mesage="m")


def test_a_users_run_writes_an_undeclared_field_instead_of_failing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Strict only under the test suite (``RLM_STRICT_EVENTS=1``): a slip in rlm's own code must
    not cost a user's answer."""
    monkeypatch.delenv("RLM_STRICT_EVENTS")
    assert event("notice", 0, mesage="m")["mesage"] == "m"


def test_each_class_is_named_by_its_type_and_every_handler_by_a_type() -> None:
    for name, cls in VOCABULARY.items():
        assert typing.get_args(typing.get_type_hints(cls)["type"]) == (name,)
    assert set(HANDLERS) <= set(VOCABULARY)
    assert {"corpus", "iteration", "root_call", "code", "output", "final", "notice"} <= set(HANDLERS)


def test_is_type_and_of_type_read_one_type_and_refuse_a_name_outside_the_vocabulary() -> None:
    evs = [event("iteration", 0, iteration=1), event("final", 0, status="final"), {"no": "type"},
           event("final", 1, status="max_iterations")]
    assert is_type(evs[1], "final") and not is_type(evs[0], "final") and not is_type(evs[2], "final")
    assert [e["depth"] for e in of_type(evs, "final")] == [0, 1]
    assert next(of_type(reversed(evs), "final"))["status"] == "max_iterations"
    assert next(of_type(evs, "summary"), None) is None
    with pytest.raises(ValueError, match="unknown trajectory event type 'finall'"):
        is_type(evs[1], "finall")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="unknown trajectory event type 'finall'"):
        of_type(evs, "finall")  # type: ignore[call-overload]  # at the call, before any event is read


def test_the_type_names_are_those_of_the_vocabulary_each_with_its_overloads() -> None:
    """``EventType`` and the overloads of ``is_type`` and ``of_type`` (one per type, giving mypy its
    class) are written out in ``rlm_cli.events``: they must say what ``VOCABULARY`` says."""
    assert typing.get_args(EventType) == tuple(VOCABULARY)
    assert TRANSIENT_TYPES <= set(VOCABULARY)
    for reader, wrapper in ((is_type, typing.TypeGuard), (of_type, typing.Iterator)):
        typed = {}
        for overload in typing.get_overloads(reader):
            hints = typing.get_type_hints(overload)
            (name,) = typing.get_args(hints["type_"])
            assert typing.get_origin(hints["return"]) in (wrapper, getattr(wrapper, "__origin__", None))
            (typed[name],) = typing.get_args(hints["return"])
        assert typed == VOCABULARY, reader.__name__
