"""The tokens of a request, as rlm counts them with tiktoken: the input window check of a
sub-call prompt, the estimate a budget reserves, and the counts of a reply sent without any.
"""

from __future__ import annotations

from typing import Any

from rlm_cli.models.failures import PromptTooLargeError
from rlm_cli.models.usage import Usage

#: Tokens added per message (and per request) to the prompt's text tokens for the window check.
MESSAGE_OVERHEAD_TOKENS = 4
#: A budget reserves this many times tiktoken's count of a request's input (tokenizers of other
#: providers count up to about 10% more than ``o200k_base``), or the larger ratio a reply showed.
INPUT_MARGIN = 1.1


def check_window(messages: list[dict[str, Any]], model: str, window: int, usage: Usage) -> None:
    """Refuse a prompt over ``window`` (the input window of ``model``, tokens) before it is sent:
    its bytes when they fit for sure, else tiktoken's count plus :data:`MESSAGE_OVERHEAD_TOKENS`
    per message and per request; a refusal is counted in ``usage`` (``refused_oversized``).

    Raises:
        PromptTooLargeError: the prompt does not fit (the message says how to split it).
    """
    texts = [content_text(m.get("content")) for m in messages]
    # A token is at least one byte, so a prompt of at most `window` bytes always fits.
    if sum(len(t.encode("utf-8", "surrogatepass")) for t in texts) + MESSAGE_OVERHEAD_TOKENS * (
            len(texts) + 1) <= window:
        return
    from rlm_cli.corpus.tokens import count_tokens_batch

    tokens = sum(count_tokens_batch(texts)) + MESSAGE_OVERHEAD_TOKENS * (len(texts) + 1)
    if tokens > window:
        usage.count("refused_oversized")
        raise PromptTooLargeError(
            f"prompt of about {tokens:,} tokens is over the input window of {model} ({window:,} tokens); "
            f"it was not sent. Split it into pieces of at most about {window * 3 // 4:,} tokens "
            "(e.g. chunk_text) and query each piece")


class Estimate:
    """A request's input tokens as tiktoken counts them (``history.request_tokens``), counted on
    first use only (a request answered from the cache is never counted)."""

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.messages = messages
        self._tokens: int | None = None

    @property
    def counted(self) -> bool:
        """Whether :meth:`tokens` has been counted."""
        return self._tokens is not None

    def tokens(self) -> int:
        """The count (tokens, message overheads included)."""
        if self._tokens is None:
            from rlm_cli.models.window import request_tokens

            self._tokens = request_tokens(self.messages)
        return self._tokens


def content_text(content: Any) -> str:
    """The text of a message's ``content``: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def counted_tokens(messages: list[dict[str, Any]], text: str, tin: int, tout: int) -> tuple[int, int]:
    """``(input, output)`` tokens of a streamed call: the provider's numbers, or tiktoken's
    count (``o200k_base``, plus message overhead) where one is missing."""
    if tin and (tout or not text):
        return tin, tout
    from rlm_cli.corpus.tokens import count_tokens
    from rlm_cli.models.window import request_tokens

    return tin or request_tokens(messages), tout or (count_tokens(text) if text else 0)
