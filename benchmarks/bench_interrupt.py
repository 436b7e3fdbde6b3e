"""Benchmark of Ctrl-C (issue 15): how long `rlm ask` takes to exit after SIGINT or SIGTERM.

Run it from the repository root (it is a script, not a test):

    python benchmarks/bench_interrupt.py                 # bwrap (if usable) and process, 5 runs each
    python benchmarks/bench_interrupt.py --runs 10 --levels process --signal TERM

Each run starts the real command against the scripted model server of the tests
(``tests/support/fake_llm.py``), whose root model answers with a code block that sleeps, waits until the
REPL worker runs that block, sends the signal and measures the wall time until the process has
exited (worker killed, socket and scratch folders removed, trajectory closed). The figure is
printed beside a floor: the same machine's time for ``python -c pass`` to start and exit, the
least any Python command can take. The target is under 1 s. The machine's load average is
printed too: wall times on a shared machine are only as good as the CPU left to the benchmark.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _worker_running(pid: int) -> bool:
    """Whether a REPL worker process runs below ``pid``."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(name))
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop()
        try:
            if b"rlm_cli.sandbox.worker" in Path(f"/proc/{p}/cmdline").read_bytes():
                return True
        except OSError:
            pass
        todo += children.get(p, [])
    return False


def one_run(level: str, sig: int, url: str, work: Path, requests: list[object]) -> float:
    """Seconds from the signal to the exit of one `rlm ask` whose code block is sleeping."""
    corpus = work / "corpus"
    corpus.mkdir(exist_ok=True)
    (corpus / "a.txt").write_text("some text\n")
    env = dict(os.environ, RLM_CONFIG_DIR=str(work / "config"), RLM_CACHE_DIR=str(work / "cache"),
               RLM_DATA_DIR=str(work / "data"), RLM_PROBE_PORTS="off", RLM_PROBE_OLLAMA="off",
               LITELLM_LOCAL_MODEL_COST_MAP="True")
    before = len(requests)
    proc = subprocess.Popen([sys.executable, "-m", "rlm_cli", "ask", str(corpus), "q?", "--model", "openai/root",
                             "--api-base", url, "--mode", "rlm", "--sandbox", level, "--no-llm-cache", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=REPO,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not (len(requests) > before and _worker_running(proc.pid)):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"the run never reached its code block: {proc.communicate()[1][-500:]!r}")
            time.sleep(0.05)
        time.sleep(1.0)  # the block is sleeping inside the worker now
        started = time.monotonic()
        proc.send_signal(sig)
        proc.communicate(timeout=60)
        return time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main() -> None:
    from rlm_cli.sandbox.probes import bwrap_available
    from tests.support.fake_llm import FakeLLM, repl

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--levels", nargs="+", default=None, help="sandbox levels (default: bwrap if usable, process)")
    parser.add_argument("--signal", choices=("INT", "TERM"), default="INT")
    args = parser.parse_args()
    levels = args.levels or (["bwrap"] if bwrap_available() else []) + ["process"]
    sig = signal.SIGINT if args.signal == "INT" else signal.SIGTERM
    floor = []
    for _ in range(3):
        t = time.monotonic()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        floor.append(time.monotonic() - t)
    print(f"load average {os.getloadavg()[0]:.2f}; floor (python -c pass): {min(floor):.3f} s")
    llm = FakeLLM()
    llm.default("root", repl("import time\nprint('sleeping')\ntime.sleep(300)"))
    try:
        with tempfile.TemporaryDirectory(prefix="rlm-bench-int-") as tmp:
            for level in levels:
                times = [one_run(level, sig, llm.url, Path(tmp), llm.requests) for _ in range(args.runs)]
                print(f"SIG{args.signal} -> exit, {level:8s}: median {statistics.median(times):.3f} s, "
                      f"max {max(times):.3f} s over {len(times)} runs ({statistics.median(times) / min(floor):.1f}x "
                      "the floor; target < 1 s)")
    finally:
        llm.close()


if __name__ == "__main__":
    main()
