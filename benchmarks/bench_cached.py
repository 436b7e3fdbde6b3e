"""Benchmark of a run answered wholly from the response cache against a fresh one (issue 40).

Run it from the repository root (a script, not a test):

    python benchmarks/bench_cached.py                    # 5 runs of each, a small corpus
    python benchmarks/bench_cached.py --runs 9
    python benchmarks/bench_cached.py --python /other/venv/bin/python --src /other/checkout   # another rlm

What it times, whole ``rlm ask`` processes from start to exit against the scripted
OpenAI-compatible server of the tests (``tests/support/fake_llm.py``), the chunk-index cache warm:

* **fresh**: the question with ``--no-llm-cache`` (two root calls), one run after another, the shared
  model host running (started by an untimed first run, as any earlier command would);
* **cached**: the same question answered wholly from the response cache (filled by an untimed run),
  one run after another as a user asks again, starting with no model host running (``rlm host
  stop``): the first run starts it, as the first command of a day does.

A cached run makes no request, so it should take no longer than a fresh one. It used to take 3-4
times as long: a host whose command sent no model request exited at once, so every cached run
started a host of its own and waited for its litellm import. The ratio ``cached / fresh`` (medians)
is printed; on a shared machine compare the ratios of one run, not wall times across runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.fake_llm import FakeLLM, repl, turn  # noqa: E402 - the repository root is on the path now

QUESTION = "Which function returns 42?"


def _root(request: dict[str, Any]) -> str:
    """Two turns: a grep, then the answer."""
    return repl("print(grep('return 42'))") if turn(request) == 0 else "FINAL(foo in a.py)"


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    """Wall seconds of one whole process.

    Raises:
        RuntimeError: it failed or did not answer.
    """
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=cwd)
    took = time.monotonic() - started
    if proc.returncode != 0 or "foo" not in proc.stdout:
        raise RuntimeError(f"{' '.join(cmd[:4])}... failed ({proc.returncode}): {proc.stderr[-1500:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each kind (medians are printed)")
    parser.add_argument("--python", default=sys.executable, help="the Python that runs rlm")
    parser.add_argument("--src", default=str(REPO), help="the checkout whose rlm_cli runs (default: this one)")
    args = parser.parse_args()

    llm = FakeLLM()
    llm.default("root", _root)
    work = Path(tempfile.mkdtemp(prefix="rlm-cached-"))
    corpus = work / "repo"
    corpus.mkdir()
    (corpus / "a.py").write_text("def foo():\n    return 42\n")
    (corpus / "b.py").write_text("x = 1\n")
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "RLM_PROBE_PORTS": "off",
           "RLM_PROBE_OLLAMA": "off", "RLM_CONFIG_DIR": str(work / "config"), "RLM_DATA_DIR": str(work / "data"),
           "RLM_CACHE_DIR": str(work / "cache"), "RLM_RUNTIME_DIR": str(work / "run"), "RLM_HOST_IDLE": "600",
           "PYTHONPATH": args.src}
    for key in ("RLM_MODEL", "RLM_SUB_MODEL", "RLM_API_BASE", "RLM_API_KEY", "RLM_SANDBOX", "RLM_MODE"):
        env.pop(key, None)
    rlm = [args.python, "-m", "rlm_cli"]
    ask = [*rlm, "ask", str(corpus), QUESTION, "--model", "openai/root", "--api-base", llm.url, "--mode", "rlm",
           "--quiet"]
    fresh: list[float] = []
    cached: list[float] = []
    try:
        timed([*ask, "--no-llm-cache"], env, work)  # the index cache and a running shared host
        for _ in range(args.runs):
            fresh.append(timed([*ask, "--no-llm-cache"], env, work))
        timed(ask, env, work)  # fills the response cache
        subprocess.run([*rlm, "host", "stop"], env=env, capture_output=True, cwd=work)
        for _ in range(args.runs):
            cached.append(timed(ask, env, work))
    finally:
        subprocess.run([*rlm, "host", "stop"], env=env, capture_output=True, cwd=work)
        llm.close()
        shutil.rmtree(work, ignore_errors=True)
    f, c = statistics.median(fresh), statistics.median(cached)
    print(f"rlm from {args.src}; {args.runs} runs each; machine: {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"  fresh  (--no-llm-cache, host warm)      median {f:5.2f} s  runs {' '.join(f'{x:.2f}' for x in fresh)}")
    print(f"  cached (all from the cache, in a row)   median {c:5.2f} s  runs {' '.join(f'{x:.2f}' for x in cached)}")
    print(f"cached / fresh  {c / f:5.2f} x   (was 3-4 x; target: about 1, the first cached run alone paying the host start)")


if __name__ == "__main__":
    main()
