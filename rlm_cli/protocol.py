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
  frames, first the *hello* ``{"token": str, "type": "completion"|"rlm_query"}`` (at most
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

import json
import os
import select
import socket
import struct
import time
from typing import Any

HEADER = struct.Struct(">I")
#: Layout version of the corpus bundle (index.json) written by ``rlm_cli.corpus.store`` and read by
#: the worker's ``corpus_helpers``; bump it when the layout changes (older bundles are rebuilt).
BUNDLE_VERSION = 6  # 5: parsed data file (data-*.bin); 6: stray non-UTF-8 bytes read as Latin-1, not U+FFFD
#: Address space the REPL worker must have free under ``--memory-limit`` once the corpus is
#: loaded (below it every allocation of model code would fail): checked by the CLI and the worker.
MIN_FREE_MEMORY = 64 * 1024**2
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
