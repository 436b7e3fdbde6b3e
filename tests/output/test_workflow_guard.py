"""``rlm_cli.output.workflow_guard``: no text rlm writes is a GitHub runner command, whole or
written a piece at a time; job summary cells are plain text for a real Markdown parser."""

from __future__ import annotations

import io
import re

import pytest
from markdown_it import MarkdownIt

from rlm_cli.output.workflow_guard import (
    BREAK,
    GuardedStream,
    Neutraliser,
    active,
    for_stream,
    neutralise,
    own_commands,
    summary_text,
)

#: What the runner takes as a command in one line (ActionCommand.TryParseV2 after TrimStart; TryParse anywhere).
_NEW = re.compile(r"\A\s*::")


def runner_commands(text: str) -> list[str]:
    """The lines of ``text`` the GitHub runner would read as workflow commands (lines end at
    \\n, \\r or \\r\\n, as .NET's ReadLine)."""
    return [line for line in re.split(r"\r\n|\r|\n", text) if _NEW.match(line) or "##[" in line]


HOSTILE = ("##[add-mask]secret\n::stop-commands::tok\n  ::error::x\n\t::warning file=a.py::y\r::notice::z\n"
           "text ##[set-output name=a]b and ::not-a-command:: here\nC++ std::string\n")


def test_whole_text_is_neutralised_and_reads_the_same() -> None:
    out = neutralise(HOSTILE)
    assert runner_commands(HOSTILE) and not runner_commands(out)
    assert out.replace(BREAK, "") == HOSTILE
    assert "std::string" in out and "::not-a-command:: here" in out  # only line starts are touched


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7])
def test_pieces_split_anywhere_are_neutralised(size: int) -> None:
    guard = Neutraliser()
    out = "".join(guard.feed(HOSTILE[i:i + size]) for i in range(0, len(HOSTILE), size))
    assert not runner_commands(out) and out.replace(BREAK, "") == HOSTILE


def test_own_commands_keep_their_line_start_but_not_old_style_commands() -> None:
    stream = io.StringIO()
    guarded = GuardedStream(stream)
    with own_commands():
        guarded.write("::error file=a.py,line=1::x ##[add-mask]y\n")
    guarded.write("::error::forged\n")
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("::error file=a.py,line=1::x") and "##[" not in lines[0]
    assert not runner_commands(lines[1])
    assert for_stream("::error::z\n", guarded) != "::error::z\n"
    assert for_stream("::error::z\n", stream) == "::error::z\n"  # an unguarded stream: as is


def test_active_only_when_the_runner_says_true() -> None:
    assert active({"GITHUB_ACTIONS": "true"}) and active({"GITHUB_ACTIONS": "True"})
    assert not active({}) and not active({"GITHUB_ACTIONS": "false"})


def test_summary_cells_are_plain_text_to_a_markdown_parser() -> None:
    hostile = ['<img src="https://evil.example/x.png">', "[Approve](javascript:alert(1))",
               "a | b\n| c |", "`code` **bold** _em_ # h", "https://evil.example www.evil.example",
               "<script>alert(1)</script>", "back\\slash \\| pipe", "![img](https://e.x/a.png)"]
    rows = ["| n | text |", "| --- | --- |"] + [f"| {n} | {summary_text(t)} |" for n, t in enumerate(hostile)]
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    html = md.render("\n".join(rows) + "\n")
    assert "<img" not in html and "<script" not in html and "<a " not in html and "<strong>" not in html
    assert "<em>" not in html and "<code>" not in html
    tokens = md.parse("\n".join(rows) + "\n")
    cells = [t for t in tokens if t.type == "td_open"]
    assert len(cells) == 2 * len(hostile)  # no row gained or lost a cell
    texts = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "td_open"][1::2]
    rendered = [md.renderInline(t) for t in texts]
    for text, html_cell in zip(hostile, rendered, strict=True):  # the cell shows the text itself
        import html as html_lib

        assert html_lib.unescape(html_cell) == " ".join(text.split())
    assert summary_text("x" * 500, 50) == "x" * 49 + "…"


def test_json_documents_keep_their_values_under_github_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from rlm_cli.output.answer import json_text
    from rlm_cli.output.reports.text import strict_json

    doc = {"answer": "##[add-mask]x ###[ \\##[", "n": 1}
    assert "##[" in json_text(doc)  # outside GitHub Actions: as json.dumps writes it
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    for text in (json_text(doc), strict_json(doc)):
        assert "##[" not in text and json.loads(text) == doc and not runner_commands(text)
