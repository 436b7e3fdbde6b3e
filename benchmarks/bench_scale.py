"""Benchmark of a ~1 GB corpus on one machine (issue 25): index, cache, the worker's memory,
``grep`` against ``re``, and the first ``search()``.

    python benchmarks/bench_scale.py                    # builds ~1 GB in a temporary folder (about 1 min)
    python benchmarks/bench_scale.py --size-mb 100      # the same at 100 MB (development)
    python benchmarks/bench_scale.py --corpus DIR       # an existing folder instead of a generated one

The generated corpus is what a large monorepo with logs looks like: the text files of the Python
installation (the standard library and site-packages: ``.py``, ``.pyi``, ``.txt``, ``.md``,
``.rst``, ``.c``, ``.h``, ``.toml``, ``.cfg``) copied into ``copy-1/``, ``copy-2/``... until the
size is reached, plus a fifth of it as generated service logs (``logs/app-NNN.log``, 8 MiB each).

Every figure comes from a fresh process, and each is printed beside its *floor*, measured in the
same run: cold indexing against listing and reading the same files (warm page cache); ``grep``
against Python's ``re`` scanning the same ``context`` string (``finditer``, counting matches); the
worker's memory against the ``context`` string alone (``sys.getsizeof``). Targets (issue 25, on 2
cores): cold index <= 3x the floor, warm load <= 1 s, grep <= 1.5x ``re``, worker memory <= 1.5x
the string. Memory is the process's own (anonymous) resident memory, sampled every 5 ms for its
peak: the context file's pages, mapped while decoding, are page cache, not the process's.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MB = 1024 * 1024
TEXT_EXT = {".py", ".pyi", ".txt", ".md", ".rst", ".c", ".h", ".toml", ".cfg"}
LOG_FILE_BYTES = 8 * MB
#: What the worker's grep and ``re`` look for: (name, pattern, ignore_case).
PATTERNS = (("literal, no hit", "zq_not_there_xj", False), ("literal, hits", "def tokenize", False),
            ("literal, ignore case", "zq_not_there_xj", True), ("regex, hits", r"^class \w+Error\(", False),
            ("regex, log lines", r"level=ERROR service=(\w+)", False))


class AnonPeak:
    """The peak of this process's anonymous resident memory (``RssAnon``), sampled every 2 ms by a
    separate process: a thread of this one could not sample while C code holds the GIL (decoding
    the context file, and copying it into the ``Context`` subclass up to 1 GiB), which is when the
    loading peak happens."""

    _CODE = ("import sys, time\npid = int(sys.argv[1])\npeak = 0\nimport select\n"
             "def now():\n    for line in open(f'/proc/{pid}/status'):\n        if line.startswith('RssAnon:'):\n"
             "            return int(line.split()[1])\n    return 0\n"
             "while True:\n    r, _, _ = select.select([sys.stdin], [], [], 0.002)\n    try:\n        peak = max(peak, now())\n"
             "    except OSError:\n        break\n    if r:\n        if not sys.stdin.readline():\n            break\n"
             "        print(peak, flush=True)\n        peak = now()\n")

    def __init__(self) -> None:
        self._proc = subprocess.Popen([sys.executable, "-c", self._CODE, str(os.getpid())], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
        self.reset()

    @staticmethod
    def now() -> float:
        """``RssAnon`` in MiB now."""
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def reset(self) -> float:
        """The peak in MiB since the last reset (or start), then start again from now."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        time.sleep(0.005)  # one more sample of what is there now
        self._proc.stdin.write("\n")
        self._proc.stdin.flush()
        return max(int(self._proc.stdout.readline()) / 1024, self.now())


# -- building the corpus ----------------------------------------------------------------------------

def source_files(root: Path) -> list[tuple[Path, str, int]]:
    """``(path, relative path, size)`` of the text files under ``root`` (no dot-folders, no caches)."""
    out = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(names):
            path = Path(folder) / name
            if path.suffix in TEXT_EXT and not name.startswith(".") and not path.is_symlink():
                size = path.stat().st_size
                if 0 < size <= 4 * MB:
                    out.append((path, str(path.relative_to(root)), size))
    return out


def write_logs(dest: Path, total: int, seed: int = 1) -> int:
    """Service logs under ``dest/logs``: ``total`` bytes in files of 8 MiB; returns bytes written."""
    rng = random.Random(seed)
    services = ["auth", "billing", "search", "mailer", "scheduler", "reports", "gateway", "storage"]
    levels = ["INFO"] * 16 + ["WARN"] * 3 + ["ERROR"]
    paths = ["/api/v1/items", "/api/v1/users", "/api/v2/search", "/healthz", "/api/v1/orders", "/login"]
    (dest / "logs").mkdir(parents=True, exist_ok=True)
    written, n = 0, 0
    t = 1_700_000_000
    while written < total:
        lines = []
        size = 0
        while size < LOG_FILE_BYTES:
            t += rng.randint(0, 3)
            line = (f"2024-{(t // 2_592_000) % 12 + 1:02d}-{(t // 86400) % 28 + 1:02d}T{(t // 3600) % 24:02d}:"
                    f"{(t // 60) % 60:02d}:{t % 60:02d}Z level={rng.choice(levels)} service={rng.choice(services)} "
                    f"req={rng.getrandbits(32):08x} user=u{rng.randint(1, 50_000)} path={rng.choice(paths)} "
                    f"status={rng.choice((200, 200, 200, 201, 404, 500))} latency_ms={rng.randint(1, 2000)}")
            lines.append(line)
            size += len(line) + 1
        data = ("\n".join(lines) + "\n").encode()
        (dest / "logs" / f"app-{n:03d}.log").write_bytes(data)
        written += len(data)
        n += 1
    return written


def build_corpus(dest: Path, size: int, source: Path) -> dict[str, Any]:
    """Fill ``dest`` with about ``size`` bytes: logs (a fifth), then copies of ``source``'s text files."""
    t0 = time.perf_counter()
    logs = write_logs(dest, size // 5)
    files = source_files(source)
    total, copies, count = logs, 0, 0
    while total < size and files:
        copies += 1
        for path, rel, n in files:
            target = dest / f"copy-{copies}" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            total += n
            count += 1
            if total >= size:
                break
    return {"bytes": total, "log_bytes": logs, "copies": copies, "copied_files": count,
            "build_s": time.perf_counter() - t0}


# -- steps, each in a fresh process (``--step NAME``), printing one JSON line ------------------------

def step_floor(args: argparse.Namespace) -> dict[str, Any]:
    """List the files with the loader's rules, then read every byte (twice: the first warms)."""
    from rlm_cli.config import CorpusOptions
    from rlm_cli.corpus.loader import LoadReport
    from rlm_cli.corpus.walk import discover

    t0 = time.perf_counter()
    files = discover([args.corpus], CorpusOptions(), LoadReport())
    listed = time.perf_counter() - t0
    for _ in range(2):
        t1 = time.perf_counter()
        total = 0
        for sf in files:
            with open(sf.path or "", "rb") as fh:
                total += len(fh.read())
        read = time.perf_counter() - t1
    return {"list_s": listed, "read_s": read, "floor_s": listed + read, "files": len(files), "bytes": total}


def step_load(args: argparse.Namespace) -> dict[str, Any]:
    """``load_corpus`` with the cache folder of ``RLM_CACHE_DIR`` (empty: cold; warm: second)."""
    import resource

    from rlm_cli.config import CorpusOptions
    from rlm_cli.corpus import load_corpus

    def children() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    mem = AnonPeak()
    t0, c0, k0 = time.perf_counter(), time.process_time(), children()
    corpus = load_corpus([args.corpus], CorpusOptions())
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    from rlm_cli.sandbox.memory import worker_need

    return {"wall_s": wall, "cpu_s": cpu, "workers_cpu_s": children() - k0, "peak_anon_mb": mem.reset(),
            "worker_need_mb": worker_need(corpus) / MB, "estimated": corpus.tokens_estimated,
            "files": len(corpus.files),
            "bytes": corpus.total_bytes, "tokens": corpus.total_tokens, "chunks": len(corpus.chunks),
            "chars": corpus.chars, "width": corpus.char_width, "index": str(corpus.index_file),
            "context": str(corpus.context_file), "summary": corpus.summary(),
            "index_bytes": corpus.index_file.stat().st_size}


def step_worker(args: argparse.Namespace) -> dict[str, Any]:
    """What the REPL worker does with the bundle: load it, grep (and ``re`` on the same string),
    the first ``search``, the line index of the observer."""
    mem = AnonPeak()
    base = mem.now()
    from rlm_cli.sandbox.corpus_helpers import CorpusView
    from rlm_cli.sandbox.observe import Observer

    t0 = time.perf_counter()
    view = CorpusView.from_bundle(args.index, args.context)
    out: dict[str, Any] = {"load_s": time.perf_counter() - t0, "base_mb": base, "load_peak_mb": mem.reset(),
                           "after_load_mb": mem.now(), "string_mb": sys.getsizeof(view.context) / MB}
    ctx = view.context
    for name, pattern, icase in PATTERNS:
        t = time.perf_counter()
        hits = view.grep(pattern, ignore_case=icase, max_results=None)
        grep_s = time.perf_counter() - t
        rx = re.compile(pattern, re.MULTILINE | (re.IGNORECASE if icase else 0))
        t = time.perf_counter()
        n = sum(1 for _ in rx.finditer(ctx))
        re_s = time.perf_counter() - t
        out.setdefault("grep", []).append({"name": name, "pattern": pattern, "grep_s": grep_s, "re_s": re_s,
                                           "hits": len(hits), "matches": n})
        if name == "regex, hits":  # again: the Python files with hits are parsed (for "in") once
            t = time.perf_counter()
            view.grep(pattern, ignore_case=icase, max_results=None)
            out["grep"].append({"name": name + ", again", "pattern": pattern, "grep_s": time.perf_counter() - t,
                                "re_s": re_s, "hits": len(hits), "matches": n})
    out["after_grep_mb"] = mem.now()
    mem.reset()
    t = time.perf_counter()
    view.search("tokenize generate tokens")
    out["search_first_s"] = time.perf_counter() - t
    t = time.perf_counter()
    view.search("base64 encode decode alphabet", k=3)
    out["search_next_s"] = time.perf_counter() - t
    out["search_peak_mb"] = mem.reset()
    out["after_search_mb"] = mem.now()
    t = time.perf_counter()
    Observer(ctx, view.files).build_index()
    out["line_index_s"] = time.perf_counter() - t
    out["line_index_peak_mb"] = mem.reset()
    out["after_all_mb"] = mem.now()
    return out


ASK_CODE = """Counting the errors.
```repl
hits = grep(r"level=ERROR service=(\\w+)", max_results=None)
FINAL(str(len(hits)))
```"""


def ask(args: argparse.Namespace, cache: Path, memory_mb: int) -> dict[str, Any]:
    """A whole ``rlm ask`` on the corpus (cache warm) with a scripted root model that greps and
    answers: the time to an answer through the real sandboxed worker."""
    from benchmarks.scripted_server import Process

    reply = cache.parent / "ask-reply.txt"
    reply.write_text(ASK_CODE)
    server = Process(4, 0.0, str(reply))
    env = {**os.environ, "RLM_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO), "RLM_HOST_IDLE": "0",
           "RLM_CONFIG_DIR": str(cache.parent / "config"), "RLM_DATA_DIR": str(cache.parent / "data"),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "RLM_PROBE_PORTS": "off", "RLM_PROBE_OLLAMA": "off"}
    cmd = [sys.executable, "-m", "rlm_cli", "ask", args.corpus, "How many ERROR lines are there?", "--model",
           "openai/root", "--api-base", server.url, "--policy", "paper", "--no-leads", "--mode", "rlm", "--json",
           "--no-llm-cache", "--root-model-window", "32768", "--memory-limit", f"{memory_mb}M", "--cell-timeout", "600"]
    try:
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=3600)
        wall = time.perf_counter() - t0
    finally:
        server.close()
    if proc.returncode != 0:
        return {"wall_s": wall, "error": proc.stderr.strip().splitlines()[-1:] or [str(proc.returncode)]}
    return {"wall_s": wall, "answer": json.loads(proc.stdout)["answer"]}


STEPS = {"floor": step_floor, "load": step_load, "worker": step_worker}


def run_step(name: str, args: argparse.Namespace, cache: Path, **extra: str) -> dict[str, Any]:
    """Run one step in a fresh interpreter with ``RLM_CACHE_DIR=cache``; returns its JSON."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--step", name, "--corpus", args.corpus]
    for k, v in extra.items():
        cmd += [f"--{k}", v]
    env = {**os.environ, "RLM_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"step {name} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def load_avg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="size of the generated corpus (default 1024)")
    parser.add_argument("--corpus", help="an existing folder to measure instead of a generated corpus")
    parser.add_argument("--source", default=sysconfig.get_paths()["stdlib"],
                        help="folder whose text files are copied (default: this Python's lib, with site-packages)")
    parser.add_argument("--keep", help="build the corpus in this folder and keep it (reused when it exists)")
    parser.add_argument("--no-ask", action="store_true", help="skip the whole `rlm ask` run")
    parser.add_argument("--step", choices=sorted(STEPS), help=argparse.SUPPRESS)
    parser.add_argument("--index", help=argparse.SUPPRESS)
    parser.add_argument("--context", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        print(json.dumps(STEPS[args.step](args)))
        return
    tmp = Path(tempfile.mkdtemp(prefix="rlm-bench-scale-"))
    built: dict[str, Any] | None = None
    try:
        if args.corpus is None:
            dest = Path(args.keep) if args.keep else tmp / "corpus"
            if not dest.exists():
                built = build_corpus(dest, args.size_mb * MB, Path(args.source))
            args.corpus = str(dest)
        print(f"corpus: {args.corpus}" + (f" (built in {built['build_s']:.0f} s: {built['copies']} copies of "
                                          f"{args.source}'s text files, {built['log_bytes'] / MB:.0f} MB of logs)"
                                          if built else ""))
        print(f"machine: {os.cpu_count()} CPUs, load average before: {load_avg()}")
        floor = run_step("floor", args, tmp / "unused")
        cold = run_step("load", args, tmp / "cache")
        warm = run_step("load", args, tmp / "cache")
        worker = run_step("worker", args, tmp / "cache", index=warm["index"], context=warm["context"])
        asked = None if args.no_ask else ask(args, tmp / "cache", int(-(-cold["worker_need_mb"] // 1024) * 1024))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    size_mb = cold["bytes"] / MB
    print(f"        {cold['files']:,} files, {size_mb:,.0f} MB, {cold['tokens']:,} tokens, {cold['chunks']:,} chunks; "
          f"context {cold['chars']:,} characters at {cold['width']} byte(s) each; index.json "
          f"{cold['index_bytes'] / MB:.0f} MB")
    print(f"        {cold['summary']}")
    f = floor["floor_s"]
    print(f"\n{'time':48} {'seconds':>9} {'floor':>9} {'ratio':>7} {'target':>14}")

    def row(name: str, s: float, fl: float | None, target: str = "", ok: bool | None = None) -> None:
        ratio = f"{s / fl:6.2f}x" if fl else ""
        print(f"{name:48} {s:9.3f} {'' if fl is None else f'{fl:9.3f}':>9} {ratio:>7} "
              f"{target:>9} {'' if ok is None else verdict(ok)}")

    row(f"floor: list ({floor['list_s']:.2f} s) + read all files", f, None)
    row(f"cold load + index (cpu: rlm {cold['cpu_s']:.0f} s, readers {cold['workers_cpu_s']:.0f} s)", cold["wall_s"],
        f, "<= 3x", cold["wall_s"] <= 3 * f)
    row("warm load (cache hit)", warm["wall_s"], f, "<= 1 s", warm["wall_s"] <= 1)
    row("worker: bundle load", worker["load_s"], None)
    for g in worker["grep"]:
        row(f"grep {g['name']} ({g['hits']:,} hits)", g["grep_s"], g["re_s"], "<= 1.5x", g["grep_s"] <= 1.5 * g["re_s"])
    row("search: first call (builds BM25)", worker["search_first_s"], None)
    row("search: next call", worker["search_next_s"], None)
    row("observer line index (background)", worker["line_index_s"], None)
    if asked is not None:
        errors = next(g for g in worker["grep"] if g["name"] == "regex, log lines")["hits"]
        got = asked.get("answer") or f"failed: {asked.get('error')}"
        row(f"`rlm ask` (warm cache, sandboxed worker): {got} ERROR lines (grep: {errors:,})", asked["wall_s"], None)
    s = worker["string_mb"]
    print(f"\n{'memory (anonymous resident MiB)':48} {'MiB':>9} {'string':>9} {'ratio':>7} {'target':>14}")

    def mem(name: str, mb: float, target: float | None = None) -> None:
        print(f"{name:48} {mb:9.0f} {s:9.0f} {mb / s:6.2f}x {'' if target is None else f'<= {target}x':>9} "
              f"{'' if target is None else verdict(mb <= target * s)}")

    mem("parent: peak of the cold load", cold["peak_anon_mb"])
    mem("parent: peak of the warm load", warm["peak_anon_mb"])
    mem("worker: peak while loading the bundle", worker["load_peak_mb"])
    mem("worker: after load (context, files, chunks)", worker["after_load_mb"], 1.5)
    mem("worker: after grep", worker["after_grep_mb"])
    mem("worker: peak while building the BM25 index", worker["search_peak_mb"])
    mem("worker: with the BM25 index", worker["after_search_mb"], 1.5)
    mem("worker: peak while building the line index", worker["line_index_peak_mb"])
    mem("worker: with both indexes (steady state)", worker["after_all_mb"], 1.5)
    peak = max(worker["load_peak_mb"], worker["search_peak_mb"], worker["line_index_peak_mb"])
    mem("rlm's estimate of a worker's peak (memory guard)", cold["worker_need_mb"])
    print(f"  the guard's estimate is {cold['worker_need_mb'] / peak:.2f}x the peak measured here "
          f"({peak:,.0f} MiB); it refuses to start workers whose estimates exceed the memory available")
    print(f"\nload average after: {load_avg()}")


if __name__ == "__main__":
    main()
