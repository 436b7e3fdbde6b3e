"""The interpreter behind ``loop.provenance``: the model's code run again in made-up worlds.

One :class:`World` runs the pure part of Python (constants, operators, comparisons,
``and``/``or``, conditionals, assignments, containers, f-strings, the builtins of :data:`PURE`,
``str`` methods, ``eval``/``exec`` of a known string) over a namespace of its own. Whatever the
code reads from outside its text is a :class:`Hole`; where the type of a result is certain
whatever a hole holds (``len(x)``, a comparison, a truth test, ``str(x)``), a made-up value of
that type is put in its place, a different one in each world. See ``loop.provenance`` for why.
"""
from __future__ import annotations

import ast
import operator
import time
from collections.abc import Callable, Iterable
from typing import Any

from rlm_cli.loop.holes import (
    BINOPS,
    BUILTINS,
    CMPOPS,
    FAILED,
    FINISHERS,
    MAX_ITEMS,
    MAX_KEPT,
    MAX_STEPS,
    PURE,
    READ_METHODS,
    STR_METHODS,
    TIME_BUDGET,
    Ended,
    Failed,
    Hole,
    OverBudget,
    Record,
    Sample,
    Samples,
    V,
    Weights,
    bounded,
    digit_runs,
    guard_binop,
    guard_method,
    holey,
    iterated,
    joined,
    separator,
    stored_names,
    subscriptable,
    weight,
)
from rlm_cli.sandbox.calls import to_text


class World:
    """One made-up world: the namespace the code builds and where each hole's made-up values go."""

    def __init__(self, index: int, samples: Samples, deadline: float | None = None) -> None:
        """World ``index`` of ``samples``; past ``deadline`` (``time.thread_time()``, by default
        :data:`~rlm_cli.loop.holes.TIME_BUDGET` from now) its run raises ``OverBudget``."""
        self.index = index
        self.deadline = time.thread_time() + TIME_BUDGET if deadline is None else deadline
        self.weights: Weights = {}
        self.kept = 0
        self.samples = samples
        self.env: dict[str, object] = {}
        self.leaves: dict[str, Hole] = {}
        self.made = 0
        self.steps = 0
        self.depth = 0
        self.block = 0
        self.last_block = -1
        self.record = Record(printed={}, assigned={})

    # -- values ------------------------------------------------------------------------------------
    def sample(self, kind: str | None) -> Hole | Sample:
        """A made-up value of ``kind`` (``int``, ``float``, ``str``, ``bool``; a new hole for
        ``None``), as :class:`~rlm_cli.loop.holes.Samples` gives it in this world."""
        self.made += 1
        return Hole() if kind is None else self.samples.value(kind, self.index, self.made)

    def truth(self, value: object) -> bool:
        if holey(value, 0):
            return bool(self.sample("bool"))
        try:
            return bool(value)
        except Exception as exc:
            raise Failed(str(exc)) from None

    def name(self, ident: str) -> object:
        if ident in self.env:
            value = self.env[ident]
            if value is FAILED:
                raise Failed(ident)
            return value
        return self.leaves.setdefault(ident, Hole())  # context, files, a helper, a builtin as a value

    # -- expressions -------------------------------------------------------------------------------
    def ev(self, node: ast.expr) -> object:
        """The value of ``node`` in this world (a hole where it reads something).

        Raises:
            Failed: it fails here (an error, or a value too large to build).
        """
        self.depth += 1
        try:
            if self.depth > 80:
                raise Failed("too deep")
            if time.thread_time() > self.deadline:
                raise OverBudget
            handler = _EXPRESSIONS.get(type(node))
            if handler is None:  # a comprehension, a lambda...: not followed
                return self.sample(None)
            return bounded(handler(self, node), self.weights)
        except (Failed, OverBudget):
            raise
        except Exception as exc:  # an unhashable set item, a bad slice...: fails here as in the REPL
            raise Failed(str(exc)) from None
        finally:
            self.depth -= 1

    def unary(self, node: ast.UnaryOp) -> object:
        value = self.ev(node.operand)
        if isinstance(node.op, ast.Not):
            return not self.truth(value)
        if holey(value):
            return self.sample(None)
        try:
            return _UNARY[type(node.op)](value)
        except Exception as exc:
            raise Failed(str(exc)) from None

    def binop(self, op: type, a: object, b: object) -> object:
        guard_binop(op, a, b)
        try:
            return BINOPS[op](a, b)
        except TypeError:
            if holey(a) or holey(b):
                return self.sample(None)
            raise Failed("type") from None
        except Exception as exc:
            raise Failed(str(exc)) from None

    def compare(self, node: ast.Compare) -> object:
        left = self.ev(node.left)
        result: object = True
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = self.ev(comp)
            if holey(left, 0) or holey(right, 0) or (type(op) in (ast.In, ast.NotIn) and holey(right)):
                result = self.sample("bool")
            else:
                try:
                    result = CMPOPS[type(op)](left, right)
                except TypeError:
                    if not (holey(left) or holey(right)):
                        raise Failed("type") from None
                    result = self.sample("bool")
                except Exception as exc:
                    raise Failed(str(exc)) from None
            if not self.truth(result):
                return result
            left = right
        return result

    def boolop(self, node: ast.BoolOp) -> object:
        value: object = None
        for operand in node.values:
            value = self.ev(operand)
            if self.truth(value) == isinstance(node.op, ast.Or):
                return value
        return value

    def formatted(self, node: ast.FormattedValue) -> str:
        value = self.ev(node.value)
        spec = self.ev(node.format_spec) if node.format_spec is not None else ""
        if holey(value) or holey(spec):
            return str(self.sample("str"))
        convert = _CONVERSIONS.get(node.conversion)
        return self.format(convert(value) if convert else value, spec)

    def format(self, value: object, spec: object) -> str:
        if not isinstance(spec, str) or any(int(d) > MAX_ITEMS for d in digit_runs(spec)):
            raise Failed("spec")  # format() raises TypeError for a spec that is no str
        try:
            return format(value, spec)
        except Exception as exc:
            raise Failed(str(exc)) from None

    def subscript(self, node: ast.Subscript) -> object:
        value, index = self.ev(node.value), self.ev(node.slice)
        if holey(value, 0) or holey(index):
            return self.sample(None)
        if not subscriptable(value):
            raise Failed("not subscriptable")  # value[index] raises TypeError
        try:
            return value[index]
        except Exception as exc:
            raise Failed(str(exc)) from None

    def items(self, nodes: list[ast.expr]) -> list[object]:
        out: list[object] = []
        for node in nodes:
            if isinstance(node, ast.Starred):
                value = self.ev(node.value)
                if isinstance(value, (list, tuple, str)):
                    out.extend(value)
                else:
                    out.append(self.sample(None))
            else:
                out.append(self.ev(node))
        return out

    def mapping(self, node: ast.Dict) -> object:
        if any(k is None for k in node.keys):
            return self.sample(None)
        try:
            return {self.ev(k): self.ev(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
        except TypeError:
            raise Failed("unhashable") from None

    def keep(self, value: V) -> V:
        """``value``, counted against what this world may hold.

        Raises:
            OverBudget: more than :data:`~rlm_cli.loop.holes.MAX_KEPT` kept in all."""
        self.kept += weight(value, self.weights)
        if self.kept > MAX_KEPT:
            raise OverBudget
        return value

    def named(self, node: ast.NamedExpr) -> object:
        value = self.keep(self.ev(node.value))
        self.env[node.target.id] = value
        return value

    # -- calls -------------------------------------------------------------------------------------
    def call(self, node: ast.Call) -> object:
        func = node.func
        if isinstance(func, ast.Attribute):
            return self.method(node, func)
        fname = func.id if isinstance(func, ast.Name) and func.id not in self.env else ""
        if fname in FINISHERS:
            self.finish(fname, node)
            return None
        if fname == "print":
            self.print_(node)
            return None
        if fname in ("eval", "exec") and len(node.args) == 1 and not node.keywords:
            return self.run_text(fname, node.args[0])
        pos, kw = self.arguments(node)
        if fname in PURE:
            if holey(pos) or holey(list(kw.values())):
                return self.sample(PURE[fname])
            return self.builtin(fname, pos, kw)
        self.record.shows = True  # a helper, or a function of the model's: it may print what it read
        if fname in ("globals", "locals", "vars", "exec", "eval", "setattr", "delattr", "__import__"):
            self.env.clear()  # any name may have changed: from now on each one reads as a hole
        return self.sample(None)

    def arguments(self, node: ast.Call) -> tuple[list[object], dict[str, object]]:
        pos = self.items(node.args)
        kw: dict[str, object] = {}
        for k in node.keywords:
            value = self.ev(k.value)
            if k.arg is None:
                pos.append(self.sample(None))  # **mapping: not followed
            else:
                kw[k.arg] = value
        return pos, kw

    def builtin(self, fname: str, pos: list[object], kw: dict[str, object]) -> object:
        if fname == "pow" and len(pos) >= 2:
            guard_binop(ast.Pow, pos[0], pos[1])
        if fname == "sum" and (len(pos) > 1 or not all(isinstance(v, (int, float)) for v in iterated(pos))):
            raise Failed("sum of non-numbers")
        if fname == "round" and any(isinstance(n, int) and abs(n) > 1_000 for n in [*pos[1:], kw.get("ndigits")]):
            raise Failed("digits")  # round(1, -10**7) builds 10**(10**7)
        if fname == "type" and (len(pos) != 1 or kw):
            return self.sample(None)  # type(name, bases, namespace) makes a class: not followed
        if fname == "format" and len(pos) == 2:
            return self.format(pos[0], pos[1])
        try:
            result = BUILTINS[fname](*pos, **kw)
        except Exception as exc:
            raise Failed(str(exc)) from None
        return list(result) if fname == "reversed" and isinstance(result, Iterable) else result

    def method(self, node: ast.Call, func: ast.Attribute) -> object:
        obj = self.ev(func.value)
        pos, kw = self.arguments(node)
        pure = (isinstance(obj, str) and func.attr in STR_METHODS) or (
            isinstance(obj, (dict, list, tuple)) and func.attr in READ_METHODS)
        if pure and not holey(obj) and not holey(pos) and not holey(list(kw.values())):
            if isinstance(obj, str):
                guard_method(obj, func.attr, pos, kw)
            try:
                bound: Callable[..., object] = getattr(obj, func.attr)
                result = bound(*pos, **kw)
            except Exception as exc:
                raise Failed(str(exc)) from None
            return list(result) if func.attr in ("keys", "values", "items") and isinstance(result, Iterable) else result
        if not holey(obj, 0):
            self.record.shows = True  # a method of a module or object the code made: it may print
        if isinstance(func.value, ast.Name) and func.value.id in self.env:
            self.env[func.value.id] = self.sample(None)  # it may have changed its object
        return self.sample(None)

    def finish(self, fname: str, node: ast.Call) -> None:
        """``FINAL(...)`` and its spellings: the first one of the last block is the answer."""
        first = self.block == self.last_block and not self.record.finished
        try:
            values = self.items(node.args)
            if fname == "FINAL_VAR" and len(values) == 1 and isinstance(values[0], str) and values[0].isidentifier():
                values = [self.name(values[0])]
            answer: object = self.sample(None) if holey(values) or node.keywords else joined(" ", map(to_text, values))
        except (Failed, ValueError):  # str() of an integer of 4,300+ digits
            answer = FAILED
        if first:
            self.record.final, self.record.finished = answer, True
        return None

    def print_(self, node: ast.Call) -> None:
        site = (self.block, node.lineno, node.col_offset)
        try:
            pos, kw = self.arguments(node)
            sep = kw.get("sep", " ")
            text: object = None if holey(pos) or holey(sep) else joined(separator(sep), pos)
        except (Failed, TypeError, ValueError):
            text = FAILED
        if text is None:
            self.record.shows = True
        assert self.record.printed is not None
        self.record.printed[site] = self.keep(text)
        return None

    def run_text(self, fname: str, arg: ast.expr) -> object:
        """``eval(text)`` / ``exec(text)`` of a text this world knows: parsed and run here."""
        text = self.ev(arg)
        if not isinstance(text, str):
            self.record.shows = True
            if fname == "exec":
                self.env.clear()
            return self.sample(None)
        try:
            tree = ast.parse(text.strip(), mode="eval" if fname == "eval" else "exec")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            raise Failed("does not parse") from None
        if isinstance(tree, ast.Expression):
            return self.ev(tree.body)
        self.depth += 10
        try:
            self.run_body(tree.body if isinstance(tree, ast.Module) else [])
        finally:
            self.depth -= 10
        return None

    # -- statements --------------------------------------------------------------------------------
    def run_body(self, body: list[ast.stmt], top: bool = False) -> None:
        """Run ``body`` in this world.

        Raises:
            Failed, Ended: the block stops here in this world, as an exception stops it in the REPL.
            OverBudget: more than :data:`MAX_STEPS` statements.
        """
        for stmt in body:
            self.steps += 1
            if self.steps > MAX_STEPS or self.depth > 80 or time.thread_time() > self.deadline:
                raise OverBudget
            self.statement(stmt, top)

    def statement(self, stmt: ast.stmt, top: bool) -> None:
        if isinstance(stmt, ast.Expr):
            self.expression_statement(stmt, top)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            if stmt.value is None:
                return
            value = self.keep(self.ev(stmt.value))
            assert self.record.assigned is not None
            if isinstance(value, (str, int, float)):  # what Provenance.literals may hold
                self.record.assigned[(self.block, stmt.lineno, stmt.col_offset)] = value
            for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                self.bind(target, value)
        elif isinstance(stmt, ast.AugAssign):
            current = self.ev(stmt.target) if isinstance(stmt.target, ast.Name) else self.sample(None)
            self.bind(stmt.target, self.keep(bounded(self.binop(type(stmt.op), current, self.ev(stmt.value)), self.weights)))
        elif isinstance(stmt, ast.If):
            self.run_body(stmt.body if self.truth(self.ev(stmt.test)) else stmt.orelse)
        elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
            self.loop(stmt)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                self.ev(item.context_expr)
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, self.sample(None))
            self.run_body(stmt.body)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            self.attempt(stmt)  # type: ignore[arg-type]
        elif isinstance(stmt, ast.Delete):
            for target in stmt.targets:
                for name in stored_names(target):
                    self.env.pop(name, None)
        elif isinstance(stmt, (ast.Raise, ast.Return)):
            raise Ended
        elif not isinstance(stmt, (ast.Pass, ast.Break, ast.Continue, ast.Global, ast.Nonlocal, ast.Assert)):
            self.forget(stmt)  # def, class, import, match...: what it binds is not followed

    def expression_statement(self, stmt: ast.Expr, top: bool) -> None:
        value = self.ev(stmt.value)
        if holey(value, 0) and isinstance(stmt.value, ast.Call):
            self.record.shows = True  # called for what it does (sys.stdout.write, logging...): it may print
        if not top or value is None:
            return
        # the REPL shows the value of a top-level expression: a str as it is, anything else as its repr
        text: object
        try:
            text = None if holey(value) else value if isinstance(value, str) else repr(value)
        except ValueError:  # repr() of an integer of 4,300+ digits: the REPL fails there too
            text = FAILED
        if text is None:
            self.record.shows = True
        assert self.record.printed is not None
        self.record.printed[(self.block, stmt.lineno, stmt.col_offset)] = self.keep(text)

    def loop(self, stmt: ast.For | ast.AsyncFor | ast.While) -> None:
        """A loop runs its body once here, or not at all; every name it assigns is a hole before
        and after (how many times it ran, and so what they hold, is not followed)."""
        self.forget(stmt)
        if isinstance(stmt, ast.While):
            runs = self.truth(self.ev(stmt.test))
        else:
            items = self.ev(stmt.iter)
            runs = self.truth(items)
            self.bind(stmt.target, self.sample(None))
        self.run_body(stmt.body if runs else stmt.orelse)
        self.forget(stmt)

    def attempt(self, stmt: ast.Try) -> None:
        try:
            self.run_body(stmt.body)
            self.run_body(stmt.orelse)
        except (Failed, Ended):
            pass
        for handler in stmt.handlers:
            self.forget(handler)
        self.run_body(stmt.finalbody)

    def forget(self, node: ast.AST) -> None:
        """Make a hole of every name ``node`` binds or may change."""
        for name in stored_names(node):
            self.env[name] = self.sample(None)
        if any(isinstance(n, ast.Call) for n in ast.walk(node)):
            self.record.shows = True

    def bind(self, target: ast.expr, value: object) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            parts = target.elts
            if isinstance(value, (list, tuple, str)) and not holey(value, 0) \
                    and not any(isinstance(p, ast.Starred) for p in parts) and len(value) == len(parts):
                for part, item in zip(parts, value, strict=True):
                    self.bind(part, item)
            else:
                for part in parts:
                    self.bind(part, self.sample(None))
        elif isinstance(target, ast.Starred):
            self.bind(target.value, self.sample(None))
        else:  # x[i] = ..., x.a = ...: x changed
            for name in stored_names(target):
                self.env[name] = self.sample(None)


_CONVERSIONS: dict[int, Callable[[object], str]] = {115: str, 114: repr, 97: ascii}  # !s, !r, !a
_UNARY: dict[type, Callable[[Any], object]] = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}
#: ``Any`` above: operands as for :data:`~rlm_cli.loop.holes.BINOPS`; a handler's node, of the type it is filed under.
_EXPRESSIONS: dict[type, Callable[[World, Any], object]] = {
    ast.Constant: lambda w, n: n.value,
    ast.Name: lambda w, n: w.name(n.id),
    ast.JoinedStr: lambda w, n: joined("", (w.ev(v) for v in n.values)),
    ast.FormattedValue: World.formatted,
    ast.BinOp: lambda w, n: w.binop(type(n.op), w.ev(n.left), w.ev(n.right)),
    ast.UnaryOp: World.unary,
    ast.BoolOp: World.boolop,
    ast.Compare: World.compare,
    ast.IfExp: lambda w, n: w.ev(n.body) if w.truth(w.ev(n.test)) else w.ev(n.orelse),
    ast.Call: World.call,
    ast.Attribute: lambda w, n: (w.ev(n.value), w.sample(None))[1],
    ast.Subscript: World.subscript,
    ast.Slice: lambda w, n: slice(*(w.ev(p) if p is not None else None for p in (n.lower, n.upper, n.step))),
    ast.List: lambda w, n: w.items(n.elts),
    ast.Tuple: lambda w, n: tuple(w.items(n.elts)),
    ast.Set: lambda w, n: set(w.items(n.elts)),
    ast.Dict: World.mapping,
    ast.NamedExpr: World.named,
}

