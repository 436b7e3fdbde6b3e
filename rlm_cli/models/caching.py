"""Provider prompt caching: where a request marks ``cache_control`` breakpoints, and how many of a
reply's input tokens the provider served from its cache or wrote to it.

Each root request of a run repeats the previous one and adds a turn, so most of its input is a
prefix the provider has seen seconds before. OpenAI, DeepSeek and Gemini cache such prefixes on
their own (rlm keeps the root prefix byte-stable: the system prompt, the worked example and the
question come first and never change within a question; the turn counter and reminders go at
the end of each new turn). Anthropic's models, directly or on Bedrock and Vertex AI, cache only a
prefix that ends at a block marked ``cache_control: {"type": "ephemeral"}``, at most 4 a request
(https://docs.claude.com/en/docs/build-with-claude/prompt-caching). For those, every root
request carries at most three (:func:`with_breakpoints`):

1. the system prompt (the same for every question of a corpus: read across questions and runs);
2. the end of the previous request (the last message before the newest assistant/user pair):
   what that request wrote is read here;
3. the end of this request, when it is a conversation (the worked example, or earlier turns):
   written for the next turn (a cache write costs 1.25 times the input price once; each later
   read 0.1 times). A lone prompt (``--mode direct``: the system prompt and the corpus) is not
   marked there: nothing would read it again, and the write would cost a quarter more.

On a question's first request the second falls inside the worked example (the same for every
question) and the third is the question itself, so that prefix stays in the cache even when later
requests compact older turns. Sub-calls carry none:
a ``llm_query``/``llm_map`` prompt is seldom sent twice, and a write costs more than a plain read.
``--no-prompt-cache`` (config ``prompt_cache = false``) sends no breakpoints.

Token counts: litellm reports OpenAI's ``usage.prompt_tokens_details.cached_tokens`` and
Anthropic's ``cache_read_input_tokens``/``cache_creation_input_tokens`` on its ``Usage`` (both
inside ``prompt_tokens``, which is every input token); :func:`cache_tokens` reads them. litellm
prices them at the map's ``cache_read_input_token_cost``/``cache_creation_input_token_cost``.
"""

from __future__ import annotations

from typing import Any

#: The breakpoint Anthropic's API takes (a 5-minute cache).
EPHEMERAL = {"type": "ephemeral"}
#: At most this many breakpoints a request (Anthropic refuses more than 4).
MAX_BREAKPOINTS = 4
#: A cache write's price over the plain input price (Anthropic's 5-minute cache, also on Bedrock
#: and Vertex AI): a budget's reservation prices input at this much, since every input token of a
#: request with breakpoints may be written.
CACHE_WRITE_PRICE = 1.25


def needs_breakpoints(model: str) -> bool:
    """Whether ``model`` (a litellm model string) caches only where a request marks breakpoints:
    ``anthropic/...`` (and a bare ``claude-...``, which litellm sends to Anthropic), and Claude on
    Bedrock (``bedrock/...anthropic.claude...``) or Vertex AI (``vertex_ai/claude-...``)."""
    name = model.lower()
    provider, _, rest = name.partition("/")
    if not rest:
        return name.startswith("claude")
    if provider == "anthropic":
        return True
    return provider in ("bedrock", "vertex_ai") and "claude" in rest


def with_breakpoints(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of ``messages`` with ``cache_control`` on the system message, the end of the
    previous request and the last message (see the module docstring); the marked messages' text
    becomes one text block carrying it. Messages that are not plain text are left as they are.

    Returns:
        The new list (``messages`` is not changed); at most :data:`MAX_BREAKPOINTS` are marked.
    """
    points: list[int] = []
    if messages and messages[0].get("role") == "system":
        points.append(0)
    last = len(messages) - 1
    if last >= 3 and messages[-2].get("role") == "assistant":
        points.append(last - 2)  # the newest user message of the previous request
    if any(m.get("role") == "assistant" for m in messages):
        points.append(last)  # a conversation goes on: written for the next turn
    out = list(messages)
    for i in sorted(set(points))[-MAX_BREAKPOINTS:]:
        content = out[i].get("content")
        if isinstance(content, str) and content:
            out[i] = {**out[i], "content": [{"type": "text", "text": content, "cache_control": dict(EPHEMERAL)}]}
    return out


def cache_tokens(usage: Any) -> tuple[int, int]:
    """``(input tokens read from the provider's cache, input tokens written to it)`` of a litellm
    ``Usage`` (``(0, 0)`` when it says nothing): Anthropic's ``cache_read_input_tokens`` and
    ``cache_creation_input_tokens``, else OpenAI's ``prompt_tokens_details.cached_tokens`` (and
    litellm's ``cache_creation_tokens`` there). Both are part of the reply's input tokens."""
    details = getattr(usage, "prompt_tokens_details", None)

    def number(*values: Any) -> int:
        for value in values:
            if isinstance(value, (int, float)) and value > 0:
                return int(value)
        return 0

    read = number(getattr(usage, "cache_read_input_tokens", None), getattr(details, "cached_tokens", None))
    write = number(getattr(usage, "cache_creation_input_tokens", None),
                   getattr(details, "cache_creation_tokens", None))
    return read, write
