"""The support verdict: does an answer rest on what the run saw? Decided from the run's evidence
when the loop ends, never from the question's wording.

Verdicts (``Support.verdict``):

* ``observed``: the model wrote the answer out, every specific token of it (paths, versions,
  identifiers, numbers: ``grounding.specific_tokens``, the tokens ``ungrounded`` reads) appears in
  what the model was shown (the REPL output it read, leads included, or, in direct mode, the
  corpus; a number only in what its own code printed or in a corpus line the leads quoted, not in
  rlm's counts around them, and not even there once the model's own code printed nothing but
  errors: a number it writes after failing to compute one is no reading), and it had read some
  output of its code that was not an error (an
  answer naming nothing specific needs output of the model's own code: leads alone show lines
  that hold the question's words, not an answer);
* ``computed``: code computed the answer from what it read (``FINAL(n)``, ``FINAL_VAR("report")``),
  no helper of its turn stopped at a default cap, and no token of it was typed into the code as a
  literal that nothing ever showed (``count = 1658; FINAL(count)`` is a written-out guess in
  disguise);
* ``unsupported``: neither. ``unsupported`` lists the tokens never shown, ``objections`` the
  answer checks that objected to this answer and were overruled (the model gave it again after
  the check's limit): ``evidence``, ``empty``, ``ungrounded``, ``default_cap`` (the checks of
  grounding; ``nothing_found`` and ``listed_items`` ask for a second look or a complete list,
  and giving the answer again after them is what they expect);
* ``partial``: the run stopped without a final answer (the iteration limit, a budget).

Support follows the data, not the text (``loop.provenance``): an answer the model's code made from
its own constants alone (``n = len(files) * 0 + 1658``, ``bool(1)``, ``eval('Tr' + 'ue')``) is
judged as written out, and what its code printed of its own constants (``print(1658)``) is no
reading: it is taken out of what the model was shown, and code that printed nothing else printed
nothing it read.

Numbers count from the same floor as the run's ``ungrounded`` check: 0 under ``guided`` (small
models invent small counts: "6 orders" for 1,658), 10 under ``standard`` and ``paper`` (a strong
model reads a small count off a signature or a few lines by eye). How the verdicts did on the
question benchmarks: docs/eval.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from rlm_cli.loop.answers import only_finishes
from rlm_cli.loop.checks import Candidate
from rlm_cli.loop.grounding import grounding
from rlm_cli.loop.provenance import Provenance, provenance
from rlm_cli.shapes import SupportDoc

OBSERVED, COMPUTED, UNSUPPORTED, PARTIAL = "observed", "computed", "unsupported", "partial"
VERDICTS = (OBSERVED, COMPUTED, UNSUPPORTED, PARTIAL)
#: The checks whose objection, overruled, makes an answer unsupported (see the module docstring).
GROUNDING_CHECKS = frozenset({"evidence", "empty", "ungrounded", "default_cap"})


@dataclass(frozen=True)
class Support:
    """What an answer rests on: ``verdict`` (one of :data:`VERDICTS`), the specific tokens of the
    answer nothing showed (``unsupported``), the checks that objected and were overruled
    (``objections``), and ``reason``: one sentence for a person."""

    verdict: str
    unsupported: tuple[str, ...] = ()
    objections: tuple[str, ...] = field(default=())
    reason: str = ""

    def to_dict(self) -> SupportDoc:
        """The ``support`` object of ``--json``, the trajectory and MCP's ``ask``."""
        return {"verdict": self.verdict, "unsupported": list(self.unsupported),
                "objections": list(self.objections), "reason": self.reason}

    @classmethod
    def from_dict(cls, data: object) -> Support | None:
        """The :class:`Support` of a ``support`` object (``None`` when ``data`` is not one)."""
        if not isinstance(data, dict) or data.get("verdict") not in VERDICTS:
            return None
        return cls(str(data["verdict"]), tuple(str(t) for t in data.get("unsupported") or ()),
                   tuple(str(o) for o in data.get("objections") or ()), str(data.get("reason") or ""))


PARTIAL_SUPPORT = Support(PARTIAL, reason="the run stopped without a final answer")

def support_of(c: Candidate, objections: list[str], codes: list[str], min_number: float) -> Support:
    """The verdict on the final answer ``c`` (see the module docstring). ``objections``: the
    checks that would have sent ``c`` back but were past their limit; ``codes``: every code block
    the model wrote in the run; ``min_number``: the floor of the numbers that count as specific
    (the run's ``ungrounded`` floor)."""
    overruled = tuple(dict.fromkeys(o for o in objections if o in GROUNDING_CHECKS))
    prov = provenance(codes)
    c = _as_read(c, prov) if codes else c
    numbers = c.outputs if c.evidence is None else c.evidence
    if c.written_out and not c.own_output and any(not only_finishes(code) for code in codes):
        numbers = ""  # its own code printed nothing but errors: a number it then writes is no reading
    tokens, unseen = grounding(c.answer, c.question, c.shown, numbers, min_number)
    if c.written_out:
        if unseen:
            return Support(UNSUPPORTED, tuple(unseen), overruled, _never_shown(unseen) + _own(c, prov))
        if overruled:
            return Support(UNSUPPORTED, (), overruled, _overruled(overruled))
        if not c.seen_output or not c.outputs.strip():
            return Support(UNSUPPORTED, (), overruled, "the model wrote this answer without having read any output of "
                                                      "its code but errors" + _own(c, prov))
        if not tokens and not c.own_output:
            return Support(UNSUPPORTED, (), overruled, "the answer names nothing the run showed, and the model ran no "
                                                      "code that printed anything it read" + _own(c, prov))
        return Support(OBSERVED, reason="every specific part of the answer appears in what the model read"
                       if tokens else "the model wrote it out after reading the output of its code")
    if unseen:
        all_tokens, not_typed = grounding(c.answer, c.question, "\n".join(prov.literals), None, min_number)
        typed_unseen = [t for t in unseen if t in all_tokens and t not in not_typed]
        if typed_unseen:
            return Support(UNSUPPORTED, tuple(typed_unseen), overruled,
                           f"{_quoted(typed_unseen)} was typed into the code as a literal that nothing the model read "
                           "holds")
    # default_cap objects to any figure given in or right after a capped turn; code that computed the
    # answer in a turn of its own with no cap (max_results=None after the note) answers its objection.
    overruled = tuple(o for o in overruled if o != "default_cap" or c.caps_now)
    if c.caps_now:
        caps = ", ".join(c.caps_now)
        return Support(UNSUPPORTED, (), tuple(dict.fromkeys([*overruled, "default_cap"])),
                       f"{caps} stopped at its default cap in the turn that computed the answer: it may count part "
                       "of the matches")
    if overruled:
        return Support(UNSUPPORTED, (), overruled, _overruled(overruled))
    return Support(COMPUTED, reason="code computed the answer")


def _as_read(c: Candidate, prov: Provenance) -> Candidate:
    """``c`` as the model read the run: what its code printed of its own constants alone
    (``print(1658)``) taken out of what it was shown, its own output counted only when its code
    may have shown it something it read, and an answer its code computed from its own constants
    alone (``n = len(files) * 0 + 1658; FINAL(n)``, ``FINAL(bool(1))``) judged as written out."""
    shown, outputs, evidence = c.shown, c.outputs, c.evidence
    for text in prov.printed:
        shown, outputs = _without(shown, text, last=True), _without(outputs, text, last=True)
        evidence = None if evidence is None else _without(evidence, text, last=False)
    written = c.written_out or (prov.final is not None and prov.final.strip() == c.answer.strip())
    return replace(c, shown=shown, outputs=outputs, evidence=evidence, written_out=written,
                   own_output=c.own_output and prov.shows)


def _without(text: str, piece: str, last: bool) -> str:
    """``text`` without one occurrence of ``piece`` (the last one, or the first)."""
    if not piece.strip():
        return text
    at = text.rfind(piece) if last else text.find(piece)
    return text if at < 0 else text[:at] + text[at + len(piece):]


def _own(c: Candidate, prov: Provenance) -> str:
    if prov.final is not None and prov.final.strip() == c.answer.strip():
        return " (its code made the answer from constants it typed, not from anything it read)"
    return " (what its code printed was constants it typed)" if prov.printed and not prov.shows else ""


def direct_support(answer: str, question: str, corpus_text: str, min_number: float) -> Support:
    """The verdict on a direct-mode answer: the model read the whole corpus, so the answer is
    ``observed`` when every specific token of it appears in ``corpus_text``."""
    c = Candidate(question, answer, True, "direct", 1, 0, True, corpus_text, (), (), corpus_text)
    return support_of(c, [], [], min_number)


def _quoted(tokens: list[str] | tuple[str, ...]) -> str:
    shown = ", ".join(f"`{t}`" for t in tokens[:6])
    return shown + (f" and {len(tokens) - 6} more" if len(tokens) > 6 else "")


def _never_shown(tokens: list[str]) -> str:
    return f"{_quoted(tokens)} appear{'s' if len(tokens) == 1 else ''} in no code output or corpus line the model read"


def _overruled(checks: tuple[str, ...]) -> str:
    names = ", ".join(f"`{c}`" for c in checks)
    return f"rlm's {names} check{'s' if len(checks) > 1 else ''} objected and the model gave the answer again"


def show_with_code(tokens: list[str] | tuple[str, ...]) -> str:
    """The one last request for an answer the checks objected to and the model gave again, when
    nothing the model read supports it (``guided``; ``loop.support``): show it with code."""
    named = ", ".join(f"`{t}`" for t in tokens[:6])
    what = f"{named} in your answer" if named else "your answer"
    return (f"Nothing the REPL printed so far shows {what}, so rlm will mark it as a guess. Write one code block "
            "that computes or prints it from the corpus and call FINAL with what the code gives. If code cannot "
            "show it, call FINAL with the same answer again.")
