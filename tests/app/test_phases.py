"""Phases: inferred from the helper counts the REPL worker reports, labelled per iteration."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from rlm_cli.app.phases import PhaseTagger, block_phase, iteration_phase
from rlm_cli.output.trace import event
from tests.support.fake_llm import FakeLLM, repl
from tests.support.inproc import corpus, run


@pytest.mark.parametrize("helpers, phase", [
    ({"grep": 1}, "explore"),
    ({"files": 2, "context": 1}, "explore"),
    ({"read_file": 1, "search": 1}, "explore"),
    ({"chunk_text": 3, "llm_query": 3, "llm_query_batched": 1}, "decompose"),
    ({"rlm_query": 1}, "decompose"),
    ({}, "aggregate"),
    ({"SHOW_VARS": 1, "grep": 0}, "aggregate"),
])
def test_block_phase(helpers: dict[str, int], phase: str) -> None:
    assert block_phase(helpers) == phase


def test_iteration_phase() -> None:
    assert iteration_phase({"grep": 1}, ran_code=True, finished=True) == "terminate"
    assert iteration_phase({}, ran_code=False, finished=True) == "terminate"  # a FINAL line in the text
    assert iteration_phase({}, ran_code=False, finished=False) is None  # a reply without code
    assert iteration_phase({"grep": 2, "llm_query": 1}, ran_code=True, finished=False) == "decompose"


def test_tagger_labels_outputs_and_closes_each_iteration_before_the_next() -> None:
    seen: list[dict[str, Any]] = []
    tag = PhaseTagger(seen.append)
    tag(event("iteration", 0, iteration=1))
    tag(event("output", 0, block=1, helpers={"grep": 1}))
    tag(event("output", 0, block=2, helpers={"read_file": 1}))
    tag(event("iteration", 0, iteration=2))
    tag(event("output", 0, block=1, helpers={"FINAL": 1}))
    tag(event("iteration", 0, iteration=3))  # FINAL refused (turn logic): not terminate
    tag(event("iteration", 0, iteration=4))  # a reply without code: no phase
    tag(event("output", 0, block=1, helpers={"FINAL": 1}))
    tag(event("final", 0, status="final", iterations=4))
    kinds = [(e["type"], e.get("phase"), e.get("iteration")) for e in seen]
    assert kinds == [("iteration", None, 1), ("output", "explore", None), ("output", "explore", None),
                     ("phase", "explore", 1), ("iteration", None, 2), ("output", "aggregate", None),
                     ("phase", "aggregate", 2), ("iteration", None, 3), ("iteration", None, 4),
                     ("output", "aggregate", None), ("phase", "terminate", 4), ("final", None, None)]
    assert seen[3]["helpers"] == {"grep": 1, "read_file": 1}


def test_tagger_keeps_loops_of_other_threads_and_depths_apart() -> None:
    seen: list[dict[str, Any]] = []
    tag = PhaseTagger(seen.append)
    tag(event("iteration", 0, iteration=1))
    tag(event("output", 0, block=1, helpers={"grep": 1}))

    def child() -> None:  # a sub-RLM's loop runs in the LMHandler's thread, one depth down
        tag(event("iteration", 1, iteration=1))
        tag(event("output", 1, block=1, helpers={"llm_query": 1}))
        tag(event("final", 1, status="final", iterations=1))

    t = threading.Thread(target=child)
    t.start()
    t.join()
    tag(event("summary", 0, status="budget_exceeded"))  # a stop: open iterations still get their phase
    phases = [(e["depth"], e["phase"]) for e in seen if e["type"] == "phase"]
    assert phases == [(1, "terminate"), (0, "explore")]


def test_a_run_labels_every_iteration_from_what_its_code_did(tmp_path: Path, llm: FakeLLM) -> None:
    llm.default("sub", "ok")
    llm.script("root",
               repl("print(len(files), files[0]['path'])"),
               repl("hits = grep('beta')\nprint(hits)"),
               repl("answers = llm_query_batched([chunk_text(0), 'b'])\nprint(answers)"),
               repl("total = 1 + 2\nprint(total)"),
               "No code this time.",
               repl("FINAL(str(total))"))
    r = run(llm, [corpus(tmp_path)])
    assert r.error is None and r.answer == "3"
    phases = [(e["iteration"], e["phase"]) for e in r.of("phase")]
    assert phases == [(1, "explore"), (2, "explore"), (3, "decompose"), (4, "aggregate"), (6, "terminate")]
    assert r.of("phase")[2]["helpers"] == {"llm_query_batched": 1, "llm_query": 2, "chunk_text": 1}
    assert [e.get("phase") for e in r.of("output")] == ["explore", "explore", "decompose", "aggregate", "aggregate"]
