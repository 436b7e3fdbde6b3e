"""The RLM loop's finishing rules, their false positives, the iteration limit and the history
that never overflows, driven in-process against the scripted model server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlm_cli.errors import MaxIterationsError
from rlm_cli.loop.answers import literal_final, literal_finals, only_finishes
from rlm_cli.loop.examples import example_messages
from rlm_cli.loop.prompts import (
    FINAL_WITH_UNSEEN_CODE,
    FIRST_TURN_FINAL,
    FORMAT_REMINDER,
    PROSE_FINAL,
)
from rlm_cli.loop.reply import Block, code_blocks, find_text_final, mentions_final
from rlm_cli.models.window import request_tokens
from tests.support.fake_llm import FakeLLM, last_user, repl
from tests.support.inproc import corpus, run

# -- parsing (pure) ------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("FINAL(42)", ("FINAL", "42", "42")),
    ("Done.\nFINAL(\"Paris is the capital\")\n", ("FINAL", '"Paris is the capital"', "Paris is the capital")),
    ("  FINAL('single quotes')", ("FINAL", "'single quotes'", "single quotes")),
    ("FINAL(the answer (with parens))\nThanks!", ("FINAL", "the answer (with parens)", "the answer (with parens)")),
    ("FINAL(first line\nsecond line)", ("FINAL", "first line\nsecond line", "first line\nsecond line")),
    ("**FINAL(urllib/parse.py)**", ("FINAL", "urllib/parse.py", None)),  # parses as Python: the REPL decides
    ("FINAL(x)", ("FINAL", "x", None)),  # a variable: its value comes from the REPL
    ("FINAL(f'{n} files')", ("FINAL", "f'{n} files'", None)),
    ("FINAL_VAR(result)", ("FINAL_VAR", "result", None)),
    ("FINAL_VAR('result')", ("FINAL_VAR", "'result'", None)),
    ('FINAL_VAR("result")', ("FINAL_VAR", '"result"', None)),
    ('FINAL_VAR("a whole sentence.")', ("FINAL_VAR", '"a whole sentence."', "a whole sentence.")),
    ("I will call FINAL() once done.", None),
    ("When ready I'll use FINAL(answer) to finish", None),
    ("```repl\nFINAL('inside code')\n```", None),
    ("FINAL()", None),
])
def test_find_text_final(text: str, expected: tuple[str, str, str | None] | None) -> None:
    found = find_text_final(text)
    assert (found if found is None else (found.func, found.source, found.literal())) == expected


def test_mentions_and_only_finishes() -> None:
    assert mentions_final("Next I will call FINAL(answer).")
    assert mentions_final("then FINAL_VAR( x )")
    assert not mentions_final("The FINAL answer needs more work.")
    assert not mentions_final("```repl\nFINAL(1)\n```")
    assert only_finishes("FINAL('guess')")
    assert only_finishes("FINAL_VAR('x')\n")
    assert not only_finishes("FINAL(context.count('a'))")
    assert not only_finishes("x = 1\nFINAL(x)")
    assert not only_finishes("print(1)")
    assert not only_finishes("FINAL(")
    # Final(...) and final(...) finish the run as FINAL does (protocol.FINAL_ALIASES): the same rules.
    assert only_finishes("Final('guess')") and literal_final("final(1658)") and not literal_final("Final(x)")
    blocks = [Block(code, 0, 0) for code in ("Final('alpha')\n", "final('beta')\n", "print(1)\n")]
    assert literal_finals(blocks) == ["alpha", "beta"]
    # A value the code's constants alone give (loop.provenance) is written out too, however wrapped:
    # str(1658), '1' + '658', f"{1658}", and len('abc') or sum([1, 2]), which read nothing either.
    for code in ("FINAL(str(1658))", "FINAL(int('1658'))", "FINAL(1658 + 0)", "FINAL('1' + '658')",
                 "FINAL('%d' % 1658)", "Final(f'{1658} lines')", "FINAL(-3)", "FINAL(str(len('abc')))",
                 "FINAL(sum([1, 2]))", "FINAL(len(files) * 0 + 1658)"):
        assert literal_final(code), code
    for code in ("FINAL(str(n))", "FINAL(len(lines))", "FINAL(x + 0)", "FINAL(len(files) > 2)",
                 "FINAL(f'{n} lines')", "FINAL(str(context.count('a')))"):
        assert not literal_final(code), code
    # Beside a repl block, a python block is illustration; alone, python blocks run.
    assert [b.code for b in code_blocks("a\n```python\nx=1\n```\nb\n```repl\ny=2\n```")] == ["y=2\n"]
    assert [b.code for b in code_blocks("a\n```python\nx=1\n```\nb\n```py\ny=2\n```")] == ["x=1\n", "y=2\n"]


# -- finishing in code -----------------------------------------------------------------------------


def test_final_var_accepts_string_and_bare_identifier(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("answer = 'Paris'\nprint(len(context))"), repl("FINAL_VAR(answer)"))
    r = run(llm, [corpus(tmp_path)])
    assert r.error is None and r.answer == "Paris"  # bare name whose value looks like an identifier
    llm.script("root", repl("answer = 'Lyon'\nprint(1)"), repl("FINAL_VAR('answer')"))
    assert run(llm, [corpus(tmp_path)]).answer == "Lyon"


def test_final_converts_lists_and_dicts_to_json(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("rows = [{'file': 'a.py', 'line': 3}, 2]\nprint(rows)"), repl("FINAL_VAR('rows')"))
    r = run(llm, [corpus(tmp_path)])
    assert json.loads(r.answer) == [{"file": "a.py", "line": 3}, 2]
    llm.script("root", repl("print(0)"), repl("FINAL(len(context) > 0)"))
    assert run(llm, [corpus(tmp_path)]).answer == "True"


def test_code_after_final_cannot_change_the_answer(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("x = 'first'\nprint(x)"),
               repl("FINAL_VAR('x')\nx = 'changed'\nFINAL('second call')\nFINAL_VAR('x')"))
    r = run(llm, [corpus(tmp_path)])
    assert r.answer == "first"
    # A later block of the same reply does not run at all.
    llm.script("root", repl("print(1)"),
               "Two blocks:\n```repl\nFINAL('one')\n```\n```repl\nFINAL('two')\n```")
    r = run(llm, [corpus(tmp_path)])
    assert r.answer == "one"
    assert len(r.of("code")) == 2


def test_final_var_of_undefined_name_does_not_end_the_run(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(len(context))"), repl("FINAL_VAR('missing')"),
               repl("missing = 'now defined'\nFINAL_VAR('missing')"))
    r = run(llm, [corpus(tmp_path)])
    assert r.error is None and r.answer == "now defined"
    assert r.outcome is not None and r.outcome.result.iterations == 3
    told = last_user(llm.chat_requests("root")[2])
    assert "no variable named 'missing'" in told


def test_final_var_text_line_of_undefined_name_is_reported(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(1)"), "FINAL_VAR(nothing_here)", repl("FINAL('ok')"))
    r = run(llm, [corpus(tmp_path)])
    assert r.answer == "ok"
    assert "no variable named 'nothing_here'" in last_user(llm.chat_requests("root")[2])


# -- finishing in text ----------------------------------------------------------------------------


def test_text_final_line_after_code_has_run(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(context[:20])"), "The notes start with alpha.\nFINAL(alpha beta)")
    r = run(llm, [corpus(tmp_path)])
    assert r.error is None and r.answer == "alpha beta"


def test_text_final_var_next_to_code_uses_the_computed_value(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(len(context))"),
               "```repl\nresult = context.split()[-2]\n```\nFINAL_VAR(result)")
    r = run(llm, [corpus(tmp_path)])
    assert r.answer == "gamma"
    assert r.outcome is not None and r.outcome.result.iterations == 2


def test_literal_text_final_next_to_unseen_code_is_refused(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(len(context))"),
               "```repl\nprint(context.split()[1])\n```\nFINAL(a guess written before the output)",
               repl("FINAL('checked')"))
    r = run(llm, [corpus(tmp_path)])
    assert r.answer == "checked"
    assert FINAL_WITH_UNSEEN_CODE in last_user(llm.chat_requests("root")[2])


def test_final_in_prose_does_not_end_the_run(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(len(context))"),
               "I now know enough. I will call FINAL() once done with the summary.",
               "I will call FINAL(answer) once done.",
               repl("FINAL('real answer')"))
    r = run(llm, [corpus(tmp_path)])
    assert r.error is None and r.answer == "real answer"
    assert r.outcome is not None and r.outcome.result.iterations == 4
    assert PROSE_FINAL in last_user(llm.chat_requests("root")[2])
    # Prose mentions never count as the "second reply without code".
    assert PROSE_FINAL in last_user(llm.chat_requests("root")[3])


# -- the first turn --------------------------------------------------------------------------------


def test_first_turn_text_final_is_refused(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", "FINAL(a guess)", repl("print(context[:5])"), repl("FINAL('from the corpus')"))
    r = run(llm, [corpus(tmp_path)])
    assert r.answer == "from the corpus"
    assert FIRST_TURN_FINAL in last_user(llm.chat_requests("root")[1])


def test_first_turn_code_that_only_calls_final_is_refused(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("FINAL('a guess')"), repl("FINAL(context.split()[3])"))
    r = run(llm, [corpus(tmp_path)])
    assert r.answer == "alpha"
    assert FIRST_TURN_FINAL in last_user(llm.chat_requests("root")[1])


def test_first_turn_literal_final_in_a_second_block_is_refused_as_unseen(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", "Looking.\n```repl\nprint(grep('alpha'))\n```\n```repl\nFINAL('a guess')\n```",
               repl("FINAL('alpha, seen')"))
    r = run(llm, [corpus(tmp_path)])
    assert r.answer == "alpha, seen"
    second = last_user(llm.chat_requests("root")[1])
    assert FINAL_WITH_UNSEEN_CODE in second and FIRST_TURN_FINAL not in second
    assert "'file': 'notes.txt'" in second  # the grep output was shown


def test_first_turn_final_computed_from_the_corpus_is_accepted(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("words = context.split()\nFINAL(words[-1])"))
    r = run(llm, [corpus(tmp_path)])
    assert r.answer == "delta"
    assert len(llm.chat_requests("root")) == 1


# -- replies without code (small models) ---------------------------------------------------------


def test_second_reply_without_code_is_taken_as_final(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(context)"), "The corpus lists four words.", "It lists four Greek letters.")
    r = run(llm, [corpus(tmp_path)])
    assert r.error is None
    assert r.answer == "It lists four Greek letters."
    assert r.outcome is not None and r.outcome.result.status == "final"
    assert FORMAT_REMINDER in last_user(llm.chat_requests("root")[2])


def test_two_prose_replies_before_any_code_are_a_guess_sent_back_once(tmp_path: Path, llm: FakeLLM) -> None:
    # Guided: the second prose reply in a row is an answer, but one given before any output was
    # read rests on nothing (the evidence check); after the model looks, its prose answer stands.
    llm.script("root", "Probably alpha.", "Surely alpha.", repl("print(context[:10])"), "It is alpha.",
               "It is alpha, the first word.")
    r = run(llm, [corpus(tmp_path)], max_iterations=6, leads=False)
    assert r.error is None and r.answer == "It is alpha, the first word."
    assert r.outcome is not None and r.outcome.result.status == "final"
    reqs = llm.chat_requests("root")
    assert len(reqs) == 5
    assert FORMAT_REMINDER in last_user(reqs[1]) and FIRST_TURN_FINAL in last_user(reqs[2])


def test_a_reply_with_code_resets_the_prose_count(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", "Probably alpha.", repl("print(1)"), "Alpha.", repl("FINAL(context.split()[3])"))
    r = run(llm, [corpus(tmp_path)], max_iterations=5)
    assert r.answer == "alpha"
    assert len(llm.chat_requests("root")) == 4


# -- the iteration limit ---------------------------------------------------------------------------


def test_iteration_limit_asks_once_more_without_the_repl(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("x = 1\nprint(x)"), repl("print(2)"), "FINAL(best guess: alpha)")
    r = run(llm, [corpus(tmp_path)], max_iterations=2)
    assert isinstance(r.error, MaxIterationsError)
    assert int(r.error.exit_code) == 5
    assert r.answer == "best guess: alpha"
    reqs = llm.chat_requests("root")
    assert len(reqs) == 3
    assert "Do not write code" in last_user(reqs[2])
    assert r.of("final")[-1]["status"] == "max_iterations"


# -- history that never overflows ------------------------------------------------------------------


def test_sixty_iterations_in_a_4000_token_window_never_overflow(tmp_path: Path, llm: FakeLLM) -> None:
    window = 4_000
    steps = [repl("kept = 'the value from turn one'\nprint('x' * 3000)")]
    steps += [repl(f"print('line {i} ' * 400)\nnote_{i} = {i}") for i in range(2, 60)]
    steps += [repl("FINAL_VAR('kept')")]
    llm.script("root", *steps)
    r = run(llm, [corpus(tmp_path, "word " * 2000)], max_iterations=60, root_model_window=window)
    assert r.error is None, r.error
    assert r.answer == "the value from turn one"  # REPL state survives the shortened history
    reqs = llm.chat_requests("root")
    assert len(reqs) == 60
    sizes = [request_tokens(req["messages"]) for req in reqs]
    assert max(sizes) <= window, max(sizes)
    last = reqs[-1]["messages"]
    question_at = 1 + len(example_messages())  # after the system prompt and the worked examples
    assert last[0]["role"] == "system" and "Question: What is it?" in last[question_at]["content"]
    assert any("omitted to fit the context window" in str(m["content"]) for m in last)
    assert "line 59" in str(last[-1]["content"])  # the latest output is always there
    roles = [m["role"] for m in last[1:]]
    assert all(a != b for a, b in zip(roles, roles[1:], strict=False))  # user/assistant alternate
    fits = [e["history"] for e in r.of("root_call")]
    assert fits[-1]["omitted"] > 0 and fits[-1]["verbatim"] >= 1


def test_large_window_keeps_history_verbatim(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", *[repl(f"print({i})") for i in range(5)], repl("FINAL('done')"))
    r = run(llm, [corpus(tmp_path)], max_iterations=8, root_model_window=128_000)
    assert r.answer == "done"
    fits = [e["history"] for e in r.of("root_call")]
    assert all(f["compacted"] == 0 and f["omitted"] == 0 for f in fits)
    assert fits[-1]["verbatim"] == 5  # while everything fits, nothing is shortened
    last = llm.chat_requests("root")[-1]["messages"]
    assert len(last) == 2 + len(example_messages()) + 2 * 5  # system, the examples, the question, 5 turns
