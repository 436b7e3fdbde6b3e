"""One exception tree for the whole tool; each class carries its process exit code.

The CLI maps any :class:`RLMError` to ``exit_code`` in one place (``rlm_cli.commands.exits``); the README's
exit-code table documents the same numbers. This module imports no other project module.
"""

from __future__ import annotations

import enum


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
    INTERRUPTED = 130
    BROKEN_PIPE = 141
    TERMINATED = 143


class RLMError(Exception):
    """Base class: a problem the user can act on, printed as one line without a traceback."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

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
