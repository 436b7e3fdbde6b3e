"""The on-disk response cache: keys, atomic entries, corrupt entries, and whole-run replay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlm_cli.config import Settings
from rlm_cli.models.client import ModelClient
from rlm_cli.models.failures import CallFailed
from rlm_cli.models.llm_cache import LLMCache, default_dir
from tests.support import inproc
from tests.support.fake_llm import FakeLLM, Reply, repl

MSG = [{"role": "user", "content": "hello"}]


def test_key_depends_on_model_base_messages_and_params_only() -> None:
    k = LLMCache.key("openai/a", MSG, api_base="http://x/v1")
    assert k == LLMCache.key("openai/a", [dict(MSG[0])], api_base="http://x/v1")
    others = {LLMCache.key("openai/b", MSG, api_base="http://x/v1"),
              LLMCache.key("openai/a", [{"role": "user", "content": "hello!"}], api_base="http://x/v1"),
              LLMCache.key("openai/a", MSG, api_base="http://y/v1"),
              LLMCache.key("openai/a", MSG, api_base="http://x/v1", params={"temperature": 0})}
    assert k not in others and len(others) == 4


def test_put_get_and_corrupt_entries(tmp_path: Path) -> None:
    cache = LLMCache(tmp_path / "llm")
    key = LLMCache.key("m", MSG)
    assert cache.get(key) is None
    assert cache.put(key, {"text": "hi", "input_tokens": 3})
    assert cache.get(key) == {"text": "hi", "input_tokens": 3, "v": 1, "key": key}
    assert [p.name for p in cache.path(key).parent.iterdir()] == [f"{key}.json"]  # no temp files left
    for junk in ("{not json", json.dumps({"v": 1, "key": "other", "text": "x"}), json.dumps(["list"]), ""):
        cache.path(key).write_text(junk)
        assert cache.get(key) is None
    assert cache.put(key, {"text": "rewritten"})
    assert cache.get(key)["text"] == "rewritten"  # type: ignore[index]


def test_unwritable_cache_never_fails(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cache = LLMCache(blocker / "llm")
    assert cache.put("ab" * 32, {"text": "x"}) is False
    assert cache.get("ab" * 32) is None


def _client(llm: FakeLLM, **kw: Any) -> ModelClient:
    return ModelClient(Settings(model="openai/root", sub_model="openai/sub", api_base=llm.url, **kw))


def test_client_replays_from_the_cache_and_counts_it(llm: FakeLLM) -> None:
    llm.script("sub", "first", "second", "third")
    a = _client(llm)
    assert [a.complete(MSG, model="openai/sub", role="sub").text for _ in range(2)] == ["first", "second"]
    b = _client(llm)  # a new run: the n-th identical request replays the n-th answer
    assert [b.complete(MSG, model="openai/sub", role="sub").text for _ in range(3)] == ["first", "second", "third"]
    assert len(llm.requests) == 3
    s = b.usage.summary()
    assert s["sub"]["calls"] == 3 and s["cached_calls"] == 2
    assert s["sub"]["input_tokens"] == b.usage.records[2].input_tokens  # replays cost no tokens
    assert default_dir().is_dir()


def test_failures_are_not_cached_and_no_llm_cache_bypasses(llm: FakeLLM) -> None:
    llm.script("root", Reply(status=400), "ok", "fresh")
    c = _client(llm)
    try:
        c.complete(MSG, model="openai/root", role="root")
    except CallFailed:
        pass
    assert _client(llm).complete(MSG, model="openai/root", role="root").text == "ok"
    assert _client(llm, llm_cache=False).complete(MSG, model="openai/root", role="root").text == "fresh"
    assert len(llm.requests) == 3


def _story(run: inproc.Run) -> tuple[list[tuple[Any, ...]], list[str]]:
    """The ordered root turns, code and outputs, and the sub-call answers (those finish in any order)."""
    keep = ("root_call", "code", "output", "final")
    return ([(e["type"], e.get("response"), e.get("code"), e.get("output")) for e in run.events if e["type"] in keep],
            sorted(str(e.get("response")) for e in run.of("sub_call")))


def test_second_identical_run_makes_no_request_and_replays_the_trajectory(tmp_path: Path, llm: FakeLLM) -> None:
    llm.default("sub", lambda req: f"summary of {len(str(req['messages']))} chars")
    llm.script("root",
               repl("parts = [context[i:i + 20] for i in range(0, len(context), 20)]\n"
                    "answers = llm_query_batched(['Summarise: ' + p for p in parts])\nprint(answers)"),
               repl("FINAL(str(len(answers)))"))
    corpus = inproc.corpus(tmp_path, "alpha beta gamma delta epsilon zeta eta theta iota kappa\n" * 3)
    first = inproc.run(llm, [corpus], llm_cache=True)
    assert first.error is None, first.error
    sent = len(llm.requests)
    assert sent > 3
    second = inproc.run(llm, [corpus], llm_cache=True)
    assert second.error is None, second.error
    assert len(llm.requests) == sent  # zero HTTP requests the second time
    assert second.answer == first.answer
    assert _story(second) == _story(first)
    assert second.outcome is not None and second.outcome.usage["cached_calls"] == sent
    assert second.outcome.usage["total_tokens"] == 0


def test_a_cached_run_of_an_unpriced_model_still_shows_cost_unknown(tmp_path: Path, llm: FakeLLM) -> None:
    from tests.support.cli import model_flags, run_rlm

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.txt").write_text("hello\n")
    lines = []
    for _ in range(2):
        llm.script("root", repl("print(len(context))"), repl("FINAL('six')"))
        res = run_rlm("ask", str(tmp_path / "c"), "q?", *model_flags(llm), "--json")
        assert res.code == 0, res.stderr
        doc = json.loads(res.stdout)
        assert doc["usage"]["cost_usd"] is None and doc["usage"]["root"]["cost_usd"] is None
        lines.append(res.stderr.strip().splitlines()[-1])
    assert doc["usage"]["cached_calls"] == 2 and len(llm.chat_requests("root")) == 2  # the second run sent nothing
    assert all("cost unknown (root unknown, sub no calls)" in line for line in lines), lines
    assert "$0.0000" not in lines[1]
