"""Capture what ``rlm`` shows the world, to prove a refactor changed none of it (issue 41).

``capture OUT.json`` runs, each as a subprocess of this tree's ``python -m rlm_cli`` in a fresh,
isolated set of user folders:

* ``rlm [CMD...] --help`` for every command and command group (``COLUMNS=80``);
* a set of error cases (bad paths, bad option values, no model, a corpus too large for direct
  mode, a question too long for the window, an unknown trajectory, a provider's 401...), with
  ``--json`` where the command has it;
* scripted runs against the fake model server of the tests (``tests/support/fake_llm.py``): an
  RLM run with sub-calls and a sub-RLM, direct mode, a typed answer, the iteration limit, a
  budget stop, several questions in one run, a replay, an audit, ``trace list``: their ``--json``
  documents and their trajectories (JSONL).

Each case keeps its exit status, stdout and stderr; each trajectory its lines. What differs from
run to run is normalised first: timestamps and durations (``ts``, ``elapsed_s``, ``latency_s``,
``load_s``...), run ids, the header's signature, the temporary folder, ``N.NN s`` in text.

``compare A.json B.json`` prints every case whose record differs (a unified diff) and exits 1
when there is one, 0 when the two captures are identical.

Usage::

    python scripts/cli_snapshot.py capture /tmp/before.json
    ... change the code ...
    python scripts/cli_snapshot.py capture /tmp/after.json
    python scripts/cli_snapshot.py compare /tmp/before.json /tmp/after.json
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.fake_llm import FakeLLM, Reply, question_message, repl, turn  # noqa: E402

#: Keys whose values are times or ids that differ on every run.
VOLATILE_KEYS = frozenset({"ts", "elapsed_s", "latency_s", "load_s", "run_id", "signature", "started",
                           "first_token_s", "cwd", "trace_id", "seconds", "replay_s"})
_RUN_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")
_SECONDS = re.compile(r"\d+(?:\.\d+)?(?= s\b)")
_TIMER = re.compile(r"\b\d+(?:\.\d+)?s\b")
_PID = re.compile(r"\bpid \d+")

Record = dict[str, Any]


class Capture:
    """One capture: the isolated environment, the fake server and the records made so far."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.records: dict[str, Record] = {}
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("RLM_") and k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY",
                                                              "GEMINI_API_KEY", "OPENROUTER_API_KEY")}
        home = tmp / "user"
        self.env.update(RLM_CONFIG_DIR=str(home / "config"), RLM_CACHE_DIR=str(home / "cache"),
                        RLM_DATA_DIR=str(home / "data"), RLM_PROBE_OLLAMA="off", RLM_PROBE_PORTS="off",
                        RLM_RUNTIME_DIR=str(Path(tempfile.mkdtemp(prefix="rlms", dir="/tmp")) / "rlm"),
                        RLM_HOST_IDLE="5", LITELLM_LOCAL_MODEL_COST_MAP="True", COLUMNS="80", NO_COLOR="1",
                        PYTHONHASHSEED="0", PYTHONPATH=str(ROOT))
        self.llm = FakeLLM()

    # -- normalising ---------------------------------------------------------------------------------
    def norm_text(self, text: str) -> str:
        """``text`` without what differs between runs (paths, run ids, durations)."""
        text = text.replace(str(self.tmp), "<TMP>").replace(self.llm.url, "<LLM>")
        text = text.replace(self.env["RLM_RUNTIME_DIR"], "<RUNTIME>")
        text = _RUN_ID.sub("<RUN>", text)
        text = _SECONDS.sub("<N>", text)
        text = _PID.sub("pid <N>", text)
        return _TIMER.sub("<N>s", text)

    def norm_json(self, value: Any) -> Any:
        """A JSON value with volatile keys blanked and strings normalised (:meth:`norm_text`)."""
        if isinstance(value, dict):
            return {k: "<V>" if k in VOLATILE_KEYS else self.norm_json(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.norm_json(v) for v in value]
        if isinstance(value, str):
            return self.norm_text(value)
        return value

    def norm_stdout(self, text: str) -> Any:
        """stdout as JSON documents (one, or one per line) when it is JSON, else as text."""
        try:
            return {"json": self.norm_json(json.loads(text))}
        except ValueError:
            pass
        lines = [ln for ln in text.splitlines() if ln.strip()]
        try:
            return {"jsonl": [self.norm_json(json.loads(ln)) for ln in lines]} if lines else {"text": ""}
        except ValueError:
            return {"text": self.norm_text(text)}

    def trajectory(self, path: Path) -> list[Any]:
        """The lines of a trajectory file, each normalised, in order (torn lines kept as text)."""
        out: list[Any] = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(self.norm_json(json.loads(line)))
            except ValueError:
                out.append(self.norm_text(line))
        return out

    # -- running ---------------------------------------------------------------------------------
    def run(self, name: str, *args: str, stdin: str | None = None, traces: tuple[Path, ...] = (),
            cwd: Path | None = None) -> Record:
        """Run ``rlm ARGS``, record it as ``name`` (with the trajectories ``traces`` when they exist)."""
        proc = subprocess.run([sys.executable, "-m", "rlm_cli", *args], input=(stdin or "").encode(),
                              capture_output=True, env=self.env, cwd=cwd or self.tmp, timeout=300)
        record: Record = {"args": [self.norm_text(a) for a in args], "rc": proc.returncode,
                          "stdout": self.norm_stdout(proc.stdout.decode("utf-8", "replace")),
                          "stderr": self.norm_text(proc.stderr.decode("utf-8", "replace"))}
        for t in traces:
            record[f"trace:{t.name}"] = self.trajectory(t) if t.exists() else None
        self.records[name] = record
        return record


def _root(req: dict[str, Any]) -> str:
    """The scripted root model: its reply by the question asked and the turn."""
    q, t = question_message(req), turn(req)
    if "SUBS" in q:
        return [repl("a = llm_query('Say hello.')\nb = rlm_query('CHILD: what is x?')\nprint(a, b)"),
                'FINAL("sub " + a + " / child " + b)'][min(t, 1)]
    if "CHILD" in q:
        return 'FINAL("x is 1")'
    if "LOOP" in q:
        return repl(f"print({t})") if "best answer" not in json.dumps(req) else "My best guess: 3."
    if "COUNT" in q:
        return [repl("print(len(files))"), "FINAL(2)"][min(t, 1)]
    if "Question:" not in q:  # direct mode: no REPL, the corpus in the prompt
        return "The file a.py defines foo, which returns 42.\nFINAL(foo returns 42)"
    return [repl("print(grep('foo'))"), "FINAL(foo is in a.py)"][min(t, 1)]


def _sub(req: dict[str, Any]) -> str:
    return "hello"


def help_cases(c: Capture) -> None:
    """``--help`` of every command and group."""
    import typer.main

    from rlm_cli.commands.app import app

    paths: list[list[str]] = []

    def walk(cmd: Any, words: list[str]) -> None:
        paths.append(words)
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, [*words, name])
    walk(typer.main.get_command(app), [])
    for words in paths:
        c.run("help " + " ".join(words), *words, "--help")
    c.run("version", "--version")


def error_cases(c: Capture, repo: Path, model: list[str]) -> None:
    """Errors a user meets, as text and as ``--json``."""
    big = c.tmp / "big"
    big.mkdir()
    (big / "big.txt").write_text("word " * 40_000)
    empty = c.tmp / "empty"
    empty.mkdir()
    (empty / "x.bin").write_bytes(b"\x00\x01\x02" * 100)
    for name, args in {
        "missing path": ["ask", str(c.tmp / "nope"), "q?"],
        "question first": ["ask", "q?", str(repo)],
        "missing path json": ["ask", str(c.tmp / "nope"), "q?", "--json"],
        "no model": ["ask", str(repo), "q?"],
        "no model json": ["ask", str(repo), "q?", "--json"],
        "no question": ["ask", str(repo), *model],
        "bad mode": ["ask", str(repo), "q?", *model, "--mode", "bogus"],
        "bad sandbox": ["ask", str(repo), "q?", *model, "--sandbox", "bogus"],
        "bad policy json": ["ask", str(repo), "q?", *model, "--policy", "bogus", "--json"],
        "bad int": ["ask", str(repo), "q?", *model, "--max-iterations", "abc"],
        "unknown option": ["ask", str(repo), "q?", "--bogus"],
        "empty corpus": ["ask", str(empty), "q?", *model],
        "direct too large": ["ask", str(big), "q?", *model, "--mode", "direct", "--root-model-window", "2000"],
        "direct too large json": ["ask", str(big), "q?", *model, "--mode", "direct", "--root-model-window", "2000",
                                  "--json"],
        "question too long": ["ask", str(repo), "why? " * 3000, *model, "--mode", "rlm", "--root-model-window",
                              "1024", "--json"],
        "router file missing": ["ask", str(repo), "q?", *model, "--router-config", str(c.tmp / "nope.yaml")],
        "trace unknown": ["trace", "show", "nope"],
        "replay missing": ["replay", str(c.tmp / "nope.jsonl")],
        "config bad key": ["config", "set", "bogus", "1"],
        "config bad value": ["config", "set", "max_iterations", "abc"],
        "chat no path": ["chat"],
    }.items():
        c.run("error " + name, *args)
    c.llm.script("bad", Reply("nope", status=401))
    c.run("error provider 401", "ask", str(repo), "q?", "--model", "openai/bad", "--api-base", c.llm.url,
          "--mode", "rlm", "--json", "--no-llm-cache")


def scripted_runs(c: Capture, repo: Path, model: list[str]) -> None:
    """Runs of the loop against the fake server: documents and trajectories."""
    t = c.tmp / "traces"
    t.mkdir()
    plain = ["--no-llm-cache", "--sandbox", "auto"]
    c.run("run rlm", "ask", str(repo), "COUNT: how many files?", *model, *plain, "--mode", "rlm", "--json",
          "--trace", str(t / "rlm.jsonl"), traces=(t / "rlm.jsonl",))
    c.run("run rlm text", "ask", str(repo), "COUNT: how many files?", *model, *plain, "--mode", "rlm",
          "--trace", str(t / "rlm-text.jsonl"), traces=(t / "rlm-text.jsonl",))
    c.run("run subs", "ask", str(repo), "SUBS: say hello and ask a child", *model, *plain, "--mode", "rlm",
          "--max-depth", "2", "--json", "-v", "--trace", str(t / "subs.jsonl"), traces=(t / "subs.jsonl",))
    c.run("run direct", "ask", str(repo), "What does foo return?", *model, *plain, "--mode", "direct", "--json",
          "--trace", str(t / "direct.jsonl"), traces=(t / "direct.jsonl",))
    c.run("run auto", "ask", str(repo), "What does foo return?", *model, *plain, "--json",
          "--trace", str(t / "auto.jsonl"), traces=(t / "auto.jsonl",))
    c.run("run typed", "ask", str(repo), "COUNT: how many files?", *model, *plain, "--mode", "rlm",
          "--answer-type", "int", "--json", "--trace", str(t / "typed.jsonl"), traces=(t / "typed.jsonl",))
    c.run("run max iterations", "ask", str(repo), "LOOP: go on", *model, *plain, "--mode", "rlm",
          "--max-iterations", "2", "--json", "--trace", str(t / "loop.jsonl"), traces=(t / "loop.jsonl",))
    c.run("run max iterations text", "ask", str(repo), "LOOP: go on", *model, *plain, "--mode", "rlm",
          "--max-iterations", "1", "--trace", str(t / "loop-text.jsonl"), traces=(t / "loop-text.jsonl",))
    c.run("run budget", "ask", str(repo), "LOOP: go on", *model, *plain, "--mode", "rlm", "--max-sub-calls", "0",
          "--max-tokens", "3000", "--json", "--trace", str(t / "budget.jsonl"), traces=(t / "budget.jsonl",))
    c.run("run questions", "ask", str(repo), "--question", "COUNT: how many files?", "--question",
          "LOOP: go on", *model, *plain, "--mode", "rlm", "--max-iterations", "2", "--json", "--trace",
          str(t / "many.jsonl"), traces=(t / "many-1.jsonl", t / "many-2.jsonl"))
    c.run("run policy paper", "ask", str(repo), "COUNT: how many files?", *model, *plain, "--mode", "rlm",
          "--policy", "paper", "--root-model-window", "64000", "--json", "--trace", str(t / "paper.jsonl"),
          traces=(t / "paper.jsonl",))
    c.run("run replay", "replay", str(t / "rlm.jsonl"), "--json")
    c.run("run estimate", "ask", str(repo), "COUNT: how many files?", *model, "--estimate", "--json")
    checklist = c.tmp / "checks.toml"
    checklist.write_text('[[check]]\nid = "files"\nquestion = "COUNT: how many files?"\ntype = "int"\n'
                         'severity = "error"\nmin = 1\n')
    c.run("run audit", "audit", str(repo), "--checklist", str(checklist), *model, *plain, "--mode", "rlm",
          "--json")
    c.run("run chat", "chat", str(repo), *model, *plain, "--mode", "rlm", "--json", "--max-iterations", "2",
          stdin="COUNT: how many files?\nLOOP: go on\n")
    c.run("run trace list", "trace", "list", "--json")


def capture(out: Path) -> int:
    """Capture every case into ``out`` (JSON); returns the exit status."""
    tmp = Path(tempfile.mkdtemp(prefix="rlm-snap-"))
    c = Capture(tmp)
    try:
        repo = tmp / "repo"
        repo.mkdir()
        (repo / "a.py").write_text("def foo():\n    return 42\n")
        (repo / "b.py").write_text("x = 1\n")
        c.llm.default("root", _root)
        c.llm.default("sub", _sub)
        model = ["--model", "openai/root", "--sub-model", "openai/sub", "--api-base", c.llm.url]
        steps: list[Callable[[], None]] = [lambda: help_cases(c), lambda: error_cases(c, repo, model),
                                           lambda: scripted_runs(c, repo, model)]
        for step in steps:
            step()
    finally:
        c.llm.close()
        subprocess.run([sys.executable, "-m", "rlm_cli", "host", "stop"], env=c.env,
                       capture_output=True, timeout=60, check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    out.write_text(json.dumps(c.records, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    print(f"{len(c.records)} cases written to {out}", file=sys.stderr)
    return 0


def compare(a: Path, b: Path) -> int:
    """Print each case that differs between captures ``a`` and ``b``; 1 when one does."""
    left, right = json.loads(a.read_text()), json.loads(b.read_text())
    differ = 0
    for name in sorted(set(left) | set(right)):
        x, y = left.get(name), right.get(name)
        if x == y:
            continue
        differ += 1
        xs = json.dumps(x, indent=1, sort_keys=True, ensure_ascii=False).splitlines()
        ys = json.dumps(y, indent=1, sort_keys=True, ensure_ascii=False).splitlines()
        print(f"== {name}")
        print("\n".join(difflib.unified_diff(xs, ys, str(a), str(b), lineterm="", n=2)))
    print(f"{differ} of {len(set(left) | set(right))} cases differ", file=sys.stderr)
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    cap = sub.add_parser("capture", help="capture every case into a JSON file")
    cap.add_argument("out", type=Path)
    cmp_ = sub.add_parser("compare", help="compare two captures")
    cmp_.add_argument("a", type=Path)
    cmp_.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    return capture(args.out) if args.cmd == "capture" else compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
