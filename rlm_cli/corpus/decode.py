"""Decode documents in a confined child process, with limits on time and memory (parent side).

What goes to the child (``rlm_cli.corpus.decode_child``), from ``loader.read_source``:

* PDFs, notebooks, Parquet and Excel files (:data:`DOCUMENT_KINDS`), whose parsers (pypdf,
  pyarrow, openpyxl, json) meet hostile bytes;
* every compressed file (``.gz``, ``.bz2``, ``.xz`` with the right magic bytes): decompression
  happens in the child, and stops one byte past ``--max-file-size``, so a gzip bomb is skipped
  as ``too large`` after expanding at most that much, in the child's memory;
* the parse of a JSON/JSONL/CSV/TSV file of :data:`CHILD_PARSE_BYTES` or more into the payload of
  ``data`` and ``records()`` (its text is read in-process like any text file). Parsing turns each
  byte into up to ~50 bytes of Python objects (``[[],[],...]``); under that size the cost is
  bounded (a few tens of MB and well under a second: both parsers are linear, and json raises
  ``RecursionError`` on deep nesting, which ``structured`` reports), so small files skip the
  round trip.

Plain text files never leave rlm's process.

The child runs at the strongest sandbox level this machine has (``levels.resolve_level("auto")``:
bubblewrap, else a ``process`` confined by Landlock and seccomp as far as the kernel allows), is
started through the launcher's own start path (``launcher.Sandbox.prepare``, ``launch`` and
``confinement``: the user drop, the scratch folder, the command per level, the scrubbed
environment, the limits; and its kill and stray reaping), and is given its limits: ``RLIMIT_AS`` of ``--decode-memory``, no network,
no file to read but the one it is handed (an open descriptor), none to write. One child serves
every document of a build in turn (one process start per build and per reader process, not per
file: see the figures in docs/usage.md); it is stopped at the end of ``load_corpus`` and dies with rlm.

A document that outlives ``--decode-timeout`` (the child is killed), exhausts ``--decode-memory``
or crashes the child is skipped with the reason ``decode timeout``, ``decode memory`` or
``decode crash`` (counted in the summary, named in ``-v`` and ``--json``'s skipped files); the
next document gets a fresh child. Such skips are not cached: the next run tries again.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from rlm_cli import protocol
from rlm_cli.config import CorpusOptions
from rlm_cli.config_keys import format_size
from rlm_cli.corpus import file_kinds
from rlm_cli.corpus.decoding import Decoded, SourceFile
from rlm_cli.sandbox.level import Level

#: Kinds whose files are always decoded in the child (compressed files of any kind too).
DOCUMENT_KINDS = ("pdf", "notebook", "parquet", "excel")
#: Structured text files (JSON, JSONL, CSV, TSV) at least this large are parsed in the child.
CHILD_PARSE_BYTES = 1024 * 1024
#: Defaults of ``--decode-timeout`` (seconds per document) and ``--decode-memory`` (bytes of
#: address space of the child): a 10 MB PDF takes pypdf a few seconds; pandas and pyarrow alone
#: reserve about 400 MiB of address space.
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MEMORY_BYTES = 2 * 1024**3
#: Seconds the child gets to start, confine itself and answer ``ready``.
START_TIMEOUT_S = 30.0
#: Skip reasons of this module (the summary counts them like ``too large`` or ``binary``).
REASONS = ("decode timeout", "decode memory", "decode crash", "decoder unavailable")
#: Reasons the child may give for a file it could not read (anything else reads ``unreadable``).
CHILD_REASONS = frozenset({"encrypted", "corrupt", "too large", "extra not installed", "unreadable", "no text",
                           "binary", "decode memory"})
#: Decodings ``loader.decode_bytes`` may report.
ENCODINGS = frozenset({"utf-8", "utf-8-sig", "utf-16", "utf-32", "utf-8+latin-1", "latin-1"})
#: Largest summary (JSON) of a structured file accepted from the child.
MAX_META_BYTES = 64 * 1024
#: The module each kind needs, checked in rlm's process (a missing extra is named at once:
#: ``file_kinds.missing_reader``).
_NEEDS = {"pdf": "pypdf", "parquet": "pandas", "excel": "pandas"}
#: Modules the child imports before the first file of a kind (timed by the start, not the file).
_READERS = {"pdf": ["pypdf"], "parquet": ["pandas", "pyarrow.parquet"], "excel": ["pandas", "openpyxl"]}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x9b]")


def in_child(kind: str, comp: str, head: bytes) -> bool:
    """Whether a file of ``kind`` and compression ``comp`` (from ``file_kinds.kind_of``), whose
    first 8 KiB are ``head``, is decoded in the child: a compressed file with its format's
    magic bytes, a PDF, Parquet or Excel file, or a notebook that is not binary."""
    from rlm_cli.corpus.decoding import is_binary

    if comp:
        return file_kinds.magic_matches(comp, head)
    return kind in DOCUMENT_KINDS and not (kind == "notebook" and is_binary(head))


def _sandbox_class() -> type:
    """``launcher.Sandbox`` with the decoder's entry module and Landlock policy (imported lazily:
    the launcher is not needed by a corpus without documents)."""
    from rlm_cli.sandbox import launcher

    class DecoderSandbox(launcher.Sandbox):  # type: ignore[misc]
        """The launcher's commands for ``decode_child`` instead of the REPL worker."""

        def python_argv(self, pkg_parent: str, rfd: int, wfd: int) -> list[str]:
            boot = (f"import sys; sys.path.insert(0, {pkg_parent!r}); "
                    "from rlm_cli.corpus.decode_child import main; main()")
            return [sys.executable, "-I", "-c", boot, str(rfd)]

        def landlock_policy(self) -> dict[str, Any] | None:
            """Read Python, rlm and the system folders only; write nothing; no Unix socket by path."""
            policy = super().landlock_policy()
            if policy is not None and policy.get("files"):
                policy.update(write=[], unix=[])
            return policy

    return DecoderSandbox


def _level() -> Level:
    """The sandbox level of the child: the strongest available here (never ``none``)."""
    from rlm_cli.sandbox import levels

    return levels.resolve_level("auto")[0]


class Decoder:
    """One confined child and the requests it serves, one at a time (not thread-safe: each
    thread has its own, see :func:`decoder`).

    ``timeout_s`` is the wall-clock limit of one document (seconds), ``memory_bytes`` the child's
    address-space limit (bytes).
    """

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S, memory_bytes: int = DEFAULT_MEMORY_BYTES) -> None:
        self.timeout_s = timeout_s
        self.memory_bytes = memory_bytes
        #: The level the child runs at (``None`` until it first starts).
        self.level: Level | None = None
        self.starts = 0
        self._box: Any = None
        self._sock: socket.socket | None = None
        self._broken: str | None = None
        #: Kinds whose readers the running child has imported.
        self._warm: set[str] = set()

    # -- requests --------------------------------------------------------------------------------
    def decode_file(self, fd: int, sf: SourceFile, kind: str, comp: str, options: CorpusOptions) -> Decoded:
        """Decode the open file ``fd`` (``sf``; ``kind`` and ``comp`` from ``file_kinds.kind_of``) in
        the child: its text, decoding, kind tags and, for a table or structured file, its encoded
        payload and summary (``Decoded.encoded``/``meta``).

        Raises:
            file_kinds.Unreadable: skip the file: the child's own reasons (``encrypted``, ``corrupt``,
                ``too large``, ``binary`` with an empty message...) or :data:`REASONS`.
        """
        cap = options.max_file_size
        if kind in file_kinds.BINARY_KINDS and not comp and sf.size > cap:
            raise file_kinds.Unreadable("too large", f"skipped {sf.display}: {sf.size:,} bytes is over --max-file-size "
                                                  f"{cap:,} (a {kind} file cannot be cut)")
        need = _NEEDS.get(kind)
        if need is not None and not comp and not _importable(need):
            raise file_kinds.Unreadable("extra not installed", f"skipped {sf.display}: {file_kinds.missing_reader(kind)}")
        readers = _READERS.get(kind, []) if not comp else []
        if readers and kind not in self._warm:
            self._request({"type": "import", "modules": readers}, (), None, sf.display, 0, START_TIMEOUT_S)
            self._warm.add(kind)
        header = {"type": "file", "kind": kind, "comp": comp, "shown": sf.display, "size": sf.size, "cap": cap,
                  "truncate": options.truncate_large}
        answer, (text, payload) = self._request(header, (), fd, sf.display, self._reply_limit(cap))
        if answer.get("binary") is True:
            raise file_kinds.Unreadable("binary", "")
        expected = {",".join(t for t in (k, comp) if t) for k in (kind, "")}
        got_kind = answer.get("kind")
        encoding = answer.get("encoding")
        if got_kind not in expected or encoding not in ENCODINGS:
            raise self._refuse(sf.display, f"an answer of kind {str(got_kind)[:40]!r}, decoding {str(encoding)[:40]!r}")
        try:
            decoded_text = text.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            decoded_text = text.decode("utf-8", "replace")
            text = decoded_text.encode("utf-8", "surrogatepass")
        decoded = Decoded(decoded_text, text, str(encoding), bool(answer.get("truncated")), str(got_kind))
        self._attach(decoded, answer, payload)
        return decoded

    def parse(self, decoded: Decoded, sf: SourceFile, options: CorpusOptions) -> None:
        """Parse the structured text of ``decoded`` (a JSON, JSONL, CSV or TSV file) in the child
        and attach its encoded payload and summary (``decoded.encoded``/``meta``).

        Raises:
            file_kinds.Unreadable: skip the file (:data:`REASONS`).
        """
        base = decoded.kind.split(",")[0]
        header = {"type": "parse", "kind": base, "shown": sf.display}
        answer, (_, payload) = self._request(header, (decoded.data,), None, sf.display,
                                             self._reply_limit(max(options.max_file_size, len(decoded.data))))
        self._attach(decoded, answer, payload)

    @staticmethod
    def _reply_limit(cap: int) -> int:
        """Bytes of text, and of payload, accepted for a file of at most ``cap`` bytes."""
        return 8 * cap + 64 * 1024**2

    def _attach(self, decoded: Decoded, answer: dict[str, Any], payload: bytes) -> None:
        meta = answer.get("meta")
        if not payload:
            return
        if not isinstance(meta, dict) or len(json.dumps(meta)) > MAX_META_BYTES:
            meta = {"kind": decoded.kind.split(",")[0], "error": "the decoder gave no usable summary", "line": 1}
        decoded.encoded, decoded.meta = payload, meta

    def _refuse(self, shown: str, what: str) -> file_kinds.Unreadable:
        self._kill()
        return file_kinds.Unreadable("decode crash", f"skipped {shown}: the document decoder sent {what}; it was stopped")

    def _request(self, header: dict[str, Any], blobs: tuple[bytes, ...], fd: int | None, shown: str,
                 limit: int, seconds: float | None = None) -> tuple[dict[str, Any], tuple[bytes, bytes]]:
        """Send one request and wait for its answer (at most ``seconds``, else ``timeout_s``):
        ``(answer header, (text, payload))``; each blob may hold at most ``limit`` bytes.

        Raises:
            file_kinds.Unreadable: the child's own skip reason, or :data:`REASONS` (timeout, memory,
                crash, a child that cannot start); the child is stopped in each of those cases.
        """
        sock = self._ensure(shown)
        from rlm_cli.corpus import decode_child

        seconds = self.timeout_s if seconds is None else seconds
        deadline = time.monotonic() + seconds
        try:
            sock.settimeout(seconds)
            decode_child.send(sock, header, blobs, fd)
            answer = protocol.recv_message(sock, decode_child.MAX_HEADER_BYTES, deadline)
            sizes = answer.get("blobs", [])
            if (not isinstance(sizes, list) or len(sizes) != (2 if answer.get("ok") is True else 0)
                    or not all(type(n) is int and 0 <= n for n in sizes)):
                raise self._refuse(shown, "a malformed answer")
            if any(n > limit for n in sizes):
                self._kill()
                raise file_kinds.Unreadable("too large", f"skipped {shown}: its decoded text is over "
                                                      f"{limit:,} bytes ({max(sizes):,})")
            parts = [bytes(protocol.recv_exact(sock, n, deadline)) for n in sizes]
        except TimeoutError:
            self._kill()
            what = "decoding it" if seconds == self.timeout_s else "loading its reader in the decoder"
            raise file_kinds.Unreadable("decode timeout", f"skipped {shown}: {what} took over "
                                                       f"{'--decode-timeout ' if seconds == self.timeout_s else ''}"
                                                       f"{seconds:g} s (the decoder was stopped)") from None
        except (protocol.ProtocolError, OSError):
            raise self._died(shown) from None
        if answer.get("ok") is not True:
            reason = answer.get("reason")
            reason = reason if isinstance(reason, str) and reason in CHILD_REASONS else "unreadable"
            if reason == "decode memory":
                self._kill()
                raise file_kinds.Unreadable("decode memory", f"skipped {shown}: decoding it needed over --decode-memory "
                                                          f"{format_size(self.memory_bytes)} (the decoder was stopped)")
            message = answer.get("message")
            text = _CONTROL.sub("?", message[:2000]) if isinstance(message, str) else f"skipped {shown}: unreadable"
            raise file_kinds.Unreadable(reason, text if reason != "binary" else "")
        return answer, (parts[0], parts[1])

    def _died(self, shown: str) -> file_kinds.Unreadable:
        """The error for a child that died during a request (a crash, or the kernel's answer to
        an allocation past its address-space limit inside a C library)."""
        proc = self._box.proc if self._box is not None else None
        status = None
        if proc is not None:
            try:
                status = proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                status = None
        self._kill()
        if status is not None and status < 0:
            try:
                how = f"killed by {signal.Signals(-status).name}"
            except ValueError:
                how = f"killed by signal {-status}"
        else:
            how = f"exit status {status}" if status is not None else "it stopped answering"
        return file_kinds.Unreadable("decode crash", f"skipped {shown}: the document decoder died reading it ({how}; "
                                                  f"a file needing over --decode-memory "
                                                  f"{format_size(self.memory_bytes)} can do that)")

    # -- the child -------------------------------------------------------------------------------
    def _ensure(self, shown: str) -> socket.socket:
        """The socket of a running child, starting one when there is none.

        Raises:
            file_kinds.Unreadable: ``decoder unavailable`` (it could not start; not tried again).
        """
        if self._broken is not None:
            raise file_kinds.Unreadable("decoder unavailable", f"skipped {shown}: {self._broken}")
        box = self._box
        if self._sock is not None and box is not None and box.proc is not None and box.proc.poll() is None:
            return self._sock
        self._kill()
        try:
            return self._start()
        except (OSError, protocol.ProtocolError, subprocess.SubprocessError) as exc:
            self._kill()
            detail = ""
            if self._box is not None:
                tail = self._box.stderr_tail.decode("utf-8", "replace").strip().splitlines()
                detail = f": {tail[-1][:200]}" if tail else ""
            self._broken = f"the document decoder could not start ({exc}{detail})"
            raise file_kinds.Unreadable("decoder unavailable", f"skipped {shown}: {self._broken}") from None

    def _start(self) -> socket.socket:
        """Start and confine a child (see the module docstring); its socket.

        Raises:
            OSError, protocol.ProtocolError: it failed to start or to confine itself.
        """
        from rlm_cli.sandbox import launcher, reaper

        self.level = level = _level()
        scratch = Path(tempfile.mkdtemp(prefix=reaper.folder_prefix(reaper.SCRATCH_PREFIX)))
        limits = launcher.Limits(memory_bytes=self.memory_bytes, file_bytes=1024 * 1024, open_files=64,
                                 extra_processes=64)
        box = _sandbox_class()(level, launcher.WorkerSpec(), socket_path=str(scratch / "none"), token="",
                               limits=limits, cell_timeout=self.timeout_s)
        box.scratch = scratch
        self._box = box
        box.prepare()  # the launcher's own start path: its user, scratch folder, subreaper, command, environment
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            box.launch(child.fileno(), child.fileno(), env={"MALLOC_ARENA_MAX": "1", "OMP_NUM_THREADS": "1"},
                       name="decoder-stderr")
        finally:
            child.close()
        self._sock = parent
        self._warm = set()
        self.starts += 1
        # one child serves many documents: --decode-timeout bounds each one, not RLIMIT_CPU
        config = {"type": "config", **box.confinement(cpu_limit=False)}
        deadline = time.monotonic() + START_TIMEOUT_S
        parent.settimeout(START_TIMEOUT_S)
        protocol.send_message(parent, config)
        reply = protocol.recv_message(parent, 1024 * 1024, deadline)
        if reply.get("type") != "ready":
            raise OSError(str(reply.get("error", reply))[:300])
        return parent

    def _kill(self) -> None:
        """Stop the child and everything it started (the launcher's kill), close its socket and
        delete its scratch folder."""
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None
        if self._box is not None:
            self._box.stop()
            self._box = None

    def close(self) -> None:
        """Stop the child (it also ends by itself when rlm closes the socket or dies)."""
        self._kill()


def _importable(name: str) -> bool:
    """Whether ``import name`` can work here (a module set to ``None`` in ``sys.modules`` cannot)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


_local = threading.local()
_all: weakref.WeakSet[Decoder] = weakref.WeakSet()
_all_lock = threading.Lock()


def decoder(options: CorpusOptions) -> Decoder:
    """This thread's decoder for the limits of ``options`` (made on first use; its child starts
    with the first document). Each thread has its own: a child dies with the thread that
    started it (the parent-death signal), and one serves one request at a time."""
    current: Decoder | None = getattr(_local, "decoder", None)
    if current is not None and (current.timeout_s, current.memory_bytes) == (options.decode_timeout,
                                                                              options.decode_memory):
        return current
    if current is not None:
        current.close()
    current = Decoder(options.decode_timeout, options.decode_memory)
    _local.decoder = current
    with _all_lock:
        _all.add(current)
    return current


def close_decoder() -> None:
    """Stop this thread's decoder child, if any (``load_corpus`` calls it when it is done)."""
    current: Decoder | None = getattr(_local, "decoder", None)
    if current is not None:
        current.close()
        _local.decoder = None


@atexit.register
def _close_all() -> None:
    with _all_lock:
        decoders = list(_all)
    for d in decoders:
        d.close()
