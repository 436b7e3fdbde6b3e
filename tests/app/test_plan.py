"""A session's decisions go to its frozen run plan: the ``Settings`` it was given, and its own
copy of them, are the same values after ``open`` and a question as before (issue 41)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from rlm_cli.app.plan import RunPlan, Window
from rlm_cli.app.session import Session
from rlm_cli.config import Settings
from rlm_cli.models.detect import ensure_model
from tests.support.fake_llm import FakeLLM, repl
from tests.support.inproc import corpus, settings_for


def _ask_once(settings: Settings, paths: list[str]) -> tuple[Session, Settings, str]:
    """Open a session over ``paths``, ask one question; the session, a copy of its settings taken
    before it opened, and the answer."""
    events: list[dict[str, Any]] = []
    with Session(settings, paths, emit=events.append) as session:
        before = copy.deepcopy(session.settings)
        session.open("How many words?")
        outcome = session.ask("How many words?", emit=events.append)
        return session, before, outcome.result.answer


def test_settings_are_unchanged_by_open_and_a_question(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("n = llm_query('count: ' + context[:50])\nprint(n)"), repl("FINAL(n)"))
    llm.script("sub", "4")
    given = settings_for(llm)
    given_before = copy.deepcopy(given)
    session, before, answer = _ask_once(given, [str(corpus(tmp_path))])
    assert answer == "4"
    assert session.settings == before and dataclasses.asdict(session.settings) == dataclasses.asdict(before)
    assert given == given_before
    assert session.settings.root_model_window is None and session.settings.policy == "auto"
    plan = session.plan
    assert isinstance(plan, RunPlan)
    assert plan.root_window == Window(32_768, "default") and plan.sub_window == Window(32_768, "default")
    assert plan.policy_requested == "auto" and plan.policy.name != "auto" and plan.mode_rule == "rlm"
    resolved = session.run_settings  # a copy with the plan's decisions, for code that reads settings
    assert resolved is not session.settings
    assert (resolved.root_model_window, resolved.sub_model_window, resolved.policy) == (32_768, 32_768,
                                                                                        plan.policy.name)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.mode_rule = "direct"  # type: ignore[misc]


def test_an_autodetected_model_goes_to_the_plan_not_the_settings(tmp_path: Path, llm: FakeLLM) -> None:
    llm.models_list = ["root"]
    llm.script("root", repl("print(context[:40])"), repl("FINAL('alpha beta')"))
    given = Settings(api_base=llm.url, mode="rlm", max_iterations=4, llm_cache=False)
    session, before, answer = _ask_once(given, [str(corpus(tmp_path))])
    assert answer == "alpha beta"
    assert session.settings == before and session.settings.model is None
    assert session.plan is not None and session.plan.models.model == "openai/root"
    assert session.run_settings.model == "openai/root"


def test_ensure_model_returns_a_copy() -> None:
    s = Settings()
    found = ensure_model(s, env={"OPENAI_API_KEY": "sk-x", "RLM_PROBE_OLLAMA": "off", "RLM_PROBE_PORTS": "off"})
    assert found.model and s.model is None and s == Settings()


def test_a_question_client_reports_windows_as_the_plan_resolved_them(tmp_path: Path, llm: FakeLLM) -> None:
    """The trap issue 41 named: a question's client was made from settings with the resolved
    windows written in, so it reported a window litellm's map (or the default) gave as a flag."""
    llm.script("root", repl("FINAL('x')"))
    given = settings_for(llm)
    with Session(given, [str(corpus(tmp_path))], emit=lambda ev: None) as session:
        session.open("q")
        plan = session.plan
        assert plan is not None
        client = session.question_client(lambda ev: None)
        assert client.input_window_source(plan.models.model) == (32_768, "default")
        assert client.input_window_source(plan.models.effective_sub_model) == (32_768, "default")
    flagged = dataclasses.replace(given, root_model_window=20_000)
    with Session(flagged, [str(corpus(tmp_path))], emit=lambda ev: None) as session:
        session.open("q")
        assert session.plan is not None and session.plan.root_window == Window(20_000, "flag")
        client = session.question_client(lambda ev: None)
        assert client.input_window_source(session.plan.models.model) == (20_000, "flag")
