"""A lone surrogate escape in a corpus file (``"\\ud800"`` in JSON, issue 47) is data like any
other: the corpus loads, the worker holds it, and ``rlm ask`` answers (exit 0). The parsed value
keeps the escape's character as U+FFFD (docs/usage.md): a lone surrogate is no Unicode text, and
could not be written to the index, the wire or a report as UTF-8."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import structured
from rlm_cli.corpus.decoding import SourceFile, decode_kind
from rlm_cli.sandbox.data_helpers import Rows
from tests.support.cli import model_flags, run_rlm
from tests.support.fake_llm import FakeLLM, repl


def _corpus(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "data.json").write_text('{"k": "\\ud800", "n": 7}\n')
    (root / "rows.jsonl").write_text('{"k": "\\udfff x"}\n{"k": "ok"}\n')
    (root / "notes.txt").write_text("the key is k\n")
    return root


def test_a_lone_surrogate_escape_in_json_answers_normally(tmp_path: Path, llm: FakeLLM) -> None:
    code = ("d = data['data.json']\nrows = records('rows.jsonl')\n"
            "print(repr(d['k']), d['n'], repr(rows[0]['k']), len(context) > 0)\n"
            "print(grep('ud800|\\ufffd')[:3])")
    llm.script("root", repl(code), "FINAL('seven')")
    res = run_rlm("ask", str(_corpus(tmp_path)), "What is n?", *model_flags(llm), "--json", "--no-llm-cache")
    assert res.code == 0, res.stderr[-2000:]
    doc = json.loads(res.stdout)
    assert doc["answer"] == "seven"
    seen = [str(m.get("content")) for r in llm.requests for m in r["messages"]]
    assert any("'\ufffd' 7 '\ufffd x' True" in c for c in seen), seen[-1][-600:]  # the values, with U+FFFD
    assert any('"\\ud800"' in c for c in seen)  # context: the file's text, the escape as written


@pytest.mark.parametrize("kind, text, expect", [
    ("json", '{"\\udc80key": ["\\ud800", "\\ud83d\\ude00", 1]}', {"\ufffdkey": ["\ufffd", "\U0001f600", 1]}),
    ("json", '["a\\uDFFFb", {"k": "\\\\ud800"}]', ["a\ufffdb", {"k": "\\ud800"}]),  # (an escaped backslash: no escape)
    ("jsonl", '{"k": "\\ud800"}\n["\\udbff"]\n', [{"k": "\ufffd"}, ["\ufffd"]]),
])
def test_parsed_values_hold_u_fffd_for_each_lone_surrogate_and_keep_valid_pairs(kind: str, text: str,
                                                                               expect: Any) -> None:
    payload, summary = structured.parse(kind, text)
    if kind == "json":
        assert payload["value"] == expect
    else:
        assert list(Rows("f", payload["tables"][0])) == expect
    json.dumps(summary, ensure_ascii=False).encode("utf-8")  # (UTF-8 everywhere: this raised before)


def test_a_notebook_cell_with_a_lone_surrogate_escape_is_text_with_u_fffd() -> None:
    nb = '{"cells": [{"cell_type": "code", "source": ["x = \\"\\ud800\\""], "outputs": []}]}'
    d = decode_kind(nb.encode(), "notebook", "", SourceFile("n.ipynb", None, len(nb), 0), CorpusOptions(), False)
    assert d is not None and 'x = "\ufffd"' in d.text
    d.text.encode("utf-8")


def test_rlm_audit_of_such_a_corpus_writes_its_reports(tmp_path: Path, llm: FakeLLM) -> None:
    repo = _corpus(tmp_path)
    (repo / "rlm-audit.toml").write_text('[[check]]\nid = "has-k"\nquestion = "How many files name k?"\n'
                                         'type = "int"\nseverity = "error"\nmin = 1\n')
    llm.script("root", repl("n = len(grep('k'))\nprint(n, repr(data['data.json']['k']))"), repl("FINAL(n)"))
    res = run_rlm("audit", str(repo), "--model", "openai/root", "--api-base", llm.url, "--policy", "standard",
                  "--json", "--junit", str(tmp_path / "junit.xml"), "--no-llm-cache")
    assert res.code == 0, res.stderr[-2000:]
    doc = json.loads(res.stdout)
    assert doc["status"] == "pass" and [c["status"] for c in doc["checks"]] == ["pass"]
    assert (tmp_path / "junit.xml").read_text(encoding="utf-8").startswith("<?xml")
