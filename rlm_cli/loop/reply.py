"""Reading a root-model reply: its code blocks, text that claims their output, a FINAL written
as text, and whether prose is an answer at all. Pure functions (no I/O), tested in
``tests/loop/test_reply.py``.

Why this exists: models, small ones above all, write a ```repl block and then go on to write
what they imagine its output to be ("Output: ..."), more blocks built on that imagined output,
and a FINAL based on it, all in one reply. rlm runs the real code; this module finds where the
real evidence ends so that the orchestrator runs nothing written on imagined output, keeps that
text out of the history and never lets it end the run.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass

_CODE_BLOCK = re.compile(r"```(repl|python|py|python3)[ \t]*\n(.*?)```", re.DOTALL)
_ANY_FENCE = re.compile(r"```.*?```", re.DOTALL)
_FINAL_START = re.compile(r"^[ \t>*_`]*(FINAL_VAR|FINAL)\(", re.MULTILINE)
_PROSE_FINAL = re.compile(r"\bFINAL(?:_VAR)?\s*\(")
#: A line that presents output or a result: "Output:", "**Result**:", "The output is:", "This prints",
#: "Expected output:", "# Output", or a fence that is not code (```output, ```text, ```json, a bare ```).
_CLAIM = re.compile(
    r"^[ \t>#*_]*(?:(?:the |expected |sample |example |this |which |it |that )?(?:output|result|results|prints?|"
    r"returns?|outputs|gives|shows|yields)\b[^\n]{0,40}?[:=]|(?:this|it|that|which) (?:will )?(?:print|output|"
    r"return|show|give|yield)s?\b|```(?!repl\b|python3?\b|py\b)\w*[ \t]*$)",
    re.IGNORECASE | re.MULTILINE)
#: Phrases of a reply that plans or declines instead of answering.
_NON_ANSWER = re.compile(
    r"\b(?:I(?:'ll| will| need to| am going to| would need| cannot| can't| can ?not| don't have| do not have)|"
    r"let me|let's|let us|we need to|we can|we will|we'll|to answer (?:this|the question)|first,? (?:I|we)|"
    r"next,? (?:I|we)|unable to|not possible|too (?:large|big|long)|please provide|you (?:can|could|need to|should)|"
    r"no (?:information|answer) (?:was |is )?(?:found|available)|need more (?:information|context))\b",
    re.IGNORECASE)
_ANSWER_LINE = re.compile(r"^[ \t>#*_]*(?:the )?final answer(?: is)?[*_ \t]*[:\uff1a][*_ \t]*(.*)$",
                          re.IGNORECASE | re.MULTILINE)
#: An answer that reports finding nothing ("not found", "does not exist", "no hits"...).
_NEGATIVE = re.compile(
    r"\b(?:not (?:be )?(?:found|present|defined|available|provided|mentioned|listed|in the (?:corpus|context|file))|"
    r"(?:could|can|did)(?: ?not|n't) (?:find|locate|determine|be found)|cannot (?:find|locate|determine)|"
    r"(?:does|do|did) ?(?:not|n't) (?:exist|appear|contain|have|take|define|mention|include)|no (?:hits|matches|results|"
    r"information|mention|such|occurrences?|definition)|none (?:was |were )?found|unable to|there (?:is|are|were) no|"
    r"no\b[^.\n]{0,80}?\b(?:was |were )?found)\b",
    re.IGNORECASE)
_ERROR_LINE = re.compile(r"^([A-Z][A-Za-z]*(?:Error|Exception|Exit|Interrupt)\b.*)$", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    """A code block: its code and where the whole fenced block starts and ends in the reply."""

    code: str
    start: int
    end: int


@dataclass(frozen=True)
class TextFinal:
    """A ``FINAL(...)`` / ``FINAL_VAR(...)`` call written as a line of the reply's text.

    ``source`` is the text between the parentheses; ``offset`` where the call starts.
    """

    func: str
    source: str
    offset: int

    @property
    def call(self) -> str:
        """The call as Python source (run in the REPL to get its value); ``FINAL_VAR(name)`` of a
        bare name is quoted, so an undefined name is reported as such, as in a code block."""
        if self.func == "FINAL_VAR" and self.source.strip().isidentifier():
            return f"FINAL_VAR({self.source.strip()!r})"
        return f"{self.func}({self.source})"

    def literal(self) -> str | None:
        """The answer text when the argument is written out by the model (a string or number
        literal, or text that is not Python at all); ``None`` when it names a variable or is an
        expression, whose value must come from the REPL. A ``FINAL_VAR`` of a quoted identifier
        names a variable; of any other quoted text it is that text (as in a code block)."""
        src = self.source.strip()
        try:
            node = ast.parse(src, mode="eval").body
        except SyntaxError:
            if self.func == "FINAL_VAR" and src.isidentifier():
                return None
            if len(src) >= 2 and src[0] == src[-1] and src[0] in "\"'":
                return src[1:-1]
            return src
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float)):
            value = str(node.value)
            if self.func == "FINAL_VAR" and value.isidentifier():
                return None
            return value
        return None


def code_blocks(text: str) -> list[Block]:
    """The blocks of ``text`` to run, in order: its ```repl blocks when it has any, else its
    ```python / ```py blocks.

    A reply that uses the ```repl fence the system prompt asks for and also writes ```python
    blocks uses the latter for illustration ("the corrected code would be ..."): seen with
    Qwen2.5-Coder-1.5B, whose illustration blocks ran as code, failed, and were repeated until
    the iteration limit. Models that never write ```repl still have their ```python blocks run.
    """
    found = list(_CODE_BLOCK.finditer(text))
    if any(m.group(1) == "repl" for m in found):
        found = [m for m in found if m.group(1) == "repl"]
    return [Block(m.group(2), m.start(), m.end()) for m in found]


def outside_code(text: str) -> str:
    """``text`` without its fenced blocks."""
    return _ANY_FENCE.sub("", text)


def claims_output(segment: str) -> bool:
    """Whether text written after a code block presents that code's output or result (which the
    model cannot have seen: the REPL's output only arrives in the next message)."""
    return bool(_CLAIM.search(segment))


@dataclass(frozen=True)
class Plan:
    """What to do with a reply: run ``blocks[:runnable]``; the evidence ends at ``cut`` (the reply
    is kept only up to there in the history); ``claimed`` says text claimed output after block
    ``runnable`` (so later blocks and any text FINAL were written on imagined output)."""

    blocks: list[Block]
    runnable: int
    cut: int
    claimed: bool

    @property
    def dropped(self) -> int:
        """Blocks not run because they follow claimed output."""
        return len(self.blocks) - self.runnable


def plan(text: str) -> Plan:
    """Split a reply at the first code block followed by text that claims its output."""
    blocks = code_blocks(text)
    for i, b in enumerate(blocks):
        nxt = blocks[i + 1].start if i + 1 < len(blocks) else len(text)
        if claims_output(text[b.end:nxt]):
            return Plan(blocks, i + 1, b.end, True)
    return Plan(blocks, len(blocks), len(text), False)


def plan_all(text: str) -> Plan:
    """Every block of a reply, run in order (the paper's loop: no claimed-output cut)."""
    blocks = code_blocks(text)
    return Plan(blocks, len(blocks), len(text), False)


def find_text_final(text: str, *, answer_lines: bool = True) -> TextFinal | None:
    """The first FINAL/FINAL_VAR call that starts a line of ``text`` outside code blocks, else
    (with ``answer_lines``) a "Final answer: ..." line (:func:`find_answer_line`).

    Mentions inside prose ("I will call FINAL() later") do not count: the call must start its
    own line. A one-line call ends at its last ``)``; a call whose first line does not close
    runs to the last ``)`` of the reply (a multi-line answer). ``FINAL()`` with nothing inside
    is not a call.
    """
    fences = [(f.start(), f.end()) for f in _ANY_FENCE.finditer(text)]
    m = next((c for c in _FINAL_START.finditer(text) if not any(a <= c.start() < b for a, b in fences)), None)
    if m is None:
        return find_answer_line(text) if answer_lines else None
    rest = outside_code(text[m.end():])
    first_line = rest.split("\n", 1)[0].rstrip().rstrip("`*_ .")
    if first_line.endswith(")"):
        inner = first_line[:-1]
    else:
        whole = rest.rstrip().rstrip("`*_ .")
        if not whole.endswith(")"):
            return None
        inner = whole[:-1]
    if not inner.strip():
        return None
    return TextFinal(m.group(1), inner.strip(), m.start())


def find_answer_line(text: str) -> TextFinal | None:
    """A line of the text (outside code) that states the final answer in words: ``Final answer:
    ...`` / ``**Final Answer**: ...`` / ``The final answer is: ...``. Returns it as the literal
    ``FINAL`` it means (the rest of the line, or the next paragraph when the line ends at the
    colon), or ``None``."""
    fences = [(f.start(), f.end()) for f in _ANY_FENCE.finditer(text)]
    m = next((c for c in _ANSWER_LINE.finditer(text) if not any(a <= c.start() < b for a, b in fences)), None)
    if m is None:
        return None
    value = m.group(1).strip().strip("*_ ")
    if not value:
        rest = outside_code(text[m.end():]).strip()
        value = rest.split("\n\n", 1)[0].strip()
    if not value:
        return None
    return TextFinal("FINAL", repr(value), m.start())


def mentions_final(text: str) -> bool:
    """Whether the text outside code blocks mentions a FINAL call (e.g. "I will call FINAL() once done")."""
    return bool(_PROSE_FINAL.search(outside_code(text)))


_NOTE_LINE = re.compile(r"^[ \t]*\[[^\]\n]*\][ \t]*$\n?", re.MULTILINE)


def without_notes(text: str) -> str:
    """``text`` without lines that are wholly in square brackets: small models end a reply with
    an imitation of rlm's own notes ("[You can now call FINAL(answer)...]"), which is not part of
    what they answer."""
    return _NOTE_LINE.sub("", text)


def looks_like_answer(text: str) -> bool:
    """Whether a prose reply (no code, no FINAL) can stand as the answer: not empty, not a plan
    ("Let me search...", "I will..."), not a refusal ("The corpus is too large to read"), not a
    question back to the user, not a lead-in that ends with ``:`` (what it introduces, a code
    block or a list, is missing). Judged on its first 400 characters."""
    whole = without_notes(outside_code(text)).strip()
    head = whole[:400]
    if not head:
        return False
    if head.rstrip().endswith("?") or whole.rstrip().endswith(":"):
        return False
    return _NON_ANSWER.search(head) is None


def negative_answer(text: str) -> bool:
    """Whether an answer (up to 400 characters) reports that nothing was found: "not found",
    "does not exist", "no hits"... A search that finds nothing proves little, so the loop asks
    once for a second look before it accepts such an answer."""
    return len(text) <= 400 and _NEGATIVE.search(text) is not None


#: One item of a list in a question: a backticked name, or one to three words (``misty willow``).
_ITEM = r"(?:`[^`\n]{1,60}`|[\w./-]+(?: [\w./-]+){0,2})"
#: A list of three or more items in a question: ``A, B and C`` (also ``A, B, and C``, ``A, B, C and D``).
_LIST = re.compile(rf"(?<![\w`]){_ITEM}(?:, {_ITEM})+,? and {_ITEM}(?![\w`])")
#: A list that offers choices rather than naming things to answer about each ("which of A, B and C").
_CHOICE_LIST = re.compile(r"\b(?:which|what|who)\s+(?:\w+\s+){0,2}?(?:of|among|between)\b(?:\s+[\w`]+){0,3}\s*$|"
                          r"\b(?:one|any|either|neither|none)\s+of\b(?:\s+[\w`]+){0,3}\s*$|"
                          r"\b(?:whether|between)\b(?:\s+[\w`]+){0,3}\s*$", re.IGNORECASE)
#: Question words: an item that holds one is part of the question's sentence, not a thing it lists.
_ASKING = re.compile(r"\b(?:how|what|which|who|whom|where|when|why|many|much)\b", re.IGNORECASE)
#: Words an item may start with, or hold, that name nothing of its own.
_ITEM_FILLER = frozenset("a an the of and or in on for to with from by its their".split())


def _item_words(item: str) -> list[str]:
    return [w for w in item.split() if w.lower() not in _ITEM_FILLER]


def _mentions(answer: str, word: str) -> bool:
    """Whether ``answer`` has ``word`` (or its last dotted part) at the start of a word, any case;
    a plural's final ``s`` is dropped, so ``projects`` matches ``project``."""
    for w in dict.fromkeys((word, word.rsplit(".", 1)[-1])):
        stem = w[:-1] if len(w) > 3 and w.lower().endswith("s") else w
        if re.search(r"(?<![\w])" + re.escape(stem), answer, re.IGNORECASE):
            return True
    return False


def listed_items(question: str) -> list[str]:
    """The items of each list of three or more in ``question`` (``the A, B and C projects``,
    ```f`, `g` and `h```; in its first 2,000 characters), in order, at most 8. Filler words
    are dropped, and the first and last items are cut to the length of the longest item between
    them, the only ones with a comma on each side (``files define urlparse, upload and urljoin``: ``urlparse``; ``the misty willow,
    crimson delta and northern glacier projects``: ``misty willow`` ... ``northern glacier``)."""
    return list(_items(question))


@functools.lru_cache(maxsize=16)
def _items(question: str) -> tuple[str, ...]:
    """:func:`listed_items` as a tuple, kept for the last questions (a run asks it of each answer)."""
    items: list[str] = []
    for m in _LIST.finditer(question[:2_000]):  # a list of commas without "and" costs O(n^2) to reject
        raw = re.split(r",? and |, ", m.group(0))
        parts = [_item_words(p.strip("` ")) for p in raw]
        width = max([1, *(len(p) for p in parts[1:-1])])
        lead = question[max(0, m.start() - 60):m.start()] + " ".join(raw[0].split()[:-width])
        if _CHOICE_LIST.search(lead):
            continue  # "which of A, B and C": one of them is the answer
        ticks = [p.strip().startswith("`") for p in raw]
        if (any(ticks) and not all(ticks)) or any(_ASKING.search(p) for p in raw):
            continue  # "In `a.py`, how many X and Y ...": a clause and a question, not a list of things
        parts[0], parts[-1] = parts[0][-width:], parts[-1][:width]
        for words in parts:
            text = " ".join(words)
            if words and text not in items:
                items.append(text)
    return tuple(items[:8])


def missing_items(question: str, answer: str) -> list[str]:
    """The :func:`listed_items` of ``question`` that ``answer`` leaves out: fewer than half of an
    item's words appear in it. Small models were seen to answer a three-part question with its
    first part only; the loop asks once for the rest (``prompts.check_missing``)."""
    return [item for item in _items(question)
            if 2 * sum(_mentions(answer, w) for w in item.split()) < len(item.split())]


def lines_naming(text: str, items: list[str], per_item: int = 2, width: int = 240) -> dict[str, list[str]]:
    """``{item: lines}``: up to ``per_item`` distinct lines of ``text`` (REPL output the model has
    seen) that hold every word of ``item`` as a word start, any case; each cut to ``width``
    characters. Items with no such line are left out."""
    found: dict[str, list[str]] = {}
    lines = text.splitlines()
    for item in items:
        rx = [re.compile(r"(?<![\w])" + re.escape(w), re.IGNORECASE) for w in item.split()]
        hits: list[str] = []
        for line in lines:
            shown = line.strip()
            if shown and shown[:width] not in hits and all(r.search(line) for r in rx):
                hits.append(shown[:width])
                if len(hits) >= per_item:
                    break
        if hits:
            found[item] = hits
    return found


_FAILING_LINE = re.compile(r'^  File "<cell [\d.]+>", line \d+, in [^\n]*\n    (\S[^\n]*)$', re.MULTILINE)


def failing_line(output: str) -> str | None:
    """The source line of the innermost frame of the block in a traceback (the worker puts
    each block's source in ``linecache``), or ``None``."""
    found = _FAILING_LINE.findall(output or "")
    return found[-1].strip()[:200] if found else None


def error_signature(output: str) -> str | None:
    """The last exception line of a block's output (``TypeError: ...``), with numbers and quoted
    text kept (two errors are the same only when they read the same), or ``None``."""
    found = _ERROR_LINE.findall(output or "")
    return found[-1].strip()[:300] if found else None
