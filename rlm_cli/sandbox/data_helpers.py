"""Structured data in the REPL namespace: ``data``, ``records()`` and ``frame()``.

Runs inside the sandboxed worker, so it uses only the standard library (and pandas, imported by
``frame()`` alone, when it is installed). The parent parsed each structured file once, when it
indexed the corpus, and saved the result in the bundle's data file (one :mod:`marshal` blob
per file; layout in ``rlm_cli.corpus.structured``). Nothing is read at start: ``data[path]``
loads one file's blob on first use (about 0.1 s for 40 MB of JSONL) and keeps it.

* ``data``: a read-only mapping ``path -> value``: a JSON file's object, or for a table (JSONL,
  CSV, TSV, Parquet) a :class:`Rows` sequence of dicts, for an Excel workbook ``{sheet: Rows}``.
  A unique path suffix is enough (``data["tickets.jsonl"]``).
* ``records(glob=None)``: a :class:`Records` sequence of every row of every table, and of every
  element of every top-level JSON array, in the files matching ``glob``; each row is a dict with
  ``_file`` and ``_line`` (1-based, the line ``read_file`` shows), plus ``_sheet`` for Excel.
  ``len`` is read from the index without loading anything.
* ``frame(path, sheet=None)``: a pandas DataFrame of a table or JSON array.

Rows are kept column by column and a row's dict is built when it is read: a table takes about
1.3x the bytes of its text in memory, where a list of dicts takes about 4x (see
``benchmarks/bench_data.py``). ``list(rows)`` makes a real list when one is wanted.
"""

from __future__ import annotations

import bisect
import difflib
import marshal
import operator
import os
from array import array
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from rlm_cli.sandbox.rows import Record, glob_matcher, no_collection

#: Marks a key absent from a row (see ``rlm_cli.corpus.structured``).
MISSING = ...
#: Kinds whose payload holds tables.
TABLE_KINDS = ("jsonl", "csv", "tsv", "parquet", "excel", "accesslog")
PANDAS_HINT = ("frame() needs pandas, which is not installed in the Python that runs rlm: "
               "pip install '/path/to/rlm[data]' (its data extra, or the wheel with [data]: pandas, pyarrow for Parquet, "
               "openpyxl for Excel). "
               "Without it, use data[path] or records().")


class Rows(Sequence):  # type: ignore[type-arg]
    """The rows of one table as a read-only sequence of dicts, built on access.

    ``len(rows)``, ``rows[i]``, ``rows[a:b]`` (a list), iteration, ``rows.column(key)``. A row that
    is not an object (a JSONL line holding an array) is its value; a line that was not JSON is
    ``{"_error": message, "_line": n, "_text": its first 200 characters}``.
    """

    __slots__ = ("path", "name", "n", "lines", "keys", "cols", "extra", "full", "rows", "dtypes")

    def __init__(self, path: str, table: dict[str, Any]) -> None:
        self.path = path
        self.name: str | None = table.get("name")
        self.n: int = table["n"]
        self.lines = array("I")
        self.lines.frombytes(table["lines"])
        self.keys: list[str] = list(table.get("keys", []))
        self.rows: list[Any] | None = table.get("rows")
        self.cols: list[list[Any]] = table.get("cols", [])
        self.extra: dict[int, Any] = table.get("extra", {})
        self.full: bool = bool(table.get("full", True))
        self.dtypes: dict[str, str] = table.get("dtypes", {})

    def __len__(self) -> int:
        return self.n

    def _row(self, i: int) -> Any:
        if self.rows is not None:
            return self.rows[i]
        if i in self.extra:
            return self.extra[i]
        if self.full:
            return dict(zip(self.keys, [c[i] for c in self.cols], strict=True))
        return {k: c[i] for k, c in zip(self.keys, self.cols, strict=True) if c[i] is not MISSING}

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._row(j) for j in range(*i.indices(self.n))]
        j = operator.index(i)
        if j < 0:
            j += self.n
        if not 0 <= j < self.n:
            raise IndexError(f"row {i} is out of range: {self._label()} has {self.n:,} rows")
        return self._row(j)

    def __iter__(self) -> Iterator[Any]:
        if self.rows is not None:
            yield from self.rows
            return
        keys, extra, full = self.keys, self.extra, self.full
        if not self.cols:
            for i in range(self.n):
                yield extra.get(i, {})
            return
        if full and not extra:  # the common case: one dict per row, nothing else
            for vals in zip(*self.cols, strict=True):
                yield dict(zip(keys, vals, strict=True))
            return
        for i, vals in enumerate(zip(*self.cols, strict=True)):
            if extra and i in extra:
                yield extra[i]
            elif full:
                yield dict(zip(keys, vals, strict=True))
            else:
                yield {k: v for k, v in zip(keys, vals, strict=True) if v is not MISSING}

    def records(self) -> Iterator[dict[str, Any]]:
        """Every row with ``_file``, ``_line`` (and ``_sheet`` for an Excel sheet) added; a row
        that is not a dict becomes ``{"_value": value, ...}``. Each is a fresh :class:`Record`."""
        path, sheet, lines, keys, extra, full = self.path, self.name, self.lines, self.keys, self.extra, self.full
        if self.rows is None and self.cols and full and not extra and sheet is None:  # the common case
            for vals, line in zip(zip(*self.cols, strict=True), lines, strict=True):
                row = Record(zip(keys, vals, strict=True))
                row["_file"] = path
                row["_line"] = line
                yield row
            return
        if self.rows is not None:
            source: Iterator[Any] = iter(self.rows)
        elif self.cols:
            source = zip(*self.cols, strict=True)
        else:
            source = iter([()] * self.n)
        for i, (vals, line) in enumerate(zip(source, lines, strict=True)):
            if self.rows is not None:
                row = Record(vals) if isinstance(vals, dict) else Record(_value=vals)
            elif extra and i in extra:
                v = extra[i]
                row = Record(v) if isinstance(v, dict) else Record(_value=v)
            elif full:
                row = Record(zip(keys, vals, strict=True))
            else:
                row = Record((k, v) for k, v in zip(keys, vals, strict=True) if v is not MISSING)
            row["_file"] = path
            row["_line"] = line
            if sheet is not None:
                row["_sheet"] = sheet
            yield row

    def column(self, key: str) -> list[Any]:
        """The value of ``key`` in every row, in order (``None`` where a row lacks it).

        Raises:
            KeyError: no row has that key.
        """
        if self.rows is None and key in self.keys:
            col = self.cols[self.keys.index(key)]
            if self.full and not self.extra:
                return list(col)
            return [None if (i in self.extra or v is MISSING) else v for i, v in enumerate(col)]
        if self.rows is not None and key in self.keys:
            return [r.get(key) if isinstance(r, dict) else None for r in self.rows]
        raise KeyError(f"no column {key!r} in {self._label()}; its keys are {self.keys[:20]}")

    def to_frame(self, pd: Any) -> Any:
        """A pandas DataFrame of the rows that are objects (bad lines left out)."""
        if self.rows is not None:
            return pd.DataFrame([r for r in self.rows if isinstance(r, dict) and "_error" not in r])
        keep = [i for i in range(self.n) if i not in self.extra] if self.extra else None
        cols = {}
        for k, c in zip(self.keys, self.cols, strict=True):
            col = c if keep is None else [c[i] for i in keep]
            cols[k] = col if self.full else [None if v is MISSING else v for v in col]
        df = pd.DataFrame(cols, columns=self.keys)
        for k, dtype in self.dtypes.items():
            if dtype.startswith("datetime64") and k in df:
                df[k] = pd.to_datetime(df[k])
        return df

    def _label(self) -> str:
        return self.path + (f" sheet {self.name!r}" if self.name is not None else "")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, Rows)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        keys = ", ".join(self.keys[:10]) + (f", ... ({len(self.keys)} keys)" if len(self.keys) > 10 else "")
        return (f"<{self.n:,} rows of {self._label()}: keys {keys}; each row a dict built when read, "
                "list(...) copies them>")


class Records(Sequence):  # type: ignore[type-arg]
    """The rows of several files as one read-only sequence (see :meth:`DataView.records`)."""

    def __init__(self, view: DataView, parts: list[tuple[str, int]]) -> None:
        self._view = view
        self._parts = parts
        self._starts: list[int] = []
        total = 0
        for _, n in parts:
            self._starts.append(total)
            total += n
        self._n = total

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for path, _ in self._parts:
            yield from self._view.file_records(path)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            start, stop, step = i.indices(self._n)
            if step == 1:
                out: list[dict[str, Any]] = []
                for k, (path, n) in enumerate(self._parts):
                    a, b = max(start - self._starts[k], 0), min(stop - self._starts[k], n)
                    if a < b:
                        out.extend(self._view.file_record_slice(path, a, b))
                return out
            return [self[j] for j in range(start, stop, step)]
        j = operator.index(i)
        if j < 0:
            j += self._n
        if not 0 <= j < self._n:
            raise IndexError(f"record {i} is out of range: there are {self._n:,}")
        k = bisect.bisect_right(self._starts, j) - 1
        return self._view.file_record_slice(self._parts[k][0], j - self._starts[k], j - self._starts[k] + 1)[0]

    def __repr__(self) -> str:
        shown = ", ".join(f"{p} ({n:,})" for p, n in self._parts[:5])
        more = f", and {len(self._parts) - 5:,} more files" if len(self._parts) > 5 else ""
        return (f"<records: {self._n:,} rows from {len(self._parts):,} files: {shown}{more}; iterate, index, "
                "or len(); each row a dict with _file and _line>")


class DataMap(Mapping):  # type: ignore[type-arg]
    """``data``: structured file path -> parsed value, loaded on first use (see module docstring)."""

    def __init__(self, view: DataView) -> None:
        self._view = view

    def __getitem__(self, path: str) -> Any:
        return self._view.load(self._view.resolve(path))

    def __iter__(self) -> Iterator[str]:
        return iter(self._view.meta)

    def __len__(self) -> int:
        return len(self._view.meta)

    def __contains__(self, path: object) -> bool:
        try:
            self._view.resolve(str(path))
        except KeyError:
            return False
        return True

    def __repr__(self) -> str:
        items = list(self._view.meta.items())
        shown = "; ".join(f"{p} ({_describe(m)})" for p, (_, _, m) in items[:8])
        more = f"; and {len(items) - 8:,} more" if len(items) > 8 else ""
        return f"<data: {len(items):,} structured files: {shown}{more}>" if items else \
            "<data: no structured files (JSON, JSONL, CSV, TSV, Parquet, Excel) in the corpus>"


def _describe(meta: dict[str, Any]) -> str:
    kind = meta.get("kind", "?")
    if "error" in meta:
        return f"{kind}, invalid: {meta['error']}"
    if "rows" in meta:
        return f"{kind}, {meta['rows']:,} rows"
    return f"{kind}, {meta.get('shape', '')}"


class DataView:
    """The structured files of a corpus: their summaries (from ``index.json``) and the data file.

    ``structured`` lists ``(path, dstart, dend, summary)`` per structured file; ``data_file`` is
    opened now (the worker drops privileges later) and read with ``pread`` on use.

    Raises:
        OSError: the data file cannot be opened.
    """

    def __init__(self, structured: list[tuple[str, int, int, dict[str, Any]]], data_file: str | None) -> None:
        self.meta: dict[str, tuple[int, int, dict[str, Any]]] = {p: (a, b, m) for p, a, b, m in structured}
        #: Globs of ``records()`` calls that matched no file with rows (see :meth:`explain_unmatched`).
        self.unmatched: list[str] = []
        self._fd = os.open(data_file, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)) if data_file and self.meta else -1
        self._loaded: dict[str, Any] = {}
        self.data = DataMap(self)

    def resolve(self, path: str) -> str:
        """The structured file ``path`` names: itself, or the only one ending with ``/path``.

        Raises:
            KeyError: no such structured file, or several match (the message says which).
        """
        if path in self.meta:
            return path
        norm = path[2:] if path.startswith("./") else path
        matches = [p for p in self.meta if p == norm or p.endswith("/" + norm)]
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise KeyError(f"{path!r} matches several structured files: {matches[:8]}; give a longer path")
        close = difflib.get_close_matches(path, list(self.meta), n=5, cutoff=0.6)
        hint = f"; did you mean one of {close}" if close else f"; the structured files are {list(self.meta)[:8]}"
        raise KeyError(f"no structured file {path!r} in the corpus{hint}")

    def _payload(self, path: str) -> dict[str, Any]:
        a, b, _ = self.meta[path]
        blob = os.pread(self._fd, b - a, a)
        if len(blob) != b - a:
            raise OSError(f"the data file is shorter than the index says (reading {path})")
        with no_collection():  # a big JSON file makes millions of containers
            return marshal.loads(blob)  # type: ignore[no-any-return]

    def load(self, path: str) -> Any:
        """The value of ``data[path]`` (loaded once, then kept)."""
        if path not in self._loaded:
            payload = self._payload(path)
            if "error" in payload:
                value: Any = {"_error": payload["error"], "_line": payload.get("line", 1)}
            elif "tables" in payload:
                tables = [Rows(path, t) for t in payload["tables"]]
                value = {t.name: t for t in tables} if payload["kind"] == "excel" else tables[0]
            else:
                value = payload["value"]
                if payload.get("lines"):
                    lines = array("I")
                    lines.frombytes(payload["lines"])
                    self._loaded[path + "\0lines"] = lines
            self._loaded[path] = value
        return self._loaded[path]

    def _tables(self, path: str) -> list[Rows]:
        value = self.load(path)
        if isinstance(value, Rows):
            return [value]
        if isinstance(value, dict) and value and all(isinstance(v, Rows) for v in value.values()):
            return list(value.values())
        return []

    def file_records(self, path: str) -> Iterator[dict[str, Any]]:
        """Every record of one file (a table's rows, a JSON array's elements)."""
        tables = self._tables(path)
        if tables:
            for t in tables:
                yield from t.records()
            return
        value = self.load(path)
        lines = self._loaded.get(path + "\0lines")
        if isinstance(value, list) and lines is not None:
            for v, line in zip(value, lines, strict=True):
                yield Record(v, _file=path, _line=line) if isinstance(v, dict) else Record(
                    _value=v, _file=path, _line=line)

    def file_record_slice(self, path: str, a: int, b: int) -> list[dict[str, Any]]:
        """Records ``a:b`` of one file (0-based, as counted by :meth:`records`)."""
        out: list[dict[str, Any]] = []
        tables = self._tables(path)
        if not tables:
            value = self.load(path)
            lines = self._loaded.get(path + "\0lines")
            for i in range(a, min(b, len(value) if isinstance(value, list) else 0)):
                v, line = value[i], lines[i] if lines is not None else 0
                out.append(Record(v, _file=path, _line=line) if isinstance(v, dict) else Record(
                    _value=v, _file=path, _line=line))
            return out
        for t in tables:
            out.extend(_with_meta(t, k) for k in range(max(a, 0), min(b, t.n)))
            a -= t.n
            b -= t.n
        return out

    def record_count(self, path: str) -> int:
        """Records in one file, from the index (nothing is loaded): rows of its tables, elements
        of a top-level JSON array, else 0."""
        meta = self.meta[path][2]
        if meta.get("kind") in TABLE_KINDS or meta.get("shape", "").startswith("array"):
            return int(meta.get("rows", 0))
        return 0

    def records(self, glob: str | None = None) -> Records:
        """Every row of every table and every element of every top-level JSON array, in the files
        matching ``glob`` (fnmatch on the whole path, or on the name when it has no ``/``; default
        all), in corpus order, each a dict with ``_file`` and ``_line``.

        Returns a :class:`Records` sequence: ``len`` costs nothing, iteration builds each dict
        when it is reached (about 1.5 microseconds per row), ``records()[i]`` and slices work.
        """
        keep = glob_matcher(glob) if glob else None
        parts = [(p, self.record_count(p)) for p in self.meta if keep is None or keep(p)]
        if glob and not any(n for _, n in parts):
            self.unmatched.append(str(glob))
        return Records(self, [(p, n) for p, n in parts if n])

    def explain_unmatched(self) -> str:
        """A note on the ``records(glob)`` calls since :attr:`unmatched` was last cleared whose glob
        matched no file with rows (they return no rows, which code then counts as 0); ``""`` when
        there were none."""
        globs, self.unmatched = list(dict.fromkeys(self.unmatched)), []
        if not globs:
            return ""
        have = [p for p in self.meta if self.record_count(p)]
        files = ", ".join(repr(p) for p in have[:8]) + (f" and {len(have) - 8:,} more" if len(have) > 8 else "")
        return (f"[note: records({globs[0]!r}) matched no data file, so it gave no rows"
                + (f" ({len(globs) - 1} more such calls)" if len(globs) > 1 else "")
                + (f"; the files with rows are {files}" if have else "; the corpus has no data files with rows")
                + ".]\n")

    def frame(self, path: str, sheet: str | None = None) -> Any:
        """A pandas DataFrame of a table (its good rows) or of a JSON array or object; ``sheet``
        picks an Excel sheet (default the first).

        Raises:
            ImportError: pandas is not installed (the message says how to install it).
            KeyError: no such structured file or sheet.
            TypeError: the file's JSON value cannot make a table.
        """
        try:
            import pandas as pd
        except ImportError:
            raise ImportError(PANDAS_HINT) from None
        real = self.resolve(path)
        value = self.load(real)
        tables = self._tables(real)
        if tables:
            if sheet is None:
                return tables[0].to_frame(pd)
            for t in tables:
                if t.name == sheet:
                    return t.to_frame(pd)
            raise KeyError(f"no sheet {sheet!r} in {real}; its sheets are {[t.name for t in tables]}")
        if isinstance(value, dict) and "_error" in value:
            raise TypeError(f"{real} is not valid JSON ({value['_error']}); see read_file({real!r})")
        try:
            return pd.DataFrame(value)
        except (ValueError, TypeError):
            try:
                return pd.json_normalize(value)
            except Exception as exc:  # noqa: BLE001 - pandas raises many types for odd shapes
                raise TypeError(f"the JSON value of {real} does not make a table ({exc}); use data[{real!r}]") from None


def _with_meta(t: Rows, k: int) -> dict[str, Any]:
    row = t._row(k)
    line = t.lines[k]
    out = Record(row) if isinstance(row, dict) else Record(_value=row)
    out["_file"] = t.path
    out["_line"] = line
    if t.name is not None:
        out["_sheet"] = t.name
    return out
