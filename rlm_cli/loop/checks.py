"""Answer checks: every rule of the loop that may send an answer back or rewrite it.

Each check is a small unit with one interface: :meth:`Check.review` takes a :class:`Candidate`
(the question, the answer, whether the model wrote it out or code computed it, and what the
model had been shown when it gave it) and returns a :class:`Verdict`: accept, send back with a
note (the loop goes on, the note in the next message), or rewrite the answer. A :class:`Judge`
runs a policy's checks in order, enforces each one's limit per run (a check past its limit
accepts) and emits one ``check`` trajectory event per check per answer it reviewed.

None of them reads the question to guess what kind of answer is wanted (no "does it ask for a
figure" classifier: the one that was here fired on "What does the `retries` parameter mean?").
They look at the answer and at the run's evidence only:

* ``evidence`` (standard): a written-out answer given next to code output the model had not
  read yet, or before it had read any REPL output at all.
* ``empty`` (standard): ``""`` or ``None``.
* ``ungrounded`` (standard): a written-out answer naming specific tokens (identifiers, paths,
  numbers) that appear nowhere the model was shown; under guided, a list of names given again
  after the note loses its items never shown (a rewrite).
* ``default_cap`` (standard): an answer with a figure, given in a turn (or right after one) in
  which a helper stopped at its *default* cap, so the figure may count part of the matches.
* ``nothing_found`` (guided): an answer that reports finding nothing or counts zero: small
  models give up after one search that matched nothing.
* ``listed_items`` (guided): the question lists three or more things and the answer leaves
  some out; answers split over several FINAL blocks or replies are joined (a rewrite).

Every check has a table of realistic questions and answers it must stay silent on
(``tests/loop/test_checks.py``), unlike any ``rlm eval`` template.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from rlm_cli.events import Emit
from rlm_cli.loop import prompts, reply
from rlm_cli.loop.grounding import (
    ANSWER_NUMBER,
    grounding,
    number,
)

ACCEPT_ACTION, SEND_BACK, REWRITE = "accept", "send_back", "rewrite"


@dataclass(frozen=True)
class Candidate:
    """An answer the loop may end on, with what the checks need to judge it.

    ``written_out``: the model wrote the answer itself (a literal in ``FINAL("...")``, a FINAL
    line of its text, a prose reply); ``False`` when code computed it (``FINAL(n)``,
    ``FINAL_VAR("report")``, an f-string with fields). ``source``: ``block``, ``text``, ``prose``
    or ``stuck``. ``unseen_chars``: characters that this reply's code printed before the answer
    and the model had not read (it only reads output in the next message). ``seen_output``: the
    model had read some REPL output (or leads showing corpus lines) before this reply.
    ``shown``: what the model had been shown of the corpus (the first message, every output it
    read, without rlm's notes and tracebacks; ``outputs`` is that output alone). ``default_caps``: helpers that stopped at their default cap in this turn or
    the one before (``["grep"]``). ``extra_answers``: literal answers of further FINAL-only
    blocks of the same reply (a small model writes one per part of its answer).
    """

    question: str
    answer: str
    written_out: bool
    source: str = "block"
    iteration: int = 0
    unseen_chars: int = 0
    seen_output: bool = True
    shown: str = ""
    default_caps: tuple[str, ...] = ()
    extra_answers: tuple[str, ...] = ()
    #: The REPL output the model read (part of ``shown``), without rlm's notes and tracebacks.
    outputs: str = ""
    #: What the model's own code printed and it read, plus the text of the corpus lines the leads
    #: quoted (their ``path:line`` and rlm's counts left out): where the support verdict looks for
    #: numbers (``None``: ``outputs``); and whether any of the model's own code printed something.
    evidence: str | None = None
    own_output: bool = True
    #: Helpers that stopped at their default cap in this turn only (the code that computed an answer).
    caps_now: tuple[str, ...] = ()


@dataclass(frozen=True)
class Verdict:
    """What a check says: ``action`` is ``accept``, ``send_back`` (``note`` says why, for the
    model) or ``rewrite`` (``answer`` is the new answer, ``note`` says what changed, for the
    trajectory). ``waived``: accepted only because this check sent an answer back before and lets
    the second one pass although its objection still holds (the Judge counts it as overruled)."""

    action: str
    note: str = ""
    answer: str | None = None
    waived: bool = False


ACCEPT = Verdict(ACCEPT_ACTION)


class Check:
    """One answer check. Subclasses set :attr:`name` and implement :meth:`review`; a fresh
    instance serves one run (a check may keep state across the answers of that run)."""

    name = "check"

    def __init__(self, limit: int = 1) -> None:
        #: How often this check may fire (send back or rewrite) in one run; past it, it accepts.
        self.limit = limit

    def review(self, c: Candidate) -> Verdict:  # pragma: no cover - abstract
        """The verdict on ``c`` (never raises)."""
        raise NotImplementedError


# -- evidence ----------------------------------------------------------------------------------------

class Evidence(Check):
    """A written-out answer must rest on output the model has read: refused when this reply's
    code printed output it had not read yet (it wrote the answer before the REPL ran), or when
    it had read no REPL output at all (a guess from the corpus description). A computed answer
    (code produced it) is never refused here."""

    name = "evidence"

    def review(self, c: Candidate) -> Verdict:
        if not c.written_out:
            return ACCEPT
        if c.unseen_chars > 0:
            return Verdict(SEND_BACK, prompts.FINAL_WITH_UNSEEN_CODE)
        if not c.seen_output:
            return Verdict(SEND_BACK, prompts.FIRST_TURN_FINAL)
        return ACCEPT


class Empty(Check):
    """``FINAL("")``, ``FINAL(None)``: no answer at all."""

    name = "empty"

    def review(self, c: Candidate) -> Verdict:
        if c.answer.strip() in ("", "None"):
            return Verdict(SEND_BACK, prompts.EMPTY_FINAL)
        return ACCEPT


# -- ungrounded ----------------------------------------------------------------------------------



#: What separates the items of a list written in prose: a comma (and maybe "and"/"or"), or "and"/"or".
_ITEM_SEP = r"(?:\s*,\s*(?:(?:and|or)\s+)?|\s+(?:and|or)\s+)"
#: One item of such a list that is a single name or path (optionally quoted).
_ITEM = r"[`'\"]?[A-Za-z_][\w./-]*\w[`'\"]?"
_NAME_LIST = re.compile(rf"(?<![\w`'\"./-]){_ITEM}(?:{_ITEM_SEP}{_ITEM})+(?![\w`'\"/-]|\.\w)")


def drop_items(answer: str, items: list[str], keep: list[str]) -> str | None:
    """``answer`` with ``items`` taken out of the lists of names it writes in prose (``A, B and
    C``: every item a single name or path, optionally quoted), each list keeping at least one of
    ``keep``; ``None`` when one of ``items`` is not an item of such a list, or a list would keep
    none of ``keep`` (then nothing is dropped)."""
    todo = set(items)
    out: list[str] = []
    pos = 0
    for m in _NAME_LIST.finditer(answer):
        parts = re.split(_ITEM_SEP, m.group(0))
        kept = [p for p in parts if p.strip("`'\"") not in todo]
        if len(kept) == len(parts):
            continue
        if not any(p.strip("`'\"") in keep for p in kept):
            return None
        todo -= {p.strip("`'\"") for p in parts}
        out.append(answer[pos:m.start()])
        out.append(kept[0] if len(kept) == 1 else ", ".join(kept[:-1]) + " and " + kept[-1])
        pos = m.end()
    if todo:
        return None
    return "".join(out) + answer[pos:]


class Ungrounded(Check):
    """A written-out answer whose specific tokens (paths, versions, names, numbers of at least
    ``min_number``; those of the question left out) appear nowhere the model was shown (the
    first message, the REPL output it read): a small model invents outputs and answers from
    them. ``strict=False`` (standard) fires only when *none* of them was shown (an answer quoting
    what it read may add a figure it worked out: ``10 * 1024 * 1024``, "10,485,760 bytes");
    ``strict=True`` (guided) fires on any one not shown. Numbers are looked for in the REPL
    output only (the corpus description's counts of files, characters and tokens hold every
    small number). A computed answer is not checked (code read the corpus for it).

    ``prune`` (guided, with a limit of 2): when, after the note, the model gives a list again
    whose shown items are joined by ones never shown (seen: "codecs.Codec, codecs.StreamWriter,
    codecs.StreamReader" where the output showed ``class Codec(codecs.Codec):``), the unseen
    items are dropped (a rewrite) if each is a whole item and a shown specific one remains;
    otherwise the answer is accepted as before."""

    name = "ungrounded"

    def __init__(self, limit: int = 1, min_number: float = 10, strict: bool = False, prune: bool = False) -> None:
        super().__init__(limit)
        self.min_number = min_number
        self.strict = strict
        self.prune = prune
        self._sent_back = False

    def review(self, c: Candidate) -> Verdict:
        if not c.written_out:
            return ACCEPT
        tokens, unseen = grounding(c.answer, c.question, c.shown, c.outputs, self.min_number)
        if not unseen or not (self.strict or len(unseen) == len(tokens)):
            return ACCEPT
        if not self._sent_back:
            self._sent_back = True
            return Verdict(SEND_BACK, prompts.ungrounded(unseen))
        if self.prune and len(unseen) < len(tokens):
            pruned = drop_items(c.answer, unseen, [t for t in tokens if t not in unseen])
            if pruned is not None and not grounding(pruned, c.question, c.shown, c.outputs, self.min_number)[1]:
                return Verdict(REWRITE, f"dropped {', '.join(unseen[:6])}: never shown, named again after the note",
                               pruned)
        return Verdict(ACCEPT_ACTION, waived=True)  # still never shown: let through once the note was given


# -- default cap ---------------------------------------------------------------------------------

class DefaultCap(Check):
    """An answer that holds a figure (a number the question does not have), given in a turn in
    which a helper stopped at its *default* cap (or right after such a turn): a count or total
    over a capped result misses the rest. A cap the model chose (``max_results=5``) is its own
    decision and is not checked."""

    name = "default_cap"

    def review(self, c: Candidate) -> Verdict:
        if not c.default_caps:
            return ACCEPT
        asked = {number(n) for n in ANSWER_NUMBER.findall(c.question)}
        figures = [n for n in (number(x) for x in ANSWER_NUMBER.findall(c.answer[:2_000])) if n not in asked]
        if not figures:
            return ACCEPT
        return Verdict(SEND_BACK, prompts.default_cap(sorted(set(c.default_caps))))


# -- guided: nothing found ---------------------------------------------------------------------------

#: An answer that counts nothing: "0", "0 requests", "zero", "none", "no matching lines".
_COUNTS_NOTHING = re.compile(
    r"^\W*(?:0|zero|none|no)\W*$|\b(?:0|zero|no)\s+(?:\w+\s+){0,2}?(?:requests?|lines?|rows?|records?|entries|"
    r"matches|results|hits|occurrences?|items?|files?|calls?|errors?|events?|times|users?|customers?|orders?)\b",
    re.IGNORECASE)


def counts_nothing(answer: str) -> bool:
    """Whether a short answer (up to 200 characters) counts nothing: ``0``, ``none``, ``0 rows``,
    ``no matching requests``."""
    return len(answer) <= 200 and _COUNTS_NOTHING.search(answer) is not None


class NothingFound(Check):
    """An answer that says nothing was found (``reply.negative_answer``) or counts zero
    (:func:`counts_nothing`): one search that matched nothing proves little, and small models
    stop there (seen: a filter that matched nothing answered as "none"). Sent back once for a
    second look; the same answer again is accepted."""

    name = "nothing_found"

    def review(self, c: Candidate) -> Verdict:
        if counts_nothing(c.answer):
            return Verdict(SEND_BACK, prompts.CHECK_ZERO)
        if reply.negative_answer(c.answer):
            return Verdict(SEND_BACK, prompts.CHECK_NEGATIVE)
        return ACCEPT


# -- guided: listed items ----------------------------------------------------------------------------

@dataclass
class _Parts:
    answers: list[str] = field(default_factory=list)
    missing: int = 1_000


class ListedItems(Check):
    """The question lists three or more things (``A, B and C``; not "which of A, B and C", which
    asks for one of them) and the answer leaves some out (``reply.missing_items``): sent back
    with the lines of the output already shown that name them. Answers that each give other
    items are joined (a rewrite): the extra FINAL-only blocks of one reply, and the answers sent
    back earlier in the run."""

    name = "listed_items"

    def __init__(self, limit: int = 3) -> None:
        super().__init__(limit)
        self.parts = _Parts()

    def review(self, c: Candidate) -> Verdict:
        q = c.question
        items = reply.listed_items(q)
        if not items:
            return ACCEPT
        answer = c.answer
        if c.extra_answers:
            joined = "\n".join(dict.fromkeys(p for p in [answer, *c.extra_answers] if p.strip()))
            if len(reply.missing_items(q, joined)) < len(reply.missing_items(q, answer)):
                answer = joined
        answer = self._with_earlier_parts(q, answer)
        missing = reply.missing_items(q, answer)
        if missing and len(missing) < self.parts.missing and not self.parts.answers:
            self.parts.missing = len(missing)
            self.parts.answers.append(answer)
            return Verdict(SEND_BACK, prompts.check_missing(missing, items, reply.lines_naming(c.outputs, missing)))
        if answer != c.answer:
            return Verdict(REWRITE, "joined the answers that each give other items of the question", answer)
        return ACCEPT

    def _with_earlier_parts(self, q: str, answer: str) -> str:
        """``answer`` joined with earlier answers that give only items it leaves out (the later
        answer corrects an earlier one about the same item)."""
        if not self.parts.answers:
            return answer
        items = set(reply.listed_items(q))
        covered = items - set(reply.missing_items(q, answer))
        keep: list[str] = []
        for part in reversed(self.parts.answers):
            theirs = items - set(reply.missing_items(q, part))
            if theirs and not theirs & covered:
                keep.insert(0, part)
                covered |= theirs
        return "\n".join(dict.fromkeys([*keep, answer])) if keep else answer


# -- the judge ---------------------------------------------------------------------------------------

#: Every check by name (what ``Policy.checks`` lists).
CHECKS: dict[str, Callable[..., Check]] = {
    "evidence": Evidence, "empty": Empty, "ungrounded": Ungrounded, "default_cap": DefaultCap,
    "nothing_found": NothingFound, "listed_items": ListedItems,
}


@dataclass
class Judged:
    """The outcome of :meth:`Judge.review`: the answer to end on (``None`` when sent back), the
    note for the model, the checks that would have sent the answer back but were past their limit
    (``overruled``), and the candidate as accepted (rewrites applied; ``None`` when sent back)."""

    answer: str | None
    note: str = ""
    overruled: tuple[str, ...] = ()
    candidate: Candidate | None = None


class Judge:
    """Runs ``checks`` (fresh instances, in order) over each candidate answer of one run.

    The first check that sends the answer back stops the review; a rewrite hands the new answer
    to the checks after it. A check that has fired (sent back or rewritten) ``limit`` times
    accepts from then on. A check that lets an answer pass which it sent back before (the same
    answer or another one its objection still holds for: ``Verdict.waived``) or that is past its
    limit has been *overruled* (``Judged.overruled``); one that accepts because its objection no
    longer holds (the model has read output since) has not.
    Each check consulted emits one ``check`` event: ``check`` (its name),
    ``verdict`` (``accept``, ``send_back`` or ``rewrite``), ``iteration``, ``source``,
    ``written_out``, ``answer`` (the answer it judged), ``fired`` (times so far, this one
    included), and ``note`` / ``rewritten`` / ``limit_reached`` / ``waived`` where they apply.
    """

    def __init__(self, checks: list[Check], emit: Emit, depth: int = 0) -> None:
        self.checks = checks
        self.emit = emit
        self.depth = depth
        self.fired: dict[str, int] = {c.name: 0 for c in checks}

    def review(self, c: Candidate) -> Judged:
        from rlm_cli.events import event

        overruled: list[str] = []
        for check in self.checks:
            verdict = check.review(c)
            if verdict.waived:
                overruled.append(check.name)  # its objection holds; it lets the answer pass this time
            exhausted = verdict.action != ACCEPT_ACTION and self.fired[check.name] >= check.limit
            fields: dict[str, Any] = {"check": check.name, "iteration": c.iteration, "source": c.source,
                                      "written_out": c.written_out, "answer": c.answer[:4_000]}
            if exhausted:
                self.emit(event("check", self.depth, verdict=ACCEPT_ACTION, limit_reached=True,
                                fired=self.fired[check.name], **fields))
                overruled.append(check.name)
                continue
            if verdict.action != ACCEPT_ACTION:
                self.fired[check.name] += 1
            extra: dict[str, Any] = {"note": verdict.note} if verdict.note else {}
            if verdict.waived:
                extra["waived"] = True
            if verdict.action == REWRITE and verdict.answer is not None:
                extra["rewritten"] = verdict.answer[:4_000]
            self.emit(event("check", self.depth, verdict=verdict.action, fired=self.fired[check.name], **fields, **extra))
            if verdict.action == SEND_BACK:
                return Judged(None, verdict.note)
            if verdict.action == REWRITE and verdict.answer is not None:
                c = replace(c, answer=verdict.answer)
        return Judged(c.answer, overruled=tuple(dict.fromkeys(overruled)), candidate=c)
