"""``sources``: what a run looked at, how, and what its answer cites (``rlm_cli.output.sources``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlm_cli.output.sources import build_sources, cite_lines, direct_rows, merge_rows
from tests.support.cli import model_flags, run_rlm
from tests.support.fake_llm import FakeLLM, repl

FILES = [("src/conf.py", 40), ("src/net/client.py", 60), ("README.md", 10)]


def test_rows_merge_when_they_overlap_or_touch_and_unknown_paths_are_dropped() -> None:
    rows = [("grep", "src/conf.py", 7, 7), ("read_file", "src/conf.py", 1, 6), ("sub_call", "src/conf.py", 20, 30),
            ("printed", "src/conf.py", 25, 99), ("grep", "elsewhere.py", 1, 1), ("grep", "<context>", 3, 3)]
    merged = merge_rows(rows, dict(FILES))
    assert merged == {"src/conf.py": [(1, 7, {"read_file", "grep"}), (20, 40, {"sub_call", "printed"})]}


@pytest.mark.parametrize("answer, cited", [
    ("It is in src/net/client.py:12.", [False, True, False]),
    ("See src/net/client.py:30-45 and src/conf.py line 3", [True, False, True]),
    ("See client.py#L10-L12", [False, True, False]),  # a unique file name is enough
    ("Configured in src/conf.py (lines 30 to 35)", [False, False, False]),
    ("Configured in src/conf.py.", [True, False, False]),  # no lines: every range of the file
    ("Not in conf.pyc nor xsrc/conf.py", [False, False, False]),
])
def test_citations(answer: str, cited: list[bool]) -> None:
    rows = [("grep", "src/conf.py", 3, 3), ("read_file", "src/net/client.py", 10, 14),
            ("sub_call", "src/net/client.py", 40, 50)]
    found, omitted = build_sources(rows, answer, FILES)
    assert [s["cited"] for s in found] == cited and omitted == 0


def test_the_list_is_capped_keeping_cited_and_best_evidenced_ranges() -> None:
    rows = [("grep", "src/net/client.py", n, n) for n in range(1, 60, 2)]  # 30 separate lines
    rows.append(("read_file", "README.md", 2, 3))
    found, omitted = build_sources(rows, "See src/net/client.py:59", FILES, limit=5)
    assert omitted == 26 and len(found) == 5
    assert [(s["path"], s["start_line"]) for s in found][:2] == [("src/net/client.py", 1), ("src/net/client.py", 3)]
    assert ("src/net/client.py", 59) in [(s["path"], s["start_line"]) for s in found]  # cited: kept
    assert ("README.md", 2) in [(s["path"], s["start_line"]) for s in found]  # read: kept


def test_direct_rows_and_cite_lines() -> None:
    found, _ = build_sources(direct_rows(FILES), "The port is set in README.md:4", FILES)
    assert [(s["path"], s["start_line"], s["end_line"], s["how"], s["cited"]) for s in found] == [
        ("src/conf.py", 1, 40, ["direct"], False), ("src/net/client.py", 1, 60, ["direct"], False),
        ("README.md", 1, 10, ["direct"], True)]
    assert cite_lines(found) == ["README.md:1-10"]
    assert cite_lines([dict(s, cited=False) for s in found]) == []  # only what the answer rests on
    every = [dict(s, cited=True) for s in found]
    assert cite_lines(every, limit=2) == [f"{s['path']}:1-{s['end_line']}" for s in found[:2]] + ["... and 1 more"]


def _repo(root: Path) -> Path:
    (root / "src" / "net").mkdir(parents=True)
    (root / "src" / "conf.py").write_text(
        "".join(f"setting_{i} = {i}  # an ordinary configuration value\n" for i in range(1, 7))
        + "MAX_RETRIES = 5  # how often a request is retried\n"
        + "".join(f"other_{i} = {i}  # another configuration value here\n" for i in range(8, 41)))
    (root / "src" / "net" / "client.py").write_text(
        "import time\n\n"
        "def fetch(url, retries=MAX_RETRIES):\n"
        + "".join(f"    step_{i} = url  # part {i} of the request logic\n" for i in range(4, 61)))
    (root / "README.md").write_text("# demo\n\nNothing about retries in this file: only words.\n")
    return root


def test_sources_of_a_run_that_greps_then_reads(tmp_path: Path, llm: FakeLLM) -> None:
    repo = _repo(tmp_path / "repo")
    llm.script("root",
               repl("hits = grep(r'MAX_RETRIES')\nfor h in hits:\n    print(h['file'], h['line'], h['text'])\n"
                    "quiet = grep(r'ordinary')  # found, never printed: not a source"),
               repl("print(read_file('client.py', 1, 12))"),
               repl("FINAL('Requests are retried MAX_RETRIES = 5 times (src/conf.py:7), used by fetch in "
                    "src/net/client.py:3.')"))
    res = run_rlm("ask", str(repo), "How often are requests retried?", *model_flags(llm), "--json",
                  "--no-leads")  # leads lines are sources too (tests/test_leads.py); here: grep and read_file
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["sources"] == [
        {"path": "src/conf.py", "start_line": 7, "end_line": 7, "how": ["grep"], "cited": True},
        {"path": "src/net/client.py", "start_line": 1, "end_line": 12, "how": ["read_file", "grep"], "cited": True},
    ]
    assert doc["sources_omitted"] == 0
    # The trajectory keeps each block's rows; the summary keeps the merged list.
    events = [json.loads(line) for line in Path(doc["trace"]).read_text().splitlines()]
    outputs = [e for e in events if e["type"] == "output"]
    assert outputs[0]["sources"] == [["grep", "src/conf.py", 7, 7], ["grep", "src/net/client.py", 3, 3]]
    assert outputs[1]["sources"] == [["read_file", "src/net/client.py", 1, 12]]
    assert events[-1]["type"] == "summary" and events[-1]["sources"] == doc["sources"]


def test_chunks_sent_to_sub_calls_are_sources_and_cite_lists_them(tmp_path: Path, llm: FakeLLM) -> None:
    repo = _repo(tmp_path / "repo")
    llm.default("sub", "nothing relevant")
    llm.script("root",
               repl("ids = [i for i, c in enumerate(chunks) if c['path'] == 'src/net/client.py']\n"
                    "print(llm_query_batched(['Does this retry?\\n' + chunk_text(i) for i in ids]))"),
               repl("FINAL('fetch retries; see the client.')"))
    res = run_rlm("ask", str(repo), "Who retries?", *model_flags(llm), "--cite", "--no-leads")
    assert res.code == 0, res.stderr
    # The answer names no file: --cite lists nothing it would not rest on; --json has what was seen.
    assert res.stdout == ("fetch retries; see the client.\n\nSources:\n- none: the answer cites none of the 1 "
                          "range the run looked at (--json lists them)\n")
    doc = json.loads(run_rlm("ask", str(repo), "Who retries?", *model_flags(llm), "--json", "--no-leads").stdout)
    assert [(s["path"], s["how"], s["cited"]) for s in doc["sources"]] == [("src/net/client.py", ["sub_call"], False)]
