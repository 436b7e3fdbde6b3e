"""What one file is indexed as: its chunks with their token counts (counted, or in a large
build guessed and later corrected by a counted sample) and the parsed payload of a structured file.

The functions that chunk and count run in :class:`~rlm_cli.corpus.tokens.TokenPool` threads or
in the worker processes of ``rlm_cli.corpus.parallel``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rlm_cli.corpus import accesslog, structured
from rlm_cli.corpus.chunker import split_text
from rlm_cli.corpus.loader import Decoded
from rlm_cli.corpus.model import sha1_hex

#: A chunk whose exact token count exceeds the target by this factor is split again.
OVERSIZE = 1.5
#: In such a build, 1 chunk in this many (chosen by the chunk's SHA-1, so the same chunks in
#: every build) is counted; the others get ``bytes / (bytes per token)`` measured on the counted
#: chunks of the same file extension (of all of them when an extension has too few). A build
#: reading more counts 1 in a larger power of 2 (:func:`sample_every`).
SAMPLE_EVERY = 16
#: A sampled build counts at least about this many bytes: 1 chunk in 16 of a 1 GB build would be
#: 64 MB of tiktoken (a fifth of the build's CPU time). On 268 MB of code and logs
#: (``benchmarks/bench_tokens.py``) 9 MB (1 in 32, 1,800 chunks) kept the total within 0.12% of
#: tiktoken's, as 1 in 16 does (0.10%); 4.5 MB (1 in 64) gave 0.49%, 2.2 MB 1.0%, 0.26 MB 4.4%.
#: The error per chunk (6% at the median, 17.5% at the 90th percentile) hardly depends on the rate.
SAMPLE_BYTES = 8 * 1024 * 1024
#: The sparsest sampling (``is_sample`` reads 16 bits of the SHA-1).
MAX_SAMPLE_EVERY = 1 << 16
#: Counted chunks an extension needs for a correction of its own.
MIN_SAMPLE_CHUNKS = 8
#: UTF-8 bytes per token assumed when deciding whether a chunk is too large (code and English: about 4).
PRIOR_BYTES_PER_TOKEN = 4.0
#: Tokens per UTF-8 byte of ASCII letters and whitespace, of other ASCII (digits, punctuation)
#: and of non-ASCII bytes: a least-squares fit of o200k_base on 100 MB of Python, text and logs
#: (within 5% per chunk at the median, 16% at the 90th percentile once a build's sample corrects it).
TOKENS_PER_BYTE = (0.165, 0.71, 0.45)
#: A chunk is split again when its guess over this margin is still over the target (the guess
#: is within 10% for most chunks, and a needless split makes two small chunks).
GUESS_MARGIN = 1.1
#: :func:`guess_tokens` reads every this many bytes of data longer than :data:`GUESS_FULL_BYTES`.
GUESS_STRIDE, GUESS_FULL_BYTES = 4, 2048
_WORDS = bytes(range(65, 91)) + bytes(range(97, 123)) + b" \t\n\r"
_HIGH = bytes(range(128, 256))


def index_text(enc: Any, text: str, path: str, target: int) -> list[tuple[int, int, int, int, int, str]]:
    """Chunk one file and count each chunk's tokens (runs in a :class:`TokenPool` thread).

    Returns ``(start, end, start_line, end_line, tokens, sha1)`` per chunk, offsets relative to
    the file. A chunk far over ``target`` tokens (dense text: CJK, minified code) is split again
    with the characters-per-token ratio measured on it.
    """
    out: list[tuple[int, int, int, int, int, str]] = []
    for sp in split_text(text, path, target):
        piece = text[sp.start:sp.end]
        n = len(enc.encode_ordinary(piece))
        if n > target * OVERSIZE and len(piece) > 64:
            subs = split_text(piece, path, target, chars_per_token=max(0.25, 0.9 * len(piece) / n))
            if len(subs) > 1:
                for sub in subs:
                    sub_piece = piece[sub.start:sub.end]
                    out.append((sp.start + sub.start, sp.start + sub.end, sp.start_line + sub.start_line - 1,
                                sp.start_line + sub.end_line - 1, len(enc.encode_ordinary(sub_piece)),
                                sha1_hex(sub_piece.encode("utf-8"))))
                continue
        out.append((sp.start, sp.end, sp.start_line, sp.end_line, n, sha1_hex(piece.encode("utf-8"))))
    return out


def sample_every(read_bytes: int) -> int:
    """1 chunk in how many a sampled build that reads ``read_bytes`` (bytes on disk) counts: the
    largest power of 2, at least :data:`SAMPLE_EVERY`, that still leaves :data:`SAMPLE_BYTES` to
    count (so 8 to 16 MiB beyond 256 MiB read). Powers of 2 nest: a chunk counted at 1 in 64 is
    also counted at 1 in 16."""
    every = SAMPLE_EVERY
    while every < MAX_SAMPLE_EVERY and read_bytes >= 2 * every * SAMPLE_BYTES:
        every *= 2
    return every


def sampled_spans(text: str, path: str, target: int, every: int = SAMPLE_EVERY,
                  data: bytes | None = None) -> list[list[Any]]:
    """Chunk one file without counting its tokens (a large build: ``build.EXACT_TOKENS_BYTES``).

    Returns ``[start, end, start_line, end_line, guess, sha1, counted]`` per chunk, offsets
    relative to the file; ``guess`` is :func:`guess_tokens` of its text and ``counted`` marks the
    1 chunk in ``every`` (by SHA-1) whose tokens will be counted. ``data`` may be the text's UTF-8
    bytes (sliced instead of encoding each chunk when the text is ASCII). A chunk far over
    ``target`` by its guess (over :data:`GUESS_MARGIN`) or by :data:`PRIOR_BYTES_PER_TOKEN` is
    split again, as :func:`index_text` splits one whose count is (a guess can miss: such a chunk
    may hold up to about twice the target).
    """
    out: list[list[Any]] = []
    ascii_data = data if data is not None and len(data) == len(text) else None  # one byte per character
    for sp in split_text(text, path, target):
        if ascii_data is not None:
            chunk = ascii_data[sp.start:sp.end]
        else:
            chunk = text[sp.start:sp.end].encode("utf-8", "surrogatepass")
        g = guess_tokens(chunk)
        guess = max(len(chunk) / PRIOR_BYTES_PER_TOKEN, g / GUESS_MARGIN)
        if guess > target * OVERSIZE and sp.end - sp.start > 64:
            piece = text[sp.start:sp.end]
            subs = split_text(piece, path, target, chars_per_token=max(0.25, 0.9 * len(piece) / guess))
            if len(subs) > 1:
                for sub in subs:
                    sub_data = piece[sub.start:sub.end].encode("utf-8", "surrogatepass")
                    h = sha1_hex(sub_data)
                    out.append([sp.start + sub.start, sp.start + sub.end, sp.start_line + sub.start_line - 1,
                                sp.start_line + sub.end_line - 1, guess_tokens(sub_data), h, is_sample(h, every)])
                continue
        h = sha1_hex(chunk)
        out.append([sp.start, sp.end, sp.start_line, sp.end_line, g, h, is_sample(h, every)])
    return out


def guess_tokens(data: bytes) -> float:
    """Tokens of UTF-8 ``data`` by :data:`TOKENS_PER_BYTE` (before a build's sample corrects it).

    The byte classes of data over :data:`GUESS_FULL_BYTES` are read from every
    :data:`GUESS_STRIDE`-th byte (0.6 ns a byte instead of 1.5; on 268 MB of code and logs, counting
    1 chunk in 16, the error per chunk went from 5.7% to 5.8% at the median, and the total's from
    +0.13% to +0.10%).
    """
    n = len(data)
    seen = data[::GUESS_STRIDE] if n > GUESS_FULL_BYTES else data
    scale = n / len(seen) if seen else 1.0
    rest = len(seen.translate(None, _WORDS)) * scale  # bytes that are neither ASCII letters nor whitespace
    high = 0.0 if data.isascii() else (len(seen) - len(seen.translate(None, _HIGH))) * scale
    a, b, c = TOKENS_PER_BYTE
    return a * (n - rest) + b * (rest - high) + c * high


def is_sample(sha1: str, every: int = SAMPLE_EVERY) -> bool:
    """Whether a chunk of a large build is one of the 1 in ``every`` (a power of 2 up to
    :data:`MAX_SAMPLE_EVERY`, see :func:`sample_every`) counted exactly."""
    return int(sha1[:4], 16) % every == 0


def corrections(samples: Iterable[tuple[str, float, int]]) -> tuple[dict[str, float], float]:
    """Counted over guessed tokens by extension, and overall, from the counted chunks of a
    sampled build given as ``(extension, guess, tokens counted)``: what an uncounted chunk's
    guess is multiplied by (an extension with fewer than :data:`MIN_SAMPLE_CHUNKS` counted
    chunks gets the overall factor, 1.0 when nothing was counted)."""
    by_ext: dict[str, list[float]] = {}
    for ext, guess, counted in samples:
        acc = by_ext.setdefault(ext, [0.0, 0, 0])
        acc[0] += guess
        acc[1] += counted
        acc[2] += 1
    guessed, counted_all = sum(a[0] for a in by_ext.values()), sum(a[1] for a in by_ext.values())
    overall = counted_all / guessed if guessed else 1.0
    return {e: a[1] / a[0] for e, a in by_ext.items() if a[0] and a[2] >= MIN_SAMPLE_CHUNKS}, overall


def estimated_tokens(guess: float, factor: float) -> int:
    """An uncounted chunk's tokens: its :func:`guess_tokens` times its extension's correction
    (:func:`corrections`), at least 1."""
    return max(1, round(guess * factor))


def count_pieces(enc: Any, text: str, bounds: list[tuple[int, int]]) -> list[int]:
    """Tokens of ``text[start:end]`` for each bound (runs in a :class:`TokenPool` thread)."""
    return [len(enc.encode_ordinary(text[a:b])) for a, b in bounds]


def extension(path: str) -> str:
    """The lowercased extension of ``path`` (``""`` for none): the group of a bytes-per-token ratio."""
    name = path.rsplit("/", 1)[-1]
    dot = name.rfind(".")
    return name[dot:].lower() if dot > 0 else ""


def parse_data(decoded: Decoded) -> tuple[bytes | None, dict[str, Any] | None]:
    """The encoded payload and summary of a structured file (``None, None`` for other files):
    a Parquet/Excel payload read by the loader, or JSON/JSONL/CSV/TSV text parsed now, or plain
    text that reads as a web server access log (``accesslog.sniff``) parsed now."""
    kind = decoded.kind.split(",")[0]
    if decoded.encoded is not None:  # parsed by the confined decoder (rlm_cli.corpus.decode)
        return decoded.encoded, decoded.meta
    if decoded.payload is not None:
        payload = decoded.payload
        meta = structured.summarize(payload)
    elif kind in structured.TEXT_DATA_KINDS:
        payload, meta = structured.parse(kind, decoded.text)
    elif kind in ("", "gz", "bz2", "xz") and accesslog.sniff(decoded.text):  # plain text, compressed or not
        payload, meta = accesslog.parse(decoded.text)
    else:
        return None, None
    return structured.encode(payload), meta
