"""One exception tree for the whole tool; each class carries its process exit code.

The CLI maps any :class:`RLMError` to ``exit_code`` in one place (``rlm_cli.commands.exits``); the README's
exit-code table documents the same numbers. This module imports no other project module but the
JSON shapes of ``rlm_cli.shapes`` (for types only).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlm_cli.shapes import SourceDoc, UsageDoc


class ExitCode(enum.IntEnum):
    """Process exit codes; scripts rely on these numbers (see the README)."""

    OK = 0
    INTERNAL = 1
    USAGE = 2
    NO_MODEL = 3
    PROVIDER = 4
    MAX_ITERATIONS = 5
    BUDGET = 6
    #: ``--require-support``: the answer's support verdict is ``unsupported`` (it is still printed).
    UNSUPPORTED = 7
    #: ``rlm audit``: a check of error severity (or as low as ``--fail-on``) failed, or its answer
    #: could not be decided or was unsupported.
    CHECK_FAILED = 8
    #: ``--answer-type``: the answer is not a value of its type (``maybe`` for ``bool``, ``NaN`` for
    #: ``json``): nothing is printed but the ``--json`` document (``value: null``, ``value_problem``).
    NOT_OF_TYPE = 9
    INTERRUPTED = 130
    BROKEN_PIPE = 141
    TERMINATED = 143


#: Exit codes from best to worst, for a run of several questions or checks that exits with the
#: worst of theirs (:func:`worst_exit_code`): answered (0) < answered but unsupported under
#: ``--require-support`` (7) < answered, but not a value of its ``--answer-type`` (9) < iteration
#: limit (5, partial answer) < budget (6, partial answer) <
#: an audit check failed (8) < usage error (2, not answered) < no model configured (3) < provider
#: failure (4) < internal error (1). The README's exit-code section gives the same order.
EXIT_SEVERITY = (ExitCode.OK, ExitCode.UNSUPPORTED, ExitCode.NOT_OF_TYPE, ExitCode.MAX_ITERATIONS, ExitCode.BUDGET,
                 ExitCode.CHECK_FAILED, ExitCode.USAGE, ExitCode.NO_MODEL, ExitCode.PROVIDER, ExitCode.INTERNAL)


def worst_exit_code(codes: Iterable[int]) -> int:
    """The worst of ``codes`` by :data:`EXIT_SEVERITY` (0 for none); a code outside it (130, 141,
    143: a run that ends that way exits at once instead) counts as the internal error (1)."""
    rank = {int(c): i for i, c in enumerate(EXIT_SEVERITY)}
    worst = 0
    for code in codes:
        if rank.get(int(code), len(EXIT_SEVERITY) - 1) > rank.get(worst, 0):
            worst = int(code) if int(code) in rank else int(ExitCode.INTERNAL)
    return worst


@dataclass
class RunReport:
    """What a question that ended in an error reports of itself, beside the error's message: the
    session that ran the question fills it in (``app``), the documents and reports read it.

    Every error of a question: its trajectory (``trace_path``; ``None`` when none was written or it
    was removed) and its usage summary (``usage``: ``Usage.summary()``; ``None`` before a model was
    asked), and the ``sources`` it looked at (``output.sources``) with how many were left out of
    the list. A run that stopped without a final answer (:class:`PartialAnswerError`) also says
    how it ran: the loop's ``result`` (a ``loop.result.RunResult``: status, iterations, sub-calls,
    policy; ``None`` for a budget stop, which ended the loop before it made one), the ``corpus``
    it read (a ``corpus.Corpus``), its ``mode`` (``rlm`` or ``direct``; ``None`` when it stopped
    before choosing) and the sandbox level it used (``sandbox``: not the ``--sandbox`` setting,
    which may be ``auto``). (``result`` and ``corpus`` are typed ``Any``: this module imports
    nothing of the project but the JSON shapes of ``shapes``.)
    """

    trace_path: Path | None = None
    usage: UsageDoc | None = None
    sources: list[SourceDoc] = field(default_factory=list)
    sources_omitted: int = 0
    result: Any = None
    corpus: Any = None
    mode: str | None = None
    sandbox: str | None = None


class RLMError(Exception):
    """Base class: a problem the user can act on, printed as one line without a traceback.
    ``report`` is what the question that raised it reports of itself (:class:`RunReport`)."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.report = RunReport()

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"


class UsageError(RLMError):
    """Bad input: a missing path, an empty corpus, a bad option value (exit 2)."""

    exit_code = ExitCode.USAGE


class EmptyCorpusError(UsageError):
    """Every candidate file was ignored, binary, too large or unreadable (exit 2)."""


class DoesNotFitError(UsageError):
    """``--mode direct`` on a corpus larger than the root model's input window."""


class NoModelError(RLMError):
    """No model is configured and none could be detected (exit 3)."""

    exit_code = ExitCode.NO_MODEL


class ProviderError(RLMError):
    """The model provider failed in a way retries cannot fix: auth, bad request, outage (exit 4)."""

    exit_code = ExitCode.PROVIDER


class SandboxError(RLMError):
    """The REPL worker could not be started at all (exit 1): a broken install, not a user mistake."""

    exit_code = ExitCode.INTERNAL


class PartialAnswerError(RLMError):
    """The run stopped before a final answer; ``partial`` holds the best answer it has (may be '')."""

    def __init__(self, message: str, *, partial: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.partial = partial


class MaxIterationsError(PartialAnswerError):
    """``--max-iterations`` was reached without FINAL; ``partial`` is the root model's best answer (exit 5)."""

    exit_code = ExitCode.MAX_ITERATIONS


class BudgetExceededError(PartialAnswerError):
    """A budget (--max-cost, --max-tokens, --max-sub-calls, --timeout) was reached (exit 6)."""

    exit_code = ExitCode.BUDGET

    def __init__(self, message: str, *, budget: str, partial: str = "", hint: str | None = None) -> None:
        super().__init__(message, partial=partial, hint=hint)
        self.budget = budget


class InterruptedRunError(RLMError):
    """Ctrl-C stopped a question; ``rlm chat`` goes on with the next one (exit 130 for the run)."""

    exit_code = ExitCode.INTERRUPTED
