"""``rlm mcp``: the server started as a subprocess and driven over stdio by the MCP SDK's own client,
against the scripted model server: the tools and their schemas, the corpus helpers, an ask with
its sources and progress, per-ask budgets, a cancelled ask, bad arguments and corpus edits."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.support.cli import model_flags, rlm_argv, run_rlm, two_file_repo
from tests.support.fake_llm import FakeLLM, Reply, repl

#: gpt-4o-mini in litellm's bundled price map: $0.15 / 1M input tokens -> 100k tokens cost $0.015.
PRICED = "gpt-4o-mini"


@contextlib.asynccontextmanager
async def served(tmp_path: Path, *args: str, heartbeat_s: float | None = None,
                 tmpdir: Path | None = None) -> AsyncIterator[ClientSession]:
    """``rlm mcp ARGS`` as a subprocess (its TMPDIR ``tmpdir`` or ``tmp_path/tmp``, its stderr in
    ``tmp_path/server.err``; ``heartbeat_s`` replaces ``rlm_cli.mcp.protocol.HEARTBEAT_S``), initialised."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = dict(os.environ, TMPDIR=str(tmpdir or tmp_path / "tmp"))
    exe, *command = [*rlm_argv(), "mcp", *args]
    if heartbeat_s is not None:  # patches the source tree's module: runs from the source tree
        exe, command = sys.executable, ["-c", f"import sys; from rlm_cli.commands import app as cli; from rlm_cli.mcp import protocol; "
                   f"protocol.HEARTBEAT_S = {heartbeat_s}; "
                   "sys.argv = ['rlm', *sys.argv[1:]]; cli.main()", "mcp", *args]
    params = StdioServerParameters(command=exe, args=command, env=env, cwd=str(tmp_path))
    with open(tmp_path / "server.err", "w") as err:
        async with stdio_client(params, errlog=err) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def run(scenario: Callable[[], Any]) -> None:
    """Run an async scenario (each test starts its own server inside it)."""
    anyio.run(scenario)


def doc(result: Any) -> dict[str, Any]:
    """The structured result of a successful call (the text content is the same document)."""
    assert not result.is_error, result.content[0].text
    assert json.loads(result.content[0].text) == result.structured_content
    return dict(result.structured_content)


def error_text(result: Any) -> str:
    assert result.is_error, result
    return str(result.content[0].text)


def workers(tmp_path: Path, tmpdir: Path | None = None) -> list[int]:
    """pids of REPL workers started by this test's server (their HOME is a scratch folder under
    its TMPDIR: ``tmpdir`` or ``tmp_path/tmp``)."""
    mark = f"HOME={tmpdir or tmp_path / 'tmp'}/rlm-scratch-".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if mark in environ:
            found.append(int(pid))
    return found


def test_tools_helpers_bad_arguments_and_corpus_edits(tmp_path: Path, llm: FakeLLM) -> None:
    root = two_file_repo(tmp_path)

    async def scenario() -> None:
        # auto mode: the tiny corpus goes direct, so no worker starts until grep needs one
        async with served(tmp_path, str(root), *model_flags(llm), "--sandbox", "process", "--mode", "auto") as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            assert list(tools) == ["ask", "search", "grep", "corpus_info"]
            for tool in tools.values():  # every input documented, every output declared
                assert tool.description and tool.output_schema and tool.annotations.read_only_hint
                assert all(p.get("description") for p in tool.input_schema["properties"].values()), tool.name
            assert tools["ask"].input_schema["required"] == ["question"]
            assert set(tools["ask"].input_schema["properties"]) == {"question", "max_cost", "max_iterations", "answer_type"}
            assert "one at a time" in tools["ask"].description

            info = doc(await s.call_tool("corpus_info", {}))
            assert (info["files"], info["paths"]) == (2, [str(root)])
            assert info["tokens"] > 0 and info["by_type"][0]["type"] == ".py" and info["mode"] == "direct"
            assert workers(tmp_path) == []

            hits = doc(await s.call_tool("grep", {"pattern": r"def foo\b"}))
            assert hits == {"matches": [{"path": "a.py", "line": 1, "text": "def foo():"}], "truncated": False}
            assert len(workers(tmp_path)) == 1
            capped = doc(await s.call_tool("grep", {"pattern": ".", "max_results": 1}))
            assert len(capped["matches"]) == 1 and capped["truncated"] is True
            only_b = doc(await s.call_tool("grep", {"pattern": "=", "path_glob": "b.py"}))
            assert [m["path"] for m in only_b["matches"]] == ["b.py"]
            inside = doc(await s.call_tool("grep", {"pattern": "RETURN 42", "ignore_case": True}))
            assert inside["matches"] == [{"path": "a.py", "line": 2, "text": "    return 42", "in": "foo"}]
            found = doc(await s.call_tool("search", {"query": "foo", "k": 5}))
            assert found["results"][0]["ref"] == "a.py:1-2" and "def foo" in found["results"][0]["preview"]

            # bad arguments: tool errors in the CLI's words, and the server goes on
            assert error_text(await s.call_tool("ask", {})) == (
                "error: invalid arguments for ask: 'question' is a required property")
            assert "max_iterations: 0 is less than the minimum of 1" in error_text(
                await s.call_tool("ask", {"question": "q", "max_iterations": 0}))
            assert "'color' was unexpected" in error_text(await s.call_tool("grep", {"pattern": "x", "color": 1}))
            assert error_text(await s.call_tool("grep", {"pattern": "("})).startswith(
                "error: bad regular expression '(': missing ), unterminated subpattern")
            assert error_text(await s.call_tool("nope", {})).startswith("error: unknown tool 'nope'")
            empty = error_text(await s.call_tool("ask", {"question": "   "}))

            # edits between calls are picked up: a new file, a removed one
            (root / "c.py").write_text("def bar():\n    pass\n")
            assert doc(await s.call_tool("grep", {"pattern": "def bar"}))["matches"][0]["path"] == "c.py"
            (root / "b.py").unlink()
            info = doc(await s.call_tool("corpus_info", {}))
            assert info["files"] == 2 and [f["path"] for f in info["largest"]] == ["a.py", "c.py"]
            assert doc(await s.call_tool("grep", {"pattern": "x = 1"}))["matches"] == []
        cli = run_rlm("ask", str(root), "   ", *model_flags(llm))
        assert cli.code == 2 and empty in cli.stderr  # the same words as rlm ask's one-line error
        assert empty == "error: the question is empty"
        assert not llm.requests  # none of this called a model

    run(scenario)
    err = (tmp_path / "server.err").read_text()
    assert "rlm mcp: serving 2 files over stdio" in err and "the corpus changed" in err
    assert "Traceback" not in err


def test_ask_sources_progress_and_per_ask_budgets(tmp_path: Path, llm: FakeLLM) -> None:
    root = two_file_repo(tmp_path)
    big = {"prompt_tokens": 100_000, "completion_tokens": 10}  # $0.015 a call
    llm.script(PRICED,
               # 1: answered from what it read, after a batch of sub-calls
               repl("r = llm_query_batched(['a', 'b', 'c'])\nprint(read_file('a.py'))"),
               repl("FINAL('foo returns 42 (a.py:1-2)')"))
    llm.default("sub", "a sub answer")

    async def scenario() -> None:
        async with served(tmp_path, str(root), "--model", f"openai/{PRICED}", "--sub-model", "openai/sub",
                          "--api-base", llm.url,
                          "--max-cost", "0.05", "--no-llm-cache", "--sandbox", "process") as s:
            notes: list[str] = []

            async def progress(value: float, total: float | None, message: str | None) -> None:
                notes.append(str(message))

            first = doc(await s.call_tool("ask", {"question": "What does foo return?"}, progress_callback=progress))
            assert first["status"] == "final" and first["partial"] is False
            assert first["answer"] == "foo returns 42 (a.py:1-2)"
            assert first["sources"] == ["a.py:1-2"] and first["cited"] == ["a.py:1-2"]
            assert first["iterations"] == 2 and first["sub_calls"] == 3 and first["usage"]["root"]["calls"] == 2
            trace = Path(first["trace"])
            assert trace.stem == first["trace_id"] and json.loads(trace.read_text().splitlines()[0])[
                "question"] == "What does foo return?"
            # the run's own notes, in order (a loaded machine may add heartbeats, "... s so far)", before
            # the first: the server says it is still at work when 10 s pass without a note)
            steps = [n for n in notes if not n.endswith(" s so far)")]
            assert steps[0] == "iteration 1 of at most 20" and "iteration 2 of at most 20" in steps, notes
            assert any(n.startswith("iteration 1: sub-calls 3/3 done") for n in steps), notes

            # a call's max_cost lowers the server's --max-cost for that ask...
            llm.script(PRICED, *[Reply(text=repl(f"print('step {i}')"), **big) for i in (1, 2)])
            second = doc(await s.call_tool("ask", {"question": "Count the steps", "max_cost": 0.02}))
            assert (second["status"], second["partial"], second["budget"]) == ("budget_exceeded", True, "cost")
            # (a request is sent only when its worst case fits: the second would not have)
            assert "cost budget of $0.02 reached" in second["reason"] and "step 1" in second["answer"]
            assert second["usage"]["root"]["calls"] == 1 and second["usage"]["cost_usd"] <= 0.02
            llm.queues[PRICED].clear()
            # ... never raises it, and each ask has a budget of its own (the last one spent under $0.02)
            llm.script(PRICED, *[Reply(text=repl(f"print('more {i}')"), **big) for i in range(1, 5)])
            third = doc(await s.call_tool("ask", {"question": "Count more", "max_cost": 1.0}))
            assert third["budget"] == "cost" and "cost budget of $0.05 reached" in third["reason"]
            assert third["usage"]["root"]["calls"] == 3 and third["usage"]["cost_usd"] <= 0.05
            llm.queues[PRICED].clear()
            # the iteration limit: the best partial answer
            llm.script(PRICED, repl("print('looking')"), "The best I have: 42.")
            fourth = doc(await s.call_tool("ask", {"question": "What is it?", "max_iterations": 1}))
            assert (fourth["status"], fourth["partial"]) == ("max_iterations", True)
            assert fourth["answer"] == "The best I have: 42." and fourth["iterations"] == 1

    run(scenario)


def test_cancelled_ask_stops_the_run_and_leaves_nothing_behind(tmp_path: Path, run_tmp: Path, llm: FakeLLM) -> None:
    root = two_file_repo(tmp_path)
    # a block that says it goes to sleep (a sub-call the server sees) and would sleep for an hour:
    # the grep queued behind the ask can only be answered once the cancel has stopped it (no bound
    # on how fast a loaded machine does that)
    llm.default("sub", "good night")
    llm.script("root", repl("llm_query('asleep')\nimport time\ntime.sleep(3600)\nprint('woke up')"),
               repl("print(read_file('a.py'))"), repl("FINAL('42, from a.py:2')"))

    async def until(condition: Callable[[], object]) -> None:
        while not condition():
            await anyio.sleep(0.05)

    async def scenario() -> None:
        async with served(tmp_path, str(root), *model_flags(llm), "--no-llm-cache", "--sandbox", "process",
                          heartbeat_s=0.4, tmpdir=run_tmp) as s:
            assert doc(await s.call_tool("grep", {"pattern": "x"}))  # the worker is up
            before = workers(tmp_path, run_tmp)
            assert len(before) == 1
            queued: list[str] = []

            async def grep_behind() -> None:
                async def note(value: float, total: float | None, message: str | None) -> None:
                    queued.append(str(message))
                hits = doc(await s.call_tool("grep", {"pattern": "return"}, progress_callback=note))
                assert hits["matches"][0]["path"] == "a.py"

            asked: list[str] = []

            async def ask_note(value: float, total: float | None, message: str | None) -> None:
                asked.append(str(message))

            # (the 120 s only end a hung test: each step waits for an event, never for a time)
            with anyio.fail_after(120):
                async with anyio.create_task_group() as outer:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(partial(s.call_tool, "ask", {"question": "Sleep first?"},
                                              progress_callback=ask_note))
                        await until(lambda: llm.chat_requests("sub"))  # the block goes to sleep
                        # nothing happens, so a heartbeat says the call is still on, in the words of its
                        # last note (what fail_after checks)
                        seen = len(asked)
                        await until(lambda: any(n.startswith("iteration 1") and n.endswith(" s so far)")
                                                for n in asked[seen:]))
                        outer.start_soon(grep_behind)  # queued behind the ask
                        await until(lambda: queued)  # the server said so
                        tg.cancel_scope.cancel()  # notifications/cancelled for the ask
            # while the block sleeps nothing happens: a heartbeat says the calls are still on
            assert queued[0] == "queued behind 1 call(s)"
            assert all(n.startswith("queued behind 1 call(s) (") and n.endswith(" s so far)") for n in queued[1:])
            steps = [n for n in asked if not n.endswith(" s so far)")]  # a loaded machine's heartbeats left out
            assert steps[0] == "iteration 1 of at most 20" and all(n.startswith("iteration 1") for n in steps), asked
            assert workers(tmp_path, run_tmp) == before  # the worker stopped its block and was kept: no orphan

            answer = doc(await s.call_tool("ask", {"question": "What does foo return?"}))
            assert answer["answer"] == "42, from a.py:2" and answer["sources"] == ["a.py:1-2"]
            assert answer["support"]["verdict"] == "observed"  # as rlm ask --json says it (issue 37)
        traces = sorted((tmp_path / "userdirs" / "data" / "traces").glob("*.jsonl"))
        summaries = [json.loads(t.read_text().splitlines()[-1]) for t in traces]
        assert sorted(x["status"] for x in summaries) == ["final", "interrupted"]
        assert workers(tmp_path, run_tmp) == []
        left = [p.name for p in run_tmp.iterdir() if p.name.startswith(("rlm-scratch-", "rlm-lm-"))]
        assert left == []  # no scratch folder, no socket folder

    run(scenario)
    err = (tmp_path / "server.err").read_text()
    assert "ask: cancelled by the client" in err and "Traceback" not in err


def test_without_the_sdk_one_line_error_with_the_install_command(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    shadow = tmp_path / "shadow" / "mcp_types"  # an SDK that cannot be imported, ahead of site-packages
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'mcp_types'\")\n")
    res = run_rlm("mcp", str(tmp_path / "a.txt"), env={"PYTHONPATH": str(tmp_path / "shadow")})
    assert res.code == 2 and res.stdout == ""
    assert res.stderr.strip() == ("error: rlm mcp needs the MCP Python SDK (version 2), which is not installed "
                                  "(pip install '/path/to/rlm[mcp]', or the wheel with [mcp])")


def test_the_cli_imports_neither_the_sdk_nor_litellm_until_the_command_runs() -> None:
    code = ("import sys\nsys.argv = ['rlm', '--help']\nfrom rlm_cli.commands import app as cli\n"
            "try:\n    cli.main()\nexcept SystemExit as e:\n    rc = e.code\n"
            "sys.stderr.write(f'rc={rc} ' + ' '.join(m for m in ('mcp', 'mcp_types', 'anyio', 'litellm') "
            "if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stderr.endswith("rc=0 "), proc.stderr
    assert " mcp " in proc.stdout  # the command is listed


def test_a_session_that_cannot_open_answers_every_call_with_its_error(tmp_path: Path, llm: FakeLLM) -> None:
    async def scenario() -> None:
        async with served(tmp_path, str(tmp_path / "nowhere"), *model_flags(llm)) as s:
            assert [t.name for t in (await s.list_tools()).tools] == ["ask", "search", "grep", "corpus_info"]
            for tool, args in (("corpus_info", {}), ("ask", {"question": "q?"})):
                assert error_text(await s.call_tool(tool, args)) == (
                    f"error: no such file or directory: {tmp_path / 'nowhere'} (check the path)")

    run(scenario)
    assert f"error: no such file or directory: {tmp_path / 'nowhere'}" in (tmp_path / "server.err").read_text()
    res = run_rlm("mcp", str(tmp_path / "nowhere"), *model_flags(llm), stdin="")  # the client left at once
    assert res.code == 2 and res.stdout == "" and "error: no such file or directory" in res.stderr
