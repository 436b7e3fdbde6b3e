"""``--policy auto|paper|standard|guided`` through the ``rlm`` command: how ``auto`` chooses, what
each preset does with the same replies, and where the policy is recorded (``--json``, the
trajectory's ``mode`` and ``check`` events, the config file and ``RLM_POLICY``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlm_cli.loop import prompts
from rlm_cli.loop.policy import GUIDED, PAPER, STANDARD, resolve_policy
from tests.support.cli import model_flags, run_rlm
from tests.support.fake_llm import FakeLLM, last_user, repl


@pytest.mark.parametrize("requested, window, source, expected", [
    ("auto", 200_000, "flag", "standard"),
    ("auto", 128_000, "model info", "standard"),
    ("auto", 32_768, "model info", "standard"),
    ("auto", 16_384, "flag", "guided"),
    ("auto", 32_768, "default", "guided"),  # litellm does not know the model: most often a local one
    ("auto", None, "default", "guided"),
    ("paper", 4_000, "flag", "paper"),
    ("guided", 1_000_000, "flag", "guided"),
])
def test_auto_chooses_standard_for_a_known_window_of_32k_or_more(requested: str, window: int | None, source: str,
                                                                 expected: str) -> None:
    policy, reason = resolve_policy(requested, window, source)
    assert policy.name == expected and reason


def test_the_presets_nest() -> None:
    assert PAPER.checks == () and not PAPER.leads and not PAPER.stop_at_error
    assert set(STANDARD.checks) == {"evidence", "empty", "ungrounded", "default_cap"} and not STANDARD.leads
    assert set(STANDARD.checks) < set(GUIDED.checks) and GUIDED.leads and GUIDED.prose_answers and GUIDED.repeats


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "tool.py").write_text("import os\n\nCACHE = os.environ.get('TOOL_CACHE', '/tmp/tool')\n")
    return root


def _trace(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


GUESS_THEN_LOOK = [repl("FINAL('TOOL_CACHE')"), repl("print(grep('environ'))"), repl("FINAL('TOOL_CACHE')")]


def test_paper_takes_a_first_turn_guess_and_standard_sends_it_back_once(tmp_path: Path, llm: FakeLLM) -> None:
    root = _repo(tmp_path)
    q = "Which environment variable moves the cache?"
    llm.script("root", *GUESS_THEN_LOOK)
    res = run_rlm("ask", str(root), q, *model_flags(llm), "--mode", "rlm", "--policy", "paper", "--json",
                  "--trace", str(tmp_path / "paper.jsonl"))
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["answer"] == "TOOL_CACHE" and doc["policy"] == "paper" and doc["iterations"] == 1
    events = _trace(tmp_path / "paper.jsonl")
    (mode,) = [e for e in events if e["type"] == "mode"]
    assert (mode["policy"], mode["policy_requested"], mode["policy_reason"]) == ("paper", "paper", "--policy paper")
    assert not [e for e in events if e["type"] in ("check", "leads")]
    assert events[0]["config"]["policy"] == "paper"

    llm.script("root", *GUESS_THEN_LOOK)
    res = run_rlm("ask", str(root), q, *model_flags(llm), "--mode", "rlm", "--policy", "standard", "--json",
                  "--trace", str(tmp_path / "standard.jsonl"))
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["answer"] == "TOOL_CACHE" and doc["policy"] == "standard" and doc["iterations"] == 3
    assert prompts.FIRST_TURN_FINAL in last_user(llm.chat_requests("root")[-2])
    checks = [e for e in _trace(tmp_path / "standard.jsonl") if e["type"] == "check"]
    assert [(e["check"], e["verdict"], e["iteration"]) for e in checks if e["verdict"] != "accept"] == [
        ("evidence", "send_back", 1)]
    assert {e["check"] for e in checks} == set(STANDARD.checks)  # each check judged each answer
    # stderr says why the run went on after a FINAL, once, and nothing for the checks that accepted
    said = [line for line in res.stderr.splitlines() if line.startswith("check ")]
    assert len(said) == 1 and said[0].startswith("check evidence sent the answer back: "), res.stderr


def test_paper_runs_every_block_of_a_reply_even_after_an_error(tmp_path: Path, llm: FakeLLM) -> None:
    root = _repo(tmp_path)
    llm.script("root", "```repl\nundefined_name\n```\n```repl\nprint('second block ran')\n```", repl("FINAL('ok')"))
    res = run_rlm("ask", str(root), "Does it run?", *model_flags(llm), "--mode", "rlm", "--policy", "paper")
    assert res.code == 0 and res.stdout == "ok\n", res.stderr
    assert "second block ran" in last_user(llm.chat_requests("root")[1])
    llm.script("root", "```repl\nundefined_name\n```\n```repl\nprint('second block ran')\n```", repl("FINAL('ok')"))
    res = run_rlm("ask", str(root), "Does it run?", *model_flags(llm), "--mode", "rlm", "--policy", "standard")
    assert res.code == 0 and "second block ran" not in last_user(llm.chat_requests("root")[-1])


def test_auto_is_recorded_with_what_it_resolved_to(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("FINAL(grep('environ')[0]['file'])"))
    res = run_rlm("ask", str(_repo(tmp_path)), "Which file reads the environment?", *model_flags(llm), "--mode",
                  "rlm", "--json", "--trace", str(tmp_path / "t.jsonl"))  # openai/root: litellm has no window for it
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout)["policy"] == "guided"
    assert "policy guided (auto: the root model's input window is unknown" in " ".join(res.stderr.split())  # on stderr
    (mode,) = [e for e in _trace(tmp_path / "t.jsonl") if e["type"] == "mode"]
    assert mode["policy_requested"] == "auto" and "unknown" in mode["policy_reason"]
    assert [e for e in _trace(tmp_path / "t.jsonl") if e["type"] == "leads"]  # guided runs the leads


def test_a_known_window_of_exactly_32k_is_model_info_and_gets_standard(tmp_path: Path, llm: FakeLLM) -> None:
    # litellm's map gives 32,768 tokens to 160-odd models, the same figure as rlm's default for an
    # unknown one: such a model was taken for unknown and given `guided`.
    llm.script("Qwen/Qwen2.5-72B-Instruct", repl("print(grep('environ'))"), repl("FINAL('tool.py')"))
    res = run_rlm("ask", str(_repo(tmp_path)), "Which file reads the environment?", "--model",
                  "deepinfra/Qwen/Qwen2.5-72B-Instruct", "--api-base", llm.url, "--api-key", "k", "--mode", "rlm",
                  "--json", "--trace", str(tmp_path / "t.jsonl"))
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout)["policy"] == "standard"
    (mode,) = [e for e in _trace(tmp_path / "t.jsonl") if e["type"] == "mode"]
    assert (mode["root_window"], mode["root_window_source"]) == (32_768, "model info")
    assert (mode["sub_window"], mode["sub_window_source"]) == (32_768, "model info")


def test_the_root_window_flag_is_the_sub_models_too_and_says_so(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(grep('environ'))"), repl("FINAL('tool.py')"))
    res = run_rlm("ask", str(_repo(tmp_path)), "Which file reads the environment?", "--model", "openai/root",
                  "--api-base", llm.url, "--root-model-window", "200000", "--mode", "rlm", "--json",
                  "--trace", str(tmp_path / "t.jsonl"))
    assert res.code == 0, res.stderr
    (mode,) = [e for e in _trace(tmp_path / "t.jsonl") if e["type"] == "mode"]
    assert (mode["sub_window"], mode["sub_window_source"], mode["policy"]) == (200_000, "flag", "standard")


def test_a_guess_repeated_after_it_was_sent_back_is_still_a_guess(tmp_path: Path, llm: FakeLLM) -> None:
    # The block that only called FINAL printed nothing: it is no output to rest the same guess on.
    llm.script("root", repl("FINAL('blue')"), repl("FINAL('blue')"), repl("print(grep('environ'))"),
               repl("FINAL('TOOL_CACHE')"))
    res = run_rlm("ask", str(_repo(tmp_path)), "Which environment variable moves the cache?", *model_flags(llm),
                  "--mode", "rlm", "--policy", "guided", "--no-leads", "--trace", str(tmp_path / "t.jsonl"))
    assert res.code == 0, res.stderr
    assert res.stdout.strip() == "TOOL_CACHE"
    sent = [(e["check"], e["iteration"]) for e in _trace(tmp_path / "t.jsonl")
            if e["type"] == "check" and e["verdict"] == "send_back"]
    assert sent == [("evidence", 1), ("evidence", 2)]


def test_trace_show_names_the_policy_and_each_checks_verdict(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", *GUESS_THEN_LOOK)
    trace = tmp_path / "t.jsonl"
    res = run_rlm("ask", str(_repo(tmp_path)), "Which environment variable moves the cache?", *model_flags(llm),
                  "--mode", "rlm", "--policy", "standard", "--trace", str(trace))
    assert res.code == 0, res.stderr
    res = run_rlm("trace", "show", str(trace))
    assert res.code == 0, res.stderr
    out = " ".join(res.stdout.split())  # the tree wraps long lines
    assert "mode rlm, policy standard" in out and "--policy standard" in out
    assert "check evidence: send back" in out and "You answered before reading any output" in out
    assert "check empty: accept" in out and "final after 3 iterations" in out


def test_leads_follow_the_policy_unless_a_flag_says_otherwise(tmp_path: Path, llm: FakeLLM) -> None:
    root = _repo(tmp_path)
    for n, (flags, expect) in enumerate(((["--policy", "standard"], False), (["--policy", "standard", "--leads"], True),
                                         (["--policy", "guided", "--no-leads"], False))):
        llm.script("root", repl("FINAL(grep('environ')[0]['file'])"))
        trace = tmp_path / f"t{n}.jsonl"
        res = run_rlm("ask", str(root), "Which file reads the environment?", *model_flags(llm), "--mode", "rlm",
                      "--trace", str(trace), *flags)
        assert res.code == 0, res.stderr
        assert bool([e for e in _trace(trace) if e["type"] == "leads"]) is expect, flags


def test_policy_from_the_config_file_and_the_environment_and_a_bad_value(tmp_path: Path, llm: FakeLLM) -> None:
    root = _repo(tmp_path)
    res = run_rlm("config", "set", "policy", "paper")
    assert res.code == 0, res.stderr
    llm.script("root", repl("FINAL('TOOL_CACHE')"))
    res = run_rlm("ask", str(root), "Which variable?", *model_flags(llm), "--mode", "rlm", "--json")
    assert res.code == 0 and json.loads(res.stdout)["policy"] == "paper", res.stderr
    llm.script("root", repl("FINAL(grep('environ')[0]['file'])"))
    res = run_rlm("ask", str(root), "Which file?", *model_flags(llm), "--mode", "rlm", "--json",
                  env={"RLM_POLICY": "standard"})
    assert res.code == 0 and json.loads(res.stdout)["policy"] == "standard", res.stderr
    res = run_rlm("ask", str(root), "Which file?", *model_flags(llm), "--policy", "clever")
    assert res.code == 2 and res.stdout == "" and len(res.stderr.strip().splitlines()) <= 2
    assert "clever" in res.stderr and "paper" in res.stderr and "Traceback" not in res.stderr
