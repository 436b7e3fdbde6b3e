"""How often a model's typed answer is well typed on its first try (issue 39).

    python benchmarks/bench_typed.py --model openai/local --api-base http://127.0.0.1:8767/v1 \\
        -- --root-model-window 16384 --sub-model-window 16384 --timeout 900

Runs one ``rlm ask --questions FILE --json`` over the standard library's ``json`` package with
:data:`QUESTIONS` (bool, int, number, list, locations and json questions; ``--questions`` gives
each its ``type``), then reads each question's trajectory: the *first* answer the model offered
(the answer of the first ``check`` event of the root loop, whatever check it met first) is parsed
as the question's type (``rlm_cli.loop.typed.parse_value``, with the corpus's files for
``locations``). Prints, per question and in all: well typed on the first try, sent back by the
``answer_type`` check, and well typed at the end (``value`` not null). Arguments after ``--`` go
to ``rlm ask``. The model's correctness is not judged here: only the type.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rlm_cli.loop.typed import AnswerSpec, parse_value  # noqa: E402

#: (id, type, question) over the ``json`` package (paths are relative to it: ``decoder.py``).
QUESTIONS = [
    ("class", "bool", "Does decoder.py define a class named JSONDecoder?"),
    ("files", "int", "How many files are in the corpus?"),
    ("classes", "list", "What are the names of the classes defined in decoder.py?"),
    ("where_decoder", "locations", "Where is the class JSONDecoder defined?"),
    ("line_counts", "json", "Give a JSON object mapping each file path of the corpus to its number of lines."),
    ("mean", "number", "What is the mean number of lines per file in the corpus?"),
    ("pickle", "bool", "Does any file of the corpus import the pickle module?"),
    ("loads_line", "int", "On which line of __init__.py is the function loads defined?"),
    ("imports", "list", "Which modules does encoder.py import?"),
    ("where_dumps", "locations", "Where are the functions named dumps defined?"),
    ("scan", "bool", "Is there a function named py_scanstring in the corpus?"),
    ("defs", "int", "How many lines of encoder.py start with 'def ' or '    def '?"),
    ("paths", "list", "Which files are in the corpus? Give their paths."),
    ("number_re", "locations", "Where is NUMBER_RE assigned?"),
]


def line_counts(folder: Path) -> dict[str, int]:
    """``path -> lines`` of the ``.py`` files under ``folder`` (as the corpus names them)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix == ".py":
            text = p.read_text("utf-8", "replace")
            out[p.relative_to(folder).as_posix()] = text.count("\n") + (0 if text.endswith("\n") else 1)
    return out


def first_answer(trace: Path) -> str | None:
    """The first answer the root loop offered (the answer of its first ``check`` event), else the
    final answer when no check ran (``paper``), else ``None``."""
    final = None
    for line in trace.read_text("utf-8").splitlines():
        ev = json.loads(line)
        if ev.get("depth") != 0:
            continue
        if ev.get("type") == "check":
            return str(ev.get("answer", ""))
        if ev.get("type") == "final":
            final = str(ev.get("answer", ""))
    return final


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-base", default=None)
    parser.add_argument("--max-iterations", default="8")
    parser.add_argument("rest", nargs="*", help="more rlm ask arguments (after --)")
    args = parser.parse_args()
    corpus = Path(sysconfig.get_paths()["stdlib"]) / "json"
    lines = line_counts(corpus)
    tmp = Path(tempfile.mkdtemp(prefix="rlm-bench-typed-"))
    qfile = tmp / "questions.jsonl"
    qfile.write_text("".join(json.dumps({"id": i, "type": t, "question": q}) + "\n" for i, t, q in QUESTIONS))
    cmd = [sys.executable, "-m", "rlm_cli", "ask", str(corpus), "--questions", str(qfile), "--json",
           "--model", args.model, "--mode", "rlm", "--max-iterations", args.max_iterations, "--include", "*.py",
           *(["--api-base", args.api_base] if args.api_base else []), *args.rest]
    env = {**os.environ, "PYTHONPATH": str(REPO), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
    wall = time.monotonic() - started
    lines_out = [json.loads(x) for x in proc.stdout.splitlines() if x.strip()]
    docs = {d["id"]: d for d in lines_out if "id" in d}  # a run that failed whole prints one error document
    kinds = {i: t for i, t, _ in QUESTIONS}
    first_ok = sent_back = final_ok = answered = 0
    print(f"{'id':<14} {'type':<10} {'first try':<10} {'final':<8} first answer")
    for qid, kind, _ in QUESTIONS:
        doc = docs.get(qid, {})
        trace = Path(doc["trace"]) if doc.get("trace") else None
        first = first_answer(trace) if trace is not None and trace.is_file() else None
        ok = first is not None and parse_value(first, AnswerSpec(kind, lines)).ok
        events = [json.loads(x) for x in trace.read_text().splitlines()] if trace is not None and trace.is_file() else []
        back = any(e.get("check") == "answer_type" and e.get("verdict") == "send_back" for e in events)
        good = doc.get("value") is not None
        answered += first is not None
        first_ok += ok
        sent_back += back
        final_ok += good
        shown = "(none)" if first is None else " ".join(first.split())[:60]
        print(f"{qid:<14} {kinds[qid]:<10} {'yes' if ok else 'no':<10} {'yes' if good else 'no':<8} {shown}")
    n = len(QUESTIONS)
    print(f"\n{args.model}: {n} typed questions, {answered} answered; well typed on the first try: {first_ok}/{n} "
          f"({first_ok / n:.0%}); sent back by answer_type: {sent_back}; well typed at the end: {final_ok}/{n}; "
          f"rlm exit {proc.returncode}; {wall:.0f} s")
    if proc.returncode not in (0, 5, 6):
        print(proc.stderr[-2000:], file=sys.stderr)


if __name__ == "__main__":
    main()
