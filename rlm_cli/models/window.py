"""How much of a model's input window a request takes: tokens per message and per request, the
room kept for the reply, and text cut to a number of tokens.

Token counts use ``rlm_cli.corpus.tokens.count_tokens`` (tiktoken ``o200k_base``) plus a fixed
per-message framing cost; :func:`input_budget` leaves room for the reply and for tokenizers
that count more than ``o200k_base`` does. The root model's history (``rlm_cli.loop.history``)
is fitted with these counts, and ``models.client`` asks for replies of :func:`reply_tokens`.
"""

from __future__ import annotations

from typing import Any

from rlm_cli.corpus.tokens import count_tokens, encoding

#: Tokens a chat format adds per message (role markers, separators), counted generously.
MESSAGE_OVERHEAD = 4
#: Tokens a chat format adds per request (the assistant primer).
REQUEST_OVERHEAD = 3


def reply_tokens(window_tokens: int) -> int:
    """Tokens kept for a model's reply in a window of ``window_tokens``: a fifth of it, at most
    16,384. Requests ask for no longer reply (``max_tokens``), so a model stuck repeating itself
    stops there instead of running until the server's context is full."""
    return min(max(256, int(window_tokens)) // 5, 16_384)


def input_budget(window_tokens: int) -> int:
    """Tokens of request the history may use for a root model whose input window is
    ``window_tokens``: the window less room for the reply (:func:`reply_tokens`) and less 10%
    for tokenizers that count more than ``o200k_base``."""
    window_tokens = max(256, int(window_tokens))
    return int((window_tokens - reply_tokens(window_tokens)) * 0.9)


def message_tokens(message: dict[str, Any]) -> int:
    """Tokens one chat message costs: its content plus ``MESSAGE_OVERHEAD``."""
    return count_tokens(str(message.get("content") or "")) + MESSAGE_OVERHEAD


def request_tokens(messages: list[dict[str, Any]]) -> int:
    """Tokens a whole request costs, counted the way the root history (``rlm_cli.loop.history``) counts them."""
    return sum(message_tokens(m) for m in messages) + REQUEST_OVERHEAD


def truncate_tokens(text: str, tokens: int, note: str = "\n[... cut to fit the context window ...]") -> str:
    """``text`` cut to at most ``tokens`` tokens, ``note`` included (empty when ``tokens`` is too small)."""
    enc = encoding()
    ids = enc.encode_ordinary(text)
    if len(ids) <= tokens:
        return text
    room = tokens - len(enc.encode_ordinary(note))
    return enc.decode(ids[:room]) + note if room > 0 else ""
