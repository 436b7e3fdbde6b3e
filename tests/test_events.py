"""The trajectory event vocabulary (``rlm_cli.events``): every event the code builds is in it,
and every type name the code reads events by is too."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest

from rlm_cli import events
from rlm_cli.events import FIELDS, TRANSIENT_TYPES, VOCABULARY, EventType, event, is_type, of_type
from rlm_cli.output.render import HANDLERS

PACKAGE = Path(events.__file__).parent
ROOT = PACKAGE.parent


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


# -- readers: every type name an event's type is compared with is in the vocabulary ---------------

#: Where a ``"type"`` key is not a trajectory event's but a message of another protocol (the relay's,
#: the model host's, the worker's, the document decoder child's): left out of the readers' scan.
PROTOCOL_MODULES = ("rlm_cli/models/relay.py", "rlm_cli/models/host_process.py", "rlm_cli/sandbox/",
                    "rlm_cli/corpus/decode")
#: Other ``"type"`` keys, of records that are not events, each with why: ``(module, the record read)``.
NOT_EVENTS: dict[tuple[str, str], str] = {
    ("rlm_cli/audit/checklist.py", "row"): "a checklist row: its answer type (text, number, list...)",
}
#: The code that reads events back: the package, and the scripts and benchmarks that read trajectories.
READER_DIRS = ("rlm_cli", "scripts", "benchmarks")
#: Functions of ``rlm_cli.events`` that take a type name as their second argument.
TYPE_NAME_TAKERS = frozenset({"is_type", "of_type"})


def _strings(node: ast.expr | None, constants: dict[str, ast.expr]) -> list[str] | None:
    """The strings ``node`` names: a string, a tuple, list or set of them (or ``frozenset(...)`` of
    one), or a module-level constant holding one; ``None`` when it is none of these."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        found = [_strings(e, {}) for e in node.elts]
        return None if any(f is None for f in found) else [x for f in found for x in f or []]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("frozenset", "set", "tuple") \
            and len(node.args) == 1:
        return _strings(node.args[0], {})
    if isinstance(node, ast.Name) and node.id in constants:
        return _strings(constants[node.id], {})
    return None


def _reads_type(node: ast.expr, names: set[str], others: set[str]) -> bool:
    """Whether ``node`` is a dict's ``"type"``: ``X.get("type", ...)``, ``X["type"]``, ``str()`` of
    one, or a name assigned one in the same function (``kind = ev.get("type")``); not when ``X``
    (as written) is one of ``others``, records that are not events."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and len(node.args) == 1:
        return _reads_type(node.args[0], names, others)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        record, key = node.func.value, node.args[0]
    elif isinstance(node, ast.Subscript):
        record, key = node.value, node.slice
    else:
        return isinstance(node, ast.Name) and node.id in names
    return isinstance(key, ast.Constant) and key.value == "type" and ast.unparse(record) not in others


def _scope_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of one function (or module) body, without those of the functions inside it."""
    out: list[ast.AST] = []
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        out.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))
    return out


def type_names_read(source: str, others: set[str] | None = None) -> list[tuple[int, str]]:
    """``(line, name)`` for every type name an event's type is compared with in ``source``
    (``== "x"``, ``!=``, ``in ("x", "y")``, ``not in``, a module constant of such names) or given
    to ``is_type``/``of_type``; a name given them that is not a string literal reads ``<not a literal>``.
    ``others``: the records (as written: ``row``) whose ``"type"`` is not an event's."""
    others = others or set()
    tree = ast.parse(source)
    constants = {t.id: n.value for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None
                 for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    found: list[tuple[int, str]] = []
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))]
    for scope in scopes:
        nodes = _scope_nodes(scope)
        names: set[str] = set()
        for node in nodes:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                pairs = (zip(node.targets[0].elts, node.value.elts, strict=False)
                         if isinstance(node.targets[0], ast.Tuple) and isinstance(node.value, ast.Tuple)
                         else [(node.targets[0], node.value)])
                names |= {t.id for t, v in pairs if isinstance(t, ast.Name) and _reads_type(v, set(), others)}
        for node in nodes:
            if isinstance(node, ast.Compare) and all(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn))
                                                     for op in node.ops):
                operands = [node.left, *node.comparators]
                if any(_reads_type(o, names, others) for o in operands):
                    for o in operands:
                        found += [(node.lineno, name) for name in _strings(o, constants) or []]
            elif isinstance(node, ast.Call) and len(node.args) >= 2 and (
                    getattr(node.func, "id", None) in TYPE_NAME_TAKERS or getattr(node.func, "attr", None) in TYPE_NAME_TAKERS):
                named = _strings(node.args[1], {})
                found += [(node.lineno, name) for name in named or ["<not a literal>"]]
    return sorted(found)


def _reader_modules() -> list[Path]:
    return [p for d in READER_DIRS for p in sorted((ROOT / d).rglob("*.py"))
            if not p.relative_to(ROOT).as_posix().startswith(PROTOCOL_MODULES)]


def test_every_type_name_an_event_is_read_by_is_in_the_vocabulary() -> None:
    """A misspelt type name in a reader (``ev.get("type") == "finall"``, ``is_type(ev, "finall")``)
    would never match: it fails here (``is_type``/``of_type`` also refuse it at run time, and mypy
    in ``rlm_cli``)."""
    problems, seen = [], 0
    for path in _reader_modules():
        where = path.relative_to(ROOT).as_posix()
        others = {record for module, record in NOT_EVENTS if module == where}
        for line, name in type_names_read(path.read_text(encoding="utf-8"), others):
            seen += 1
            if name not in VOCABULARY:
                problems.append(f"{where}:{line}: {name!r} is not an event type (rlm_cli.events)")
    assert seen > 40  # the scan found the readers
    assert not problems, "\n".join(problems)


def test_the_scan_finds_a_misspelt_type_name_in_each_way_of_reading_one() -> None:
    source = """
KINDS = ("final", "sumary")

def reader(ev, events, row):
    kind = ev.get("type")
    if kind == "finall" or ev["type"] != "output" or str(ev.get("type")) in KINDS:
        pass
    if ev.get("type") not in ("notice", "notise") and row.get("type") == "text":
        pass
    return is_type(ev, "iteraton"), next(of_type(events, "mode"), None), is_type(ev, kind)
"""
    found = type_names_read(source, others={"row"})
    assert sorted(name for _, name in found if name not in VOCABULARY) == [
        "<not a literal>", "finall", "iteraton", "notise", "sumary"]
    assert {"final", "output", "notice", "mode"} <= {name for _, name in found}
    assert "text" not in {name for _, name in found}  # row's "type" is not an event's


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
