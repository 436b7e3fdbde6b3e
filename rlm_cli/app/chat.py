"""``rlm chat PATH...``: an interactive session over one loaded corpus and one REPL worker.

Each line typed is a question, answered by a full RLM loop in the same worker (REPL variables
are kept, and the root model sees the earlier questions and answers; see ``session.Session``),
or a command:

* ``/reset``: a fresh REPL and no history (variables and earlier questions are forgotten);
* ``/trace``: the trajectory file of every question so far, and the last one as a tree;
* ``/cost``: the session's tokens, cost and calls, and what is left of each budget;
* ``/quit`` (or ``/exit``, or Ctrl-D): end the session; ``/help``: this list.

On a terminal, lines are edited with ``readline`` and the questions typed are kept in
``<user data dir>/chat_history`` (mode 0600; the last :data:`HISTORY_LINES`). Ctrl-C stops the
question being answered (its code block is interrupted in the worker, which keeps its variables
when it stops within ``session.INTERRUPT_GRACE_S``; otherwise it is restarted) and the session
goes on; Ctrl-C at the prompt clears the line. When standard input is not a terminal, each line
of it is a question (or a command), nothing but answers goes to stdout, and Ctrl-C ends the run.

Budgets (``--max-cost``, ``--max-tokens``, ``--max-sub-calls``, ``--timeout``) hold for the
whole session; time spent at the prompt does not count against ``--timeout``. The exit code is
the worst of the questions' (``errors.worst_exit_code``); an interrupted question does not count.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlm_cli.app.batch import outcome_code
from rlm_cli.errors import PartialAnswerError, RLMError, worst_exit_code
from rlm_cli.output.documents import (
    AskDocument,
    ErrorDocument,
    answer_text,
    error_document,
    outcome_document,
    partial_document,
)
from rlm_cli.output.text import money, plural

if TYPE_CHECKING:
    from rlm_cli.app.session import Session
    from rlm_cli.output.ui import UI

#: Questions kept in the history file.
HISTORY_LINES = 1000
PROMPT = "rlm> "
COMMANDS = {"/reset": "a fresh REPL and no history", "/trace": "the trajectories of this session",
            "/cost": "tokens, cost and budgets so far", "/quit": "end the session (also /exit, Ctrl-D)",
            "/help": "this list"}


def history_path() -> Path:
    """Where typed questions are kept: ``<user data dir>/chat_history``."""
    from rlm_cli.config import data_dir

    return data_dir() / "chat_history"


class Chat:
    """The read-answer loop of ``rlm chat`` over an opened ``session.Session``; ``ui`` is the
    ``render.Renderer`` for stderr. :meth:`run` returns the exit code."""

    def __init__(self, session: Session, ui: UI, *, json_out: bool = False, cite: bool = False,
                 interactive: bool | None = None) -> None:
        self.session = session
        self.ui = ui
        self.json_out = json_out
        self.cite = cite
        self.interactive = sys.stdin.isatty() if interactive is None else interactive
        self.codes: list[int] = []
        self.asked = 0
        self._readline: Any = None

    def run(self) -> int:
        """Read and answer until ``/quit``, Ctrl-D or the end of input.

        Raises:
            KeyboardInterrupt: Ctrl-C when standard input is not a terminal.
        """
        if self.interactive:
            self._start_history()
            corpus = self.session.corpus  # loaded: the session is open
            files, tokens = (len(corpus.files), corpus.total_tokens) if corpus is not None else (0, 0)
            self.ui.info(f"rlm chat over {plural(files, 'file')} ({tokens:,} tokens), mode "
                         f"{self.session.mode}: type a question, /help for commands, Ctrl-D to quit")
        try:
            while True:
                line = self._read()
                if line is None:
                    break
                line = line.strip()
                if not line:
                    continue
                if line.startswith("/") and not line.startswith("//"):
                    if not self._command(line):
                        break
                    continue
                self._question(line)
        finally:
            self._save_history()
        return worst_exit_code(self.codes)

    # -- input -----------------------------------------------------------------------------------------
    def _read(self) -> str | None:
        """The next line, or ``None`` at the end (Ctrl-D, end of input). The budget clock stops
        while waiting."""
        self.session.pause()
        try:
            if not self.interactive:
                line = sys.stdin.readline()
                return line if line else None
            while True:
                try:
                    if sys.stdout.isatty():
                        return input(PROMPT)
                    sys.stderr.write(PROMPT)  # stdout is the answers' (redirected): the prompt goes to stderr
                    sys.stderr.flush()
                    return input()
                except KeyboardInterrupt:  # Ctrl-C at the prompt clears the line
                    sys.stderr.write("\n")
                except EOFError:
                    sys.stderr.write("\n")
                    return None
        finally:
            self.session.resume()

    def _start_history(self) -> None:
        try:
            import readline
        except ImportError:  # no line editing on this platform: input() still works
            return
        self._readline = readline
        readline.set_history_length(HISTORY_LINES)
        try:
            readline.read_history_file(history_path())
        except OSError:
            pass

    def _save_history(self) -> None:
        if self._readline is None:
            return
        path = history_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._readline.write_history_file(path)
            os.chmod(path, 0o600)
        except OSError as exc:
            self.ui.warning(f"could not save the question history to {path}: {exc.strerror or exc}")

    # -- commands --------------------------------------------------------------------------------------
    def _command(self, line: str) -> bool:
        """Run a ``/command``; ``False`` ends the session."""
        name = line.split()[0].lower()
        if name in ("/quit", "/exit", "/q"):
            return False
        if name == "/help":
            self.ui.info("\n".join(f"{cmd:8} {what}" for cmd, what in COMMANDS.items()))
        elif name == "/reset":
            self.session.reset()
            self.ui.info("fresh REPL: variables and earlier questions are forgotten")
        elif name == "/cost":
            self.ui.info(cost_text(self.session))
        elif name == "/trace":
            self._trace()
        else:
            self.ui.error(f"unknown command {name} (/help lists them; start a question with // to send a slash)")
        return True

    def _trace(self) -> None:
        traces = [t.trace_path for t in self.session.turns if t.trace_path is not None]
        if not traces:
            self.ui.info("no trajectory yet: ask a question first")
            return
        from rlm_cli.output import trace, trace_view

        for n, t in enumerate((t for t in self.session.turns if t.trace_path is not None), 1):
            self.ui.info(f"{n}. [{t.status}] {t.trace_path}")
        events = trace.read_trace(traces[-1])
        trace_view.print_trace_tree(events[0], trace.build_tree(events), file=sys.stderr)

    # -- questions -------------------------------------------------------------------------------------
    def _question(self, text: str) -> None:
        if text.startswith("//"):
            text = text[1:]
        self.asked += 1
        started = time.monotonic()
        sandbox = self.session.level
        try:
            outcome = self.session.ask(text, emit=self.ui.on_event, qid=self.asked)
            doc: AskDocument | ErrorDocument = outcome_document(outcome, round(time.monotonic() - started, 3))
            code = outcome_code(outcome, self.session.settings.require_support)
        except PartialAnswerError as exc:
            doc = partial_document(exc, sandbox, round(time.monotonic() - started, 3))
            code = int(exc.exit_code)
            self.ui.close()
            self.ui.warning(f"{exc.message}; the answer is PARTIAL" + (f" ({exc.hint})" if exc.hint else ""))
        except RLMError as exc:
            doc = error_document(exc.message, exc.exit_code)
            trace_path = exc.report.trace_path
            doc["trace"] = str(trace_path) if trace_path else None
            code = int(exc.exit_code)
            self.ui.error(str(exc))
        except KeyboardInterrupt:
            if not self.interactive:
                raise
            self.ui.close()
            lane = self.session.lane
            lost = lane.sandbox.interrupt_lost if lane is not None else None
            self.ui.warning("question interrupted" + (f"; {lost}: its variables are gone" if lost else
                                                       "; the REPL keeps its variables") + "; ask another or /quit")
            return
        self.codes.append(code)
        shown: dict[str, Any] = {"id": self.asked, "question": text, **doc}
        self.ui.summary(shown)
        self._deliver(shown)

    def _deliver(self, doc: dict[str, Any]) -> None:
        from rlm_cli.output.answer import json_text, write_text

        if self.json_out:
            write_text(json_text(doc, line=True))
        elif doc.get("answer"):  # an error or an empty partial answer: nothing for stdout
            write_text(answer_text(doc, self.cite))


def cost_text(session: Session) -> str:
    """``/cost``: the session's calls, tokens and cost (root and sub-calls) and its budgets."""
    usage = session.usage.summary()
    root, sub = usage["root"], usage["sub"]

    lines = [f"{plural(session.asked, 'question')}; root {plural(root['calls'], 'call')}, {root['input_tokens']:,} in / "
             f"{root['output_tokens']:,} out tokens; sub {plural(sub['calls'], 'call')}, {sub['input_tokens']:,} in / "
             f"{sub['output_tokens']:,} out tokens; cost {money(usage['cost_usd'], root['calls'] + sub['calls'])}"
             + (f"; {usage['cached_calls']} cached" if usage.get("cached_calls") else "")]
    s, budget = session.settings, session.budget
    limits = []
    if s.max_cost is not None:
        limits.append(f"--max-cost ${s.max_cost:g}: ${session.usage.known_cost_usd:.4f} spent")
    if s.max_tokens is not None:
        limits.append(f"--max-tokens {s.max_tokens:,}: {usage['total_tokens']:,} used")
    if s.max_sub_calls is not None:
        limits.append(f"--max-sub-calls {s.max_sub_calls:,}: {budget.sub_calls_started:,} started")
    if s.timeout is not None:
        left = budget.remaining_s()
        limits.append(f"--timeout {s.timeout:g} s: {max(0.0, left or 0.0):.0f} s left (time at the prompt "
                      "does not count)")
    lines.append("budgets for this session: " + ("; ".join(limits) if limits else "none set"))
    if budget.exceeded is not None:
        lines.append(f"budget reached: {budget.exceeded.message}; no further model calls are made")
    return "\n".join(lines)
