"""Scoring of the question bench's answers: lenient about form, strict about content.

``score(question, answer) -> (correct, reason)``. Per ``question["score"]``:

- ``number``: the gold must appear among the answer's figures (``1,234``, ``1234 bytes``, ``€10,819.28``,
  ``12.0`` all read as numbers, and so do the words ``zero`` to ``twenty``; ``tolerance`` allows a
  difference, default exact) and every other digit figure must be one the question itself contains
  (``404`` in "how many 404s") or equal to the gold; a size or percentage beside it (``46.9 MB``) is
  no second figure. Figures inside dates (``2026-03``), times, IP addresses, versions, identifiers
  (``SO-58100``), paths and line citations (``client.py:93``, ``line 93``) are not figures.
  "There are 183 (or maybe 200)" is wrong.
- ``identifier``: the gold identifier appears as a whole name, bare, in backticks or quotes, or
  qualified (``email.message.Message``, ``Message.set_boundary``); none of ``options`` (the other
  names of that sort, each a wrong answer) appears.
- ``choice``: the gold or one of its ``aliases`` appears as a whole token (case-insensitive); no
  option or option's alias does.
- ``path``: some path in the answer is the gold or one of its ``aliases`` (relative to the corpus, with
  the folder prefix, absolute, ``./``-prefixed, or the bare name when it is unique); every other
  ``.py`` path the answer names must be one the question names.
- ``none``: the answer says there is nothing ("none", "no ...", "0", "not any", "nothing" ...) and
  names no option and no figure other than 0.
"""

from __future__ import annotations

import math
import re
from typing import Any

_STRIP = str.maketrans({c: " " for c in "`*\"'“”‘’()[]{}<>,;"})
_NOT_FIGURE = re.compile(
    r"\b\d{4}-\d{2}(?:-\d{2})?(?:[T ]\d{2}:\d{2}(?::\d{2})?Z?)?\b"  # dates, date-times
    r"|\b\d{1,2}:\d{2}(?::\d{2})?\b"  # times
    r"|\b\d{1,3}(?:\.\d{1,3}){3}\b"  # IPv4 addresses
    r"|\b\d+(?:\.\d+){2,}\b"  # versions
    r"|[\w./-]*\.\w+:\d+(?:[-–]\d+)?"  # file:line citations (client.py:93, a/b.py:10-12)
    r"|\blines?\s+\d+(?:\s*[-–]\s*\d+)?"  # "line 93", "lines 10-12"
    r"|[\w.-]*/[\w./-]*"  # paths and URLs
    r"|\b[A-Za-z_][\w]*[-_]\d[\w-]*"  # identifiers with digits (SO-58100, CU-3168, utf_8)
    r"|\b[A-Za-z_]+\d\w*"  # words ending in digits (base64, http2)
)
_FIGURE = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w])")
_APPROX = re.compile(r"~?\d[\d,.]*\s*(?:[KMGT]i?B|%|percent)(?!\w)", re.IGNORECASE)
#: How rlm begins the answer of a run that stopped before the model gave one
#: (``rlm_cli.loop.partial.NO_ANSWER_PREFIX``): it says "No", but it is no answer.
NO_ANSWER_PREFIX = "No final answer yet:"
_NEGATIVE = re.compile(
    r"\b(?:none|no|nothing|zero|empty|not any|never|nobody|no one|neither|n/a"
    r"|(?:does|do|did|is|are|was|were|has|have)\s*(?:n[’']t|not))\b", re.IGNORECASE)


def figures(text: str) -> list[float]:
    """The numbers in ``text`` as floats, thousands separators dropped, non-figures (dates, IPs,
    paths, identifiers with digits, versions) left out."""
    clean = _NOT_FIGURE.sub(" ", text)
    out = []
    for m in _FIGURE.finditer(clean):
        tok = m.group(0).replace(",", "")
        if tok.endswith("."):
            tok = tok[:-1]
        out.append(float(tok))
    return out


_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
          "sixteen seventeen eighteen nineteen twenty").split()
_WORD = re.compile(r"\b(" + "|".join(_WORDS) + r")\b", re.IGNORECASE)


def word_figures(text: str) -> list[float]:
    """Numbers written as words (``zero`` to ``twenty``) in ``text``."""
    return [float(_WORDS.index(m.group(1).lower())) for m in _WORD.finditer(text)]


def _same(a: float, b: float, tol: float) -> bool:
    return math.isclose(a, b, abs_tol=max(tol, 1e-9))


def _score_number(q: dict[str, Any], answer: str) -> tuple[bool, str]:
    gold, tol = float(q["gold"]), float(q.get("tolerance", 0))
    seen = figures(answer)
    allowed = figures(q["question"])
    # "two parameters" names the gold; words are not checked as extra figures ("one of them" is no answer)
    if not any(_same(x, gold, tol) for x in seen + word_figures(answer)):
        return False, f"no figure equal to the gold among {seen[:6]}"
    rest = figures(_APPROX.sub(" ", answer))  # "(about 46.9 MB)" beside the exact figure is no second answer
    extra = [x for x in rest if not _same(x, gold, tol) and not any(_same(x, a, 0) for a in allowed)]
    if extra:
        return False, f"other figures besides the gold: {extra[:6]}"
    return True, "gold figure"


def _has_token(text: str, token: str, *, dotted: bool, case: bool) -> bool:
    edge = r"\w" if dotted else r"\w.\-/"
    pat = rf"(?<![{edge}]){re.escape(token)}(?![\w\-/]|\.\w{{2}})" if not dotted else \
        rf"(?<![\w]){re.escape(token)}(?![\w])"
    return re.search(pat, text, 0 if case else re.IGNORECASE) is not None


_HOST = re.compile(r"\bhttps?://[^/\s`'\"]+")


def _score_names(q: dict[str, Any], answer: str, *, dotted: bool) -> tuple[bool, str]:
    text = _HOST.sub(" ", answer).translate(_STRIP)
    golds = [str(q["gold"]), *map(str, q.get("aliases", []))]
    case = dotted  # identifiers are case-sensitive; names, ids and paths are not
    if not any(_has_token(text, g, dotted=dotted, case=case) for g in golds):
        return False, "the gold is not named"
    question = q["question"].translate(_STRIP)
    wrong = [o for o in q.get("options", []) if _has_token(text, str(o), dotted=dotted, case=case)
             and not _has_token(question, str(o), dotted=dotted, case=case)
             and not any(_has_token(str(g), str(o), dotted=dotted, case=case) for g in golds)]
    if wrong:
        return False, f"also names {wrong[:4]}"
    return True, "gold named"


_PATH = re.compile(r"[\w./\\-]*[\w-]+\.py\b")


def _norm_path(p: str) -> str:
    p = p.replace("\\", "/")
    while p.startswith("./"):
        p = p[2:]
    return p


def _score_path(q: dict[str, Any], answer: str) -> tuple[bool, str]:
    golds = [_norm_path(g) for g in [q["gold"], *q.get("aliases", [])]]
    in_question = {_norm_path(p) for p in _PATH.findall(q["question"])}

    def matches(p: str, g: str) -> bool:
        return p == g or p.endswith("/" + g)

    paths = [_norm_path(p) for p in _PATH.findall(answer)]
    if not any(matches(p, g) for p in paths for g in golds):
        return False, f"no path naming the gold among {paths[:4]}"
    others = [p for p in paths if not any(matches(p, g) for g in golds)
              and not any(matches(p, s) or matches(s, p) for s in in_question)]
    if others:
        return False, f"also names {others[:4]}"
    return True, "gold path"


def _score_none(q: dict[str, Any], answer: str) -> tuple[bool, str]:
    text = answer.translate(_STRIP)
    nonzero = [x for x in figures(answer) if x != 0 and x not in figures(q["question"])]
    named = [o for o in q.get("options", []) if _has_token(text, str(o), dotted=False, case=False)]
    says_zero = 0.0 in figures(answer)
    named += [p for p in _PATH.findall(answer) if p not in q["question"]]
    if named:
        return False, f"names {named[:4]}"
    if nonzero:
        return False, f"gives figures {nonzero[:4]}"
    if not (_NEGATIVE.search(answer) or says_zero):
        return False, "does not say there are none"
    return True, "says none"


def score(question: dict[str, Any], answer: str | None) -> tuple[bool, str]:
    """Whether ``answer`` is right for ``question`` (a line of ``dev.jsonl``/``heldout.jsonl``), and why.

    ``None``, a blank answer and rlm's line for a run that gave none (``No final answer yet: ...``)
    are wrong. Raises ``ValueError`` for an unknown ``score`` kind."""
    if answer is None or not answer.strip():
        return False, "no answer"
    if answer.lstrip().startswith(NO_ANSWER_PREFIX):  # rlm's words for a run without an answer: not a "none"
        return False, "no answer (the run stopped before one)"
    kind = question["score"]
    if kind == "number":
        return _score_number(question, answer)
    if kind == "identifier":
        return _score_names(question, answer, dotted=True)
    if kind == "choice":
        return _score_names(question, answer, dotted=False)
    if kind == "path":
        return _score_path(question, answer)
    if kind == "none":
        return _score_none(question, answer)
    raise ValueError(f"unknown scoring kind {kind!r}")
