"""Token counting with tiktoken (``o200k_base`` by default), offline-safe and parallel.

The encoding is loaded lazily on first use; ``prepare_offline_env`` points tiktoken at the
encoding files bundled in litellm's wheel so no download is needed. tiktoken's Rust core
releases the GIL while encoding, so :class:`TokenPool` counts in background threads while the
caller keeps reading files (see :class:`TokenPool`).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from rlm_cli.config import prepare_offline_env

DEFAULT_ENCODING = "o200k_base"
T = TypeVar("T")


_load_lock = threading.Lock()


def encoding(name: str = DEFAULT_ENCODING) -> Any:
    """Return the tiktoken ``Encoding`` called ``name`` (cached; about 0.5 s the first time).

    Thread-safe: concurrent first calls load the encoding once.
    """
    with _load_lock:
        return _load(name)


@functools.lru_cache(maxsize=4)
def _load(name: str) -> Any:
    prepare_offline_env()
    import tiktoken

    return tiktoken.get_encoding(name)


def count_tokens(text: str, name: str = DEFAULT_ENCODING) -> int:
    """Number of tokens in ``text`` (special-token text is counted as ordinary text)."""
    return len(encoding(name).encode_ordinary(text))


def count_tokens_batch(texts: list[str], name: str = DEFAULT_ENCODING, threads: int = 4) -> list[int]:
    """Token counts for many texts, encoded in parallel threads (tiktoken releases the GIL)."""
    if not texts:
        return []
    return [len(t) for t in encoding(name).encode_ordinary_batch(texts, num_threads=threads)]


def default_threads() -> int:
    """Threads for counting: the CPUs this process may use (at least 1)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class TokenPool:
    """Runs token-counting jobs in background threads, with a bound on queued text.

    ``submit(fn, text, *args)`` runs ``fn(encoding, text, *args)`` in a thread and returns its
    future; jobs should spend their time in tiktoken (which releases the GIL). At most
    ``max_pending_chars`` characters of ``text`` wait in the queue: ``submit`` blocks beyond that,
    which bounds memory on huge corpora (8M characters: 8 to 32 MB; reading is about 30 times
    faster than counting, so a small queue keeps every thread busy: on the stdlib a 64M queue
    gave the same load time and 20 MB more peak memory). Loading the encoding starts at
    construction. Use as a context manager (leaving it waits for the queued jobs).
    """

    def __init__(self, name: str = DEFAULT_ENCODING, *, threads: int | None = None,
                 max_pending_chars: int = 8_000_000) -> None:
        self.name = name
        self._pool = ThreadPoolExecutor(max_workers=threads or default_threads(), thread_name_prefix="tokens")
        self._max_pending = max_pending_chars
        self._pending = 0
        self._cond = threading.Condition()
        self._pool.submit(encoding, name)

    def submit(self, fn: Callable[..., T], text: str, *args: Any) -> Future[T]:
        """Queue ``fn(encoding, text, *args)``; blocks while too much text is already queued."""
        size = len(text)
        with self._cond:
            self._cond.wait_for(lambda: self._pending == 0 or self._pending + size <= self._max_pending)
            self._pending += size
        future = self._pool.submit(self._run, fn, text, args)
        future.add_done_callback(lambda _f: self._release(size))
        return future

    def _run(self, fn: Callable[..., T], text: str, args: tuple[Any, ...]) -> T:
        return fn(encoding(self.name), text, *args)

    def _release(self, size: int) -> None:
        with self._cond:
            self._pending -= size
            self._cond.notify_all()

    def close(self, *, cancel: bool = False) -> None:
        """Stop the threads: after the queued jobs, or (``cancel``) dropping those not started."""
        self._pool.shutdown(wait=True, cancel_futures=cancel)

    def __enter__(self) -> TokenPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
