"""How well a sub-model labels ``semantic`` messages at k items a sub-call, in ``llm_map``'s own
prompt (issue 42): is packing items what costs a small model its accuracy?

    python benchmarks/bench_map_labels.py --api-base http://127.0.0.1:8765/v1 --model local \\
        --items 40 --per-call 1 4 8

Generates ``--items`` messages of ``rlm eval``'s ``semantic`` family (``--seed``; each written
from one of four hidden categories, 10% with an aside of another), packs them ``k`` a piece with
``sandbox.mapping.piece_prompt`` (the prompt ``llm_map`` sends), sends each piece to an
OpenAI-compatible ``/chat/completions`` endpoint (temperature 0, one request at a time: a
llama.cpp server cuts concurrent streams), parses the reply with ``sandbox.mapping.parse_answers``
and counts an item right when its answer names its category and no other. Prints, per ``k``:
right / items, items whose number did not come back, and seconds. ``llm_map`` packs at most
``window // 2048`` items a piece (8 for a 16k window); ``llm_map(..., per_call=k)`` sets ``k``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rlm_cli.evaluation.semantic import CATEGORIES, category_list, generate_messages  # noqa: E402
from rlm_cli.sandbox.mapping import parse_answers, piece_prompt  # noqa: E402


def ask(api_base: str, model: str, prompt: str, timeout_s: float) -> str:
    """One chat completion's text (temperature 0, at most 400 tokens).

    Raises:
        urllib.error.URLError: the server is not reachable or answered an error.
    """
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}],
                       "temperature": 0, "max_tokens": 400}).encode()
    req = urllib.request.Request(f"{api_base.rstrip('/')}/chat/completions", body,
                                 {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return str(json.load(resp)["choices"][0]["message"]["content"])


def label_run(api_base: str, model: str, items: list[tuple[str, str, str]], k: int,
              timeout_s: float) -> tuple[int, int, float]:
    """``(right, unnumbered, seconds)`` for ``items`` (``(id, category, text)``) sent ``k`` a piece."""
    instruction = (f"Which one category is this customer message: {category_list()}? "
                   "Reply with the category name only.")
    started, right, unnumbered = time.monotonic(), 0, 0
    for start in range(0, len(items), k):
        piece = items[start:start + k]
        answers = parse_answers(ask(api_base, model, piece_prompt(instruction, [t for _, _, t in piece]), timeout_s),
                                len(piece))
        for n, (_, category, _) in enumerate(piece, 1):
            answer = (answers.get(n) or "").lower()
            unnumbered += not answer
            right += [c for c in CATEGORIES if c in answer] == [category]
    return right, unnumbered, time.monotonic() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--api-base", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8765/v1")
    ap.add_argument("--model", default="local", help="the server's model name")
    ap.add_argument("--items", type=int, default=40, help="messages to label (at least 20)")
    ap.add_argument("--per-call", type=int, nargs="+", default=[1, 4, 8], help="items a sub-call, one run each")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--timeout-s", type=float, default=600.0, help="per request")
    args = ap.parse_args()
    items = generate_messages(random.Random(args.seed), max(args.items, 20))[:args.items]
    print(f"{len(items)} messages, model {args.model} at {args.api_base}")
    for k in args.per_call:
        right, unnumbered, seconds = label_run(args.api_base, args.model, items, k, args.timeout_s)
        print(f"{k} a call: {right}/{len(items)} right ({right / len(items):.0%}), {unnumbered} unnumbered, "
              f"{seconds:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
