"""Benchmark of ``rlm ask --questions FILE --jobs N`` (issue 25): questions per minute for
N = 1, 2, 4 against a scripted model server with a fixed latency per request.

    python benchmarks/bench_jobs.py                         # 16 questions, jobs 1,2,4, latency 1 s
    python benchmarks/bench_jobs.py --questions 32 --jobs 1,2,4,8 --latency 0.5

Every question is answered the same way by the scripted root model: one code block that greps
the corpus, asks the sub-model about 4 pieces at once (``llm_query_batched``) and calls
``FINAL``; so a question costs two model latencies (the root call, then one round of sub-calls)
plus rlm's own work. The server has enough slots (``--slots``, default 32) for every job's calls
at once, so the *floor* of a row is ``questions / N * 2 * latency``; the ratio is the command's
wall time over it (it includes loading the corpus and starting N REPL workers). Each row is one
whole ``rlm ask`` command on the same corpus (the Python standard library's ``json`` and
``email`` packages), its index cached by a first, untimed run.
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

ROOT_CODE = """Looking it up.
```repl
hits = grep(r"def \\w+\\(")
answers = llm_query_batched("Which function is this?", [h["text"] for h in hits[:4]])
FINAL(f"{len(hits)} definitions; {sum(a == 'ok' for a in answers)} pieces read")
```"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="1,2,4", help="comma-separated N (default 1,2,4)")
    parser.add_argument("--questions", type=int, default=16, help="questions in the list (default 16)")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per model request (default 1)")
    parser.add_argument("--slots", type=int, default=32, help="requests the server answers at once (default 32)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rlm-bench-jobs-"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "RLM_CACHE_DIR": str(tmp / "cache"), "RLM_DATA_DIR": str(tmp / "data"), "RLM_CONFIG_DIR": str(tmp / "config"),
           "RLM_RUNTIME_DIR": str(tmp / "run"), "RLM_HOST_IDLE": "60", "RLM_PROBE_PORTS": "off",
           "RLM_PROBE_OLLAMA": "off"}
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    (tmp / "root-reply.txt").write_text(ROOT_CODE)
    with open(tmp / "questions.jsonl", "w") as fh:
        for i in range(args.questions):
            fh.write(json.dumps({"id": i + 1, "question": f"Question {i + 1}: how many definitions are there?"}) + "\n")
    server = Process(args.slots, args.latency, str(tmp / "root-reply.txt"))
    print(f"{args.questions} questions, {args.latency} s per model request, {args.slots} server slots; machine: "
          f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    def run(jobs: int) -> tuple[float, list[dict[str, object]]]:
        cmd = [sys.executable, "-m", "rlm_cli", "ask", str(stdlib / "json"), str(stdlib / "email"),
               "--questions", str(tmp / "questions.jsonl"), "--jobs", str(jobs), "--json", "--model", "openai/root",
               "--sub-model", "openai/sub", "--api-base", server.url, "--policy", "paper", "--no-leads",
               "--mode", "rlm", "--no-llm-cache", "--root-model-window", "32768", "--sub-model-window", "32768",
               "--quiet"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, env=env, timeout=1800)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"rlm ask failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return wall, [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]

    rows = []
    try:
        run(1)  # untimed: builds the index cache and starts the shared model host
        for jobs in (int(x) for x in args.jobs.split(",")):
            wall, docs = run(jobs)
            answered = sum(1 for d in docs if d.get("status") == "final")
            rows.append((jobs, wall, answered))
    finally:
        server.close()
        subprocess.run([sys.executable, "-m", "rlm_cli", "host", "stop"], env=env, capture_output=True, cwd=tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    base = rows[0][1]
    print()
    print(f"{'jobs':>5} {'wall':>8} {'floor':>8} {'/floor':>7} {'questions/min':>14} {'speed-up':>9} {'answered':>9}")
    for jobs, wall, answered in rows:
        floor = -(-args.questions // jobs) * 2 * args.latency
        print(f"{jobs:>5} {wall:7.2f}s {floor:7.2f}s {wall / floor:6.2f}x {args.questions / wall * 60:14.1f} "
              f"{base / wall:8.2f}x {answered:>4}/{args.questions}")
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
