"""Benchmark of structured data (issue 13): parsing, caching, and the memory and speed of
``data`` / ``records()`` in the REPL worker, on generated JSONL support tickets.

Run it from the repository root (it is a script, not a test):

    python benchmarks/bench_data.py                  # about 43 MiB of JSONL (120,000 tickets)
    python benchmarks/bench_data.py --rows 1000000 --narrow   # a million short rows

Each step runs in a fresh interpreter with its own cache folder. Figures are printed beside a
floor measured in the same run: the same bytes loaded as a plain ``.txt`` file (no parsing), and
``json.loads`` of every line into a list of dicts (what a model would write by hand). The target
of issue 13: the records form in the worker takes at most 4x the bytes of the file's text.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
MB = 1024 * 1024


def generate(path: Path, rows: int, narrow: bool) -> int:
    """Write ``rows`` tickets as JSONL; returns the bytes written."""
    rng = random.Random(13)
    words = "login fails after update reset password page error again slow export crash invoice billing".split()
    statuses, prios = ("open", "closed", "pending", "escalated"), ("low", "medium", "high", "urgent")
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(1, rows + 1):
            if narrow:
                row: dict[str, Any] = {"id": i, "status": rng.choice(statuses), "minutes": rng.randint(1, 600)}
            else:
                row = {"id": i, "status": rng.choice(statuses), "priority": rng.choice(prios),
                       "team": f"team-{rng.randint(1, 40)}", "customer": f"customer-{rng.randint(1, 5000)}",
                       "created": f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00Z",
                       "subject": " ".join(rng.choices(words, k=6)), "body": " ".join(rng.choices(words, k=18)),
                       "tags": rng.sample(["web", "api", "mobile", "billing", "sso"], 2),
                       "minutes": rng.randint(1, 600), "score": round(rng.random(), 3)}
            fh.write(json.dumps(row) + "\n")
    return path.stat().st_size


# -- steps (each in a child process, printing one JSON line) ---------------------------------------

def step_load(args: argparse.Namespace) -> dict[str, Any]:
    from rlm_cli.config import CorpusOptions
    from rlm_cli.corpus import load_corpus

    t0, c0 = time.perf_counter(), time.process_time()
    corpus = load_corpus([args.root], CorpusOptions(max_file_size=1 << 40))
    return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "index": str(corpus.index_file), "context": str(corpus.context_file),
            "data": str(corpus.data_file) if corpus.data_file else None, "summary": corpus.summary(),
            "data_bytes": corpus.data_bytes, "chars": corpus.chars}


def step_worker(args: argparse.Namespace) -> dict[str, Any]:
    """What the worker does: load the bundle (nothing parsed), then data[path] and records()."""
    from rlm_cli.sandbox.corpus_helpers import CorpusView
    from rlm_cli.sandbox.data_helpers import DataView

    t0 = time.perf_counter()
    view = CorpusView.from_bundle(args.index, args.context)
    dv = DataView(view.structured, args.data)
    out: dict[str, Any] = {"bundle_load_s": time.perf_counter() - t0}
    if not args.data:
        return out
    path = next(iter(dv.data))
    t = time.perf_counter()
    n = len(dv.records())
    out["len_records_s"] = time.perf_counter() - t
    out["rows"] = n
    t = time.perf_counter()
    rows = dv.data[path]
    out["data_load_s"] = time.perf_counter() - t
    t = time.perf_counter()
    count = sum(1 for r in dv.records() if r["status"] == "open")
    out["iterate_records_s"] = time.perf_counter() - t
    out["open"] = count
    t = time.perf_counter()
    for _ in rows:
        pass
    out["iterate_rows_s"] = time.perf_counter() - t
    t = time.perf_counter()
    col = rows.column("status")
    out["column_s"] = time.perf_counter() - t
    out["column_open"] = col.count("open")
    t = time.perf_counter()
    _ = dv.records()[n // 2]
    out["index_middle_s"] = time.perf_counter() - t
    return out


def step_memory(args: argparse.Namespace) -> dict[str, Any]:
    """Bytes allocated (tracemalloc) by the parsed table, by one records() row, and by the naive
    list of dicts; the text as the worker holds it (``context``) for comparison."""
    from rlm_cli.sandbox.corpus_helpers import CorpusView
    from rlm_cli.sandbox.data_helpers import DataView

    view = CorpusView.from_bundle(args.index, args.context)
    text = view.context[view.files[0]["start"]:view.files[0]["end"]]
    dv = DataView(view.structured, args.data)
    path = next(iter(dv.data))
    tracemalloc.start()
    rows = dv.data[path]
    table_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    tracemalloc.start()
    naive = [json.loads(line) for line in text.splitlines() if line]
    naive_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del naive
    return {"text_bytes": len(text.encode()), "text_str_bytes": sys.getsizeof(text), "table_bytes": table_bytes,
            "list_of_dicts_bytes": naive_bytes, "rows": len(rows)}


def step_naive(args: argparse.Namespace) -> dict[str, Any]:
    """The floor for parsing: json.loads of every line of the file."""
    t = time.process_time()
    with open(args.root_file, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return {"json_loads_s": time.process_time() - t, "rows": len(rows)}


STEPS = {"load": step_load, "worker": step_worker, "memory": step_memory, "naive": step_naive}


def run_step(name: str, cache: Path, **kw: str) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--step", name]
    for k, v in kw.items():
        cmd += [f"--{k.replace('_', '-')}", v]
    env = {**os.environ, "RLM_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"step {name} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=120_000, help="tickets to generate (default 120,000: about 43 MiB)")
    parser.add_argument("--narrow", action="store_true", help="3 short fields per row instead of 11")
    parser.add_argument("--step", choices=sorted(STEPS), help=argparse.SUPPRESS)
    for hidden in ("root", "root-file", "index", "context", "data"):
        parser.add_argument(f"--{hidden}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        print(json.dumps(STEPS[args.step](args)))
        return
    tmp = Path(tempfile.mkdtemp(prefix="rlm-bench-data-"))
    try:
        (tmp / "jsonl").mkdir()
        (tmp / "txt").mkdir()
        size = generate(tmp / "jsonl" / "tickets.jsonl", args.rows, args.narrow)
        shutil.copy(tmp / "jsonl" / "tickets.jsonl", tmp / "txt" / "tickets.txt")
        print(f"corpus: one JSONL file of {args.rows:,} {'narrow ' if args.narrow else ''}tickets, {size:,} bytes "
              f"({size / MB:.1f} MiB); machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
        naive = run_step("naive", tmp / "unused", root_file=str(tmp / "jsonl" / "tickets.jsonl"))
        txt_first = run_step("load", tmp / "cache-txt", root=str(tmp / "txt"))
        first = run_step("load", tmp / "cache", root=str(tmp / "jsonl"))
        second = run_step("load", tmp / "cache", root=str(tmp / "jsonl"))
        txt_worker = run_step("worker", tmp / "cache-txt", index=txt_first["index"], context=txt_first["context"])
        worker = run_step("worker", tmp / "cache", index=second["index"], context=second["context"],
                          data=second["data"])
        mem = run_step("memory", tmp / "cache", index=second["index"], context=second["context"],
                       data=second["data"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = worker["rows"]
    print(f"        {first['summary']}")
    print(f"\n{'time':52} {'seconds':>9} {'vs floor':>9}")

    def row(name: str, value: float, floor: float | None = None) -> None:
        ratio = f"{value / floor:8.2f}x" if floor else ""
        print(f"{name:52} {value:9.3f} {ratio:>9}")

    row("floor: the same bytes as .txt, first load + index", txt_first["wall_s"])
    row("first load + index + parse (JSONL)", first["wall_s"], txt_first["wall_s"])
    row("  of it parsing, at most (difference)", first["wall_s"] - txt_first["wall_s"])
    row("  CPU seconds of the .txt load (all threads)", txt_first["cpu_s"])
    row("  CPU seconds of the JSONL load (all threads)", first["cpu_s"], txt_first["cpu_s"])
    row("floor: json.loads of every line (CPU seconds)", naive["json_loads_s"])
    row("second load (cache: nothing parsed)", second["wall_s"])
    row("floor: worker bundle load of the .txt corpus", txt_worker["bundle_load_s"])
    row("worker bundle load of the JSONL corpus (lazy data)", worker["bundle_load_s"], txt_worker["bundle_load_s"])
    row("data[path] first access (marshal load)", worker["data_load_s"], naive["json_loads_s"])
    row("len(records()) (from the index)", worker["len_records_s"])
    row(f"iterate records() and count ({rows:,} rows)", worker["iterate_records_s"])
    row("iterate data[path] (rows as dicts)", worker["iterate_rows_s"])
    row("data[path].column('status')", worker["column_s"])
    row("records()[n // 2]", worker["index_middle_s"])
    print(f"  per row: records() {worker['iterate_records_s'] / rows * 1e6:.2f} us, "
          f"rows {worker['iterate_rows_s'] / rows * 1e6:.2f} us; count check {worker['open'] == worker['column_open']}")
    text = mem["text_bytes"]
    print(f"\n{'memory in the worker':52} {'MiB':>9} {'/ text':>9} {'target':>8}")
    for name, value, target in (("the file's text (UTF-8 bytes)", text, None),
                                ("  as a str inside `context`", mem["text_str_bytes"], None),
                                ("records form: data[path] (columns, rows on access)", mem["table_bytes"], 4.0),
                                ("naive list of dicts (json.loads per line)", mem["list_of_dicts_bytes"], None),
                                ("data file on disk (marshal)", second["data_bytes"], None)):
        verdict = "" if target is None else ("PASS" if value <= target * text else "MISS")
        limit = f"<= {target:.0f}x " if target else ""
        print(f"{name:52} {value / MB:9.1f} {value / text:8.2f}x {limit:>8}{verdict}")
    print(f"  a parsed JSONL of {text / MB:.1f} MiB takes {mem['table_bytes'] / MB:.1f} MiB beside its text "
          f"({mem['table_bytes'] / text:.2f}x); the text itself stays in `context` ({mem['text_str_bytes'] / MB:.1f} MiB)")


if __name__ == "__main__":
    main()
