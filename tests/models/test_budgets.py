"""Budgets: --max-cost, --max-tokens, --max-sub-calls and --timeout stop the run (exit 6) with
the best partial answer, and no request starts after a limit is reached."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rlm_cli.config import Settings
from rlm_cli.errors import BudgetExceededError, ExitCode
from rlm_cli.models.budget import Budget
from rlm_cli.models.usage import CallRecord, Usage
from tests.support import inproc
from tests.support.cli import Result, run_rlm
from tests.support.fake_llm import FakeLLM, Reply, openai_tokens, repl

#: gpt-4o-mini in litellm's bundled price map: $0.15 / 1M input tokens -> 100k tokens cost $0.015.
PRICED = "gpt-4o-mini"


@pytest.fixture(autouse=True, scope="module")
def _litellm_imported() -> None:
    """Import litellm once up front: its import (seconds) would otherwise eat the short wall-clock
    budgets of the first test that runs."""
    from rlm_cli.models.client import ModelClient

    ModelClient(Settings()).litellm()


def _budget_error(run: inproc.Run) -> BudgetExceededError:
    assert isinstance(run.error, BudgetExceededError), run.error
    assert run.error.exit_code == ExitCode.BUDGET
    return run.error


def test_cost_budget_stops_before_the_next_call(tmp_path: Path, llm: FakeLLM) -> None:
    """A provider that counts 100,000 prompt tokens for a prompt tiktoken counts at about 1,100:
    the first request reserved its worst case (~$0.010: its counted input and 16,384 output tokens)
    and cost $0.015, the overshoot being its excess; the next one, reserving by the ratio seen,
    cannot fit the $0.02 and is never sent."""
    llm.script(PRICED, *[Reply(text=repl(f"print('step {i}')"), prompt_tokens=100_000, completion_tokens=10)
                         for i in (1, 2, 3)])
    run = inproc.run(llm, [inproc.corpus(tmp_path)], model=f"openai/{PRICED}", sub_model=f"openai/{PRICED}",
                     max_cost=0.02)
    err = _budget_error(run)
    assert err.budget == "cost" and "$0.02" in err.message
    assert len(llm.requests) == 1
    assert "step 1" in err.partial  # the best partial answer: the root model's last reply
    usage = err.report.usage
    assert usage["root"]["cost_usd"] == pytest.approx(100_000 * 0.15e-6 + 10 * 0.6e-6)


def test_token_budget_lowers_the_last_reply_cap_and_never_crosses(tmp_path: Path, llm: FakeLLM) -> None:
    llm.count_tokens = openai_tokens  # counts as OpenAI does
    llm.script("root", *[repl(f"print('turn {i}')") for i in range(1, 9)])
    run = inproc.run(llm, [inproc.corpus(tmp_path)], max_tokens=4000)
    err = _budget_error(run)
    assert err.budget == "tokens" and "4,000" in err.message
    spent = sum(a + b for _, a, b in llm.billed)
    assert spent <= 4000 and len(llm.requests) >= 2
    caps = [r["max_tokens"] for r in llm.requests]
    assert caps[0] < 4000 and caps[-1] < caps[0], caps  # each asks for no more than what is left
    assert f"turn {len(llm.requests)}" in err.partial


def test_sub_call_budget_is_exact_under_concurrency(tmp_path: Path, llm: FakeLLM) -> None:
    llm.default("sub", Reply(text="sub answer", delay_s=0.05))
    llm.script("root", repl("r = llm_query_batched(['a', 'b', 'c', 'd', 'e', 'f'])\nprint(r)"),
               repl("print('never')"))
    run = inproc.run(llm, [inproc.corpus(tmp_path)], max_sub_calls=3)
    err = _budget_error(run)
    assert err.budget == "sub_calls"
    assert len(llm.chat_requests("sub")) == 3
    assert len(llm.chat_requests("root")) == 1  # the run stopped after the block
    output = run.of("output")[0]["output"]
    assert output.count("sub answer") == 3 and output.count("budget exceeded") == 3


def test_budget_covers_recursive_children(tmp_path: Path, llm: FakeLLM) -> None:
    llm.default("sub", "sub answer")
    llm.script("root",
               repl("print(rlm_query('look deeper'))"),                     # depth 0
               repl("print(llm_query_batched(['a', 'b', 'c']))"),          # the child at depth 1
               repl("print('never')"))
    run = inproc.run(llm, [inproc.corpus(tmp_path)], max_depth=2, max_sub_calls=2)
    err = _budget_error(run)
    assert err.budget == "sub_calls"
    assert len(llm.chat_requests("sub")) == 2
    assert len(llm.chat_requests("root")) == 2


def _timed_from_the_first_request(llm: FakeLLM, tmp_path: Path, seconds: float, first: str, *rest: Any,
                                  **overrides: Any) -> inproc.Run:
    """An in-process run whose ``--timeout`` clock starts when its first root request reaches the
    server (``seconds`` from then), not when the run starts: a loaded machine may take longer
    than ``seconds`` to load the corpus and start the worker, and the requests and blocks a test
    is about must still come before the deadline. The root model answers ``first``, then ``rest``
    (the ``--timeout`` of an hour it is given is moved; it would only end a hung run)."""
    from rlm_cli.models.client import ModelClient

    client = ModelClient(inproc.settings_for(llm, timeout=3600, **overrides))

    def start_the_clock(req: dict[str, Any]) -> str:
        client.budget.deadline = time.monotonic() + seconds
        return first

    llm.script("root", start_the_clock, *rest)
    return inproc.run(llm, [inproc.corpus(tmp_path)], client=client, timeout=3600, **overrides)


def test_wall_clock_budget_cuts_a_hanging_request(tmp_path: Path, llm: FakeLLM) -> None:
    run = _timed_from_the_first_request(llm, tmp_path, 3, repl("print('first look')"),
                                        Reply(text="too late", delay_s=60))
    assert len(llm.chat_requests("root")) == 2
    # the run is over while the server still holds the 60 s reply: it was not waited for (an
    # order of events, not a bound on the machine's speed)
    assert llm.in_flight == 1
    err = _budget_error(run)
    assert err.budget == "timeout"
    assert "first look" in err.partial


@pytest.mark.parametrize("mode", ["direct", "rlm"])
def test_a_server_that_keeps_the_stream_alive_without_answering_cannot_outlast_the_timeout(
        tmp_path: Path, llm: FakeLLM, mode: str) -> None:
    """A busy server (llama.cpp's, sse-starlette's) answers a streamed request with its headers
    and then ``: ping`` comments while the request waits: no chunk arrives, so neither the stream's
    deadline check nor the read timeout fires. ``--timeout 3`` waited 26 s for a 25 s wait; now the
    run stops at its deadline (the CLI's start and exit on top)."""
    llm.default("root", Reply(text="FINAL('6')", ping_for_s=60))
    (tmp_path / "a.txt").write_text("The retry count is 6.\n")
    res = run_rlm("ask", str(tmp_path), "How many retries?", "--model", "openai/root", "--api-base", llm.url,
                  "--timeout", "3", "--mode", mode, "--no-llm-cache", "--json")
    assert res.code == ExitCode.BUDGET, res.stderr
    assert "time budget of 3 s reached" in res.stderr and json.loads(res.stdout)["budget"] == "timeout", res.stderr
    # the 60 s wait was not waited out: rlm is done while the server still keeps the request waiting
    # (an order of events, not a bound on the machine's speed)
    assert len(llm.chat_requests("root")) == 1 and llm.pings_over == [], res.stderr


def test_sub_calls_cut_by_the_deadline_are_not_counted_as_retries(tmp_path: Path, llm: FakeLLM) -> None:
    """A sub-call in flight when --timeout passes is not retried: none may be counted as a retry
    (the summary read "0 sub-calls ... 8 retries")."""
    llm.default("sub", Reply(text="late", delay_s=30))  # in flight at the deadline however slow the machine
    (tmp_path / "a.txt").write_text("hello\n")
    # A first run starts the shared model host (litellm's import, seconds of CPU on a loaded
    # machine), so the timed run's 8 s go to its own work: its four sub-calls are sent in time.
    llm.default("root", repl("FINAL('warm')"))
    warm = run_rlm("ask", str(tmp_path), "warm up?", "--model", "openai/root", "--api-base", llm.url, "--no-leads")
    assert warm.code == 0, warm.stderr
    llm.script("root", repl("parts = llm_query_batched(['a', 'b', 'c', 'd'])\nFINAL('x')"))
    res = run_rlm("ask", str(tmp_path), "q?", "--model", "openai/root", "--sub-model", "openai/sub",
                  "--api-base", llm.url, "--timeout", "8", "--json", "--policy", "paper", "--no-leads",
                  "--no-llm-cache")
    assert res.code == ExitCode.BUDGET, res.stderr
    usage = json.loads(res.stdout)["usage"]
    # none retried; the 4 sent count as calls the provider got, abandoned at the deadline (issue 38)
    assert usage["retries"] == 0 and usage["sub"]["calls"] == usage["sub"]["abandoned_calls"] == 4, usage


def test_wall_clock_budget_cuts_a_long_code_block(tmp_path: Path, llm: FakeLLM) -> None:
    run = _timed_from_the_first_request(llm, tmp_path, 4, repl("print('first look')"),
                                        repl("import time\ntime.sleep(60)"), "never asked", cell_timeout=120)
    err = _budget_error(run)
    assert err.budget == "timeout"
    assert len(llm.chat_requests("root")) == 2
    outputs = [e for e in run.events if e["type"] == "output"]
    # the 60 s cell was killed (it did not finish), its limit what the run's 4 s had left, not the
    # 120 s cell timeout: the limit the worker was given, not a bound on the machine's speed
    lost = re.fullmatch(r"the cell timed out after (\d+(?:\.\d)?) s \(all the run's --timeout had left\) "
                        r"and was killed.*", outputs[-1]["lost"] or "", re.DOTALL)
    assert lost and float(lost[1]) <= 4, outputs[-1]["lost"]


def test_cli_budget_exit_6_with_labelled_partial_answer_and_json(tmp_path: Path, llm: FakeLLM) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    llm.script(PRICED, *[Reply(text=repl(f"print('step {i}')") + f"\nBest so far: {i}", prompt_tokens=40_000,
                               completion_tokens=10) for i in (1, 2, 3)])
    res = run_rlm("ask", str(tmp_path / "a.txt"), "q?", "--model", f"openai/{PRICED}", "--api-base", llm.url,
                  "--max-cost", "0.02", "--json")
    assert res.code == 6, res.stderr
    doc = json.loads(res.stdout)
    assert doc["partial"] is True and doc["status"] == "budget_exceeded" and doc["budget"] == "cost"
    # $0.006 a call (40,000 prompt tokens): the third fits only with a lowered max_tokens.
    assert "Best so far: 3" in doc["answer"]
    assert doc["usage"]["root"]["calls"] == 3 and doc["usage"]["root"]["cost_usd"] <= 0.02
    assert llm.requests[2]["max_tokens"] < llm.requests[0]["max_tokens"]
    assert doc["usage"]["sub"]["calls"] == 0
    assert "cost budget of $0.02 reached" in res.stderr and "PARTIAL" in res.stderr
    assert "Traceback" not in res.stderr
    assert len(llm.requests) == 3


# -- the Budget class --------------------------------------------------------------------------------

def test_sub_call_reservations_never_overshoot() -> None:
    budget = Budget(Settings(max_sub_calls=5), Usage())
    granted: list[int] = []
    barrier = threading.Barrier(20)

    def try_one(i: int) -> None:
        barrier.wait()
        try:
            budget.check(sub_call=True)
            granted.append(i)
        except BudgetExceededError:
            pass

    threads = [threading.Thread(target=try_one, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 5
    assert budget.exceeded is not None and budget.exceeded.budget == "sub_calls"



def test_a_granted_sub_call_may_retry_after_the_sub_call_budget_is_spent() -> None:
    usage = Usage()
    budget = Budget(Settings(max_sub_calls=1, max_tokens=100), usage)
    budget.check(sub_call=True)  # the one sub-call granted; its first attempt fails (a dead server)
    with pytest.raises(BudgetExceededError):
        budget.check(sub_call=True)  # a second sub-call is refused: the budget is spent
    budget.check(counted=True)  # the granted call's retry still goes out: it is the same call
    with pytest.raises(BudgetExceededError, match="sub-call budget"):
        budget.check()  # anything else (a root call) is refused
    usage.add(CallRecord("m", "sub", 1, 90, 20, None, 0.1))
    with pytest.raises(BudgetExceededError, match="token budget"):
        budget.check(counted=True)  # the other limits still stop a retry
    assert budget.exceeded is not None and budget.exceeded.budget == "sub_calls"

def test_next_check_notices_deadline_and_spend() -> None:
    budget = Budget(Settings(timeout=0.2), Usage())
    budget.check()
    time.sleep(0.25)
    assert budget.exceeded is None  # nothing was refused yet
    with pytest.raises(BudgetExceededError, match="time budget"):
        budget.check()
    assert budget.exceeded is not None and budget.exceeded.budget == "timeout"

    usage = Usage()
    budget = Budget(Settings(max_cost=0.01), usage)
    usage.add(CallRecord("m", "sub", 1, 10, 10, None, 0.1))  # unknown price: not counted
    budget.check()
    usage.add(CallRecord("m", "sub", 1, 10, 10, 0.011, 0.1))
    with pytest.raises(BudgetExceededError) as info:
        budget.check(sub_call=True)
    assert info.value.budget == "cost" and budget.sub_calls_started == 0
    with pytest.raises(BudgetExceededError) as again:
        budget.check()
    assert str(again.value) == str(info.value) and again.value is not info.value  # the same error, a fresh copy


def test_final_in_the_block_that_crossed_a_budget_still_answers(tmp_path: Path, llm: FakeLLM) -> None:
    """Two sub-calls in flight at once, each within its reservation (about 6,560 tokens), answered by
    a server that ignores max_tokens (7,000 output tokens each): the budget is crossed by the
    requests in flight, and the block that made them still finishes with FINAL."""
    llm.default("sub", Reply(text="part", prompt_tokens=10, completion_tokens=7_000, delay_s=0.3))
    llm.script("root", Reply(text=repl("print(1)"), prompt_tokens=100, completion_tokens=10),
               Reply(text=repl("r = llm_query_batched(['a', 'b'])\nFINAL(' '.join(r))"), prompt_tokens=100,
                     completion_tokens=10))
    run = inproc.run(llm, [inproc.corpus(tmp_path)], max_tokens=14_000)
    assert run.error is None, run.error  # 14,240 tokens used, but the answer came before any refusal
    assert run.answer == "part part"


def test_cost_budget_warns_when_a_price_is_unknown(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(1)"), repl("FINAL('done')"))
    run = inproc.run(llm, [inproc.corpus(tmp_path)], max_cost=1.0)
    assert run.error is None, run.error
    warnings = [n for n in run.notices() if "price of openai/root is unknown" in n]
    assert len(warnings) == 1  # once per model, not per call
    assert run.outcome is not None and run.outcome.usage["cost_usd"] is None


# -- what a budget stop reports (issue #15) ----------------------------------------------------------

_FAN_OUT = "outs = [llm_query(f'q{i}') for i in range(8)]\nprint(outs)"


def _trace_summary(path: Path) -> dict[str, object]:
    events = [json.loads(line) for line in path.read_text().splitlines()]
    return next(e for e in reversed(events) if e["type"] == "summary")


def test_budget_stop_reports_the_real_counts_and_no_code_as_the_answer(tmp_path: Path, llm: FakeLLM) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    llm.default("sub", "sub answer")
    llm.script("root", "I will look at the size first.\n```repl\nprint(len(context))\n```",
               "Now I ask about every part.\n```repl\n" + _FAN_OUT + "\n```", repl("print('never')"))
    trace = tmp_path / "run.jsonl"
    res = run_rlm("ask", str(tmp_path / "a.txt"), "q?", "--model", "openai/root", "--sub-model", "openai/sub",
                  "--api-base", llm.url, "--max-sub-calls", "5", "--json", "--no-llm-cache", "--trace", str(trace))
    assert res.code == 6, res.stderr
    assert len(llm.chat_requests("sub")) == 5
    doc = json.loads(res.stdout)
    assert doc["status"] == "budget_exceeded" and doc["budget"] == "sub_calls" and doc["partial"] is True
    assert doc["sandbox"] in ("bwrap", "process", "sandbox-exec")  # the level used, not the setting `auto`
    assert (doc["iterations"], doc["sub_calls"]) == (2, 5)
    assert "2 iterations, 5 sub-calls" in res.stderr  # the closing summary line
    summary = _trace_summary(trace)
    assert (summary["iterations"], summary["sub_calls"]) == (2, 5)
    answer = doc["answer"]
    assert answer.startswith("No final answer yet")
    assert "Now I ask about every part." in answer  # what the model said, without its code
    assert "sub answer" in answer and "[a sub-call failed]" in answer  # the head of what the code printed
    assert "budget exceeded" not in answer  # rlm's error string for the code stays in the trajectory
    assert "```" not in answer and "llm_query(" not in answer
    assert summary["answer"] == answer


def test_budget_stop_in_a_sub_rlm_answers_with_the_roots_words_not_the_childs_code(
        tmp_path: Path, llm: FakeLLM) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    llm.default("sub", "sub answer")
    llm.script("root",
               "Delegating to a sub-RLM.\n```repl\nr = rlm_query('count the parts')\nprint('child said:', r)\n```",
               "CHILD PROSE\n```repl\n" + _FAN_OUT + "\n```",  # the sub-RLM at depth 1
               repl("print('never')"))
    res = run_rlm("ask", str(tmp_path / "a.txt"), "q?", "--model", "openai/root", "--sub-model", "openai/sub",
                  "--api-base", llm.url, "--max-sub-calls", "5", "--max-depth", "2", "--no-llm-cache")
    assert res.code == 6, res.stderr
    assert "PARTIAL" in res.stderr and "1 iteration, 5 sub-calls" in res.stderr
    assert "Delegating to a sub-RLM." in res.stdout and "child said: [a sub-call failed]" in res.stdout
    assert "budget exceeded" not in res.stdout  # rlm's error string for the child's stop stays in the trajectory
    assert "CHILD PROSE" not in res.stdout and "llm_query" not in res.stdout and "rlm_query(" not in res.stdout


def test_a_final_line_in_the_last_reply_is_the_partial_answer(tmp_path: Path, llm: FakeLLM) -> None:
    llm.default("sub", "sub answer")
    llm.script("root", repl("print(len(context))"),
               "Checking once more, but so far:\nFINAL(three parts, all fine)\n```repl\n" + _FAN_OUT + "\n```")
    run = inproc.run(llm, [inproc.corpus(tmp_path)], max_sub_calls=5)
    assert _budget_error(run).partial == "three parts, all fine"


# -- reservations against hostile model code (issue #26) ---------------------------------------------
#: Two priced models (litellm's map: $0.15 / $0.60 per 1M input / output tokens), so that the root's
#: and the sub-calls' scripted replies stay apart on the server.
ROOT_PRICED, SUB_PRICED = "gpt-4o-mini", "gpt-4o-mini-2024-07-18"
_BATCH = "r = llm_query_batched([' '.join(['word'] * WORDS) + str(i) for i in range(100)])\nprint(len(r))"
_THREADS = ("import threading\nout = []\n"
            "def one(i):\n    out.append(llm_query(' '.join(['word'] * WORDS) + str(i)))\n"
            "ts = [threading.Thread(target=one, args=(i,)) for i in range(100)]\n"
            "[t.start() for t in ts]\n[t.join() for t in ts]\nprint(len(out))")


def _hostile(tmp_path: Path, llm: FakeLLM, code: str, words: int, *flags: str,
             usage: bool = True) -> tuple[Result, dict[str, Any], int, float]:
    """`rlm ask --json` whose model code fans out 100 sub-calls of about ``words`` tokens; returns
    the result, its document, and the tokens and dollars the server billed (as it counted them)."""
    (tmp_path / "a.txt").write_text("hello\n")
    llm.script(ROOT_PRICED, repl(code.replace("WORDS", str(words))), repl("FINAL('done')"))
    llm.default(SUB_PRICED, Reply(text="ok", usage=usage))
    res = run_rlm("ask", str(tmp_path / "a.txt"), "q?", "--model", f"openai/{ROOT_PRICED}", "--sub-model",
                  f"openai/{SUB_PRICED}", "--api-base", llm.url, "--no-llm-cache", "--json", *flags)
    tokens = sum(a + b for _, a, b in llm.billed)
    cost = sum(a * 0.15e-6 + b * 0.6e-6 for _, a, b in llm.billed)
    return res, json.loads(res.stdout) if res.stdout.strip() else {}, tokens, cost


def test_max_cost_holds_against_100_batched_sub_calls(tmp_path: Path, llm: FakeLLM) -> None:
    """Before reservations every queued sub-call passed the check: $0.141 spent of $0.05 (47 calls
    of 20k tokens). Now none is sent that could cross the budget."""
    llm.count_tokens = openai_tokens
    res, doc, _, cost = _hostile(tmp_path, llm, _BATCH, 5_000, "--max-cost", "0.005")
    assert res.code == 6, res.stderr
    assert doc["budget"] == "cost" and "cost budget of $0.005 reached" in res.stderr
    assert cost <= 0.005, cost
    assert 2 <= len(llm.chat_requests(SUB_PRICED)) < 100
    assert doc["usage"]["cost_usd"] == pytest.approx(cost, abs=1e-6)  # rounded to 6 places


@pytest.mark.parametrize("honest", [True, False], ids=["counted-like-tiktoken", "counted-25%-higher"])
def test_max_tokens_holds_at_concurrency_1_against_100_threads(tmp_path: Path, llm: FakeLLM, honest: bool) -> None:
    """100 threads of model code calling llm_query at --max-concurrency 1 (before: 102,058 tokens
    used of 20,000). A server counting like tiktoken is never overshot; one counting 4 characters a
    token (25% more for this text) by at most one request's excess."""
    llm.count_tokens = openai_tokens if honest else None
    res, doc, tokens, _ = _hostile(tmp_path, llm, _THREADS, 300, "--max-tokens", "6000", "--max-concurrency", "1")
    assert res.code == 6, res.stderr
    assert doc["budget"] == "tokens" and "token budget of 6,000 tokens reached" in res.stderr
    excess = 0 if honest else max(a for m, a, _ in llm.billed if m == SUB_PRICED) // 4
    assert tokens <= 6000 + excess, tokens
    assert 2 <= len(llm.chat_requests(SUB_PRICED)) < 100 and llm.max_in_flight == 1


def test_max_tokens_holds_against_100_concurrent_batched_sub_calls(tmp_path: Path, llm: FakeLLM) -> None:
    llm.count_tokens = openai_tokens
    res, doc, tokens, _ = _hostile(tmp_path, llm, _BATCH, 300, "--max-tokens", "6000")
    assert res.code == 6, res.stderr
    assert tokens <= 6000 and doc["usage"]["total_tokens"] == tokens
    assert 2 <= len(llm.chat_requests(SUB_PRICED)) < 100


def test_a_server_sending_no_usage_is_counted_and_said_once(tmp_path: Path, llm: FakeLLM) -> None:
    """Before: 0 tokens counted for 100 sub-calls, exit 0. Now rlm counts them with tiktoken."""
    llm.count_tokens = openai_tokens
    res, doc, tokens, _ = _hostile(tmp_path, llm, _BATCH, 300, "--max-tokens", "6000", usage=False)
    assert res.code == 6, res.stderr
    assert res.stderr.count("sent no token counts; rlm counts its requests with tiktoken") == 1, res.stderr
    assert tokens <= 6000  # rlm's count (4 tokens a message) is never below the server's (3)
    assert doc["usage"]["sub"]["input_tokens"] > 0 and doc["usage"]["sub"]["cost_usd"] > 0


def test_a_budget_reached_before_any_model_call_shows_no_leads_as_the_models_output(
        tmp_path: Path, llm: FakeLLM) -> None:
    (tmp_path / "retry.py").write_text("RETRY_LIMIT = 7  # how long the client waits\n")
    llm.default("root", "unused")
    res = run_rlm("ask", str(tmp_path), "How long does the client wait?", "--model", "openai/root",
                  "--api-base", llm.url, "--leads", "--max-tokens", "100", "--no-llm-cache")
    assert res.code == 6, res.stderr
    assert llm.chat_requests("root") == []  # the first request could cross the budget: never sent
    assert res.stdout.startswith("No final answer yet")
    assert "What its last code printed" not in res.stdout and "RETRY_LIMIT" not in res.stdout
