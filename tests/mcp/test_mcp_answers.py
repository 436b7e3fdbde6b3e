"""``rlm mcp``'s ``ask`` with an answer holding a lone surrogate (issue 47): the result is
still delivered, the surrogate replaced by U+FFFD in both the text and the structured content
(the SDK's serialiser refuses a lone surrogate)."""

from __future__ import annotations

from pathlib import Path

from tests.mcp.test_mcp import doc, run, served
from tests.support.cli import two_file_repo
from tests.support.fake_llm import FakeLLM, repl


def test_an_answer_with_a_lone_surrogate_reaches_the_client(tmp_path: Path, llm: FakeLLM) -> None:
    root = two_file_repo(tmp_path)
    llm.script("root", repl("print(context['a.py'])"), repl("FINAL('\\ud800 foo returns 42')"))

    async def scenario() -> None:
        async with served(tmp_path, str(root), "--model", "openai/root", "--sub-model", "openai/sub",
                          "--api-base", llm.url, "--no-llm-cache", "--sandbox", "process") as s:
            answer = doc(await s.call_tool("ask", {"question": "What does foo return?"}))
            assert answer["status"] == "final" and answer["answer"] == "\ufffd foo returns 42"

    run(scenario)
