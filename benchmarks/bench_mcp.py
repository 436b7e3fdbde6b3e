"""Benchmark of ``rlm mcp`` (issue 24): an ``ask`` sent to a warm server against a fresh ``rlm ask``
of the same question.

Run it from the repository root (a script, not a test; it needs the ``mcp`` extra):

    python benchmarks/bench_mcp.py                  # 7 rounds, the stdlib's .py files (31 MB)
    python benchmarks/bench_mcp.py --rounds 11 --root ./some/repo
    python benchmarks/bench_mcp.py --flag=--no-leads   # without the keyword search before turn 1

What it does, in one run so that the machine's load is shared alike (the two alternate):

* starts the scripted OpenAI-compatible server of the tests (``tests/support/fake_llm.py``), with the
  two-turn needle search of ``benchmarks/bench_startup.py`` (turn 1 finds the file defining
  ``_siftdown_max`` in ``context``; turn 2 finishes with ``FINAL``);
* builds the chunk-index cache (``rlm index``) and starts the shared model host with one untimed
  ``rlm ask``, as any earlier command would;
* starts ``rlm mcp`` with the same corpus and flags, driven by the MCP SDK's client over stdio,
  and sends one untimed ``ask`` (the first: the worker's search index, the first model call);
* then, each round: **fresh**: a whole ``rlm ask`` process, from start to exit (index cached,
  shared host running: the best case of a command); **warm**: one ``ask`` call to the server,
  from the request to its result, as the agent waits for it; and the warm ask's own overhead:
  its ``elapsed_s`` minus the latency of its model calls.

Prints medians (and min/max). On a shared 2-core machine wall times move with the other users'
load: compare the two figures of one run, not figures across runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_startup import QUESTION, _turns  # noqa: E402 - the repository root is on the path now
from tests.support.fake_llm import FakeLLM  # noqa: E402


def main() -> None:
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (medians are printed)")
    parser.add_argument("--root", default=sysconfig.get_paths()["stdlib"], help="corpus folder (default: stdlib)")
    parser.add_argument("--python", default=sys.executable, help="the Python that runs this checkout's rlm")
    parser.add_argument("--flag", action="append", default=[], help="another flag for both (repeatable), e.g. "
                                                                     "--flag=--no-leads")
    args = parser.parse_args()

    llm = FakeLLM()
    llm.default("root", _turns("FINAL(heapq.py)"))
    work = Path(tempfile.mkdtemp(prefix="rlm-bench-mcp-"))
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "RLM_PROBE_PORTS": "off", "RLM_PROBE_OLLAMA": "off",
           "RLM_CONFIG_DIR": str(work / "config"), "RLM_DATA_DIR": str(work / "data"),
           "RLM_CACHE_DIR": str(work / "cache"), "RLM_RUNTIME_DIR": str(work / "run"), "RLM_HOST_IDLE": "600"}
    for key in ("RLM_MODEL", "RLM_SUB_MODEL", "RLM_API_BASE", "RLM_API_KEY", "RLM_SANDBOX", "RLM_MODE"):
        env.pop(key, None)
    corpus = [args.root, "--include", "*.py", "--exclude", "site-packages/"]
    flags = ["--model", "openai/root", "--api-base", llm.url, "--mode", "rlm", "--no-llm-cache", *args.flag]
    rlm = [args.python, "-m", "rlm_cli"]
    fresh: list[float] = []
    warm: list[float] = []
    overhead: list[float] = []
    first: list[float] = []

    def ask_process() -> float:
        started = time.monotonic()
        proc = subprocess.run([*rlm, "ask", *corpus, QUESTION, *flags], env=env, capture_output=True, text=True,
                              cwd=REPO)
        took = time.monotonic() - started
        if proc.returncode != 0 or "heapq.py" not in proc.stdout:
            raise RuntimeError(f"rlm ask failed ({proc.returncode}): {proc.stderr[-1500:]}")
        return took

    async def ask_call(session: Any) -> tuple[float, dict[str, Any]]:
        started = time.monotonic()
        result = await session.call_tool("ask", {"question": QUESTION})
        took = time.monotonic() - started
        doc = result.structured_content
        if result.is_error or not doc or "heapq.py" not in doc["answer"]:
            raise RuntimeError(f"the ask call failed: {result.content[0].text[:1500]}")
        return took, doc

    async def scenario() -> None:
        params = StdioServerParameters(command=rlm[0], args=[*rlm[1:], "mcp", *corpus, *flags, "--quiet"], env=env,
                                       cwd=str(REPO))
        with open(work / "server.err", "w") as err:
            async with stdio_client(params, errlog=err) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    took, _ = await ask_call(session)
                    first.append(took)
                    for n in range(args.rounds):
                        fresh.append(await anyio.to_thread.run_sync(ask_process))
                        took, doc = await ask_call(session)
                        warm.append(took)
                        usage = doc["usage"]
                        overhead.append(doc["elapsed_s"] - usage["root"]["latency_s"] - usage["sub"]["latency_s"])
                        print(f"round {n + 1}/{args.rounds}: fresh rlm ask {fresh[-1]:.2f} s, warm mcp ask "
                              f"{warm[-1]:.3f} s", flush=True)

    try:
        subprocess.run([*rlm, "index", *corpus], env=env, capture_output=True, check=True, cwd=REPO)
        ask_process()  # starts the shared model host
        anyio.run(scenario)
    finally:
        subprocess.run([*rlm, "host", "stop"], env=env, capture_output=True)
        llm.close()
        shutil.rmtree(work, ignore_errors=True)

    def line(name: str, values: list[float]) -> str:
        return (f"  {name:34} median {statistics.median(values):7.3f} s   (min {min(values):.3f}, "
                f"max {max(values):.3f})")

    print()
    print(f"corpus: {args.root} (*.py, site-packages left out); {args.rounds} rounds, alternating"
          + (f"; flags {' '.join(args.flag)}" if args.flag else ""))
    print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(line("fresh rlm ask (whole process)", fresh))
    print(line("warm mcp ask (request to result)", warm))
    print(line("  its overhead beyond model calls", overhead))
    print(f"  {'first mcp ask (after start-up)':34} {first[0]:7.3f} s")
    print(f"fresh / warm: {statistics.median(fresh) / statistics.median(warm):.1f} x")


if __name__ == "__main__":
    main()
