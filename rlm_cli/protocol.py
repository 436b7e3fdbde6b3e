"""Wire format shared by the parent, the LMHandler and the sandboxed REPL worker.

Every message on every channel is one *frame*: a 4-byte unsigned big-endian length ``N``
followed by ``N`` bytes of UTF-8 JSON encoding one object. Readers read exactly ``N`` bytes
(never a single ``recv(4)`` hoping for the whole header) and refuse frames larger than
``max_bytes`` so a hostile peer cannot make the reader allocate without bound.

Two channels use it:

* **control** (parent <-> worker, over inherited pipes): the parent sends
  ``{"type": "load", ...}``, ``{"type": "exec", "code": str}``, ``{"type": "shutdown"}``;
  the worker answers each with ``{"type": "ready"|"result"|"error", ...}``.
* **lm** (worker -> LMHandler, one Unix-socket connection per request): the worker sends
  ``{"token": str, "type": "completion"|"rlm_query", ...}`` and reads one reply
  ``{"ok": bool, "text": str, "error": str}``.

This module is imported by the worker, so it uses only the standard library.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from typing import Any, BinaryIO

HEADER = struct.Struct(">I")
#: Largest frame accepted by default: 256 MiB (an answer or output far beyond any real use).
MAX_FRAME_BYTES = 256 * 1024 * 1024


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


def decode_body(body: bytes) -> dict[str, Any]:
    """Parse a frame body; the result must be a JSON object.

    Raises:
        ProtocolError: invalid UTF-8/JSON or not an object.
    """
    try:
        value = json.loads(body.decode("utf-8", "surrogatepass"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"invalid frame body: {exc}") from None
    if not isinstance(value, dict):
        raise ProtocolError("frame body is not a JSON object")
    return value


# -- sockets -----------------------------------------------------------------------------------

def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ProtocolError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def send_message(sock: socket.socket, message: dict[str, Any]) -> None:
    """Send one frame on a connected socket (``sendall``)."""
    sock.sendall(encode_frame(message))


def recv_message(sock: socket.socket, max_bytes: int = MAX_FRAME_BYTES) -> dict[str, Any]:
    """Read exactly one frame from ``sock``.

    Raises:
        ProtocolError: closed connection, oversize frame or bad body.
    """
    (size,) = HEADER.unpack(_recv_exact(sock, HEADER.size))
    if size > max_bytes:
        raise ProtocolError(f"frame of {size} bytes exceeds the {max_bytes}-byte limit")
    return decode_body(_recv_exact(sock, size))


# -- pipes / files -----------------------------------------------------------------------------

def _read_exact_fd(fd: int, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, min(n - len(buf), 1 << 20))
        if not chunk:
            raise ProtocolError(f"pipe closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def write_message_fd(fd: int, message: dict[str, Any]) -> None:
    """Write one frame to a pipe file descriptor, retrying short writes."""
    data = memoryview(encode_frame(message))
    while data:
        written = os.write(fd, data)
        data = data[written:]


def read_message_fd(fd: int, max_bytes: int = MAX_FRAME_BYTES) -> dict[str, Any]:
    """Read exactly one frame from a pipe file descriptor.

    Raises:
        ProtocolError: EOF, oversize frame or bad body.
    """
    (size,) = HEADER.unpack(_read_exact_fd(fd, HEADER.size))
    if size > max_bytes:
        raise ProtocolError(f"frame of {size} bytes exceeds the {max_bytes}-byte limit")
    return decode_body(_read_exact_fd(fd, size))


def write_message_stream(stream: BinaryIO, message: dict[str, Any]) -> None:
    """Write one frame to a binary stream and flush it."""
    stream.write(encode_frame(message))
    stream.flush()
