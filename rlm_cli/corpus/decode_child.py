"""The document decoder: the confined child process that turns hostile bytes into text.

PDFs, notebooks, Parquet and Excel files, compressed files and large JSON/JSONL/CSV/TSV files
are decoded here, never in rlm's own process (``rlm_cli.corpus.decode`` is the parent side and
says which files come here). The child is started by the sandbox launcher at the strongest level
this machine has (bubblewrap, else a process confined by Landlock and seccomp, else a process
with resource limits), with the launcher's scrubbed environment; before it reads any request it
drops root (to ``nobody``, as the REPL worker does), arms no-new-privileges, the parent-death
signal, Landlock and the seccomp filter (``sandbox.hardening.harden``: no socket but AF_UNIX, so no
network) and the resource limits it was given (``RLIMIT_AS`` is ``--decode-memory``; no file may
be written, ``RLIMIT_FSIZE`` 0). It opens no file itself: each request brings the one file it is
about as an already open, read-only descriptor (``SCM_RIGHTS``) or as bytes, so Landlock may deny
every corpus path.

Protocol, over one ``AF_UNIX`` stream socket (the child's end is inherited; its number is
``argv[1]``). Every message is a ``rlm_cli.protocol`` frame (a 4-byte length and a JSON object)
followed by the raw *blobs* whose byte lengths its ``blobs`` list gives:

* parent -> child, once: ``{"type": "config", "limits": {RLIMIT_NAME: value}, "drop_to": [uid,
  gid] | null, "keep_caps": [...], "harden": bool, "landlock": policy | null, "seccomp": bool}``;
  the child answers ``{"type": "ready", "notes": [...]}`` or ``{"type": "error", "error": str}``.
* ``{"type": "file", "kind", "comp", "shown", "size", "cap", "truncate"}`` with the file's
  descriptor attached to the frame's first byte: decompress (``comp``) and decode it by
  ``kind`` (``decoding.decode_kind``); a structured result is parsed here too.
* ``{"type": "import", "modules": [...]}``: import a kind's readers (pypdf; pandas and pyarrow or
  openpyxl) before its first file, so ``--decode-timeout`` times the file, not the import.
* ``{"type": "parse", "kind", "shown", "blobs": [n]}`` with the UTF-8 text: parse it
  (``structured.parse``) into the payload of the data file.
* answers: ``{"type": "result", "ok": true, "kind", "encoding", "truncated", "cut", "meta":
  summary | null, "blobs": [text bytes, payload bytes]}`` (for ``parse`` the text blob is empty;
  the payload blob is ``structured.encode``'s marshal bytes, or empty without one), or ``{"ok":
  false, "reason", "message"}`` for a file that cannot be read (``file_kinds.Unreadable``) or that
  ran out of memory (``reason`` ``decode memory``; the child then exits, its heap in doubt).

A request that outlives ``--decode-timeout`` is the parent's to handle: it kills the child.
"""

from __future__ import annotations

import array
import os
import socket
import sys
from typing import Any

from rlm_cli import protocol

#: Largest request or answer header (the JSON part of a frame).
MAX_HEADER_BYTES = 1024 * 1024


def send(sock: socket.socket, header: dict[str, Any], blobs: tuple[bytes, ...] = (), fd: int | None = None) -> None:
    """Send ``header`` (its ``blobs`` set to the blobs' lengths), then the blobs; ``fd`` travels
    with the header's first byte. The socket's timeout applies (``TimeoutError``)."""
    frame = protocol.encode_frame(dict(header, blobs=[len(b) for b in blobs]))
    if fd is None:
        sock.sendall(frame)
    else:
        sent = socket.send_fds(sock, [frame], [fd])
        if sent < len(frame):
            sock.sendall(frame[sent:])
    for blob in blobs:
        sock.sendall(blob)


def _receive_request(sock: socket.socket) -> tuple[dict[str, Any], list[bytes], list[int]]:
    """One request from the parent: its header, blobs and any descriptors that came with it.

    Raises:
        protocol.ProtocolError: the parent closed the socket (the child then exits).
    """
    fds: list[int] = []
    head = b""
    while len(head) < protocol.HEADER.size:
        data, ancillary, _flags, _addr = sock.recvmsg(protocol.HEADER.size - len(head),
                                                      socket.CMSG_SPACE(4 * array.array("i").itemsize))
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                got = array.array("i")
                got.frombytes(payload[:len(payload) - len(payload) % got.itemsize])
                fds += list(got)
        if not data:
            raise protocol.ProtocolError("the parent closed the decoder's socket")
        head += data
    (size,) = protocol.HEADER.unpack(head)
    header = protocol.decode_body(protocol.recv_exact(sock, size))
    blobs = [bytes(protocol.recv_exact(sock, int(n))) for n in header.get("blobs", [])]
    return header, blobs, fds


def _decode_file(header: dict[str, Any], fd: int) -> tuple[dict[str, Any], tuple[bytes, bytes]]:
    """Read the file behind ``fd`` and decode it as ``header`` says (the middle of
    ``loader.read_source``, which sends it here).

    Raises:
        file_kinds.Unreadable: the file cannot be read as its kind (or is over the cap once decompressed).
    """
    from rlm_cli.config import CorpusOptions
    from rlm_cli.corpus import decoding, file_kinds

    kind, comp, shown = str(header["kind"]), str(header["comp"]), str(header["shown"])
    cap, truncate = int(header["cap"]), bool(header["truncate"])
    options = CorpusOptions(max_file_size=cap, truncate_large=truncate)
    sf = decoding.SourceFile(shown, None, int(header.get("size", 0)), 0)
    cut = False
    os.lseek(fd, 0, os.SEEK_SET)
    with open(fd, "rb", buffering=0, closefd=False) as fh:
        if comp:
            data, cut = file_kinds.decompress(fh, comp, cap, shown)
            if cut and not truncate:
                raise file_kinds.Unreadable("too large", f"skipped {shown}: over --max-file-size {cap:,} bytes once "
                                                      "decompressed (raise it, or --truncate-large keeps the start)")
        else:
            data = decoding.read_up_to(fh, cap + 1)
            if len(data) > cap and kind in file_kinds.BINARY_KINDS:
                raise file_kinds.Unreadable("too large", f"skipped {shown}: over --max-file-size {cap:,} bytes "
                                                      f"(a {kind} file cannot be cut)")
    decoded = decoding.decode_kind(data, kind, comp, sf, options, cut)
    if decoded is None:
        return {"ok": True, "binary": True}, (b"", b"")
    payload, meta = b"", None
    base = decoded.kind.split(",")[0]
    if decoded.payload is not None or base in ("json", "jsonl", "csv", "tsv"):
        from rlm_cli.corpus import structured

        if decoded.payload is not None:
            value, meta = decoded.payload, structured.summarize(decoded.payload)
        else:
            value, meta = structured.parse(base, decoded.text)
        payload = structured.encode(value)
    return ({"ok": True, "kind": decoded.kind, "encoding": decoded.encoding, "truncated": decoded.truncated,
             "meta": meta}, (decoded.data, payload))


def _parse(header: dict[str, Any], text: bytes) -> tuple[dict[str, Any], tuple[bytes, bytes]]:
    """Parse a structured file's text (``structured.parse``): its encoded payload and summary."""
    from rlm_cli.corpus import structured

    value, meta = structured.parse(str(header["kind"]), text.decode("utf-8", "surrogatepass"))
    return {"ok": True, "kind": str(header["kind"]), "meta": meta}, (b"", structured.encode(value))


def _confine(config: dict[str, Any], parent_pid: int) -> list[str]:
    """Drop root, harden and limit this process as the REPL worker is (``sandbox.worker``).

    Raises:
        OSError: a step failed; the child must then decode nothing.
    """
    from rlm_cli.sandbox import hardening

    if config.get("drop_to") is not None:
        uid, gid = config["drop_to"]
        hardening.drop_privileges(int(uid), int(gid), tuple(config.get("keep_caps") or ()))
    notes: list[str] = []
    if config.get("harden", True):
        notes += hardening.harden(parent_pid, config.get("landlock"), bool(config.get("seccomp")))
    notes += hardening.apply_limits({str(k): int(v) for k, v in config.get("limits", {}).items()})
    return notes


def serve(sock: socket.socket) -> None:
    """Answer requests on ``sock`` until the parent closes it (or a decode runs out of memory)."""
    from rlm_cli.corpus import file_kinds

    while True:
        try:
            header, blobs, fds = _receive_request(sock)
        except (protocol.ProtocolError, OSError):
            return
        out_of_memory = False
        parts: tuple[bytes, ...] = ()
        try:
            if header.get("type") == "file" and fds:
                answer, parts = _decode_file(header, fds[0])
            elif header.get("type") == "parse" and blobs:
                answer, parts = _parse(header, blobs[0])
            elif header.get("type") == "import":
                for name in header.get("modules", []):
                    try:
                        __import__(str(name))
                    except ImportError:
                        pass  # the reader names the missing extra when a file of that kind comes
                answer = {"ok": True, "kind": "", "meta": None}
                parts = (b"", b"")
            else:
                answer = {"ok": False, "reason": "unreadable", "message": "a malformed decode request"}
        except file_kinds.Unreadable as exc:
            # The readers turn any exception into a skip reason, a MemoryError too: it is the limit's.
            out_of_memory = isinstance(exc.__context__, MemoryError)
            answer = {"ok": False, "reason": "decode memory" if out_of_memory else exc.reason, "message": str(exc)}
        except MemoryError:
            out_of_memory = True
            answer = {"ok": False, "reason": "decode memory", "message": ""}
        except RecursionError:
            answer = {"ok": False, "reason": "unreadable", "message": "nested too deeply to decode"}
        finally:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
        try:
            send(sock, dict(answer, type="result"), tuple(parts))
        except OSError:
            return
        if out_of_memory:
            return


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``decode_child.py SOCKET_FD`` (started by ``rlm_cli.corpus.decode``)."""
    argv = sys.argv[1:] if argv is None else argv
    parent_pid = os.getppid()
    sock = socket.socket(fileno=int(argv[0]))
    sock.set_inheritable(False)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - nothing may read the parent's terminal
    config = protocol.recv_message(sock, MAX_HEADER_BYTES)
    try:
        notes = _confine(config, parent_pid)
    except OSError as exc:
        protocol.send_message(sock, {"type": "error", "error": f"cannot confine the document decoder: {exc}"})
        return
    protocol.send_message(sock, {"type": "ready", "notes": notes})
    del config
    serve(sock)
