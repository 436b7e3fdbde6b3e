"""Terminal output: the only module that imports rich. It draws events on stderr and writes the
answer (or the JSON document) to stdout; it decides nothing.

Two styles (see :func:`display_style`): on a terminal, colours and a rich ``Live`` region that
shows the root model's reply as it streams (a spinner and a timer until the first token), and a
progress line per batch of sub-calls, sub-RLMs or corpus indexing; the region is transient, and
what stays on screen is the reply's prose, the code, the outputs and one line per finished group.
Elsewhere (stderr not a terminal, ``NO_COLOR``, ``TERM=dumb``, ``--color never``) plain lines:
the reply is written as it arrives, each iteration ends with its phase, and a batch of sub-calls
prints a line when it starts, at each quarter done and when it ends.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.live import Live
from rich.markup import escape as _markup_escape
from rich.spinner import Spinner
from rich.syntax import Syntax
from rich.text import Text

#: Lines of code and output shown per block on the terminal (the trajectory keeps everything).
SHOW_LINES = 12
#: Lines of a streaming reply shown in the live region.
STREAM_TAIL_LINES = 8
#: Lines of a reply's prose (outside code blocks) kept on screen after its stream.
PROSE_LINES = 24
#: Seconds between two plain indexing lines.
PLAIN_INDEX_INTERVAL_S = 2.0
COLOR_CHOICES = ("auto", "always", "never")
#: Used by renderers made without a ``color`` (error lines printed by ``cli.main``).
default_color = "auto"

#: Terminal control characters (C0 but tab and newline, DEL, C1): model replies, REPL output and
#: corpus text shown on stderr could otherwise set the window title, clear the screen or write the
#: clipboard (ESC sequences, seen in a trial); each is shown as U+FFFD instead.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def safe_text(text: str) -> str:
    """``text`` with its terminal control characters (:data:`_CONTROL`) replaced by U+FFFD
    (a CRLF line end is a newline first: servers and Windows files send them)."""
    return _CONTROL.sub("\ufffd", text.replace("\r\n", "\n"))


def escape(text: str) -> str:
    """``text`` for rich markup: control characters replaced (:func:`safe_text`), ``[`` escaped."""
    return _markup_escape(safe_text(text))


def display_style(color: str = "auto", stream: IO[str] | None = None,
                  environ: Mapping[str, str] | None = None) -> tuple[bool, bool]:
    """``(styled, live)`` for ``--color`` ``auto``, ``always`` or ``never``: ``never`` is plain
    text; ``always`` is colours and the live display even in a pipe; ``auto`` is plain under
    ``NO_COLOR`` (any value, https://no-color.org), ``TERM=dumb`` or when ``stream`` (stderr) is
    not a terminal, and styled and live otherwise.

    Raises:
        ValueError: ``color`` is not one of :data:`COLOR_CHOICES`.
    """
    if color not in COLOR_CHOICES:
        raise ValueError(f"--color must be one of {', '.join(COLOR_CHOICES)}, not {color!r}")
    if color == "never":
        return False, False
    if color == "always":
        return True, True
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False, False
    stream = stream if stream is not None else sys.stderr
    tty = bool(getattr(stream, "isatty", lambda: False)())
    return tty, tty


def _cost(value: Any) -> str:
    return f"${value:.4f}" if isinstance(value, (int, float)) else "cost unknown"


def _helpers_text(helpers: dict[str, Any]) -> str:
    parts = [f"{k} ×{v}" for k, v in sorted(helpers.items(), key=lambda kv: (-int(kv[1]), kv[0])) if v]
    return f" ({', '.join(parts)})" if parts else ""


def progress_line(ev: dict[str, Any]) -> str:
    """One progress event as text: ``sub-calls 23/61 · 8 in flight · 1 failed · 45,210 tokens ·
    $0.0123 · 12.4 s``, or ``indexing 120/5,000 files · 4.1/96.0 MB · 12.3 MB/s``."""
    if ev.get("kind") == "index":
        mb = 1_000_000
        return (f"indexing {ev['files']:,}/{ev['files_total']:,} files · {ev['bytes'] / mb:,.1f}/"
                f"{ev['bytes_total'] / mb:,.1f} MB · {ev['rate_bps'] / mb:,.1f} MB/s · {ev['elapsed_s']:.1f} s")
    label = "sub-RLMs" if ev.get("kind") == "sub_rlms" else "sub-calls"
    finished = int(ev.get("done", 0)) + int(ev.get("failed", 0))
    return (f"{label} {finished}/{ev.get('total', 0)} · {ev.get('in_flight', 0)} in flight · "
            f"{ev.get('failed', 0)} failed · {int(ev.get('tokens') or 0):,} tokens · {_cost(ev.get('cost_usd'))} · "
            f"{float(ev.get('elapsed_s') or 0):.1f} s")


@dataclass
class _Stream:
    depth: int
    model: str
    started: float
    text: str = ""
    first_at: float | None = None
    at_line_start: bool = True


@dataclass
class _Plain:
    """What plain output has printed for a progress group."""

    quarter: int = 0
    started: bool = False


@dataclass
class _State:
    stream: _Stream | None = None
    groups: dict[int, dict[str, Any]] = field(default_factory=dict)
    index: dict[str, Any] | None = None
    received: dict[int, float] = field(default_factory=dict)  # group id -> monotonic time of the event


class _LiveView:
    """The live region, rendered from the renderer's state at every refresh (so timers move)."""

    def __init__(self, renderer: Renderer) -> None:
        self.r = renderer
        self.spinner = Spinner("dots", style="cyan")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        st = self.r._state
        now = time.monotonic()
        parts: list[Any] = []
        stream = st.stream
        if stream is not None:
            indent = "  " * stream.depth
            if stream.first_at is None:
                head = Text(f"{indent}{stream.model}: waiting for the first token · {now - stream.started:.1f} s",
                            style="dim")
            else:
                head = Text(f"{indent}{stream.model} · {now - stream.started:.1f} s · {len(stream.text):,} chars",
                            style="dim")
            parts.append(_SpinLine(self.spinner, head))
            if stream.text:
                tail = stream.text.splitlines()[-STREAM_TAIL_LINES:]
                for line in tail:
                    parts.append(Text(indent + safe_text(line), style="dim", no_wrap=True, overflow="ellipsis"))
        for gid, ev in list(st.groups.items()):
            shown = dict(ev, elapsed_s=float(ev.get("elapsed_s") or 0) + now - st.received.get(gid, now))
            parts.append(_SpinLine(self.spinner, Text("  " * int(ev.get("depth", 0)) + safe_text(progress_line(shown)),
                                                      style="magenta")))
        if st.index is not None:
            parts.append(_SpinLine(self.spinner, Text(progress_line(st.index), style="cyan")))
        yield Group(*parts)


class _SpinLine:
    def __init__(self, spinner: Spinner, text: Text) -> None:
        self.spinner, self.text = spinner, text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        frame = self.spinner.render(time.monotonic())
        line = Text.assemble(frame if isinstance(frame, Text) else Text(str(frame)), " ", self.text)
        line.no_wrap, line.overflow = True, "ellipsis"
        yield line


_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)


class Renderer:
    """Draws trajectory events on stderr as they happen (thread-safe). ``quiet`` shows only
    errors; ``verbose`` adds sub-calls; ``color`` is ``--color`` (see :func:`display_style`)."""

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
        self._state = _State()
        self._live: Live | None = None
        self._plain_groups: dict[int, _Plain] = {}
        self._plain_index_at = 0.0
        self._streamed: set[int] = set()  # depths whose last reply was streamed (plain: code shown)
        self._first_token: dict[int, float] = {}

    # -- events ------------------------------------------------------------------------------------
    def on_event(self, ev: dict[str, Any]) -> None:
        """Render one event (see ``rlm_cli.output.trace`` for the types)."""
        with self._lock:
            try:
                self._on_event(ev)
            except BrokenPipeError:  # stderr went away: nothing more to show
                self.quiet = True

    def _on_event(self, ev: dict[str, Any]) -> None:
        kind = ev.get("type")
        indent = "  " * int(ev.get("depth", 0))
        if kind == "notice":
            if self.quiet:
                return
            self._end_stream_text()
            if ev.get("level") == "warning":
                self.err.print(f"{indent}[yellow]warning:[/] {escape(str(ev['message']))}")
            else:
                self.err.print(f"{indent}[dim]{escape(str(ev['message']))}[/]")
            return
        if self.quiet:
            return
        if kind == "stream":
            self._on_stream(ev)
            return
        if kind == "progress":
            self._on_progress(ev)
            return
        if kind not in ("sub_call",):
            self._end_stream_text()
        if kind == "corpus":
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
        elif kind == "iteration":
            title = f"iteration {ev['iteration']}" + (f" (depth {ev['depth']})" if ev["depth"] else "")
            if self.styled:
                self.err.rule(f"{indent}{title}", style="cyan", align="left")
            else:
                self.err.print(f"{indent}── {title} ──")
        elif kind == "root_call":
            self._on_root_call(ev, indent)
        elif kind == "code":
            if self.styled:
                self.err.print(Syntax(safe_text(_clip(ev["code"], SHOW_LINES)), "python", theme="ansi_dark",
                                      line_numbers=False, word_wrap=True))
            elif int(ev.get("depth", 0)) not in self._streamed:  # plain: the stream showed it already
                self.err.print(escape(_indent(_clip(ev["code"], SHOW_LINES), indent + "  ")))
        elif kind == "output":
            out = ev.get("output") or "(no output)"
            sub = f" · {ev['sub_calls']} sub-calls" if ev.get("sub_calls") else ""
            self.err.print(f"{indent}[dim]→ {ev['output_chars']:,} chars, {ev['elapsed_s']:.2f} s{sub}[/]")
            self.err.print(escape(_indent(_clip(out, SHOW_LINES), indent + "  ")), style="green")
        elif kind == "leads":
            if ev.get("output"):
                self.err.print(f"{indent}[bold]leads[/] [dim](leads(question), {ev.get('elapsed_s', 0) or 0:.2f} s)[/]")
                self.err.print(escape(_indent(_clip(str(ev["output"]), SHOW_LINES), indent + "  ")), style="green")
        elif kind == "phase":
            self.err.print(f"{indent}[bold cyan]iteration {ev['iteration']}: {ev['phase']}[/]"
                           f"[dim]{escape(_helpers_text(ev.get('helpers') or {}))}[/]")
        elif kind == "recursion":
            self.err.print(f"{indent}[magenta]rlm_query → depth {ev['depth']} ({ev['mode']})[/]")
        elif kind == "mode":
            self.err.print(f"[bold]mode[/] {ev['mode']} [dim]({escape(str(ev.get('reason', '')))})[/]")
        elif kind == "sub_call" and self.verbose:
            self.err.print(f"{indent}[dim]sub-call {ev.get('model')}: {ev.get('input_tokens', 0):,} in / "
                           f"{ev.get('output_tokens', 0):,} out tokens, {ev.get('latency_s', 0):.1f} s, "
                           f"{_cost(ev.get('cost_usd'))}[/]")
        elif kind == "final":
            self.err.print(f"{indent}[bold green]{ev['status']}[/] after {ev['iterations']} iteration(s)")

    # -- the streaming reply -----------------------------------------------------------------------
    def _on_stream(self, ev: dict[str, Any]) -> None:
        depth = int(ev.get("depth", 0))
        state = ev.get("state")
        if state == "start":
            self._end_stream_text()
            self._state.stream = _Stream(depth, str(ev.get("model", "")), time.monotonic())
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

    def _write_stream_text(self, st: _Stream, text: str) -> None:
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

    def _on_root_call(self, ev: dict[str, Any], indent: str) -> None:
        depth = int(ev.get("depth", 0))
        st = self._state.stream
        if st is not None and st.depth == depth:
            self._state.stream = None
            self._refresh_live()
        streamed = depth in self._streamed
        response = str(ev.get("response", ""))
        if self.live and streamed:  # the live region is gone: keep the prose, the code follows
            prose = _FENCE.sub("", response).strip()
            if prose:
                self.err.print(escape(_indent(_clip(prose, PROSE_LINES), indent)), style="dim")
        elif not streamed and self.verbose:
            self.err.print(escape(_clip(response, 40)))
        first = self._first_token.pop(depth, None)
        first_s = f", first token {first:.1f} s" if first is not None and streamed else ""
        self.err.print(f"{indent}[dim]root model: {ev['input_tokens']:,} in / {ev['output_tokens']:,} out "
                       f"tokens, {ev['latency_s']:.1f} s{first_s}, {_cost(ev.get('cost_usd'))}[/]")

    # -- progress ---------------------------------------------------------------------------------
    def _on_progress(self, ev: dict[str, Any]) -> None:
        indent = "  " * int(ev.get("depth", 0))
        if ev.get("kind") == "index":
            self._on_index(ev)
            return
        gid = int(ev.get("group", 0))
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
        plain = self._plain_groups.setdefault(gid, _Plain())
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

    def _on_index(self, ev: dict[str, Any]) -> None:
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
            self._live = Live(_LiveView(self), console=self.err, transient=True, refresh_per_second=10,
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
            self._state = _State()
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

    def summary(self, data: dict[str, Any]) -> None:
        """The run's closing line: iterations, sub-calls, tokens and cost split between the root
        model and sub-calls ("unknown" when a model is not priced), cache hits, retries, time."""
        if self.quiet:
            return
        usage = data.get("usage") or {}
        root, sub = usage.get("root") or {}, usage.get("sub") or {}

        def cost(value: Any, group: dict[str, Any] | None = None) -> str:
            if group is not None and not group.get("calls"):
                return "no calls"
            return f"${value:.4f}" if isinstance(value, (int, float)) else "unknown"

        def tokens(group: dict[str, Any]) -> str:
            return f"{group.get('input_tokens', 0):,} in/{group.get('output_tokens', 0):,} out"

        extra = "".join(f", {usage[k]} {label}" for k, label in (("cached_calls", "cached"), ("retries", "retries"))
                        if usage.get(k))
        with self._lock:
            self._end_stream_text()
            self.close()
            self.err.print(f"[dim]{data.get('iterations', 0)} iterations, {data.get('sub_calls', 0)} sub-calls; "
                           f"tokens root {tokens(root)}, sub {tokens(sub)}; cost {cost(usage.get('cost_usd'))} "
                           f"(root {cost(root.get('cost_usd'), root)}, sub {cost(sub.get('cost_usd'), sub)}){extra}; "
                           f"{data.get('elapsed_s', 0):.1f} s[/]")

    def eval_progress(self, total: int) -> _EvalProgress:
        """Progress of ``rlm eval`` over ``total`` questions (see :func:`eval_progress`)."""
        return eval_progress(self, total)

    def table(self, title: str, columns: list[str], rows: list[list[Any]]) -> None:
        """A table on stdout (for stats-like commands on a terminal)."""
        from rich.table import Table

        table = Table(title=title)
        for c in columns:
            table.add_column(c)
        for r in rows:
            table.add_row(*[str(x) for x in r])
        Console().print(table)


def write_answer(text: str) -> None:
    """The answer alone on stdout (plain text, newline-terminated); on a terminal its control
    characters are neutralised (:func:`for_stdout`)."""
    text = for_stdout(text)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


def for_stdout(text: str, stream: IO[str] | None = None) -> str:
    """``text`` as written to stdout (or ``stream``): as it is into a pipe or a file, with its
    terminal control characters replaced (:func:`safe_text`: ESC sequences such as OSC 52, which
    writes the clipboard, or a clear-screen) when it is a terminal. The answer, ``--cite``'s
    source paths and a ``--json`` document all come from the model or the corpus."""
    out = stream or sys.stdout
    try:
        tty = bool(out.isatty())
    except (AttributeError, ValueError, OSError):
        tty = False
    return safe_text(text) if tty else text


def json_text(doc: dict[str, Any]) -> str:
    """A JSON document as printed (indented, UTF-8 characters kept, newline-terminated)."""
    return json.dumps(doc, ensure_ascii=False, indent=2, default=str) + "\n"


def write_json(doc: dict[str, Any]) -> None:
    """One JSON document on stdout."""
    write_text(json_text(doc))


def write_text(text: str) -> None:
    """Text on stdout as is (the answer, a document), all of it or an error; on a terminal with
    its control characters neutralised (:func:`for_stdout`).

    Written to the binary buffer in a loop: with ``PYTHONUNBUFFERED=1`` (common in containers)
    that buffer is the raw file, whose ``write`` may take only part of a large text (a pipe
    took 69,632 bytes of a 5 MB answer), and ``TextIOWrapper`` drops the rest silently; a reader
    that left mid-way must give ``BrokenPipeError`` (exit 141), not exit 0.

    Raises:
        OSError: stdout cannot take it (``BrokenPipeError`` when its reader went away).
    """
    out = sys.stdout
    text = for_stdout(text, out)
    out.flush()
    buf = getattr(out, "buffer", None)
    if buf is None:  # a text-only stream (a test's StringIO)
        out.write(text)
        out.flush()
        return
    view = memoryview(text.encode(out.encoding or "utf-8", out.errors or "strict"))
    while view:
        n = buf.write(view)
        if n is None:  # a non-blocking stdout that is full: wait for its reader
            time.sleep(0.01)
        view = view[n or 0:]
    buf.flush()


def _clip(text: str, lines: int) -> str:
    rows = text.rstrip("\n").splitlines()
    if len(rows) <= lines:
        return "\n".join(r[:300] for r in rows)
    return "\n".join(r[:300] for r in rows[:lines]) + f"\n… {len(rows) - lines} more lines"


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines())


# -- trajectories (rlm trace ...) ------------------------------------------------------------------

#: Characters of a long text (response, output, answer) shown in a trajectory tree node.
TREE_TEXT_CHARS = 600


def _money(cost: Any) -> str:
    return f"${cost:.4f}" if isinstance(cost, (int, float)) else "cost unknown"


def node_text(ev: dict[str, Any], full: bool = False) -> tuple[str, str, str]:
    """``(kind, title, body)`` describing one trajectory event for a tree (terminal or HTML);
    ``body`` is cut to ``TREE_TEXT_CHARS`` unless ``full``."""
    kind = str(ev.get("type"))

    def cut(text: Any) -> str:
        text = str(text or "")
        return text if full or len(text) <= TREE_TEXT_CHARS else text[:TREE_TEXT_CHARS] + f" … ({len(text):,} chars)"

    tokens = f"{ev.get('input_tokens', 0) or 0:,} in / {ev.get('output_tokens', 0) or 0:,} out tokens"
    if kind == "iteration":
        phase = f" · {ev['phase']}{_helpers_text(ev.get('helpers') or {})}" if ev.get("phase") else ""
        return kind, f"iteration {ev.get('iteration')}" + (f" (depth {ev['depth']})" if ev.get("depth") else "") + phase, ""
    if kind == "root_call":
        hist = ev.get("history") or {}
        shrunk = f", history: {hist.get('compacted', 0)} compacted, {hist.get('omitted', 0)} omitted" if (
            hist.get("compacted") or hist.get("omitted")) else ""
        return kind, (f"root model {ev.get('model')}: {tokens}, {_money(ev.get('cost_usd'))}, "
                      f"{ev.get('latency_s', 0) or 0:.2f} s{shrunk}"), cut(ev.get("response"))
    if kind == "code":
        return kind, f"code block {ev.get('block', 1)}", str(ev.get("code", "")) if full else cut(ev.get("code"))
    if kind == "output":
        extra = f", {ev['sub_calls']} sub-calls" if ev.get("sub_calls") else ""
        return kind, f"output: {ev.get('output_chars', 0):,} chars, {ev.get('elapsed_s', 0) or 0:.2f} s{extra}", cut(
            ev.get("output") or "(no output)")
    if kind == "leads":
        text = str(ev.get("output") or "(none)")
        return kind, f"leads: {len(text):,} chars, {ev.get('elapsed_s', 0) or 0:.2f} s", text if full else cut(text)
    if kind == "sub_call":
        return kind, f"sub-call {ev.get('model')}: {tokens}, {_money(ev.get('cost_usd'))}", (
            f"prompt: {cut(ev.get('prompt_head'))}\n→ {cut(ev.get('response'))}")
    if kind == "recursion":
        return kind, f"rlm_query → depth {ev.get('depth')} ({ev.get('mode')})", cut(ev.get("prompt_head"))
    if kind == "final":
        return kind, f"{ev.get('status')} after {ev.get('iterations')} iteration(s)", cut(ev.get("answer"))
    if kind == "notice":
        return kind, f"{ev.get('level', 'note')}: {ev.get('message')}", ""
    if kind == "corpus":
        return kind, f"corpus: {ev.get('summary')}", ""
    if kind == "mode":
        return kind, f"mode {ev.get('mode')}", str(ev.get("reason", ""))
    if kind == "summary":
        err = f" ({ev['error']})" if ev.get("error") else ""
        return kind, (f"{ev.get('status')}{err}: {ev.get('total_tokens', 0) or 0:,} tokens, "
                      f"{_money(ev.get('total_cost_usd'))}, {ev.get('elapsed_s') or 0:.1f} s"), cut(ev.get("answer"))
    return kind, kind, ""


def print_trace_list(infos: list[Any]) -> None:
    """``rlm trace list``: one row per trajectory (``trace.TraceInfo``), newest first, on stdout."""
    import datetime as _dt

    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in ("id", "started", "status", "mode", "tokens", "cost", "question"):
        if col == "question":  # the only column that gives way on a narrow terminal
            table.add_column(col, overflow="ellipsis", no_wrap=True, ratio=1)
        else:  # ids are what `trace show` takes, statuses what scripts grep for: never cut
            widest = max([len(col), *(len(i.status) for i in infos)]) if col == "status" else len(col)
            table.add_column(col, no_wrap=True, min_width={"id": 22, "started": 11}.get(col, widest))
    this_year = _dt.datetime.now().year
    for i in infos:
        when = _dt.datetime.fromtimestamp(i.started)  # like ls -l: the year only when it is not this one
        started = when.strftime("%m-%d %H:%M" if when.year == this_year else "%Y-%m-%d %H:%M")
        table.add_row(i.run_id, started, i.status, i.mode, f"{i.tokens:,}",
                      _money(i.cost_usd).removeprefix("cost "), escape(i.question[:80]))
    Console(soft_wrap=False).print(table)


def print_trace_tree(header: dict[str, Any], root: Any, file: IO[str] | None = None) -> None:
    """``rlm trace show``: the trajectory tree (``trace.Node``) on stdout (or ``file``: ``rlm
    chat``'s ``/trace`` writes it on stderr)."""
    from rich.tree import Tree

    title = f"[bold]{escape(str(header.get('run_id')))}[/] {escape(str(header.get('question', '')))}"
    tree = Tree(title)

    def add(parent: Tree, node: Any) -> None:
        kind, head, body = node_text(node.event)
        label = f"[{_STYLE.get(kind, 'white')}]{escape(head)}[/]"
        if body:
            label += "\n" + escape(_clip(body, SHOW_LINES))
        branch = parent.add(label)
        for child in node.children:
            add(branch, child)

    for child in root.children:
        add(tree, child)
    Console(highlight=False, file=file).print(tree)


_STYLE = {"iteration": "cyan", "root_call": "blue", "code": "yellow", "output": "green", "sub_call": "magenta",
          "recursion": "bold magenta", "final": "bold green", "notice": "dim", "summary": "bold"}


def trace_html(header: dict[str, Any], root: Any) -> str:
    """``rlm trace export --html``: one self-contained HTML page (inline CSS, no scripts, no
    external resources) with the configuration and the whole tree, texts in full."""
    import html

    def esc(value: Any) -> str:
        return html.escape(str(value), quote=True)

    def render(node: Any) -> str:
        kind, head, body = node_text(node.event, full=True)
        inner = f"<pre>{esc(body)}</pre>" if body else ""
        kids = "".join(render(c) for c in node.children)
        kids = f"<ul>{kids}</ul>" if kids else ""
        is_open = " open" if kind in ("iteration", "recursion", "final", "summary") else ""
        return f'<li class="{esc(kind)}"><details{is_open}><summary>{esc(head)}</summary>{inner}{kids}</details></li>'

    config = header.get("config") or {}
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in sorted(config.items()))
    body = "".join(render(c) for c in root.children)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>rlm trajectory {esc(header.get('run_id'))}</title>
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; margin: 2em; color: #222; }}
pre {{ background: #f6f6f6; padding: .5em; white-space: pre-wrap; word-break: break-word; margin: .3em 0; }}
ul {{ list-style: none; padding-left: 1.2em; border-left: 1px solid #ddd; }}
summary {{ cursor: pointer; }}
li.iteration > details > summary {{ color: #0a6; font-weight: bold; }}
li.root_call > details > summary {{ color: #248; }}
li.code > details > summary {{ color: #a60; }}
li.sub_call > details > summary, li.recursion > details > summary {{ color: #838; }}
li.final > details > summary, li.summary > details > summary {{ font-weight: bold; }}
table {{ border-collapse: collapse; font-size: 12px; }} th, td {{ text-align: left; padding: 1px 8px; }}
</style></head><body>
<h1>rlm trajectory {esc(header.get('run_id'))}</h1>
<p><b>Question:</b> {esc(header.get('question', ''))}</p>
<p><b>Corpus:</b> {esc(', '.join(map(str, header.get('paths') or [])))}</p>
<details><summary>Configuration (secrets removed)</summary><table>{rows}</table></details>
<ul>{body}</ul>
</body></html>
"""


class _EvalProgress:
    """Progress of ``rlm eval``: a rich progress bar on a terminal, else one line per question."""

    def __init__(self, renderer: Renderer, total: int) -> None:
        self.r = renderer
        self.total = total
        self.done = 0
        self.bar: Any = None

    def __enter__(self) -> Callable[[str], None]:
        if not self.r.quiet and self.r.err.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("eval"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                console=self.r.err, transient=True)
            self.bar.start()
            self.task = self.bar.add_task("eval", total=self.total)
        return self.step

    def step(self, line: str) -> None:
        self.done += 1
        if not self.r.quiet:
            self.r.err.print(f"[dim][{self.done}/{self.total}][/] {escape(line)}")
        if self.bar is not None:
            self.bar.advance(self.task)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def eval_progress(renderer: Renderer, total: int) -> _EvalProgress:
    """A context manager yielding ``step(line)``: call it once per finished question."""
    return _EvalProgress(renderer, total)
