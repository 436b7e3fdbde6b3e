"""Terminal output: draws a run's events on stderr as they happen; it decides nothing. With
``live.py`` (progress drawing), ``style.py``, ``tables.py`` and ``trace_view.py`` it is the only
code that imports rich (see ``rlm_cli.output``).

Two styles (see :func:`~rlm_cli.output.style.display_style`): on a terminal, colours and a rich
``Live`` region (``live.py``) that shows the root model's reply as it streams (a spinner and a
timer until the first token), and a progress line per batch of sub-calls, sub-RLMs or corpus indexing; the region is transient, and
what stays on screen is the reply's prose, the code, the outputs and one line per finished group.
Elsewhere (stderr not a terminal, ``NO_COLOR``, ``TERM=dumb``, ``--color never``) plain lines:
the reply is written as it arrives, each iteration ends with its phase, and a batch of sub-calls
prints a line when it starts, at each quarter done and when it ends.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from rich.console import Console
from rich.live import Live
from rich.syntax import Syntax

from rlm_cli.events import (
    CheckEvent,
    CodeEvent,
    CorpusEvent,
    EventDict,
    EventType,
    FinalEvent,
    IterationEvent,
    LeadsEvent,
    ModeEvent,
    NoticeEvent,
    OutputEvent,
    PhaseEvent,
    ProgressEvent,
    RecursionEvent,
    RootCallEvent,
    StreamEvent,
    SubCallEvent,
    depth_of,
    is_type,
)
from rlm_cli.output.answer import count, mapping, summary_line, support_warning
from rlm_cli.output.live import EvalProgress, LiveView, PlainGroup, StreamState, ViewState
from rlm_cli.output.style import SHOW_LINES, display_style, escape
from rlm_cli.output.tables import print_table
from rlm_cli.output.text import clip, cost_text, helpers_text, indent_lines, plural, progress_line, safe_text

#: Lines of a reply's prose (outside code blocks) kept on screen after its stream.
PROSE_LINES = 24
#: Seconds between two plain indexing lines.
PLAIN_INDEX_INTERVAL_S = 2.0
#: Used by renderers made without a ``color`` (error lines printed by ``cli.main``).
default_color = "auto"

_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)


class Renderer:
    """Draws trajectory events on stderr as they happen (thread-safe). ``quiet`` shows only
    errors; ``verbose`` adds sub-calls; ``color`` is ``--color`` (see
    :func:`~rlm_cli.output.style.display_style`)."""

    def __init__(self, *, quiet: bool = False, verbose: bool = False, color: str | None = None,
                 stream: IO[str] | None = None) -> None:
        self.quiet = quiet
        self.verbose = verbose
        color = color or default_color
        self.styled, self.live = display_style(color, stream)
        self.file = stream if stream is not None else sys.stderr
        if self.styled:
            self.err = Console(file=self.file, highlight=False, soft_wrap=True,
                               force_terminal=True if color == "always" else None)
        else:
            self.err = Console(file=self.file, highlight=False, soft_wrap=True, color_system=None,
                               force_terminal=False, no_color=True, emoji=False)
        self._lock = threading.RLock()
        self._state = ViewState()
        self._live: Live | None = None
        self._plain_groups: dict[int, PlainGroup] = {}
        #: Progress groups already reported finished: a late event of one (its sender's thread lost
        #: the race to the last) is dropped, not shown as a new batch.
        self._finished_groups: set[int] = set()
        self._plain_index_at = 0.0
        self._streamed: set[int] = set()  # depths whose last reply was streamed (plain: code shown)
        self._first_token: dict[int, float] = {}

    # -- events ------------------------------------------------------------------------------------
    def on_event(self, ev: EventDict) -> None:
        """Render one event (see ``rlm_cli.output.trace`` for the types)."""
        with self._lock:
            try:
                self._on_event(ev)
            except BrokenPipeError:  # stderr went away: nothing more to show
                self.quiet = True

    def _on_event(self, ev: EventDict) -> None:
        kind = str(ev.get("type"))
        indent = "  " * depth_of(ev)
        if is_type(ev, "notice"):
            self._on_notice(ev, indent)
            return
        if self.quiet:
            return
        if kind not in _KEEPS_STREAM:
            self._end_stream_text()
        handler = HANDLERS.get(kind)
        if handler is not None:
            handler(self, ev, indent)

    # -- one handler per event type the terminal shows (HANDLERS) ------------------------------------
    def _on_notice(self, ev: NoticeEvent, indent: str) -> None:
        if self.quiet or (ev.get("verbose_only") and not self.verbose):
            return  # verbose_only: a note about this machine already shown on it (-v shows it again)
        self._end_stream_text()
        if ev.get("level") == "warning":
            self.err.print(f"{indent}[yellow]warning:[/] {escape(str(ev['message']))}")
        else:
            self.err.print(f"{indent}[dim]{escape(str(ev['message']))}[/]")

    def _on_corpus(self, ev: CorpusEvent, indent: str) -> None:
        self._state.index = None
        self._refresh_live()
        self.err.print(f"[bold]corpus[/] {escape(ev['summary'])} [dim]({ev['load_s']:.2f} s, "
                       f"sandbox {ev['sandbox']})[/]")
        if self.verbose:
            named = ev.get("skipped") or []
            for row in named:
                self.err.print(f"[dim]skipped {escape(str(row['path']))} ({escape(str(row['reason']))})[/]")
            more = int(ev.get("skipped_count") or 0) - len(named)
            if more > 0:
                self.err.print(f"[dim]... and {more:,} more skipped (counted in the summary above)[/]")

    def _on_iteration(self, ev: IterationEvent, indent: str) -> None:
        title = f"iteration {ev['iteration']}" + (f" (depth {ev['depth']})" if ev["depth"] else "")
        if self.styled:
            self.err.rule(f"{indent}{title}", style="cyan", align="left")
        else:
            self.err.print(f"{indent}── {title} ──")

    def _on_code(self, ev: CodeEvent, indent: str) -> None:
        if self.styled:
            self.err.print(Syntax(safe_text(clip(ev["code"], SHOW_LINES)), "python", theme="ansi_dark",
                                  line_numbers=False, word_wrap=True))
        elif depth_of(ev) not in self._streamed:  # plain: the stream showed it already
            self.err.print(escape(indent_lines(clip(ev["code"], SHOW_LINES), indent + "  ")))

    def _on_output(self, ev: OutputEvent, indent: str) -> None:
        out = ev.get("output") or "(no output)"
        sub = f" · {plural(ev['sub_calls'], 'sub-call')}" if ev.get("sub_calls") else ""
        self.err.print(f"{indent}[dim]→ {ev['output_chars']:,} chars, {ev['elapsed_s']:.2f} s{sub}[/]")
        self.err.print(escape(indent_lines(clip(out, SHOW_LINES), indent + "  ")), style="green")

    def _on_leads(self, ev: LeadsEvent, indent: str) -> None:
        if ev.get("output"):
            self.err.print(f"{indent}[bold]leads[/] [dim](leads(question), {ev.get('elapsed_s', 0) or 0:.2f} s)[/]")
            self.err.print(escape(indent_lines(clip(str(ev["output"]), SHOW_LINES), indent + "  ")), style="green")

    def _on_phase(self, ev: PhaseEvent, indent: str) -> None:
        self.err.print(f"{indent}[bold cyan]iteration {ev['iteration']}: {ev['phase']}[/]"
                       f"[dim]{escape(helpers_text(ev.get('helpers') or {}))}[/]")

    def _on_recursion(self, ev: RecursionEvent, indent: str) -> None:
        self.err.print(f"{indent}[magenta]rlm_query → depth {ev['depth']} ({ev['mode']})[/]")

    def _on_mode(self, ev: ModeEvent, indent: str) -> None:
        self.err.print(f"[bold]mode[/] {ev['mode']} [dim]({escape(str(ev.get('reason', '')))})[/]")
        if ev["mode"] == "rlm" and ev.get("policy"):  # what the loop will do to an answer (README)
            self.err.print(f"[bold]policy[/] {ev['policy']} [dim]({escape(str(ev.get('policy_reason', '')))})[/]")

    def _on_sub_call(self, ev: SubCallEvent, indent: str) -> None:
        if self.verbose:
            self.err.print(f"{indent}[dim]sub-call {ev.get('model')}: {ev.get('input_tokens', 0):,} in / "
                           f"{ev.get('output_tokens', 0):,} out tokens, {ev.get('latency_s', 0):.1f} s, "
                           f"{cost_text(ev.get('cost_usd'))}[/]")

    def _on_check(self, ev: CheckEvent, indent: str) -> None:
        if ev.get("verdict") not in ("send_back", "rewrite"):
            return
        # why the run goes on after a FINAL (or why the answer differs from the one given)
        did = "sent the answer back" if ev["verdict"] == "send_back" else "rewrote the answer"
        note = str(ev.get("note") or "").strip().splitlines()
        self.err.print(f"{indent}[yellow]check {escape(str(ev.get('check')))}[/] {did}"
                       + (f"[dim]: {escape(note[0] if len(note[0]) <= 200 else note[0][:199] + '…')}[/]"
                          if note else ""))

    def _on_final(self, ev: FinalEvent, indent: str) -> None:
        n = ev["iterations"]
        self.err.print(f"{indent}[bold green]{ev['status']}[/] after {n} iteration{'' if n == 1 else 's'}")

    # -- the streaming reply -----------------------------------------------------------------------
    def _on_stream(self, ev: StreamEvent, indent: str = "") -> None:
        depth = depth_of(ev)
        state = ev.get("state")
        if state == "start":
            self._end_stream_text()
            self._state.stream = StreamState(depth, str(ev.get("model", "")), time.monotonic())
            self._streamed.discard(depth)
            self._refresh_live()
            return
        st = self._state.stream
        if st is None or st.depth != depth:
            return  # another loop's stream (a concurrent sub-RLM): its events show it
        if state == "restart":
            st.text = ""
            if not self.live:
                self._write_raw("\n" + "  " * depth + "[the stream broke; the request is sent again]\n")
                st.at_line_start = True
            self._refresh_live()
            return
        text = str(ev.get("text", ""))
        if st.first_at is None:
            st.first_at = time.monotonic()
            self._first_token[depth] = st.first_at - st.started
            if not self.live:
                self._write_raw("  " * depth + f"{st.model}:\n")
        st.text += text
        self._streamed.add(depth)
        if self.live:
            self._refresh_live()
        else:
            self._write_stream_text(st, text)

    def _write_stream_text(self, st: StreamState, text: str) -> None:
        indent = "  " * st.depth
        if indent:
            pieces = text.split("\n")
            out = []
            for i, piece in enumerate(pieces):
                if i:
                    out.append("\n")
                    st.at_line_start = True
                if piece:
                    if st.at_line_start:
                        out.append(indent)
                    out.append(piece)
                    st.at_line_start = False
            self._write_raw("".join(out))
        else:
            self._write_raw(text)
            if text:
                st.at_line_start = text.endswith("\n")

    def _end_stream_text(self) -> None:
        """Plain output: end a streamed reply's last line before anything else is printed."""
        st = self._state.stream
        if st is not None and not self.live and st.text and not st.at_line_start:
            self._write_raw("\n")
            st.at_line_start = True

    def _on_root_call(self, ev: RootCallEvent, indent: str) -> None:
        depth = depth_of(ev)
        st = self._state.stream
        if st is not None and st.depth == depth:
            self._state.stream = None
            self._refresh_live()
        streamed = depth in self._streamed
        response = str(ev.get("response", ""))
        if self.live and streamed:  # the live region is gone: keep the prose, the code follows
            prose = _FENCE.sub("", response).strip()
            if prose:
                self.err.print(escape(indent_lines(clip(prose, PROSE_LINES), indent)), style="dim")
        elif not streamed and self.verbose:
            self.err.print(escape(clip(response, 40)))
        first = self._first_token.pop(depth, None)
        first_s = f", first token {first:.1f} s" if first is not None and streamed else ""
        self.err.print(f"{indent}[dim]root model: {ev['input_tokens']:,} in / {ev['output_tokens']:,} out "
                       f"tokens, {ev['latency_s']:.1f} s{first_s}, {cost_text(ev.get('cost_usd'))}[/]")

    # -- progress ---------------------------------------------------------------------------------
    def _on_progress(self, ev: ProgressEvent, indent: str) -> None:
        if ev.get("kind") == "index":
            self._on_index(ev)
            return
        gid = int(ev.get("group", 0))
        if gid in self._finished_groups:
            return
        if ev.get("finished"):
            self._finished_groups.add(gid)
        if self.live:
            if ev.get("finished"):
                self._state.groups.pop(gid, None)
                self._state.received.pop(gid, None)
                self._refresh_live()
                self.err.print(f"{indent}[magenta]{escape(progress_line(ev))}[/]")
            else:
                self._state.groups[gid] = ev
                self._state.received[gid] = time.monotonic()
                self._refresh_live()
            return
        self._end_stream_text()
        plain = self._plain_groups.setdefault(gid, PlainGroup())
        total = int(ev.get("total") or 0)
        if ev.get("batch") and not plain.started:
            plain.started = True
            label = "sub-RLMs" if ev.get("kind") == "sub_rlms" else "sub-calls"
            self.err.print(f"{indent}batch of {total:,} {label} started")
        if ev.get("finished"):
            self._plain_groups.pop(gid, None)
            self.err.print(indent + escape(progress_line(ev)))
            return
        if ev.get("batch") and total:
            quarter = 4 * (int(ev.get("done", 0)) + int(ev.get("failed", 0))) // total
            if 0 < quarter < 4 and quarter > plain.quarter:
                plain.quarter = quarter
                self.err.print(indent + escape(progress_line(ev)))

    def _on_index(self, ev: ProgressEvent) -> None:
        if self.live:
            self._state.index = None if ev.get("finished") else ev
            self._refresh_live()
            if ev.get("finished"):
                self.err.print(f"[cyan]{escape(progress_line(ev))}[/]")
            return
        now = time.monotonic()
        if ev.get("finished") or now - self._plain_index_at >= PLAIN_INDEX_INTERVAL_S:
            self._plain_index_at = now
            self.err.print(escape(progress_line(ev)))

    # -- the live region ----------------------------------------------------------------------------
    def _refresh_live(self) -> None:
        if not self.live:
            return
        st = self._state
        active = st.stream is not None or bool(st.groups) or st.index is not None
        if active and self._live is None:
            self._live = Live(LiveView(lambda: self._state), console=self.err, transient=True, refresh_per_second=10,
                              redirect_stdout=False, redirect_stderr=False)
            self._live.start()
        elif not active and self._live is not None:
            self._live.stop()
            self._live = None
        elif self._live is not None:
            self._live.refresh()

    def _write_raw(self, text: str) -> None:
        self.file.write(safe_text(text))
        self.file.flush()

    def close(self) -> None:
        """Stop the live region (if any) and end a streamed line; call once the run is over."""
        with self._lock:
            self._state = ViewState()
            if self._live is not None:
                try:
                    self._live.stop()
                except Exception:  # noqa: BLE001, S110 - the terminal may be gone already
                    pass
                self._live = None

    def error(self, message: str) -> None:
        """One error line on stderr."""
        with self._lock:
            self._end_stream_text()
            self.close()
            self.err.print(f"[bold red]error:[/] {escape(message)}")

    def warning(self, message: str) -> None:
        """One warning line on stderr (hidden with --quiet)."""
        if self.quiet:
            return
        with self._lock:
            self.err.print(f"[yellow]warning:[/] {escape(message)}")

    def info(self, message: str) -> None:
        """A progress line on stderr (hidden with --quiet)."""
        if not self.quiet:
            with self._lock:
                self.err.print(escape(message))

    def summary(self, data: Mapping[str, object]) -> None:
        """The run's closing line (:func:`~rlm_cli.output.answer.summary_line`): iterations,
        sub-calls, tokens and cost split between the root model and sub-calls, cache hits,
        retries, time."""
        guess = support_warning(data.get("support"))
        if self.quiet:  # an answer that is a guess is said even then: it is about the answer on stdout
            if guess:
                with self._lock:
                    self.err.print(f"[yellow]warning:[/] {escape(guess)}")
            return
        failed = count(mapping(data.get("usage")), "failed_calls")
        with self._lock:
            self._end_stream_text()
            self.close()
            if failed:
                self.err.print(f"[yellow]warning:[/] {failed} model call{'s' if failed > 1 else ''} failed: the "
                               "code got an error message instead of a reply, and the answer may rest on it (the "
                               "trajectory has each error)")
            self.err.print(f"[dim]{summary_line(data)}[/]")
            if guess:
                self.err.print(f"[yellow]warning:[/] {escape(guess)}")

    def eval_progress(self, total: int) -> EvalProgress:
        """Progress of ``rlm eval`` over ``total`` questions: a context manager yielding
        ``step(line)``, to call once per finished question (see
        :class:`~rlm_cli.output.live.EvalProgress`)."""
        return EvalProgress(self, total)

    def stderr_table(self, title: str, columns: list[str], rows: Sequence[Sequence[object]]) -> None:
        """A table on stderr (``rlm audit``'s checks), hidden with --quiet; cells are plain text."""
        if self.quiet:
            return
        from rich.table import Table

        table = Table(title=title, title_justify="left")
        for c in columns:
            table.add_column(c, overflow="fold")
        for r in rows:
            table.add_row(*[escape(str(x)) for x in r])
        with self._lock:
            self._end_stream_text()
            self.close()
            self.err.print(table)

    def table(self, title: str, columns: list[str], rows: Sequence[Sequence[object]]) -> None:
        """A table on stdout (for stats-like commands on a terminal; see
        :func:`~rlm_cli.output.tables.print_table`)."""
        print_table(title, columns, rows)


#: The handler of each event type the terminal shows, by its name in ``rlm_cli.events.VOCABULARY``
#: (``notice`` too, though it is handled first: a notice shows even when other events do not). A
#: type with none (``header``, ``prompt``, ``typed``, ``summary``) only ends a streamed line.
HANDLERS: dict[str, Callable[[Renderer, Any, str], None]] = {
    "notice": Renderer._on_notice, "stream": Renderer._on_stream, "progress": Renderer._on_progress,
    "corpus": Renderer._on_corpus, "iteration": Renderer._on_iteration, "root_call": Renderer._on_root_call,
    "code": Renderer._on_code, "output": Renderer._on_output, "leads": Renderer._on_leads,
    "phase": Renderer._on_phase, "recursion": Renderer._on_recursion, "mode": Renderer._on_mode,
    "sub_call": Renderer._on_sub_call, "check": Renderer._on_check, "final": Renderer._on_final,
}
#: Types drawn without ending a streamed reply's line (a transient event, or a sub-call line).
_KEEPS_STREAM: frozenset[EventType] = frozenset({"stream", "progress", "sub_call"})
