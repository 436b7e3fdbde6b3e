"""The rows and tables of the REPL helpers: :class:`Row` (a dict that answers the key names a
model guesses), :class:`Record` (a row of ``records()``), :class:`Hit` (a grep hit), the
``files`` and ``chunks`` tables of a bundle or of a raw context (:func:`raw_layout`) and path
globs over them (:func:`glob_matcher`). Runs inside the sandboxed worker: the standard library
only."""

from __future__ import annotations

import contextlib
import fnmatch
import gc
import re
from collections.abc import Callable, Iterator
from typing import Any, Protocol


class ChunkTexts(Protocol):
    """What a :class:`Row` reads its ``text`` from: the worker's corpus view
    (``corpus_helpers.CorpusView``, which imports this module)."""

    context: str

    def chunk_text(self, i: Any) -> str:
        """The text of chunk ``i``."""
        ...

#: Size of the pseudo-chunks made for a raw context (``rlm_query`` with a string).
RAW_CHUNK_CHARS = 8000
#: The columns of a bundle's ``files`` and ``chunks`` tables (``index.json``, written by
#: ``rlm_cli.corpus.store``) that become the rows' keys.
FILE_KEYS = ("path", "size", "chars", "lines", "tokens", "start", "end", "first_chunk", "n_chunks", "kind")
CHUNK_KEYS = ("start_line", "end_line", "start", "end", "tokens", "sha1")


class Row(dict[str, Any]):
    """A row the helpers return (a grep hit, a search result, an entry of ``files`` or
    ``chunks``): a plain dict that also answers the key names a model guesses for what is there
    under another name (``path`` for ``file`` and back, ``line``/``lineno`` for a start line,
    ``text``/``content`` for a chunk's or search result's text), and otherwise says which keys
    it has. Printing shows only its real keys."""

    def __missing__(self, key: Any) -> Any:
        for alias in ALIASES.get(key, ()):
            if alias in self:
                return self[alias]
        if key in ("text", "content") and _CURRENT is not None:
            i = self.get("chunk", self.get("id"))
            if isinstance(i, int) and "start_line" in self:
                return _CURRENT.chunk_text(i)
            if "start" in self and "end" in self and "lines" in self:  # an entry of `files`
                return str.__getitem__(_CURRENT.context, slice(self["start"], self["end"]))
        raise KeyError(f"{key!r}: this row has the keys {list(self)}")


class Record(dict[str, Any]):
    """A row of ``records()``: a plain dict, except that a key it lacks raises a ``KeyError``
    naming the keys it has (``r["outcome"]`` on an access log's row says ``ip, time, method,
    path, status, ...``): a small model that guessed a field name, or copied one from an example,
    otherwise saw only ``KeyError: 'outcome'`` and ran the same code again. ``get`` still returns
    its default."""

    def __missing__(self, key: Any) -> Any:
        if "_error" in self:
            raise KeyError(f"{key!r}: line {self.get('_line')} of {self.get('_file')} could not be read as a row "
                           f"({self['_error']}); skip such rows (if '_error' not in r) or use r.get({key!r})")
        have = [k for k in self if not str(k).startswith("_")]
        raise KeyError(f"{key!r}: this row has no such key; its keys are {have[:30]} (and _file, _line)")


class Hit(Row):
    """A grep hit: a :class:`Row` that also answers ``hit["match"]`` (the text the pattern's group
    caught, as ``re.findall`` gives it: group 1 when the pattern has one group, else the whole
    match) and ``hit["groups"]`` (all groups), without printing them. Models were seen to
    grep ``r"service=(\\S+)"`` and read ``hit["match"]`` for the value."""

    __slots__ = ("_match", "_groups")
    _match: Any
    _groups: tuple[Any, ...]

    def __missing__(self, key: Any) -> Any:
        if key in ("match", "matched", "group", "value"):
            return self._match
        if key == "groups":
            return self._groups
        return super().__missing__(key)


#: Other names a model uses for a key a row has (``Row.__missing__``).
ALIASES: dict[str, tuple[str, ...]] = {
    "path": ("file",), "file": ("path",), "filename": ("file", "path"), "file_path": ("file", "path"),
    "line": ("start_line",), "lineno": ("line", "start_line"), "line_number": ("line", "start_line"),
    "start": ("start_line",), "end": ("end_line",), "line_text": ("text",), "function": ("in",),
}
#: The view whose context ``Row`` reads ``text`` from (one per worker; the last one made).
_CURRENT: ChunkTexts | None = None


def set_current(view: ChunkTexts) -> None:
    """Make ``view`` the one whose context :class:`Row` reads ``text`` from (the last one made)."""
    global _CURRENT
    _CURRENT = view


@contextlib.contextmanager
def no_collection() -> Iterator[None]:
    """No garbage collection inside (as it was after): for code that makes many containers and
    keeps them (rows, hits, a parsed JSON file), where each collection the allocations set off
    walks them all again and frees nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def make_hit(file: str, line: int, text: str, match: Any, groups: tuple[Any, ...]) -> Hit:
    """A :class:`Hit` ``{"file", "line", "text"}`` answering ``match`` and ``groups`` too."""
    hit = Hit(file=file, line=line, text=text)
    hit._match, hit._groups = match, groups
    return hit


def raw_layout(context: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One pseudo-file ``<context>`` and line-aligned pseudo-chunks for a raw context string."""
    n = len(context)
    lines = context.count("\n") + (0 if not context or context.endswith("\n") else 1)
    files = [{"path": "<context>", "size": n, "chars": n, "lines": lines, "tokens": None, "start": 0, "end": n,
              "first_chunk": 0, "n_chunks": 0, "kind": ""}]
    chunks: list[dict[str, Any]] = []
    pos, line = 0, 1
    while pos < n:
        cut = n if n - pos <= RAW_CHUNK_CHARS else (context.rfind("\n", pos, pos + RAW_CHUNK_CHARS) + 1)
        if cut <= pos:
            cut = pos + RAW_CHUNK_CHARS
        end_line = line + context.count("\n", pos, cut - 1)
        chunks.append({"id": len(chunks), "path": "<context>", "start_line": line, "end_line": end_line,
                       "start": pos, "end": cut, "tokens": None, "sha1": None})
        line = end_line + (1 if context[cut - 1] == "\n" else 0)
        pos = cut
    files[0]["n_chunks"] = len(chunks)
    return files, chunks


def glob_matcher(glob: str) -> Callable[[str], bool]:
    """A predicate for ``path_glob``: fnmatch on the whole path, or on the name when no ``/``.

    A relative glob with a ``/`` also matches the end of a path at a ``/`` (``"data/app.log"``
    and ``"tmp/data/*.log"`` match ``/tmp/data/app.log``), as ``read_file`` takes a path's unique
    suffix; a leading ``./`` is dropped, and an absolute glob also matches a relative corpus path
    it ends with (``/srv/data/app.log`` matches ``data/app.log``): models write a corpus path
    without its leading folders or ``/``, and a grep over no file at all answers ``[]``, which
    they read as "nothing matches"."""
    while glob.startswith("./"):
        glob = glob[2:]
    whole = re.compile(fnmatch.translate(glob)).match
    if "/" not in glob:
        return lambda p: bool(whole(p) or whole(p.rsplit("/", 1)[-1]))
    if glob.startswith("/"):  # an absolute path also names a relative corpus path it ends with
        def absolute(p: str) -> bool:
            if whole(p):
                return True
            if p.startswith("/"):
                return False
            rel = "/" + p.removeprefix("./")
            return bool(whole(rel)) or glob.endswith(rel)
        return absolute
    tail = re.compile(fnmatch.translate(glob[3:] if glob.startswith("**/") else glob)).match

    def match(p: str) -> bool:
        if whole(p):
            return True
        i = p.find("/")
        while i >= 0:
            if tail(p, i + 1):
                return True
            i = p.find("/", i + 1)
        return False
    return match
