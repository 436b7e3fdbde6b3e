"""The root model's conversation, kept inside its input window.

Before each root call the orchestrator asks :meth:`History.messages` for the request. The
system prompt, the worked example's turns, the first user message (corpus metadata and
question) and the last few turns are sent verbatim; older turns are replaced by a compact
record (the code that ran and the head of its output), and when even that is too much the
oldest records are dropped behind one note.
The REPL keeps every variable, so nothing computed is lost, only the transcript is shortened.

Token counts and the input budget are ``rlm_cli.models.window``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlm_cli.loop import prompts
from rlm_cli.models.window import MESSAGE_OVERHEAD, REQUEST_OVERHEAD, message_tokens, request_tokens, truncate_tokens

#: Turns kept verbatim at the end of the history when they fit.
KEEP_LAST = 4


def output_limit(budget_tokens: int, max_output_chars: int) -> int:
    """Characters of a block's output shown to the root model: ``max_output_chars``, but at most
    ``budget_tokens // 2`` characters (about a sixth of the history budget at 3 characters per
    token, so that a few turns of output fit a small window: 5,898 characters for a 16k window,
    where a 1.5B model on a CPU reads about 50 tokens a second), and never under 500."""
    return max(500, min(max_output_chars, budget_tokens // 2))


@dataclass
class Turn:
    """One root-model turn: its reply, the code blocks that ran, their shown outputs and the user
    message that answered it (``feedback``)."""

    iteration: int
    reply: str
    feedback: str
    codes: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    _full: int | None = field(default=None, repr=False)
    _compact: int | None = field(default=None, repr=False)

    def full_messages(self) -> list[dict[str, str]]:
        """The turn as sent verbatim."""
        return [{"role": "assistant", "content": self.reply}, {"role": "user", "content": self.feedback}]

    def compact_messages(self) -> list[dict[str, str]]:
        """The turn as a compact record: the code that ran and the head of its output."""
        return [{"role": "assistant", "content": prompts.compact_reply(self.iteration, self.codes)},
                {"role": "user", "content": prompts.compact_feedback(self.outputs)}]

    @property
    def full_tokens(self) -> int:
        """Tokens of :meth:`full_messages` (cached)."""
        if self._full is None:
            self._full = sum(message_tokens(m) for m in self.full_messages())
        return self._full

    @property
    def compact_tokens(self) -> int:
        """Tokens of :meth:`compact_messages` (cached)."""
        if self._compact is None:
            self._compact = sum(message_tokens(m) for m in self.compact_messages())
        return self._compact


@dataclass
class Fit:
    """How the last request was fitted: turns sent verbatim, compacted and omitted, and tokens."""

    verbatim: int = 0
    compacted: int = 0
    omitted: int = 0
    truncated: bool = False
    tokens: int = 0


class History:
    """The conversation of one orchestrator, fitted to ``budget_tokens`` on every request.

    Everything is sent verbatim while it fits; past that, all but the last ``keep_last`` turns
    become compact records (fewer verbatim turns if need be), and the oldest records are dropped.

    Raises nothing: when even the system prompt and the question do not fit, their text is cut
    (``Fit.truncated``) so that no request is larger than the budget.
    """

    def __init__(self, system: str, first_user: str, *, budget_tokens: int, keep_last: int = KEEP_LAST,
                 examples: list[dict[str, str]] | None = None) -> None:
        self.system = {"role": "system", "content": system}
        self.examples = list(examples or [])
        self.first = {"role": "user", "content": first_user}
        self.budget = budget_tokens
        self.keep_last = keep_last
        self.turns: list[Turn] = []
        self.last_fit = Fit()
        self._fixed = self._fixed_tokens()

    def _fixed_tokens(self) -> int:
        return (message_tokens(self.system) + sum(message_tokens(m) for m in self.examples)
                + message_tokens(self.first) + REQUEST_OVERHEAD)

    def add(self, turn: Turn, *, replace_last: bool = False) -> None:
        """Append a finished turn; with ``replace_last``, it takes the place of the last turn
        instead (a model repeating its last code: one copy in the history, not a pattern that
        a small model goes on copying)."""
        if replace_last and self.turns:
            self.turns[-1] = turn
        else:
            self.turns.append(turn)

    def extend_last_feedback(self, text: str) -> None:
        """Append ``text`` to the last turn's user message (or to the first message if no turn yet)."""
        if self.turns:
            t = self.turns[-1]
            t.feedback = f"{t.feedback}\n\n{text}"
            t._full = None
        else:
            self.first = {"role": "user", "content": f"{self.first['content']}\n\n{text}"}
            self._fixed = self._fixed_tokens()

    def messages(self) -> list[dict[str, Any]]:
        """The request to send now, within ``budget_tokens`` (see the module docstring)."""
        n = len(self.turns)
        if self._fixed + sum(t.full_tokens for t in self.turns) <= self.budget:
            return self._build([], 0, self.turns)  # everything fits: nothing is shortened
        for keep in range(min(self.keep_last, n), 0, -1):
            verbatim = self.turns[n - keep:]
            older = self.turns[: n - keep]
            total = self._fixed + sum(t.full_tokens for t in verbatim)
            if total > self.budget:
                continue
            start = self._drop_oldest(older, total)
            if start is not None:
                return self._build(older, start, verbatim)
        # Not even the last turn fits verbatim: everything compact, oldest dropped first.
        start = self._drop_oldest(self.turns, self._fixed)
        if start is not None:
            return self._build(self.turns, start, [])
        return self._truncated()

    # -- internals ---------------------------------------------------------------------------------
    def _omitted_tokens(self, first: int, last: int) -> int:
        a, u = prompts.omitted_turns(first, last)
        return message_tokens({"content": a}) + message_tokens({"content": u})

    def _drop_oldest(self, older: list[Turn], base: int) -> int | None:
        """Index of the first compact turn to keep so that ``base`` + compact turns (+ the omitted
        note) fit; ``None`` if not even the note alone fits."""
        compact = [t.compact_tokens for t in older]
        total = base + sum(compact)
        if total <= self.budget:
            return 0
        for start in range(1, len(older) + 1):
            total -= compact[start - 1]
            note = self._omitted_tokens(older[0].iteration, older[start - 1].iteration)
            if total + note <= self.budget:
                return start
        return None

    def _build(self, older: list[Turn], start: int, verbatim: list[Turn]) -> list[dict[str, Any]]:
        msgs: list[dict[str, Any]] = [self.system, *self.examples, self.first]
        if start:
            a, u = prompts.omitted_turns(older[0].iteration, older[start - 1].iteration)
            msgs += [{"role": "assistant", "content": a}, {"role": "user", "content": u}]
        for t in older[start:]:
            msgs += t.compact_messages()
        for t in verbatim:
            msgs += t.full_messages()
        self.last_fit = Fit(verbatim=len(verbatim), compacted=len(older) - start, omitted=start,
                            tokens=request_tokens(msgs))
        return msgs

    def _truncated(self) -> list[dict[str, Any]]:
        """Last resort: system prompt, question and the last turn, cut by tokens to fit."""
        msgs: list[dict[str, Any]] = [dict(self.system), dict(self.first)]  # no room for the example
        if self.turns:
            last = self.turns[-1]
            if len(self.turns) > 1:
                a, u = prompts.omitted_turns(self.turns[0].iteration, self.turns[-2].iteration)
                msgs += [{"role": "assistant", "content": a}, {"role": "user", "content": u}]
            msgs += last.compact_messages()
        room = self.budget - request_tokens(msgs)
        # Cut the largest messages first: the first user message (metadata), then the system prompt.
        for i in sorted(range(len(msgs)), key=lambda j: -message_tokens(msgs[j])):
            if room >= 0:
                break
            have = message_tokens(msgs[i]) - MESSAGE_OVERHEAD
            keep = max(0, have + room)
            msgs[i] = {**msgs[i], "content": truncate_tokens(str(msgs[i]["content"]), keep)}
            room = self.budget - request_tokens(msgs)
        self.last_fit = Fit(compacted=1 if self.turns else 0, omitted=max(0, len(self.turns) - 1), truncated=True,
                            tokens=request_tokens(msgs))
        return msgs
