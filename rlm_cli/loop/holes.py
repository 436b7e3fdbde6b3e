"""The values of ``loop.worlds``: holes (what the model's code read), the made-up values that
stand for them, the guards that keep a world's run small, and how worlds agree on a value."""

from __future__ import annotations

import ast
import operator
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol, TypeGuard, TypeVar

from rlm_cli import protocol

#: The made-up values a hole's result takes, by kind, before the code's own comparison constants
#: are added (:func:`samples_for`): small and huge counts, a negative, strings empty and not.
INTS = (0, 1, 2, 7, 10**12 + 3, -1)
FLOATS = (0.0, 1.5, -2.0, 7.25, 1e12)
STRS = ("", "a", "0", "x y\nz", "-")
BOOLS = (False, True, False, True, True)
#: At most this many made-up values per kind (the worlds are twice as many); code that compares
#: with more constants than fit is not traced.
MAX_SAMPLES = 16
#: Worlds whose run failed (``ZeroDivisionError`` when a made-up length is 0...) are left out; a
#: value counts as the code's own only when at least this many worlds gave it.
MIN_WORLDS = 3
#: The most characters of code read, and statements run per world; beyond, nothing is traced.
MAX_CODE, MAX_STEPS = 100_000, 5_000
#: The largest sequence, exponent or shift the interpreter builds (``'x' * 10**9`` is not built).
MAX_ITEMS = 100_000
#: The deepest nesting of containers the interpreter builds: hashing or comparing a tuple nested
#: far deeper runs on the C stack of rlm's own process.
MAX_NESTING = 50
#: The most one world keeps (values assigned, texts printed; in :func:`weight` units, counted
#: each time): ``x1 = 'a' * 99_999`` and 5,000 names like it held 500 MB in rlm's process.
MAX_KEPT = 10 * MAX_ITEMS
#: CPU seconds (of the calling thread: a busy machine does not count) one ``provenance()`` spends
#: over all its worlds, parsing included; beyond, nothing is traced
#: (usual code takes a few milliseconds; this holds against code built to be slow: thousands of
#: big-integer divisions or membership tests over large lists, each one cheap on its own).
TIME_BUDGET = 0.25
FINISHERS = frozenset({"FINAL", "FINAL_VAR", *protocol.FINAL_ALIASES})
#: Builtins that are pure, with the kind of their result on a hole (``None``: a hole; ``count``: an
#: ``int`` that is never negative, so ``1658 if len(files) >= 0 else 0`` is the code's own).
PURE: dict[str, str | None] = {
    "len": "count", "int": "int", "ord": "int", "float": "float", "str": "str", "repr": "str", "format": "str",
    "chr": "str", "hex": "str", "bin": "str", "oct": "str", "ascii": "str", "bool": "bool", "any": "bool",
    "all": "bool", "isinstance": "bool", "callable": "bool", "abs": None, "round": None, "min": None, "max": None,
    "sum": None, "sorted": None, "list": None, "tuple": None, "set": None, "frozenset": None, "dict": None,
    "divmod": None, "pow": None, "reversed": None, "type": None}
BUILTINS: dict[str, Callable[..., object]] = {name: getattr(__builtins__, name) if not isinstance(__builtins__, dict)
                                            else __builtins__[name] for name in PURE}
STR_METHODS = frozenset({
    "lower", "upper", "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "replace", "join", "count",
    "startswith", "endswith", "find", "rfind", "index", "title", "capitalize", "casefold", "isdigit", "isalpha",
    "isalnum", "isspace", "isnumeric", "isdecimal", "partition", "rpartition", "removeprefix", "removesuffix",
    "swapcase", "format"})
READ_METHODS = frozenset({"get", "keys", "values", "items", "count", "index", "copy"})
#: The operators, applied to values of any type: typeshed types each one for the operands it
#: supports, and here a value's type is known only at run time (the ``TypeError`` of an operand
#: it does not support is what :class:`~rlm_cli.loop.worlds.World` catches, as the REPL raises it),
#: so their operands are ``Any``; what they give is any value (``object``).
BINOPS: dict[type, Callable[[Any, Any], object]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.LShift: operator.lshift,
    ast.RShift: operator.rshift, ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.BitAnd: operator.and_,
    ast.MatMult: operator.matmul}
CMPOPS: dict[type, Callable[[Any, Any], object]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}


#: A value that :func:`bounded` (and ``World.keep``) gives back as it is.
V = TypeVar("V")
#: ``id(container) -> (container, weight, depth)``: the cache of :func:`bounded` (the container is
#: kept so that its ``id`` is not reused).
Weights = dict[int, tuple[object, int, int]]
#: A made-up value of one kind (:class:`Samples`): an ``int`` (a ``bool`` too), a ``float`` or a ``str``.
Sample = int | float | str


class Subscriptable(Protocol):
    """A value with ``__getitem__`` (a ``str``, a container, a class): ``value[index]`` may be
    tried on it (and fail with the index it is given)."""

    def __getitem__(self, index: object, /) -> object: ...


def subscriptable(value: object) -> TypeGuard[Subscriptable]:
    """Whether ``value`` is :class:`Subscriptable` (what ``isinstance`` with a runtime-checkable
    protocol asks, at a fraction of its cost: a subscript is common and a world's time is counted)."""
    return hasattr(value, "__getitem__")


class Hole:
    """A value from outside the code's text: refuses every operation but identity and hashing."""

    __slots__ = ()

    def _refuse(self, *_: object) -> NoReturn:
        raise TypeError("a value the code read")

    __bool__ = __len__ = __iter__ = __str__ = __repr__ = __format__ = __eq__ = __ne__ = _refuse
    __lt__ = __le__ = __gt__ = __ge__ = __index__ = __int__ = __float__ = __contains__ = _refuse
    __hash__ = object.__hash__


class Failed(Exception):
    """This world's run of an expression failed (an error, or something too large to build)."""


class Ended(Exception):
    """A ``raise`` ended the block in this world."""


FAILED = object()  # a value whose computation failed in this world


def holey(value: object, depth: int = 2) -> bool:
    if isinstance(value, Hole):
        return True
    if depth and isinstance(value, (list, tuple, set, frozenset)):
        return any(holey(v, depth - 1) for v in value)
    if depth and isinstance(value, dict):
        return any(holey(k, depth - 1) or holey(v, depth - 1) for k, v in value.items())
    return False


def bounded(value: V, weights: Weights | None = None) -> V:
    """``value`` itself, if it is small enough to work on.

    A container counts what it holds, each time it holds it (``[s] * 99_999`` with ``s`` a string
    of 99,999 characters is about 10**10 characters once printed, sorted or compared), nested at
    most :data:`MAX_NESTING` deep. ``weights`` caches the weight and depth of containers already
    seen (the interpreter never changes a container in place).

    Raises:
        Failed: larger than :data:`MAX_ITEMS` (strings, containers) or ``4 * MAX_ITEMS`` bits, or
            nested deeper than :data:`MAX_NESTING`.
    """
    if isinstance(value, (str, bytes)) and len(value) > MAX_ITEMS:
        raise Failed("too large")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * MAX_ITEMS:
        raise Failed("too large")
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        weight, depth = _weight(value, {} if weights is None else weights)
        if weight > MAX_ITEMS or depth > MAX_NESTING:
            raise Failed("too large")
    return value


def weight(value: object, weights: Weights) -> int:
    """About how many characters (strings) or machine words (integers, containers) ``value``
    takes, counting what a container holds each time it holds it; ``weights`` as for
    :func:`bounded`."""
    return _weight(value, weights)[0]


def _weight(value: object, weights: Weights) -> tuple[int, int]:
    """About how many characters or machine words ``value`` takes (counted past ``MAX_ITEMS``
    only as far as needed to know it is more), and how deep its containers nest."""
    if isinstance(value, (str, bytes)):
        return len(value), 0
    if isinstance(value, int):
        return 1 + value.bit_length() // 64, 0
    if not isinstance(value, (list, tuple, set, frozenset, dict)):
        return 1, 0
    known = weights.get(id(value))
    if known is not None and known[0] is value:
        return known[1], known[2]
    total, depth = 1, 0
    for item in (*value.keys(), *value.values()) if isinstance(value, dict) else value:
        weight, below = _weight(item, weights)
        total, depth = total + weight, max(depth, below + 1)
        if total > MAX_ITEMS or depth > MAX_NESTING:
            break
    weights[id(value)] = (value, total, depth)
    return total, depth


def joined(sep: str, parts: Iterable[object]) -> str:
    """``sep.join(parts)``, refused before it is built when longer than :data:`MAX_ITEMS`
    (``f'{s}{s}...'`` or ``print(s, s, ...)`` with a long ``s``: each part small, the whole not).

    Raises:
        Failed: too long."""
    texts = [p if isinstance(p, str) else str(p) for p in parts]
    if sum(map(len, texts)) + len(sep) * len(texts) > MAX_ITEMS:
        raise Failed("too large")
    return sep.join(texts)


def separator(sep: object) -> str:
    """The text ``print(..., sep=sep)`` puts between its values, as ``print`` does: ``" "`` when
    ``sep`` is ``None``, else ``sep`` itself, a ``str`` (``""`` included: the values joined).

    Raises:
        TypeError: ``sep`` is none of these (``print()`` raises it too)."""
    if sep is None:
        return " "
    if not isinstance(sep, str):
        raise TypeError("sep must be None or a string")
    return sep


def _heaviest(values: Iterable[object]) -> int:
    return max((_weight(v, {})[0] for v in values), default=0)


def guard_binop(op: type, a: object, b: object) -> None:
    """Refuse an operation whose result would be too large to build (before building it)."""
    if op is ast.Mod and isinstance(a, (str, bytes)) and len(a) + (
            sum(_weight(v, {})[0] for v in b) if isinstance(b, tuple)
            else str(a).count("%") * _weight(b, {})[0]) > MAX_ITEMS:
        raise Failed("too large")  # '%(a)s%(a)s...' % {'a': s}: one value, many times
    if op is ast.Pow and isinstance(b, (int, float)) and (abs(b) > 10_000 or isinstance(a, int) and isinstance(b, int)
                                                          and a.bit_length() * b > 4 * MAX_ITEMS):
        raise Failed("exponent")
    if op is ast.Mod and isinstance(a, (str, bytes)) and ("*" in str(a) or any(
            int(d) > MAX_ITEMS for d in digit_runs(str(a)))):
        raise Failed("width")  # '%0999999999d' % 1, '%*d' % (10**9, 1)
    if op in (ast.LShift,) and isinstance(b, int) and b > MAX_ITEMS:
        raise Failed("shift")
    if op is ast.Mult:
        for seq, n in ((a, b), (b, a)):
            if isinstance(seq, (str, bytes, list, tuple)) and isinstance(n, int) and n * max(len(seq), 1) > MAX_ITEMS:
                raise Failed("too large")


@dataclass
class Record:
    """What one world saw: the first FINAL of the last block, what was printed or echoed where,
    the values assigned where, and whether the code called anything that may print what it read."""

    final: object = None
    finished: bool = False
    printed: dict[tuple[int, int, int], object] | None = None
    assigned: dict[tuple[int, int, int], object] | None = None
    shows: bool = False


class OverBudget(Exception):
    """The code is too long to follow: nothing is traced."""


def digit_runs(text: str) -> list[str]:
    runs, run = [], ""
    for ch in text:
        if ch.isdigit():
            run += ch
        elif run:
            runs.append(run)
            run = ""
    return [*runs, run] if run else runs


def iterated(pos: list[object]) -> list[object]:
    return list(pos[0]) if pos and isinstance(pos[0], (list, tuple, set, frozenset)) else [None]


def guard_method(obj: str, name: str, pos: list[object], kw: dict[str, object] | None = None) -> None:
    """Refuse a ``str`` method call whose result would be too large to build."""
    if name == "replace" and len(pos) >= 2 and isinstance(pos[1], str) and len(obj) * max(1, len(pos[1])) > MAX_ITEMS:
        raise Failed("too large")
    if name == "join" and pos and isinstance(pos[0], (str, list, tuple, set, frozenset, dict)) and \
            sum(len(p) if isinstance(p, str) else 1 for p in pos[0]) + len(obj) * len(pos[0]) > MAX_ITEMS:
        raise Failed("too large")  # ('x' * 99_999).join('y' * 99_999): 10 GB
    if name == "format":  # no '{0.__class__}' or '{0[k]}' (attributes of live objects), no '{:{}}' (width from an argument)
        fields = list(string.Formatter().parse(obj))
        if len(obj) + len(fields) * _heaviest([*pos, *(kw or {}).values()]) > MAX_ITEMS:
            raise Failed("too large")  # '{0}{0}{0}...'.format(s)
        for _, field, spec, _ in fields:
            if field and ("." in field or "[" in field) or spec and ("{" in spec or any(
                    int(d) > MAX_ITEMS for d in digit_runs(spec))):
                raise Failed("format field")


def stored_names(node: ast.AST) -> set[str]:
    """The names ``node`` binds, deletes or may change (``x[i] = ``, ``x.append(...)``)."""
    names: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names.add(n.id)
        elif isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.ctx, (ast.Store, ast.Del)) or (
                isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)):
            base = n.func.value if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) else \
                n.value if isinstance(n, (ast.Subscript, ast.Attribute)) else n
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                base = base.value
            if isinstance(base, ast.Name):
                names.add(base.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and n.name:
            names.add(n.name)
    return names



def agreed(values: list[object], text_only: bool = True) -> object:
    """The one value every world that did not fail gave (at least :data:`MIN_WORLDS` of them), or
    ``None``: a world that never got there, a hole, or two worlds that differ."""
    kept = [v for v in values if v is not FAILED]
    if len(kept) < MIN_WORLDS or any(v is None or holey(v) for v in kept):
        return None
    if text_only and not all(isinstance(v, str) for v in kept):
        return None
    try:
        same = all(type(v) is type(kept[0]) and v == kept[0] for v in kept[1:])
    except Exception:  # a container holding a hole
        return None
    return kept[0] if same else None


@dataclass(frozen=True)
class Samples:
    """The made-up values of one run, by kind (``int``, ``float``, ``str``, ``bool``), and how many
    worlds take them: ``2 * n`` for ``n`` values. In world ``w < n`` every hole of a kind takes its
    ``w``-th value (so two holes are equal there: ``len(a) == len(b)`` can be true), in world
    ``n + w`` the ``k``-th hole made takes value ``w + k`` (so they differ); each hole sweeps every
    value of its kind, the code's own comparison constants among them (``len(files) == 3`` is
    true in some world and false in another)."""

    tables: dict[str, tuple[Sample, ...]]
    size: int

    @property
    def worlds(self) -> int:
        return 2 * self.size

    def value(self, kind: str, world: int, made: int) -> Sample:
        table = self.tables[kind]
        at = world if world < self.size else world + made
        return table[at % len(table)]


def samples_for(trees: list[ast.AST]) -> Samples | None:
    """The :class:`Samples` for code whose syntax trees are ``trees``: the base values plus, for
    each constant the code compares with (``x == 3``, ``n > 10``, ``s in ('a', 'b')``), that
    constant and the values beside it. ``None`` when more than :data:`MAX_SAMPLES` are needed."""
    ints: dict[int, None] = dict.fromkeys(INTS)
    floats: dict[float, None] = dict.fromkeys(FLOATS)
    strs: dict[str, None] = dict.fromkeys(STRS)
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            for operand in (node.left, *node.comparators):
                items = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
                for item in items:
                    value = _constant(item)
                    if isinstance(value, bool) or value is None:
                        continue
                    if isinstance(value, int):
                        ints.update(dict.fromkeys((value - 1, value, value + 1)))
                    elif isinstance(value, float):
                        floats.update(dict.fromkeys((value - 0.5, value, value + 0.5)))
                    elif isinstance(value, str):
                        strs[value] = None
    size = max(len(ints), len(floats), len(strs))
    if size > MAX_SAMPLES:
        return None
    counts = tuple(v for v in ints if v >= 0)
    return Samples({"int": tuple(ints), "count": counts, "float": tuple(floats), "str": tuple(strs), "bool": BOOLS}, size)


def _constant(node: ast.AST) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, (int, float)):
        return -node.operand.value
    return None
