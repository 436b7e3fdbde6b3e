"""End-to-end: sub-calls spread over several model servers with ``--router-config`` (litellm's
Router), one of them dead: the calls are routed around it, and usage and budgets stay exact."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import run_rlm
from tests.support.fake_llm import FakeLLM, Reply, repl

PROMPTS = 24
BATCH = repl(f"answers = llm_query_batched([f'part {{i}}' for i in range({PROMPTS})])\n"
             "print(sum(a == 'ok' for a in answers), 'ok')\nFINAL(str(sum(a == 'ok' for a in answers)))")


@pytest.fixture
def fleet() -> Iterator[list[FakeLLM]]:
    """Two live sub-model servers answering ``ok`` with 7 prompt and 3 completion tokens."""
    servers = [FakeLLM(), FakeLLM()]
    for s in servers:
        s.default("sub", Reply(text="ok", prompt_tokens=7, completion_tokens=3))
    yield servers
    for s in servers:
        s.close()


def dead_url() -> str:
    """The base URL of a loopback port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def router_config(path: Path, urls: list[str]) -> Path:
    """One model group ``fleet`` over ``urls``; a deployment that fails once is cooled down."""
    path.write_text("model_list:\n" + "".join(
        f"  - model_name: fleet\n    litellm_params:\n      model: openai/sub\n      api_base: {url}\n"
        "      api_key: sk-test\n" for url in urls)
        + "router_settings:\n  routing_strategy: simple-shuffle\n  allowed_fails: 0\n  cooldown_time: 60\n")
    return path


def ask(tmp_path: Path, llm: FakeLLM, config: Path, *extra: str) -> tuple[int, dict[str, object], str]:
    (tmp_path / "notes.txt").write_text("one line\n")
    res = run_rlm("ask", str(tmp_path / "notes.txt"), "How many parts say ok?", "--model", "openai/root",
                  "--api-base", llm.url, "--sub-model", "fleet", "--router-config", str(config),
                  "--max-concurrency", "6", "--json", "--no-llm-cache", "--policy", "paper", "--no-leads", *extra)
    return res.code, json.loads(res.stdout), res.stderr


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_dead_deployment_is_routed_around_and_usage_is_exact(tmp_path: Path, llm: FakeLLM,
                                                               fleet: list[FakeLLM]) -> None:
    llm.script("root", BATCH)
    config = router_config(tmp_path / "router.yaml", [s.url for s in fleet] + [dead_url()])
    code, doc, stderr = ask(tmp_path, llm, config)
    assert code == 0, stderr
    assert doc["answer"] == str(PROMPTS)  # every prompt answered, none an "Error: ..." string
    usage = doc["usage"]
    assert isinstance(usage, dict)
    served = sum(len(s.chat_requests("sub")) for s in fleet)
    assert served == PROMPTS and all(s.chat_requests("sub") for s in fleet)
    assert usage["sub"]["calls"] == PROMPTS == doc["sub_calls"]  # attempts on the dead one are not calls
    assert (usage["sub"]["input_tokens"], usage["sub"]["output_tokens"]) == (7 * PROMPTS, 3 * PROMPTS)
    assert usage["retries"] >= 1  # the dead deployment was tried (1 in 3 picks), then cooled down
    assert usage["failed_calls"] == 0
    assert usage["sub"]["cost_usd"] is None and "sub unknown" in stderr  # an unpriced model costs "unknown", not $0


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_sub_call_budget_counts_calls_not_attempts_on_a_dead_deployment(tmp_path: Path, llm: FakeLLM,
                                                                            fleet: list[FakeLLM]) -> None:
    llm.script("root", BATCH)
    config = router_config(tmp_path / "router.yaml", [dead_url(), *(s.url for s in fleet)])
    code, doc, stderr = ask(tmp_path, llm, config, "--max-sub-calls", "10")
    assert code == 6, stderr
    assert doc["budget"] == "sub_calls"
    assert sum(len(s.chat_requests("sub")) for s in fleet) == 10  # exactly the budget reached the live servers
    usage = doc["usage"]
    assert isinstance(usage, dict)
    assert usage["sub"]["calls"] == 10 and usage["sub"]["input_tokens"] == 70


def test_max_concurrency_above_32_puts_that_many_sub_calls_in_flight(tmp_path: Path, llm: FakeLLM) -> None:
    llm.default("sub", Reply(text="ok", delay_s=1.5))
    llm.script("root", repl("answers = llm_query_batched([f'part {i}' for i in range(48)])\n"
                            "FINAL(str(sum(a == 'ok' for a in answers)))"))
    (tmp_path / "notes.txt").write_text("one line\n")
    res = run_rlm("ask", str(tmp_path / "notes.txt"), "q?", "--model", "openai/root", "--sub-model", "openai/sub",
                  "--api-base", llm.url, "--max-concurrency", "48", "--no-llm-cache", "--policy", "paper",
                  "--no-leads")
    assert res.code == 0, res.stderr
    assert res.stdout == "48\n"
    assert llm.max_in_flight > 32  # the worker used to send from at most 32 threads


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_relative_router_config_is_read_from_the_callers_directory(tmp_path: Path, llm: FakeLLM,
                                                                      fleet: list[FakeLLM]) -> None:
    # The shared model host runs in `/`: the path must be made absolute before it gets there.
    llm.script("root", BATCH)
    router_config(tmp_path / "fleet.yaml", [s.url for s in fleet])
    (tmp_path / "notes.txt").write_text("one line\n")
    res = run_rlm("ask", "notes.txt", "How many parts say ok?", "--model", "openai/root", "--api-base", llm.url,
                  "--sub-model", "fleet", "--router-config", "fleet.yaml", "--json", "--no-llm-cache",
                  "--policy", "paper", "--no-leads", cwd=tmp_path)
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout)["answer"] == str(PROMPTS)
    assert sum(len(s.chat_requests("sub")) for s in fleet) == PROMPTS


@pytest.mark.parametrize(("text", "words"), [
    ("model_list:\n  - model_name: fleet\n\tlitellm_params: {}\n", "line 3, column 1"),
    ("router_settings: {}\n", "needs a model_list"),
    ("model_list:\n  - model_name: fleet2\n    litellm_params: {model: openai/sub}\n",
     "'fleet' is not a model group of"),
])
def test_a_bad_router_config_fails_before_the_corpus_loads(tmp_path: Path, llm: FakeLLM, text: str,
                                                           words: str) -> None:
    config = tmp_path / "fleet.yaml"
    config.write_text(text)
    (tmp_path / "notes.txt").write_text("one line\n")
    res = run_rlm("ask", str(tmp_path / "notes.txt"), "q?", "--model", "openai/root", "--api-base", llm.url,
                  "--sub-model", "fleet", "--router-config", str(config))
    assert res.code == 2, res.stderr
    assert words in res.stderr and "Traceback" not in res.stderr
    assert res.stdout == ""
    assert "corpus" not in res.stderr.lower().split("--router-config")[0]  # nothing loaded before the error
    assert llm.chat_requests("root") == []


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_run_cut_off_by_timeout_leaves_the_next_run_s_router_alone(tmp_path: Path, llm: FakeLLM,
                                                                    fleet: list[FakeLLM]) -> None:
    """The shared model host outlives a command: the deployments one run's Router cooled down
    (its calls cut off at --timeout count as failures) must not fail the next run's calls."""
    for s in fleet:
        s.default("sub", Reply(text="ok", prompt_tokens=7, completion_tokens=3, delay_s=15.0))
    config = router_config(tmp_path / "router.yaml", [s.url for s in fleet])  # allowed_fails 0, cooldown 60 s
    llm.script("root", BATCH)
    code, doc, stderr = ask(tmp_path, llm, config, "--timeout", "8")
    assert code == 6 and doc["budget"] == "timeout", stderr  # stopped with sub-calls in flight...
    assert any(s.chat_requests("sub") for s in fleet)  # ...whose deployments that run's Router cooled down
    for s in fleet:
        s.default("sub", Reply(text="ok", prompt_tokens=7, completion_tokens=3))
    llm.script("root", BATCH)
    code, doc, stderr = ask(tmp_path, llm, config)
    assert code == 0, stderr
    assert doc["answer"] == str(PROMPTS)
    usage = doc["usage"]
    assert isinstance(usage, dict) and usage["failed_calls"] == 0


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_deployment_priced_in_the_router_file_is_counted(tmp_path: Path, llm: FakeLLM,
                                                           fleet: list[FakeLLM]) -> None:
    config = tmp_path / "router.yaml"
    config.write_text("model_list:\n" + "".join(
        f"  - model_name: fleet\n    litellm_params:\n      model: openai/sub\n      api_base: {s.url}\n"
        "      api_key: sk-test\n      input_cost_per_token: 0.001\n      output_cost_per_token: 0.002\n"
        for s in fleet))
    llm.script("root", BATCH)
    code, doc, stderr = ask(tmp_path, llm, config)
    assert code == 0, stderr
    usage = doc["usage"]
    assert isinstance(usage, dict)
    assert usage["sub"]["cost_usd"] == pytest.approx(PROMPTS * (7 * 0.001 + 3 * 0.002))


def test_a_router_file_no_model_names_is_said_to_be_unused(tmp_path: Path, llm: FakeLLM) -> None:
    config = router_config(tmp_path / "fleet.yaml", [llm.url])
    (tmp_path / "notes.txt").write_text("one line\n")
    llm.script("root", repl("FINAL('done')"))
    res = run_rlm("ask", str(tmp_path / "notes.txt"), "q?", "--model", "openai/root", "--api-base", llm.url,
                  "--sub-model", "openai/sub", "--router-config", str(config), "--policy", "paper", "--no-leads")
    assert res.code == 0 and res.stdout == "done\n", res.stderr
    assert f"warning: --router-config {config} is not used: none of its model groups (fleet)" in res.stderr
    res = run_rlm("ask", str(tmp_path / "notes.txt"), "q?", "--model", "openai/root", "--api-base", llm.url,
                  "--sub-model", "openai/fleet", "--router-config", str(config))  # the proxy form by mistake
    assert res.code == 2 and "did you mean 'fleet'?" in res.stderr
