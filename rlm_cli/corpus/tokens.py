"""Token counting with tiktoken (``o200k_base`` by default), offline-safe.

The encoding is loaded lazily on first use; ``prepare_offline_env`` points tiktoken at the
encoding files bundled in litellm's wheel so no download is needed.
"""

from __future__ import annotations

import functools
from typing import Any

from rlm_cli.config import prepare_offline_env

DEFAULT_ENCODING = "o200k_base"


@functools.lru_cache(maxsize=4)
def encoding(name: str = DEFAULT_ENCODING) -> Any:
    """Return the tiktoken ``Encoding`` called ``name`` (cached)."""
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
