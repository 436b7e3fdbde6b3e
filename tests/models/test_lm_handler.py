"""The model layer against the scripted HTTP server: concurrency, retries, errors, windows, costs.

Calls go through the real path: the REPL worker's client code -> Unix socket -> LMHandler ->
ModelClient -> litellm -> HTTP -> FakeLLM (all in this process, litellm imported once).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlm_cli.config import Settings
from rlm_cli.errors import ExitCode
from rlm_cli.models.client import ModelClient
from rlm_cli.models.failures import CallFailed, classify_error, retry_after_s
from rlm_cli.models.limiter import AdaptiveLimiter
from rlm_cli.models.relay import LMHandler
from rlm_cli.sandbox.worker import Worker
from tests.support.fake_llm import FakeLLM, Reply, last_user


def settings_for(llm: FakeLLM, **overrides: Any) -> Settings:
    s = Settings(model="openai/root", sub_model="openai/sub", api_base=llm.url, llm_cache=False)
    for k, v in overrides.items():
        setattr(s, k, v)
    return s


class Rig:
    """A ModelClient + LMHandler + an in-process REPL worker client talking to them."""

    def __init__(self, llm: FakeLLM, **overrides: Any) -> None:
        self.client = ModelClient(settings_for(llm, **overrides))
        self.handler = LMHandler(self.client)
        self.worker = Worker({"socket": self.handler.socket_path, "token": self.handler.register(0, os.getpid),
                              "context_text": ""})

    def close(self) -> None:
        self.handler.close()


@pytest.fixture
def rig_factory(llm: FakeLLM) -> Iterator[Any]:
    rigs: list[Rig] = []

    def make(**overrides: Any) -> Rig:
        rigs.append(Rig(llm, **overrides))
        return rigs[-1]

    yield make
    for r in rigs:
        r.close()


def echo(req: dict[str, Any]) -> str:
    return "ans:" + last_user(req)


# -- concurrency -------------------------------------------------------------------------------

def test_batch_of_64_runs_16_at_a_time_and_keeps_order(llm: FakeLLM, rig_factory: Any) -> None:
    llm.default("sub", Reply(text=echo, delay_s=0.5))
    rig = rig_factory()
    rig.worker.llm_query("warm up")  # litellm import and first connection are not what we measure
    answers = rig.worker.llm_query_batched([f"p{i}" for i in range(64)])
    assert answers == [f"ans:p{i}" for i in range(64)]
    # The cap is reached and never passed: 16 at a time, counted by the server (not timed: a
    # sequential or 4-wide batch never has 16 in flight). Each reply takes 0.5 s, longer than a
    # loaded 2-core machine needs to put 16 calls in flight (~10-15 ms of litellm CPU each).
    assert llm.max_in_flight == 16
    assert rig.client.usage.sub_calls == 65


def test_429_above_4_concurrent_still_finishes_the_batch(llm: FakeLLM, rig_factory: Any) -> None:
    llm.default("sub", Reply(text=echo, delay_s=0.1))
    llm.max_concurrent = 4
    rig = rig_factory()
    answers = rig.worker.llm_query_batched([f"p{i}" for i in range(40)])
    assert answers == [f"ans:p{i}" for i in range(40)]
    assert llm.rate_limited > 0
    summary = rig.client.usage.summary()
    assert summary["failed_calls"] == 0
    assert summary["rate_limited"] == llm.rate_limited
    assert summary["concurrency"]["decreases"] >= 1
    assert summary["concurrency"]["lowest"] <= 4


def test_failed_prompt_gives_error_string_at_its_position(llm: FakeLLM, rig_factory: Any) -> None:
    llm.default("sub", Reply(text=echo, delay_s=0.05))
    rig = rig_factory(sub_model_window=1000)
    answers = rig.worker.llm_query_batched(["p0", "p1", "word " * 5000, "p3"])
    assert answers[:2] == ["ans:p0", "ans:p1"] and answers[3] == "ans:p3"
    assert answers[2].startswith("Error: prompt of about")
    assert len(llm.chat_requests("sub")) == 3


def test_400_is_not_retried_and_concerns_only_that_prompt(llm: FakeLLM, rig_factory: Any) -> None:
    llm.script("sub", Reply(status=400), "fine")
    rig = rig_factory()
    first = rig.worker.llm_query("q1")
    assert first.startswith("Error:") and "400" in first and "will stop" not in first
    assert rig.worker.llm_query("q2") == "fine"
    assert len(llm.chat_requests("sub")) == 2
    assert rig.client.fatal is None


# -- retries -----------------------------------------------------------------------------------

def test_429_with_retry_after_then_500_then_success(llm: FakeLLM, rig_factory: Any) -> None:
    llm.script("sub", Reply(status=429, headers={"Retry-After": "1"}), Reply(status=500), "finally")
    rig = rig_factory()
    started = time.monotonic()
    assert rig.worker.llm_query("q") == "finally"
    elapsed = time.monotonic() - started
    assert len(llm.chat_requests("sub")) == 3
    assert elapsed >= 1.0  # Retry-After honoured (the attempts are counted below, not timed)
    s = rig.client.usage.summary()
    assert s["retries"] == 2 and s["rate_limited"] == 1
    assert rig.client.usage.records[-1].attempts == 3


def test_hang_past_request_timeout_is_retried_then_reported(llm: FakeLLM, rig_factory: Any) -> None:
    llm.script("sub", Reply(text="late", delay_s=2.0), Reply(text="late", delay_s=2.0))
    rig = rig_factory(request_timeout=0.3, retries=1)
    answer = rig.worker.llm_query("q")
    # Two 0.3 s timeouts, not the server's 2 s: had a reply been waited for, it would be "late".
    assert answer.startswith("Error: model openai/sub:")
    assert "timed out" in answer.lower() and "after 2 attempts" in answer
    assert len(llm.chat_requests("sub")) == 2
    llm.default("sub", "ok")
    assert rig.worker.llm_query("again") == "ok"  # a failed prompt does not stop later ones


def test_malformed_json_is_retried(llm: FakeLLM, rig_factory: Any) -> None:
    llm.script("sub", Reply(raw_body=b'{"choices": [oops'), "clean")
    rig = rig_factory()
    assert rig.worker.llm_query("q") == "clean"
    assert len(llm.chat_requests("sub")) == 2


def test_connection_closed_mid_response_is_retried(llm: FakeLLM, rig_factory: Any) -> None:
    llm.script("sub", Reply(text="cut short", cut_after=40), Reply(drop=True), "after drops")
    rig = rig_factory()
    assert rig.worker.llm_query("q") == "after drops"
    assert len(llm.chat_requests("sub")) == 3
    assert rig.client.usage.summary()["retries"] == 2


def test_persistent_5xx_gives_up_after_retries(llm: FakeLLM, rig_factory: Any) -> None:
    llm.default("sub", Reply(status=503))
    rig = rig_factory(retries=2)
    answer = rig.worker.llm_query("q")
    assert answer.startswith("Error:") and "after 3 attempts" in answer
    assert len(llm.chat_requests("sub")) == 3
    assert rig.client.usage.summary()["failed_calls"] == 1


def test_401_on_a_sub_call_is_fatal_and_not_retried(llm: FakeLLM, rig_factory: Any) -> None:
    llm.default("sub", Reply(status=401))
    llm.default("root", "never asked")
    rig = rig_factory()
    answer = rig.worker.llm_query("q")
    assert answer.startswith("Error:") and "401" in answer and "the run will stop" in answer
    assert len(llm.chat_requests("sub")) == 1
    assert rig.client.fatal is not None and rig.client.fatal.exit_code == ExitCode.PROVIDER
    # Every later call, root or sub, fails at once without a request.
    assert rig.worker.llm_query("again").startswith("Error:")
    with pytest.raises(CallFailed):
        rig.client.complete([{"role": "user", "content": "hi"}], model="openai/root", role="root")
    assert len(llm.requests) == 1


def test_401_on_a_root_call_raises_provider_error_once(llm: FakeLLM) -> None:
    llm.script("root", Reply(status=401))
    client = ModelClient(settings_for(llm))
    with pytest.raises(CallFailed) as info:
        client.complete([{"role": "user", "content": "hi"}], model="openai/root", role="root")
    assert info.value.exit_code == ExitCode.PROVIDER and info.value.status == 401
    assert "scripted status 401" in info.value.message
    assert len(llm.requests) == 1


def test_unreachable_api_base_says_to_check_it() -> None:
    import socket

    with socket.socket() as probe:  # a port with no listener: bind, note it, close
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}/v1"
    client = ModelClient(Settings(model="openai/root", api_base=base, retries=1))
    with pytest.raises(CallFailed) as info:
        client.complete([{"role": "user", "content": "hi"}], model="openai/root", role="root")
    assert info.value.exit_code == ExitCode.PROVIDER
    assert f"could not connect to {base}" in info.value.message
    assert info.value.hint is not None and "check --api-base and that the server is running" in info.value.hint


# -- windows and models --------------------------------------------------------------------------

def test_oversized_prompt_is_refused_before_sending(llm: FakeLLM, rig_factory: Any) -> None:
    llm.default("sub", "should not be called")
    rig = rig_factory(sub_model_window=1000)
    answer = rig.worker.llm_query("word " * 5000)
    assert answer.startswith("Error: prompt of about 5,0")
    assert "1,000 tokens" in answer and "Split it" in answer
    assert llm.requests == []
    assert rig.client.usage.summary()["refused_oversized"] == 1
    assert rig.worker.llm_query("word " * 500) == "should not be called"  # a fitting one goes through


def test_window_of_a_known_model_comes_from_litellm(llm: FakeLLM, rig_factory: Any) -> None:
    rig = rig_factory(sub_model="openai/gpt-4o-mini")
    assert rig.client.input_window("openai/gpt-4o-mini") == 128_000
    assert rig.client.input_window("openai/unknown-local") == 32_768
    answer = rig.worker.llm_query("token " * 130_000)
    assert "128,000 tokens" in answer
    assert llm.requests == []


def test_the_relay_tells_llm_map_the_window_and_reply_cap_without_a_model_call(llm: FakeLLM,
                                                                                rig_factory: Any) -> None:
    rig = rig_factory(sub_model="openai/gpt-4o-mini")
    info = json.loads(rig.worker._request({"type": "window", "model": None}))
    assert info == {"window": 128_000, "reply": rig.client.reply_cap("openai/gpt-4o-mini")} and info["reply"] == 16_384
    assert json.loads(rig.worker._request({"type": "window", "model": "openai/root"}))["window"] == 32_768
    assert "not available to code" in rig.worker._request({"type": "window", "model": "openai/gpt-5.5-pro"})
    assert llm.requests == [] and rig.client.usage.sub_calls == 0


def test_code_cannot_switch_to_another_model(llm: FakeLLM, rig_factory: Any) -> None:
    llm.default("root", "root answer")
    rig = rig_factory()
    assert "not available to code" in rig.worker.llm_query("q", model="openai/gpt-5.5-pro")
    assert rig.worker.llm_query("q", model="openai/root") == "root answer"  # configured models are fine
    assert [r["model"] for r in llm.requests] == ["root"]


# -- usage and cost ------------------------------------------------------------------------------

def test_usage_is_per_request_and_cost_unknown_is_null(llm: FakeLLM) -> None:
    llm.default("gpt-4o-mini", Reply(text="priced", prompt_tokens=1000, completion_tokens=500))
    llm.default("sub", Reply(text="free?", prompt_tokens=10, completion_tokens=5))
    client = ModelClient(settings_for(llm, model="openai/gpt-4o-mini"))
    msg = [{"role": "user", "content": "hi"}]
    client.complete(msg, model="openai/gpt-4o-mini", role="root")
    client.complete(msg, model="openai/sub", role="sub")
    s = client.usage.summary()
    priced = 1000 * 0.15e-6 + 500 * 0.6e-6  # gpt-4o-mini in litellm's bundled price map
    assert s["root"]["cost_usd"] == pytest.approx(priced)
    assert s["root"]["input_tokens"] == 1000 and s["root"]["output_tokens"] == 500
    assert s["sub"]["cost_usd"] is None  # unknown model: null, not 0
    assert s["cost_usd"] is None
    assert s["total_tokens"] == 1515
    assert client.usage.known_cost_usd == pytest.approx(priced)


def test_unpriced_families_count_as_unknown_not_free(llm: FakeLLM) -> None:
    client = ModelClient(settings_for(llm))
    assert client.price_known("openai/gpt-4o-mini")
    assert not client.price_known("openrouter/anthropic/claude-sonnet-4.6")  # litellm says 0; it is not free
    assert not client.price_known("openai/root")


@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic, about litellm's Router types
def test_router_config_spreads_calls_over_deployments(llm: FakeLLM, tmp_path: Path) -> None:
    other = FakeLLM()
    try:
        for server in (llm, other):
            server.default("gpt-4o-mini", Reply(text="routed", prompt_tokens=100, completion_tokens=10))
        config = tmp_path / "router.yaml"
        config.write_text("model_list:\n" + "".join(
            f"  - model_name: sub\n    litellm_params:\n      model: openai/gpt-4o-mini\n"
            f"      api_base: {server.url}\n      api_key: sk-test\n" for server in (llm, other))
            + "router_settings:\n  routing_strategy: simple-shuffle\n")
        s = Settings(model="openai/root", sub_model="sub", router_config=config, llm_cache=False)
        client = ModelClient(s)
        with LMHandler(client) as handler:
            worker = Worker({"socket": handler.socket_path, "token": handler.register(0, os.getpid),
                             "context_text": ""})
            assert worker.llm_query_batched(["a"] * 16) == ["routed"] * 16
        assert len(llm.requests) + len(other.requests) == 16
        assert llm.requests and other.requests  # both deployments served some
        assert client.usage.summary()["sub"]["cost_usd"] == pytest.approx(16 * (100 * 0.15e-6 + 10 * 0.6e-6))
    finally:
        other.close()


# -- units ---------------------------------------------------------------------------------------

class _Resp:
    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers


class _Err(Exception):
    def __init__(self, status: int | None, headers: dict[str, str] | None = None) -> None:
        super().__init__("x")
        self.status_code = status
        self.response = _Resp(headers or {})


def test_retry_after_parsing() -> None:
    assert retry_after_s(_Err(429, {"retry-after": "3"})) == 3.0
    assert retry_after_s(_Err(429, {"retry-after-ms": "250"})) == 0.25
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= (retry_after_s(_Err(429, {"retry-after": date})) or 0) <= 31
    assert retry_after_s(_Err(429, {})) is None
    assert retry_after_s(_Err(429, {"retry-after": "soon"})) is None


@pytest.mark.parametrize(("status", "kind"), [(429, "rate_limit"), (500, "retry"), (502, "retry"), (503, "retry"),
                                              (408, "retry"), (401, "auth"), (403, "auth"), (404, "not_found"),
                                              (400, "bad_request"), (422, "bad_request")])
def test_classify_by_status(status: int, kind: str) -> None:
    assert classify_error(_Err(status)) == kind


def test_adaptive_limiter_halves_once_per_round_and_grows_back() -> None:
    lim = AdaptiveLimiter(16)
    slots = [lim.acquire() for _ in range(16)]
    assert all(epoch == 0 for epoch, _ in slots)
    for epoch, _ in slots[:10]:  # ten 429s from the same round halve the cap once
        lim.release(epoch, rate_limited=True)
    assert lim.limit == 8 and lim.decreases == 1
    for epoch, _ in slots[10:]:
        lim.release(epoch, success=True)
    assert 8 < lim.limit < 9
    for _ in range(200):  # about one step up per `limit` successes
        epoch, _ = lim.acquire()
        lim.release(epoch, success=True)
    assert lim.limit == 16  # back to the maximum, never above
    epoch, _ = lim.acquire(timeout=0.1)
    with pytest.raises(TimeoutError):
        for _ in range(16):
            lim.acquire(timeout=0.05)


def test_cli_401_on_a_sub_call_stops_the_run_with_exit_4(tmp_path: Path, llm: FakeLLM) -> None:
    from tests.support.cli import model_flags, run_rlm
    from tests.support.fake_llm import repl

    (tmp_path / "a.txt").write_text("hello\n")
    llm.default("sub", Reply(status=401))
    llm.script("root", repl("a = llm_query('summarise: ' + context)\nFINAL(a)"), repl("print('never')"))
    res = run_rlm("ask", str(tmp_path / "a.txt"), "q?", *model_flags(llm))
    assert res.code == 4, res.stderr
    assert "model openai/sub" in res.stderr and "401" in res.stderr and "API key" in res.stderr
    assert "Traceback" not in res.stderr
    assert res.stdout == ""  # the answer built from the error string is not printed
    assert len(llm.chat_requests("sub")) == 1  # not retried
    assert len(llm.chat_requests("root")) == 1


# -- streaming (root calls) -------------------------------------------------------------------------

MSG = [{"role": "user", "content": "hello there"}]


def _collect() -> tuple[list[str | None], Any]:
    seen: list[str | None] = []
    return seen, seen.append


def test_a_streamed_call_hands_over_pieces_in_order_with_the_providers_usage(llm: FakeLLM) -> None:
    llm.script("root", Reply("The answer is forty-two, of course.", prompt_tokens=77, completion_tokens=9,
                             stream_chunk_chars=5))
    client = ModelClient(settings_for(llm))
    seen, on_delta = _collect()
    done = client.complete(MSG, model="openai/root", role="root", on_delta=on_delta)
    assert done.text == "The answer is forty-two, of course."
    assert len(seen) == 7 and "".join(p or "" for p in seen) == done.text  # 5-character pieces, in order
    req = llm.chat_requests("root")[0]
    assert req["stream"] is True and req["stream_options"] == {"include_usage": True}
    assert (done.record.input_tokens, done.record.output_tokens) == (77, 9)  # from the usage chunk
    assert done.record.cost_usd is None  # an unpriced model stays unknown


def test_a_stream_without_a_usage_chunk_is_counted(llm: FakeLLM) -> None:
    text = "word " * 40
    llm.script("root", Reply(text, stream_usage=False, prompt_tokens=999, completion_tokens=999))
    client = ModelClient(settings_for(llm))
    done = client.complete(MSG, model="openai/root", role="root", on_delta=lambda _: None)
    assert done.text == text
    assert 0 < done.record.output_tokens < 999 and 0 < done.record.input_tokens < 999  # counted, not reported
    assert client.usage.total_tokens == done.record.input_tokens + done.record.output_tokens


def test_a_streamed_priced_call_is_priced(llm: FakeLLM) -> None:
    llm.script("gpt-4o-mini", Reply("priced", prompt_tokens=1000, completion_tokens=500))
    client = ModelClient(settings_for(llm, model="openai/gpt-4o-mini"))
    done = client.complete(MSG, model="openai/gpt-4o-mini", role="root", on_delta=lambda _: None)
    assert done.record.cost_usd == pytest.approx(1000 * 0.15e-6 + 500 * 0.6e-6)


def test_a_provider_that_refuses_to_stream_gets_whole_replies(llm: FakeLLM) -> None:
    llm.refuse_stream = True
    llm.script("root", "whole reply one", "whole reply two")
    notes: list[str] = []
    client = ModelClient(settings_for(llm), notify=notes.append)
    seen, on_delta = _collect()
    assert client.complete(MSG, model="openai/root", role="root", on_delta=on_delta).text == "whole reply one"
    assert seen == ["whole reply one"]  # nothing was shown of the refused attempt: nothing to void
    assert client.complete(MSG, model="openai/root", role="root", on_delta=on_delta).text == "whole reply two"
    streamed = [bool(r.get("stream")) for r in llm.chat_requests("root")]
    assert streamed == [True, False, False]  # asked to stream once, then never again in the run
    assert client.usage.counters["retries"] == 0 and len(notes) == 1 and "refused to stream" in notes[0]


def test_a_provider_that_ignores_stream_is_asked_again_without_it(llm: FakeLLM) -> None:
    llm.script("root", Reply("plain body", no_stream=True), "the real reply")
    client = ModelClient(settings_for(llm))
    seen, on_delta = _collect()
    assert client.complete(MSG, model="openai/root", role="root", on_delta=on_delta).text == "the real reply"
    assert seen == ["the real reply"]
    assert [bool(r.get("stream")) for r in llm.chat_requests("root")] == [True, False]


def test_a_broken_stream_is_retried_and_its_pieces_voided(llm: FakeLLM) -> None:
    llm.script("root", Reply("abcdefghijklmnop", stream_chunk_chars=4, stream_cut_after=2),
               Reply("complete reply", stream_chunk_chars=4))
    client = ModelClient(settings_for(llm))
    seen, on_delta = _collect()
    done = client.complete(MSG, model="openai/root", role="root", on_delta=on_delta)
    assert done.text == "complete reply" and done.record.attempts == 2
    void = seen.index(None)
    assert "".join(p or "" for p in seen[:void]) == "abcdefgh"  # shown, then voided
    assert "".join(p or "" for p in seen[void + 1:]) == "complete reply"
    assert client.usage.counters["retries"] == 1


def test_a_failed_streamed_call_voids_nothing_it_did_not_show(llm: FakeLLM) -> None:
    """A 401 (never retried), and a 500 with --retries 0, end the call: no "sent again" signal
    (``None``), and the error counts its attempts in words that fit."""
    from rlm_cli.models.failures import CallFailed

    llm.script("root", Reply(status=401), Reply(status=500))
    seen, on_delta = _collect()
    messages = []
    for _ in range(2):  # a client after a 401 refuses every call: one client each
        with pytest.raises(CallFailed) as info:
            ModelClient(settings_for(llm, retries=0)).complete(MSG, model="openai/root", role="root",
                                                               on_delta=on_delta)
        messages.append(info.value.message)
    assert seen == [] and "401" in messages[0] and messages[1].endswith("500 (after 1 attempt)")


def test_the_time_budget_stops_a_slow_stream(llm: FakeLLM) -> None:
    from rlm_cli.errors import BudgetExceededError

    llm.script("root", Reply("x" * 200, stream_chunk_chars=4, stream_delay_s=0.1))  # 5 s in all
    client = ModelClient(settings_for(llm, timeout=1.0))
    shown, on_delta = _collect()
    with pytest.raises(BudgetExceededError) as info:
        client.complete(MSG, model="openai/root", role="root", on_delta=on_delta)
    # cut mid-stream (counted in characters, not timed): the whole reply would be 200 characters
    assert info.value.budget == "timeout" and len("".join(p for p in shown if p)) < 200


def test_streamed_replies_are_cached_and_replayed_whole_with_unknown_cost_kept(llm: FakeLLM, tmp_path: Path) -> None:
    from rlm_cli.models.llm_cache import LLMCache

    llm.script("root", "first streamed")
    llm.script("gpt-4o-mini", Reply("priced streamed", prompt_tokens=100, completion_tokens=10))
    cache = LLMCache(tmp_path / "llm")
    first = ModelClient(settings_for(llm, llm_cache=True), cache=cache)
    first.complete(MSG, model="openai/root", role="root", on_delta=lambda _: None)
    first.complete(MSG, model="openai/gpt-4o-mini", role="root", on_delta=lambda _: None)
    again = ModelClient(settings_for(llm, llm_cache=True), cache=cache)
    seen, on_delta = _collect()
    hit = again.complete(MSG, model="openai/root", role="root", on_delta=on_delta)
    assert hit.text == "first streamed" and hit.record.cached and seen == ["first streamed"]
    assert hit.record.cost_usd is None  # unknown stays unknown when replayed (it was "$0.0000")
    priced = again.complete(MSG, model="openai/gpt-4o-mini", role="root", on_delta=lambda _: None)
    assert priced.record.cached and priced.record.cost_usd == 0.0  # a priced model's replay costs nothing
    assert again.usage.summary()["cost_usd"] is None and len(llm.requests) == 2


def test_a_router_with_every_deployment_cooling_down_is_said_in_plain_words() -> None:
    from rlm_cli.models.failures import short_error

    raw = RuntimeError("litellm.RateLimitError: No deployments available for selected model, Try again in 30 "
                       "seconds. Passed model=fleet. pre-call-checks=False, cooldown_list=['7b07fc']")
    said = short_error(raw)
    assert "cooling down" in said and "--router-config" in said and "cooldown_list" not in said
    assert short_error(RuntimeError("litellm.APIError: APIError: boom\nmore")) == "boom"


def test_a_relay_serves_each_question_by_the_route_it_was_given() -> None:
    """A session's relay outlives its questions: each question hands it a whole ``Route`` (client,
    observers, rlm_query handler) in one call, and no attribute of the relay is written."""
    from rlm_cli.models.relay import LMHandler, Route

    first, second = ModelClient(Settings(model="openai/a")), ModelClient(Settings(model="openai/b"))
    handler = LMHandler(first)
    try:
        assert handler.client is first and handler.route.on_rlm_query is None
        seen: list[int] = []
        handler.route_to(Route(second, lambda prompt, context, depth: "child", lambda info: seen.append(1)))
        assert handler.client is second and handler.route.on_sub_call is not None
        assert handler._serve({"type": "rlm_query", "prompt": "p"}, 0) == {"ok": True, "text": "child"}
        assert not hasattr(handler, "on_rlm_query") and not hasattr(handler, "on_sub_call")
    finally:
        handler.close()
