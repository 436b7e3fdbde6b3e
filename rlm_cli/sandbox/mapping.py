"""``llm_map(items, instruction)``: one answer per item, from as few sub-calls as the sub-model's
window allows. Runs inside the worker: the standard library and ``rlm_cli.sandbox.calls`` only.

How it works (:func:`run_map`):

1. **Pack.** The items are numbered and packed, in order, into pieces that fit the sub-model:
   at most ``(window - reply) * 0.9`` tokens of prompt (the ``reply`` tokens the model layer asks
   for are left free, and 10% for tokenizers that count more), counted as
   :data:`CHARS_PER_TOKEN` characters a token (the worker has no tokenizer; English text runs
   about 4), at most ``reply // ANSWER_TOKENS`` items, so that every item's answer fits in the
   reply, and at most ``window // TOKENS_PER_ITEM`` items (or ``per_call``), since a model judges
   fewer items well at once than its window holds (:data:`TOKENS_PER_ITEM`). The window and reply size come from the model layer (a ``window`` request to the
   relay: ``models.relay``), so they are the ones every sub-call is checked against. An item
   too long for a piece on its own is cut to fit, and said.
2. **Ask.** Each piece is one sub-call: the instruction, then the items as ``[k] text``, asking
   for one line ``k: answer`` per item. The pieces go out concurrently, as many at once as
   ``llm_query_batched`` sends (``--max-concurrency``), through the same relay path as every
   sub-call, so budgets, usage, caching and the trajectory count them like any other.
3. **Parse, and ask again once.** The numbered lines of each reply are read back; an item whose
   number is missing, out of range or given twice with different answers, or (with ``choices``)
   whose answer names none of the choices or several (:func:`match_choice`), is asked again,
   with the other such items, in new pieces: once. An item still without an answer, or whose piece
   failed (the sub-call's ``Error: ...``), is ``None``, and a note printed in the block's output
   says which and why.
4. **Remember.** A call answered in full is kept (:data:`MEMO`): the same items and instruction
   asked again, as a small model does when it reruns a block, get the same answers at no cost.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlm_cli.sandbox.calls import to_text

#: Characters counted per token when a piece is packed (conservative: English prose runs ~4,
#: source code ~3, so a piece packed at 3 fits under any of the usual tokenizers).
CHARS_PER_TOKEN = 3
#: Reply tokens kept for each item's answer: a piece holds at most ``reply // ANSWER_TOKENS``
#: items (163 in the 3,276-token reply of a 16k window; 682 in a 200k window's 16,384).
ANSWER_TOKENS = 24
#: Window tokens per item of a piece, at most (8 items at 16k, 16 at 32k, 97 at 200k): a model
#: judges fewer items well at once than its window holds. Measured 2026-12-06 with
#: Qwen2.5-Coder-1.5B (16k) labelling generated messages (dev seeds) in four categories: 60 items in
#: one call were labelled right 5 times (nearly all answers the same label), 20 in a call 8 of 20,
#: 10 in a call 10 of 20, one a call 7 of 12. The window is the only size of the sub-model known here;
#: ``llm_map(..., per_call=N)`` sets another limit.
TOKENS_PER_ITEM = 2048
#: Share of ``window - reply`` a piece's prompt may take (the rest: tokenizers that count more).
INPUT_SHARE = 0.9
#: Characters of the fixed text around the items in a piece (the request to number the answers).
FRAME_CHARS = 400
#: Window assumed when the model layer cannot say (tokens; as ``models.client.DEFAULT_WINDOW``).
DEFAULT_WINDOW = 32_768

#: A numbered answer line: ``3: text``, ``3. text``, ``3) text``, ``[3] text``, ``**3:** text``, ``- 3: text``.
ANSWER_LINE = re.compile(r"^\s*[-*•#>]*\s*\**\s*(?:item\s*)?(?:\[\s*(\d{1,6})\s*\]|(\d{1,6})\s*\**\s*[:.)\-–])"
                         r"\s*\**\s*(.*)$", re.IGNORECASE)


@dataclass(frozen=True)
class Capacity:
    """What one piece may hold: ``prompt_chars`` characters of prompt and ``max_items`` items."""

    prompt_chars: int
    max_items: int


def capacity(window: int, reply: int, per_call: int | None = None) -> Capacity:
    """The :class:`Capacity` of a sub-model whose input window is ``window`` tokens and whose
    reply is capped at ``reply`` tokens (see the module docstring): at most ``per_call`` items a
    piece when given, else ``window // TOKENS_PER_ITEM``."""
    window = max(1_000, int(window))
    reply = max(64, min(int(reply), window // 2))
    tokens = int((window - reply) * INPUT_SHARE)
    most = max(1, int(per_call)) if per_call else max(1, window // TOKENS_PER_ITEM)
    return Capacity(max(1_000, tokens * CHARS_PER_TOKEN), max(1, min(reply // ANSWER_TOKENS, most)))


def window_of(reply_text: str) -> tuple[int, int]:
    """``(window, reply)`` tokens from the relay's answer to a ``window`` request (JSON text);
    :data:`DEFAULT_WINDOW` and a fifth of it when the answer is an error or unreadable."""
    try:
        info = json.loads(reply_text)
        return int(info["window"]), int(info["reply"])
    except (ValueError, TypeError, KeyError):
        return DEFAULT_WINDOW, DEFAULT_WINDOW // 5


def item_texts(items: Any) -> list[str]:
    """The text of each item: a ``str`` is split into its non-empty lines; a dict with ``text``
    (a grep hit, a chunk row) gives that; anything else its ``to_text``."""
    if isinstance(items, str):
        return [line for line in items.splitlines() if line.strip()]
    if isinstance(items, dict):
        raise TypeError(f"{USAGE}; items is a dict (a single grep hit or row is one): pass a list of them, "
                        "list(d.values()), or [f'{k}: {v}' for k, v in d.items()]")
    if isinstance(items, (bytes, bytearray)) or not isinstance(items, Iterable):
        raise TypeError(f"{USAGE}; items is {type(items).__name__}, not a list")
    out = []
    for item in list(items):
        if isinstance(item, dict) and isinstance(item.get("text"), str):
            out.append(item["text"])
        else:
            out.append(to_text(item))
    return out


def with_choices(instruction: str, choices: Sequence[str] | None) -> str:
    """The instruction a piece carries: ``instruction``, and with ``choices`` the request to
    answer with exactly one of them (``Answer with exactly one of: a, b, c.``)."""
    if not choices:
        return instruction.strip()
    quoted = any(re.search(r"[,;]", c) for c in choices)  # "yes, definitely" must read as one label
    listed = ", ".join(f'"{c}"' if quoted else c for c in choices)
    return f"{instruction.strip()} Answer with exactly one of: {listed}."


def _plain(text: str) -> str:
    """``text`` lower-cased with a hyphen or underscore inside a word read as a space
    (``bug-fix`` -> ``bug fix``)."""
    return re.sub(r"(?<=\w)[-_](?=\w)", " ", text.strip().lower())


#: A negation shortly before a label (``not a complaint``, ``isn't an inquiry``, ``no bug``): up to
#: three words between, within one clause. Such a mention does not name the label.
_NEGATED = re.compile(r"(?:\b(?:not(?!\s+(?:only|just|merely)\b)|no|never|neither|nor|non|without|cannot)|n't)"
                      r"(?:[^\w,.;:!?]+\w+){0,3}[^\w,.;:!?]*$")
#: Labels that are themselves a negation (``no``, ``none``, ``not sure``): no negation before them
#: unnames them (``Not really - no`` answers ``no``).
_NEGATION_LABEL = re.compile(r"(?:no|none|not|never|neither|nor|n/a)\b")
#: Characters of an answer read for a label: a label answer is short; a long run (a sub-model
#: repeating itself) is not read further, so reading stays linear in the reply.
ANSWER_READ_CHARS = 300


def match_choice(answer: str, choices: Sequence[str]) -> str | None:
    """The one of ``choices`` that ``answer`` names, as given in ``choices``, or ``None`` when it
    names none or several. Case is ignored, a hyphen inside a word reads as a space (``bug-fix``
    names ``bug fix``) and a plural is allowed (``s``, ``es``, ``y`` -> ``ies``); a choice inside a
    longer one it also names (``fix`` in ``bug fix``) does not count, nor does one negated
    (``not a complaint``, ``Complaint, not a suggestion``); when several are still named, the
    answer counts only if it starts with one and goes on after a break that does not list the
    next (``Complaint. It also suggests...``, ``Yes, there is no crash``; not ``red, green``,
    ``red or green`` or ``suggestion/inquiry``)."""
    text = _plain(answer[:ANSWER_READ_CHARS])
    spans: list[tuple[int, int, str]] = []
    for choice in choices:
        word = _plain(choice)
        forms = [re.escape(word) + "(?:e?s)?"] + ([re.escape(word[:-1]) + "ies"] if word.endswith("y") else [])
        negatable = not _NEGATION_LABEL.match(word)
        spans += [(m.start(), m.end(), choice) for m in re.finditer(rf"(?<!\w)(?:{'|'.join(forms)})(?!\w)", text)
                  if not (negatable and _NEGATED.search(text[max(0, m.start() - 60):m.start()]))]
    kept = [s for s in spans if not any(o[0] <= s[0] and s[1] <= o[1] and (o[1] - o[0]) > (s[1] - s[0])
                                        for o in spans)]
    named = {choice for _, _, choice in kept}
    if len(named) == 1:
        return named.pop()
    lead = len(text) - len(text.lstrip("*_`'\"([ "))
    for start, end, choice in kept:
        brk = re.match(r"[*_`'\")\]]*(?:\s*[.:(]|\s+-\s|\s*\n|\s*([,;/]|\bor\b|\band\b))", text[end:]) \
            if start == lead else None
        if brk is None:
            continue
        if brk.group(1) and (brk.group(1) in ("/", "or", "and") or _lists(text, end + brk.end(), kept)):
            continue  # "red, green", "red/green", "complaint, or a suggestion": two labels listed
        return choice
    return None


def _lists(text: str, at: int, kept: list[tuple[int, int, str]]) -> bool:
    """Whether ``text`` from ``at`` (just after a comma) goes on with another label as a list
    item (``red, green``; ``complaint, or a suggestion.``), rather than a sentence in which a
    label's word appears (``Yes, no crash``: the word goes on with more words)."""
    skip = re.match(r"[\s*_`'\"(]*(?:(?:and|or|a|an|the|maybe|perhaps|possibly)\s+)*[*_`'\"(]*", text[at:])
    start = at + (skip.end() if skip else 0)
    for s, e, _ in kept:
        if s == start:
            return re.match(r"[*_`'\")\]]*\s*(?:$|[,;/.!?)\n]|(?:and|or)\b)", text[e:]) is not None
    return False


def piece_prompt(instruction: str, texts: Sequence[str]) -> str:
    """The prompt of one piece: the instruction, the items as ``[k] text`` (newlines inside an
    item become spaces, so each item is one line), then the instruction again with the form of the
    answer lines (``1: <answer for item 1>``). Instruction first, so that the pieces of one call
    share a prefix (a server's prompt cache reuses it); again after the items, because a 1.5B
    model given it only before them answered with the item numbers (``1: 5``, ``2: 4``...)."""
    n = len(texts)
    lines = "\n".join(f"[{k}] {' '.join(t.split())}" for k, t in enumerate(texts, 1))
    form = "\n".join(f"{k}: <answer for item {k}>" for k in range(1, min(n, 3) + 1)) + ("\n..." if n > 3 else "")
    return (f"{instruction.strip()}\n\n{lines}\n\nDo this for each item above, on its own: {instruction.strip()}\n"
            f"Reply with {n} line{'s' if n > 1 else ''}, one per item, in this form:\n{form}")


def parse_answers(text: str, n: int) -> dict[int, str]:
    """The answers of a piece of ``n`` items read from a reply: ``{k: answer}`` for each number
    ``1..n`` given once (or always with the same answer). A number given with two different
    answers is left out (broken), as are numbers outside ``1..n``; an unnumbered line after a
    numbered one with no text is its answer. A one-item piece whose reply has no numbered line
    is answered by the whole reply."""
    found: dict[int, str] = {}
    broken: set[int] = set()
    current: int | None = None
    for line in text.splitlines():
        m = ANSWER_LINE.match(line)
        k = int(m.group(1) or m.group(2)) if m else 0
        if 1 <= k <= n and m is not None:
            answer = m.group(3).strip().strip("*").strip()
            if found.get(k):
                if answer and answer != found[k]:
                    broken.add(k)
            else:
                found[k] = answer
            current = k
        elif current is not None and line.strip() and not found.get(current):
            found[current] = line.strip()
    for k in broken:
        found.pop(k, None)
    answers = {k: v for k, v in found.items() if v}
    if n == 1 and not answers and text.strip() and not text.startswith("Error: "):
        return {1: text.strip()}
    return answers


def pack(texts: Sequence[str], indexes: Sequence[int], cap: Capacity, instruction_chars: int) -> list[list[int]]:
    """``indexes`` of ``texts`` grouped, in order, into pieces of at most ``cap.max_items`` items
    whose prompt stays within ``cap.prompt_chars`` (an item longer than that alone is a piece
    of its own; :func:`fit` cuts it)."""
    room = max(200, cap.prompt_chars - instruction_chars - FRAME_CHARS)
    pieces: list[list[int]] = []
    cur: list[int] = []
    used = 0
    for i in indexes:
        size = len(texts[i]) + 8  # "[k] " and the newline
        if cur and (used + size > room or len(cur) >= cap.max_items):
            pieces.append(cur)
            cur, used = [], 0
        cur.append(i)
        used += size
    if cur:
        pieces.append(cur)
    return pieces


def fit(text: str, cap: Capacity, instruction_chars: int) -> tuple[str, bool]:
    """``text`` cut to what one piece holds beside the instruction, and whether it was cut."""
    room = max(200, cap.prompt_chars - instruction_chars - FRAME_CHARS - 40)
    return (text, False) if len(text) <= room else (text[:room] + " [...]", True)


@dataclass
class MapRun:
    """The outcome of :func:`run_map`: ``answers`` (one per item, ``None`` for none), the number
    of ``calls`` made, the items ``asked_again``, and ``failures`` (``(items, error)`` per failed
    piece) and ``cut`` (items shortened to fit) for the note."""

    answers: list[str | None]
    calls: int = 0
    asked_again: int = 0
    failures: list[tuple[list[int], str]] = field(default_factory=list)
    cut: list[int] = field(default_factory=list)
    #: Items whose last answer named none of the ``choices`` or several (then ``None``).
    unmatched: list[int] = field(default_factory=list)

    def note(self) -> str:
        """The line printed in the block's output when some item has no answer or was cut
        (empty otherwise); items are numbered from 0, as in the returned list."""
        missing = [i for i, a in enumerate(self.answers) if a is None]
        parts = []
        if missing:
            why = "; ".join(f"the sub-call for {_span(items)} failed: {_clip(err, 200)}" for items, err in self.failures[:3])
            unanswered = len(missing) - sum(len(items) for items, _ in self.failures) - len(self.unmatched)
            if unanswered > 0:
                why += ("; " if why else "") + f"{unanswered} came back without their number twice"
            if self.unmatched:
                why += ("; " if why else "") + (f"{len(self.unmatched)} named none of the choices, or several, "
                                                "twice")
            parts.append(f"{len(missing)} of {len(self.answers)} items have no answer (None): {_span(missing)} ({why})")
        if self.cut:
            parts.append(f"{_span(self.cut)} too long for one sub-call, so cut to fit")
        return f"[llm_map: {'; '.join(parts)}.]\n" if parts else ""


def _clip(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters at a word, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


def _span(indexes: list[int]) -> str:
    shown = ", ".join(map(str, indexes[:12]))
    more = f" and {len(indexes) - 12} more" if len(indexes) > 12 else ""
    return f"item{'s' if len(indexes) > 1 else ''} {shown}{more}"


def run_map(texts: Sequence[str], instruction: str, cap: Capacity,
            send: Callable[[list[str]], list[str]],
            accept: Callable[[str], str | None] | None = None) -> MapRun:
    """Answer ``instruction`` for each of ``texts`` (see the module docstring). ``send`` makes the
    sub-calls of one round, concurrently: prompts in, each answer text or ``'Error: ...'`` out, in
    order. ``accept`` turns an answer into the one kept (``None``: not an answer, ask again once;
    :func:`match_choice` for ``choices``); by default every answer is kept as it came."""
    run = MapRun([None] * len(texts))
    unmatched: set[int] = set()
    fitted = []
    for i, t in enumerate(texts):
        text, cut = fit(t, cap, 2 * len(instruction))
        fitted.append(text)
        if cut:
            run.cut.append(i)
    todo = list(range(len(texts)))
    for attempt in range(2):
        pieces = pack(fitted, todo, cap, 2 * len(instruction))
        if not pieces:
            break
        replies = send([piece_prompt(instruction, [fitted[i] for i in piece]) for piece in pieces])
        run.calls += len(pieces)
        todo = []
        for piece, reply in zip(pieces, replies, strict=True):
            if reply.startswith("Error: "):
                run.failures.append((piece, reply))
                unmatched.difference_update(piece)  # said as the failed sub-call it is now
                continue
            got = parse_answers(reply, len(piece))
            for k, i in enumerate(piece, 1):
                answer = got.get(k)
                kept = answer if answer is None or accept is None else accept(answer)
                unmatched.discard(i)
                if kept is not None:
                    run.answers[i] = kept
                else:
                    todo.append(i)
                    if answer is not None:
                        unmatched.add(i)
        if attempt == 0:
            run.asked_again = len(todo)
    run.unmatched = sorted(unmatched)
    return run


#: Calls answered in full, by what they asked (:func:`memo_key`), in this worker: the same items and
#: instruction again (a repeated block: small models rerun their code) cost no sub-call.
MEMO: dict[str, list[str | None]] = {}
#: Calls kept in :data:`MEMO`, at most (the oldest goes first).
MEMO_SIZE = 64
MEMO_NOTE = "[llm_map: the same items and instruction as an earlier call; its answers again, no new sub-call.]\n"


def memo_key(texts: Sequence[str], instruction: str, model: str | None, per_call: int | None,
             choices: Sequence[str] | None = None) -> str:
    """The key of a call in :data:`MEMO`: a SHA-256 of everything that decides its answers."""
    return hashlib.sha256(json.dumps([model, per_call, instruction, list(texts),
                                      list(choices or [])]).encode()).hexdigest()


#: How ``llm_map`` is called, as errors about its arguments show it.
MAP_SIGNATURE = "llm_map(items, instruction, choices=None, *, per_call=None, model=None)"
USAGE = ("llm_map(items, instruction): give the list of items and, as a str, what to answer about each "
         "(e.g. llm_map(lines, 'Does this line report an error? yes or no'))")
CHOICES_USAGE = ("llm_map(..., choices=[...]): the answers allowed, a list of at least two different non-empty "
                 "one-line strs (e.g. choices=['bug fix', 'feature', 'docs'])")


def check_choices(choices: Any) -> list[str] | None:
    """``choices`` as a list of distinct stripped strs (``None`` when not given).

    Raises:
        TypeError: not a list or tuple of at least two different non-empty strs, or two that
            differ only in case or hyphens (:func:`match_choice` could not tell them apart).
    """
    if choices is None:
        return None
    if isinstance(choices, str) or not isinstance(choices, (list, tuple, set, frozenset)) \
            or not all(isinstance(c, str) and c.strip() and "\n" not in c.strip() for c in choices):
        raise TypeError(f"{CHOICES_USAGE}; got {choices!r:.120}")
    out = list(dict.fromkeys(c.strip() for c in choices))
    if len(out) < 2:
        raise TypeError(f"{CHOICES_USAGE}; got {choices!r:.120}")
    spelled: dict[str, str] = {}
    for c in out:
        other = spelled.setdefault(_plain(c), c)
        if other != c:  # answers are read regardless of case and hyphens: the two could never be told apart
            raise TypeError(f"{CHOICES_USAGE}; {other!r} and {c!r} differ only in case or hyphens")
    return out


def map_items(items: Any, instruction: Any, ask_window: Callable[[], str],
              send: Callable[[list[str]], list[str]], per_call: int | None = None,
              model: str | None = None, choices: Any = None) -> list[str | None]:
    """The REPL's ``llm_map(items, instruction)`` (also ``llm_map(instruction, items)``): one answer
    per item (:func:`item_texts`), ``None`` where none came; the note of :meth:`MapRun.note` is
    printed. ``ask_window`` asks the model layer for the sub-model's window (:func:`window_of`),
    ``send`` makes one round of sub-calls (:func:`run_map`); ``per_call`` caps the items of a
    sub-call (:func:`capacity`). With ``choices`` (a list of labels) each piece asks for exactly
    one of them and each answer is the label it names (:func:`match_choice`), spelled as given,
    so that ``Counter(answers)`` counts them; an answer naming none or several is asked again
    once, then ``None``. A call that asks what an earlier one answered in full (same items,
    instruction, ``model``, ``per_call`` and ``choices``) gets those answers again (:data:`MEMO`).

    Raises:
        TypeError: the instruction is missing or not a str (the message shows the call),
            ``per_call`` is not a positive int, ``choices`` not at least two different strs,
            ``items`` a dict or not iterable, or one line with an instruction of several.
    """
    if isinstance(items, str) and instruction is not None and not isinstance(instruction, str):
        items, instruction = instruction, items
    if not isinstance(instruction, str) or not instruction.strip():
        raise TypeError(USAGE)
    if isinstance(items, str) and len(instruction.strip().splitlines()) > 1 and len(items.strip().splitlines()) == 1:
        raise TypeError(f"{USAGE}; items came as one line and the instruction as several: are they the wrong way "
                        "round? (one item alone: llm_map([text], instruction))")
    if per_call is not None and (isinstance(per_call, bool) or not isinstance(per_call, int) or per_call < 1):
        raise TypeError(f"llm_map(..., per_call=N): N is the most items of one sub-call, a positive int; got {per_call!r}")
    labels = check_choices(choices)
    texts = item_texts(items)
    if not texts:
        return []
    key = memo_key(texts, instruction, model, per_call, labels)
    if key in MEMO:
        sys.stdout.write(MEMO_NOTE)
        return list(MEMO[key])
    accept = None if labels is None else (lambda answer: match_choice(answer, labels))
    run = run_map(texts, with_choices(instruction, labels), capacity(*window_of(ask_window()), per_call), send,
                  accept)
    sys.stdout.write(run.note())
    if None not in run.answers:
        MEMO[key] = list(run.answers)
        while len(MEMO) > MEMO_SIZE:
            MEMO.pop(next(iter(MEMO)))
    return run.answers
