"""``llm_map``'s parts, as pure functions: packing, the piece prompt, reading numbered answers back,
one round of asking again, and the note. (The helper end to end, through the ``rlm`` command and
the relay: ``tests/e2e/test_e2e_llm_map.py``.)"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from rlm_cli.sandbox import mapping
from rlm_cli.sandbox.mapping import (
    ANSWER_TOKENS,
    TOKENS_PER_ITEM,
    Capacity,
    capacity,
    item_texts,
    map_items,
    pack,
    parse_answers,
    piece_prompt,
    run_map,
    window_of,
)


@pytest.fixture(autouse=True)
def _empty_memo() -> None:
    mapping.MEMO.clear()


def test_capacity_leaves_the_reply_free_and_room_for_each_answer() -> None:
    cap = capacity(16_384, 3_276)  # a 16k window; models.window.reply_tokens gives 3,276
    assert cap.prompt_chars == int((16_384 - 3_276) * 0.9) * 3
    assert cap.max_items == 16_384 // TOKENS_PER_ITEM == 8  # fewer than the reply has room for (136)
    big = capacity(200_000, 16_384)
    assert big.prompt_chars > 10 * cap.prompt_chars and big.max_items == 200_000 // TOKENS_PER_ITEM
    assert capacity(16_384, 3_276, per_call=50).max_items == 50
    assert capacity(16_384, 3_276, per_call=500).max_items == 3_276 // ANSWER_TOKENS  # answers must fit


def test_window_of_reads_the_relay_answer_and_falls_back() -> None:
    assert window_of('{"window": 8192, "reply": 1638}') == (8192, 1638)
    assert window_of("Error: model 'x' is not available to code") == (32_768, 32_768 // 5)


def test_pack_keeps_order_and_fills_each_piece_to_its_limits() -> None:
    texts = ["x" * 90] * 100
    by_items = pack(texts, range(100), Capacity(prompt_chars=1_000_000, max_items=30), 50)
    assert [len(p) for p in by_items] == [30, 30, 30, 10]
    assert [i for p in by_items for i in p] == list(range(100))
    by_chars = pack(texts, range(100), Capacity(prompt_chars=2_450, max_items=1_000), 50)
    assert [len(p) for p in by_chars] == [20] * 5  # (2,450 - 50 - 400) chars / 98 per item
    assert pack(["y" * 10_000, "z"], [0, 1], Capacity(prompt_chars=3_000, max_items=10), 0) == [[0], [1]]


def test_piece_prompt_numbers_each_item_on_one_line_between_two_copies_of_the_instruction() -> None:
    text = piece_prompt("Is it about money?", ["first\nline", "second"])
    assert text.startswith("Is it about money?\n\n[1] first line\n[2] second\n\n")
    assert text.endswith("on its own: Is it about money?\nReply with 2 lines, one per item, in this form:\n"
                         "1: <answer for item 1>\n2: <answer for item 2>")
    assert "Reply with 1 line," in piece_prompt("Red?", ["x"])


@pytest.mark.parametrize(("reply", "n", "want"), [
    ("1: yes\n2: no\n3: yes", 3, {1: "yes", 2: "no", 3: "yes"}),
    ("Sure!\n1. yes\n2) no\n**3:** maybe\n- 4: n/a\n[5] last\nHope that helps.", 5,
     {1: "yes", 2: "no", 3: "maybe", 4: "n/a", 5: "last"}),
    ("1:\nyes\n2:\nno", 2, {1: "yes", 2: "no"}),                    # answers on the next line
    ("1: yes\n2: no\n2: yes\n3: no", 3, {1: "yes", 3: "no"}),        # 2 given twice, differently: broken
    ("1: yes\n1: yes\n4: no", 3, {1: "yes"}),                        # the same twice is fine; 4 is out of range
    ("yes, it is", 1, {1: "yes, it is"}),                           # one item: the whole reply
    ("3 apples and 2 pears", 3, {}),                                 # a number without a separator is no label
])
def test_parse_answers(reply: str, n: int, want: dict[int, str]) -> None:
    assert parse_answers(reply, n) == want


def _rounds(answer: Callable[[int, str], str | None]) -> tuple[list[list[str]], Callable[[list[str]], list[str]]]:
    """A sub-model for items ``t0``, ``t1``...: ``answer(round, item)`` is its answer line's text
    (``None``: the line is left out); and the prompts of each round, as sent."""
    rounds: list[list[str]] = []

    def send(prompts: list[str]) -> list[str]:
        rounds.append(prompts)
        return ["\n".join(f"{k}: {a}" for k, t in re.findall(r"^\[(\d+)\] (t\d)$", p, re.M)
                          if (a := answer(len(rounds), t)) is not None) for p in prompts]
    return rounds, send


def test_broken_numbering_is_asked_again_once_for_the_missing_items_only() -> None:
    texts = [f"t{i}" for i in range(6)]
    # the first round loses t2 and t4, the second t4 again
    rounds, send = _rounds(lambda r, t: None if t in (("t2", "t4") if r == 1 else ("t4",)) else f"A{t[1:]}")
    run = run_map(texts, "Label it.", Capacity(prompt_chars=100_000, max_items=100), send)
    assert run.answers == ["A0", "A1", "A2", "A3", None, "A5"]
    assert len(rounds) == 2 and len(rounds[1]) == 1
    assert re.findall(r"^\[\d+\] (t\d)$", rounds[1][0], re.M) == ["t2", "t4"]  # only those, numbered anew
    assert run.calls == 2 and run.asked_again == 2
    assert run.note() == "[llm_map: 1 of 6 items have no answer (None): item 4 (1 came back without their number twice).]\n"


def test_a_failed_piece_is_none_and_said_and_not_asked_again() -> None:
    texts = [f"t{i}" for i in range(4)]
    calls: list[int] = []

    def send(prompts: list[str]) -> list[str]:
        calls.append(len(prompts))
        return ["1: a\n2: b", "Error: budget exceeded: 1 sub-call of --max-sub-calls 1 used"]

    run = run_map(texts, "Label it.", Capacity(prompt_chars=100_000, max_items=2), send)
    assert run.answers == ["a", "b", None, None] and calls == [2]
    note = run.note()
    assert "2 of 4 items have no answer (None): items 2, 3" in note and "budget exceeded" in note


def test_map_items_takes_either_order_and_lines_of_a_str(capsys: pytest.CaptureFixture[str]) -> None:
    def send(prompts: list[str]) -> list[str]:
        return ["\n".join(f"{k}: {t.upper()}" for k, t in re.findall(r"^\[(\d+)\] (\w+)$", p, re.M)) for p in prompts]

    window = '{"window": 16384, "reply": 3276}'
    assert map_items(["a", "b"], "Upper?", lambda: window, send) == ["A", "B"]
    assert map_items("Upper?", ["c"], lambda: window, send) == ["C"]
    assert map_items("x\n\ny\n", "Upper?", lambda: window, send) == ["X", "Y"]
    assert map_items([], "Upper?", lambda: window, send) == []
    assert item_texts([{"file": "a.py", "line": 3, "text": "def f():"}, 7]) == ["def f():", "7"]
    with pytest.raises(TypeError, match=r"llm_map\(items, instruction\)"):
        map_items(["a"], None, lambda: window, send)
    with pytest.raises(TypeError, match="per_call"):
        map_items(["a"], "Upper?", lambda: window, send, per_call=0)
    assert capsys.readouterr().out == ""  # all answered: no note


def test_a_call_answered_in_full_is_answered_again_without_sub_calls(capsys: pytest.CaptureFixture[str]) -> None:
    sent: list[str] = []

    def send(prompts: list[str]) -> list[str]:
        sent.extend(prompts)
        return ["\n".join(f"{k}: {t}!" for k, t in re.findall(r"^\[(\d+)\] (\w+)$", p, re.M)) for p in prompts]

    window = '{"window": 16384, "reply": 3276}'
    first = map_items(["a", "b"], "Shout it.", lambda: window, send)
    assert first == ["a!", "b!"] and len(sent) == 1 and capsys.readouterr().out == ""
    assert map_items(["a", "b"], "Shout it.", lambda: window, send) == first and len(sent) == 1
    assert "no new sub-call" in capsys.readouterr().out
    map_items(["a", "b"], "Whisper it.", lambda: window, send)  # another instruction: asked
    map_items(["a", "b"], "Shout it.", lambda: window, send, model="openai/other")  # another model: asked
    assert len(sent) == 3

    def fails(prompts: list[str]) -> list[str]:
        sent.extend(prompts)
        return ["Error: the model relay could not be reached"] * len(prompts)

    assert map_items(["c"], "Shout it.", lambda: window, fails) == [None]
    assert map_items(["c"], "Shout it.", lambda: window, send) == ["c!"]  # a failed call is not kept


CATS = ["complaint", "compliment", "inquiry", "suggestion"]


@pytest.mark.parametrize(("answer", "want"), [
    ("Complaint", "complaint"), ("complaints.", "complaint"), ("**Suggestion**", "suggestion"),
    ('"inquiry"', "inquiry"), ("inquiries", "inquiry"),                        # plurals, quotes, bold
    ("It is an inquiry", "inquiry"),                                           # named once, anywhere
    ("Complaint, not a suggestion", "complaint"),                              # a negated one does not count
    ("Not a complaint", None), ("No, it is not a complaint.", None), ("this isn't an inquiry", None),
    ("It is not an inquiry, it is a complaint", "complaint"), ("non-complaint", None),
    ("Inquiry (a suggestion too)", "inquiry"),                                 # several: the lead, after a break
    ("Complaint. It also makes a suggestion", "complaint"), ("**Complaint** - with a suggestion", "complaint"),
    ("suggestion/inquiry", None), ("suggestion or inquiry", None),             # several, no lead: none
    ("complaint, suggestion", None), ("complaint; suggestion", None), ("complaint, or a suggestion", None),
    ("Complaint, although it ends with a suggestion", "complaint"),
    ("Not only a complaint but also a suggestion", None), ("It cannot be called a complaint", None),
    ("Complaint, suggestion box aside", "complaint"),                          # a label's word in a sentence
    ("none of these", None), ("", None), ("complaining", None),                # a word that only starts like one
])
def test_match_choice(answer: str, want: str | None) -> None:
    assert mapping.match_choice(answer, CATS) == want


def test_match_choice_prefers_the_longer_choice_and_keeps_the_spelling_given() -> None:
    assert mapping.match_choice("bug fix", ["fix", "bug fix", "docs"]) == "bug fix"
    assert mapping.match_choice("a FIX", ["fix", "bug fix", "docs"]) == "fix"
    assert mapping.match_choice("No, it is not.", ["Yes", "No"]) == "No"  # "not" is not "no"
    assert mapping.match_choice("bug-fix", ["fix", "bug fix"]) == "bug fix"  # a hyphen reads as a space
    assert mapping.match_choice("a Bug Fix", ["fix", "bug-fix"]) == "bug-fix"
    assert mapping.match_choice("red, green", ["red", "green", "blue"]) is None  # names two
    assert mapping.match_choice("**red** and **green**", ["red", "green", "blue"]) is None
    assert mapping.match_choice("Yes, there is no crash.", ["yes", "no"]) == "yes"  # "no" as a word, after the lead
    for answer in ("Yes, no crash.", "Yes; no errors", "yes, no doubt"):
        assert mapping.match_choice(answer, ["yes", "no"]) == "yes", answer
    assert mapping.match_choice("Yes, no.", ["yes", "no"]) is None  # both, listed
    assert mapping.match_choice("Not really - no", ["yes", "no"]) == "no"  # a negation label is not unnamed
    assert mapping.match_choice("not sure", ["yes", "no", "not sure"]) == "not sure"


def test_only_the_head_of_a_long_answer_is_read() -> None:
    # A sub-model repeating itself ("no yes no yes ...", 42k characters) took 14-74 s to read: every
    # label's position against every other. A label answer is short; only its head is read.
    assert mapping.match_choice("x " * mapping.ANSWER_READ_CHARS + "yes", ["yes", "no"]) is None
    assert mapping.match_choice("yes " + "x " * 50_000, ["yes", "no"]) == "yes"


def test_labels_with_a_comma_are_quoted_in_the_request() -> None:
    assert mapping.with_choices("Sure?", ["yes, definitely", "no"]) == \
        'Sure? Answer with exactly one of: "yes, definitely", "no".'
    assert mapping.with_choices("Sure?", ["yes", "no"]) == "Sure? Answer with exactly one of: yes, no."


def test_choices_ask_for_one_of_them_and_an_answer_naming_none_is_asked_again_once(
        capsys: pytest.CaptureFixture[str]) -> None:
    # t1 is answered off the list the first time, t2 both times; the rest in their own words
    first = {"t0": "Inquiry.", "t1": "I am not sure", "t2": "both a complaint and a suggestion", "t3": "**complaints**"}
    again = {"t1": "compliment", "t2": "no idea"}
    rounds, send = _rounds(lambda r, t: (first if r == 1 else again)[t])

    window = '{"window": 16384, "reply": 3276}'
    got = map_items(["t0", "t1", "t2", "t3"], "What kind of message is this?", lambda: window, send, choices=CATS)
    assert got == ["inquiry", "compliment", None, "complaint"]
    assert "Answer with exactly one of: complaint, compliment, inquiry, suggestion." in rounds[0][0]
    assert len(rounds) == 2 and re.findall(r"^\[\d+\] (t\d)$", rounds[1][0], re.M) == ["t1", "t2"]
    assert capsys.readouterr().out == ("[llm_map: 1 of 4 items have no answer (None): item 2 (1 named none of the "
                                       "choices, or several, twice).]\n")


@pytest.mark.parametrize("bad", ["a, b", ["only one"], ["a", ""], ["a", 3], 5, ["same", " same "], ["Yes", "yes", "no"],
                                 ["bug fix", "bug-fix"], ["yes\nno", "maybe"]])
def test_choices_must_be_two_or_more_strs_told_apart(bad: object) -> None:
    with pytest.raises(TypeError, match=r"choices=\["):
        map_items(["x"], "Kind?", lambda: "{}", lambda p: [], choices=bad)
    with pytest.raises(TypeError, match=r"choices=\["):  # checked with no items too
        map_items([], "Kind?", lambda: "{}", lambda p: [], choices=bad)


@pytest.mark.parametrize(("items", "instruction", "says"), [
    ({"k1": "alpha", "k2": "beta"}, "Greek?", "items is a dict"),
    (None, "Greek?", "items is NoneType"), (5, "Greek?", "items is int"),
    ("Is it greek?", "alpha\nbeta", "the wrong way round"),
])
def test_items_that_are_not_a_list_of_items_are_refused_with_the_call(items: object, instruction: str,
                                                                      says: str) -> None:
    with pytest.raises(TypeError, match=r"llm_map\(items, instruction\)") as err:
        map_items(items, instruction, lambda: "{}", lambda p: [])
    assert says in str(err.value)


def test_an_item_whose_second_asking_failed_is_said_once_as_a_failure() -> None:
    replies = iter([["1: no idea\n2: b"], ["Error: budget exceeded: 1 sub-call of --max-sub-calls 1 used"]])
    run = run_map(["t0", "t1"], "Kind?", Capacity(prompt_chars=100_000, max_items=8), lambda prompts: next(replies),
                  lambda a: a if a in ("a", "b") else None)
    assert run.answers == [None, "b"] and run.unmatched == []
    assert run.note() == ("[llm_map: 1 of 2 items have no answer (None): item 0 (the sub-call for item 0 failed: "
                          "Error: budget exceeded: 1 sub-call of --max-sub-calls 1 used).]\n")


def test_the_same_items_with_other_choices_are_asked_again() -> None:
    sent: list[str] = []

    def send(prompts: list[str]) -> list[str]:
        sent.extend(prompts)
        return ["1: yes"] * len(prompts)

    window = '{"window": 16384, "reply": 3276}'
    assert map_items(["a"], "Red?", lambda: window, send, choices=["yes", "no"]) == ["yes"]
    assert map_items(["a"], "Red?", lambda: window, send, choices=["yes", "no", "maybe"]) == ["yes"]
    assert map_items(["a"], "Red?", lambda: window, send, choices=["yes", "no"]) == ["yes"] and len(sent) == 2
