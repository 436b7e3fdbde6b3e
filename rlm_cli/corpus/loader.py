"""Read and decode the files a walk found (``rlm_cli.corpus.walk``), safely, and the report both
pass along: :class:`LoadReport` (the file and text records, :class:`SourceFile` and
:class:`Decoded`, and the decodings are ``rlm_cli.corpus.decoding``'s).

Rules (see :func:`read_source`):

* a file is opened non-blocking and read only if it is still a regular file; FIFOs, sockets and
  devices are never read;
* a file over ``max_file_size`` bytes is truncated to that size with ``truncate_large``;
* binary files (a NUL byte, or more than 30% control bytes, in the first 8 KiB) are skipped;
* text is decoded as ``rlm_cli.corpus.decoding`` says (UTF-8, UTF-16/32 by BOM, Latin-1 for a
  legacy 8-bit file); decoding never raises.

Everything skipped is counted by reason in a :class:`LoadReport`, which the summary line and the
empty-corpus error read.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import file_kinds, nofollow
from rlm_cli.corpus.decoding import (
    BINARY_RATIO,
    SNIFF_BYTES,
    Decoded,
    SourceFile,
    compression_of,
    decode,
    decode_bytes,
    decode_kind,
    is_binary,
    read_up_to,
    trim_partial_utf8,
)

#: Re-exported: the records and decodings of ``decoding`` were this module's, and are still read here.
__all__ = ["BINARY_RATIO", "SNIFF_BYTES", "Decoded", "LoadReport", "SourceFile", "compression_of", "decode",
           "decode_bytes", "decode_kind", "is_binary", "read_source", "read_up_to", "trim_partial_utf8"]

#: Warnings kept per skip reason (the summary still counts every file).
MAX_WARNINGS_PER_REASON = 20



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


def os_failure(exc: OSError, path: str | bytes) -> tuple[str, str]:
    """``(skip reason, words)`` for an ``OSError`` met opening, listing or reading ``path``: a path
    over the system's limit is ``path too long`` (permissions are not the problem), anything else
    ``unreadable`` with the system's words."""
    if exc.errno == errno.ENAMETOOLONG:
        size = len(os.fsencode(path))
        return "path too long", f"its path is {size:,} bytes, over what the system allows (PATH_MAX, 4,096 on Linux)"
    return "unreadable", str(exc.strerror or exc)


def binary_anyway(path: str, real: str) -> bool:
    """Whether a file too large to read would be skipped as binary all the same: a name
    (``path``'s, as :func:`read_source` judges it) of no compressed or document kind whose first
    8 KiB are binary (:func:`is_binary`). Reads only those 8 KiB, of the file at real path
    ``real`` opened without following a link (``nofollow.open_file``: non-blocking); ``False``
    when it cannot."""
    kind, comp = file_kinds.kind_of(path)
    if comp or kind in file_kinds.BINARY_KINDS or kind == "notebook":
        return False
    try:
        fd = nofollow.open_file(real)
        with open(fd, "rb", buffering=0) as fh:
            return stat.S_ISREG(os.fstat(fd).st_mode) and is_binary(read_up_to(fh, SNIFF_BYTES))
    except OSError:
        return False


#: The skip reason of a file that changed into another (a symlink, another file) between the walk
#: that checked it and its reading.
REPLACED = "replaced while loading"


def open_checked(sf: SourceFile, report: LoadReport) -> tuple[int, os.stat_result] | None:
    """Open the file ``sf`` at its real path (``sf.real``, resolved and checked by the walk) a
    component at a time without following a symlink anywhere on the way (``nofollow.open_file``:
    non-blocking, close-on-exec), and check on the open descriptor (``fstat``) that it is a regular
    file, and the very file the walk checked (its device and inode). A path or folder swapped for a
    link, or for another file, between the walk and the read (a race) is never read. Returns the
    descriptor and its ``fstat`` (judge the file by that); ``None`` when it is not the file
    (counted in ``report``).

    Raises:
        OSError: the file cannot be opened (not a swap).
    """
    assert sf.path is not None
    try:
        fd = nofollow.open_file(sf.real if sf.real is not None else os.path.realpath(sf.path))
    except nofollow.Replaced:
        report.skip(REPLACED, f"skipped {sf.display}: it, or a folder on its way, became a symlink after the corpus "
                              "was listed (not followed)", path=sf.display)
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            report.skip("special file", f"skipped {sf.display}: not a regular file", path=sf.display)
        elif sf.ino and (st.st_ino != sf.ino or (sf.dev and st.st_dev != sf.dev)):
            report.skip(REPLACED, f"skipped {sf.display}: another file took its place after the corpus was "
                                  "listed (not read)", path=sf.display)
        else:
            return fd, st
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
    files are turned into text by ``rlm_cli.corpus.file_kinds`` (their decompressed or rendered
    size counts against ``--max-file-size``) in the confined decoder (``rlm_cli.corpus.decode``,
    which also parses large JSON, JSONL, CSV and TSV files); one that cannot be read, or that
    exceeds the decoder's limits, is skipped with a warning.
    """
    from rlm_cli.corpus import decode

    assert sf.path is not None
    kind, comp = file_kinds.kind_of(sf.path)
    cap = options.max_file_size
    limit = cap if options.truncate_large else -1
    cut = False
    child: Decoded | None = None
    try:
        opened = open_checked(sf, report)
        if opened is None:
            return None
        fd, size = opened[0], opened[1].st_size  # (judged by what was opened, not by the walk's stat)
        with open(fd, "rb", buffering=0) as fh:
            if size > cap and not options.truncate_large:  # (it grew since the walk)
                report.skip("too large", f"skipped {sf.display}: {size:,} bytes is over --max-file-size {cap:,}",
                            path=sf.display)
                return None
            head = read_up_to(fh, SNIFF_BYTES)
            if decode.in_child(kind, comp, head):
                child, data = decode.decoder(options).decode_file(fd, sf, kind, comp, options), b""
            elif comp and file_kinds.magic_matches(comp, head):
                fh.seek(0)
                data, cut = file_kinds.decompress(fh, comp, cap, sf.display)
                if cut and not options.truncate_large:
                    report.skip("too large", f"skipped {sf.display}: over --max-file-size {cap:,} bytes once "
                                             "decompressed (raise it, or --truncate-large keeps the start)",
                                path=sf.display)
                    return None
                head = data[:SNIFF_BYTES]
            elif kind in file_kinds.BINARY_KINDS:
                comp = ""
                if size > cap:
                    report.skip("too large", f"skipped {sf.display}: {size:,} bytes is over --max-file-size "
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
    except file_kinds.Unreadable as exc:
        report.skip(exc.reason, str(exc) or None, path=sf.display)
        return None
    try:
        decoded = child if child is not None else decode_kind(data, kind, comp, sf, options, cut)
        if child is None and decoded is not None and len(decoded.data) >= decode.CHILD_PARSE_BYTES \
                and decoded.kind.split(",")[0] in ("json", "jsonl", "csv", "tsv"):
            decode.decoder(options).parse(decoded, sf, options)
    except file_kinds.Unreadable as exc:
        report.skip(exc.reason, str(exc), path=sf.display)
        return None
    return _counted(decoded, sf, comp, report)


def _counted(decoded: Decoded | None, sf: SourceFile, comp: str, report: LoadReport) -> Decoded | None:
    """``decoded`` (the text of ``sf``, compressed as ``comp``) counted in ``report``: ``None`` when
    it is binary or empty (a skip), a warning when it was cut (``--truncate-large``)."""
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


def read_piped(data: bytes, sf: SourceFile, options: CorpusOptions, report: LoadReport) -> Decoded | None:
    """Compressed bytes piped in (``sf`` is ``<stdin>``), read exactly as a compressed file is
    (:func:`read_source`: decompressed in the confined decoder, within ``--max-file-size``), from
    a private temporary copy (a 0700 folder, removed at once); ``None`` when it was skipped
    (counted in ``report`` under ``sf``'s name)."""
    import tempfile

    ext = next(ext for ext, (tag, _) in file_kinds.COMPRESSIONS.items() if tag == compression_of(data))
    with tempfile.TemporaryDirectory(prefix="rlm-stdin-") as folder:
        path = os.path.join(folder, f"stdin{ext}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
        with open(fd, "wb") as fh:
            fh.write(data)
        return read_source(SourceFile(sf.display, path, len(data), 0), options, report)
