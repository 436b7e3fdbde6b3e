"""Reading replies (pure): claimed output, the evidence cut, prose that is not an answer, errors."""

from __future__ import annotations

import pytest

from rlm_cli.loop.reply import claims_output, code_blocks, error_signature, looks_like_answer, plan

INVENTED = ("Let me search.\n```repl\nhits = grep(r'def urlparse')\nprint(hits[:3])\n```\n"
            "Output: [{'file': 'distutils/command/upload.py', 'line': 14}]\n"
            "So the answer is:\n```repl\nFINAL('distutils/command/upload.py')\n```")


@pytest.mark.parametrize("segment", [
    "\nOutput: [{'file': 'a.py'}]\n",
    "\n**Output:**\n```\n3\n```\n",
    "\nThe output of this code is:\n42\n",
    "\nResult: 17 files\n",
    "\n```output\n17\n```\n",
    "\n```json\n{\"a\": 1}\n```\n",
    "\nThis will print the number of files.\n",
    "\n# Expected output: 12\n",
])
def test_claimed_output_is_recognised(segment: str) -> None:
    assert claims_output(segment)


@pytest.mark.parametrize("segment", [
    "\n",
    "\nThen I will look at the results in the next step.\n",
    "\nFINAL_VAR(answer)\n",
    "\nNow define a helper:\n",
])
def test_ordinary_text_between_blocks_is_not_a_claim(segment: str) -> None:
    assert not claims_output(segment)


def test_plan_stops_at_the_first_block_followed_by_claimed_output() -> None:
    p = plan(INVENTED)
    assert len(p.blocks) == 2 and p.runnable == 1 and p.claimed and p.dropped == 1
    assert INVENTED[:p.cut].endswith("print(hits[:3])\n```")
    assert "distutils" not in INVENTED[:p.cut]
    ok = plan("```repl\nx = 1\n```\nNow use it:\n```repl\nprint(x)\n```\nFINAL_VAR(x)")
    assert ok.runnable == 2 and not ok.claimed and ok.cut == len("```repl\nx = 1\n```\nNow use it:\n```repl\n"
                                                                 "print(x)\n```\nFINAL_VAR(x)")


def test_python_blocks_beside_a_repl_block_are_illustration_not_code() -> None:
    mixed = "```repl\nprint(1)\n```\nThe corrected code is:\n```python\nprint(2\n```\n```repl\nprint(3)\n```"
    assert [b.code for b in code_blocks(mixed)] == ["print(1)\n", "print(3)\n"]
    only_python = "```python\nprint(1)\n```\n```py\nprint(2)\n```"
    assert [b.code for b in code_blocks(only_python)] == ["print(1)\n", "print(2)\n"]


@pytest.mark.parametrize("text, expected", [
    ("The function is defined in urllib/parse.py at line 374.", True),
    ("42", True),
    ("It has three parameters: a, b and c.", True),
    ("The corpus is too large to read at once.", False),
    ("I will search for the definition next.", False),
    ("Let me look at the files first.", False),
    ("To answer this, we need to read every file.", False),
    ("Which file do you mean?", False),
    ("", False),
    ("```repl\nprint(1)\n```", False),
    ("The base classes of the class `TestFreeze` are:\n```repl\nread_file('t.py', 24, 35)\n```", False),
    ("The code of the misty willow project is XKWR-7354.\n\n[You can now call FINAL(answer) if you have it.]", True),
])
def test_looks_like_answer(text: str, expected: bool) -> None:
    assert looks_like_answer(text) is expected


def test_error_signature_is_the_last_exception_line() -> None:
    out = ("Traceback (most recent call last):\n  File \"<cell 3>\", line 1, in <module>\n"
           "TypeError: grep() takes at most 2 positional arguments plus flags.\n")
    assert error_signature(out) == "TypeError: grep() takes at most 2 positional arguments plus flags."
    assert error_signature("3 files\n") is None


@pytest.mark.parametrize("text, literal", [
    ("Final answer: 12 functions", "12 functions"),
    ("**Final Answer:** The code is ABCD-1234.", "The code is ABCD-1234."),
    ("The final answer is: foo", "foo"),
    ("Final answer:\n\nThe thing.\n\nMore", "The thing."),
    ("final answers are hard", None),
    ("```repl\n# Final answer: not this\n```", None),
])
def test_a_final_answer_line_is_a_literal_final(text: str, literal: str | None) -> None:
    from rlm_cli.loop.reply import find_text_final

    found = find_text_final(text)
    assert (found.literal() if found else None) == literal


@pytest.mark.parametrize("text, negative", [
    ("No secret codes for golden citadel, rapid beacon or amber glacier projects found in the corpus.", True),
    ("Found in a.py: no changes were needed there.", False),
    ("not found in test/test_mailbox.py", True),
    ("There are no hits for the parameter 'addr'.", True),
    ("The function does not exist in the corpus.", True),
    ("I could not find it.", True),
    ("None", False),
    ("The default value is None.", False),
    ("`parse_config` is defined in app/config.py at line 42.", False),
    ("4", False),
])
def test_negative_answers(text: str, negative: bool) -> None:
    from rlm_cli.loop.reply import negative_answer

    assert negative_answer(text) is negative


@pytest.mark.parametrize("question,answer,missing", [
    # The eval's three-key needle (seen: the 1.5B model answered the first project only).
    ("What are the secret codes of the misty willow, crimson delta and northern glacier projects? Each is written "
     "somewhere in the corpus.", "The secret code of the misty willow project is XKWR-7354.",
     ["crimson delta", "northern glacier"]),
    ("What are the secret codes of the misty willow, crimson delta and northern glacier projects?",
     "misty willow: XKWR-7354; crimson delta: JJVC-9666; northern glacier: NLEC-3539", []),
    ("What do `parse`, `dump` and `load` return?", "parse returns a Node; dump returns None.", ["load"]),
    ("What do `parse`, `dump`, and `load` return?", "parse: Node, dump: None, load: dict", []),
    # Two items, or a list the answer need not repeat word for word, are not checked.
    ("Where are foo and bar defined?", "foo is in a.py", []),
    ("Which file defines _siftdown_max?", "heapq.py", []),
    ("Which files define urlparse, upload and urljoin?", "urlparse: urllib/parse.py; upload: upload.py", ["urljoin"]),
])
def test_items_a_question_lists_that_the_answer_leaves_out(question: str, answer: str, missing: list[str]) -> None:
    from rlm_cli.loop.reply import listed_items, missing_items

    assert missing_items(question, answer) == missing
    if "misty" in question:
        assert listed_items(question) == ["misty willow", "crimson delta", "northern glacier"]


def test_lines_naming_the_items_an_answer_left_out() -> None:
    from rlm_cli.loop.reply import lines_naming

    seen = ("lines with the most question words:\n  a.py:3: # The code of the Crimson Delta project is J-1.\n"
            "  b.py:9: # delta only\n  c.py:1: # crimson delta again, a second line\n  d.py:2: # and a third\n")
    assert lines_naming(seen, ["crimson delta", "northern glacier"], per_item=2) == {
        "crimson delta": ["a.py:3: # The code of the Crimson Delta project is J-1.",
                          "c.py:1: # crimson delta again, a second line"]}
