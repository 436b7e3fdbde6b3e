"""The chunker: semantic boundaries per file type, the size target, exact coverage and 1-based
line numbers."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from rlm_cli.corpus.chunker import Span, kind_of, primary_boundaries, split_text


def check_spans(text: str, spans: list[Span], target_chars: int) -> None:
    """Spans are contiguous, cover ``text``, stay within the target and carry the right lines."""
    assert spans[0].start == 0 and spans[-1].end == len(text)
    for a, b in zip(spans, spans[1:], strict=False):
        assert a.end == b.start
    for sp in spans:
        assert 0 < sp.end - sp.start <= target_chars
        assert sp.start_line == text.count("\n", 0, sp.start) + 1
        assert sp.end_line == text.count("\n", 0, sp.end - 1) + 1


def starts(text: str, spans: list[Span]) -> list[str]:
    return [text[sp.start:sp.end].splitlines()[0] for sp in spans]


def test_kinds_by_extension() -> None:
    assert [kind_of(p) for p in ("a/b.py", "x.TS", "doc.md", "notes.rst", "app.log", "Makefile", ".bashrc",
                                 "lib.rb")] == ["python", "brace", "markdown", "rst", "text", "text", "text",
                                                "keyword"]


def test_small_text_is_one_chunk_and_empty_text_none() -> None:
    assert split_text("a\nb\n", "x.py", 2000) == [Span(0, 4, 1, 2)]
    assert split_text("a\nb", "x.py", 2000) == [Span(0, 3, 1, 2)]
    assert split_text("", "x.py", 2000) == []


def test_python_chunks_start_at_top_level_definitions_with_their_decorators_and_comments() -> None:
    parts = []
    for i in range(12):
        body = "".join(f"    x{j} = {j} * {i}\n" for j in range(6))
        parts.append(f"# helper number {i}\n@decorator({i})\ndef func_{i}(a, b):\n{body}\n\n")
    text = "import os\n\n\n" + "".join(parts) + "class Last:\n    pass\n"
    spans = split_text(text, "mod.py", 100)  # 400 characters: about 3 functions
    check_spans(text, spans, 400)
    assert len(spans) > 3
    for first in starts(text, spans)[1:]:
        assert first.startswith("# helper number") or first.startswith("class Last")
    # decorator and def are never separated
    for sp in spans:
        piece = text[sp.start:sp.end]
        assert piece.count("@decorator") == piece.count("def func_")


def test_nested_definitions_are_not_boundaries() -> None:
    text = "class Big:\n" + "".join(f"    def m{i}(self):\n        return {i}\n\n" for i in range(40))
    assert primary_boundaries(text, "python") == []
    check_spans(text, split_text(text, "big.py", 60), 240)


def test_markdown_splits_at_headings_but_not_inside_code_fences() -> None:
    sections = []
    for i in range(8):
        sections.append(f"## Section {i}\n\n" + "words " * 30 + "\n\n")
    fence = "```sh\n# not a heading\n" + "echo hi\n" * 5 + "```\n\n"
    text = "# Title\n\nintro\n\n" + sections[0] + fence + "".join(sections[1:]) + "Setext\n======\n\nend\n"
    assert text.index("# not a heading") not in primary_boundaries(text, "markdown")
    spans = split_text(text, "README.md", 100)
    check_spans(text, spans, 400)
    for first in starts(text, spans)[1:]:
        assert first.startswith("## Section") or first == "Setext"


def test_rst_splits_at_underlined_titles() -> None:
    text = "Title\n=====\n\n" + "".join(f"Part {i}\n-------\n\n" + "text " * 40 + "\n\n" for i in range(6))
    spans = split_text(text, "guide.rst", 70)
    check_spans(text, spans, 280)
    assert all(first.startswith("Part ") for first in starts(text, spans)[1:])


def test_logs_split_at_paragraphs_then_line_groups() -> None:
    paragraphs = "".join("\n".join(f"2024-01-0{p} INFO event {i}" for i in range(5)) + "\n\n" for p in range(1, 9))
    spans = split_text(paragraphs, "app.log", 60)
    check_spans(paragraphs, spans, 240)
    assert all(paragraphs[sp.start - 2:sp.start] == "\n\n" for sp in spans[1:])
    lines = "".join(f"2024-01-01 12:00:{i:02d} WARN request {i} took long\n" for i in range(60))
    spans = split_text(lines, "app.log", 60)
    check_spans(lines, spans, 240)
    assert all(lines[sp.start - 1] == "\n" for sp in spans[1:])  # whole lines


def test_brace_language_splits_after_closing_braces() -> None:
    funcs = "".join(f"int f{i}(int x) {{\n" + "    x += 1;\n" * 6 + "    return x;\n}\n" for i in range(10))
    text = "#include <stdio.h>\n\n" + funcs
    spans = split_text(text, "a.c", 50)
    check_spans(text, spans, 200)
    assert all(first.startswith("int f") for first in starts(text, spans)[1:])


def test_a_single_huge_line_is_cut_by_characters_with_its_line_number() -> None:
    text = "head\n" + "x" * 1000 + "\ntail\n"
    spans = split_text(text, "min.js", 50)
    check_spans(text, spans, 200)
    assert [sp.start_line for sp in spans][:3] == [1, 2, 2]
    assert spans[-1].end_line == 3


def test_a_long_prose_line_is_cut_between_words() -> None:
    text = " ".join(f"word{i}" for i in range(300)) + "\n"
    spans = split_text(text, "notes.txt", 50)
    check_spans(text, spans, 200)
    assert all(text[sp.end - 1] == " " for sp in spans[:-1])
    assert all(sp.start_line == sp.end_line == 1 for sp in spans)


@pytest.mark.parametrize("path", ["a.py", "a.md", "a.rst", "a.log", "a.go", "a.rb"])
def test_random_texts_keep_every_invariant(path: str) -> None:
    rng = random.Random(hash(path) & 0xFFFF)
    pieces = ["def f():\n", "    pass\n", "\n", "# h\n", "## h2\n", "Title\n", "=====\n", "}\n", "```\n",
              "x" * 300 + "\n", "word " * 20 + "\n", "\r\n", "漢字😀\n", "@d\n", "class C:\n"]
    for _ in range(25):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 200)))
        target = rng.choice([16, 30, 100, 500])
        check_spans(text, split_text(text, path, target), target * 4)


def _reference_python_boundaries(text: str) -> list[int]:
    """The rule spelled out line by line (lines end at ``\\n`` only): a line (not the first)
    starting ``def``/``class``/``async def`` and a space or tab, moved up over the ``@``/``#``
    lines right above it."""
    lines = text.split("\n")
    starts, pos = [], 0
    for line in lines:
        starts.append(pos)
        pos += len(line) + 1
    out = []
    for i, line in enumerate(lines):
        if i and re.match(r"(?:async[ \t]+def|def|class)[ \t]", line):
            j = i
            while j > 0 and lines[j - 1].startswith(("@", "#")):
                j -= 1
            if starts[j] > 0:
                out.append(starts[j])
    return out


def test_python_boundaries_follow_the_rule_on_real_files() -> None:
    """The boundaries found with one ``\\n``-led search are the rule's, on real files and edge cases."""
    import sysconfig

    root = Path(sysconfig.get_paths()["stdlib"])
    texts = [(root / rel).read_text(encoding="utf-8") for rel in ("argparse.py", "json/decoder.py", "dataclasses.py")]
    texts += ["def first():\n    pass\n", "x = 1\n@d\n# c\ndef f():\n  pass\nclass\tC: pass\nasync  def g(): pass\n",
              "x\r\ndef f(): pass\r\n", "x\n    def nested(): pass\ndefine = 1\nclassy = 2\n"]
    for text in texts:
        found = primary_boundaries(text, "python")
        assert found == _reference_python_boundaries(text)
    assert len(primary_boundaries(texts[0], "python")) > 20
