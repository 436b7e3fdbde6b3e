"""``llm_map(items, instruction)`` through the ``rlm`` command and the scripted server: items packed
several to a sub-call within the sub-model's window, broken numbering asked again once (only the
items it lost), a failed piece ``None`` and said, every piece counted in usage and held to
``--max-sub-calls`` like any sub-call."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rlm_cli.errors import ExitCode
from rlm_cli.sandbox.mapping import ANSWER_TOKENS, TOKENS_PER_ITEM
from tests.support.cli import model_flags, run_rlm
from tests.support.fake_llm import FakeLLM, Reply, last_user, repl

#: A sub-model window of 65,536 tokens: replies are capped at 13,107 (models.window.reply_tokens), and a
#: piece holds at most min(13,107 // ANSWER_TOKENS, 65,536 // TOKENS_PER_ITEM) = 32 items.
WINDOW = 65_536
REPLY = 13_107
PER_PIECE = min(REPLY // ANSWER_TOKENS, WINDOW // TOKENS_PER_ITEM)


def _items(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "items.txt"
    path.write_text("".join(f"item {i}: value {i * 7}\n" for i in range(n)))
    return path


def _numbered(req: dict[str, Any]) -> list[tuple[str, int]]:
    """``(number, value)`` of each item a piece's prompt holds."""
    return [(k, int(v)) for k, v in re.findall(r"^\[(\d+)\] item \d+: value (\d+)$", last_user(req), re.M)]


def test_per_call_sets_the_items_of_a_sub_call(tmp_path: Path, llm: FakeLLM) -> None:
    llm.default("sub", _parity)
    llm.script("root", repl("labels = llm_map(context['items.txt'], 'Is the value even or odd?', per_call=10)\n"
                            "FINAL(str(labels.count('even')))"))
    res, doc = _ask(llm, _items(tmp_path, 45))
    assert res.code == 0, res.stderr
    assert doc["answer"] == "23" and sorted(len(_numbered(r)) for r in llm.chat_requests("sub")) == [5, 10, 10, 10, 10]


def _parity(req: dict[str, Any]) -> str:
    """A sub-model that labels every item right."""
    return "\n".join(f"{k}: {'even' if v % 2 == 0 else 'odd'}" for k, v in _numbered(req))


COUNT = repl("lines = [l for l in context.splitlines() if l.startswith('item')]\n"
             "labels = llm_map(lines, 'Is the value even or odd?')\n"
             "FINAL(str(sum(1 for l in labels if l == 'even')) + ' even, ' + str(labels.count(None)) + ' unknown')")


def _ask(llm: FakeLLM, corpus: Path, *extra: str) -> tuple[Any, dict[str, Any]]:
    res = run_rlm("ask", str(corpus), "How many values are even?", *model_flags(llm), "--json", "--no-leads",
                  "--no-llm-cache", "--sub-model-window", str(WINDOW), *extra)
    return res, json.loads(res.stdout)


def test_items_are_packed_several_to_a_sub_call_and_counted(tmp_path: Path, llm: FakeLLM) -> None:
    llm.default("sub", _parity)
    llm.script("root", COUNT)
    res, doc = _ask(llm, _items(tmp_path, 300))
    assert res.code == 0, res.stderr
    assert doc["answer"] == "150 even, 0 unknown" and doc["iterations"] == 1
    pieces = llm.chat_requests("sub")
    sizes = [len(_numbered(r)) for r in pieces]
    assert sorted(sizes, reverse=True) == [PER_PIECE] * (300 // PER_PIECE) + [300 % PER_PIECE]
    assert PER_PIECE == 32 and sum(sizes) == 300 and all(r["max_tokens"] == REPLY for r in pieces)
    # Every piece is a sub-call like any other: in the result, the usage and the phase of the turn.
    assert doc["sub_calls"] == len(pieces) == doc["usage"]["sub"]["calls"]
    trace = [json.loads(line) for line in Path(doc["trace"]).read_text().splitlines()]
    assert sum(1 for e in trace if e.get("type") == "sub_call") == len(pieces)
    phase = next(e for e in trace if e.get("type") == "phase")
    assert phase["helpers"]["llm_map"] == 1 and phase["helpers"]["llm_query"] == len(pieces)


def test_broken_numbering_is_asked_again_once_only_for_the_items_it_lost(tmp_path: Path, llm: FakeLLM) -> None:
    def loses_two(req: dict[str, Any]) -> str:  # the first piece's reply skips the values 21 and 42
        return "\n".join(f"{k}: {'even' if v % 2 == 0 else 'odd'}" for k, v in _numbered(req) if v not in (21, 42))

    llm.script("sub", loses_two)
    llm.default("sub", _parity)
    llm.script("root", COUNT)
    res, doc = _ask(llm, _items(tmp_path, 20), "--max-concurrency", "1")
    assert res.code == 0, res.stderr
    assert doc["answer"] == "10 even, 0 unknown"
    first, again = llm.chat_requests("sub")
    assert len(_numbered(first)) == 20 and _numbered(again) == [("1", 21), ("2", 42)]
    assert doc["sub_calls"] == 2


def test_items_lost_twice_and_a_failed_piece_are_none_and_said(tmp_path: Path, llm: FakeLLM) -> None:
    def loses_one(req: dict[str, Any]) -> str:  # the value 14 never comes back
        return "\n".join(f"{k}: {'even' if v % 2 == 0 else 'odd'}" for k, v in _numbered(req) if v != 14)

    n = PER_PIECE + 5  # two pieces, sent one after the other
    llm.script("sub", loses_one, Reply(status=400), loses_one)
    llm.script("root", COUNT, repl("FINAL('done')"))
    res, doc = _ask(llm, _items(tmp_path, n), "--max-concurrency", "1", "--policy", "paper")
    assert res.code == 0, res.stderr
    evens_in_first = sum(1 for i in range(PER_PIECE) if i * 7 % 2 == 0) - 1
    assert doc["answer"] == f"{evens_in_first} even, 6 unknown"
    assert len(llm.chat_requests("sub")) == 3  # both pieces, then the lost item asked once more; the 400 not retried
    trace = [json.loads(line) for line in Path(doc["trace"]).read_text().splitlines()]
    output = next(e for e in trace if e.get("type") == "output")["output"]
    span = ", ".join(str(i) for i in [2, *range(PER_PIECE, PER_PIECE + 5)][:12])
    assert f"[llm_map: 6 of {n} items have no answer (None): items {span}" in output
    assert "failed: Error:" in output and "400" in output and "1 came back without their number twice" in output


def test_max_sub_calls_holds_for_llm_map(tmp_path: Path, llm: FakeLLM) -> None:
    llm.default("sub", _parity)
    llm.script("root", COUNT, repl("print('never')"))
    res, doc = _ask(llm, _items(tmp_path, 4 * PER_PIECE), "--max-sub-calls", "2", "--max-concurrency", "1")
    assert res.code == ExitCode.BUDGET, res.stderr
    assert len(llm.chat_requests("sub")) == 2 and doc["usage"]["sub"]["calls"] == 2
    assert len(llm.chat_requests("root")) == 1  # the run stopped after the block


def test_the_same_map_again_costs_no_sub_call(tmp_path: Path, llm: FakeLLM) -> None:
    """Small models rerun their blocks: the same items and instruction get the same answers free."""
    llm.default("sub", _parity)
    again = repl("labels = llm_map(context['items.txt'], 'Is the value even or odd?')\nprint(labels.count('even'))")
    llm.script("root", again, again, repl("FINAL(str(labels.count('even')))"))
    res, doc = _ask(llm, _items(tmp_path, 40), "--policy", "paper")
    assert res.code == 0, res.stderr
    assert doc["answer"] == "20" and doc["sub_calls"] == len(llm.chat_requests("sub")) == 2  # 40 items, 32 a call
    trace = [json.loads(line) for line in Path(doc["trace"]).read_text().splitlines()]
    outputs = [e["output"] for e in trace if e.get("type") == "output"]
    assert "no new sub-call" in outputs[1] and outputs[1].endswith("20\n")


def test_choices_turn_answers_in_words_into_the_labels_and_ask_again_for_an_answer_off_the_list(
        tmp_path: Path, llm: FakeLLM) -> None:
    def in_words(req: dict[str, Any]) -> str:  # the sub-model's own wording; the value 14 gets no label
        assert "Answer with exactly one of: even, odd." in last_user(req)
        return "\n".join(f"{k}: {'I cannot tell' if v == 14 else '**Even**' if v % 2 == 0 else 'It is odd.'}"
                         for k, v in _numbered(req))

    llm.script("sub", in_words)
    llm.default("sub", _parity)
    llm.script("root", repl("from collections import Counter\n"
                            "kinds = llm_map(context['items.txt'], 'Is the value even or odd?', choices=['even', 'odd'])\n"
                            "FINAL(str(sorted(Counter(kinds).items())))"))
    res, doc = _ask(llm, _items(tmp_path, 10), "--max-concurrency", "1")
    assert res.code == 0, res.stderr
    assert doc["answer"] == "[('even', 5), ('odd', 5)]"
    first, again = llm.chat_requests("sub")
    assert len(_numbered(first)) == 10 and _numbered(again) == [("1", 14)]  # only the answer off the list


def test_choices_that_are_not_a_list_of_labels_are_a_type_error_the_model_sees(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("kinds = llm_map(context['items.txt'], 'Even or odd?', choices='even, odd')"),
               repl("FINAL('done')"))
    res, doc = _ask(llm, _items(tmp_path, 4))
    assert res.code == 0, res.stderr
    trace = [json.loads(line) for line in Path(doc["trace"]).read_text().splitlines()]
    output = next(e for e in trace if e.get("type") == "output")["output"]
    assert "TypeError: llm_map(..., choices=[...]): the answers allowed" in output
    assert not llm.chat_requests("sub")


def test_choices_can_be_the_third_argument_and_an_unknown_keyword_shows_the_call(tmp_path: Path,
                                                                                  llm: FakeLLM) -> None:
    llm.default("sub", _parity)
    llm.script("root", repl("kinds = llm_map(context['items.txt'], 'Even or odd?', labels=['even', 'odd'])"),
               repl("kinds = llm_map(context['items.txt'], 'Even or odd?', ['even', 'odd'])\n"
                    "print(kinds.count('even'))"),
               repl("FINAL(str(kinds.count('even')))"))
    res, doc = _ask(llm, _items(tmp_path, 6))
    assert res.code == 0, res.stderr
    assert doc["answer"] == "3"
    trace = [json.loads(line) for line in Path(doc["trace"]).read_text().splitlines()]
    unknown, positional = [e["output"] for e in trace if e.get("type") == "output"][:2]
    assert ("TypeError: llm_map() takes no argument labels=; it is called as "
            "llm_map(items, instruction, choices=None, *, per_call=None, model=None)") in unknown
    assert positional.strip() == "3"
    assert all("Answer with exactly one of: even, odd." in last_user(r) for r in llm.chat_requests("sub"))
