"""Progress drawing on a terminal: the live region (the streaming reply, batches of sub-calls
or sub-RLMs in flight, corpus indexing), redrawn from the renderer's state at every refresh so
that timers move, and ``rlm eval``'s progress bar. The renderer (``render.Renderer``) owns the
state and decides what is shown; this module only draws it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.spinner import Spinner
from rich.text import Text

from rlm_cli.events import ProgressEvent, depth_of
from rlm_cli.output.style import escape
from rlm_cli.output.text import progress_line, safe_text

#: Lines of a streaming reply shown in the live region.
STREAM_TAIL_LINES = 8


@dataclass
class StreamState:
    """The root model's reply streaming at ``depth``: since ``started`` (monotonic seconds), its
    text so far, when its first piece came (``None``: not yet) and whether plain output stands
    at the start of a line."""

    depth: int
    model: str
    started: float
    text: str = ""
    first_at: float | None = None
    at_line_start: bool = True


@dataclass
class PlainGroup:
    """What plain output has printed for a progress group."""

    quarter: int = 0
    started: bool = False


@dataclass
class ViewState:
    """What the live region shows: the stream, the progress groups in flight (group id -> last
    event), indexing progress."""

    stream: StreamState | None = None
    groups: dict[int, ProgressEvent] = field(default_factory=dict)
    index: ProgressEvent | None = None
    received: dict[int, float] = field(default_factory=dict)  # group id -> monotonic time of the event


class LiveView:
    """The live region, rendered from ``state()`` (the renderer's current state) at every refresh
    (so timers move)."""

    def __init__(self, state: Callable[[], ViewState]) -> None:
        self.state = state
        self.spinner = Spinner("dots", style="cyan")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        st = self.state()
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
            parts.append(SpinLine(self.spinner, head))
            if stream.text:
                tail = stream.text.splitlines()[-STREAM_TAIL_LINES:]
                for line in tail:
                    parts.append(Text(indent + safe_text(line), style="dim", no_wrap=True, overflow="ellipsis"))
        for gid, ev in list(st.groups.items()):
            shown = ev.copy()
            shown["elapsed_s"] = (ev.get("elapsed_s") or 0.0) + now - st.received.get(gid, now)
            parts.append(SpinLine(self.spinner, Text("  " * depth_of(ev) + safe_text(progress_line(shown)),
                                                     style="magenta")))
        if st.index is not None:
            parts.append(SpinLine(self.spinner, Text(progress_line(st.index), style="cyan")))
        yield Group(*parts)


class SpinLine:
    """One line of the live region: the spinner's current frame, then ``text`` (cut with an
    ellipsis, never wrapped)."""

    def __init__(self, spinner: Spinner, text: Text) -> None:
        self.spinner, self.text = spinner, text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        frame = self.spinner.render(time.monotonic())
        line = Text.assemble(frame if isinstance(frame, Text) else Text(str(frame)), " ", self.text)
        line.no_wrap, line.overflow = True, "ellipsis"
        yield line


class Screen(Protocol):
    """What :class:`EvalProgress` reads of its renderer (read at each step: ``quiet`` turns true
    when stderr goes away)."""

    quiet: bool
    err: Console


class EvalProgress:
    """Progress of ``rlm eval``: a rich progress bar on a terminal, else one line per question.
    A context manager yielding ``step(line)``: call it once per finished question."""

    def __init__(self, screen: Screen, total: int) -> None:
        self.r = screen
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
        """One question finished: ``[done/total] line`` (unless quiet), and the bar advanced."""
        self.done += 1
        if not self.r.quiet:
            self.r.err.print(f"[dim][{self.done}/{self.total}][/] {escape(line)}")
        if self.bar is not None:
            self.bar.advance(self.task)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
