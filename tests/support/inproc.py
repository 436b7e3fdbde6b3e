"""In-process runs of ``runner.ask`` against the scripted model server (no subprocess, so
litellm is imported once per test process)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm_cli.app import runner
from rlm_cli.app.outcome import AskOutcome
from rlm_cli.config import Settings
from rlm_cli.errors import RLMError
from rlm_cli.models.client import ModelClient
from tests.support.fake_llm import FakeLLM


def settings_for(llm: FakeLLM, **overrides: Any) -> Settings:
    """Settings pointing at ``llm`` with models ``root`` and ``sub``, REPL mode, no response
    cache (scripted replies must be consumed in order); the corpus cache lives in tmp_path."""
    s = Settings(model="openai/root", sub_model="openai/sub", api_base=llm.url, mode="rlm", max_iterations=8,
                 llm_cache=False)
    for k, v in overrides.items():
        setattr(s, k, v)
    return s


@dataclass
class Run:
    """One in-process run: the outcome (or the error raised) and every event emitted."""

    outcome: AskOutcome | None
    error: RLMError | None
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def answer(self) -> str:
        if self.outcome is not None:
            return self.outcome.result.answer
        assert self.error is not None
        return str(getattr(self.error, "partial", ""))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type") == kind]

    def notices(self) -> list[str]:
        return [str(e["message"]) for e in self.of("notice")]


def run(llm: FakeLLM, paths: list[Path | str], question: str = "What is it?", *, client: ModelClient | None = None,
        **overrides: Any) -> Run:
    """Run ``rlm ask`` in-process; never raises ``RLMError`` (it is returned in ``Run.error``).
    ``client``: the model client (and so the budget) the run uses, made by the test."""
    events: list[dict[str, Any]] = []
    settings = settings_for(llm, **overrides)
    try:
        outcome = runner.ask(settings, [str(p) for p in paths], question, emit=events.append, client=client)
    except RLMError as exc:
        return Run(None, exc, events)
    return Run(outcome, None, events)


def corpus(tmp_path: Path, text: str = "alpha beta\ngamma delta\n", name: str = "notes.txt") -> Path:
    """A one-file corpus."""
    path = tmp_path / "corpus" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path.parent
