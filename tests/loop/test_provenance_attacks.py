"""The provenance interpreter (``loop.provenance``, ``loop.worlds``) runs the model's code again in
rlm's own process, outside the sandbox, and that code may be steered by a hostile corpus. It must
reach no attribute of a live object, make no class, build nothing huge, nest nothing deep enough
to reach the C stack, and stop within its time budget; each case here was a way past one of
those. A case it refuses gives no value of the code's own (``final`` is ``None``): the verdict
as before the test, never a crash."""

from __future__ import annotations

import ast
import time

import pytest

from rlm_cli.loop import provenance as provenance_module
from rlm_cli.loop.holes import (
    MAX_ITEMS,
    MAX_KEPT,
    Failed,
    OverBudget,
    bounded,
    guard_binop,
    guard_method,
    joined,
    samples_for,
)
from rlm_cli.loop.provenance import Provenance, provenance, written_value
from rlm_cli.loop.worlds import World

#: Code that, before the guards, read a live object's attributes, made a class or built something
#: huge in rlm's process (a FINAL of a constant when it went through: the guards make it fail).
REFUSED = {
    # str.format's field syntax reads attributes and items of the arguments: '{0.__class__.__mro__}'
    "format reads an attribute": "FINAL('{0.__class__.__mro__}'.format(''))",
    "format reads an item": "FINAL('{0[0]}'.format('ab'))",
    # '{:>{}}'.format(1, 10**8) built a string of 10**8 characters (1.3 s, 100 MB) before it was refused
    "format takes its width from an argument": "FINAL('{:>{}}'.format(1, 5))",
    # type(name, bases, namespace) made a class in rlm's process
    "type makes a class": "FINAL(str(type('X', (), {})))",
    # round(1, -10**7) computes 10**(10**7) in C: it never came back
    "round to a huge number of digits": "FINAL(round(1, -2000))",
    # [s] * n holds s n times: str() of it was n * 99,999 characters (10 GB for n = 99,999)
    "a list holding a long string many times": "s = 'a' * 99_999\ny = [s] * 200\nFINAL(len(y))",
    "a list of large integers": "x = 2 ** 200_000\ny = [x] * 1_000\nFINAL(len(y))",
    # a tuple nested deeper than the C stack takes to hash ({x}) or print
    "nesting": "x = 1\n" + "x = (x,)\n" * 60 + "FINAL(len(str(x)))",
}


@pytest.mark.parametrize("code", REFUSED.values(), ids=list(REFUSED))
def test_what_the_interpreter_refuses_gives_no_value_of_the_code_s_own(code: str) -> None:
    assert provenance([code]).final is None


def test_the_same_code_made_small_is_still_followed() -> None:
    """The guards refuse by size, not by shape: the small forms of the cases above still count
    as the code's own."""
    assert provenance(["FINAL('{0}-{1:>3}'.format('a', 7))"]).final == "a-  7"
    assert provenance(["FINAL(type(1) is int or True)"]).final == "True"
    assert provenance(["FINAL(round(1658.4, 0) + round(1, -2))"]).final == "1658.0"
    assert provenance(["y = ['ab'] * 200\nFINAL(len(str(y)))"]).final == str(len(str(["ab"] * 200)))
    assert provenance(["x = 1\n" + "x = (x,)\n" * 20 + "FINAL(len(str(x)))"]).final == "61"


def test_a_container_weighs_what_it_holds_each_time_it_holds_it() -> None:
    s = "a" * 1_000
    assert bounded([s] * 99) == [s] * 99
    with pytest.raises(Failed):
        bounded([s] * 101)
    shared: object = 1
    for _ in range(40):  # 2**40 leaves, 41 distinct tuples: weighed once each
        shared = (shared, shared)
    with pytest.raises(Failed):
        bounded(shared)
    assert bounded(["x"] * (MAX_ITEMS - 1)) is not None


def test_a_run_past_its_time_budget_traces_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Code made of many operations each cheap on its own (thousands of big-integer divisions)
    is stopped by the clock: the whole test has :data:`~rlm_cli.loop.holes.TIME_BUDGET`."""
    assert provenance(["FINAL(1658)"]).final == "1658"
    assert written_value(ast.parse("1657 + 1", mode="eval").body)
    monkeypatch.setattr(provenance_module, "TIME_BUDGET", -1.0)
    assert provenance(["FINAL(1658)"]) == Provenance()
    assert not written_value(ast.parse("1657 + 1", mode="eval").body)
    samples = samples_for([])
    assert samples is not None
    world = World(0, samples, deadline=time.thread_time() - 1.0)
    with pytest.raises(OverBudget):
        world.ev(ast.parse("1 + 1", mode="eval").body)


def test_a_length_is_never_negative() -> None:
    """``len()`` of what the code read is made up as a count: ``len(files) >= 0`` is true in
    every world, so the value it guards is the code's own."""
    assert provenance(["FINAL(1658 if len(files) >= 0 else 0)"]).final == "1658"
    assert provenance(["FINAL(1658 if len(files) > 0 else 0)"]).final is None
    assert provenance(["FINAL(int(context) >= 0)"]).final is None


def test_one_value_repeated_many_times_in_one_text_is_refused_before_it_is_built() -> None:
    """Each part small, the whole huge: ``'{0}{0}...'.format(s)``, ``'%(a)s%(a)s...' % {'a': s}``,
    ``f'{s}{s}...'``, ``print(s, s, ...)``, ``FINAL(s, s, ...)`` (33,000 fields of a 99,999-character
    ``s`` fit in the code read: 3.3 GB in rlm's process, in each world)."""
    s = "a" * 40_000
    with pytest.raises(Failed):
        guard_method("{0}" * 3, "format", [s])
    with pytest.raises(Failed):
        guard_method("{x}" * 3, "format", [], {"x": s})
    with pytest.raises(Failed):
        guard_binop(ast.Mod, "%(a)s" * 3, {"a": s})
    with pytest.raises(Failed):
        guard_binop(ast.Mod, "%s%s%s", (s, s, s))
    with pytest.raises(Failed):
        joined("", [s, s, s])
    for parts in ("y" * 3, {"a", "b", "c"}, {"a": 1, "b": 2, "c": 3}):  # (s * 99_999).join(...): 10 GB
        with pytest.raises(Failed):
            guard_method(s, "join", [parts])
    guard_method(s, "join", ["ab"])
    guard_method("{0}{0}", "format", [s])
    guard_binop(ast.Mod, "%(a)s%(a)s", {"a": s})
    assert joined("-", ["a", 1]) == "a-1"
    code = "s = 'a' * 40_000\nprint(s, s, s)\nFINAL(s, s, s)"
    assert provenance([code]).final is None and provenance([code]).printed == ()
    assert provenance(["print('a', 7, sep='-')\nFINAL(f'{1}-{2}' + '%s/%d' % ('a', 3) + '{0}{x}'.format('b', x=4))"]) \
        == Provenance(final="1-2a/3b4", printed=("a-7",), shows=False)


def test_an_augmented_assignment_is_bounded_as_any_other_value() -> None:
    """``x += x`` (a string doubled, an integer squared with ``x *= x``) stops where the value is
    too large, as ``x = x + x`` does (before, the next read of ``x`` refused it, one step later)."""
    assert provenance(["x = 'ab'\n" + "x += x\n" * 10 + "FINAL(len(x))"]).final == "2048"
    assert provenance(["x = 'ab'\n" + "x += x\n" * 20 + "FINAL(1)"]).final is None  # stops where x is too long
    assert provenance(["x = 3\n" + "x *= x\n" * 30 + "FINAL(1)"]).final is None


def test_what_one_world_keeps_is_bounded() -> None:
    """Each value small enough, the sum not: 5,000 names each bound to a new string of 99,999
    characters held 500 MB in each world."""
    samples = samples_for([])
    assert samples is not None
    world = World(0, samples)
    for _ in range(MAX_KEPT // MAX_ITEMS):
        world.keep("a" * MAX_ITEMS)
    with pytest.raises(OverBudget):
        world.keep("a")
    code = "".join(f"x{i} = 'a' * 99_999\n" for i in range(MAX_KEPT // 99_999 + 1)) + "FINAL(1)"
    assert provenance([code]) == Provenance()
    assert provenance(["x1 = 'a' * 99_999\nx2 = 'b' * 99_999\nFINAL(1)"]).final == "1"


def test_a_huge_integer_assigned_does_not_hide_a_typed_answer() -> None:
    """``str()`` of an integer of more than 4,300 digits raises: assigning one anywhere made the
    whole test give ``Provenance()``, so the typed ``FINAL(1658)`` beside it passed as computed."""
    for code in ("x = 10 ** 5000", "10 ** 5000", "print(10 ** 5000)", "FINAL(10 ** 5000)"):
        assert provenance([code, "FINAL(1658)"]).final == "1658", code
    assert provenance(["x = 10 ** 50\nFINAL(1658)"]).literals == (str(10**50),)
