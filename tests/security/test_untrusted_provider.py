"""A provider answering HTTP 200 without a reply (issue 23): empty ``choices``, a message
without content, a body that is not JSON. Each is a provider error: retried like an outage,
then exit 4 with one line naming the model and what came back; never 20 iterations of nothing
ending in exit 5, never litellm's internals. Through the ``rlm`` command and the real fake
server (``tests/fake_llm.py``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.cli import model_flags, run_rlm, two_file_repo
from tests.support.fake_llm import NOT_JSON, FakeLLM, Reply, repl

CASES = {
    "no choices": (Reply(no_choices=True), "(HTTP 200) ended before it was complete"),
    "empty object": (Reply(raw_body=b"{}"), "answered HTTP 200 with no choices"),
    "no content": (Reply(no_content=True), "answered HTTP 200 with a message without content"),
    "not JSON": (Reply(raw_body=NOT_JSON), "answered HTTP 200 with a body that is not a chat completion"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_200_without_a_reply_is_a_provider_error_exit_4(tmp_path: Path, llm: FakeLLM, case: str) -> None:
    spec, words = CASES[case]
    llm.default("root", spec)
    res = run_rlm("ask", str(two_file_repo(tmp_path)), "What does foo return?", *model_flags(llm),
                  "--retries", "2", "--no-llm-cache")
    assert res.code == 4, (res.code, res.stderr)
    assert res.stdout == ""
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, res.stderr
    assert "model openai/root" in errors[0] and words in errors[0], errors[0]
    attempts = int(re.search(r"after (\d) attempts", errors[0]).group(1))  # type: ignore[union-attr]
    assert attempts == 3  # 1 + --retries 2, however it failed (a plain ask after a streamed one is one attempt)
    for internal in ("litellm", "OpenAIException", "APIResponse", "Traceback", "iteration 2"):
        assert internal not in res.stderr, (internal, res.stderr)
    # One turn's attempts (a streamed one first, then plain ones), not 20 turns of the prompt.
    assert len(llm.chat_requests("root")) <= 4


def test_json_error_document_for_an_empty_reply(tmp_path: Path, llm: FakeLLM) -> None:
    llm.default("root", Reply(no_choices=True))
    res = run_rlm("ask", str(two_file_repo(tmp_path)), "q?", *model_flags(llm), "--json", "--retries", "0",
                  "--no-llm-cache")
    assert res.code == 4, res.stderr
    doc = json.loads(res.stdout)
    assert doc["status"] == "error" and doc["exit_code"] == 4
    assert "openai/root" in doc["error"] and "HTTP 200" in doc["error"] and "litellm" not in doc["error"]


def test_an_empty_reply_is_retried_and_the_run_goes_on(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", Reply(no_choices=True), Reply(raw_body=NOT_JSON), repl("FINAL('42')"))
    res = run_rlm("ask", str(two_file_repo(tmp_path)), "What does foo return?", *model_flags(llm), "--json",
                  "--no-llm-cache")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["answer"] == "42" and doc["iterations"] == 1
    assert doc["usage"]["retries"] >= 1


def test_a_sub_call_answered_without_a_reply_tells_the_code(tmp_path: Path, llm: FakeLLM) -> None:
    """A sub-call's failure is a value the code sees (as for any provider error), named plainly."""
    llm.default("sub", Reply(no_content=True))
    llm.script("root", repl("r = llm_query('hi')\nprint(r)"), repl("FINAL(r[:200])"))
    res = run_rlm("ask", str(two_file_repo(tmp_path)), "q?", *model_flags(llm), "--json", "--retries", "1",
                  "--no-llm-cache", "--no-leads")
    assert res.code == 0, res.stderr
    answer = json.loads(res.stdout)["answer"]
    assert "openai/sub" in answer and "message without content" in answer and "litellm" not in answer
