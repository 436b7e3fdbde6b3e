"""Wire format shared by the parent, the LMHandler and the sandboxed REPL worker.

Every message on every channel is one *frame*: a 4-byte unsigned big-endian length ``N``
followed by ``N`` bytes of UTF-8 JSON encoding one object. Readers read exactly ``N`` bytes
(never a single ``recv(4)`` hoping for the whole header) and refuse frames larger than
``max_bytes`` so a hostile peer cannot make the reader allocate without bound.

Two channels use it:

* **control** (parent <-> worker, over inherited pipes): the parent sends
  ``{"type": "load", ...}``, ``{"type": "exec", "code": str}``, ``{"type": "shutdown"}``;
  the worker answers each with ``{"type": "ready"|"result"|"error", ...}``.
* **lm** (worker -> LMHandler, one Unix-socket connection per request): the worker sends two
  frames, first the *hello* ``{"token": str, "type": "completion"|"rlm_query"|"window"}`` (at most
  :data:`MAX_HELLO_BYTES`), then the request itself ``{...}`` (at most the size the relay allows
  for that type), and reads one reply ``{"ok": bool, "text": str, "error": str}``. The relay reads
  nothing from a connection whose peer is not one of its workers, and nothing past the hello of
  one whose token is wrong.

Reads and writes can take a ``deadline`` (a ``time.monotonic()`` value): the whole frame must
arrive by then, so a peer that sends a header and stalls cannot hang the reader. A frame's
buffer grows with the bytes that really arrive, so a header announcing a large frame costs
nothing until its body comes.

This module is imported by the worker, so it uses only the standard library.
"""

from __future__ import annotations

import array
import base64
import json
import os
import select
import socket
import struct
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, overload

HEADER = struct.Struct(">I")
#: Layout version of the corpus bundle (index.json) written by ``rlm_cli.corpus.store`` and read by
#: the worker's ``corpus_helpers``; bump it when the layout changes (older bundles are rebuilt).
BUNDLE_VERSION = 8  # 5: parsed data file (data-*.bin); 6: stray non-UTF-8 bytes read as Latin-1, not U+FFFD;
                    # 7: chunk columns packed (pack_column); 8: access logs parsed (structured.accesslog)
#: Address space the REPL worker must have free under ``--memory-limit`` once the corpus is
#: loaded (below it every allocation of model code would fail): checked by the CLI and the worker.
MIN_FREE_MEMORY = 64 * 1024**2
#: Largest ``context`` (bytes of the ``str``: characters times 1, 2 or 4) that is also a
#: ``Context``, which answers ``context["path"]`` with a file's text. CPython cannot decode into a
#: ``str`` subclass: it decodes into a plain ``str`` and copies that, so a ``Context`` doubles the
#: worker's memory while it loads (measured: 2.03x the string on a 1 GB corpus, against 1.06x
#: decoded as a plain ``str``). Up to 1 GiB the copy is cheap; above it, where that copy decides
#: whether the corpus fits in memory at all, ``context`` stays a plain ``str``.
CONTEXT_BY_PATH_MAX_BYTES = 1 << 30


def context_by_path(chars: int, width: int) -> bool:
    """Whether the worker's ``context`` of ``chars`` characters at ``width`` bytes each (1, 2 or
    4) answers ``context["path"]`` (see :data:`CONTEXT_BY_PATH_MAX_BYTES`). The CLI asks it to
    write the prompt, the worker to load the corpus: both must give the same answer."""
    return chars * width <= CONTEXT_BY_PATH_MAX_BYTES


#: Other spellings of ``FINAL`` that finish the run too while the model's code has not bound them
#: itself (``final = ...`` stays an ordinary variable). The worker binds them; the loop reads them
#: as ``FINAL`` when it judges an answer (a guess typed into ``Final('6')`` is as written out as
#: one typed into ``FINAL``). In 132 trajectories of the 1.5B model (2026-12-06), 3 called
#: ``Final(...)``, 12 times in all, and two of them ended with no answer after repeating it 8 and
#: 3 times despite the hint.
FINAL_ALIASES = ("Final", "final")
#: How the worker's note on a grep that stopped at its ``max_results`` starts (the loop refuses
#: a figure computed in that block: it rests on part of the matches).
GREP_CAPPED_NOTE = "[note: a grep() call stopped at max_results="
#: Largest frame accepted by default: 256 MiB (an answer or output far beyond any real use).
MAX_FRAME_BYTES = 256 * 1024 * 1024
#: Largest control frame (worker -> parent result) the parent accepts: 64 MiB. The worker keeps
#: its own results under it (printed output is capped far below; a larger FINAL is refused).
MAX_CONTROL_BYTES = 64 * 1024 * 1024
#: Largest first frame (the hello: token and request type) of an lm connection.
MAX_HELLO_BYTES = 256
#: Bytes read at most per ``recv``: a frame's buffer grows by at most this much a step.
_STEP = 1 << 20


class ProtocolError(Exception):
    """A frame was malformed, too large, or the peer closed mid-frame."""


def encode_frame(message: dict[str, Any]) -> bytes:
    """Serialise ``message`` to header + JSON bytes.

    Raises:
        ProtocolError: the encoded body exceeds 4 GiB - 1 bytes.
    """
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    if len(body) >= 2**32:
        raise ProtocolError(f"frame of {len(body)} bytes is too large")
    return HEADER.pack(len(body)) + body


def decode_body(body: bytes | bytearray) -> dict[str, Any]:
    """Parse a frame body; the result must be a JSON object.

    Raises:
        ProtocolError: invalid UTF-8/JSON or not an object.
    """
    try:
        value = json.loads(body.decode("utf-8", "surrogatepass"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ProtocolError(f"invalid frame body: {exc}") from None
    if not isinstance(value, dict):
        raise ProtocolError("frame body is not a JSON object")
    return value


# -- sockets -----------------------------------------------------------------------------------

def recv_exact(sock: socket.socket, n: int, deadline: float | None = None) -> bytearray:
    """Exactly ``n`` bytes from ``sock``, the buffer growing as they arrive (never ``n`` at once)."""
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the peer did not complete the frame in time")
            sock.settimeout(left)
        chunk = sock.recv(min(n - len(buf), _STEP))
        if not chunk:
            raise ProtocolError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def send_message(sock: socket.socket, message: dict[str, Any]) -> None:
    """Send one frame on a connected socket (``sendall``; the socket's timeout applies)."""
    sock.sendall(encode_frame(message))


def recv_message(sock: socket.socket, max_bytes: int = MAX_FRAME_BYTES, deadline: float | None = None,
                 admit: Any = None) -> dict[str, Any]:
    """Read exactly one frame from ``sock``.

    Args:
        max_bytes: a larger frame is refused on its header, before its body is read.
        deadline: ``time.monotonic()`` value by which the whole frame must have arrived (without
            one, the socket's own timeout applies to each read).
        admit: called with the announced size before the body is read (a context manager
            factory: the relay counts the bytes all its connections are receiving); may raise
            ``ProtocolError`` to refuse the frame.

    Raises:
        ProtocolError: closed connection, oversize frame or bad body.
        OSError: the socket failed or timed out (``TimeoutError``).
    """
    (size,) = HEADER.unpack(recv_exact(sock, HEADER.size, deadline))
    if size > max_bytes:
        raise ProtocolError(f"frame of {size} bytes exceeds the {max_bytes}-byte limit")
    if admit is None:
        return decode_body(recv_exact(sock, size, deadline))
    with admit(size):
        return decode_body(recv_exact(sock, size, deadline))


# -- pipes / files -----------------------------------------------------------------------------

def _wait(fd: int, deadline: float | None, *, write: bool) -> None:
    """Block until ``fd`` is readable (or writable) or raise ``TimeoutError`` at ``deadline``."""
    if deadline is None:
        return
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the peer did not complete the frame in time")
        r, w, _ = select.select([] if write else [fd], [fd] if write else [], [], left)
        if r or w:
            return


def _read_exact_fd(fd: int, n: int, deadline: float | None) -> bytearray:
    """Exactly ``n`` bytes from ``fd``, the buffer growing as they arrive (never ``n`` at once)."""
    buf = bytearray()
    while len(buf) < n:
        _wait(fd, deadline, write=False)
        chunk = os.read(fd, min(n - len(buf), _STEP))
        if not chunk:
            raise ProtocolError(f"pipe closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def write_message_fd(fd: int, message: dict[str, Any], deadline: float | None = None) -> None:
    """Write one frame to a pipe file descriptor, retrying short writes.

    With ``deadline`` the descriptor must be non-blocking (``os.set_blocking(fd, False)``) and the
    whole frame must be written by then.

    Raises:
        TimeoutError: ``deadline`` passed before the frame was written.
        OSError: the pipe is closed (``BrokenPipeError``) or failed.
    """
    data = memoryview(encode_frame(message))
    while data:
        _wait(fd, deadline, write=True)
        try:
            written = os.write(fd, data[: 1 << 16])
        except BlockingIOError:
            continue
        data = data[written:]


def read_message_fd(fd: int, max_bytes: int = MAX_FRAME_BYTES, deadline: float | None = None) -> dict[str, Any]:
    """Read exactly one frame from a pipe file descriptor.

    Args:
        max_bytes: larger frames are refused before anything is allocated.
        deadline: ``time.monotonic()`` value by which the whole frame must have arrived.

    Raises:
        ProtocolError: EOF, oversize frame or bad body.
        TimeoutError: ``deadline`` passed first (the stream is then out of sync: close it).
    """
    (size,) = HEADER.unpack(_read_exact_fd(fd, HEADER.size, deadline))
    if size > max_bytes:
        raise ProtocolError(f"frame of {size} bytes exceeds the {max_bytes}-byte limit")
    return decode_body(_read_exact_fd(fd, size, deadline))


# -- packed columns of index.json ------------------------------------------------------------------
# A 1 GB corpus has about 230,000 chunks; as JSON lists their seven columns took 0.1 s of a 1.1 s
# warm load to parse into 1.6 million objects that most runs never look at. Packed, an integer
# column is the base64 of its little-endian int32s or int64s (``{"int32": ...}``: parsed into an
# ``array``, whose items become objects only when read) and a column of SHA-1s one string of
# 40-character digests (``{"hex40": ...}``). Either reader also takes a plain JSON list.


class Hex40(Sequence[str]):
    """A read-only sequence of 40-character strings kept as one string (``{"hex40": ...}``)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        if len(text) % 40:
            raise ValueError("a hex40 column's length is not a multiple of 40")
        self.text = text

    def __len__(self) -> int:
        return len(self.text) // 40

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("hex40 column index out of range")
        return self.text[40 * i:40 * i + 40]

    def __iter__(self) -> Iterator[str]:
        text = self.text
        return (text[i:i + 40] for i in range(0, len(text), 40))

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    __hash__ = None  # type: ignore[assignment]


#: The packed integer columns: their key in index.json and ``array`` type code (both are
#: 4 and 8 bytes on every platform CPython supports).
_INT_CODES = {"int32": "i", "int64": "q"}
_INT_KEYS = {code: key for key, code in _INT_CODES.items()}


def pack_column(values: Sequence[Any]) -> Any:
    """A column of ``index.json`` in its packed form: ``{"int32": base64}`` or ``{"int64": base64}``
    (little-endian) when every value is an int that fits in 32 or 64 bits, ``{"hex40": str}`` when every value is a 40-character lowercase hex
    string (a SHA-1), otherwise the values as a list. :func:`unpack_column` reverses it."""
    if isinstance(values, Hex40):
        return {"hex40": values.text}
    types = set() if isinstance(values, array.array) else set(map(type, values))  # map: no Python loop
    if isinstance(values, array.array) and values.typecode in "qi":
        packed = values
    elif types == {int}:
        try:
            packed = array.array("i" if -2**31 <= min(values) and max(values) < 2**31 else "q", values)
        except OverflowError:
            return list(values)
    elif types == {str} and set(map(len, values)) == {40}:
        text = "".join(values)
        if text.strip("0123456789abcdef"):
            return list(values)
        return {"hex40": text}
    else:
        return list(values)
    if sys.byteorder != "little":
        packed = array.array(packed.typecode, packed)
        packed.byteswap()
    return {_INT_KEYS[packed.typecode]: base64.b64encode(packed.tobytes()).decode("ascii")}


def unpack_columns(columns: dict[str, Any]) -> dict[str, Sequence[Any]]:
    """:func:`unpack_column` of every column of one table of ``index.json`` (``files`` or ``chunks``).

    Raises:
        ValueError: a packed column that is malformed.
    """
    return {k: unpack_column(v) for k, v in columns.items()}


def unpack_column(value: Any) -> Sequence[Any]:
    """A column read from ``index.json``: an ``array`` (``'i'`` or ``'q'``), a :class:`Hex40` or the list itself.

    Raises:
        ValueError: a packed column that is malformed.
    """
    if isinstance(value, list):
        return value
    if isinstance(value, dict) and len(value) == 1:
        key = next(iter(value))
        if key in _INT_CODES and isinstance(value[key], str):
            out = array.array(_INT_CODES[key])
            raw = base64.b64decode(value[key], validate=True)
            if len(raw) % out.itemsize:
                raise ValueError(f"an {key} column's length is not a multiple of {out.itemsize}")
            out.frombytes(raw)
            if sys.byteorder != "little":
                out.byteswap()
            return out
        if "hex40" in value and isinstance(value["hex40"], str):
            return Hex40(value["hex40"])
    raise ValueError("a column of index.json is neither a list nor a packed column")
