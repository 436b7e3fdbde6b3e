"""What a run hands back: the :class:`AskOutcome`, its sources, what an early stop
(``PartialAnswerError``) carries, and the :class:`PastQuestion` a session remembers of it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from rlm_cli.corpus import Corpus
from rlm_cli.errors import InterruptedRunError, MaxIterationsError, PartialAnswerError, RLMError
from rlm_cli.events import Emit, EventDict, is_type
from rlm_cli.loop.result import RunResult
from rlm_cli.models.client import ModelClient
from rlm_cli.output.sources import SourceCollector, build_sources, direct_rows
from rlm_cli.shapes import SourceDoc, UsageDoc


@dataclass
class AskOutcome:
    """A finished run: the result, the corpus it read, the usage summary and its trajectory."""

    result: RunResult
    corpus: Corpus
    usage: UsageDoc
    sandbox: str
    run_id: str = ""
    trace_path: Path | None = None
    #: What the run looked at (``rlm_cli.output.sources``) and how many ranges were left out of the list.
    sources: list[SourceDoc] = dataclasses.field(default_factory=list)
    sources_omitted: int = 0


def run_sources(collector: SourceCollector, answer: str, corpus: Corpus, mode: str) -> tuple[list[SourceDoc], int]:
    """The run's ``sources`` and how many were left out (see ``rlm_cli.output.sources``)."""
    files = [(f.path, f.lines) for f in corpus.files]
    rows = direct_rows(files) if mode == "direct" else collector.rows
    return build_sources(rows, answer, files)


def attach_partial(exc: PartialAnswerError, client: ModelClient, corpus: Corpus, mode: str, level: str) -> None:
    """Attach what the caller reports of a run that stopped early to ``exc``: the usage summary,
    the corpus, the mode and the sandbox level the run used (``bwrap``, ``process``, ...: not the
    ``--sandbox`` setting, which may be ``auto``)."""
    report = exc.report
    report.usage, report.corpus, report.mode, report.sandbox = client.usage.summary(), corpus, mode, level


class TurnCounter:
    """The ``emit`` target between the loops and the trajectory: forwards every event and counts
    the root loop's iterations begun (``iteration`` events at depth 0: the ``── iteration N ──``
    lines shown), which is what a run that stopped early (budget, Ctrl-C) reports as its
    ``iterations``, so a run stopped in the middle of iteration 1 says 1, as the screen did."""

    def __init__(self, forward: Emit) -> None:
        self.forward = forward
        self.root_turns = 0

    def __call__(self, ev: EventDict) -> None:
        if is_type(ev, "iteration") and ev.get("depth") == 0:
            self.root_turns += 1
        self.forward(ev)


@dataclasses.dataclass
class PastQuestion:
    """An earlier question of the session: what was asked, the answer (or partial answer), its
    status (``final``, ``max_iterations``, ``budget_exceeded``, ``error``, ``interrupted``) and
    its trajectory."""

    question: str
    answer: str
    status: str
    trace_path: Path | None = None


def status_of(exc: RLMError) -> str:
    """The ``status`` of a question that raised ``exc``."""
    if isinstance(exc, MaxIterationsError):
        return "max_iterations"
    if isinstance(exc, PartialAnswerError):
        return "budget_exceeded"
    if isinstance(exc, InterruptedRunError):
        return "interrupted"
    return "error"
