"""How close a sampled build's token counts come to tiktoken's, by sampling rate (issue 25).

    python benchmarks/bench_tokens.py                       # the standard library's text files
    python benchmarks/bench_tokens.py --corpus DIR          # any folder
    python benchmarks/bench_tokens.py --every 16,64,256     # the sampling rates to compare

A build that reads more than 64 MiB counts the tokens of 1 chunk in ``every`` and estimates the
others (``rlm_cli.corpus.indexing``: a guess from the chunk's bytes, corrected by extension on the
counted chunks). This script chunks every file of the corpus as such a build does, counts every
chunk with tiktoken (the truth), then for each rate takes the chunks that rate would count and
prints the error of the corpus total and, over the chunks it estimates, the median and 90th
percentile of the error per chunk; also the bytes it would count. The rate a build uses is
``indexing.sample_every`` of the bytes it reads (marked ``*``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import sysconfig
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    """Parse the flags, chunk and count the corpus, print one row per sampling rate."""
    from rlm_cli.config import CorpusOptions
    from rlm_cli.corpus.indexing import (
        corrections,
        estimated_tokens,
        extension,
        is_sample,
        sample_every,
        sampled_spans,
    )
    from rlm_cli.corpus.loader import LoadReport, read_source
    from rlm_cli.corpus.tokens import encoding
    from rlm_cli.corpus.walk import discover

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default=sysconfig.get_paths()["stdlib"])
    parser.add_argument("--every", default="16,32,64,128,256,1024")
    args = parser.parse_args()
    options = CorpusOptions()
    report = LoadReport()
    t0 = time.perf_counter()
    sources = discover([args.corpus], options, report)
    texts: list[str] = []
    keys: list[tuple[str, float, str, int]] = []
    read_bytes = 0
    for sf in sources:
        decoded = read_source(sf, options, report)
        if decoded is None:
            continue
        read_bytes += sf.size
        ext = extension(sf.display)
        for start, end, _sl, _el, guess, sha1, _c in sampled_spans(decoded.text, sf.display, options.chunk_tokens,
                                                                    1, decoded.data):
            texts.append(decoded.text[start:end])
            keys.append((ext, guess, sha1, len(decoded.text[start:end].encode("utf-8", "surrogatepass"))))
    counts = [len(t) for t in encoding().encode_ordinary_batch(texts, num_threads=2)]
    del texts
    truth = sum(counts)
    print(f"corpus: {args.corpus}: {len(sources):,} files, {read_bytes / 1e6:,.1f} MB, {len(counts):,} chunks, "
          f"{truth:,} tokens (tiktoken; {time.perf_counter() - t0:.1f} s)")
    print(f"a build reading it counts 1 chunk in {sample_every(read_bytes)}\n")
    print(f"{'1 chunk in':>10} {'counted MB':>11} {'chunks':>8} {'total error':>12} "
          f"{'chunk error median':>19} {'p90':>7}")
    for every in (int(x) for x in args.every.split(",")):
        picked = [is_sample(k[2], every) for k in keys]
        factors, overall = corrections((k[0], k[1], n) for k, n, p in zip(keys, counts, picked, strict=True) if p)
        total, errors, counted_bytes = 0, [], 0
        for (ext, guess, _h, nbytes), n, p in zip(keys, counts, picked, strict=True):
            if p:
                total += n
                counted_bytes += nbytes
                continue
            est = estimated_tokens(guess, factors.get(ext, overall))
            total += est
            errors.append(abs(est - n) / max(1, n))
        errors.sort()
        med = statistics.median(errors) if errors else 0.0
        p90 = errors[int(0.9 * (len(errors) - 1))] if errors else 0.0
        mark = "*" if every == sample_every(read_bytes) else " "
        print(f"{every:>9}{mark} {counted_bytes / 1e6:>11.2f} {sum(picked):>8,} {100 * (total / truth - 1):>+11.2f}% "
              f"{100 * med:>18.1f}% {100 * p90:>6.1f}%")


if __name__ == "__main__":
    main()
