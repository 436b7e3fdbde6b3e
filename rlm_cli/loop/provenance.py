"""Where a value of the model's code comes from: the code's own constants, or what it read.

The support verdict (``loop.support``) must follow the data, not the text: ``FINAL(1658)``,
``n = len(files) * 0 + 1658``, ``bool(1)``, ``len(context) > 10**9 or True`` and
``eval('Tr' + 'ue')`` all give a value that the code's constants alone decide, whatever the
corpus holds, and ``print(1658)`` shows the model nothing it did not type. Matching shapes one by
one would miss the next spelling, so the question is asked of the values instead: *would the
value be the same if the corpus were different?*

The model's code (every block of the run, in order) is run again here, abstractly, in a few
made-up worlds (``loop.holes.Samples``: a dozen or more), by a small interpreter of the pure part of
Python (``loop.worlds``: constants, operators, comparisons, ``and``/``or``, conditionals,
assignments, containers, f-strings, pure builtins such as ``len``/``str``/``bool``/``min``,
``str`` methods, ``eval``/``exec`` of a known string). Everything the code reads from outside its
own text (``context``, ``files``, ``chunks``, a helper's result, a name it never assigned, an
attribute, a function it defined) is a *hole*: a value of its own in each world that refuses every
operation, so whatever is made from it is a hole too. Only where the type of a result is certain
whatever the hole holds is a made-up value put in its place: ``len(x)``, ``int(x)`` are integers
(0, 1, 2, 7, 10**12+3, -1, and each constant the code compares with and the integers beside it), a
comparison or a truth test is ``True`` or ``False``, ``str(x)`` a string; each hole sweeps all of
them across the worlds, equal to the other holes in some worlds and different in others. A value
that comes out the same in every world did not depend on anything the code read:
``len(files) * 0 + 1658`` is 1658 in each, ``len(context) > 10**9 or True`` is ``True`` in each,
while ``len(files)``, ``len(files) == 3`` or ``"yes" if grep(...) else "no"`` differ.

This is a test, not a proof, and it leans one way: anything the interpreter does not follow
(loops are run once, with every name they assign made a hole before and after; functions the code
defines; method calls on what it read; ``globals()``) gives holes, so a value it cannot trace
counts as read, never as typed. It costs no model call and a few milliseconds (the code is capped
at :data:`MAX_CODE` characters, :data:`MAX_STEPS` statements per world and
:data:`~rlm_cli.loop.holes.TIME_BUDGET` seconds of CPU in all), so a strong model pays nothing extra.

It runs in rlm's own process, outside the sandbox, on code a hostile corpus may have steered, so
it calls no function with effects, reads no attribute (``str.format`` fields such as
``{0.__class__}`` are refused too), makes no class, and refuses before building anything large
(``loop.holes``: a container weighs what it holds each time it holds it, nested at most
:data:`~rlm_cli.loop.holes.MAX_NESTING` deep, and a world keeps at most
:data:`~rlm_cli.loop.holes.MAX_KEPT`); code past a limit is not traced (``Provenance()``).
"""

from __future__ import annotations

import ast
import time
from dataclasses import dataclass

from rlm_cli.loop.holes import FAILED, MAX_CODE, TIME_BUDGET, Ended, Failed, Record, agreed, holey, samples_for
from rlm_cli.loop.worlds import World
from rlm_cli.sandbox.calls import to_text


@dataclass(frozen=True)
class Provenance:
    """What the model's code makes of its own constants alone (the same in every world).

    ``final``: the answer text of the first ``FINAL`` (any spelling, ``FINAL_VAR`` too) of the last
    block, when the constants alone give it, else ``None``; ``printed``: the texts the code printed
    or the REPL echoed that the constants alone give, in order; ``literals``: the ``str``/number
    values assigned to names that the constants alone give (``x = 6``, ``x = str(1658)``,
    ``n = len(files) * 0 + 1658``); ``shows``: whether the code may have shown the model anything
    it read (printed a value that is not the code's own, or called a helper or a function that may
    print). Code too long to follow gives ``Provenance()``: nothing is the code's own."""

    final: str | None = None
    printed: tuple[str, ...] = ()
    literals: tuple[str, ...] = ()
    shows: bool = True


def provenance(codes: list[str]) -> Provenance:
    """The :class:`Provenance` of ``codes``, every block the model wrote in the run, in order (the
    last one is the block that gave the answer). Blocks that do not parse are skipped. Never
    raises: a value this test cannot handle (``str()`` of an integer of more than 4,300 digits,
    say) gives ``Provenance()``, the verdict as before this test."""
    try:
        return _provenance(codes)
    except Exception:
        return Provenance()


def _provenance(codes: list[str]) -> Provenance:
    deadline = time.thread_time() + TIME_BUDGET  # parsing counts too: 100,000 characters take ~0.2 s
    if sum(len(c) for c in codes) > MAX_CODE:
        return Provenance()
    trees = [_parsed(code) for code in codes]
    samples = samples_for([t for t in trees if t is not None])
    if samples is None or time.thread_time() > deadline:
        return Provenance()
    records: list[Record] = []
    for index in range(samples.worlds):
        world = World(index, samples, deadline)
        world.last_block = len(trees) - 1
        for world.block, tree in enumerate(trees):
            try:
                if tree is not None:
                    world.run_body(tree.body, top=True)
            except (Failed, Ended):
                if world.block == world.last_block and not world.record.finished:
                    world.record.final, world.record.finished = FAILED, True
            except Exception:  # OverBudget, RecursionError, or Python this interpreter does not know:
                return Provenance()  # nothing is the code's own (the verdict as before this test)
        records.append(world.record)
    final = agreed([r.final if r.finished else None for r in records])
    printed: list[str] = []
    shows = any(r.shows for r in records)
    for site in _sites(records, "printed"):
        texts = [(r.printed or {}).get(site) for r in records]
        text = agreed(texts)  # a str or None (text_only)
        if isinstance(text, str):
            printed.append(text)
        elif any(t is not None and t is not FAILED for t in texts):
            shows = True  # printed something that differs from world to world: something it read
    literals = [v for v in (agreed([(r.assigned or {}).get(site) for r in records], text_only=False)
                            for site in _sites(records, "assigned")) if v is not None]
    return Provenance(final if isinstance(final, str) else None, tuple(printed), tuple(str(v) for v in literals if isinstance(v, (str, float)) or (
        isinstance(v, int) and not isinstance(v, bool) and v.bit_length() < 4 * 3_300)), shows)  # str(): 4,300 digits


def written_value(node: ast.expr) -> bool:
    """Whether the expression ``node`` is a value written out: the code's constants alone give it
    (no name any earlier code assigned is known here): ``'1' + '658'``, ``'%d' % 1658``,
    ``str(1658)``, ``bool(1)``, ``eval('Tr' + 'ue')``, ``len(files) * 0 + 1658``. A value that
    depends on anything read (``len(files)``, ``context.count(...)``, a variable) is computed."""
    values: list[object] = []
    deadline = time.thread_time() + TIME_BUDGET
    samples = samples_for([node])
    if samples is None:
        return False
    for index in range(samples.worlds):
        world = World(index, samples, deadline)
        try:
            value = world.ev(node)
            values.append(world.sample(None) if holey(value) else to_text(value))
        except Failed:
            values.append(FAILED)
        except Exception:  # OverBudget, RecursionError...: not a value written out
            return False
    return agreed(values) is not None


def _parsed(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _sites(records: list[Record], kind: str) -> list[tuple[int, int, int]]:
    sites: dict[tuple[int, int, int], None] = {}
    for r in records:
        sites.update(dict.fromkeys(getattr(r, kind) or {}))
    return sorted(sites)

