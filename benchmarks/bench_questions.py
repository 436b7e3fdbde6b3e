"""Answer quality on questions ``rlm eval`` does not generate (issue 21): a real ``rlm ask`` per question.

Run it from the repository root (a script, not a test), with a model server up:

    python benchmarks/bench_questions.py --set dev --out /tmp/dev.jsonl
    python benchmarks/bench_questions.py --set heldout --out /somewhere/private/heldout.jsonl --resume
    python benchmarks/bench_questions.py --set heldout2 --out /somewhere/private/heldout2.jsonl --resume
    python benchmarks/bench_questions.py --set dev --build /path/to/other/rlm/tree --out /tmp/dev-old.jsonl

The questions are ``benchmarks/questions/{dev,dev2,heldout,heldout2}.jsonl`` (written by ``make_questions.py``,
``dev2`` by ``make_dev2.py``: a second tuning set about other stdlib packages; ``heldout2`` by
``make_heldout2.py``: a second held-out set, written after issue 37's rules were frozen;
golds computed by code over this interpreter's standard library and over the corpora
``make_data.py`` generates, which this script regenerates under ``--data-dir``). Each question runs
as ``python -m rlm_cli ask CORPUS QUESTION --json --no-llm-cache`` plus the model flags, with
``PYTHONPATH`` set to the build's tree and fresh config/cache/data folders per run, in its own
process group, killed (group and all) after ``--limit-s`` seconds and then counted as wrong.

Each result is appended to ``--out`` as one JSON line as soon as it is known, so ``--resume``
continues an interrupted run (skipping ids already there for the same ``rlm_cli/`` tree). At the end
(or with ``--report`` alone) an aggregate is printed (verdicts recomputed from the stored answers
with the scoring as it is now): per corpus kind correct/total, timeouts,
errors, median seconds, mean root calls, and per support verdict (``observed``, ``computed``,
``unsupported``, ``partial``; issue 37) how many answers got it and how many of those were right;
``--progress FILE`` appends it to a Markdown file.

Held-out stays blind: for ``--set heldout`` and ``--set heldout2`` nothing per question is printed (no
question, answer or verdict), only a counter and the aggregate; the per-question record lives in
``--out`` alone.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import sysconfig
import time
from datetime import UTC, datetime
from itertools import zip_longest
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
QDIR = REPO / "benchmarks" / "questions"
sys.path.insert(0, str(QDIR))
import make_data  # noqa: E402
import scoring  # noqa: E402

CORPUS_KINDS = ("stdlib", "log", "jsonl")
BLIND_SETS = ("heldout", "heldout2")  # judged only: nothing per question is printed


def load_questions(set_name: str) -> list[dict[str, Any]]:
    """The questions of ``set_name`` (``dev``, ``dev2``, ``heldout`` or ``heldout2``) as dicts, file order."""
    path = QDIR / f"{set_name}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def corpus_path(q: dict[str, Any], data: dict[str, Path]) -> Path:
    """The PATH given to ``rlm ask`` for question ``q``; raises ``ValueError`` for a stdlib question
    whose golds were computed on another Python version."""
    corpus = q["corpus"]
    if corpus.startswith("stdlib:"):
        here = ".".join(map(str, sys.version_info[:3]))
        if q.get("python") != here:
            raise ValueError(f"{q['id']}: golds computed on Python {q.get('python')}, this is {here}")
        return Path(sysconfig.get_paths()["stdlib"]) / corpus.split(":", 1)[1]
    return data[corpus]


def build_ids(tree: Path) -> tuple[str, str]:
    """``(commit, rlm_tree)`` of ``tree``: its short HEAD commit and the git tree hash of its ``rlm_cli/``
    (``+dirty`` on both when ``rlm_cli/`` has uncommitted changes; ``unknown`` outside git). Results are
    matched on ``rlm_tree``, so commits that leave ``rlm_cli/`` alone (this bench's own) keep them."""
    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(tree), *a], capture_output=True, text=True, check=True).stdout.strip()
    try:
        sha, rlm = git("rev-parse", "--short", "HEAD"), git("rev-parse", "--short", "HEAD:rlm_cli")
        dirty = "+dirty" if git("status", "--porcelain", "--", "rlm_cli") else ""
        return sha + dirty, rlm + dirty
    except (OSError, subprocess.CalledProcessError):
        return "unknown", "unknown"


def run_one(q: dict[str, Any], args: argparse.Namespace, path: Path, home: Path) -> dict[str, Any]:
    """Run one question as an ``rlm ask`` subprocess; returns the record (answer, exit code, seconds,
    iterations, root calls, verdict). A run past ``args.limit_s`` is killed with its process group."""
    for sub in ("config", "cache", "data"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    env.update(PYTHONPATH=str(args.build), RLM_CONFIG_DIR=str(home / "config"), RLM_CACHE_DIR=str(home / "cache"),
               RLM_DATA_DIR=str(home / "data"), NO_COLOR="1")
    cmd = [args.python, "-m", "rlm_cli", "ask", str(path), q["question"], "--model", args.model,
           "--api-base", args.api_base, "--root-model-window", str(args.window),
           "--sub-model-window", str(args.window), "--no-llm-cache", "--json", *args.rlm_arg]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=str(home), start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=args.limit_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                out, err = proc.communicate(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            out, err = proc.communicate()
    seconds = round(time.monotonic() - t0, 1)
    doc: dict[str, Any] = {}
    try:
        doc = json.loads(out or "")
    except json.JSONDecodeError:
        start = (out or "").rfind("\n{")  # anything before the document
        try:
            doc = json.loads(out[start + 1:]) if start >= 0 else {}
        except json.JSONDecodeError:
            doc = {}
    answer = None if timed_out else doc.get("answer")
    correct, reason = (False, "timeout") if timed_out else scoring.score(q, answer)
    usage = doc.get("usage") or {}
    return {"id": q["id"], "set": q["set"], "corpus": q["corpus"], "kind": q["kind"], "build": args.label,
            "rlm_tree": args.rlm_tree,
            "answer": answer, "status": "timeout" if timed_out else doc.get("status", "no-json"),
            "exit_code": proc.returncode, "seconds": seconds, "iterations": doc.get("iterations"),
            "root_calls": (usage.get("root") or {}).get("calls"), "sub_calls": doc.get("sub_calls"),
            "policy": doc.get("policy"), "correct": correct, "reason": reason, "timed_out": timed_out,
            "support": (doc.get("support") or {}).get("verdict"),
            "error": doc.get("error") or (None if doc else (err or "")[-600:]),
            "when": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}


def is_error(r: dict[str, Any]) -> bool:
    """A run that ended without an answer for a reason other than the wall limit."""
    return not r["timed_out"] and (r["status"] in ("error", "no-json", "interrupted") or r["answer"] is None)


def aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per corpus kind ``[correct, total]``, overall, timeouts, errors, median seconds, mean root calls."""
    per = {k: [0, 0] for k in CORPUS_KINDS}
    for r in rows:
        cell = per[r["corpus"].split(":", 1)[0]]
        cell[0] += bool(r["correct"])
        cell[1] += 1
    roots = [r["root_calls"] for r in rows if r.get("root_calls") is not None]
    verdicts: dict[str, list[int]] = {}
    for r in rows:  # the answer's support verdict (issue 37); "none": no document (a timeout, an error)
        cell = verdicts.setdefault(r.get("support") or "none", [0, 0])
        cell[0] += bool(r["correct"])
        cell[1] += 1
    return {"per_corpus": per, "per_verdict": verdicts, "correct": sum(bool(r["correct"]) for r in rows), "total": len(rows),
            "timeouts": sum(bool(r["timed_out"]) for r in rows), "errors": sum(is_error(r) for r in rows),
            "max_iterations": sum(r["status"] == "max_iterations" for r in rows),
            "median_s": round(statistics.median(r["seconds"] for r in rows), 1) if rows else None,
            "max_s": max((r["seconds"] for r in rows), default=None),
            "mean_root_calls": round(statistics.mean(roots), 2) if roots else None}


def render(agg: dict[str, Any], set_name: str, commit: str, expected: int) -> str:
    """One Markdown block for ``--progress`` and the terminal."""
    per = ", ".join(f"{k} {c}/{t}" for k, (c, t) in agg["per_corpus"].items())
    verdicts = agg.get("per_verdict") or {}
    stood = [verdicts[v] for v in ("observed", "computed") if v in verdicts]
    right, total = sum(c for c, _ in stood), sum(t for _, t in stood)
    support = ("; support: " + ", ".join(f"{k} {c}/{t}" for k, (c, t) in sorted(verdicts.items()))
               + f"; observed+computed {right}/{total} right"
               + (f" ({100 * right / total:.0f}%), coverage {total}/{agg['total']}" if total else "")) if verdicts else ""
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    done = "" if agg["total"] == expected else f" (INCOMPLETE: {agg['total']} of {expected} run)"
    return (f"- {when} · set **{set_name}** · build `{commit}`{done}: **{agg['correct']}/{agg['total']}** "
            f"({per}); timeouts {agg['timeouts']}, errors {agg['errors']}, iteration limit "
            f"{agg['max_iterations']}; median {agg['median_s']} s (max {agg['max_s']} s), "
            f"mean root calls {agg['mean_root_calls']}{support}\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", dest="set_name", choices=("dev", "dev2", *BLIND_SETS), default="dev")
    ap.add_argument("--build", type=Path, default=REPO, help="rlm source tree to run (PYTHONPATH)")
    ap.add_argument("--out", type=Path, required=True, help="results JSONL (appended)")
    ap.add_argument("--resume", action="store_true", help="skip ids already in --out for this build")
    ap.add_argument("--limit-s", type=float, default=480.0, help="wall limit per question (s)")
    ap.add_argument("--model", default="openai/local")
    ap.add_argument("--api-base", default="http://127.0.0.1:8765/v1")
    ap.add_argument("--window", type=int, default=16384, help="--root-model-window and --sub-model-window")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs rlm_cli")
    ap.add_argument("--data-dir", type=Path, default=Path("/tmp/rlm-bench-questions-data"))
    ap.add_argument("--only", default="", help="comma-separated ids to run (default: all)")
    ap.add_argument("--interleave", action="store_true", help="run the corpus kinds in turn (for a run cut short)")
    ap.add_argument("--progress", type=Path, help="append the aggregate to this Markdown file")
    ap.add_argument("--label", help="name of the build in the records and the aggregate (default: its commit)")
    ap.add_argument("--report", action="store_true", help="only print the aggregate of --out")
    ap.add_argument("--rlm-arg", action="append", default=[], help="extra argument for rlm ask (repeatable)")
    args = ap.parse_args()
    args.build = args.build.resolve()
    commit, args.rlm_tree = build_ids(args.build)
    args.label = args.label or commit
    questions = load_questions(args.set_name)
    if args.only:
        keep = set(args.only.split(","))
        questions = [q for q in questions if q["id"] in keep]
    if args.interleave:  # stdlib, log, jsonl, stdlib, ...: a run cut short still covers every corpus kind
        lanes = [[q for q in questions if q["corpus"].split(":", 1)[0] == k] for k in CORPUS_KINDS]
        questions = [q for row in zip_longest(*lanes) for q in row if q is not None]
    blind = args.set_name in BLIND_SETS
    ids = {q["id"] for q in questions}
    by_id = {q["id"]: q for q in questions}

    def done_rows() -> list[dict[str, Any]]:
        if not args.out.exists():
            return []
        rows = [json.loads(x) for x in args.out.read_text(encoding="utf-8").splitlines() if x.strip()]
        latest = {r["id"]: r for r in rows if r.get("rlm_tree") == args.rlm_tree and r["id"] in ids}
        for r in latest.values():  # verdicts from the scoring as it is now, so a fix to it applies to old runs
            if not r["timed_out"]:
                r["correct"], r["reason"] = scoring.score(by_id[r["id"]], r["answer"])
        return [latest[q["id"]] for q in questions if q["id"] in latest]

    if not args.report:
        data = make_data.write(args.data_dir)
        skip = {r["id"] for r in done_rows()} if args.resume else set()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        home_root = args.out.with_name(args.out.name + ".home")
        todo = [q for q in questions if q["id"] not in skip]
        print(f"{args.set_name}: {len(todo)} to run ({len(skip)} already done) with build {args.label} (rlm_cli tree {args.rlm_tree})",
              file=sys.stderr)
        for i, q in enumerate(todo, 1):
            rec = run_one(q, args, corpus_path(q, data), home_root / f"{args.rlm_tree}-{q['id']}")
            with open(args.out, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
            if blind:
                print(f"[{i}/{len(todo)}] {rec['seconds']} s", file=sys.stderr)
            else:
                mark = "RIGHT" if rec["correct"] else "wrong"
                print(f"[{i}/{len(todo)}] {q['id']} {mark} {rec['seconds']} s exit {rec['exit_code']} "
                      f"roots {rec['root_calls']}: {str(rec['answer'])[:160]!r} ({rec['reason']})", file=sys.stderr)
    rows = done_rows()
    if not rows:
        print("no results", file=sys.stderr)
        return 1
    text = render(aggregate(rows), args.set_name, f"{args.label}, rlm_cli tree {args.rlm_tree}", len(questions))
    print(text, end="")
    if args.progress:
        with open(args.progress, "a", encoding="utf-8") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
