"""Benchmark of ``rlm audit --changed-since REF`` (issue 48): the tokens of an audit of a one-file
change against those of a full audit, over a copy of standard-library packages in a git repository,
against a scripted model server.

    python benchmarks/bench_changed.py                              # json, email, http, asyncio, xml
    python benchmarks/bench_changed.py --packages all               # every .py file of the stdlib

The checklist has 8 ``int`` checks: 4 about the whole tree and 4 each about one package
(``include``: ``email/**``, ``http/**``, ``asyncio/**``, ``xml/**``). The change is one function
added to ``json/decoder.py``, committed on top of the first commit; the changed-since run is
``--changed-since HEAD~1``. The scripted root model answers each check in one turn (a grep, then
``FINAL(len(hits))``), and its server counts tokens as characters / 4, so the figures are rlm's
prompts, deterministic. Each run is one ``rlm audit --json`` command with the response cache off;
the index cache is built by a first, untimed run.
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

from benchmarks.bench_audit import ROOT_CODE  # noqa: E402  (the same scripted root reply)
from benchmarks.scripted_server import Process  # noqa: E402

SCOPED = ("email", "http", "asyncio", "xml")


def copy_tree(packages: str, root: Path) -> None:
    """The ``.py`` files of the stdlib ``packages`` (``all``: the whole stdlib, no tests) under ``root``."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    names = [p.name for p in stdlib.iterdir() if p.is_dir() and (p / "__init__.py").exists()] \
        if packages == "all" else packages.split(",")
    skip = shutil.ignore_patterns("__pycache__", "test", "tests", "idle_test", "*.pyc", "*.exe", "*.so", "*.txt",
                                  "*.dat", "*.pem", "*.cfg", "*.zip", "*.png", "*.gif", "*.json", "*.xml")
    for name in names:
        shutil.copytree(stdlib / name, root / name, ignore=skip, dirs_exist_ok=True)
    if packages == "all":
        for f in stdlib.glob("*.py"):
            shutil.copy2(f, root / f.name)


def checklist() -> str:
    """8 int checks: 4 about everything, 4 about one package each."""
    out = []
    for i in range(4):
        out.append(f'[[check]]\nid = "all-{i + 1}"\nquestion = "Check {i + 1}: how many function definitions '
                   'are there?"\ntype = "int"\nmax = 10000000\n\n')
    for pkg in SCOPED:
        out.append(f'[[check]]\nid = "{pkg}-defs"\nquestion = "How many function definitions does {pkg} have?"\n'
                   f'type = "int"\nmax = 10000000\ninclude = ["{pkg}/**"]\n\n')
    return "".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", default="json,email,http,asyncio,xml",
                        help="comma-separated stdlib packages, or all (default json,email,http,asyncio,xml)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rlm-bench-changed-"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "RLM_CACHE_DIR": str(tmp / "cache"), "RLM_DATA_DIR": str(tmp / "data"), "RLM_CONFIG_DIR": str(tmp / "config"),
           "RLM_RUNTIME_DIR": str(tmp / "run"), "RLM_HOST_IDLE": "60", "RLM_PROBE_PORTS": "off",
           "RLM_PROBE_OLLAMA": "off", "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@b"}
    repo = tmp / "repo"
    repo.mkdir()
    copy_tree(args.packages, repo)
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(["git", *cmd], cwd=repo, env=env, check=True)
    with open(repo / "json" / "decoder.py", "a") as fh:
        fh.write("\n\ndef added_by_the_change(x):\n    return x\n")
    subprocess.run(["git", "commit", "-qam", "one change"], cwd=repo, env=env, check=True)
    files = sum(1 for _ in repo.rglob("*.py"))
    size = sum(f.stat().st_size for f in repo.rglob("*.py"))
    (tmp / "root-reply.txt").write_text(ROOT_CODE)
    (tmp / "checks.toml").write_text(checklist())
    server = Process(16, 0.0, str(tmp / "root-reply.txt"))
    print(f"{args.packages}: {files} .py files, {size / 1e6:.1f} MB; 8 checks (4 scoped to one package); "
          f"machine: {os.cpu_count()} CPUs")

    def run(*extra: str) -> tuple[float, dict[str, object]]:
        cmd = [sys.executable, "-m", "rlm_cli", "audit", ".", "--checklist", str(tmp / "checks.toml"), "--json",
               "--model", "openai/root", "--sub-model", "openai/sub", "--api-base", server.url, "--policy", "paper",
               "--no-leads", "--mode", "rlm", "--no-llm-cache", "--root-model-window", "128000",
               "--sub-model-window", "128000", "--quiet", *extra]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=repo, env=env, timeout=3600)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"rlm audit failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return wall, json.loads(proc.stdout)

    rows = []
    try:
        run()  # untimed: builds the index cache and starts the shared model host
        for label, extra in (("full audit", ()), ("--changed-since HEAD~1", ("--changed-since", "HEAD~1"))):
            wall, doc = run(*extra)
            usage, totals = doc["usage"], doc["totals"]
            assert isinstance(usage, dict) and isinstance(totals, dict)
            root = usage.get("root") or {}
            asked = sum(1 for c in doc["checks"] if (c.get("run") or {}).get("iterations"))  # type: ignore[union-attr]
            rows.append((label, asked, root.get("calls", 0), root.get("input_tokens", 0), root.get("output_tokens", 0),
                         wall, totals["pass"]))
    finally:
        server.close()
        subprocess.run([sys.executable, "-m", "rlm_cli", "host", "stop"], env=env, capture_output=True, cwd=tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{'run':<24} {'asked':>5} {'calls':>5} {'input tok':>10} {'output tok':>10} {'wall':>8} {'passed':>6}")
    for label, asked, calls, tin, tout, wall, passed in rows:
        print(f"{label:<24} {asked:>5} {calls:>5} {tin:>10,} {tout:>10,} {wall:7.2f}s {passed:>4}/8")
    full, changed = rows[0][3] + rows[0][4], rows[1][3] + rows[1][4]
    print(f"\n--changed-since: {changed:,} tokens against {full:,} for the full audit "
          f"({100 * (1 - changed / full):.0f}% fewer)" if full else "")


if __name__ == "__main__":
    main()
