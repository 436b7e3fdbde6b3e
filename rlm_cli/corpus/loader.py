"""Read and decode the files a walk found (``rlm_cli.corpus.walk``), safely, and the records
both pass along: :class:`SourceFile`, :class:`LoadReport` and :class:`Decoded`.

Rules (see :func:`read_source`):

* a file is opened non-blocking and read only if it is still a regular file; FIFOs, sockets and
  devices are never read;
* a file over ``max_file_size`` bytes is truncated to that size with ``truncate_large``;
* binary files (a NUL byte, or more than 30% control bytes, in the first 8 KiB) are skipped;
* text is decoded as UTF-8 (BOM stripped), UTF-16/UTF-32 when a BOM says so, and otherwise as
  Latin-1 when invalid UTF-8 sequences outnumber valid multi-byte characters (a legacy 8-bit
  file); a mostly-UTF-8 file keeps its valid characters and reads each byte that is not part of
  valid UTF-8 as Latin-1 (no byte is lost or replaced by U+FFFD). Decoding never raises.

Everything skipped is counted by reason in a :class:`LoadReport`, which the summary line and the
empty-corpus error read.
"""

from __future__ import annotations

import codecs
import errno
import os
import stat
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import formats

#: Bytes inspected for binary detection (the same window git and ripgrep use).
SNIFF_BYTES = 8192
#: Share of control bytes in the sniff window above which a file counts as binary.
BINARY_RATIO = 0.30
#: Warnings kept per skip reason (the summary still counts every file).
MAX_WARNINGS_PER_REASON = 20

# Control bytes that do not occur in text (tab, LF, VT, FF, CR, ESC, BEL and BS do).
_NON_TEXT = bytes(b for b in range(32) if b not in (7, 8, 9, 10, 11, 12, 13, 27)) + b"\x7f"
_BOMS_16_32 = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


@dataclass(slots=True)
class SourceFile:
    """A file selected for reading. ``display`` is its path as shown to the model (UTF-8 text:
    ``links.display_text``); ``path`` the path to open, as the OS gave it (``None`` for stdin);
    ``size`` in bytes, ``mtime_ns``, ``ctime_ns`` and ``ino`` from ``stat`` (the cache trusts a
    file whose four are unchanged; 0 when unknown); ``dev`` its device. ``link``: the last part of
    ``path`` was a symlink the walk let in (a PATH named through a link, a link inside the corpus,
    ``--follow``); any other path is opened without following a link, and what is opened must be
    the file the walk checked (:func:`open_checked`)."""

    display: str
    path: str | None
    size: int
    mtime_ns: int
    ctime_ns: int = 0
    ino: int = 0
    dev: int = 0
    link: bool = False


#: Skipped files named (path and reason) in a report; the counts cover every one.
MAX_NAMED_SKIPS = 200


@dataclass
class LoadReport:
    """What was skipped and why (counts by reason), warnings for stderr, and decoding notes.

    ``named`` lists ``(display path, reason)`` of the first :data:`MAX_NAMED_SKIPS` files or
    folders skipped (a folder's path ends with ``/``: it was not entered); ``last_skip`` is the
    latest one (:func:`read_source` sets it for the file it was asked to read).
    """

    skipped: Counter[str] = field(default_factory=Counter)
    warnings: list[str] = field(default_factory=list)
    decoded: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    last_skip: tuple[str, str] | None = None
    named: list[tuple[str, str]] = field(default_factory=list)

    def count_decoded(self, notes: str) -> None:
        """Count a loaded file's decoding notes (:attr:`Decoded.notes`, also kept in the index)."""
        for tag in filter(None, notes.split(",")):
            self.decoded[tag] += 1

    def count_kind(self, kind: str) -> None:
        """Count a loaded file's kind tags (:attr:`Decoded.kind`: ``jsonl,gz`` counts a jsonl and a gz)."""
        for tag in filter(None, kind.split(",")):
            self.kinds[tag] += 1

    def count_files(self, notes: Iterable[str], kinds: Iterable[str]) -> None:
        """:meth:`count_decoded` and :meth:`count_kind` for many files at once (the columns of an
        index: most values repeat, so each distinct one is split once)."""
        for counter, values in ((self.decoded, notes), (self.kinds, kinds)):
            for value, n in Counter(values).items():
                for tag in filter(None, value.split(",")):
                    counter[tag] += n

    def skip(self, reason: str, warning: str | None = None, *, path: str | None = None) -> None:
        """Count one skipped file under ``reason``, name it (``path``; the first
        :data:`MAX_NAMED_SKIPS`), and keep ``warning`` (at most 20 per reason)."""
        self.skipped[reason] += 1
        if path is not None:
            self.last_skip = (path, reason)
            if len(self.named) < MAX_NAMED_SKIPS:
                self.named.append((path, reason))
        if warning:
            n = self.skipped[reason]
            if n <= MAX_WARNINGS_PER_REASON:
                self.warnings.append(warning)
            elif n == MAX_WARNINGS_PER_REASON + 1:
                self.warnings.append(f"further files skipped as {reason!r} are counted in the summary only")


@dataclass(slots=True)
class Decoded:
    """A file's text, the UTF-8 bytes of that text, how it was decoded, and whether only its
    head was kept (``--truncate-large``). ``kind`` is what the file was read as, comma-separated
    (``""`` plain text; ``pdf``, ``notebook``, ``jsonl``, ``csv,gz``...: see
    ``rlm_cli.corpus.formats``); ``payload`` the parsed table of a Parquet or Excel file."""

    text: str
    data: bytes
    encoding: str
    truncated: bool = False
    kind: str = ""
    payload: dict[str, Any] | None = None
    #: The payload already encoded for the data file, and its summary, when the confined decoder
    #: parsed the file (``rlm_cli.corpus.decode``).
    encoded: bytes | None = None
    meta: dict[str, Any] | None = None

    @property
    def notes(self) -> str:
        """What the summary's "decoded" counts for this file: ``""`` for plain UTF-8, else the
        decoding and/or ``truncated``, comma-separated (kept in the index for cached files)."""
        tags = [] if self.encoding in ("utf-8", "utf-8-sig") else [self.encoding]
        return ",".join((["truncated"] if self.truncated else []) + tags)


def os_failure(exc: OSError, path: str | bytes) -> tuple[str, str]:
    """``(skip reason, words)`` for an ``OSError`` met opening, listing or reading ``path``: a path
    over the system's limit is ``path too long`` (permissions are not the problem), anything else
    ``unreadable`` with the system's words."""
    if exc.errno == errno.ENAMETOOLONG:
        size = len(os.fsencode(path))
        return "path too long", f"its path is {size:,} bytes, over what the system allows (PATH_MAX, 4,096 on Linux)"
    return "unreadable", str(exc.strerror or exc)


def binary_anyway(path: str) -> bool:
    """Whether a file too large to read would be skipped as binary all the same: a name of no
    compressed or document kind whose first 8 KiB are binary (:func:`is_binary`). Reads only
    those 8 KiB (non-blocking: the walk checked it is a regular file); ``False`` when it cannot."""
    kind, comp = formats.kind_of(path)
    if comp or kind in formats.BINARY_KINDS or kind == "notebook":
        return False
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        with open(fd, "rb", buffering=0) as fh:
            return is_binary(read_up_to(fh, SNIFF_BYTES))
    except OSError:
        return False


def is_binary(head: bytes) -> bool:
    """True if ``head`` (the first 8 KiB) looks binary: a NUL byte, or over 30% control bytes.

    UTF-16/32 files with a BOM are text (they contain NULs by design).
    """
    if not head or head.startswith(_BOMS_16_32):
        return False
    if b"\x00" in head:
        return True
    nontext = len(head) - len(head.translate(None, _NON_TEXT))
    return nontext > BINARY_RATIO * len(head)


def decode_bytes(data: bytes) -> Decoded:
    """Decode a file's bytes (see the module docstring); never raises.

    Returns the text, its UTF-8 encoding (``data`` itself when it was valid UTF-8 without a BOM)
    and the name of the decoding used: ``utf-8``, ``utf-8-sig``, ``utf-16``, ``utf-32``,
    ``utf-8+latin-1`` (UTF-8 with some bytes that are not, read as Latin-1) or ``latin-1``.
    """
    if data.startswith(codecs.BOM_UTF8):
        body = data[3:]
        try:
            return Decoded(body.decode("utf-8"), body, "utf-8-sig")
        except UnicodeDecodeError:
            text = body.decode("utf-8", _LATIN1_FOR_INVALID)
            return Decoded(text, text.encode("utf-8"), "utf-8+latin-1")
    for bom, enc in ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
                     (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):
        if data.startswith(bom):
            text = data.decode(enc, "replace")
            return Decoded(text, text.encode("utf-8", "surrogatepass"), enc)
    try:
        return Decoded(data.decode("utf-8"), data, "utf-8")
    except UnicodeDecodeError:
        pass
    text = data.decode("utf-8", "replace")
    replaced = text.count("\ufffd") - data.count(b"\xef\xbf\xbd")  # minus genuine U+FFFD characters
    multibyte = len(text) - len(text.encode("ascii", "ignore")) - text.count("\ufffd")
    if replaced > multibyte:  # a legacy 8-bit file: every high byte is one invalid sequence
        text = data.decode("latin-1")
        return Decoded(text, text.encode("utf-8"), "latin-1")
    text = data.decode("utf-8", _LATIN1_FOR_INVALID)  # mostly UTF-8: keep it, read the stray bytes as Latin-1
    return Decoded(text, text.encode("utf-8"), "utf-8+latin-1")


def _latin1_for_invalid(err: UnicodeError) -> tuple[str, int]:
    """A ``codecs`` error handler: the bytes of an invalid UTF-8 sequence, read as Latin-1 (one
    character per byte, so nothing is lost, unlike U+FFFD)."""
    if not isinstance(err, UnicodeDecodeError):
        raise err
    return bytes(err.object[err.start:err.end]).decode("latin-1"), err.end


_LATIN1_FOR_INVALID = "rlm-latin-1-for-invalid"
codecs.register_error(_LATIN1_FOR_INVALID, _latin1_for_invalid)


def decode(data: bytes) -> str:
    """The text of :func:`decode_bytes` (never raises)."""
    return decode_bytes(data).text


def trim_partial_utf8(data: bytes) -> bytes:
    """Drop an incomplete UTF-8 sequence cut off at the end of ``data`` (after truncation)."""
    for back in range(1, min(4, len(data)) + 1):
        b = data[-back]
        if b < 0x80:
            return data
        if b >= 0xC0:  # a lead byte: how long should its sequence be?
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return data if back >= need else data[:-back]
    return data


#: The skip reason of a file that changed into another (a symlink, another file) between the walk
#: that checked it and its reading.
REPLACED = "replaced while loading"


def open_checked(sf: SourceFile, report: LoadReport) -> int | None:
    """Open ``sf.path`` for reading (non-blocking, close-on-exec; without following a symlink
    unless the walk let that one in: ``sf.link``) and check on the open descriptor (``fstat``)
    that it is a regular file, and the very file the walk checked (its device and inode): a path
    swapped for a link out of the corpus, or its folder for one, between the walk and the read
    (a race) is never read. ``None`` when it is not (counted in ``report``).

    Raises:
        OSError: the file cannot be opened (not a swap).
    """
    assert sf.path is not None
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(sf.path, flags if sf.link else flags | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        if exc.errno != errno.ELOOP or sf.link:
            raise
        report.skip(REPLACED, f"skipped {sf.display}: it became a symlink after the corpus was listed "
                              "(not followed)", path=sf.display)
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            report.skip("special file", f"skipped {sf.display}: not a regular file", path=sf.display)
        elif sf.ino and (st.st_ino != sf.ino or (sf.dev and st.st_dev != sf.dev)):
            report.skip(REPLACED, f"skipped {sf.display}: another file took its place after the corpus was "
                                  "listed (not read)", path=sf.display)
        else:
            return fd
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


def read_source(sf: SourceFile, options: CorpusOptions, report: LoadReport) -> Decoded | None:
    """Read and decode one file; ``None`` when it is binary, empty or unreadable (counted in
    ``report``, with ``report.last_skip`` naming the file and the reason).

    The first 8 KiB are read first, so a binary file is never read whole. The file is opened
    non-blocking and checked again to be a regular file, so a path swapped for a FIFO after
    ``walk.discover`` cannot hang the run, and a path swapped for a symlink (or another file) is not
    read (:func:`open_checked`). Compressed files, PDFs, notebooks, Parquet and Excel
    files are turned into text by ``rlm_cli.corpus.formats`` (their decompressed or rendered
    size counts against ``--max-file-size``) in the confined decoder (``rlm_cli.corpus.decode``,
    which also parses large JSON, JSONL, CSV and TSV files); one that cannot be read, or that
    exceeds the decoder's limits, is skipped with a warning.
    """
    from rlm_cli.corpus import decode

    assert sf.path is not None
    kind, comp = formats.kind_of(sf.path)
    cap = options.max_file_size
    limit = cap if options.truncate_large else -1
    cut = False
    child: Decoded | None = None
    try:
        fd = open_checked(sf, report)
        if fd is None:
            return None
        with open(fd, "rb", buffering=0) as fh:
            head = read_up_to(fh, SNIFF_BYTES)
            if decode.in_child(kind, comp, head):
                child, data = decode.decoder(options).decode_file(fd, sf, kind, comp, options), b""
            elif comp and formats.magic_matches(comp, head):
                fh.seek(0)
                data, cut = formats.decompress(fh, comp, cap, sf.display)
                if cut and not options.truncate_large:
                    report.skip("too large", f"skipped {sf.display}: over --max-file-size {cap:,} bytes once "
                                             "decompressed (raise it, or --truncate-large keeps the start)",
                                path=sf.display)
                    return None
                head = data[:SNIFF_BYTES]
            elif kind in formats.BINARY_KINDS:
                comp = ""
                if sf.size > cap:
                    report.skip("too large", f"skipped {sf.display}: {sf.size:,} bytes is over --max-file-size "
                                             f"{cap:,} (a {kind} file cannot be cut)", path=sf.display)
                    return None
                data = head + fh.readall() if len(head) == SNIFF_BYTES else head
            else:
                comp = ""
                if is_binary(head):
                    report.skip("binary", path=sf.display)
                    return None
                if len(head) < SNIFF_BYTES:
                    data = head
                elif limit < 0:
                    data = head + fh.readall()
                else:
                    data = head + read_up_to(fh, limit + 1 - len(head))
    except OSError as exc:
        reason, words = os_failure(exc, sf.path)
        report.skip(reason, f"skipped {sf.display}: {words}", path=sf.display)
        return None
    except formats.Unreadable as exc:
        report.skip(exc.reason, str(exc) or None, path=sf.display)
        return None
    try:
        decoded = child if child is not None else decode_kind(data, kind, comp, sf, options, cut)
        if child is None and decoded is not None and len(decoded.data) >= decode.CHILD_PARSE_BYTES \
                and decoded.kind.split(",")[0] in ("json", "jsonl", "csv", "tsv"):
            decode.decoder(options).parse(decoded, sf, options)
    except formats.Unreadable as exc:
        report.skip(exc.reason, str(exc), path=sf.display)
        return None
    if decoded is None:
        report.skip("binary", path=sf.display)
        return None
    if decoded.truncated:
        report.warnings.append(f"truncated {sf.display} to its first {len(decoded.data):,} of "
                               f"{'its decompressed bytes' if comp else f'{sf.size:,} bytes'} (--truncate-large)")
    if not decoded.text:
        report.skip("empty", path=sf.display)
        return None
    report.count_decoded(decoded.notes)
    return decoded


def compression_of(data: bytes) -> str:
    """The compression whose magic bytes start ``data`` (``gz``, ``bz2``, ``xz``), or ``""``."""
    return next((tag for tag, magic in formats.COMPRESSIONS.values() if data.startswith(magic)), "")


def read_piped(data: bytes, sf: SourceFile, options: CorpusOptions, report: LoadReport) -> Decoded | None:
    """Compressed bytes piped in (``sf`` is ``<stdin>``), read exactly as a compressed file is
    (:func:`read_source`: decompressed in the confined decoder, within ``--max-file-size``), from
    a private temporary copy (a 0700 folder, removed at once); ``None`` when it was skipped
    (counted in ``report`` under ``sf``'s name)."""
    import tempfile

    ext = next(ext for ext, (tag, _) in formats.COMPRESSIONS.items() if tag == compression_of(data))
    with tempfile.TemporaryDirectory(prefix="rlm-stdin-") as folder:
        path = os.path.join(folder, f"stdin{ext}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
        with open(fd, "wb") as fh:
            fh.write(data)
        return read_source(SourceFile(sf.display, path, len(data), 0), options, report)


def decode_kind(data: bytes, kind: str, comp: str, sf: SourceFile, options: CorpusOptions,
                cut: bool) -> Decoded | None:
    """Turn a file's (decompressed) bytes into text by its kind; ``None`` when they are binary.

    Raises:
        formats.Unreadable: the file cannot be read as its kind.
    """
    tags = [kind] if kind else []
    if kind == "pdf":
        text = formats.pdf_text(data, sf.display)
        return Decoded(text, text.encode("utf-8", "surrogatepass"), "utf-8", kind=",".join(tags + [comp] * bool(comp)))
    if kind in ("parquet", "excel"):
        text, payload = formats.table_file(kind, data, sf.display, options.max_file_size, options.truncate_large)
        return Decoded(text, text.encode("utf-8", "surrogatepass"), "utf-8", kind=",".join(tags + [comp] * bool(comp)),
                       payload=payload)
    if comp and is_binary(data[:SNIFF_BYTES]):
        return None
    limit = options.max_file_size if options.truncate_large else -1
    if not comp and 0 <= limit < len(data):
        data, cut = data[:limit], True
    if cut:
        data = trim_partial_utf8(data)
    decoded = decode_bytes(data)
    decoded.truncated = cut
    if kind == "notebook":
        cells = formats.notebook_text(decoded.text)
        if cells is None:
            tags = []  # not a notebook's JSON: kept as the text it is
        else:
            decoded = Decoded(cells, cells.encode("utf-8", "surrogatepass"), decoded.encoding, cut)
    decoded.kind = ",".join(tags + [comp] * bool(comp))
    return decoded


def read_up_to(fh: object, n: int) -> bytes:
    """Up to ``n`` bytes from the binary file object ``fh`` (fewer only at its end), however few
    each ``read`` returns.

    Raises:
        OSError: reading failed.
    """
    parts: list[bytes] = []
    got = 0
    while got < n:
        piece = fh.read(n - got)  # type: ignore[attr-defined]
        if not piece:
            break
        parts.append(piece)
        got += len(piece)
    return b"".join(parts)
