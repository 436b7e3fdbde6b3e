"""Parse structured files (JSON, JSONL/NDJSON, CSV/TSV) into the *payload* the REPL worker loads
as ``data[path]`` and ``records()``, and a small summary for the root model's metadata.

Parsing happens once, when a file is indexed; the payload is saved in the corpus bundle's data
file (``data-<digest>.bin``, one :mod:`marshal` blob per file) and reused from the cache like
chunks, so a second run on an unchanged folder parses nothing. :mod:`marshal` is used because
the worker (standard library only) loads it about ten times faster than ``json.loads`` parses
the original text (0.1 s against 1 s for 39 MB of JSONL) and because it can hold nothing but
plain values: it never runs code.

Payload layout (read by ``rlm_cli.sandbox.data_helpers``; change it only with
``protocol.BUNDLE_VERSION``):

* JSON: ``{"kind": "json", "value": obj, "lines": bytes | None}``; ``lines`` is an
  ``array("I")`` of the 1-based line where each element of a top-level array starts. An invalid
  file: ``{"kind": "json", "error": str, "line": int}``.
* Tables (``jsonl``, ``csv``, ``tsv``, ``accesslog`` from ``rlm_cli.corpus.accesslog``, and
  ``parquet``/``excel`` from ``file_kinds``):
  ``{"kind": str, "tables": [table, ...]}``, one table per sheet (one for the others). A table is
  ``{"name": sheet name or None, "n": rows, "lines": bytes (array("I"), the 1-based line of each
  row in the file's text), "keys": [column names], "cols": [one list of n values per key],
  "extra": {row index: value}, "full": bool}`` stored column by column: a row's dict is built
  only when it is read, which keeps a parsed table within about 1.5x the size of its text
  instead of about 4x for a list of dicts. A value of ``...`` (Ellipsis, never a JSON value)
  marks a key absent from that row; ``full`` says no column holds one. ``extra`` holds the rows
  that are not objects: a JSONL line that is an array or a scalar (its value), or a line that is
  not JSON (``{"_error": message, "_line": n, "_text": first 200 characters}``). A table whose
  rows share few keys (over 64 keys, four times more than a row has on average) is stored as
  ``"rows": [dict, ...]`` instead of ``keys``/``cols``.

CSV/TSV: the dialect comes from :class:`csv.Sniffer` on the first lines (delimiters ``,`` tab
``;`` ``|``), kept only if it splits those lines into a steady number of fields, else the
extension's delimiter. A quote that is never closed (the csv module then reads the rest of the file
as one field) or a line the csv module cannot read is reported in the summary as an error with
its line. The first row is the header (blank names become ``column_N``, repeated
ones ``name_2``...). A short row gets ``None`` for its missing fields, a long one an ``_extra``
list (both counted as ``ragged``). Values stay strings unless every non-empty value of the
column is an integer (without leading zeros, so ``007`` and ZIP codes stay text) or a decimal
number; empty cells of a numeric column become ``None``.
"""

from __future__ import annotations

import csv
import gc
import io
import json
import marshal
import re
from array import array
from collections import Counter
from typing import Any

from rlm_cli.corpus import surrogates

#: Kinds parsed here (by extension, see ``file_kinds.kind_of``).
TEXT_DATA_KINDS = ("json", "jsonl", "csv", "tsv")
#: Kinds whose payload is a list of tables (rows for ``records()``).
TABLE_KINDS = ("jsonl", "csv", "tsv", "parquet", "excel", "accesslog")
#: Marks a key absent from a row in a column (no JSON value is Ellipsis).
MISSING = ...
#: Strings up to this length are shared between rows ("open", "high"...): marshal then stores
#: them once and the worker holds one object per distinct value.
SHARE_MAX_CHARS = 64
#: Characters of a bad JSONL line kept in its error entry.
ERROR_TEXT_CHARS = 200
#: Lines given to csv.Sniffer (and used to check its answer).
SNIFF_LINES = 50
SNIFF_CHARS = 32_768
#: Keys shown per file in the summary, and characters per sample value.
SUMMARY_KEYS = 16
SAMPLE_KEYS = 6
SAMPLE_CHARS = 40

_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(r"[-+]?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_WS = re.compile(r"[ \t\n\r]*")


def parse(kind: str, text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Parse the text of a ``json``, ``jsonl``, ``csv`` or ``tsv`` file.

    Returns ``(payload, summary)``: the payload of the module docstring and the summary of
    :func:`summarize`. Never raises for bad content (a bad line or file becomes an error entry).

    The cyclic garbage collector is paused meanwhile: the millions of tuples and containers a
    big file makes would trigger full collections that find nothing (a third of the time).

    Raises:
        ValueError: ``kind`` is not one of :data:`TEXT_DATA_KINDS`.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        payload = _parse(kind, text)
        if kind in ("json", "jsonl") and surrogates.escaped(text):
            try:
                payload = surrogates.value_of(payload)  # (a lone "\ud800" is U+FFFD: docs/usage.md)
            except RecursionError:
                payload = {"kind": "json", "error": "nested too deeply to parse", "line": 1}
    finally:
        if enabled:
            gc.enable()
    return payload, summarize(payload)


def _parse(kind: str, text: str) -> dict[str, Any]:
    if kind == "json":
        payload = parse_json(text)
    elif kind == "jsonl":
        payload = {"kind": "jsonl", "tables": [parse_jsonl(text)]}
    elif kind in ("csv", "tsv"):
        table, dialect = parse_csv(text, "\t" if kind == "tsv" else ",")
        payload = {"kind": kind, "tables": [table], "delimiter": dialect}
    else:
        raise ValueError(f"not a text data kind: {kind!r}")
    return payload


def encode(payload: dict[str, Any]) -> bytes:
    """The payload as bytes for the data file (:func:`marshal.dumps`, version 4).

    A value too deeply nested for marshal (over about 2,000 levels) is replaced by an error
    payload rather than raising.
    """
    try:
        return marshal.dumps(payload, 4)
    except ValueError as exc:
        return marshal.dumps({"kind": payload.get("kind", "json"), "error": f"cannot store the parsed value ({exc})",
                              "line": 1}, 4)


# -- JSON ------------------------------------------------------------------------------------------

def parse_json(text: str) -> dict[str, Any]:
    """A JSON document: its value, and for a top-level array the line where each element starts.

    A file of one JSON object per line misnamed ``.json`` (json.loads says "Extra data") is read
    as JSONL instead (``{"kind": "jsonl", "tables": [...], "misnamed": True}``).
    """
    value, lines = _json_array(text)
    if lines is not None:
        return {"kind": "json", "value": value, "lines": lines.tobytes()}
    try:
        value = json.loads(text)
    except RecursionError:
        return {"kind": "json", "error": "nested too deeply to parse", "line": 1}
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError) and exc.msg == "Extra data":
            table = parse_jsonl(text)
            if table["n"] > 1 and not any(isinstance(v, dict) and "_error" in v for v in table["extra"].values()):
                return {"kind": "jsonl", "tables": [table], "misnamed": True}
        line = exc.lineno if isinstance(exc, json.JSONDecodeError) else 1
        return {"kind": "json", "error": str(exc), "line": line}
    return {"kind": "json", "value": value, "lines": None}


def _json_array(text: str) -> tuple[list[Any] | None, array[int] | None]:
    """A top-level JSON array decoded element by element (to learn each element's line), or
    ``(None, None)`` when the text is not a valid array (the caller then reports the error)."""
    def ws(text: str, pos: int) -> int:
        m = _WS.match(text, pos)  # always matches (possibly empty)
        return m.end() if m else pos

    pos = ws(text, 0)
    if not text.startswith("[", pos):
        return None, None
    decode = json.JSONDecoder().raw_decode
    out: list[Any] = []
    lines = array("I")
    line, counted = 1, 0
    pos = ws(text, pos + 1)
    if text.startswith("]", pos):
        return (out, lines) if not text[ws(text, pos + 1):] else (None, None)
    try:
        while True:
            line += text.count("\n", counted, pos)
            counted = pos
            value, pos = decode(text, pos)
            out.append(value)
            lines.append(line)
            pos = ws(text, pos)
            if text.startswith(",", pos):
                pos = ws(text, pos + 1)
                continue
            if text.startswith("]", pos) and ws(text, pos + 1) == len(text):
                return out, lines
            return None, None
    except (ValueError, RecursionError):
        return None, None


# -- JSONL -----------------------------------------------------------------------------------------

def parse_jsonl(text: str) -> dict[str, Any]:
    """One JSON value per line (blank lines skipped) into a column-wise table (module docstring).

    Rows are gathered as tuples in runs sharing one key order, then turned into columns with
    ``zip`` (in C): about 1 microsecond per row on top of ``json.loads``.
    """
    runs: list[tuple[tuple[str, ...], list[tuple[Any, ...]]]] = []  # (key order, rows' values)
    lines = array("I")
    extra: dict[int, Any] = {}
    loads = json.loads
    order: tuple[str, ...] | None = None
    bucket: list[tuple[Any, ...]] = []
    n = 0
    for lineno, raw in enumerate(text.split("\n"), 1):
        try:
            value = loads(raw)
        except (ValueError, RecursionError) as exc:
            s = raw.strip()
            if not s:
                continue  # a blank line
            value = extra[n] = {"_error": _error_text(exc), "_line": lineno, "_text": s[:ERROR_TEXT_CHARS]}
        if type(value) is dict and n not in extra:
            keys = tuple(value)
            if keys != order:
                order, bucket = keys, []
                runs.append((keys, bucket))
            bucket.append(tuple(value.values()))
        else:
            extra.setdefault(n, value)
            order, bucket = (), []
            runs.append(((), bucket))
            bucket.append(())
        lines.append(lineno)
        n += 1
    return make_table(None, *_columns(runs, n), lines, n, extra)


def _columns(runs: list[tuple[tuple[str, ...], list[tuple[Any, ...]]]], n: int) -> tuple[list[str], list[list[Any]]]:
    """Columns (the union of keys, in first-seen order) from runs of rows sharing a key order;
    a key absent from a run is :data:`MISSING` there. Short strings are shared (module docstring)."""
    index: dict[str, int] = {}
    for keys, _ in runs:
        for k in keys:
            index.setdefault(k, len(index))
    cols: list[list[Any]] = [[] for _ in index]
    for keys, rows in runs:
        at = {index[k]: j for j, k in enumerate(keys)}
        values = list(zip(*rows, strict=True)) if keys else []
        for i, col in enumerate(cols):
            j = at.get(i)
            col.extend(values[j] if j is not None else [MISSING] * len(rows))
    for i, col in enumerate(cols):
        cols[i] = shared_strings(col)
    return list(index), cols


def shared_strings(col: list[Any]) -> list[Any]:
    """``col`` with equal strings of up to :data:`SHARE_MAX_CHARS` characters made one object
    (only for columns of strings, None and MISSING: ``1 == 1.0 == True`` must not merge)."""
    types = set(map(type, col))
    if str not in types or not types <= {str, type(None), type(MISSING)}:
        return col
    memo: dict[Any, Any] = {}
    share = memo.setdefault
    return [share(v, v) if v.__class__ is str and len(v) <= SHARE_MAX_CHARS else v for v in col]


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply to parse"
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at column {exc.colno}"
    return str(exc)


def make_table(name: str | None, keys: list[str], cols: list[list[Any]], lines: array[int], n: int,
               extra: dict[int, Any]) -> dict[str, Any]:
    """Assemble a table; a sparse one (many keys, few per row) is stored as row dicts."""
    full = not extra and all(MISSING not in col for col in cols) if n else True
    if len(keys) > 64 and n:
        present = sum(n - col.count(MISSING) for col in cols) / n
        if len(keys) > 4 * present:
            rows = [extra[i] if i in extra else {k: v for k, v in zip(keys, vals, strict=True) if v is not MISSING}
                    for i, vals in enumerate(zip(*cols, strict=True))]
            return {"name": name, "n": n, "lines": lines.tobytes(), "rows": rows, "keys": keys}
    return {"name": name, "n": n, "lines": lines.tobytes(), "keys": keys, "cols": cols, "extra": extra, "full": full}


# -- CSV / TSV -------------------------------------------------------------------------------------

def parse_csv(text: str, default_delimiter: str) -> tuple[dict[str, Any], str]:
    """A CSV/TSV text into a table (module docstring). Returns ``(table, delimiter used)``."""
    dialect = _dialect(text, default_delimiter)
    if csv.field_size_limit() < len(text):
        csv.field_size_limit(min(len(text) + 1, 2**31 - 1))  # a long quoted field is data, not an error
    reader = csv.reader(io.StringIO(text, newline=""), dialect)
    stopped: list[Any] | None = None
    header: list[str] | None = None
    rows: list[list[str]] = []
    lines = array("I")
    ragged = 0
    prev = 0
    try:
        for fields in reader:
            start, prev = prev + 1, reader.line_num
            if not fields or fields == [""]:
                continue
            if header is None:
                header = column_names(fields)
                continue
            rows.append(fields)
            lines.append(start)
    except csv.Error as exc:  # keep the rows read so far and say where it stopped
        stopped = [prev + 1, f"parsing stopped here: {exc}"]
    quote = getattr(dialect, "quotechar", None) or '"'
    if stopped is None and lines and text.count(quote) % 2:  # an odd number of quotes: one never closed
        stopped = [lines[-1], f"an unclosed {quote} makes the row at line {lines[-1]} run to the end of the file"]
    header = header or []
    width = len(header)
    cols: list[list[Any]] = [[] for _ in header]
    surplus: list[Any] = []
    for fields in rows:
        k = len(fields)
        if k != width:
            ragged += 1
            if k < width:
                fields = fields + [None] * (width - k)  # type: ignore[list-item]
        for col, v in zip(cols, fields, strict=False):
            col.append(v)
        surplus.append(fields[width:] if k > width else MISSING)
    shared: dict[str, str] = {}
    for i, col in enumerate(cols):
        cols[i] = _typed(col, shared)
    keys = list(header)
    if any(v is not MISSING for v in surplus):
        keys.append("_extra" if "_extra" not in keys else "_extra_fields")
        cols.append(surplus)
    table = make_table(None, keys, cols, lines, len(rows), {})
    table["ragged"] = ragged
    if stopped is not None:
        table["stopped"] = stopped
    return table, dialect.delimiter


def _dialect(text: str, default: str) -> type[csv.Dialect] | csv.Dialect:
    """The dialect that splits the first lines most steadily into 2+ fields: csv.Sniffer's, the
    extension's or another of ``, \\t ; |``; the extension's when none splits half the lines alike."""
    head = text[:SNIFF_CHARS]
    parts = head.split("\n")
    if len(parts) > SNIFF_LINES:
        head = "\n".join(parts[:SNIFF_LINES]) + "\n"
    elif len(head) == SNIFF_CHARS and len(parts) > 1:
        head = "\n".join(parts[:-1]) + "\n"  # drop the line the window cut
    fallback: Any = csv.excel_tab if default == "\t" else csv.excel
    candidates: list[Any] = [fallback]
    try:
        candidates.append(csv.Sniffer().sniff(head, delimiters=",\t;|"))
    except csv.Error:
        pass  # ragged lines defeat the sniffer: the candidates below are tried one by one
    candidates += [type("sniffed", (csv.excel,), {"delimiter": d}) for d in ",\t;|" if d != default]
    best = max(candidates, key=lambda d: _fit(head, d))  # the first of equals: the default, then the sniffer's
    return best if _fit(head, best)[0] >= 0.5 else fallback


def _fit(sample: str, dialect: Any) -> tuple[float, int]:
    """How well ``dialect`` splits the complete lines of ``sample``: ``(share of rows with the
    most common number of fields, that number)``; ``(0, 0)`` when that number is under 2."""
    try:
        rows = [r for r in csv.reader(io.StringIO(sample, newline=""), dialect) if r]
    except csv.Error:
        return 0.0, 0
    if len(rows) > 1 and not sample.endswith("\n"):
        rows = rows[:-1]  # the sample may cut the last row
    if not rows:
        return 0.0, 0
    width, count = Counter(len(r) for r in rows).most_common(1)[0]
    return (count / len(rows), width) if width >= 2 else (0.0, 0)


def column_names(fields: list[str]) -> list[str]:
    """Column names: stripped, blanks named ``column_N`` (1-based), repeats suffixed ``_2``, ``_3``."""
    out: list[str] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(fields, 1):
        name = raw.strip() or f"column_{i}"
        if name in seen:
            seen[name] += 1
            name = f"{name}_{seen[name]}"
            while name in seen:
                name += "_"
        seen.setdefault(name, 1)
        out.append(name)
    return out


def _typed(col: list[Any], shared: dict[str, str]) -> list[Any]:
    """A column converted to int or float when every non-empty value is one (module docstring),
    else its strings (short ones shared)."""
    values = [v for v in col if v is not None and v.strip()]
    if values and all(_INT.fullmatch(v.strip()) for v in values):
        return [int(v) if v is not None and v.strip() else None for v in col]
    if values and all(_FLOAT.fullmatch(v.strip()) and not _leading_zero(v.strip()) for v in values):
        return [float(v) if v is not None and v.strip() else None for v in col]
    share = shared.setdefault
    return [share(v, v) if v is not None and len(v) <= SHARE_MAX_CHARS else v for v in col]


def _leading_zero(v: str) -> bool:
    digits = v.lstrip("+-")
    return len(digits) > 1 and digits[0] == "0" and digits[1].isdigit()


# -- summary for the root model's metadata ----------------------------------------------------------

def _short(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= SAMPLE_CHARS else text[:SAMPLE_CHARS - 1] + "…"


def _first_row(table: dict[str, Any]) -> dict[str, Any] | None:
    if "rows" in table:
        return next((r for r in table["rows"] if isinstance(r, dict) and "_error" not in r), None)
    keys, cols, extra = table["keys"], table["cols"], table["extra"]
    for i in range(table["n"]):
        if i not in extra:
            return {k: c[i] for k, c in zip(keys, cols, strict=True) if c[i] is not MISSING}
    return None


def summarize(payload: dict[str, Any]) -> dict[str, Any]:
    """A small, bounded description of a payload for the index and the root model's metadata:
    ``kind``; for tables ``rows``, ``keys`` (the first 16), ``nkeys``, ``sample`` (the first
    good row's first 6 keys as ``[key, value as JSON cut to 40 characters]``), ``errors`` (bad
    lines), ``first_error`` (``[line, message]``), ``ragged``, ``sheets``; for JSON ``shape``
    (``"object with 12 keys"``, ``"array of 500 items"``), the same keys and sample for an object
    or an array of objects, and ``rows`` for an array; ``error`` for an invalid file."""
    kind = payload["kind"]
    out: dict[str, Any] = {"kind": kind}
    if "error" in payload:
        out.update(error=str(payload["error"])[:120], line=payload.get("line", 1))
        return out
    if kind == "json":
        value = payload["value"]
        if isinstance(value, dict):
            out["shape"] = f"object with {len(value):,} keys"
            _keys_and_sample(out, list(value), value)
        elif isinstance(value, list):
            objs = sum(isinstance(v, dict) for v in value)
            what = "objects" if value and objs == len(value) else "items"
            out["shape"] = f"array of {len(value):,} {what}"
            out["rows"] = len(value)
            first = next((v for v in value if isinstance(v, dict)), None)
            if first is not None:
                _keys_and_sample(out, list(first), first)
        else:
            out["shape"] = type(value).__name__
            out["sample"] = [["value", _short(value)]]
        return out
    tables = payload["tables"]
    out["rows"] = sum(t["n"] for t in tables)
    if kind == "excel":
        out["sheets"] = [str(t["name"])[:40] for t in tables[:8]]
        out["nsheets"] = len(tables)
    errors = [(i, v) for t in tables for i, v in sorted(t.get("extra", {}).items())
              if isinstance(v, dict) and "_error" in v]
    if "rows" in tables[0]:
        errors = [(i, r) for i, r in enumerate(tables[0]["rows"]) if isinstance(r, dict) and "_error" in r]
    if errors:
        out["errors"] = len(errors)
        out["first_error"] = [errors[0][1]["_line"], str(errors[0][1]["_error"])[:120]]
    stopped = next((t["stopped"] for t in tables if t.get("stopped")), None)
    if stopped is not None and not errors:
        out["errors"] = 1
        out["first_error"] = [stopped[0], str(stopped[1])[:120]]
    ragged = sum(t.get("ragged", 0) for t in tables)
    if ragged:
        out["ragged"] = ragged
    if payload.get("misnamed"):
        out["misnamed"] = True
    if payload.get("delimiter") and payload["delimiter"] != ("\t" if kind == "tsv" else ","):
        out["delimiter"] = payload["delimiter"]
    first = next((r for r in (_first_row(t) for t in tables) if r is not None), None)
    _keys_and_sample(out, list(tables[0].get("keys", [])), first or {})
    return out


def _keys_and_sample(out: dict[str, Any], keys: list[Any], row: dict[str, Any]) -> None:
    out["nkeys"] = len(keys)
    out["keys"] = [str(k)[:40] for k in keys[:SUMMARY_KEYS]]
    out["sample"] = [[str(k)[:40], _short(row[k])] for k in keys[:SAMPLE_KEYS] if k in row]
