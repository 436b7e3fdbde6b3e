"""Benchmark of source tracking (issue 12): the worker's line index and the mapping of texts.

Run it from the repository root (it is a script, not a test):

    python benchmarks/bench_sources.py                  # the CPython stdlib, *.py
    python benchmarks/bench_sources.py --root ~/src/repo --include '*'

It loads the corpus the way the REPL worker does (a bundle, then ``CorpusView``), builds the
observer's line index, and maps three kinds of text as ``llm_query`` prompts would carry them:
a chunk wrapped in an instruction (the common case), a 100,000-character window of ``context``,
and 100,000 characters of model-written text that is not in the corpus (the worst case: every
line is looked up and none is found). Each figure is printed beside its *floor*: one
``str.find`` of a 64-character needle over the whole ``context`` (what a naive search pays for
every anchor it tries), and a ratio. The machine's load average is printed too.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import sysconfig
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _best(fn: object, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=sysconfig.get_paths()["stdlib"])
    parser.add_argument("--include", action="append", default=None)
    args = parser.parse_args()
    from rlm_cli.config import CorpusOptions
    from rlm_cli.corpus import load_corpus
    from rlm_cli.sandbox.corpus_helpers import CorpusView
    from rlm_cli.sandbox.observe import LineIndex, Observer

    options = CorpusOptions(include=args.include or ["*.py"], exclude=["site-packages/"], use_cache=False)
    corpus = load_corpus([args.root], options)
    view = CorpusView.from_bundle(str(corpus.index_file), str(corpus.context_file))
    ctx = view.context
    print(f"corpus: {len(view.files):,} files, {len(ctx) / 1e6:,.1f} M characters, {len(view.chunks):,} chunks; "
          f"load average {os.getloadavg()[0]:.2f}")
    rng = random.Random(12)
    needle = ctx[len(ctx) // 2:len(ctx) // 2 + 64] + "\x00"  # never found: the whole string is scanned
    floor = _best(lambda: ctx.find(needle))
    print(f"floor: one str.find of a 64-character needle over context: {floor * 1000:,.1f} ms")

    started = time.perf_counter()
    index = LineIndex(ctx)
    build = time.perf_counter() - started
    print(f"line index: {len(index.keys):,} lines, {index.keys.itemsize * len(index.keys) / 2**20:,.1f} MiB, "
          f"built in {build:,.2f} s ({build / floor:,.0f}x the floor; "
          f"{build / (len(ctx) / 30e6):,.2f} s per 30 M characters)")

    obs = Observer(ctx, view.files)
    obs._index = index
    chunk = view.chunk_text(rng.randrange(len(view.chunks)))
    window_at = rng.randrange(max(1, len(ctx) - 100_000))
    words = ["alpha", "the", "model", "wrote", "this", "summary", "of", "findings", "about", "retries"]
    prose = "".join(" ".join(rng.choice(words) for _ in range(9)) + "\n" for _ in range(2_000))[:100_000]
    for name, text in (("a chunk in a prompt", "Summarise this code:\n" + chunk + "\nAnswer briefly."),
                       ("a 100,000-character window", ctx[window_at:window_at + 100_000]),
                       ("100,000 characters not in the corpus", prose)):
        took = _best(lambda t=text: obs.find_slices(t, index))  # type: ignore[misc]
        found = obs.find_slices(text, index)
        covered = sum(e - s for s, e in found)
        print(f"map {name} ({len(text):,} chars): {took * 1000:,.2f} ms ({took / floor:,.3f}x the floor), "
              f"{len(found)} slice(s), {covered:,} characters placed")


if __name__ == "__main__":
    main()
