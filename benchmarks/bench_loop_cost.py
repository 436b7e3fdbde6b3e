"""What the loop's rules cost a strong model: root calls over the fewest it needs, and answers kept.

Runs the scripted strong-model trajectories of ``tests/loop/test_strong_model.py`` (questions of
kinds ``rlm eval`` does not generate, each answered right in as few root calls as possible) with a
200k root window, against the scripted OpenAI-compatible server of the tests. When the loop sends
an answer back and the script has run out, the model gives its last reply again (a strong model
that is sure repeats its answer), so every run ends and its extra calls can be counted.

    python benchmarks/bench_loop_cost.py                     # this checkout
    python benchmarks/bench_loop_cost.py --build /path/to/other/checkout --policy guided

Prints one row per trajectory (calls needed, calls made, answer kept, the answer's support verdict)
and the totals: a strong model that answers right in the fewest calls should pay no extra call and
get no ``unsupported`` answer.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(HERE), help="a checkout whose rlm_cli to measure (default: this one)")
    ap.add_argument("--policy", default=None, help="--policy to pass (default: the build's default)")
    args = ap.parse_args(argv)
    sys.path.insert(0, args.build)
    import rlm_cli  # the build measured: its submodules load from its own folder from now on

    sys.path[0] = str(HERE)  # tests/ of this checkout (the fake server, the trajectories)
    holder = tempfile.TemporaryDirectory(prefix="rlm-loop-cost-")  # removed when the script ends
    tmp = Path(holder.name)
    for var in ("RLM_CONFIG_DIR", "RLM_CACHE_DIR", "RLM_DATA_DIR"):
        os.environ[var] = str(tmp / var.lower())
    from tests.loop.test_strong_model import STRONG_WINDOW, TRAJECTORIES, repo
    from tests.support.fake_llm import FakeLLM
    from tests.support.inproc import run

    print(f"build: {Path(rlm_cli.__file__).parent.parent}  policy: {args.policy or 'default'}")
    needed = made = kept = 0
    verdicts: dict[str, int] = {}
    overrides: dict[str, Any] = {"root_model_window": STRONG_WINDOW, "max_iterations": 8}
    if args.policy:
        overrides["policy"] = args.policy
    for n, (question, replies, answer) in enumerate(TRAJECTORIES):
        llm = FakeLLM()
        try:
            llm.script("root", *replies)
            llm.default("root", replies[-1])
            r = run(llm, [repo(tmp / f"q{n}")], question, **overrides)
            calls = len(llm.chat_requests("root"))
        finally:
            llm.close()
        ok = r.error is None and (answer is None or r.answer == answer)
        needed, made, kept = needed + len(replies), made + calls, kept + ok
        support = getattr(r.outcome.result, "support", None) if r.outcome is not None else None
        verdict = getattr(support, "verdict", None) or "-"  # "-": a build without support verdicts
        verdicts[verdict] = verdicts.get(verdict, 0) + 1
        print(f"{question[:60]:60}  needs {len(replies)}  made {calls}  {'kept' if ok else 'LOST'}  {verdict}")
    print(f"total: {made} root calls for {needed} needed (+{made - needed}, "
          f"{100 * (made - needed) / needed:.0f}% more); answers kept {kept}/{len(TRAJECTORIES)}; support: "
          + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())))
    holder.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
