"""Chat messages made sendable: text that UTF-8 can carry, whatever the corpus or a REPL output held."""

from __future__ import annotations

import re
from typing import Any

#: A lone surrogate: what Python keeps of a JSON ``"\ud800"`` escape or a file name's byte that is
#: not UTF-8; no UTF-8 text (a request body, the cache key) can hold one.
_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with every lone surrogate in a text ``content`` (a string, or the ``text`` of
    a content part) replaced by U+FFFD, so a corpus or a REPL output holding one is sent, not an
    internal error; ``messages`` itself when none holds one (the common case: no copy)."""
    def fix(value: Any) -> Any:
        if isinstance(value, str):
            return _SURROGATE.sub("\ufffd", value) if not value.isascii() else value
        if isinstance(value, list):
            return [fix(v) for v in value]
        if isinstance(value, dict):
            return {k: fix(v) for k, v in value.items()}
        return value

    if all(_clean(m) for m in messages):
        return messages
    return [fix(m) for m in messages]



def _clean(message: dict[str, Any]) -> bool:
    content = message.get("content")
    texts = [content] if isinstance(content, str) else [
        p.get("text") for p in content if isinstance(p, dict)] if isinstance(content, list) else []
    return all(not isinstance(t, str) or t.isascii() or _SURROGATE.search(t) is None for t in texts)
