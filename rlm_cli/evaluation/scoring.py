"""Scorers of ``rlm eval``: lenient to phrasing, exact on the fact.

Each scorer takes the answer text and the gold value of a task and returns ``True`` only when
the answer states the gold fact. The rules (also in docs/eval.md):

* ``key`` (needle): every gold key appears in the answer, compared case-insensitively.
* ``path`` (which file): the first corpus file the answer mentions (a path, a unique path
  suffix, or a file name that only one corpus file has) is the gold file.
* ``literal`` (a default value): the gold Python literal appears as written, quotes of either
  kind; a string also counts bare (``utf-8`` for ``'utf-8'``) when it is not empty.
* ``names`` (base classes): every gold name appears as a word (a dotted name may be given by
  its last part: ``TextIOBase`` for ``io.TextIOBase``, unless that part is the asked class's own
  name), and no other class-like name (CamelCase,
  dotted or underscored) is given, except the class asked about.
* ``number`` (counts, sums): after code spans and paths are removed, the first or the last
  number written in the answer (digits, or a word from zero to twenty) equals the gold number.
* ``label`` (which service/user): exactly one of the task's candidate labels is named in the
  answer, or in its last sentence when several are named, and it is the gold one.
* ``pairs`` (which pairs): the record ids the answer names, taken two by two in order, are
  exactly the gold set of unordered pairs.
* ``category`` (which kind of message, ``semantic``): as ``label``, where each category may be
  named in any of its forms (``complaint`` or ``complaints``).
* ``ids`` (which messages, ``semantic``): the set of ids the answer names is exactly the gold set.

:func:`partial` gives each answer a score from 0 to 1 beside the exact verdict, as OOLONG
(Bertsch et al., 2025, arXiv:2511.02817) scores its answers: a number ``0.75 ** |gold - answer|``
(the better of the answer's first and last number); a list of ids the F1 of the ids named (as
the RLM paper, Zhang, Kraska and Khattab, scores OOLONG-Pairs); any other answer 1 or 0.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

_WORD_NUMBERS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen twenty".split())}
_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?![\w])|\b(?:" + "|".join(_WORD_NUMBERS) + r")\b",
                     re.IGNORECASE)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_PATHLIKE = re.compile(r"[\w.\-/\\]*[/\\][\w.\-/\\]*|\b[\w\-]+\.(?:py|txt|log|md|csv|json|jsonl|c|h|rs|js|ts)\b")
#: Path-like tokens with a slash or a file extension (removed before names are read).
_PATHLIKE_STRICT = re.compile(r"[\w.\-]*/[\w.\-/]*|\b[\w\-]+\.(?:py|txt|md|json|cfg|toml)\b")
#: A class-like identifier: CamelCase (two capitals), dotted, or with an underscore and a capital.
_CLASSLIKE = re.compile(r"(?<![\w.])(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*|(?<![\w.])_*[A-Z][a-z0-9]+[A-Z]\w*"
                        r"|(?<![\w.])_\w*[A-Z]\w*|(?<![\w.])[A-Z]\w*_\w*")
_PATH_TOKEN = re.compile(r"[\w.\-/\\]+\.[A-Za-z0-9]+")


def score_key(answer: str, gold: str | list[str], **_: Any) -> bool:
    """Every key of ``gold`` (one key or a list) appears in ``answer``, case-insensitively."""
    keys = [gold] if isinstance(gold, str) else list(gold)
    low = answer.lower()
    return bool(keys) and all(k.lower() in low for k in keys)


def mentioned_files(answer: str, paths: Sequence[str]) -> list[str]:
    """Corpus paths named in ``answer``, in the order they appear.

    A token counts when it is a corpus path, ends with ``/`` + a corpus path (an absolute path
    to it), or is a path suffix / file name that exactly one corpus path ends with.
    """
    by_suffix: dict[str, set[str]] = {}
    for p in paths:
        parts = p.split("/")
        for i in range(len(parts)):
            by_suffix.setdefault("/".join(parts[i:]), set()).add(p)
    found: list[str] = []
    for m in _PATH_TOKEN.finditer(answer.replace("\\", "/")):
        token = m.group(0).strip("./") if not m.group(0).startswith("./") else m.group(0)[2:]
        hit: str | None = None
        cut = token
        while cut:
            owners = by_suffix.get(cut)
            if owners is not None:
                hit = next(iter(owners)) if len(owners) == 1 else None
                break
            if "/" not in cut:
                break
            cut = cut.split("/", 1)[1]  # /abs/prefix/pkg/mod.py -> pkg/mod.py -> mod.py
        if hit is not None and hit not in found:
            found.append(hit)
    return found


def score_path(answer: str, gold: str, *, paths: Sequence[str] = (), **_: Any) -> bool:
    """The first corpus file ``answer`` names is ``gold`` (see :func:`mentioned_files`)."""
    named = mentioned_files(answer, paths or [gold])
    return bool(named) and named[0] == gold


def score_literal(answer: str, gold: str, **_: Any) -> bool:
    """The Python literal ``gold`` (as ``ast.unparse`` writes it) appears in ``answer``."""
    norm = answer.replace('"', "'").replace("\u2019", "'").replace("\u2018", "'")
    want = gold.replace('"', "'")
    if len(want) >= 2 and want[0] == want[-1] == "'":
        inner = want[1:-1]
        if want in norm:
            return True
        if not inner:
            return "empty string" in answer.lower()
        return re.search(r"(?<![\w'])" + re.escape(inner) + r"(?![\w'])", norm) is not None
    if re.fullmatch(r"[\w.]+", want):
        return re.search(r"(?<![\w.])" + re.escape(want) + r"(?![\w])", norm) is not None
    return want.replace(" ", "") in norm.replace(" ", "")


def score_names(answer: str, gold: list[str], *, ignore: Sequence[str] = (), **_: Any) -> bool:
    """Every name in ``gold`` appears as a word in ``answer`` (a dotted name: its last part
    suffices), and the answer names no other class: no other CamelCase, dotted or underscored
    identifier, outside code spans and paths, except those in ``ignore`` (the class asked about)."""
    text = _PATHLIKE_STRICT.sub(" ", answer)

    def named(name: str) -> bool:
        last = name.rsplit(".", 1)[-1]
        if re.search(r"(?<![\w.])" + re.escape(name) + r"(?![\w])", text) is not None:
            return True
        # By its last part only when that is not the asked class's own name (``codecs.Codec`` for
        # ``class Codec``: naming the class itself says nothing about its base).
        return last not in ignore and re.search(r"(?<![\w])" + re.escape(last) + r"(?![\w])", text) is not None

    allowed = {g for g in gold} | {g.rsplit(".", 1)[-1] for g in gold} | set(ignore)
    allowed |= {p for g in gold for p in g.split(".")}
    extras = [t for t in _CLASSLIKE.findall(text) if t not in allowed and t.rsplit(".", 1)[-1] not in allowed]
    return bool(gold) and all(named(g) for g in gold) and not extras


def numbers_in(answer: str) -> list[float]:
    """The numbers written in ``answer`` (digits with optional thousands commas and decimals, or
    the words zero..twenty), in order, after code spans and path-like tokens are removed."""
    text = _PATHLIKE.sub(" ", _CODE_SPAN.sub(" ", answer))
    out: list[float] = []
    for m in _NUMBER.finditer(text):
        tok = m.group(0).lower()
        if tok in _WORD_NUMBERS:
            out.append(float(_WORD_NUMBERS[tok]))
        else:
            try:
                out.append(float(tok.replace(",", "")))
            except ValueError:
                continue
    return out


def score_number(answer: str, gold: int | float, **_: Any) -> bool:
    """The first or the last number of ``answer`` (see :func:`numbers_in`) equals ``gold``."""
    nums = numbers_in(answer)
    return bool(nums) and (abs(nums[0] - gold) < 1e-6 or abs(nums[-1] - gold) < 1e-6)


def score_label(answer: str, gold: str, *, labels: Sequence[str] = (), **_: Any) -> bool:
    """Exactly one candidate label is named (in the whole answer, else in its last sentence)
    and it is ``gold``."""
    candidates = list(labels) or [gold]

    def named(text: str) -> list[str]:
        return [lab for lab in candidates if re.search(r"(?<![\w])" + re.escape(lab) + r"(?![\w])", text)]

    found = named(answer)
    if len(found) > 1:
        sentences = [s for s in re.split(r"(?<=[.!?])\s+|\n+", answer.strip()) if s.strip()]
        found = named(sentences[-1]) if sentences else []
    return found == [gold]


def score_pairs(answer: str, gold: list[list[str]], *, id_pattern: str = r"\b[A-Z]\d+\b", **_: Any) -> bool:
    """The ids named in ``answer`` (matching ``id_pattern``), paired in order, are exactly ``gold``
    (a list of 2-item lists; order inside and between pairs does not matter)."""
    ids = re.findall(id_pattern, answer)
    if len(ids) % 2:
        return False
    got = {frozenset(ids[i:i + 2]) for i in range(0, len(ids), 2)}
    want = {frozenset(p) for p in gold}
    return len(got) == len(ids) // 2 and got == want


def _named_categories(text: str, categories: dict[str, Sequence[str]]) -> list[str]:
    return [c for c, forms in categories.items()
            if any(re.search(r"(?<![\w])" + re.escape(f) + r"(?![\w])", text, re.IGNORECASE) for f in forms)]


def score_category(answer: str, gold: str, *, categories: dict[str, Sequence[str]] | None = None, **_: Any) -> bool:
    """Exactly one category is named (in the whole answer, else in its last sentence), by any of
    its forms in ``categories`` (``{name: [forms]}``, any case), and it is ``gold``."""
    cats = categories or {gold: [gold]}
    found = _named_categories(answer, cats)
    if len(found) > 1:
        sentences = [s for s in re.split(r"(?<=[.!?])\s+|\n+", answer.strip()) if s.strip()]
        found = _named_categories(sentences[-1], cats) if sentences else []
    return found == [gold]


def ids_in(answer: str, id_pattern: str) -> set[str]:
    """The distinct ids ``answer`` names (matches of ``id_pattern``)."""
    return set(re.findall(id_pattern, answer))


def score_ids(answer: str, gold: list[str], *, id_pattern: str = r"\b[A-Z]\d+\b", **_: Any) -> bool:
    """The ids named in ``answer`` are exactly the set ``gold`` (order and repeats do not matter)."""
    return bool(gold) and ids_in(answer, id_pattern) == set(gold)


SCORERS: dict[str, Callable[..., bool]] = {
    "key": score_key, "path": score_path, "literal": score_literal, "names": score_names,
    "number": score_number, "label": score_label, "pairs": score_pairs, "category": score_category,
    "ids": score_ids,
}
#: OOLONG's partial credit for a number: this to the power of the absolute error.
PARTIAL_BASE = 0.75


def partial(kind: str, answer: str, gold: Any, **extra: Any) -> float:
    """A score in [0, 1] beside the exact verdict of :func:`score` (see the module docstring):
    ``number``: ``0.75 ** |gold - n|`` for the closer of the answer's first and last number (0
    without a number); ``ids``: the F1 of the ids named against ``gold``; any other scorer 1.0
    when :func:`score` accepts the answer, else 0.0.

    Raises:
        KeyError: no such scorer.
    """
    answer = answer or ""
    if kind == "number":
        nums = numbers_in(answer)
        if not nums:
            return 0.0
        return max(PARTIAL_BASE ** min(abs(n - gold), 1e6) for n in (nums[0], nums[-1]))
    if kind == "ids":
        got, want = ids_in(answer, extra.get("id_pattern", r"\b[A-Z]\d+\b")), set(gold)
        hits = len(got & want)
        return 0.0 if not hits else 2 * hits / (len(got) + len(want))
    return 1.0 if score(kind, answer, gold, **extra) else 0.0


def score(kind: str, answer: str, gold: Any, **extra: Any) -> bool:
    """Apply the scorer named ``kind`` (a key of :data:`SCORERS`).

    Raises:
        KeyError: no such scorer.
    """
    return SCORERS[kind](answer or "", gold, **extra)
