"""Benchmark of ``rlm audit --jobs N`` (issue 39): a checklist of 16 typed checks over the
standard library's ``json`` and ``email`` packages against a scripted model server with a fixed
latency per request, for N = 1 and 4 (``--jobs``).

    python benchmarks/bench_audit.py                     # 16 checks, jobs 1,4, latency 1 s
    python benchmarks/bench_audit.py --checks 32 --jobs 1,2,4,8 --latency 0.5

Every check is an ``int`` question (``max = 100000``) that the scripted root model answers in one
turn: a code block that greps the corpus and calls ``FINAL(len(hits))``. So a check costs one
model latency plus rlm's own work, and the *floor* of a row is ``checks / N * latency``. Each row
is one whole ``rlm audit`` command (one corpus load, N REPL workers), with the response cache off;
the index cache is built by a first, untimed run. The target: ``--jobs 4`` at least 3x faster
than ``--jobs 1``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.scripted_server import Process  # noqa: E402

ROOT_CODE = """Counting them.
```repl
hits = grep(r"def \\w+\\(", max_results=None)
FINAL(len(hits))
```"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="1,4", help="comma-separated N (default 1,4)")
    parser.add_argument("--checks", type=int, default=16, help="checks in the checklist (default 16)")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per model request (default 1)")
    parser.add_argument("--slots", type=int, default=32, help="requests the server answers at once (default 32)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rlm-bench-audit-"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "RLM_CACHE_DIR": str(tmp / "cache"), "RLM_DATA_DIR": str(tmp / "data"), "RLM_CONFIG_DIR": str(tmp / "config"),
           "RLM_RUNTIME_DIR": str(tmp / "run"), "RLM_HOST_IDLE": "60", "RLM_PROBE_PORTS": "off",
           "RLM_PROBE_OLLAMA": "off"}
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    (tmp / "root-reply.txt").write_text(ROOT_CODE)
    (tmp / "checks.toml").write_text("".join(
        f'[[check]]\nid = "defs-{i + 1}"\nquestion = "Check {i + 1}: how many function definitions are there?"\n'
        'type = "int"\nmax = 100000\n\n' for i in range(args.checks)))
    server = Process(args.slots, args.latency, str(tmp / "root-reply.txt"))
    print(f"{args.checks} checks, {args.latency} s per model request, {args.slots} server slots; machine: "
          f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    def run(jobs: int) -> tuple[float, dict[str, object]]:
        cmd = [sys.executable, "-m", "rlm_cli", "audit", str(stdlib / "json"), str(stdlib / "email"),
               "--checklist", str(tmp / "checks.toml"), "--jobs", str(jobs), "--json", "--model", "openai/root",
               "--sub-model", "openai/sub", "--api-base", server.url, "--policy", "paper", "--no-leads",
               "--mode", "rlm", "--no-llm-cache", "--root-model-window", "32768", "--sub-model-window", "32768",
               "--quiet"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, env=env, timeout=1800)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"rlm audit failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return wall, json.loads(proc.stdout)

    rows = []
    try:
        run(1)  # untimed: builds the index cache and starts the shared model host
        for jobs in (int(x) for x in args.jobs.split(",")):
            wall, doc = run(jobs)
            totals, corpus = doc["totals"], doc["corpus"]
            assert isinstance(totals, dict) and isinstance(corpus, dict)
            rows.append((jobs, wall, totals["pass"], corpus["loads"]))
    finally:
        server.close()
        subprocess.run([sys.executable, "-m", "rlm_cli", "host", "stop"], env=env, capture_output=True, cwd=tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    base = rows[0][1]
    print()
    print(f"{'jobs':>5} {'wall':>8} {'floor':>8} {'/floor':>7} {'checks/min':>11} {'speed-up':>9} {'passed':>7} {'loads':>6}")
    for jobs, wall, passed, loads in rows:
        floor = -(-args.checks // jobs) * args.latency
        print(f"{jobs:>5} {wall:7.2f}s {floor:7.2f}s {wall / floor:6.2f}x {args.checks / wall * 60:11.1f} "
              f"{base / wall:8.2f}x {passed:>4}/{args.checks} {loads:>6}")
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
