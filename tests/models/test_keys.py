"""Where the invoker's key and API base may go (``models.keys.key_travels``) and the check of the
keys a run's models need (``missing_credentials``) with a backend that answers as litellm's
``validate_environment`` does in the model host (the host itself: tests/audit/test_audit_untrusted.py)."""

from __future__ import annotations

import pytest

from rlm_cli.models.keys import key_travels, missing_credentials, provider_of

NAMED = ("openai/gpt-5-mini", "openai/gpt-5-nano")


@pytest.mark.parametrize(("model", "travels"), [
    ("openai/gpt-5-mini", True),          # the root model itself
    ("openai/o4", True),                  # the same provider: its endpoint, the key's
    ("OpenAI/o4", True),
    ("ollama_chat/evil", False),          # another provider's default port (127.0.0.1:11434)
    ("llamafile/evil", False),            # 127.0.0.1:8080
    ("lemonade/evil", False),             # localhost:8000
    ("anthropic/claude-haiku-4-5", False),
    ("gpt-5-mini", False),                # a bare name: litellm guesses its provider
    ("openai", False),
])
def test_a_key_travels_only_to_the_provider_it_was_given_for(model: str, travels: bool) -> None:
    assert key_travels(model, NAMED) is travels


def test_bare_names_match_only_themselves_and_providers_are_the_prefix() -> None:
    assert key_travels("gpt-5-mini", ["gpt-5-mini", None]) and not key_travels("claude-3", ["gpt-5-mini"])
    assert provider_of("openrouter/anthropic/claude") == "openrouter" and provider_of("gpt-4o") is None
    assert provider_of("/x") is None


class Host:
    """Answers ``missing_keys`` as litellm's ``validate_environment`` does with an empty environment."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def missing_keys(self, model: str) -> list[str]:
        self.asked.append(model)
        table = {"openai": ["OPENAI_API_KEY"], "anthropic": ["ANTHROPIC_API_KEY"], "ollama_chat": ["OLLAMA_API_BASE"],
                 "bedrock": ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]}
        return table.get(provider_of(model) or "", [])


def test_missing_credentials_counts_only_keys_no_key_travels_to() -> None:
    host = Host()
    models = ["openai/gpt-5-mini", "anthropic/claude-haiku-4-5", "ollama_chat/llama3", "bedrock/x", "fleet"]

    def missing(**kw: object) -> list[tuple[str, list[str]]]:
        args: dict[str, object] = {"named": NAMED, "api_key": None, "api_base": None, "backend": host,
                                   "router_groups": ["fleet"], "environ": {}}
        return missing_credentials(models, **{**args, **kw})  # type: ignore[arg-type]

    assert missing() == [("openai/gpt-5-mini", ["OPENAI_API_KEY"]), ("anthropic/claude-haiku-4-5",
                                                                      ["ANTHROPIC_API_KEY"])]
    assert "fleet" not in host.asked  # a Router group: its deployments carry their keys
    # --api-key is for the named provider only; the other still needs its own
    assert missing(api_key="sk-x") == [("anthropic/claude-haiku-4-5", ["ANTHROPIC_API_KEY"])]
    # an API base (a local server) needs no key; the environment's key of a provider counts
    assert missing(api_base="http://127.0.0.1:8080/v1", environ={"ANTHROPIC_API_KEY": "k"}) == []
    host.asked.clear()
    assert missing(environ={"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"}) == []
    assert "openai/gpt-5-mini" not in host.asked  # known at once: the model host is not asked
    assert missing_credentials(["anthropic/x"], named=NAMED, api_key=None, api_base=None, backend=object(),
                               environ={}) == []  # a backend that cannot tell: nothing is refused
