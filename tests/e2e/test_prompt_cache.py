"""End-to-end: provider prompt caching through ``rlm ask`` (``rlm_cli.models.caching``).

Against a scripted Anthropic Messages API server (``tests/support/fake_anthropic.py``, which
caches as Anthropic does: only prefixes ending at a ``cache_control`` breakpoint), and against the
scripted OpenAI-compatible server reporting ``prompt_tokens_details.cached_tokens``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import run_rlm, two_file_repo
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_llm import FakeLLM, Reply, repl

CLAUDE = "anthropic/claude-sonnet-4-5"
#: USD per token of claude-sonnet-4-5 in litellm's bundled map (input, output).
FULL_PRICE = (3e-06, 1.5e-05)
ROOT_SCRIPT = (repl("print(len(context))"), repl("print(files[0]['path'])"), repl("print(grep('foo'))"),
               repl('FINAL("foo is in a.py")'))


@pytest.fixture
def claude() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic()
    yield server
    server.close()


def _ask(server_url: str, repo: Path, *extra: str) -> dict:
    res = run_rlm("ask", str(repo), "Where is foo?", "--model", CLAUDE, "--api-base", server_url, "--api-key", "k",
                  "--mode", "rlm", "--no-llm-cache", "--json", *extra)
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    doc["_stderr"] = res.stderr
    return doc


def test_claude_root_requests_mark_breakpoints_and_cache_reads_are_counted_and_priced(
        tmp_path: Path, claude: FakeAnthropic) -> None:
    repo = two_file_repo(tmp_path)
    claude.queue.extend(ROOT_SCRIPT)
    doc = _ask(claude.url, repo, "--max-cost", "5")  # reservations at the cache-write price
    assert doc["answer"] == "foo is in a.py"
    assert len(claude.requests) == 4
    marks = [claude.breakpoints(r) for r in claude.requests]
    assert all(1 <= n <= 4 for n in marks[1:]), marks
    # the system prompt is one of them: a block of Anthropic's top-level ``system``
    assert claude.requests[1]["system"][0].get("cache_control") == {"type": "ephemeral"}
    reads = sum(u[1] for u in claude.usages)
    writes = sum(u[2] for u in claude.usages)
    assert reads > 0 and writes > 0
    root = doc["usage"]["root"]
    assert root["cache_read_tokens"] == reads
    assert root["cache_write_tokens"] == writes
    assert doc["usage"]["by_model"][CLAUDE]["cache_read_tokens"] == reads
    assert doc["usage"]["sub"]["cache_read_tokens"] == 0
    # every input token is in input_tokens (the cached ones too); the cached ones cost less
    assert root["input_tokens"] == sum(u[0] + u[1] + u[2] for u in claude.usages)
    full = root["input_tokens"] * FULL_PRICE[0] + root["output_tokens"] * FULL_PRICE[1]
    assert root["cost_usd"] < full
    assert "served from the provider's prompt cache" in doc["_stderr"]

    # --no-prompt-cache: no breakpoint, nothing read from the cache, the full price
    claude.queue.extend(ROOT_SCRIPT)
    before = len(claude.requests)
    off = _ask(claude.url, repo, "--no-prompt-cache")
    assert [claude.breakpoints(r) for r in claude.requests[before:]] == [0, 0, 0, 0]
    assert off["usage"]["root"]["cache_read_tokens"] == 0
    assert off["usage"]["root"]["cost_usd"] == pytest.approx(
        off["usage"]["root"]["input_tokens"] * FULL_PRICE[0] + off["usage"]["root"]["output_tokens"] * FULL_PRICE[1])


def test_openai_cached_tokens_are_counted(tmp_path: Path, llm: FakeLLM) -> None:
    repo = two_file_repo(tmp_path)
    llm.script("gpt-4o", Reply(repl("print(len(context))"), cached_tokens=0),
               Reply(repl('FINAL("a.py")'), cached_tokens=1000))
    res = run_rlm("ask", str(repo), "Where is foo?", "--model", "openai/gpt-4o", "--api-base", llm.url, "--mode", "rlm",
                  "--no-llm-cache", "--json")
    assert res.code == 0, res.stderr
    root = json.loads(res.stdout)["usage"]["root"]
    assert root["cache_read_tokens"] == 1000
    assert root["cache_write_tokens"] == 0
    # gpt-4o in litellm's map: 2.5e-06 a token in, 1.25e-06 a cached one, 1e-05 out
    full = root["input_tokens"] * 2.5e-06 + root["output_tokens"] * 1e-05
    assert root["cost_usd"] == pytest.approx(full - 1000 * 1.25e-06)
    # no breakpoints for a provider that caches on its own
    assert not any(isinstance(m.get("content"), list) for r in llm.requests for m in r["messages"])


def test_estimate_says_what_it_assumes_about_caching(tmp_path: Path, claude: FakeAnthropic) -> None:
    repo = two_file_repo(tmp_path)
    res = run_rlm("ask", str(repo), "Where is foo?", "--model", CLAUDE, "--api-base", claude.url, "--api-key", "k",
                  "--estimate", "--json")
    assert res.code == 0, res.stderr
    totals = json.loads(res.stdout)["totals"]
    assert totals["prompt_cache"] is True
    assert "full input price" in totals["note"] and "prompt cache" in totals["note"]
    assert not claude.requests
