"""Split one file's text into chunks along semantic boundaries.

Boundaries, by file type: top-level definitions for code (a line that starts a ``def``,
``class``, ``function``, ``fn``, ``func``... at column 0), headings for Markdown and
reStructuredText, blank-line paragraphs for logs and plain text. Segments between boundaries are
packed greedily up to a target size in tokens; a segment larger than the target is split by
lines. Chunks never cross a file. Sizes while packing are estimated at 4 characters per token
(the usual English/code average for BPE tokenizers); exact token counts are computed afterwards.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CHARS_PER_TOKEN = 4

_CODE_EXT = {
    ".py", ".pyi", ".js", ".jsx", ".ts", ".tsx", ".mjs", ".cjs", ".go", ".rs", ".java", ".kt",
    ".scala", ".c", ".h", ".cc", ".cpp", ".hpp", ".cs", ".rb", ".php", ".swift", ".m", ".lua",
    ".sh", ".bash", ".pl", ".r", ".jl", ".ex", ".exs", ".erl", ".hs", ".ml", ".clj", ".dart", ".zig",
}
_MD_EXT = {".md", ".markdown", ".mdx"}
_RST_EXT = {".rst", ".txt"}  # .txt gets paragraph splitting below; rst headings checked too

_CODE_START = re.compile(
    r"^(?:@|def |async def |class |function |async function |export |fn |pub |impl |struct |enum |"
    r"trait |func |type |interface |module |package |public |private |protected |static |"
    r"const |let |var |int |void |char |unsigned |template|namespace |#define |#include |"
    r"sub |defmodule |module_function)"
)
_MD_HEADING = re.compile(r"^#{1,6} ")
_RST_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+<>:.])\1{2,}\s*$")


@dataclass(frozen=True)
class Span:
    """A chunk inside one file: character offsets ``[start, end)`` into the file's text and
    1-based inclusive line numbers."""

    start: int
    end: int
    start_line: int
    end_line: int


def kind_of(path: str) -> str:
    """Return ``'code'``, ``'markdown'``, ``'rst'`` or ``'text'`` from a path's extension."""
    dot = path.rfind(".")
    ext = path[dot:].lower() if dot > path.rfind("/") else ""
    if ext in _CODE_EXT:
        return "code"
    if ext in _MD_EXT:
        return "markdown"
    if ext == ".rst":
        return "rst"
    return "text"


def _boundary_lines(lines: list[str], kind: str) -> list[int]:
    """Indices of lines that may start a chunk (always includes 0)."""
    starts = [0]
    if kind == "code":
        prev_blank = True
        for i, line in enumerate(lines):
            if i and _CODE_START.match(line) and (prev_blank or line.startswith("@")):
                # keep decorators/comments directly above a definition with it
                j = i
                while j > 0 and (lines[j - 1].startswith(("@", "#", "//", "/*", " *")) and lines[j - 1].strip()):
                    j -= 1
                if j > starts[-1]:
                    starts.append(j)
            prev_blank = not line.strip()
    elif kind == "markdown":
        in_fence = False
        for i, line in enumerate(lines):
            if line.startswith(("```", "~~~")):
                in_fence = not in_fence
            elif not in_fence and i and _MD_HEADING.match(line):
                starts.append(i)
    elif kind == "rst":
        for i in range(1, len(lines)):
            if _RST_UNDERLINE.match(lines[i]) and lines[i - 1].strip() and i - 1 > starts[-1]:
                starts.append(i - 1)
    else:
        for i in range(1, len(lines)):
            if not lines[i - 1].strip() and lines[i].strip():
                starts.append(i)
    return starts


def split_text(text: str, path: str, target_tokens: int) -> list[Span]:
    """Split ``text`` (one file) into spans of about ``target_tokens`` tokens or fewer.

    Returns at least one span for non-empty text; an empty file gives ``[]``.
    """
    if not text:
        return []
    target_chars = max(1, target_tokens) * CHARS_PER_TOKEN
    if len(text) <= target_chars:
        return [Span(0, len(text), 1, text.count("\n") + (0 if text.endswith("\n") else 1))]
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    starts = _boundary_lines(lines, kind_of(path)) + [len(lines)]
    # Segments between boundaries, each possibly split by lines when larger than the target.
    segments: list[tuple[int, int]] = []  # line index ranges [a, b)
    for a, b in zip(starts, starts[1:], strict=False):
        if offsets[b] - offsets[a] <= target_chars:
            segments.append((a, b))
            continue
        cur = a
        for i in range(a, b):
            if offsets[i + 1] - offsets[cur] > target_chars and i > cur:
                segments.append((cur, i))
                cur = i
        segments.append((cur, b))
    spans: list[Span] = []
    cur_a, cur_b = segments[0]
    for a, b in segments[1:]:
        if offsets[b] - offsets[cur_a] <= target_chars:
            cur_b = b
        else:
            spans.append(Span(offsets[cur_a], offsets[cur_b], cur_a + 1, cur_b))
            cur_a, cur_b = a, b
    spans.append(Span(offsets[cur_a], offsets[cur_b], cur_a + 1, cur_b))
    # A single line longer than the target (minified code, giant log line) is split by characters.
    out: list[Span] = []
    for sp in spans:
        if sp.end - sp.start <= target_chars * 2:
            out.append(sp)
            continue
        for s in range(sp.start, sp.end, target_chars):
            e = min(sp.end, s + target_chars)
            out.append(Span(s, e, sp.start_line + text.count("\n", sp.start, s),
                            sp.start_line + text.count("\n", sp.start, max(s, e - 1))))
    return out
