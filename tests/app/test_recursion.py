"""``rlm_query``: child loops with their own worker at depth + 1, the plain fallback at
``--max-depth``, depth on every event, and budgets shared by the whole tree."""

from __future__ import annotations

from pathlib import Path

from rlm_cli.errors import BudgetExceededError
from tests.support.fake_llm import FakeLLM, last_user, question_message, repl
from tests.support.inproc import corpus, run


def test_recursion_to_depth_two_with_fallback_at_the_limit(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root",
               # depth 0
               repl("marker = 'root only'\nsub = rlm_query('Look deeper')\nprint(sub)"),
               # depth 1: its own REPL (no `marker`), over the same corpus; recurses on a string
               repl("print('marker' in globals(), len(context) > 0)\n"
                    "inner = rlm_query('What is the last word?', context='one two three')\nprint(inner)"),
               # depth 2: over the string; its rlm_query is at the limit -> a plain sub-call
               repl("x = rlm_query('Say hi', context=context)\nprint(x)"),
               repl("FINAL(x + ' / ' + context.split()[-1])"),
               # back at depth 1
               repl("FINAL('depth1 got: ' + inner)"),
               # back at depth 0
               repl("FINAL(sub)"))
    llm.script("sub", "hi from the fallback")
    r = run(llm, [corpus(tmp_path)], "Go", max_depth=3)
    assert r.error is None, r.error
    assert r.answer == "depth1 got: hi from the fallback / three"

    rec = [(e["depth"], e["mode"]) for e in r.of("recursion")]
    assert rec == [(1, "rlm"), (2, "rlm"), (3, "plain")]
    assert sorted({e["depth"] for e in r.of("iteration")}) == [0, 1, 2]
    assert [(e["depth"], e["status"]) for e in r.of("final")] == [(2, "final"), (1, "final"), (0, "final")]
    subs = r.of("sub_call")
    assert len(subs) == 1 and subs[0]["depth"] == 3 and subs[0]["response"] == "hi from the fallback"
    assert all(isinstance(e.get("depth"), int) for e in r.events)
    # Each child has its own worker: the root's variable is not visible at depth 1.
    out1 = [e for e in r.of("output") if e["depth"] == 1][0]["output"]
    assert out1.startswith("False True")
    # The children's prompts: depth 1 may still recurse; depth 2 is told rlm_query is plain.
    roots = llm.chat_requests("root")
    assert "a sub-RLM: a fresh REPL" in roots[1]["messages"][0]["content"]
    assert "plain sub-call (no REPL)" in roots[2]["messages"][0]["content"]
    assert "Question: What is the last word?" in question_message(roots[2])
    assert last_user(llm.chat_requests("sub")[0]) == "Say hi\n\none two three"
    assert r.outcome is not None and r.outcome.usage["root"]["calls"] == 6


def test_default_depth_makes_rlm_query_a_plain_sub_call(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("a = rlm_query('Summarise', context='some text')\nprint(a)"), repl("FINAL(a)"))
    llm.script("sub", "a summary")
    r = run(llm, [corpus(tmp_path)])
    assert r.answer == "a summary"
    assert [(e["depth"], e["mode"]) for e in r.of("recursion")] == [(1, "plain")]
    assert {e["depth"] for e in r.of("iteration")} == {0}
    assert len(llm.chat_requests("root")) == 2
    assert "plain sub-call (no REPL)" in llm.chat_requests("root")[0]["messages"][0]["content"]


def test_budgets_are_shared_by_the_whole_tree(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("r = rlm_query('go')\nprint(r)"),
               repl("outs = [llm_query(f'q{i}') for i in range(4)]\nprint(outs)"),
               repl("FINAL('never reached')"))
    llm.default("sub", "ans")
    r = run(llm, [corpus(tmp_path)], max_depth=2, max_sub_calls=2)
    assert isinstance(r.error, BudgetExceededError)
    assert int(r.error.exit_code) == 6
    assert len(llm.chat_requests("sub")) == 2  # the child's calls counted against the run's budget
    child_out = [e for e in r.of("output") if e["depth"] == 1][0]["output"]
    assert child_out.count("'ans'") == 2 and "budget" in child_out
    assert len(llm.chat_requests("root")) == 2  # neither loop made another root call


def test_child_that_hits_the_iteration_limit_returns_its_best_answer(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("r = rlm_query('dig')\nprint(r)"),
               repl("print(1)"), repl("print(2)"), "child best answer",
               repl("FINAL('parent saw: ' + r)"))
    r = run(llm, [corpus(tmp_path)], max_depth=2, max_iterations=2)
    assert r.error is None, r.error
    assert r.answer == "parent saw: child best answer"
    assert [(e["depth"], e["status"]) for e in r.of("final")] == [(1, "max_iterations"), (0, "final")]
