"""File kinds beyond plain text: compressed files, PDFs, notebooks, Parquet and Excel tables.

Every function here turns a file's bytes into the text that goes into ``context`` (and, for
tables, the parsed payload of ``rlm_cli.corpus.structured``), or raises :class:`Unreadable`
with the skip reason and a warning naming the file. The kind comes from the file name
(:func:`kind_of`):

* ``.gz``, ``.bz2``, ``.xz``: decompressed with the standard library (``gzip``, ``bz2``,
  ``lzma``) when the file starts with that format's magic bytes; what is inside is then read by
  its own name (``app.log.gz`` is a log, ``rows.jsonl.gz`` JSONL). The decompressed size counts
  against ``--max-file-size`` and decompression stops one byte past it, so a decompression bomb
  costs at most that much memory.
* ``.pdf``: each page's text through pypdf (the ``documents`` extra), after a line
  ``--- page N ---``, so a line of ``read_file`` can be cited as a page. An encrypted PDF
  (one that the empty password does not open) or one pypdf cannot read is skipped.
* ``.ipynb``: the cells' source and text outputs (``# %% [code] cell 3`` before each cell, the
  percent format of Jupytext and VS Code), never the JSON around them or images.
* ``.parquet`` (pyarrow) and ``.xlsx``/``.xlsm`` (openpyxl), through pandas (the ``data``
  extra): the table as CSV text (an Excel sheet after a line ``## sheet NAME``) and as a payload.
* ``.json``, ``.jsonl``/``.ndjson``, ``.csv``, ``.tsv``: read as text; the store parses them.

Optional libraries are imported only when such a file is met.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import re
from array import array
from typing import Any

from rlm_cli.corpus import structured

#: Compression suffixes and the magic bytes a file must start with.
COMPRESSIONS = {".gz": ("gz", b"\x1f\x8b"), ".bz2": ("bz2", b"BZh"), ".xz": ("xz", b"\xfd7zXZ\x00")}
#: Kinds by (lowercased) extension; anything else is plain text.
KINDS = {".json": "json", ".geojson": "json", ".jsonl": "jsonl", ".ndjson": "jsonl", ".jsonlines": "jsonl",
         ".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".parquet": "parquet", ".pq": "parquet",
         ".xlsx": "excel", ".xlsm": "excel", ".pdf": "pdf", ".ipynb": "notebook"}
#: Kinds read from binary files (never sniffed as text).
BINARY_KINDS = ("pdf", "parquet", "excel")
#: The pip extra that brings each optional reader: the one table every install hint is made from
#: (:func:`missing_reader`; ``pyproject.toml``'s ``[project.optional-dependencies]`` has each).
EXTRA_FOR = {"pdf": "documents", "parquet": "data", "excel": "data"}
#: What reading a file of each kind of :data:`EXTRA_FOR` needs: its name, and the libraries.
_LIBRARIES = {"pdf": ("PDF", "pypdf"), "parquet": ("Parquet", "pandas and pyarrow"),
              "excel": ("Excel", "pandas and openpyxl")}
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class Unreadable(Exception):
    """A file that cannot be read as its kind: ``reason`` is the skip reason counted in the
    summary (``encrypted``, ``corrupt``, ``too large``, ``extra not installed``, ``unreadable``,
    ``no text``), the message the warning shown on stderr."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def missing_reader(kind: str) -> str:
    """Why a file of ``kind`` (a key of :data:`EXTRA_FOR`) is not read while its extra is not
    installed, and how to install it: ``reading PDF files needs pypdf: pip install
    '/path/to/rlm[documents]' (the documents extra, or the wheel with [documents])``.

    Raises:
        KeyError: ``kind`` needs no extra.
    """
    shown, libraries = _LIBRARIES[kind]
    extra = EXTRA_FOR[kind]
    return (f"reading {shown} files needs {libraries}: "
            f"pip install '/path/to/rlm[{extra}]' (the {extra} extra, or the wheel with [{extra}])")


def kind_of(name: str) -> tuple[str, str]:
    """``(kind, compression)`` of a file name: ``("jsonl", "gz")`` for ``rows.jsonl.gz``,
    ``("", "xz")`` for ``app.log.xz``, ``("", "")`` for plain text. Case-insensitive."""
    low = name.rsplit("/", 1)[-1].lower()
    comp = ""
    for ext, (tag, _) in COMPRESSIONS.items():
        if low.endswith(ext) and len(low) > len(ext):
            comp, low = tag, low[:-len(ext)]
            break
    dot = low.rfind(".")
    return (KINDS.get(low[dot:], "") if dot > 0 else ""), comp


def magic_matches(comp: str, head: bytes) -> bool:
    """Whether ``head`` starts with the magic bytes of compression ``comp``."""
    return any(tag == comp and head.startswith(magic) for tag, magic in COMPRESSIONS.values())


def decompress(fh: Any, comp: str, cap: int, shown: str) -> tuple[bytes, bool]:
    """Decompress the file object ``fh`` (positioned at its start) up to ``cap`` bytes.

    Returns ``(data, over)``: at most ``cap`` bytes, and whether the content goes on past them
    (the caller skips or truncates).

    Raises:
        Unreadable: ``corrupt`` for a truncated or damaged stream.
    """
    import bz2
    import gzip
    import lzma

    opener: Any = {"gz": gzip.GzipFile, "bz2": bz2.BZ2File, "xz": lzma.LZMAFile}[comp]
    try:
        with opener(fileobj=fh) if comp == "gz" else opener(fh) as dec:
            data = dec.read(cap + 1)
    except (EOFError, OSError, lzma.LZMAError, ValueError, MemoryError) as exc:
        what = "truncated" if isinstance(exc, EOFError) else "damaged"
        raise Unreadable("corrupt", f"skipped {shown}: the {comp} data is {what} ({exc})") from None
    return data[:cap], len(data) > cap


def pdf_text(data: bytes, shown: str) -> str:
    """The text of a PDF, each page after a line ``--- page N ---`` (1-based).

    Raises:
        Unreadable: pypdf is missing (``extra not installed``), the PDF is encrypted, cannot be
            read (``unreadable``) or has no text layer (``no text``: a scanned document).
    """
    try:
        import pypdf
    except ImportError:
        raise Unreadable("extra not installed", f"skipped {shown}: {missing_reader('pdf')}") from None
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its warnings about odd files would reach stderr
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:
                opened = reader.decrypt("")
            except Exception as exc:  # noqa: BLE001 - pypdf raises several types (DependencyError...)
                raise Unreadable("encrypted", f"skipped {shown}: the PDF is encrypted ({exc})") from None
            if not opened:
                raise Unreadable("encrypted", f"skipped {shown}: the PDF is encrypted with a password")
        parts: list[str] = []
        chars = 0
        for i, page in enumerate(reader.pages, 1):
            try:
                text = (page.extract_text() or "").strip("\n")
            except Exception as exc:  # noqa: BLE001 - one bad page must not lose the others
                text = f"[the text of this page could not be extracted: {type(exc).__name__}]"
            chars += len(text.strip())
            parts.append(f"--- page {i} ---\n{text}\n" if text else f"--- page {i} ---\n")
    except Unreadable:
        raise
    except Exception as exc:  # noqa: BLE001 - a malformed PDF makes pypdf raise nearly anything
        raise Unreadable("unreadable", f"skipped {shown}: not a readable PDF ({type(exc).__name__}: {exc})") from None
    if not chars:
        raise Unreadable("no text", f"skipped {shown}: the PDF has no text layer (a scanned document?)")
    return "".join(parts)


def notebook_text(text: str) -> str | None:
    """A Jupyter notebook's cells as text: ``# %% [markdown] cell 1`` then the source; a code
    cell's text outputs follow under ``# Out:`` (streams, ``text/plain`` results, errors without
    ANSI colours). ``None`` when ``text`` is not a notebook's JSON."""
    try:
        nb = json.loads(text)
        cells = nb["cells"] if "cells" in nb else nb["worksheets"][0]["cells"]  # nbformat 4, else 3
        if not isinstance(cells, list):
            return None
    except (ValueError, KeyError, TypeError, IndexError, RecursionError):
        return None
    out: list[str] = []
    for i, cell in enumerate(cells, 1):
        if not isinstance(cell, dict):
            continue
        kind = str(cell.get("cell_type", "code"))
        out.append(f"# %% [{kind}] cell {i}\n{_joined(cell.get('source', cell.get('input', ''))).rstrip()}\n")
        for o in cell.get("outputs", []) if isinstance(cell.get("outputs"), list) else []:
            if not isinstance(o, dict):
                continue
            t = o.get("output_type")
            if t == "stream":
                body = _joined(o.get("text", ""))
            elif t in ("execute_result", "display_data", "pyout"):
                data = o.get("data", o)
                body = _joined(data.get("text/plain", data.get("text", ""))) if isinstance(data, dict) else ""
            elif t in ("error", "pyerr"):
                trace = o.get("traceback")  # a list of lines; a file may hold anything
                body = f"{o.get('ename', '')}: {o.get('evalue', '')}\n" + _ANSI.sub("", "\n".join(
                    x for x in (trace if isinstance(trace, list) else []) if isinstance(x, str)))
            else:
                body = ""
            if body.strip():
                out.append(f"# Out:\n{body.rstrip()}\n")
        out.append("\n")
    return "".join(out)


def _joined(value: Any) -> str:
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return value if isinstance(value, str) else ""


# -- Parquet and Excel through pandas ----------------------------------------------------------------

def table_file(kind: str, data: bytes, shown: str, cap: int, truncate: bool) -> tuple[str, dict[str, Any]]:
    """Read a Parquet file or an Excel workbook: ``(text for context, payload)``.

    The text is CSV (each Excel sheet after a line ``## sheet NAME``); the payload holds one
    table per sheet, each row's ``lines`` entry pointing at its line of that text. Values become
    plain Python values (dates as ISO text; ``dtypes`` records the pandas types for ``frame()``).
    A text over ``cap`` bytes is cut at a row when ``truncate``, else the file is skipped.

    Raises:
        Unreadable: pandas or its engine is missing (``extra not installed``), the file cannot be
            read, or its text is over ``cap``.
    """
    what = _LIBRARIES[kind][0]
    hint = missing_reader(kind)
    try:
        import pandas as pd
    except ImportError:
        raise Unreadable("extra not installed", f"skipped {shown}: {hint}") from None
    try:
        if kind == "parquet":
            frames: dict[Any, Any] = {None: pd.read_parquet(io.BytesIO(data))}
        else:
            frames = pd.read_excel(io.BytesIO(data), sheet_name=None)
    except ImportError:
        raise Unreadable("extra not installed", f"skipped {shown}: {hint}") from None
    except Exception as exc:  # noqa: BLE001 - the engines raise many types for a damaged file
        raise Unreadable("unreadable", f"skipped {shown}: not a readable {what} file ({type(exc).__name__}: "
                                       f"{exc})") from None
    parts: list[str] = []
    one = io.StringIO()
    writer = csv.writer(one, lineterminator="\n")

    def render(row: list[Any]) -> str:
        one.seek(0)
        one.truncate()
        writer.writerow(["" if v is None else v for v in row])
        return one.getvalue()

    tables: list[dict[str, Any]] = []
    line = 1
    for name, df in frames.items():
        if name is not None:
            parts.append(f"## sheet {name}\n")
            line += 1
        keys = structured.column_names([str(c) for c in df.columns])
        cols: list[list[Any]] = [[_plain(v) for v in df[c].tolist()] for c in df.columns]
        parts.append(render(keys))
        line += parts[-1].count("\n")
        lines = array("I")
        for row in zip(*cols, strict=True):
            parts.append(render(list(row)))
            lines.append(line)
            line += parts[-1].count("\n")
        dtypes = {k: str(df[c].dtype) for k, c in zip(keys, df.columns, strict=True)}
        tables.append({"name": None if name is None else str(name), "n": len(lines), "lines": lines.tobytes(),
                       "keys": keys, "cols": cols, "extra": {}, "full": True, "dtypes": dtypes})
    text = "".join(parts)
    nbytes = len(text.encode())
    if nbytes > cap:
        if not truncate:
            raise Unreadable("too large", f"skipped {shown}: its text is {nbytes:,} bytes, over --max-file-size "
                                          f"{cap:,} (raise it, or --truncate-large keeps the first rows)")
        text, tables = _cut_tables(text, tables, cap)
    return text, {"kind": kind, "tables": tables}


def _cut_tables(text: str, tables: list[dict[str, Any]], cap: int) -> tuple[str, list[dict[str, Any]]]:
    """Keep the rows whose text ends within ``cap`` bytes (whole lines only)."""
    head = text.encode()[:cap].decode("utf-8", "ignore")
    head = head[:head.rfind("\n") + 1]
    last_line = head.count("\n")
    out = []
    for t in tables:
        lines = array("I")
        lines.frombytes(t["lines"])
        n = sum(1 for ln in lines if ln <= last_line)
        out.append(dict(t, n=n, lines=lines[:n].tobytes(), cols=[c[:n] for c in t["cols"]]))
    return head, out


def _plain(v: Any) -> Any:
    """A pandas/numpy cell as a plain value marshal can store: numbers, text, bools, None
    (for NaN/NaT too), lists and dicts; dates and times as ISO text; anything else as ``str``."""
    if v is None or isinstance(v, (bool, int, str, bytes)):
        return v
    if isinstance(v, float):
        return None if v != v else v
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "tolist") and not hasattr(v, "isoformat"):  # numpy scalars and arrays
        return _plain(v.tolist())
    try:
        if v != v:  # NaT, pd.NA compare unequal (pd.NA raises TypeError on bool())
            return None
    except TypeError:
        return None
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return str(v)
