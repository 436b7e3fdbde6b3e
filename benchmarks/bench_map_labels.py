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
right / items, items whose number did not come back, seconds, and the count of each category
against the true one. ``--yes-no`` also counts each category by asking, for one category at a
time, whether each message is of it (yes or no): the question a model writes when asked "how many
are X", against one label among all. ``llm_map`` packs at most
``window // 2048`` items a piece (8 for a 16k window); ``llm_map(..., per_call=k)`` sets ``k``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import urllib.request
from collections import Counter
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


def answers_of(api_base: str, model: str, texts: list[str], instruction: str, k: int,
               timeout_s: float) -> list[str]:
    """One answer per text (``""`` where its number did not come back), ``k`` texts a sub-call."""
    out: list[str] = []
    for start in range(0, len(texts), k):
        piece = texts[start:start + k]
        got = parse_answers(ask(api_base, model, piece_prompt(instruction, piece), timeout_s), len(piece))
        out += [got.get(n, "") for n in range(1, len(piece) + 1)]
    return out


def label_run(api_base: str, model: str, items: list[tuple[str, str, str]], k: int,
              timeout_s: float) -> tuple[int, int, float, Counter[str]]:
    """``(right, unnumbered, seconds, counts)`` for ``items`` (``(id, category, text)``) sent ``k``
    a piece, asking for each item's one category among all of them; ``counts``: items per
    category as answered (an answer naming none or several counts for none)."""
    instruction = (f"Which one category is this customer message: {category_list()}? "
                   "Reply with the category name only.")
    started = time.monotonic()
    answers = [a.lower() for a in answers_of(api_base, model, [t for _, _, t in items], instruction, k, timeout_s)]
    named = [[c for c in CATEGORIES if c in a] for a in answers]
    right = sum(n == [category] for n, (_, category, _) in zip(named, items, strict=True))
    counts = Counter(n[0] for n in named if len(n) == 1)
    return right, sum(not a for a in answers), time.monotonic() - started, counts


def yes_no_counts(api_base: str, model: str, items: list[tuple[str, str, str]], k: int,
                  timeout_s: float) -> tuple[Counter[str], float]:
    """Items per category as counted by asking, for each category in turn, whether each item is
    of it (yes or no, ``k`` a sub-call), and the seconds all of it took."""
    started, counts = time.monotonic(), Counter[str]()
    for category in CATEGORIES:
        instruction = f"Is this customer message a {category}? Answer yes or no."
        answers = answers_of(api_base, model, [t for _, _, t in items], instruction, k, timeout_s)
        counts[category] = sum(a.strip().lower().startswith("yes") for a in answers)
    return counts, time.monotonic() - started


def count_errors(counts: Counter[str], true: Counter[str]) -> str:
    """``complaint 12 (true 9), ...`` and the mean absolute error of the counts."""
    shown = ", ".join(f"{c} {counts[c]} (true {true[c]})" for c in CATEGORIES)
    return f"{shown}; mean count error {sum(abs(counts[c] - true[c]) for c in CATEGORIES) / len(CATEGORIES):.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--api-base", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8765/v1")
    ap.add_argument("--model", default="local", help="the server's model name")
    ap.add_argument("--items", type=int, default=40, help="messages to label (at least 20)")
    ap.add_argument("--per-call", type=int, nargs="+", default=[1, 4, 8], help="items a sub-call, one run each")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--timeout-s", type=float, default=600.0, help="per request")
    ap.add_argument("--yes-no", action="store_true",
                    help="also count each category by asking yes or no about it alone, at each k")
    args = ap.parse_args()
    items = generate_messages(random.Random(args.seed), max(args.items, 20))[:args.items]
    true = Counter(category for _, category, _ in items)
    print(f"{len(items)} messages (seed {args.seed}), model {args.model} at {args.api_base}")
    for k in args.per_call:
        right, unnumbered, seconds, counts = label_run(args.api_base, args.model, items, k, args.timeout_s)
        print(f"{k} a call, one category among all: {right}/{len(items)} right ({right / len(items):.0%}), "
              f"{unnumbered} unnumbered, {seconds:.0f} s; {count_errors(counts, true)}", flush=True)
        if args.yes_no:
            counts, seconds = yes_no_counts(args.api_base, args.model, items, k, args.timeout_s)
            print(f"{k} a call, yes or no per category: {count_errors(counts, true)}; {seconds:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
