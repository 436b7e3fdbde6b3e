"""Re-judge the support verdict of recorded runs with the verdict rules as they are now, without a
model: a tuning aid for ``rlm_cli/loop/support.py`` (issue 37).

    python benchmarks/rejudge_support.py TRAJECTORY.jsonl...          # one line per run
    python benchmarks/rejudge_support.py --bench dev.jsonl [--blind]  # the runs of a bench_questions output

For each trajectory it rebuilds, from its events, what the loop had when it accepted the final
answer at depth 0: the question, the first message and every output the model read (leads
included), the code the model wrote, whether the answer was written out (the last ``check`` event
on it), the default caps of that turn and the one before, and the checks that let it through while
their objection held (or were past their limit). It then prints the recorded verdict beside the one
``support_of`` gives now. With ``--bench``, each run of a ``benchmarks/bench_questions.py`` output
is scored as that script scores it and the counts per verdict are printed (``--blind``: counts
only, as for the held-out set). A rebuilt candidate is close to, not always equal to, the loop's
(the history's compaction and a rewrite's details are not in the trajectory): the recorded verdict
is the figure to report; this script is for trying a rule change on the tuning sets.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks" / "questions"))

from rlm_cli.loop.checks import Candidate  # noqa: E402
from rlm_cli.loop.grounding import quoted_corpus_text  # noqa: E402
from rlm_cli.loop.partial import model_output  # noqa: E402
from rlm_cli.loop.policy import PRESETS  # noqa: E402
from rlm_cli.loop.support import support_of  # noqa: E402


def events_of(path: Path) -> list[dict[str, Any]]:
    """The events of a trajectory file (a torn last line is skipped)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def rejudge(events: list[dict[str, Any]]) -> tuple[str | None, str | None, list[str]]:
    """``(recorded verdict, verdict now, tokens unsupported now)`` of one run (``None`` for a run
    without a final answer at depth 0)."""
    root = [e for e in events if e.get("depth", 0) == 0]
    final = next((e for e in root if e.get("type") == "final" and e.get("status") == "final"), None)
    if final is None:
        return None, None, []
    header = next(e for e in root if e.get("type") == "header")
    prompt = next((e for e in root if e.get("type") == "prompt"), {})
    policy = PRESETS.get(str(final.get("policy") or "guided"), PRESETS["guided"])
    outputs, codes, caps, read, own, leads = [], [], {}, False, [], ""
    for e in root:
        if e.get("type") == "leads" and e.get("output"):
            outputs.append(e["output"])
            leads = str(e["output"])
            read = read or any(line.startswith("  ") and ":" in line for line in e["output"].splitlines())
        elif e.get("type") == "code":
            codes.append(str(e.get("code") or ""))
        elif e.get("type") == "output":
            outputs.append(model_output(str(e.get("output") or "")))
            own.append(outputs[-1])
            caps.setdefault(e.get("iteration"), []).extend(e.get("default_caps") or [])
            read = read or bool(str(e.get("output") or "").strip())
    answer = str(final["answer"])
    checks = [e for e in root if e.get("type") == "check"]
    on_final = [c for c in checks if c.get("answer") == answer[:4_000]]
    written = bool(on_final[-1].get("written_out")) if on_final else True
    iteration = int(on_final[-1].get("iteration") or final.get("iterations") or 0) if on_final else 0
    # Overruled: past its limit, or let through while its objection held (``waived``; trajectories
    # recorded before that field: ``ungrounded`` having sent this same answer back).
    overruled = sorted({c["check"] for c in on_final if c.get("limit_reached") or c.get("waived")}
                       | {c["check"] for c in checks if c.get("verdict") == "send_back" and c.get("answer") == answer[:4_000]
                          and c.get("check") == "ungrounded" and not any("waived" in x for x in checks)})
    shown_outputs = "\n".join(o for o in outputs if o)
    candidate = Candidate(str(header.get("question") or ""), answer, written, "block", iteration, 0, read,
                          "\n".join([str(prompt.get("first") or ""), shown_outputs]),
                          tuple(caps.get(iteration, []) + caps.get(iteration - 1, [])), (), shown_outputs,
                          "\n".join([*own, quoted_corpus_text(leads)]), any(o.strip() for o in own),
                          tuple(caps.get(iteration, [])))
    now = support_of(candidate, overruled, codes, policy.number_floor)
    return (final.get("support") or {}).get("verdict"), now.verdict, list(now.unsupported)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", type=Path, help="trajectory files")
    ap.add_argument("--bench", type=Path, help="a bench_questions.py output (its .home folder holds the runs)")
    ap.add_argument("--blind", action="store_true", help="with --bench: counts only")
    args = ap.parse_args(argv)
    if args.bench is None:
        for path in args.traces:
            was, now, tokens = rejudge(events_of(path))
            print(f"{path.name}: recorded {was}, now {now} {tokens or ''}")
        return 0
    import scoring

    questions = {}
    for name in ("dev", "dev2", "heldout", "heldout2"):
        for line in (REPO / "benchmarks" / "questions" / f"{name}.jsonl").read_text().splitlines():
            q = json.loads(line)
            questions[q["id"]] = q
    rows = [json.loads(line) for line in args.bench.read_text().splitlines() if line.strip()]
    counts: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        home = args.bench.with_name(args.bench.name + ".home") / f"{r['rlm_tree']}-{r['id']}" / "data" / "traces"
        traces = sorted(home.glob("*.jsonl"))
        was, now = (None, None) if not traces else rejudge(events_of(traces[-1]))[:2]
        right = (not r["timed_out"]) and scoring.score(questions[r["id"]], r["answer"])[0]
        for key in (("recorded", str(was)), ("now", str(now))):
            cell = counts.setdefault(key, [0, 0])
            cell[0] += bool(right)
            cell[1] += 1
        if not args.blind:
            print(f"{r['id']} {'RIGHT' if right else 'wrong'} recorded {was} now {now}: {str(r['answer'])[:90]!r}")
    for which in ("recorded", "now"):
        cells = {k[1]: v for k, v in counts.items() if k[0] == which}
        print(f"{which}: " + ", ".join(f"{v} {c}/{t}" for v, (c, t) in sorted(cells.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
