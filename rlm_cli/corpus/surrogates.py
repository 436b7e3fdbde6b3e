"""Lone surrogates from a corpus: ``"\\ud800"`` in a JSON file is valid JSON (RFC 8259 allows the
escape) but no Unicode text. Python keeps it as a lone surrogate in a ``str``, which no UTF-8
writer accepts (the index, the trajectory, the wire, a report), so one escape in a corpus file
was an internal error (issue 47).

The rule: where a corpus file's content is *parsed or rendered* into text (a JSON or JSONL value,
its keys, a notebook's cells, a PDF's text), each lone surrogate becomes U+FFFD, the replacement
character (a valid pair of escapes is one character already). The file's own text in ``context``
is untouched: it holds the six characters of the escape, as written.
"""

from __future__ import annotations

import re
from typing import Any

#: A lone surrogate in a ``str`` (a valid pair was joined into one character by the decoder).
_LONE = re.compile("[\ud800-\udfff]")
#: A ``\\uD800``-``\\uDFFF`` escape in JSON text: only then can its parsed value hold one.
_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def escaped(text: str) -> bool:
    """Whether the JSON text ``text`` may decode to a lone surrogate (it has a surrogate escape, or
    one already); a quick scan, so that files without one are not walked."""
    return _ESCAPE.search(text) is not None or _LONE.search(text) is not None


def text_of(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (``text`` itself when it has none)."""
    return _LONE.sub("\ufffd", text) if _LONE.search(text) else text


def value_of(value: Any) -> Any:
    """``value`` (parsed JSON, or a payload of ``structured``: dicts, lists, tuples, strings and
    scalars) with every string in it, keys included, passed through :func:`text_of`. Objects
    without a lone surrogate are returned as they are (shared strings stay shared).

    Raises:
        RecursionError: ``value`` is nested deeper than the interpreter's recursion limit.
    """
    kind = type(value)
    if kind is str:
        return text_of(value)
    if kind is list:
        return [value_of(v) for v in value]
    if kind is tuple:
        return tuple(value_of(v) for v in value)
    if kind is dict:
        return {value_of(k): value_of(v) for k, v in value.items()}
    return value
