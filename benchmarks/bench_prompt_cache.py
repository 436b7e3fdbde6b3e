"""Benchmark of provider prompt caching (issue 49): the input cost of a scripted 10-turn run.

Run it from the repository root (a script, not a test; no network):

    python benchmarks/bench_prompt_cache.py             # this package's source as the corpus
    python benchmarks/bench_prompt_cache.py --turns 20 --root /some/repo

It runs ``rlm ask --mode rlm --json`` four times against local scripted servers, the same
scripted root model each time (``--turns`` - 1 code blocks, each printing about 2,000 characters
of the corpus, then ``FINAL``):

* **Claude** (``anthropic/claude-sonnet-4-5``) against the Anthropic Messages API-compatible
  server of the tests (``tests/support/fake_anthropic.py``), which caches as Anthropic does
  (only prefixes ending at a ``cache_control`` breakpoint): with rlm's breakpoints (the default)
  and with ``--no-prompt-cache``;
* **OpenAI** (``openai/gpt-4o``) against the OpenAI-compatible server of the tests
  (``tests/support/fake_llm.py``), caching on its own as OpenAI does (``implicit_cache``: a
  request beginning with an earlier one's messages reports them as
  ``prompt_tokens_details.cached_tokens``), and the same server reporting none.

For each it prints the input tokens, those read from and written to the provider's cache, and the
input cost: the run's ``cost_usd`` (priced by litellm's bundled map at the cached rates) less
its output tokens at the output price. Both servers count 4 characters a token.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.fake_anthropic import FakeAnthropic  # noqa: E402 - the repository root is on the path now
from tests.support.fake_llm import FakeLLM, repl  # noqa: E402

#: USD per output token of the two models in litellm's bundled map (the input side is in the reply's cost).
OUTPUT_PRICE = {"anthropic/claude-sonnet-4-5": 1.5e-05, "openai/gpt-4o": 1e-05}


def script(turns: int) -> list[str]:
    """The root model's replies: ``turns - 1`` blocks printing a slice of the corpus, then FINAL."""
    blocks = [repl(f"print(context[{n * 2000}:{(n + 1) * 2000}])") for n in range(turns - 1)]
    return [*blocks, repl('FINAL("done")')]


def run(model: str, url: str, corpus: str, env: dict[str, str], *extra: str) -> dict[str, Any]:
    """One ``rlm ask --json`` run; its ``usage.root`` with ``input_cost_usd`` added."""
    cmd = [sys.executable, "-m", "rlm_cli", "ask", corpus, "Summarise the corpus.", "--model", model, "--api-base",
           url, "--api-key", "bench", "--mode", "rlm", "--no-llm-cache", "--policy", "standard", "--json", *extra]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"rlm ask failed ({proc.returncode}): {proc.stderr[-2000:]}")
    root = json.loads(proc.stdout)["usage"]["root"]
    root["input_cost_usd"] = root["cost_usd"] - root["output_tokens"] * OUTPUT_PRICE[model]
    return dict(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=10, help="root turns of the scripted run (default 10)")
    parser.add_argument("--root", default=str(REPO / "rlm_cli"), help="corpus folder (default: rlm_cli/)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rlm-bench-cache-"))
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "RLM_PROBE_PORTS": "off", "RLM_PROBE_OLLAMA": "off",
           "RLM_CONFIG_DIR": str(work / "config"), "RLM_DATA_DIR": str(work / "data"),
           "RLM_CACHE_DIR": str(work / "cache"), "RLM_RUNTIME_DIR": str(work / "run"), "RLM_HOST_IDLE": "60"}
    rows: list[tuple[str, dict[str, Any]]] = []
    claude = FakeAnthropic()
    try:
        for label, extra in (("Claude, breakpoints (default)", ()), ("Claude, --no-prompt-cache", ("--no-prompt-cache",))):
            claude.queue.extend(script(args.turns))
            rows.append((label, run("anthropic/claude-sonnet-4-5", claude.url, args.root, env, *extra)))
    finally:
        claude.close()
    for label, cached in (("OpenAI, server caches on its own", True), ("OpenAI, server reports no cache", False)):
        llm = FakeLLM()
        llm.implicit_cache = cached
        try:
            llm.script("gpt-4o", *script(args.turns))
            rows.append((label, run("openai/gpt-4o", llm.url, args.root, env)))
        finally:
            llm.close()
    subprocess.run([sys.executable, "-m", "rlm_cli", "host", "stop"], env=env, capture_output=True)
    shutil.rmtree(work, ignore_errors=True)
    print(f"a scripted {args.turns}-turn run over {args.root}; root calls only; costs from litellm's bundled map")
    print(f"  {'':34} {'calls':>5} {'input':>9} {'cache read':>10} {'written':>9} {'input cost':>11}")
    for label, r in rows:
        cost = f"${r['input_cost_usd']:.4f}"
        print(f"  {label:34} {r['calls']:5d} {r['input_tokens']:9,d} {r['cache_read_tokens']:10,d} "
              f"{r['cache_write_tokens']:9,d} {cost:>11}")
    for a, b, name in ((0, 1, "Claude"), (2, 3, "OpenAI")):
        with_, without = rows[a][1]["input_cost_usd"], rows[b][1]["input_cost_usd"]
        print(f"{name}: input cost with caching {with_ / without:.2f} x without "
              f"({rows[a][1]['cache_read_tokens'] / max(1, rows[a][1]['input_tokens']):.0%} of the input read from "
              "the cache)")


if __name__ == "__main__":
    main()
