"""Bytes to text: the record of a file selected for reading (:class:`SourceFile`), the record of
its decoded text (:class:`Decoded`), binary sniffing, the text decodings and the reading of a
file's bytes by its kind (:func:`decode_kind`).

Shared by the loader in rlm's process (``rlm_cli.corpus.loader``) and the confined document
decoder's child (``rlm_cli.corpus.decode_child``); it imports neither, so neither imports the
other through it.

Decoding rules: text is decoded as UTF-8 (BOM stripped), UTF-16/UTF-32 when a BOM says so, and
otherwise as Latin-1 when invalid UTF-8 sequences outnumber valid multi-byte characters (a
legacy 8-bit file); a mostly-UTF-8 file keeps its valid characters and reads each byte that is
not part of valid UTF-8 as Latin-1 (no byte is lost or replaced by U+FFFD). Decoding never raises.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Any

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import file_kinds, surrogates

#: Bytes inspected for binary detection (the same window git and ripgrep use).
SNIFF_BYTES = 8192
#: Share of control bytes in the sniff window above which a file counts as binary.
BINARY_RATIO = 0.30

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
    ``--follow``). ``real`` is the real path the walk resolved (once) and checked to lie inside
    the corpus: the file is opened there, a component at a time without following a link
    anywhere (``rlm_cli.corpus.nofollow``), and what is opened must be the file the walk checked
    (``loader.open_checked``); ``None``: ``path`` is resolved when it is read."""

    display: str
    path: str | None
    size: int
    mtime_ns: int
    ctime_ns: int = 0
    ino: int = 0
    dev: int = 0
    link: bool = False
    real: str | None = None


@dataclass(slots=True)
class Decoded:
    """A file's text, the UTF-8 bytes of that text, how it was decoded, and whether only its
    head was kept (``--truncate-large``). ``kind`` is what the file was read as, comma-separated
    (``""`` plain text; ``pdf``, ``notebook``, ``jsonl``, ``csv,gz``...: see
    ``rlm_cli.corpus.file_kinds``); ``payload`` the parsed table of a Parquet or Excel file."""

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


def compression_of(data: bytes) -> str:
    """The compression whose magic bytes start ``data`` (``gz``, ``bz2``, ``xz``), or ``""``."""
    return next((tag for tag, magic in file_kinds.COMPRESSIONS.values() if data.startswith(magic)), "")


def decode_kind(data: bytes, kind: str, comp: str, sf: SourceFile, options: CorpusOptions,
                cut: bool) -> Decoded | None:
    """Turn a file's (decompressed) bytes into text by its kind; ``None`` when they are binary.

    Raises:
        file_kinds.Unreadable: the file cannot be read as its kind.
    """
    tags = [kind] if kind else []
    if kind == "pdf":
        text = surrogates.text_of(file_kinds.pdf_text(data, sf.display))  # (a lone surrogate is U+FFFD)
        return Decoded(text, text.encode("utf-8", "surrogatepass"), "utf-8", kind=",".join(tags + [comp] * bool(comp)))
    if kind in ("parquet", "excel"):
        text, payload = file_kinds.table_file(kind, data, sf.display, options.max_file_size, options.truncate_large)
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
        cells = file_kinds.notebook_text(decoded.text)
        if cells is not None:
            cells = surrogates.text_of(cells)  # (a "\ud800" escape in a cell is U+FFFD)
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
