"""Web server access logs as data: the Common and Combined Log Format (Apache's and nginx's
default: ``IP ident user [time] "METHOD PATH PROTOCOL" status bytes "referer" "agent"``).

Access logs (``accesslog``): a plain text file (any name) whose first non-blank lines are nearly
all in the Common or Combined Log Format becomes a table with the keys of :data:`KEYS`:
``status`` an int, ``size`` an int or ``None`` for ``-``, the request split into ``method``,
``path`` and ``protocol`` (``None`` where it is not three words, as for a probe's garbage),
``time`` as written; a line in another format becomes an error row, as in JSONL.

Reading is one anchored regular expression per line, linear in the line (its alternatives
cannot overlap), so a hostile file costs its length; it runs in rlm's process like the other
plain text. Files over :data:`MAX_CHARS` stay text.
"""

from __future__ import annotations

import re
from array import array
from typing import Any

from rlm_cli.corpus.structured import (
    ERROR_TEXT_CHARS,
    MISSING,
    SNIFF_CHARS,
    SNIFF_LINES,
    make_table,
    shared_strings,
    summarize,
)

#: A row's keys, the ones most asked about first (the root model's metadata shows the first six).
KEYS = ("ip", "time", "method", "path", "status", "size", "referer", "agent", "user", "ident", "protocol", "extra")
#: A quoted field, written unrolled (runs of plain characters between escapes) with possessive
#: repeats (Python 3.11+): no backtracking into it, so a field that never closes fails in one
#: pass and keeps no per-character state (``(?:[^"\\]|\\.)*`` took 250 bytes a character on
#: a 10 MB quoted field).
_QUOTED = r'"([^"\\]*+(?:\\.[^"\\]*+)*+)"'
#: One line: the Common format, then the Combined format's referer and agent, then anything more
#: (nginx's default ``main`` adds ``"$http_x_forwarded_for"``, Apache's ``%D`` a duration): ``extra``.
_LINE = re.compile(r'(\S++) (\S++) (\S++) \[([^\]]*+)\] ' + _QUOTED + r' (\d{3}) (\d+|-)'
                   r'(?: ' + _QUOTED + ' ' + _QUOTED + r')?(?:[ \t]+([^\r\n]*))?\r?$')
#: Plain text files up to this many characters are tried as access logs (a bigger one stays
#: text: its rows would take several times its size in the worker).
MAX_CHARS = 32 * 1024 * 1024
#: Share of the first :data:`SNIFF_LINES` non-blank lines that must read as access-log lines.
SNIFF_SHARE = 0.8
_WS = re.compile(r"[ \t\n\r]*")


def sniff(text: str) -> bool:
    """Whether ``text`` reads as a web server access log (module docstring): its first non-blank
    line, at least three of its first :data:`SNIFF_LINES` non-blank lines, and
    :data:`SNIFF_SHARE` of them match. The first line decides for almost every file
    (about a microsecond), so every plain text file of a large corpus can be asked."""
    start = _WS.match(text, 0, 4096).end()  # type: ignore[union-attr]
    if start >= len(text) or text[start] in "{[<#=/\"'" or len(text) > MAX_CHARS:
        return False
    end = text.find("\n", start, start + 8192)
    if _LINE.match(text, start, min(len(text), start + 8192) if end < 0 else end) is None:
        return False
    lines = [ln for ln in text[:SNIFF_CHARS].split("\n")[:SNIFF_LINES * 2] if ln.strip()][:SNIFF_LINES]
    if len(lines) < 3:
        return False
    hits = sum(_LINE.match(ln) is not None for ln in lines)
    return hits >= 3 and hits >= SNIFF_SHARE * len(lines)


def parse(text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """An access log's text into the payload ``{"kind": "accesslog", "tables": [table]}`` (the
    table layout of ``rlm_cli.corpus.structured``) and its summary (``structured.summarize``);
    never raises for bad lines (each is an error row)."""
    rows: list[tuple[Any, ...]] = []
    lines = array("I")
    extra: dict[int, Any] = {}
    match = _LINE.match
    n = 0
    for lineno, raw in enumerate(text.split("\n"), 1):
        m = match(raw)
        if m is None:
            s = raw.strip()
            if not s:
                continue
            extra[n] = {"_error": "not an access log line", "_line": lineno, "_text": s[:ERROR_TEXT_CHARS]}
            rows.append((MISSING,) * len(KEYS))
        else:
            ip, ident, user, when, request, status, size, referer, agent, more = m.groups()
            parts = request.split(" ")
            method, path, protocol = parts if len(parts) == 3 else (None, None, None)
            if referer is not None and "\\" in referer + agent:
                referer, agent = _unescape(referer), _unescape(agent)
            rows.append((ip, when, method, path, int(status), None if size == "-" else int(size), referer, agent,
                         user, ident, protocol, (more or "").strip() or None))
        lines.append(lineno)
        n += 1
    cols = [shared_strings(list(c)) for c in zip(*rows, strict=True)] if rows else [[] for _ in KEYS]
    payload = {"kind": "accesslog", "tables": [make_table(None, list(KEYS), cols, lines, n, extra)]}
    return payload, summarize(payload)


def _unescape(field: str) -> str:
    """A quoted field as it was before the server escaped it (``\\"`` and ``\\\\``)."""
    return field.replace('\\"', '"').replace("\\\\", "\\")
