"""The support verdict (issue 37): every answer says whether it rests on what the run saw
(``observed``, ``computed``), is a guess (``unsupported``: the tokens never shown, the checks
overruled) or is partial; said the same way in ``--json``, on stderr, in the trajectory and by
MCP; ``--require-support`` exits 7. The verdict reads the run's evidence only, never the
question's wording."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources
from pathlib import Path

import pytest

from rlm_cli.loop.checks import Candidate, Judge
from rlm_cli.loop.grounding import quoted_corpus_text, stated_values
from rlm_cli.loop.policy import GUIDED, STANDARD
from rlm_cli.loop.provenance import provenance
from rlm_cli.loop.support import GROUNDING_CHECKS, direct_support, support_of
from tests.loop.test_checks import GROUNDED
from tests.support.cli import model_flags, run_rlm
from tests.support.fake_llm import FakeLLM, repl


def cand(answer: str, shown: str, *, written: bool = True, question: str = "What is it?", seen: bool = True,
         caps: tuple[str, ...] = ()) -> Candidate:
    return Candidate(question, answer, written, "block", 2, 0, seen, shown, caps, (), shown, caps_now=caps)


# -- the verdict from evidence ---------------------------------------------------------------------------

@pytest.mark.parametrize("question, shown, answer", GROUNDED, ids=[r[0][:40] for r in GROUNDED])
def test_a_grounded_answer_is_observed_under_standard(question: str, shown: str, answer: str) -> None:
    """The checks' stay-silent table: right answers written from what was read are never guesses."""
    support = support_of(cand(answer, shown, question=question), [], [], STANDARD.number_floor)
    assert support.verdict == "observed", support


def test_tokens_never_shown_make_a_written_answer_unsupported() -> None:
    support = support_of(cand("There are 6 orders with the status 'refunded'.", "NameError: name 'x'"), [], [],
                         GUIDED.number_floor)
    assert support.verdict == "unsupported" and support.unsupported == ("6",)
    # under standard a count under 10 is not a specific token, but the model read nothing but errors
    plain = support_of(cand("There are 6 orders.", ""), [], [], STANDARD.number_floor)
    assert plain.verdict == "unsupported" and "errors" in plain.reason


LEADS = ("files named in the question: futures/__init__.py (53 lines)\n`__all__` is defined at:\n"
         "  futures/__init__.py:20: __all__ = ( 'FIRST_COMPLETED', 'FIRST_EXCEPTION',\n"
         "lines with the most question words (how many lines hold each: '__all__' in 2 lines):")


def leads_only(answer: str) -> Candidate:
    """An answer given after the leads alone (no code of the model's own has printed anything)."""
    return Candidate("How many names does __all__ export?", answer, True, "block", 1, 0, True, LEADS, (), (), LEADS,
                     quoted_corpus_text(LEADS), False)


def test_rlm_s_own_counts_in_the_leads_are_no_evidence_for_a_number() -> None:
    guess = support_of(leads_only("2 names are exported through __all__."), [], [], GUIDED.number_floor)
    assert guess.verdict == "unsupported" and guess.unsupported == ("2",)
    cited = support_of(leads_only("__all__ starts on line 20 with FIRST_COMPLETED."), [], [], GUIDED.number_floor)
    assert cited.verdict == "observed"  # a line number and a name the leads' corpus lines show
    vague = support_of(leads_only("It exports the usual names."), [], [], GUIDED.number_floor)
    assert vague.verdict == "unsupported" and "ran no code" in vague.reason


def test_a_number_written_after_code_that_only_failed_is_no_reading() -> None:
    data = "  orders.jsonl:1: {\"order_id\": \"SO-1\", \"placed_at\": \"2026-01-04\", \"country\": \"DE\"}\n"
    c = Candidate("How many orders from DE?", "4 orders were placed from Germany.", True, "stuck", 4, 0, True, data, (),
                  (), data, quoted_corpus_text(data), False)
    failed = ['count = 0\nfor line in leads:\n    if "country": "DE" in line["text"]:\n        count += 1']
    assert support_of(c, [], failed, GUIDED.number_floor).verdict == "unsupported"
    assert support_of(c, [], [], GUIDED.number_floor).verdict == "observed"  # no code tried: the lines are all it read


def test_an_overruled_check_makes_an_answer_unsupported() -> None:
    support = support_of(cand("Yes", "a line of output"), ["evidence", "nothing_found"], [], STANDARD.number_floor)
    assert support.verdict == "unsupported" and support.objections == ("evidence",)  # a second look is no objection


def test_a_check_satisfied_on_the_second_answer_is_not_overruled() -> None:
    """Answering before reading output is sent back; the same answer after code showed it is a
    finding, not an overruled check. A guess given again after ``ungrounded``'s note is."""
    judge = Judge(STANDARD.make_checks(), lambda _e: None)
    first = Candidate("Which file defines parse_config?", "a.py", True, "block", 1, 0, False, "")
    assert judge.review(first).answer is None
    shown = "[{'file': 'a.py', 'line': 1, 'text': 'def parse_config():'}]"
    assert judge.review(replace(first, iteration=3, seen_output=True, shown=shown, outputs=shown)).overruled == ()
    guess = replace(first, answer="config/loader.py", iteration=4, seen_output=True, shown=shown, outputs=shown)
    assert judge.review(guess).answer is None  # ungrounded: never shown
    assert judge.review(replace(guess, iteration=5)).overruled == ("ungrounded",)


def test_a_computed_answer_is_computed_unless_typed_or_capped() -> None:
    computed = support_of(cand("1658", "", written=False), [], ["n = sum(1 for r in rows if r['s'] == 'x')\nFINAL(n)"],
                          GUIDED.number_floor)
    assert computed.verdict == "computed"
    typed = support_of(cand("1658", "", written=False), [], ["n = 1658\nFINAL(n)"], GUIDED.number_floor)
    assert typed.verdict == "unsupported" and typed.unsupported == ("1658",)
    # the value was read before it was typed: judged as written out, it is observed
    printed = support_of(cand("1658", "1658", written=False), [], ["print(len(rows))", "n = 1658\nFINAL(n)"],
                         GUIDED.number_floor)
    assert printed.verdict == "observed"
    capped = support_of(cand("4", "", written=False, caps=("grep",)), [], ["FINAL(len(hits))"], GUIDED.number_floor)
    assert capped.verdict == "unsupported" and "default_cap" in capped.objections


def test_typed_literals_are_the_assigned_values_the_constants_alone_give() -> None:
    prov = provenance(["x = 6\nlabel: str = 'six orders'\nprint(7)\ny = len(z)\nw = f'{y} rows'\nv = str(1658)",
                       "bad (", "n = len(files) * 0 + 16\nok = bool(1)"])
    assert prov.literals == ("6", "six orders", "1658", "16")
    assert prov.printed == ("7",) and not prov.shows


def test_values_stated_as_arithmetic_count_as_shown() -> None:
    assert stated_values("SIZE = 10 * 1024 * 1024; ttl=60*60*24") >= {10485760.0, 86400.0}
    assert stated_values("2026-10-13 lines 10-20 version 3.11.7-1") == set()


def test_a_direct_answer_rests_on_the_corpus() -> None:
    corpus = "orders.csv\nid,status\n1,refunded\n2,paid\n"
    assert direct_support("One order (id 1) was refunded.", "How many?", corpus, 0).verdict == "observed"
    assert direct_support("Order 17 was refunded.", "How many?", corpus, 0).unsupported == ("17",)


# -- through the rlm command ------------------------------------------------------------------------------

def orders(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    root.mkdir()
    (root / "orders.csv").write_text("id,status\n" + "".join(f"{i},{'refunded' if i % 3 == 0 else 'paid'}\n"
                                                             for i in range(60)))
    return root


GUESS = "FINAL(There are 6 orders with the status 'refunded'.)"
QUESTION = "How many orders were refunded?"


def test_a_repeated_guess_is_unsupported_everywhere_and_fails_require_support(tmp_path: Path, llm: FakeLLM) -> None:
    """The issue's trajectory: a function that does not exist, four times, then a number nothing
    showed; ``ungrounded`` sends it back, the model sends it again."""
    root = orders(tmp_path)
    llm.script("root", *[repl("print(count_orders(status='refunded'))")] * 4)
    llm.default("root", GUESS)
    res = run_rlm("ask", str(root), QUESTION, *model_flags(llm), "--policy", "guided", "--no-llm-cache", "--json")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["status"] == "final" and doc["answer"] == "There are 6 orders with the status 'refunded'."
    assert doc["support"]["verdict"] == "unsupported"
    assert doc["support"]["unsupported"] == ["6"] and doc["support"]["objections"] == ["ungrounded"]
    assert "warning: rlm could not find `6` in the code output or corpus lines the model read: treat this answer as a guess" in res.stderr
    trace = [json.loads(line) for line in Path(doc["trace"]).read_text().splitlines()]
    final = next(e for e in trace if e["type"] == "final")
    assert final["support"]["verdict"] == trace[-1]["support"]["verdict"] == "unsupported"
    gate = run_rlm("ask", str(root), QUESTION, *model_flags(llm), "--policy", "guided", "--no-llm-cache",
                   "--require-support")
    assert gate.code == 7, gate.stderr
    assert gate.stdout == "There are 6 orders with the status 'refunded'.\n"  # still printed
    assert gate.stderr.count("treat this answer as a guess") == 1


@pytest.mark.parametrize("spelling", ["FINAL", "Final", "FINAL(str"])  # final, "1" + "658": test_orchestrator
def test_a_guess_typed_into_any_spelling_of_final_fails_require_support(tmp_path: Path, llm: FakeLLM,
                                                                        spelling: str) -> None:
    """``Final('6')`` finishes the run as ``FINAL('6')`` does, so it is the same written-out guess:
    the checks send it back and the verdict says unsupported (it was once taken as computed)."""
    root = orders(tmp_path)
    code = {"FINAL(str": "FINAL(str(1658))"}.get(spelling, f"{spelling}('1658')")
    llm.default("root", repl(code))  # a guess wrapped in str() or split in two is as written out
    res = run_rlm("ask", str(root), QUESTION, *model_flags(llm), "--policy", "standard", "--no-llm-cache", "--json",
                  "--require-support")
    assert res.code == 7, res.stderr
    doc = json.loads(res.stdout)
    assert doc["answer"] == "1658" and doc["support"]["verdict"] == "unsupported"
    assert len(llm.chat_requests("root")) > 1  # sent back once at least, as FINAL('1658') is


def test_answers_that_rest_on_the_run_pass_require_support(tmp_path: Path, llm: FakeLLM) -> None:
    root = orders(tmp_path)
    llm.script("root", repl("rows = records('orders.csv')\nFINAL(sum(1 for r in rows if r['status'] == 'refunded'))"),
               repl("print(sum(1 for r in records('orders.csv') if r['status'] == 'refunded'))"),
               "The output shows it.\nFINAL(20 orders were refunded.)")
    computed = run_rlm("ask", str(root), QUESTION, *model_flags(llm), "--no-llm-cache", "--json",
                       "--require-support")
    assert computed.code == 0, computed.stderr
    assert json.loads(computed.stdout)["support"]["verdict"] == "computed"
    observed = run_rlm("ask", str(root), QUESTION + " (again)", *model_flags(llm), "--no-llm-cache", "--json",
                       "--require-support")
    assert observed.code == 0, observed.stderr
    assert json.loads(observed.stdout)["support"] == {
        "verdict": "observed", "unsupported": [], "objections": [],
        "reason": "every specific part of the answer appears in what the model read"}
    assert "guess" not in computed.stderr + observed.stderr


def test_several_questions_exit_with_the_worst_code_and_7_ranks_below_a_partial_answer(tmp_path: Path,
                                                                                       llm: FakeLLM) -> None:
    root = orders(tmp_path)
    llm.script("root", repl("FINAL(len(records('orders.csv')))"), GUESS, GUESS)
    res = run_rlm("ask", str(root), "--question", "How many orders are there?", "--question", QUESTION, *model_flags(llm),
                  "--policy", "standard", "--no-llm-cache", "--json", "--require-support")
    assert res.code == 7, res.stderr
    verdicts = [json.loads(line)["support"]["verdict"] for line in res.stdout.splitlines()]
    assert verdicts == ["computed", "unsupported"]
    llm.script("root", GUESS, GUESS, repl("print(1)"), repl("print(2)"), "Still looking.")
    worse = run_rlm("ask", str(root), "--question", QUESTION, "--question", "And the paid ones?", *model_flags(llm),
                    "--policy", "standard", "--no-llm-cache", "--require-support", "--max-iterations", "2")
    assert worse.code == 5, worse.stderr  # the iteration limit (a partial answer) is worse than a guess
    config = run_rlm("config", "set", "require_support", "true")
    assert config.code == 0, config.stderr
    llm.script("root", GUESS, GUESS)
    from_config = run_rlm("ask", str(root), QUESTION, *model_flags(llm), "--policy", "standard", "--no-llm-cache")
    assert from_config.code == 7, from_config.stderr


def test_a_partial_answer_is_partial(tmp_path: Path, llm: FakeLLM) -> None:
    root = orders(tmp_path)
    llm.default("root", repl("print('still looking')"))
    res = run_rlm("ask", str(root), QUESTION, *model_flags(llm), "--no-llm-cache", "--json", "--max-iterations", "1")
    assert res.code == 5, res.stderr
    assert json.loads(res.stdout)["support"]["verdict"] == "partial"


def test_guided_asks_once_to_show_an_overruled_guess_with_code(tmp_path: Path, llm: FakeLLM) -> None:
    """Before giving up on support (guided only): one more root call asking for code; an answer
    code computes then replaces the guess, and a reply without one ends the run on the guess."""
    root = orders(tmp_path)
    shown = repl("n = sum(1 for r in records('orders.csv') if r['status'] == 'refunded')\nFINAL(n)")
    llm.script("root", repl("print(count_orders())"), GUESS, GUESS, shown)
    res = run_rlm("ask", str(root), QUESTION, *model_flags(llm), "--policy", "guided", "--no-llm-cache", "--json",
                  "--no-leads")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["answer"] == "20" and doc["support"]["verdict"] == "computed"
    asked = [r for r in llm.chat_requests("root")]
    assert len(asked) == 4 and "rlm will mark it as a guess" in json.dumps(asked[-1]["messages"][-1])
    assert "check support sent the answer back" in res.stderr
    # the model has no code to show: the run ends on the guess after that one call, marked
    llm.script("root", repl("print(count_orders())"), GUESS, GUESS, repl("print('thinking')"), GUESS)
    again = run_rlm("ask", str(root), QUESTION + "?", *model_flags(llm), "--policy", "guided", "--no-llm-cache",
                    "--json", "--no-leads")
    assert again.code == 0, again.stderr
    assert json.loads(again.stdout)["support"]["verdict"] == "unsupported"
    assert len(llm.chat_requests("root")) == 4 + 4  # one call after the note, not two
    # standard spends nothing on it
    llm.script("root", repl("print(count_orders())"), GUESS, GUESS, shown)
    plain = run_rlm("ask", str(root), QUESTION + "??", *model_flags(llm), "--policy", "standard", "--no-llm-cache",
                    "--json", "--no-leads")
    assert json.loads(plain.stdout)["support"]["verdict"] == "unsupported"
    assert len(llm.chat_requests("root")) == 8 + 3


def test_a_number_the_leads_quoted_is_observed_when_the_model_ran_no_code_of_its_own(tmp_path: Path,
                                                                                     llm: FakeLLM) -> None:
    """rlm's own leads call is not the model's code: an answer read off a corpus line the leads
    quoted is ``observed`` (it was listed as never shown: "`6` appears in no code output or
    corpus line the model read")."""
    (tmp_path / "a.txt").write_text("alpha line 1\nbeta line 2\nThe retry count is 6.\n")
    llm.default("root", "FINAL('6')")
    res = run_rlm("ask", str(tmp_path), "How many retries are configured?", *model_flags(llm), "--mode", "rlm",
                  "--no-llm-cache", "--require-support", "--json")
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout)["support"]["verdict"] == "observed", res.stdout


def test_the_schema_names_the_same_grounding_checks_as_the_verdict() -> None:
    """``support.objections`` in ``ask-result.v1`` lists what ``GROUNDING_CHECKS`` may put there: a
    check added to one and not the other would ship a schema that rejects valid output."""
    schema = json.loads(resources.files("rlm_cli.schemas").joinpath("ask-result.v1.json").read_text("utf-8"))

    def find(node: object) -> list[str] | None:
        if isinstance(node, dict):
            if "objections" in node.get("properties", {}):
                return list(node["properties"]["objections"]["items"]["enum"])
            for value in node.values():
                found = find(value)
                if found is not None:
                    return found
        return None

    assert sorted(find(schema) or []) == sorted(GROUNDING_CHECKS)
