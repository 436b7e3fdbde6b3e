"""The ``str`` types of the REPL: ``context`` (:class:`Context`), the text of one file or chunk
(:class:`Lines`) and of ``read_file`` (:class:`NumberedLines`), each a ``str`` in every way but
where models are seen to take it for something else (a dict of files, a file object).

Runs inside the sandboxed worker, so it uses only the standard library.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any, Protocol


class FileTexts(Protocol):
    """What a :class:`Context` reads ``context["path"]`` from: the worker's corpus view
    (``corpus_helpers.CorpusView``, which imports this module)."""

    def file_text(self, path: str) -> str:
        """The text of the file ``path`` names (a unique path suffix).

        Raises:
            FileNotFoundError: no such file.
        """
        ...


class Context(str):
    """``context``: the whole corpus as one ``str`` (slices, string methods and regexes work as on
    any ``str``), which also answers ``context["path/to/file.py"]`` with that file's text: models
    often take ``context`` for a dict of files, and that call then works instead of failing with
    "string indices must be integers". A unique path suffix is enough; an unknown path raises
    ``KeyError`` naming close paths. Making one copies the text (CPython decodes into a plain
    ``str`` first), so a corpus above ``protocol.CONTEXT_BY_PATH_MAX_BYTES`` stays a plain ``str``."""

    _view: FileTexts | None = None

    def __getitem__(self, key: Any) -> str:  # type: ignore[override]
        if isinstance(key, str) and self._view is not None:
            try:
                return self._view.file_text(key)
            except FileNotFoundError as exc:
                raise KeyError(str(exc)) from None
        return str.__getitem__(self, key)


def str_width(text: str) -> int:
    """Bytes per character of ``text`` as CPython holds it (1, 2 or 4: PEP 393), in constant time:
    from its size, which is a fixed header plus ``(len + 1) * width`` for a ``str`` made by
    decoding (a "compact" one; not for a ``str`` subclass, which holds its text apart)."""
    if text.isascii():
        return 1
    return (sys.getsizeof(text) - (sys.getsizeof("\u00e9") - 2)) // (len(text) + 1)


class Lines(str):
    """The text ``context["path"]`` and ``chunk_text`` return: a ``str`` in every way (slices,
    methods, regexes, ``len``, ``in``) except that a loop over it gives its lines (each with its
    ``\n``, as a loop over an open file does) instead of its characters. A loop over the
    characters of a file's text is never what code means: ``for line in text: ip = line.split()[0]``
    was seen to fail on the first blank "line", and a rewrite of it to count 0 client addresses in
    an access log (Qwen2.5-Coder-1.5B). Methods that make a new string return a plain ``str``."""

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]
        return iter(self.splitlines(keepends=True))


class NumberedLines(str):
    """What ``read_file`` returns: the lines shown with their numbers (``"12: text"``, a ``str``
    to print or search), where a loop gives the file's own lines without the numbers, as a loop
    over ``open(path)`` does: ``for line in read_file(path)`` is written to parse a file (see
    :class:`Lines`), and ``line.split()[0]`` must then be the line's first field, not its number."""

    _raw: str = ""

    def __new__(cls, shown: str, raw: str) -> NumberedLines:
        obj = super().__new__(cls, shown)
        obj._raw = raw
        return obj

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]
        return iter(self._raw.splitlines(keepends=True))
