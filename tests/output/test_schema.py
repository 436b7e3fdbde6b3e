"""The ``rlm ask --json`` document against its JSON Schema (``rlm_cli/schemas/ask-result.v1.json``):
every shape a real run prints (final, direct, both partials, errors, replay) is validated."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tests.support.cli import model_flags, run_rlm
from tests.support.fake_llm import FakeLLM, Reply, repl


@pytest.fixture(scope="module")
def validator() -> Draft202012Validator:
    schema = json.loads((resources.files("rlm_cli") / "schemas" / "ask-result.v1.json").read_text("utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _valid(validator: Draft202012Validator, stdout: str) -> dict[str, Any]:
    doc = json.loads(stdout)
    errors = sorted(validator.iter_errors(doc), key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
    assert doc["schema"] == "ask-result.v1"
    return doc


def _corpus(tmp_path: Path) -> Path:
    root = tmp_path / "c"
    root.mkdir(exist_ok=True)
    (root / "a.txt").write_text("".join(f"line {i} of a small but sufficient corpus file\n" for i in range(30)))
    return root


def test_final_and_replayed_documents(tmp_path: Path, llm: FakeLLM, validator: Draft202012Validator) -> None:
    llm.script("root", repl("print(read_file('a.txt', 1, 3))"), repl("FINAL('a.txt:2 says line 1')"))
    res = run_rlm("ask", str(_corpus(tmp_path)), "q?", *model_flags(llm), "--json")
    assert res.code == 0, res.stderr
    doc = _valid(validator, res.stdout)
    assert doc["status"] == "final" and "partial" not in doc and doc["sources"][0]["cited"] is True
    replayed = run_rlm("replay", "last", "--json")
    assert replayed.code == 0, replayed.stderr
    assert _valid(validator, replayed.stdout)["same_answer"] is True


def test_direct_document(tmp_path: Path, llm: FakeLLM, validator: Draft202012Validator) -> None:
    llm.script("root", "The corpus counts lines; a.txt:1 starts it.")
    res = run_rlm("ask", str(_corpus(tmp_path)), "q?", *model_flags(llm), "--mode", "direct", "--json")
    assert res.code == 0, res.stderr
    doc = _valid(validator, res.stdout)
    assert doc["mode"] == "direct"
    assert doc["sources"] == [{"path": "a.txt", "start_line": 1, "end_line": 30, "how": ["direct"], "cited": True}]


def test_partial_documents(tmp_path: Path, llm: FakeLLM, validator: Draft202012Validator) -> None:
    corpus = _corpus(tmp_path)
    llm.script("root", repl("print(1)"), repl("print(2)"), "best guess")
    res = run_rlm("ask", str(corpus), "q?", *model_flags(llm), "--json", "--max-iterations", "2")
    assert res.code == 5, res.stderr
    doc = _valid(validator, res.stdout)
    assert doc["status"] == "max_iterations" and doc["partial"] is True and "budget" not in doc
    llm.script("root", Reply(repl("print(1)"), prompt_tokens=900, completion_tokens=200), repl("print(2)"))
    res = run_rlm("ask", str(corpus), "q?", *model_flags(llm), "--json", "--max-tokens", "1000", "--no-llm-cache")
    assert res.code == 6, res.stderr
    doc = _valid(validator, res.stdout)
    assert doc["status"] == "budget_exceeded" and doc["budget"] == "tokens" and doc["partial"] is True


def test_error_documents(tmp_path: Path, llm: FakeLLM, validator: Draft202012Validator) -> None:
    res = run_rlm("ask", str(tmp_path / "missing"), "q?", *model_flags(llm), "--json")
    assert res.code == 2 and _valid(validator, res.stdout)["status"] == "error"
    res = run_rlm("ask", str(tmp_path), "q?", "--max-iterations", "zero", "--json")  # the parser refuses it
    assert res.code == 2 and _valid(validator, res.stdout)["exit_code"] == 2
    llm.script("root", Reply(status=401))
    res = run_rlm("ask", str(_corpus(tmp_path)), "q?", *model_flags(llm), "--json")
    assert res.code == 4 and _valid(validator, res.stdout)["exit_code"] == 4


def test_the_schema_rejects_what_breaks_the_contract(validator: Draft202012Validator) -> None:
    error = {"schema": "ask-result.v1", "status": "error", "error": "x", "exit_code": 2, "answer": None}
    assert validator.is_valid(error)
    assert not validator.is_valid({**error, "exit_code": 0})
    assert not validator.is_valid({**error, "surprise": 1})  # a new field must be added to the schema first
    assert not validator.is_valid({k: v for k, v in error.items() if k != "schema"})


def test_a_document_whose_sources_came_from_the_leads_is_valid(tmp_path: Path, llm: FakeLLM,
                                                               validator: Draft202012Validator) -> None:
    root = _corpus(tmp_path)
    (root / "b.txt").write_text("nothing here\nthe purple elephant sleeps at noon\n")
    llm.script("root", repl("FINAL('b.txt:2: at noon')"))
    res = run_rlm("ask", str(root), "When does the purple elephant sleep?", *model_flags(llm), "--json")
    assert res.code == 0, res.stderr
    doc = _valid(validator, res.stdout)
    assert any("leads" in s["how"] for s in doc["sources"])
