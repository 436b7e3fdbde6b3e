"""Benchmark of sub-call scale-out (issue 25): one 256-way ``llm_query_batched`` through
``--router-config`` over N scripted model servers, each with C slots and a fixed latency L.

    python benchmarks/bench_router.py                       # N = 1, 2, 4; C = 8; L = 0.5 s; 256 prompts
    python benchmarks/bench_router.py --servers 1,2,4,8 --concurrency 4 --latency 1 --prompts 512
    python benchmarks/bench_router.py --routing least-busy  # another litellm routing strategy

Each row is one whole ``rlm ask`` (a real command, the shared model host, the sandboxed worker) on
a one-file corpus: a scripted root model (a server of its own, no latency) writes one code block
that times the batched call inside the REPL and ``FINAL``s the seconds it took. The *floor* of a
row is the time a perfect scheduler needs: ``ceil(prompts / (N * C))`` latencies (every slot of
every server busy from the first request to the last); the ratio is the batch's time over it and
the speed-up is over N = 1 of the same run. ``--max-concurrency`` is N * C, so rlm keeps every
slot busy. The last row adds a dead deployment (a port nobody listens on) to the largest N: litellm's
Router sends some requests there, rlm retries them and the Router cools the deployment down
(``allowed_fails: 0`` in ``router_settings``). Every row also checks that rlm's usage is exact:
its sub-calls and input/output tokens equal what the live servers report having served.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.scripted_server import Process  # noqa: E402

ROOT_CODE = """Running the batch.
```repl
import time
t = time.perf_counter()
answers = llm_query_batched([f"item {{i}}: answer ok" for i in range({prompts})])
took = time.perf_counter() - t
FINAL(f"{{took:.3f}} {{sum(a == 'ok' for a in answers)}}")
```"""


def dead_port() -> int:
    """A loopback port nobody listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def router_file(path: Path, urls: list[str], routing: str) -> Path:
    """A litellm Router config: one model group ``fleet`` with one deployment per URL."""
    lines = ["model_list:"]
    for url in urls:
        lines += ["  - model_name: fleet", "    litellm_params:", "      model: openai/sub",
                  f"      api_base: {url}", "      api_key: sk-bench"]
    lines += ["router_settings:", f"  routing_strategy: {routing}", "  allowed_fails: 0", "  cooldown_time: 60"]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_row(args: argparse.Namespace, tmp: Path, root: Process, n: int, dead: bool) -> dict[str, Any]:
    """One ``rlm ask`` over ``n`` live servers (plus a dead one with ``dead``)."""
    servers = [Process(args.concurrency, args.latency) for _ in range(n)]
    try:
        urls = [s.url for s in servers] + ([f"http://127.0.0.1:{dead_port()}/v1"] if dead else [])
        config = router_file(tmp / f"router-{n}-{int(dead)}.yaml", urls, args.routing)
        cmd = [sys.executable, "-m", "rlm_cli", "ask", str(tmp / "corpus"), "How long did the batch take?",
               "--model", "openai/root", "--api-base", root.url, "--sub-model", "fleet", "--router-config",
               str(config), "--max-concurrency", str(n * args.concurrency), "--policy", "paper", "--no-leads",
               "--mode", "rlm", "--json", "--no-llm-cache", "--root-model-window", "32768",
               "--sub-model-window", "32768", "--max-iterations", "2", "--retries", "3"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=args.env, timeout=900)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"rlm ask failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        doc = json.loads(proc.stdout)
        took, ok = doc["answer"].split()
        stats = [s.stats() for s in servers]
    finally:
        for s in servers:
            s.close()
    sub = doc["usage"]["sub"]
    served = {k: sum(st[k] for st in stats) for k in ("requests", "prompt_tokens", "completion_tokens")}
    exact = (sub["calls"] == served["requests"] == args.prompts and sub["input_tokens"] == served["prompt_tokens"]
             and sub["output_tokens"] == served["completion_tokens"])
    floor = math.ceil(args.prompts / (n * args.concurrency)) * args.latency
    return {"n": n, "dead": dead, "took": float(took), "ok": int(ok), "wall": wall, "floor": floor, "exact": exact,
            "retries": doc["usage"]["retries"], "failed": doc["usage"]["failed_calls"],
            "per_server": [st["requests"] for st in stats], "max_in_flight": [st["max_in_flight"] for st in stats]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", default="1,2,4", help="comma-separated N (default 1,2,4)")
    parser.add_argument("--concurrency", type=int, default=8, help="slots per server, C (default 8)")
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per request, L (default 0.5)")
    parser.add_argument("--prompts", type=int, default=256, help="prompts in the batch (default 256)")
    parser.add_argument("--routing", default="simple-shuffle", help="litellm routing_strategy (default simple-shuffle)")
    parser.add_argument("--no-dead", action="store_true", help="skip the row with a dead deployment")
    args = parser.parse_args()
    ns = [int(x) for x in args.servers.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="rlm-bench-router-"))
    args.env = {**os.environ, "PYTHONPATH": str(REPO), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "RLM_CACHE_DIR": str(tmp / "cache"), "RLM_DATA_DIR": str(tmp / "data"),
                "RLM_CONFIG_DIR": str(tmp / "config"), "RLM_RUNTIME_DIR": str(tmp / "run"), "RLM_HOST_IDLE": "60",
                "RLM_PROBE_PORTS": "off", "RLM_PROBE_OLLAMA": "off"}
    (tmp / "corpus").mkdir()
    (tmp / "corpus" / "notes.txt").write_text("A corpus of one line: the batch is the benchmark.\n")
    (tmp / "root-reply.txt").write_text(ROOT_CODE.format(prompts=args.prompts))
    root = Process(max(64, max(ns) * args.concurrency), 0.0, str(tmp / "root-reply.txt"))
    print(f"{args.prompts}-way llm_query_batched, C = {args.concurrency} slots per server, L = {args.latency} s per "
          f"request, routing {args.routing}; machine: {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows = []
    try:
        rows.append(run_row(args, tmp, root, ns[0], False))  # a warm-up: starts the shared model host
        rows = [run_row(args, tmp, root, n, False) for n in ns]
        if not args.no_dead:
            rows.append(run_row(args, tmp, root, ns[-1], True))
    finally:
        root.close()
        subprocess.run([sys.executable, "-m", "rlm_cli", "host", "stop"], env=args.env, capture_output=True,
                       cwd=REPO)
        shutil.rmtree(tmp, ignore_errors=True)
    base = rows[0]["took"]
    print()
    print(f"{'servers':>16} {'batch':>8} {'floor':>7} {'/floor':>7} {'speed-up':>9} {'answers ok':>11} "
          f"{'usage exact':>12} {'retries':>8}  requests per server (max in flight)")
    for r in rows:
        name = f"{r['n']}" + (" + 1 dead" if r["dead"] else "")
        spread = ", ".join(f"{q} ({m})" for q, m in zip(r["per_server"], r["max_in_flight"], strict=True))
        print(f"{name:>16} {r['took']:7.2f}s {r['floor']:6.2f}s {r['took'] / r['floor']:6.2f}x {base / r['took']:8.2f}x "
              f"{r['ok']:>5}/{args.prompts:<5} {'yes' if r['exact'] else 'NO':>12} {r['retries']:>8}  {spread}")
    walls = ", ".join(f"{r['wall']:.1f}" for r in rows)
    print(f"\n(whole `rlm ask` commands took {walls} s; load average after: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())})")


if __name__ == "__main__":
    main()
