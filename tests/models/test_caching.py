"""``rlm_cli.models.caching``: which models get breakpoints, where they go, and the cache tokens
read off litellm's ``Usage`` (the end-to-end tests are in ``tests/e2e/test_prompt_cache.py``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rlm_cli.models.caching import MAX_BREAKPOINTS, cache_tokens, needs_breakpoints, with_breakpoints


@pytest.mark.parametrize(("model", "expected"), [
    ("anthropic/claude-sonnet-4-5", True), ("claude-3-5-haiku-20241022", True),
    ("bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0", True), ("bedrock/us.anthropic.claude-sonnet-4-5", True),
    ("vertex_ai/claude-sonnet-4-5@20250929", True), ("openai/gpt-5.4", False), ("gpt-4o", False),
    ("bedrock/amazon.nova-pro-v1:0", False), ("vertex_ai/gemini-2.5-pro", False), ("gemini/gemini-3.5-flash", False),
    ("deepseek/deepseek-chat", False), ("openai/root", False),
])
def test_which_models_need_breakpoints(model: str, expected: bool) -> None:
    assert needs_breakpoints(model) is expected


def _conversation(turns: int) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "example"},
            {"role": "assistant", "content": "example reply"}, {"role": "user", "content": "question"}]
    for n in range(turns):
        msgs += [{"role": "assistant", "content": f"reply {n}"}, {"role": "user", "content": f"output {n}"}]
    return msgs


def _marked(msgs: list[dict]) -> list[int]:
    return [i for i, m in enumerate(msgs) if isinstance(m["content"], list) and m["content"][0].get("cache_control")]


@pytest.mark.parametrize("turns", [0, 1, 5])
def test_breakpoints_on_the_system_prompt_the_previous_request_and_this_one(turns: int) -> None:
    msgs = _conversation(turns)
    out = with_breakpoints(msgs)
    last = len(msgs) - 1
    assert _marked(out) == [0, last - 2, last]  # on a first request: inside the worked example
    assert 1 <= len(_marked(out)) <= MAX_BREAKPOINTS
    assert msgs == _conversation(turns)  # the caller's list is left as it was
    assert out[last]["content"] == [{"type": "text", "text": msgs[last]["content"], "cache_control": {"type": "ephemeral"}}]
    assert [m["role"] for m in out] == [m["role"] for m in msgs]


def test_a_lone_prompt_is_not_written_to_the_cache_and_non_text_content_is_left() -> None:
    assert _marked(with_breakpoints([{"role": "user", "content": "hi"}])) == []
    direct = [{"role": "system", "content": "sys"}, {"role": "user", "content": "the whole corpus"}]
    assert _marked(with_breakpoints(direct)) == [0]
    blocks = [{"type": "text", "text": "x"}]
    assert with_breakpoints([{"role": "user", "content": blocks}])[0]["content"] is blocks


def test_cache_tokens_of_each_provider_shape() -> None:
    anthropic = SimpleNamespace(cache_read_input_tokens=900, cache_creation_input_tokens=120,
                                prompt_tokens_details=SimpleNamespace(cached_tokens=900, cache_creation_tokens=120))
    openai = SimpleNamespace(prompt_tokens_details=SimpleNamespace(cached_tokens=1024))
    assert cache_tokens(anthropic) == (900, 120)
    assert cache_tokens(openai) == (1024, 0)
    assert cache_tokens(SimpleNamespace(prompt_tokens_details=None)) == (0, 0)
    assert cache_tokens(None) == (0, 0)
