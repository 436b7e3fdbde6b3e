"""Split one file's text into chunks along semantic boundaries.

A chunk ends at the best boundary that keeps it within the target size, trying in order:

1. *primary* boundaries, by file type: top-level definitions for code (Python ``def``/``class``
   with their decorators and comments; for brace languages a column-0 line after a blank line
   or a closing ``}``), headings for Markdown (ATX and setext, not inside fences) and
   reStructuredText (underlined titles), blank-line paragraphs for logs and plain text;
2. *secondary*: any blank line;
3. any line break;
4. inside a line longer than the target: after a space, else a hard cut (minified code).

A primary boundary is taken when it leaves the chunk at least half the target; otherwise the
later secondary or line boundary wins, so chunks stay near the target. Chunks never cross a file
(this function sees one file). The target is in tokens and converted to characters with
``chars_per_token`` (4 is the usual average for code and English with BPE tokenizers; the
store re-splits chunks whose exact count turns out far over the target). Line numbers are
1-based and count ``\\n`` only, the same rule ``grep`` and ``read_file`` use in the REPL.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass

#: Characters per token assumed when converting a token target to characters.
CHARS_PER_TOKEN = 4.0
#: A primary boundary must leave the chunk at least this share of the target.
MIN_FILL = 0.5

_PY_EXT = {".py", ".pyi", ".pyx", ".pxd"}
_KEYWORD_EXT = {".rb", ".ex", ".exs", ".jl", ".lua", ".pl", ".pm", ".r", ".sh", ".bash", ".zsh", ".ml", ".hs",
                ".erl", ".clj", ".lisp", ".el", ".scm", ".nim", ".cr"}
_BRACE_EXT = {".js", ".jsx", ".ts", ".tsx", ".mjs", ".cjs", ".go", ".rs", ".java", ".kt", ".kts", ".scala",
              ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".cs", ".php", ".swift", ".m", ".mm", ".dart",
              ".zig", ".groovy", ".gradle", ".proto", ".css", ".scss", ".less", ".sol", ".v", ".sv"}
_MD_EXT = {".md", ".markdown", ".mdx", ".mkd"}
_RST_EXT = {".rst", ".rest"}

# Python: a top-level def/class after a newline (the decorator and comment lines above it are
# added in code). Written with the "\n" first, not as ``^`` with MULTILINE: ``re`` then looks only
# at newlines (1.0 ns a character against 4.5 on the standard library); line 1 is never a boundary.
_PY_DEF = re.compile(r"\n(?:async[ \t]+def|def|class)[ \t]")
# Ruby, Elixir, Julia, Lua, shell...: a column-0 definition keyword (after a newline, as above).
_KW_DEF = re.compile(r"\n(?:def|defp|defmodule|class|module|function|local function|sub|fn|let|proc|"
                     r"[A-Za-z_][\w-]*[ \t]*\(\)[ \t]*\{?)\b")
# Brace languages: a column-0 line that follows a blank line or a closing brace.
_BRACE_DEF = re.compile(r"^(?:[ \t]*|\}[^\n]*)\n(?=[A-Za-z_$@#/\[])", re.MULTILINE)
_MD_HEADING = re.compile(r"^(?:#{1,6}[ \t]|[^\s][^\n]*\n(?:=+|-+)[ \t]*$)", re.MULTILINE)
_MD_FENCE = re.compile(r"^[ \t]{0,3}(?:```|~~~)", re.MULTILINE)
_RST_TITLE = re.compile(
    r"^(?:([=\-~^\"'`#*+<>:._])\1{2,}[ \t]*\n)?[^\s][^\n]*\n([=\-~^\"'`#*+<>:._])\2{2,}[ \t]*$", re.MULTILINE)
# A blank line (only spaces or tabs); the boundary is the start of the line after it.
_BLANK = re.compile(r"\n[ \t]*\n")


@dataclass(frozen=True, slots=True)
class Span:
    """A chunk inside one file: character offsets ``[start, end)`` into the file's text and
    1-based inclusive line numbers ``start_line..end_line``."""

    start: int
    end: int
    start_line: int
    end_line: int


def kind_of(path: str) -> str:
    """The chunking family of ``path`` from its extension: ``'python'``, ``'keyword'`` (other
    column-0 keyword languages), ``'brace'``, ``'markdown'``, ``'rst'`` or ``'text'``."""
    slash = path.rfind("/")
    dot = path.rfind(".")
    ext = path[dot:].lower() if dot > slash + 1 else ""
    if ext in _PY_EXT:
        return "python"
    if ext in _BRACE_EXT:
        return "brace"
    if ext in _KEYWORD_EXT:
        return "keyword"
    if ext in _MD_EXT:
        return "markdown"
    if ext in _RST_EXT:
        return "rst"
    return "text"


def primary_boundaries(text: str, kind: str) -> list[int]:
    """Sorted character offsets (line starts, never 0) where a semantic unit of ``kind`` starts."""
    if kind == "python":
        found = [_with_preamble(text, m.start() + 1, ("@", "#")) for m in _PY_DEF.finditer(text)]
    elif kind == "keyword":
        found = [_with_preamble(text, m.start() + 1, ("#", "--", "//", "%")) for m in _KW_DEF.finditer(text)]
    elif kind == "brace":
        found = [m.end() for m in _BRACE_DEF.finditer(text)]
    elif kind == "markdown":
        found = [m.start() for m in _MD_HEADING.finditer(text)]
        fences = [m.start() for m in _MD_FENCE.finditer(text)]
        if fences:  # drop headings inside ``` / ~~~ fences (an odd count of fence lines before them)
            found = [p for p in found if bisect_right(fences, p) % 2 == 0]
    elif kind == "rst":
        found = [m.start() for m in _RST_TITLE.finditer(text)]
    else:
        found = [m.end() for m in _BLANK.finditer(text)]
    return [p for p in found if 0 < p < len(text)]


def _with_preamble(text: str, pos: int, prefixes: tuple[str, ...]) -> int:
    """Move ``pos`` (a line start) up over the directly preceding decorator/comment lines."""
    while pos > 0:
        prev = text.rfind("\n", 0, pos - 1) + 1
        if not text.startswith(prefixes, prev):
            break
        pos = prev
    return pos


def split_text(text: str, path: str, target_tokens: int, *, chars_per_token: float = CHARS_PER_TOKEN,
               kind: str | None = None) -> list[Span]:
    """Split ``text`` (one whole file) into spans of about ``target_tokens`` tokens or fewer.

    Returns ``[]`` for an empty text and one span for a text within the target; spans are
    contiguous and cover the text exactly. ``kind`` overrides the family guessed from ``path``.
    """
    n = len(text)
    if not n:
        return []
    target = max(16, int(max(1, target_tokens) * chars_per_token))
    if n <= target:
        return [Span(0, n, 1, 1 + text.count("\n", 0, n - 1))]
    kind = kind or kind_of(path)
    primary = primary_boundaries(text, kind)
    secondary = primary if kind == "text" else None  # found when a cut first needs them
    min_fill = int(target * MIN_FILL)
    spans: list[Span] = []
    pos, line = 0, 1
    while pos < n:
        limit = pos + target
        if limit >= n:
            cut = n
        else:
            cut = _last_in(primary, pos + min_fill, limit)
            if cut < 0:
                if secondary is None:
                    secondary = [m.end() for m in _BLANK.finditer(text)]
                cut = _last_in(secondary, pos + 1, limit)
            if cut < 0:
                cut = text.rfind("\n", pos, limit) + 1
            if cut <= pos:  # one line longer than the target: cut after a space if there is one
                cut = max(text.rfind(" ", pos + min_fill, limit), text.rfind("\t", pos + min_fill, limit)) + 1
            if cut <= pos:
                cut = limit
        end_line = line + text.count("\n", pos, cut - 1)
        spans.append(Span(pos, cut, line, end_line))
        line = end_line + (1 if text[cut - 1] == "\n" else 0)
        pos = cut
    return spans


def _last_in(points: list[int], lo: int, hi: int) -> int:
    """The largest point with ``lo <= p <= hi``, or -1."""
    i = bisect_right(points, hi) - 1
    return points[i] if i >= 0 and points[i] >= lo else -1
