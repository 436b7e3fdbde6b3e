"""Model choice: provider-key defaults, local-server autodetection (loopback only), exit 3."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from rlm_cli.config import Settings, prepare_offline_env
from rlm_cli.errors import NoModelError
from rlm_cli.models import detect as models
from tests.support.cli import run_rlm
from tests.support.fake_llm import FakeLLM, repl


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


NO_PROBES = {"RLM_PROBE_OLLAMA": "off", "RLM_PROBE_PORTS": "off"}


def test_provider_defaults_exist_in_litellms_price_map() -> None:
    prepare_offline_env()
    import litellm

    for var, _, root, sub in models.PROVIDER_DEFAULTS:
        for name in (root, sub):
            info = models.model_info(litellm, name)
            assert info is not None and info.get("mode") == "chat", name
            if var != "OPENROUTER_API_KEY":  # litellm's bundled map does not price OpenRouter
                assert models.price_known(litellm, name), name
                assert (models.input_window(litellm, name) or 0) >= 128_000, name
        if var != "OPENROUTER_API_KEY":  # the sub-model is the cheaper one
            r, s = models.model_info(litellm, root), models.model_info(litellm, sub)
            assert r and s and s["input_cost_per_token"] < r["input_cost_per_token"], (root, sub)
    # The one example model of the help, the errors and the docs is a current, priced one.
    from rlm_cli.config import EXAMPLE_MODEL

    assert models.price_known(litellm, EXAMPLE_MODEL) and EXAMPLE_MODEL in {m for row in models.PROVIDER_DEFAULTS
                                                                           for m in row[2:]}


@pytest.mark.parametrize(("env", "expected"), [
    ({"OPENAI_API_KEY": "sk-x"}, ("openai/gpt-5.4", "openai/gpt-5.4-mini")),
    ({"ANTHROPIC_API_KEY": "a", "GEMINI_API_KEY": "g"}, ("anthropic/claude-sonnet-4-6", "anthropic/claude-haiku-4-5")),
    ({"GEMINI_API_KEY": "g", "OPENROUTER_API_KEY": "o"}, ("gemini/gemini-3.5-flash", "gemini/gemini-3.5-flash-lite")),
    ({"OPENROUTER_API_KEY": "o"}, ("openrouter/anthropic/claude-sonnet-4.6", "openrouter/anthropic/claude-haiku-4.5")),
])
def test_provider_keys_pick_defaults_in_order(env: dict[str, str], expected: tuple[str, str]) -> None:
    notes: list[str] = []
    s = models.ensure_model(Settings(), notes.append, env={**env, **NO_PROBES})
    assert (s.model, s.sub_model) == expected
    assert s.api_base is None
    assert len(notes) == 1 and expected[0] in notes[0] and "is set" in notes[0]


def test_ollama_shaped_server_is_detected(llm: FakeLLM) -> None:
    llm.ollama_models = ["nomic-embed-text:latest", "llama3.2:3b"]
    env = {"RLM_PROBE_OLLAMA": f"127.0.0.1:{llm.port}", "RLM_PROBE_PORTS": "off"}
    found = models.detect(Settings(), env=env)
    assert found is not None
    assert found.model == "ollama_chat/llama3.2:3b"  # embedding models are skipped
    assert found.api_base == f"http://127.0.0.1:{llm.port}"
    assert "Ollama" in found.reason


def test_openai_compatible_server_on_a_probed_port_is_detected(llm: FakeLLM) -> None:
    env = {"RLM_PROBE_OLLAMA": f"127.0.0.1:{_closed_port()}", "RLM_PROBE_PORTS": f"{_closed_port()},{llm.port}"}
    found = models.detect(Settings(), env=env)
    assert found is not None
    assert (found.model, found.api_base) == ("openai/root", llm.url)


def test_ollama_wins_over_an_openai_compatible_server(llm: FakeLLM) -> None:
    other = FakeLLM()
    try:
        other.ollama_models = ["qwen3:8b"]
        env = {"RLM_PROBE_OLLAMA": f"localhost:{other.port}", "RLM_PROBE_PORTS": str(llm.port)}
        found = models.detect(Settings(), env=env)
        assert found is not None and found.model == "ollama_chat/qwen3:8b"
    finally:
        other.close()


def test_api_base_without_model_asks_that_server(llm: FakeLLM) -> None:
    llm.models_list = ["served-model"]
    s = models.ensure_model(Settings(api_base=llm.url), env={"OPENAI_API_KEY": "sk-x", **NO_PROBES})
    assert s.model == "openai/served-model"  # the named server wins over the provider key
    assert s.api_base == llm.url


def test_probes_stay_on_loopback() -> None:
    ollama, ports = models.probe_targets({"RLM_PROBE_OLLAMA": "10.1.2.3:11434", "RLM_PROBE_PORTS": "8080,x,99999"})
    assert ollama is None and ports == [8080]
    assert models.probe_targets({})[1] == [8080, 1234, 8000, 8765]
    assert models.probe_targets({})[0] == "127.0.0.1:11434"
    assert models.list_openai_models("http://192.0.2.1:8080/v1") == []  # never contacted


def test_nothing_found_raises_no_model_error_listing_the_ways() -> None:
    with pytest.raises(NoModelError) as info:
        models.ensure_model(Settings(), env={"RLM_PROBE_OLLAMA": f"127.0.0.1:{_closed_port()}",
                                             "RLM_PROBE_PORTS": str(_closed_port())})
    text = str(info.value)
    for way in ("--model", "RLM_MODEL", "rlm config set model", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "Ollama",
                "OpenAI-compatible"):
        assert way in text


def test_configured_model_is_kept_without_probing() -> None:
    s = models.ensure_model(Settings(model="openai/mine"), env={"OPENAI_API_KEY": "sk-x"})
    assert s.model == "openai/mine" and s.sub_model is None


def test_cli_run_with_an_autodetected_local_server(tmp_path: Path, llm: FakeLLM) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    llm.script("root", repl("print(len(context))"), repl("FINAL(context.split()[-1])"))
    res = run_rlm("ask", str(tmp_path / "a.txt"), "Last word?",
                  env={"RLM_PROBE_OLLAMA": "off", "RLM_PROBE_PORTS": f"{_closed_port()},{llm.port}"})
    assert res.code == 0, res.stderr
    assert res.stdout == "hello\n"
    assert f"model: openai/root (OpenAI-compatible server at 127.0.0.1:{llm.port}" in res.stderr
