"""rlm refuses, before starting a REPL worker, a corpus that would not fit in memory (issue 25):
exit 2 with what it needs, instead of a worker killed by the out-of-memory killer. The memory
available is lowered with ``RLM_MEMORY_AVAILABLE``."""

from __future__ import annotations

import json
import re
from pathlib import Path

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus.store import load_corpus
from rlm_cli.sandbox.memory import worker_need
from tests.support.cli import model_flags, run_rlm
from tests.support.fake_llm import FakeLLM, repl


def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    for i in range(3):
        (root / f"notes-{i}.txt").write_text(f"line {i} of the notes, about retries\n" * 2000)
    return root


def test_a_corpus_that_does_not_fit_is_refused_before_any_worker_or_model_call(tmp_path: Path,
                                                                              llm: FakeLLM) -> None:
    root = corpus(tmp_path)
    res = run_rlm("ask", str(root), "What is in the notes?", *model_flags(llm), "--json",
                  env={"RLM_MEMORY_AVAILABLE": "1M"})
    assert res.code == 2, res.stderr
    doc = json.loads(res.stdout)
    assert doc["status"] == "error" and doc["exit_code"] == 2
    assert "does not fit in memory" in doc["error"] and "1M is available" in doc["error"]
    assert "Traceback" not in res.stderr
    assert llm.requests == []  # refused before the first model call


def test_jobs_count_every_worker_and_memory_limit_is_checked_before_loading(tmp_path: Path, llm: FakeLLM) -> None:
    root = corpus(tmp_path)
    need = worker_need(load_corpus([str(root)], CorpusOptions()))
    room = {"RLM_MEMORY_AVAILABLE": str(need * 3 // 2)}  # one worker fits, two do not
    llm.default("root", repl("FINAL('ok')"))
    one = run_rlm("ask", str(root), "--question", "first?", "--question", "second?", *model_flags(llm), "--jobs", "1", env=room)
    assert one.code == 0, one.stderr
    two = run_rlm("ask", str(root), "--question", "first?", "--question", "second?", *model_flags(llm), "--jobs", "2", env=room)
    assert two.code == 2 and "2 REPL workers need" in two.stderr and "lower --jobs" in two.stderr
    # A --memory-limit below what `context` alone takes is refused before the worker loads it.
    (root / "big.txt").write_text("x" * 3_000_000 + "\n")
    small = run_rlm("ask", str(root), "q?", *model_flags(llm), "--memory-limit", "65M")
    assert small.code == 2 and "--memory-limit 65M is too small for this corpus" in small.stderr
    advice = re.search(r"use --memory-limit (\S+) or more", small.stderr)
    assert advice and re.fullmatch(r"\d+[MG]", advice[1]), small.stderr  # typed as the flag takes it
    fits = run_rlm("ask", str(root), "q?", *model_flags(llm), "--memory-limit", advice[1])
    assert fits.code == 0, fits.stderr


def test_sizes_in_advice_are_typed_as_the_flag_takes_them() -> None:
    from rlm_cli.config_keys import format_size, limit_advice, parse_size

    mib = 1024**2
    assert limit_advice(2_880 * mib) == "2880M" and limit_advice(2_881 * mib) == "2944M"
    assert limit_advice(3 * 1024 * mib - 1) == "3G" and limit_advice(1) == "64M"
    for nbytes in (1, 65 * mib, 2_880 * mib + 5, 40 * 1024**3, 20_000 * 1024**4):
        assert parse_size(limit_advice(nbytes), "--memory-limit") >= nbytes
        assert "," not in format_size(nbytes)
        parse_size(format_size(nbytes), "--memory-limit")  # what an error prints can be typed back
