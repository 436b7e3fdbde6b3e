"""What the loop remembers between turns: the runs the model has read, its streaks of repeated
code, errors and prose replies, and the notes they earn.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from rlm_cli.loop import prompts, reply
from rlm_cli.loop.policy import Policy

#: Turns in a row of code already run (with the same output) after which a ``guided`` model is
#: asked for its answer (again after as many more, at most :data:`STUCK_ASKS` times a run).
STUCK_REPEATS = 2
STUCK_ASKS = 3
#: Turns in a row that met the error of the turn before after which a ``guided`` model is asked
#: for its answer too (seen: one TypeError 19 turns in a row, the slice in the failing line
#: shifted by one each time, so never the same code twice).
STUCK_ERRORS = 3
_SPACE = re.compile(r"\s+")


def norm(code: str) -> str:
    """``code`` with runs of whitespace made one space: what makes two blocks "the same code"."""
    return _SPACE.sub(" ", code).strip()


def run_key(code: str, output: str) -> str:
    """A block run as the model saw it: its code and its output. The same code with another
    output (a cursor, a page of a loop) is a new run, not a repeat."""
    return hashlib.sha1(f"{norm(code)}\0{output}".encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class LoopState:
    """What one run of the loop remembers between turns (repeats, errors, prose answers, caps)."""

    last_text: str = ""
    no_code_streak: int = 0
    #: Runs (code and output) the model has read; a block run again with the same output is a repeat.
    seen_runs: set[str] = field(default_factory=set)
    #: The model has read some REPL output (or leads that showed corpus lines).
    read_output: bool = False
    last_errors: set[str] = field(default_factory=set)
    error_streak: int = 0
    #: The leads' output when it showed corpus lines (a first-turn prose answer may rest on it).
    leads_text: str = ""
    #: Prose replies that read as answers (normalized, lowercased): one said again is taken (guided).
    prose_answers: set[str] = field(default_factory=set)
    #: Turns in a row whose runs had all been read before (see :data:`STUCK_REPEATS`).
    repeat_streak: int = 0
    stuck_asks: int = 0
    #: The runs of the last turn: the same again replaces that turn in the history (guided).
    last_runs: list[str] = field(default_factory=list)
    #: Helpers that stopped at their default cap, by iteration.
    default_caps: dict[int, list[str]] = field(default_factory=dict)

    def repetition_notes(self, policy: Policy, runs: list[str], outputs: list[tuple[str, str]],
                         notice: Callable[[str], None]) -> list[str]:
        """Notes when this turn repeats runs the model has read (guided), or the error of the
        previous turn (standard and guided), and count the streaks; ``notice`` hears of each."""
        notes = []
        if policy.repeats:
            if runs and all(r in self.seen_runs for r in runs):
                self.repeat_streak += 1
                notes.append(prompts.REPEATED_CODE if self.repeat_streak == 1 else prompts.answer_now(self.repeat_streak))
                notice(f"the model repeated code it had already run ({self.repeat_streak} turn(s) in a row); told")
            else:
                self.repeat_streak = 0
        if not policy.error_notes:
            return notes
        shown = [o for _, o in outputs]
        errors = [e for e in (reply.error_signature(o) for o in shown) if e]
        repeated = [e for e in errors if e in self.last_errors]
        if repeated:
            line = next((reply.failing_line(o) for o in shown if reply.error_signature(o) == repeated[0]), None)
            notes.append(prompts.repeated_error(repeated[0], self.error_streak + 1, line))
            notice(f"the same error as the previous turn: {repeated[0][:120]}")
            self.error_streak += 1
        else:
            self.error_streak = 0
        self.last_errors = set(errors)
        return notes
