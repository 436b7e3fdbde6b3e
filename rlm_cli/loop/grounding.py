"""Which specific tokens of an answer the run showed the model: the extraction the answer checks
(``ungrounded``, ``default_cap``) and the support verdict (``loop.support``) share.

A specific token is a path, a version, an identifier that names something (an inner ``_``, a
digit, a change of case; units such as ``MiB`` are not names) or a number (from a floor the caller
gives). A number counts as shown when the same value appears in what the model read, or is the
value of an arithmetic expression there (``10 * 1024 * 1024`` shows 10,485,760).
"""

from __future__ import annotations

import ast
import re

#: A path: two or more parts joined by ``/`` (``json/decoder.py``, ``/static/app.css``), or a
#: file name with a short extension (``setup.cfg``).
_PATH = re.compile(r"(?<![\w/.-])(?:[\w.-]*/)+[\w.-]*\w|(?<![\w/.-])[\w-]{2,}\.[A-Za-z][A-Za-z0-9]{0,5}(?![\w/]|\.\w)")
#: A code joined by hyphens, with letters and digits (``XKWR-7354``, ``utf-8``, ``sha-256``).
_CODE = re.compile(r"(?<![\w-])(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9]+(?:-[A-Za-z0-9]+)+(?![\w-])")
#: An identifier, possibly dotted.
_IDENT = re.compile(r"(?<![\w.])[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?![\w])")
#: What makes one part of an identifier specific: an inner underscore, a digit, a lower-to-upper
#: change (``parseConfig``, ``HTTPServer``) or two capitals before a lower-case letter.
_SPECIFIC_PART = re.compile(r"[A-Za-z0-9]_[A-Za-z0-9]|\d|[a-z][A-Z]|[A-Z]{2}[a-z]")
#: A number as written in an answer (``1,234``, ``12.5``; not part of a word or a version).
ANSWER_NUMBER = re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w,]|\.\d)|(?<![\w.,])\d+(?:\.\d+)?(?![\w,]|\.\d)")
#: Any run of digits (with a fraction) in what the model was shown: a number there counts as
#: shown wherever it stands (``T1234`` shows 1234; ``1,234`` is read with its commas removed).
_SHOWN_NUMBER = re.compile(r"\d+(?:\.\d+)?")
#: Units written with a change of case, which would otherwise read as names (``10 MiB``, ``3 GHz``).
UNITS = frozenset({"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "kB", "kHz", "MHz", "GHz", "THz", "mA", "mAh", "kWh",
                   "MWh", "GWh", "dB", "dBm", "pH", "kPa", "MPa", "GPa", "kN", "mL", "kJ", "MJ"})
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")


def number(text: str) -> float:
    """A number as written (``1,234.5``) as a float."""
    return float(text.replace(",", ""))


#: An arithmetic expression of plain numbers as code or a config states a value
#: (``10 * 1024 * 1024``, ``60*60*24``, ``(2 ** 20) + 1``).
_EXPRESSION = re.compile(r"\(?\d+(?:\.\d+)?\)?(?:\s*(?:\*\*|[-+*/])\s*\(?\d+(?:\.\d+)?\)?)+")
#: The most expressions read from one text, and the largest value kept (no huge powers).
_MAX_EXPRESSIONS, _MAX_VALUE = 2_000, 1e15


def stated_values(text: str) -> set[float]:
    """The values of the arithmetic expressions ``text`` holds (``10 * 1024 * 1024`` gives
    10485760.0): a number an answer works out from such an expression it read is a number it was
    shown. Only numbers and ``+ - * / **`` are evaluated (``ast``, no names), at most
    :data:`_MAX_EXPRESSIONS` of them, values up to :data:`_MAX_VALUE`."""
    out: set[float] = set()
    for m in _EXPRESSION.finditer(text[:2_000_000]):
        if len(out) >= _MAX_EXPRESSIONS:
            break
        text_ = m.group(0)
        if not re.search(r"\s", text_) and ("." in text_ or not re.search(r"[+*/]", text_)):
            continue  # 2026-10-13, 10-20, 3.11.7-1: dates, ranges and versions, not arithmetic
        try:
            value = _arith(ast.parse(m.group(0).strip(), mode="eval").body)
        except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError):
            continue
        if abs(value) <= _MAX_VALUE:
            out.add(float(value))
    return out


def _arith(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)):
        left, right = _arith(node.left), _arith(node.right)
        if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 1e6):
            raise ValueError("too large")
        ops = {ast.Add: left + right, ast.Sub: left - right, ast.Mult: left * right}
        if isinstance(node.op, ast.Div):
            return left / right
        if isinstance(node.op, ast.Pow):
            return float(left ** right)
        return ops[type(node.op)]
    raise ValueError("not arithmetic")


def shown_numbers(shown: str) -> set[float]:
    """Every number that appears in ``shown`` (digit runs, with thousands separators removed), and
    the value of every arithmetic expression of numbers in it (:func:`stated_values`: an answer
    that gives ``10 * 1024 * 1024`` as 10,485,760 was shown that number)."""
    return {float(n) for n in _SHOWN_NUMBER.findall(_THOUSANDS.sub("", shown))} | stated_values(shown)


def specific_tokens(answer: str, min_number: float = 10) -> list[tuple[str, str]]:
    """The tokens of ``answer`` (its first 2,000 characters) that name something specific, as
    ``(kind, token)`` in order: ``path`` (paths and file names), ``version`` (``3.11.7``),
    ``name`` (identifiers with an inner ``_``, a digit or a change of case: ``parse_config``,
    ``HTTPServer``, ``os.path.join``; codes of letters and digits joined by hyphens:
    ``XKWR-7354``; plain words are not specific) and ``number`` (written as in the answer, at
    least ``min_number`` in absolute value: small counts are read off a signature or a few lines
    by eye, which a strong model does reliably)."""
    text = answer[:2_000]
    out: list[tuple[str, str]] = []
    for m in _PATH.finditer(text):
        tok = m.group(0).strip(".")
        if re.search(r"[A-Za-z]", tok):
            out.append(("path", tok))
    rest = _PATH.sub(" ", text)
    out += [("version", m.group(0)) for m in _VERSION.finditer(rest)]
    rest = _VERSION.sub(" ", rest)
    out += [("name", m.group(0)) for m in _CODE.finditer(rest)]
    rest = _CODE.sub(" ", rest)
    for m in _IDENT.finditer(rest):
        tok = m.group(0)
        parts = tok.split(".")
        if any(len(p) < 2 for p in parts) or len(tok) < 3 or tok in UNITS:
            continue  # e.g., i.e., MiB
        if any(_SPECIFIC_PART.search(p) for p in parts) or len(parts) > 1:
            out.append(("name", tok))
    rest = _IDENT.sub(" ", rest)
    out += [("number", x) for x in ANSWER_NUMBER.findall(rest) if abs(number(x)) >= min_number]
    return list(dict.fromkeys(out))


#: A version of three or more parts (``3.11.7``, ``v2.4.1``).
_VERSION = re.compile(r"(?<![\w.])v?\d+(?:\.\d+){2,}(?![\w]|\.\d)")


def grounding(answer: str, question: str, shown: str, numbers_shown: str | None = None,
              min_number: float = 10) -> tuple[list[str], list[str]]:
    """``(tokens, unseen)``: the :func:`specific_tokens` of ``answer`` that the ``question`` does
    not have (restating it proves nothing either way), and those of them that appear nowhere in
    ``shown``. A path counts as shown when its file name does (``Lib/json/decoder.py`` for
    ``json/decoder.py``), a dotted name when its last part does, a number when the same value
    does (``1,234`` = ``1234.0``) in ``numbers_shown`` (default: ``shown``)."""
    asked_numbers = shown_numbers(question)
    have: set[float] | None = None
    tokens: list[str] = []
    unseen: list[str] = []
    for kind, tok in specific_tokens(answer, min_number):
        if kind == "number":
            value = number(tok)
            if value in asked_numbers:
                continue
            if have is None:
                have = shown_numbers(shown if numbers_shown is None else numbers_shown)
            seen = value in have
        else:
            last = tok.rstrip("/").rsplit("/", 1)[-1] if kind == "path" else tok.rsplit(".", 1)[-1]
            if tok in question or last in question:
                continue
            seen = tok in shown or (bool(last) and last in shown)
        tokens.append(tok)
        if not seen:
            unseen.append(tok)
    return tokens, unseen


#: A corpus line quoted by ``leads``: ``  path:line: text`` or ``  path:line (in Owner.name): text``.
_LEAD_LINE = re.compile(r"^  \S[^\n]*?:(\d+)(?: \(in [^)\n]*\))?: (.*)$", re.MULTILINE)


def quoted_corpus_text(leads: str) -> str:
    """The corpus lines a ``leads`` output quotes, one per line as ``LINE TEXT`` (the line number
    and the text, without the path), and none of rlm's own words around them: its counts of lines
    and files ("'__all__' in 2 lines") are facts about the question's words, not corpus content an
    answer can quote (a small model answered "2 names are exported" from that one)."""
    return "\n".join(f"{m.group(1)} {m.group(2)}" for m in _LEAD_LINE.finditer(leads))
