"""Typed answers (``--answer-type``): what the model is told, the check that sends a wrong-typed
answer back once, and the typed value of the answer that ends a run.

An answer is always text (``FINAL`` turns its value into text: a string as is, a list or dict as
JSON, anything else ``str()``); a typed question asks that text to read as a value of one type:

* ``text``: anything (the default; nothing here runs for it: output is as without a type);
* ``bool``: ``True``/``False`` (also ``true``, ``yes``, ``no``, with a trailing full stop);
* ``int``: a whole number (``42``, ``1,234``, ``42.0``); ``number``: any finite number;
* ``list``: a JSON or Python list (a tuple or set too), or lines that each start with ``- `` or
  ``* ``; its items are kept as JSON values;
* ``locations``: a list (or one line, or lines) of ``path:line`` or ``path:start-end`` (grep's hit
  dicts, with ``file``/``path`` and ``line``/``start_line``/``end_line``, too); each must name a
  file of the corpus and lines it has; those that do not are dropped (and said), and an answer
  whose every location was dropped is not well typed;
* ``json``: any RFC 8259 JSON value (no ``NaN`` or ``Infinity``), or a Python literal JSON can encode.

No value nests deeper than :data:`MAX_DEPTH` levels.

The :class:`TypeCheck` check is silent on every well-typed answer (the table in
``tests/loop/test_typed.py``; docs/loop.md) and sends an ill-typed one back once with what is
wrong and how to give it; past its limit the run ends on the answer it has, whose ``value`` is
then ``None`` (:func:`parse_value` says why): nothing is printed but the ``--json`` document, and
the run exits 9 (``ExitCode.NOT_OF_TYPE``). No model is called here.

What each type is, and its traits, is :class:`~rlm_cli.answer_types.AnswerType`: code here asks it
(``kind.numeric``, ``kind.placed``), never compares its name.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rlm_cli.answer_types import NAMES, AnswerType
from rlm_cli.events import Emit
from rlm_cli.loop.checks import ACCEPT, SEND_BACK, Candidate, Check, Verdict

#: What the model is told after the question, per typed type (``text``: nothing).
INSTRUCTIONS: dict[AnswerType, str] = {
    AnswerType.BOOL: "Answer type: bool. End with FINAL(True) or FINAL(False).",
    AnswerType.INT: "Answer type: int. End with FINAL(n), n a whole number (e.g. FINAL(len(hits))).",
    AnswerType.NUMBER: "Answer type: number. End with FINAL(x), x a number.",
    AnswerType.LIST: ('Answer type: list. End with FINAL_VAR("items"), items a Python list of short strings '
                      "(an empty list when there are none)."),
    AnswerType.LOCATIONS: ('Answer type: locations. End with FINAL_VAR("locations"), locations a Python list of strings '
                  'such as "pkg/mod.py:12" or "pkg/mod.py:40-52" (a path of the corpus, then a line or a range of '
                  "lines; an empty list when there are none)."),
    AnswerType.JSON: 'Answer type: json. End with FINAL_VAR("data"), data a dict or list that JSON can encode.',
}

#: ``path:line`` or ``path:start-end`` (a ``#L12-L20`` anchor too).
_LOCATION = re.compile(r"^(?P<path>.+?)(?::|#L)(?P<start>\d+)(?:-L?(?P<end>\d+))?$")
_BULLET = re.compile(r"^\s*[-*]\s+(.*\S)\s*$")
_INT_TEXT = re.compile(r"^[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)$")
_NUMBER_TEXT = re.compile(r"^[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?$|^[+-]?\.\d+$")
_BOOLS = {"true": True, "yes": True, "false": False, "no": False}


@dataclass(frozen=True)
class AnswerSpec:
    """The type a question's answer must have: ``kind`` and, for a type whose items are places
    (``locations``), the corpus's files as ``path -> line count``. A ``kind`` given by its name
    (``"int"``) is read as its :class:`~rlm_cli.answer_types.AnswerType`.

    Raises:
        ValueError: ``kind`` names no answer type.
    """

    kind: AnswerType = AnswerType.TEXT
    lines: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", AnswerType(self.kind))

    @property
    def typed(self) -> bool:
        """Whether the answer has a type other than ``text``."""
        return self.kind.typed


@dataclass(frozen=True)
class TypedValue:
    """The typed value of an answer: ``value`` (a JSON value; ``None`` when ``ok`` is false),
    ``problem`` (why it is not well typed; ``""`` when it is) and ``dropped`` (locations that
    name no file or lines of the corpus)."""

    kind: AnswerType
    value: object
    ok: bool
    problem: str = ""
    dropped: tuple[str, ...] = ()


def check_type(kind: str) -> AnswerType:
    """The answer type named ``kind``.

    Raises:
        ValueError: ``kind`` names none (the message lists the names, ``answer_types.NAMES``).
    """
    if kind not in NAMES:
        raise ValueError(f"unknown answer type {kind!r}; choose from {', '.join(NAMES)}")
    return AnswerType(kind)


def asked(question: str, spec: AnswerSpec | None) -> str:
    """The question as the model reads it: with the type's instruction after it (as is for ``text``)."""
    if spec is None or not spec.typed:
        return question
    return f"{question}\n\n{INSTRUCTIONS[spec.kind]}"


#: The deepest a typed value may nest (lists and dicts within one another). RFC 8259 lets a parser
#: set its limit; 100 is far beyond any answer and keeps every writer of the value (the ``--json``
#: document, the trajectory, a report) within Python's recursion limit.
MAX_DEPTH = 100
_TOO_DEEP = f"it is nested more than {MAX_DEPTH} levels deep"


def _literal(text: str) -> tuple[bool, object]:
    """``(True, value)`` when ``text`` is JSON or a Python literal, else ``(False, None)``. JSON's
    ``NaN``/``Infinity`` are read (and refused as no JSON value by :func:`_jsonable`); text nested
    deeper than :data:`MAX_DEPTH` is not read at all."""
    if _nesting(text) > MAX_DEPTH:
        return False, None
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        pass
    try:
        return True, ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


def _nesting(text: str) -> int:
    """How deep the brackets of ``text`` nest at most (quotes not minded: an upper bound)."""
    depth = deepest = 0
    for ch in text:
        if ch in "[{(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]})":
            depth = max(0, depth - 1)
    return deepest


def _jsonable(value: object) -> tuple[bool, object]:
    """``value`` as an RFC 8259 JSON value (tuples and sets as lists; no ``NaN``/``Infinity``), or
    ``(False, None)``."""
    if isinstance(value, (set, frozenset)):
        value = sorted(value, key=repr)
    try:
        return True, json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return False, None


def _problem(text: str, plain: str) -> str:
    """Why ``text`` has no value: :data:`_TOO_DEEP` when it nests too deep, else ``plain``."""
    return _TOO_DEEP if _nesting(text) > MAX_DEPTH else plain


def _clean(text: str) -> str:
    """``text`` without surrounding blanks, backquotes and a code fence."""
    t = text.strip()
    fence = re.fullmatch(r"```[\w-]*\n(.*?)\n?```", t, re.DOTALL)
    if fence:
        t = fence.group(1).strip()
    if len(t) >= 2 and t[0] == t[-1] == "`":
        t = t[1:-1].strip()
    return t


def _as_list(text: str) -> list[object] | None:
    """A list from ``text``: a literal list, tuple or set, or bullet lines; ``None`` when neither."""
    found, value = _literal(text)
    if found and isinstance(value, (list, tuple, set, frozenset)):
        ok, items = _jsonable(list(value) if not isinstance(value, (set, frozenset)) else value)
        return items if ok and isinstance(items, list) else None  # a list in JSON is a list
    bullets = [_BULLET.match(ln) for ln in text.splitlines() if ln.strip()]
    if bullets and all(bullets):
        return [m.group(1).strip("`") for m in bullets if m is not None]
    return None


def parse_value(text: str, spec: AnswerSpec) -> TypedValue:
    """The typed value of answer ``text`` for ``spec`` (see the module docstring). Never raises."""
    kind, t = spec.kind, _clean(text)
    if not kind.typed:
        return TypedValue(kind, text, True)
    if kind is AnswerType.BOOL:
        found, value = _literal(t)
        if found and isinstance(value, bool):
            return TypedValue(kind, value, True)
        word = t.rstrip(".").strip().lower()
        if word in _BOOLS:
            return TypedValue(kind, _BOOLS[word], True)
        return TypedValue(kind, None, False, "it is not True or False")
    if kind.numeric:
        return _number(kind, t)
    if kind.placed:
        return _locations(t, spec.lines)
    if kind is AnswerType.LIST:
        items = _as_list(t)
        if items is None:
            return TypedValue(kind, None, False, _problem(t, "it is not a list"))
        return TypedValue(kind, items, True)
    found, value = _literal(t)
    ok, value = _jsonable(value) if found else (False, None)
    if not ok:
        return TypedValue(kind, None, False, _problem(t, "it is not JSON (NaN and Infinity are not JSON either), nor a "
                                                         "Python literal JSON can encode"))
    return TypedValue(kind, value, True)


def _number(kind: AnswerType, t: str) -> TypedValue:
    """The value of a ``numeric`` type's answer: a whole number when the type is ``whole``."""
    found, value = _literal(t)
    if not found or isinstance(value, bool) or not isinstance(value, (int, float)):
        plain = t.rstrip(".").strip()
        if (_INT_TEXT if kind.whole else _NUMBER_TEXT).match(plain):
            value = int(plain.replace(",", "")) if kind.whole else float(plain.replace(",", ""))
        else:
            return TypedValue(kind, None, False, "it is not a whole number" if kind.whole else "it is not a number")
    if isinstance(value, float) and not math.isfinite(value):
        return TypedValue(kind, None, False, "it is not a finite number")
    if kind.whole:
        if isinstance(value, float) and not value.is_integer():
            return TypedValue(kind, None, False, f"{value} is not a whole number")
        return TypedValue(kind, int(value), True)
    return TypedValue(kind, value, True)


class Locator:
    """Finds a corpus file for a path a model wrote: the path itself, without ``./``, or the one
    file whose path ends with it (or that it ends with: an absolute path, a path from a parent
    folder). ``lines``: path -> line count."""

    def __init__(self, lines: Mapping[str, int]) -> None:
        self.lines = lines
        self._by_name: dict[str, list[str]] | None = None

    def find(self, path: str) -> str | None:
        """The corpus path ``path`` names, or ``None`` (none, or several)."""
        p = path.strip().strip("`'\"")
        while p.startswith("./"):
            p = p[2:]
        if p in self.lines:
            return p
        if self._by_name is None:
            self._by_name = {}
            for known in self.lines:
                self._by_name.setdefault(known.rsplit("/", 1)[-1], []).append(known)
        near = [k for k in self._by_name.get(p.rsplit("/", 1)[-1], [])
                if p.endswith("/" + k) or k.endswith("/" + p.lstrip("/"))]
        return near[0] if len(near) == 1 else None


def location_parts(item: object) -> tuple[str, int, int] | None:
    """``(path, start, end)`` of one location: ``"path:line"``, ``"path:start-end"``, or a dict
    with ``path``/``file`` and ``line``/``start_line`` (and ``end_line``); ``None`` otherwise."""
    if isinstance(item, dict):
        path = item.get("path", item.get("file"))
        start = item.get("start_line", item.get("line"))
        end = item.get("end_line", start)
        if isinstance(path, str) and isinstance(start, int) and isinstance(end, int) \
                and not isinstance(start, bool) and not isinstance(end, bool):
            return path, start, end
        return None
    if not isinstance(item, str):
        return None
    m = _LOCATION.match(item.strip().strip("`'\""))
    if m is None:
        return None
    start = int(m.group("start"))
    return m.group("path").strip(), start, int(m.group("end") or start)


#: A line reference ending a location in a text answer (``:12``, ``:3-5``, ``#L4-L9``), before a separator.
_LINE_REF = re.compile(r"(?::|#L)\d+(?:-L?\d+)?(?=$|[\s,;])")
_SEPARATORS = " \t\r\n,;"


def _text_locations(t: str, locator: Locator) -> list[str] | None:
    """The locations of a text answer whose file names may hold commas, semicolons, colons or
    spaces (``comma,colon;name.py:4, a b.py:2``): each line reference ends a location, and the text
    since the one before (separators trimmed) is its path, kept whole when it names a corpus file
    (or holds no separator); ``None`` when the text is not such a list."""
    items: list[str] = []
    pos = 0
    for m in _LINE_REF.finditer(t):
        path = t[pos:m.start()].strip(_SEPARATORS)
        if not path or (locator.find(path) is None and any(c in path for c in _SEPARATORS)):
            return None
        items.append(path + m.group())
        pos = m.end()
    return items if items and not t[pos:].strip(_SEPARATORS) else None


def _locations(t: str, lines: Mapping[str, int]) -> TypedValue:
    items: Sequence[object] | None = _as_list(t)
    if items is None:
        words = [w for w in re.split(r"[\n,;]\s*|\s+", t) if w.strip()]
        by_name = _text_locations(t, Locator(lines))
        if by_name is not None:
            items = by_name
        elif t.strip() and all(location_parts(w) for w in words):
            items = list(words)
        elif t.strip().lower().rstrip(".") in ("none", "[]", ""):
            items = []
        else:
            return TypedValue(AnswerType.LOCATIONS, None, False,
                              'it is not a list of locations ("path:line" or "path:start-end")')
    locator = Locator(lines)
    kept: list[str] = []
    dropped: list[str] = []
    for item in items:
        shown = item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)
        parts = location_parts(item)
        path = locator.find(parts[0]) if parts else None
        if parts is None or path is None or not 1 <= parts[1] <= parts[2] <= lines[path]:
            dropped.append(shown)
            continue
        ref = f"{path}:{parts[1]}" + (f"-{parts[2]}" if parts[2] != parts[1] else "")
        if ref not in kept:
            kept.append(ref)
    if dropped and not kept:
        return TypedValue(AnswerType.LOCATIONS, None, False, "none of its locations names a file and lines of the corpus: "
                          + ", ".join(dropped[:5]) + (" ..." if len(dropped) > 5 else ""), tuple(dropped))
    return TypedValue(AnswerType.LOCATIONS, kept, True, dropped=tuple(dropped))


def send_back_note(value: TypedValue) -> str:
    """What the model is told of an ill-typed answer."""
    return f"Your answer is not a well-typed {value.kind}: {value.problem}. {INSTRUCTIONS[value.kind]}"


class TypeCheck(Check):
    """The ``answer_type`` check: an answer that is not a well-typed value of the question's type
    (:func:`parse_value`) is sent back once with what is wrong; silent on every well-typed one,
    however it was given (written out, computed, prose)."""

    name = "answer_type"

    def __init__(self, spec: AnswerSpec, limit: int = 1) -> None:
        super().__init__(limit)
        self.spec = spec

    def review(self, c: Candidate) -> Verdict:
        value = parse_value(c.answer, self.spec)
        return ACCEPT if value.ok else Verdict(SEND_BACK, send_back_note(value))


def typed_checks(spec: AnswerSpec | None) -> list[Check]:
    """The checks a typed question adds to its policy's (none for ``text``)."""
    return [TypeCheck(spec)] if spec is not None and spec.typed else []


def settle(answer: str, spec: AnswerSpec | None, emit: Emit, depth: int = 0) -> TypedValue | None:
    """The typed value of the answer a run ended on (``None`` for ``text``), reported to ``emit``:
    a ``typed`` event (``answer_type``, ``ok``, ``value``, ``problem``, ``dropped``) and a warning
    notice naming the locations dropped, or why the answer has no value."""
    if spec is None or not spec.typed:
        return None
    from rlm_cli.events import event

    value = parse_value(answer, spec)
    emit(event("typed", depth, answer_type=spec.kind, ok=value.ok, value=value.value, problem=value.problem,
               dropped=list(value.dropped)))
    if not value.ok:
        emit(event("notice", depth, level="warning", message=f"the answer is not a well-typed {spec.kind} "
                                                             f"({value.problem}): its value is null"))
    elif value.dropped:
        emit(event("notice", depth, level="warning", message=(
            f"{len(value.dropped)} location(s) not in the corpus dropped from the answer: "
            + ", ".join(value.dropped[:5]) + (" ..." if len(value.dropped) > 5 else ""))))
    return value
