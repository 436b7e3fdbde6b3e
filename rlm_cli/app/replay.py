"""``rlm replay``: re-run a recorded trajectory's loop with the recorded model responses.

No provider is contacted: a :class:`ReplayClient` stands in for the litellm client and answers
each request with the recorded response of the same request (matched by ``request_key``: model
and messages), or else with the next unused recorded response of the same role and depth, in
recorded order. The corpus is read again from the recorded paths and the code runs again in a
fresh REPL, so a replay reproduces the answer as long as the corpus has not changed (a run that
read stdin needs the same stdin again).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm_cli.config import CorpusOptions, Settings
from rlm_cli.errors import ProviderError, UsageError
from rlm_cli.models.client import Completion, ModelClient, OnDelta
from rlm_cli.models.usage import CallRecord
from rlm_cli.output.trace import Emit, event, read_trace, request_key


@dataclass
class Recorded:
    """One recorded model response."""

    role: str
    depth: int
    key: str
    text: str
    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    used: bool = False


def recorded_responses(events: list[dict[str, Any]]) -> list[Recorded]:
    """The model responses of a trajectory, in order: root calls (role ``root``) and sub-calls,
    including plain ``rlm_query`` fallbacks (role ``sub``)."""
    out = []
    for ev in events:
        kind = ev.get("type")
        if kind not in ("root_call", "sub_call") or "response" not in ev:
            continue
        out.append(Recorded("root" if kind == "root_call" else "sub", int(ev.get("depth", 0)),
                            str(ev.get("request_key", "")), str(ev["response"]), str(ev.get("model", "")),
                            int(ev.get("input_tokens") or 0), int(ev.get("output_tokens") or 0), ev.get("cost_usd")))
    return out


class ReplayClient(ModelClient):
    """A :class:`ModelClient` that answers from recorded responses and never imports litellm.

    Usage and budgets are counted as in the recorded run (its token and cost numbers).
    """

    def __init__(self, settings: Settings, responses: list[Recorded]) -> None:
        super().__init__(settings)
        self.responses = responses
        self._lock = threading.Lock()
        self.misses = 0

    def litellm(self) -> Any:  # noqa: D401 - never needed on replay
        raise ProviderError("replay does not call the provider")

    def complete(self, messages: list[dict[str, Any]], *, model: str, role: str, depth: int = 0,
                 on_delta: OnDelta | None = None, temperature: float | None = None) -> Completion:
        """The recorded response for this request (handed whole to ``on_delta`` when given;
        ``temperature`` changes nothing here).

        Raises:
            BudgetExceededError: a budget of the recorded settings is spent.
            ProviderError: no recorded response is left for this role and depth.
        """
        self.budget.check(sub_call=role == "sub")
        key = request_key(model, messages)
        with self._lock:
            hit = next((r for r in self.responses if not r.used and r.role == role and r.key == key), None)
            if hit is None:
                hit = next((r for r in self.responses if not r.used and r.role == role and r.depth == depth), None)
                self.misses += 1
            if hit is None:
                raise ProviderError(f"replay: the recording has no further {role} response at depth {depth}",
                                    hint="the corpus or the code's results changed since the recording")
            hit.used = True
        record = CallRecord(model, role, depth, hit.input_tokens, hit.output_tokens, hit.cost_usd, 0.0)
        self.usage.add(record)
        if on_delta is not None:
            on_delta(hit.text)
        return Completion(hit.text, record)


def settings_from_header(header: dict[str, Any], mode_event: dict[str, Any] | None) -> Settings:
    """The recorded run's :class:`Settings` (no API key; the recorded windows and mode)."""
    config = dict(header.get("config") or {})
    corpus = CorpusOptions(**{k: v for k, v in (config.pop("corpus", None) or {}).items()
                              if k in {f.name for f in dataclasses.fields(CorpusOptions)}})
    known = {f.name for f in dataclasses.fields(Settings)}
    values = {k: v for k, v in config.items() if k in known}
    values.update(api_key=None, trace=None, router_config=None)
    settings = Settings(**values, corpus=corpus)
    if mode_event is not None:
        settings.mode = str(mode_event.get("mode", settings.mode))
        settings.root_model_window = mode_event.get("root_window") or settings.root_model_window
        settings.sub_model_window = mode_event.get("sub_window") or settings.sub_model_window
    return settings


@dataclass
class ReplayPlan:
    """Everything needed to replay one trajectory."""

    path: Path
    settings: Settings
    paths: list[str]
    question: str
    recorded_answer: str | None
    recorded_status: str | None
    responses: list[Recorded]
    #: The folder the run started in: file and glob paths are shown in ``context`` relative to it.
    cwd: str | None = None


def plan(path: Path, *, sandbox: str | None = None) -> ReplayPlan:
    """Read a trajectory and prepare its replay (``sandbox`` overrides the recorded level).

    Raises:
        UsageError: not a trajectory, or it recorded no model response.
    """
    events = read_trace(path)
    header = events[0]
    mode_event = next((e for e in events if e.get("type") == "mode"), None)
    settings = settings_from_header(header, mode_event)
    if sandbox:
        settings.sandbox = sandbox
    summary = next((e for e in reversed(events) if e.get("type") == "summary"), None)
    responses = recorded_responses(events)
    if not responses:
        raise UsageError(f"{path} recorded no model response; nothing to replay")
    return ReplayPlan(path, settings, list(header.get("paths") or []), str(header.get("question", "")),
                      None if summary is None else str(summary.get("answer", "")),
                      None if summary is None else str(summary.get("status", "")), responses,
                      str(header["cwd"]) if header.get("cwd") else None)


def replay(p: ReplayPlan, *, emit: Emit, stdin_bytes: bytes | None = None) -> Any:
    """Run the loop of plan ``p`` again against its recorded responses; returns the runner's
    ``AskOutcome`` (its trajectory is not written).

    Raises:
        the same errors as ``runner.ask``; ``ProviderError`` when the recording runs out.
    """
    from rlm_cli.app import runner

    if "-" in p.paths and stdin_bytes is None:
        raise UsageError("the recorded run read its corpus from stdin", hint="pipe the same input into rlm replay")
    client = ReplayClient(p.settings, p.responses)
    started = time.monotonic()
    here = os.getcwd()
    if p.cwd and p.cwd != here:  # the same folder as the recorded run, so context's paths are the same
        try:
            os.chdir(p.cwd)
        except OSError:
            emit(event("notice", 0, level="warning", message=f"the recorded run's folder {p.cwd} is gone: paths "
                                                               "in context may differ, and so may the answer"))
    try:
        outcome = runner.ask(p.settings, p.paths, p.question, emit=emit, stdin_bytes=stdin_bytes, client=client,
                             record=False)
    finally:
        os.chdir(here)
    outcome.usage["replay_s"] = round(time.monotonic() - started, 3)
    return outcome
