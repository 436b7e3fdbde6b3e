"""``--mode auto|rlm|direct``: direct sends the whole corpus in one call; auto picks it only when
the corpus fits comfortably in the root model's window."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlm_cli.config import Settings
from rlm_cli.errors import UsageError
from rlm_cli.loop.fitting import choose_mode
from tests.support.cli import model_flags, run_rlm
from tests.support.fake_llm import FakeLLM, last_user, question_message, repl
from tests.support.inproc import corpus, run


def test_choose_mode_thresholds() -> None:
    s = Settings(model="m")
    assert choose_mode(s, 1_000, 128_000)[0] == "direct"
    assert choose_mode(s, 29_999, 128_000)[0] == "direct"
    assert choose_mode(s, 30_000, 128_000)[0] == "rlm"  # the absolute cap
    assert choose_mode(s, 3_000, 8_192)[0] == "rlm"  # over a quarter of a small window
    assert choose_mode(s, 2_000, 8_192)[0] == "direct"
    s.direct_max_tokens, s.direct_max_fraction = 100_000, 0.5
    assert choose_mode(s, 90_000, 272_000)[0] == "direct"
    s.mode = "rlm"
    assert choose_mode(s, 10, 272_000) == ("rlm", "--mode rlm")
    s.mode = "direct"
    assert choose_mode(s, 10**7, 1000)[0] == "direct"
    s.mode = "fast"
    with pytest.raises(UsageError):
        choose_mode(s, 1, 1)


def test_auto_answers_a_small_corpus_in_one_direct_call(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", "The notes list alpha, beta, gamma and delta.")
    r = run(llm, [corpus(tmp_path)], "Which words?", mode="auto")
    assert r.error is None, r.error
    assert r.outcome is not None and r.outcome.result.mode == "direct"
    assert r.answer == "The notes list alpha, beta, gamma and delta."
    reqs = llm.chat_requests("root")
    assert len(reqs) == 1
    assert "==> notes.txt <==\nalpha beta\ngamma delta" in last_user(reqs[0])
    assert last_user(reqs[0]).endswith("Question: Which words?")
    mode = r.of("mode")[0]
    assert mode["mode"] == "direct" and mode["root_window"] == 32_768 and mode["root_window_source"] == "default"


def test_auto_keeps_a_large_corpus_in_the_repl(tmp_path: Path, llm: FakeLLM) -> None:
    big = "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(4_000))  # ~50k tokens
    llm.script("root", repl("print(len(context))"), repl("FINAL(context.count('fox'))"))
    r = run(llm, [corpus(tmp_path, big)], "How many foxes?", mode="auto")
    assert r.error is None, r.error
    assert r.outcome is not None and r.outcome.result.mode == "rlm"
    assert r.answer == "4000"
    first = llm.chat_requests("root")[0]
    assert sum(len(str(m["content"])) for m in first["messages"]) < 8_000  # the corpus stayed in the REPL


def test_auto_respects_a_small_declared_window(tmp_path: Path, llm: FakeLLM) -> None:
    text = "".join(f"entry {i} value {i * 7}\n" for i in range(800))  # ~6k tokens
    llm.script("root", repl("print(len(context))"), repl("FINAL('rlm')"))
    r = run(llm, [corpus(tmp_path, text)], mode="auto", root_model_window=16_000)
    assert r.outcome is not None and r.outcome.result.mode == "rlm"
    llm.script("root", "direct answer")
    r = run(llm, [corpus(tmp_path, text)], mode="auto", root_model_window=64_000)
    assert r.outcome is not None and r.outcome.result.mode == "direct"


def test_forced_direct_that_does_not_fit_is_a_usage_error(tmp_path: Path, llm: FakeLLM) -> None:
    text = "word " * 5_000
    r = run(llm, [corpus(tmp_path, text)], mode="direct", root_model_window=2_000)
    assert isinstance(r.error, UsageError)
    assert "input window" in r.error.message
    assert llm.requests == []


def test_cli_default_mode_is_auto_and_shown(tmp_path: Path, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLM_MODE")
    (tmp_path / "a.txt").write_text("the password policy requires 12 characters\n")
    llm.script("root", "12 characters.")
    res = run_rlm("ask", str(tmp_path / "a.txt"), "How long must passwords be?", *model_flags(llm), "--json")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["mode"] == "direct" and doc["answer"] == "12 characters."
    assert "mode direct" in res.stderr
    res = run_rlm("ask", str(tmp_path / "a.txt"), "q?", *model_flags(llm), "--mode", "fast")
    assert res.code == 2 and "--mode" in res.stderr


def test_auto_keeps_a_small_corpus_in_the_repl_when_the_question_fills_the_window(tmp_path: Path,
                                                                                  llm: FakeLLM) -> None:
    question = "Compare these notes with the list below. " + "item " * 40_000 + "Which words are missing?"
    (tmp_path / "q.txt").write_text(question)
    (tmp_path / "notes.txt").write_text("alpha beta\n")
    llm.script("root", repl("print(len(context))"), repl("FINAL('gamma')"))
    res = run_rlm("ask", str(tmp_path / "notes.txt"), "--question-file", str(tmp_path / "q.txt"), "--mode", "auto",
                  *model_flags(llm))
    assert res.code == 0, res.stderr  # it used to go direct and stop with "--mode direct: ... window"
    assert res.stdout == "gamma\n"
    assert "mode rlm" in res.stderr and "with the question it needs" in res.stderr
    assert "Which words are missing?" in question_message(llm.chat_requests("root")[0])
