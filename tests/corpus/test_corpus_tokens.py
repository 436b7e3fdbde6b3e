"""Token counting: tiktoken o200k_base, and the thread pool that bounds queued text."""

from __future__ import annotations

import threading
from typing import Any

from rlm_cli.corpus.tokens import TokenPool, count_tokens, count_tokens_batch, encoding


def _count(enc: Any, text: str, parts: int) -> list[int]:
    step = max(1, len(text) // parts)
    return [len(enc.encode_ordinary(text[i:i + step])) for i in range(0, len(text), step)]


def test_counts_are_tiktoken_o200k() -> None:
    assert count_tokens("hello world") == 2
    assert count_tokens("<|endoftext|>") > 1  # special-token text counts as ordinary text
    assert count_tokens_batch(["a b c", "", "hello world"]) == [3, 0, 2]
    assert encoding().name == "o200k_base"


def test_pool_counts_in_threads_and_bounds_queued_text() -> None:
    texts = [f"def f{i}(x):\n    return x * {i}\n" * (i + 1) for i in range(40)]
    peak = 0
    lock = threading.Lock()
    with TokenPool(threads=2, max_pending_chars=500) as pool:
        real_release = pool._release

        def release(size: int) -> None:
            nonlocal peak
            with lock:
                peak = max(peak, pool._pending)
            real_release(size)

        pool._release = release  # type: ignore[method-assign]
        futures = [pool.submit(_count, t, 1) for t in texts]
        results = [f.result() for f in futures]
    assert results == [[count_tokens(t)] for t in texts]
    longest = max(len(t) for t in texts)
    assert 0 < peak <= max(500, longest)  # a text over the bound is only queued alone
