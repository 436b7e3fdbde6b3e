"""The frame format: exact reads, size limits, malformed bodies, deadlines on stalled peers."""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from rlm_cli import protocol


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


def test_round_trip_on_a_pipe_keeps_unicode_and_nesting(pipe: tuple[int, int]) -> None:
    r, w = pipe
    msg = {"type": "exec", "code": "print('héllo ✓ \U0001f600')", "n": [1, {"a": None}], "lone": "\ud800"}
    protocol.write_message_fd(w, msg)
    assert protocol.read_message_fd(r) == msg


def test_frame_larger_than_the_pipe_buffer_is_written_and_read_whole(pipe: tuple[int, int]) -> None:
    r, w = pipe
    msg = {"text": "x" * 3_000_000}
    writer = threading.Thread(target=protocol.write_message_fd, args=(w, msg))
    writer.start()
    assert protocol.read_message_fd(r, deadline=time.monotonic() + 10) == msg
    writer.join()


def test_header_split_across_writes_is_reassembled() -> None:
    a, b = socket.socketpair()
    with a, b:
        frame = protocol.encode_frame({"ok": True, "text": "hi"})

        def drip() -> None:
            for i in range(len(frame)):
                b.sendall(frame[i:i + 1])
                time.sleep(0.001)

        t = threading.Thread(target=drip)
        t.start()
        assert protocol.recv_message(a) == {"ok": True, "text": "hi"}
        t.join()


def test_oversize_frame_is_refused_before_reading_the_body(pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.write(w, struct.pack(">I", 2**31))  # no body follows: the reader must not wait for one
    with pytest.raises(protocol.ProtocolError, match="exceeds"):
        protocol.read_message_fd(r, max_bytes=1024, deadline=time.monotonic() + 5)


def test_oversize_frame_on_a_socket_is_refused() -> None:
    a, b = socket.socketpair()
    with a, b:
        b.sendall(struct.pack(">I", 10_000) + b"{}")
        with pytest.raises(protocol.ProtocolError, match="exceeds the 100-byte limit"):
            protocol.recv_message(a, max_bytes=100)


@pytest.mark.parametrize("body, why", [(b"not json", "invalid frame body"), (b"[1, 2]", "not a JSON object"),
                                       (b"\xff\xfe", "invalid frame body"), (b"[" * 100_000, "invalid frame body")])
def test_malformed_bodies_raise_protocol_error(pipe: tuple[int, int], body: bytes, why: str) -> None:
    r, w = pipe
    writer = threading.Thread(target=os.write, args=(w, struct.pack(">I", len(body)) + body))
    writer.start()
    with pytest.raises(protocol.ProtocolError, match=why):
        protocol.read_message_fd(r, deadline=time.monotonic() + 5)
    writer.join()


def test_eof_mid_frame_is_a_protocol_error(pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.write(w, struct.pack(">I", 100) + b'{"a"')
    os.close(w)
    with pytest.raises(protocol.ProtocolError, match="pipe closed after 4 of 100 bytes"):
        protocol.read_message_fd(r)


def test_a_peer_that_stalls_mid_frame_hits_the_deadline(pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.write(w, struct.pack(">I", 1000) + b"{")  # a header and one byte, then nothing
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        protocol.read_message_fd(r, deadline=started + 0.3)
    assert time.monotonic() - started > 0.25  # without the deadline it would block for ever (the test's timeout)


def test_write_to_a_reader_that_never_reads_hits_the_deadline(pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.set_blocking(w, False)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        protocol.write_message_fd(w, {"text": "y" * 1_000_000}, deadline=started + 0.3)


def test_closed_socket_mid_frame_is_a_protocol_error() -> None:
    a, b = socket.socketpair()
    with a:
        b.sendall(struct.pack(">I", 50) + b"{")
        b.close()
        with pytest.raises(protocol.ProtocolError, match="connection closed after 1 of 50 bytes"):
            protocol.recv_message(a)


def test_encoded_frame_is_big_endian_length_plus_compact_json() -> None:
    frame = protocol.encode_frame({"a": 1, "b": "é"})
    (size,) = struct.unpack(">I", frame[:4])
    assert size == len(frame) - 4
    assert json.loads(frame[4:]) == {"a": 1, "b": "é"}
    assert b" " not in frame[4:]


@pytest.mark.parametrize("values, packed_as", [
    ([0, 1, -5, 2**63 - 1, -2**63, 1_764_000_000_123_456_789], "int64"),
    ([0, 7, -2**31, 2**31 - 1], "int32"),
    (["0123456789abcdef0123456789abcdef01234567", "f" * 40], "hex40"),
    ([2**63, 1], None),           # does not fit in an int64: a plain list
    (["ABCDEF0123456789abcdef0123456789abcdef01"], None),  # not lowercase hex
    ([1, "a", None], None), ([], None), ([True, False], None),
])
def test_index_columns_round_trip_packed_or_as_lists(values: list[object], packed_as: str | None) -> None:
    packed = json.loads(json.dumps(protocol.pack_column(values)))
    assert (next(iter(packed)) if isinstance(packed, dict) else None) == packed_as
    back = protocol.unpack_column(packed)
    assert list(back) == values and len(back) == len(values)
    if values:
        assert back[-1] == values[-1] and back[0] == values[0]
        assert protocol.pack_column(back) == protocol.pack_column(values)  # packs again as it came


@pytest.mark.parametrize("bad", [{"int64": "AAAA"}, {"int32": "AAA="}, {"int64": 5}, {"int64": "not base64!"}, {"hex40": "abc"},
                                 {"other": []}, "text", {"int64": "AAAAAAAAAAA=", "x": 1}])
def test_a_malformed_packed_column_is_a_value_error(bad: object) -> None:
    with pytest.raises(ValueError):
        protocol.unpack_column(bad)
