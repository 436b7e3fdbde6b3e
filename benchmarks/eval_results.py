"""Regenerate ``benchmarks/RESULTS.md``: ``rlm eval`` on the Python standard library, with a
scripted model (the baseline: a solver that answers every family with REPL code) and, when one
answers, a real local model (``../shared/local-model/serve.sh``: Qwen2.5-Coder-1.5B on 127.0.0.1:8765).

    python benchmarks/eval_results.py                 # every run whose model is reachable, then RESULTS.md
    python benchmarks/eval_results.py --only code-31mb --only needle-1mb
    python benchmarks/eval_results.py --render        # only rewrite RESULTS.md from benchmarks/results/*.json

Each run is one ``rlm eval ... --json`` command (printed, and written into RESULTS.md); its JSON
document is kept in ``benchmarks/results/NAME.json``, so a slow run need not be repeated to
render the file again. The scripted baseline shows what the harness and the REPL helpers allow
(a model that writes the right code scores 100%) and how long rlm itself takes per question.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import sysconfig
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
STDLIB = sysconfig.get_paths()["stdlib"]
PY = ["--include", "*.py", "--exclude", "site-packages/"]
ONE_MB = [f"{STDLIB}/asyncio", f"{STDLIB}/email", f"{STDLIB}/http"]  # about 1.1 MB of .py
TINY = [f"{STDLIB}/this.py"]  # the generated records are (nearly) the whole corpus: direct mode fits

#: name -> (model kind, corpus paths + corpus flags, eval flags)
RUNS: dict[str, tuple[str, list[str], list[str]]] = {
    "scripted-31mb": ("scripted", [STDLIB, *PY], ["--families", "needle,code,aggregate,pairs", "--limit", "8"]),
    "code-31mb": ("local", [STDLIB, *PY], ["--families", "code", "--limit", "10"]),
    # The same questions without leads(question) before the first turn: what the leads add.
    "code-31mb-noleads": ("local", [STDLIB, *PY], ["--families", "code", "--limit", "10", "--no-leads"]),
    "needle-1mb": ("local", [*ONE_MB, *PY], ["--families", "needle", "--limit", "6"]),
    "needle-31mb": ("local", [STDLIB, *PY], ["--families", "needle", "--limit", "8"]),
    # Other questions of the same kind (another seed): how far the figure above carries.
    "needle-31mb-seed2": ("local", [STDLIB, *PY], ["--families", "needle", "--limit", "8", "--seed", "2"]),
    "aggregate-log": ("local", TINY, ["--families", "aggregate", "--limit", "6", "--records", "150",
                                      "--modes", "rlm,direct"]),
    # rlm mode alone (direct mode, unchanged by loop work, takes about 5 minutes a question here).
    "aggregate-log-rlm": ("local", TINY, ["--families", "aggregate", "--limit", "6", "--records", "150",
                                          "--modes", "rlm"]),
    "pairs-tickets": ("local", TINY, ["--families", "pairs", "--limit", "4", "--records", "160",
                                      "--modes", "rlm,direct"]),
}


# -- the scripted solver ----------------------------------------------------------------------------

def _question(req: dict[str, Any]) -> str:
    users = [str(m["content"]) for m in req["messages"] if m["role"] == "user"]
    first = next(u for u in users if "Question: " in u)
    return re.search(r"Question: (.*?)\n\nStart by", first, re.S).group(1)  # type: ignore[union-attr]


def solve(req: dict[str, Any]) -> str:
    """One root-model reply that answers the question with REPL code (and FINAL), for every
    question ``rlm eval`` generates; what a model that codes well would write."""
    q = _question(req)
    code = _solver_code(q)
    return f"```repl\n{code}\n```"


def _solver_code(q: str) -> str:
    if m := re.search(r"codes? of the (.+?) projects?\?", q):
        names = re.split(r", | and ", m.group(1))
        return (f"import re\nfound = {{n: re.search('secret code of the ' + n + r' project is ([A-Z0-9-]+)', context)"
                f".group(1) for n in {names!r}}}\nFINAL(', '.join(f'{{n}}: {{c}}' for n, c in found.items()))")
    if m := re.search(r"Which file defines the function `(\w+)`", q):
        return f"FINAL(grep(r'^\\s*(async\\s+)?def\\s+{m.group(1)}\\s*\\(')[0]['file'])"
    if m := re.search(r"In the file `(.+?)`, what is the default value of the parameter `(\w+)` of the "
                      r"(?:function|method) `([\w.]+)`", q):
        path, param, qual = m.groups()
        return (f"import ast\nf = [x for x in files if x['path'] == {path!r}][0]\n"
                "tree = ast.parse(context[f['start']:f['end']])\n"
                f"parts = {qual!r}.split('.')\nnode = tree\nfor name in parts:\n"
                "    node = [n for n in node.body if getattr(n, 'name', None) == name][0]\n"
                "a = node.args\npos = a.posonlyargs + a.args\n"
                "pairs = list(zip(pos[len(pos) - len(a.defaults):], a.defaults)) + [(k, d) for k, d in "
                "zip(a.kwonlyargs, a.kw_defaults) if d is not None]\n"
                f"FINAL(ast.unparse(dict((k.arg, d) for k, d in pairs)[{param!r}]))")
    if m := re.search(r"In the file `(.+?)`, what are the base classes of the class `(\w+)`", q):
        path, cls = m.groups()
        return (f"import ast\nf = [x for x in files if x['path'] == {path!r}][0]\n"
                "tree = ast.parse(context[f['start']:f['end']])\n"
                f"node = [n for n in tree.body if getattr(n, 'name', None) == {cls!r}][0]\n"
                "FINAL(', '.join(ast.unparse(b) for b in node.bases))")
    if m := re.search(r"In the file `(.+?)`, how many functions and methods call `(\w+)`", q):
        path, name = m.groups()
        return f"FINAL(len({{h['in'] for h in grep(r'(?<![\\w.]){name}\\(', {path!r}, max_results=10000) if 'in' in h}}))"
    if m := re.search(r"In `(.+?)`, how many lines have service=(\w+) and level=(\w+)\?", q):
        path, svc, lvl = m.groups()
        return (f"rows = [r for r in read_file({path!r}).split('\\n') if 'service={svc} ' in r and 'level={lvl} ' in r]"
                "\nFINAL(len(rows))")
    if m := re.search(r"In `(.+?)`, what is the total latency_ms of all lines with service=(\w+)\?", q):
        path, svc = m.groups()
        return ("import re\nFINAL(sum(int(re.search(r'latency_ms=(\\d+)', r).group(1)) for r in "
                f"read_file({path!r}).split('\\n') if 'service={svc} ' in r))")
    if m := re.search(r"In `(.+?)`, which (\w+) has the (most|fewest) lines with (\w+)=(\w+)\?", q):
        path, what, most, field, value = m.groups()
        return ("import re, collections\nc = collections.Counter()\n"
                f"for r in read_file({path!r}).split('\\n'):\n"
                f"    if '{field}={value} ' in r:\n        c[re.search(r'{what}=(\\w+)', r).group(1)] += 1\n"
                + ("FINAL(c.most_common(1)[0][0])" if most == "most" else
                   ("labels = ['auth', 'billing', 'search', 'gateway', 'storage', 'mailer', 'scheduler', 'reports']\n"
                    "FINAL(min(labels, key=lambda s: c.get(s, 0)))" if what == "service" else
                    "FINAL(min(c, key=c.get))")))
    if m := re.search(r"In `(.+?)`, (which|how many) pairs of tickets", q):
        path, kind = m.groups()
        return ("import re, collections\ng = collections.defaultdict(list)\n"
                f"for r in read_file({path!r}).split('\\n'):\n"
                "    m = re.search(r'ticket (T\\d+) customer=(\\S+) product=(\\S+)', r)\n"
                "    if m: g[m.group(2), m.group(3)].append(m.group(1))\n"
                "pairs = [v for v in g.values() if len(v) == 2]\n"
                + ("FINAL('; '.join(' & '.join(p) for p in pairs))" if kind == "which" else "FINAL(len(pairs))"))
    return "print(len(context))"


# -- running and rendering --------------------------------------------------------------------------

def local_model(api_base: str) -> str | None:
    """The first model the OpenAI-compatible server at ``api_base`` lists, or ``None``."""
    try:
        with urllib.request.urlopen(api_base.rstrip("/") + "/models", timeout=2) as r:
            data = json.loads(r.read())
        return str(data["data"][0]["id"])
    except (OSError, ValueError, KeyError, IndexError):
        return None


def command(name: str, model_flags: list[str]) -> list[str]:
    _, corpus, flags = RUNS[name]
    seed = [] if "--seed" in flags else ["--seed", "1"]
    return ["rlm", "eval", *corpus, *flags, *seed, *model_flags, "--json"]


def run(name: str, model_flags: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run one ``rlm eval`` and keep its document (plus the command) in ``results/NAME.json``."""
    argv = command(name, model_flags)
    commit = _commit()  # the code measured is the code at the start (a run takes minutes; work may go on)
    print("$ " + " ".join(argv), file=sys.stderr, flush=True)
    proc = subprocess.run([sys.executable, "-m", "rlm_cli", *argv[1:]], capture_output=True, text=True, env=env,
                          cwd=ROOT)
    sys.stderr.write(proc.stderr[-3000:])
    if proc.returncode != 0:
        raise SystemExit(f"{name}: rlm eval exited {proc.returncode}")
    doc = json.loads(proc.stdout)
    doc["command"] = " ".join(argv).replace(STDLIB, "$STDLIB")
    doc["commit"] = commit
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(doc, indent=1))
    return doc


def _commit() -> str:
    """The checkout's commit (short), with ``+changes`` when the work tree differs from it
    (the results this script writes do not count)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)benchmarks/results", ":(exclude)benchmarks/RESULTS.md"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def render() -> str:
    """RESULTS.md from every ``results/*.json``."""
    docs = {p.stem: json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))}
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    out = ["# rlm eval results", "",
           "Generated by `python benchmarks/eval_results.py` (see its docstring). Corpus: the CPython "
           f"standard library's `.py` files (`$STDLIB` = `{STDLIB}`), site-packages excluded. Each question "
           "counts as correct only when its run ended with a final answer that the family's rule accepts "
           "(docs/eval.md). \"cached calls\" are model calls answered from rlm's LLM cache: the reply "
           "the model gave that exact request in an earlier run, which spends no tokens and takes no time "
           "(so the tokens and median-seconds columns read low where most calls are cached).", "",
           f"Machine: {platform.machine()}, {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, "
           f"rendered {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}.", ""]
    for name, doc in docs.items():
        meta = doc["meta"]
        out += [f"## {name}", "", f"- date: {meta['date']}; model: `{meta['model']}`; corpus: "
                f"{meta['corpus']['files']:,} files, {meta['corpus']['tokens']:,} tokens; rlm commit: "
                f"{doc.get('commit', 'not recorded (run before commit recording)')}",
                f"- command: `{doc['command']}`", "",
                "| family | mode | correct | accuracy | median iterations | sub-calls | tokens | cached calls | median s "
                "| not run |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for g in doc["summary"]:
            acc = "n/a" if g["accuracy"] is None else f"{100 * g['accuracy']:.0f}%"
            med_it = "n/a" if g["median_iterations"] is None else f"{g['median_iterations']:g}"
            med_s = "n/a" if g["median_s"] is None else f"{g['median_s']:.1f}"
            out.append(f"| {g['family']} | {g['mode']} | {g['correct']}/{g['ran']} | {acc} | {med_it} | "
                       f"{g['sub_calls']:,} | {g['tokens']:,} | {g.get('cached_calls', 'not recorded')} | {med_s} | "
                       f"{str(g['does_not_fit']) + ' do not fit' if g['does_not_fit'] else ''} |")
        wrong = [r for r in doc["results"] if r["correct"] is False]
        if wrong:
            out += ["", "Wrong:"]
            out += [f"- {r['id']} ({r['kind']}, {r['mode']}, {r['status']}, {r['iterations']} it): gold "
                    f"`{json.dumps(r['gold'])[:60]}`, answered `{' '.join(str(r['answer']).split())[:100]}`"
                    for r in wrong]
        out.append("")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", choices=list(RUNS), help="run only these (repeatable)")
    ap.add_argument("--render", action="store_true", help="only rewrite RESULTS.md from results/*.json")
    ap.add_argument("--api-base", default="http://127.0.0.1:8765/v1", help="the local model server")
    ap.add_argument("--window", default="16384", help="the local model's context window (its --n_ctx)")
    ap.add_argument("--timeout", default="900", help="seconds per question for the local model")
    args = ap.parse_args()
    if not args.render:
        env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", RLM_PROBE_PORTS="off", RLM_PROBE_OLLAMA="off")
        local = local_model(args.api_base)
        for name in args.only or list(RUNS):
            kind = RUNS[name][0]
            if kind == "scripted":
                sys.path.insert(0, str(ROOT))
                from tests.support.fake_llm import FakeLLM

                server = FakeLLM()
                server.default("root", solve)
                try:
                    run(name, ["--model", "openai/root", "--api-base", server.url, "--no-llm-cache"], env)
                finally:
                    server.close()
            elif local is None:
                print(f"{name}: skipped (no model answers at {args.api_base})", file=sys.stderr)
            else:
                run(name, ["--model", f"openai/{local}", "--api-base", args.api_base, "--root-model-window",
                           args.window, "--sub-model-window", args.window, "--timeout", args.timeout], env)
    (ROOT / "benchmarks" / "RESULTS.md").write_text(render())
    print(f"wrote {ROOT / 'benchmarks' / 'RESULTS.md'}", file=sys.stderr)


if __name__ == "__main__":
    main()
