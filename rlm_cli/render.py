"""Terminal output: the only module that imports rich. It draws events on stderr and writes the
answer (or the JSON document) to stdout; it decides nothing."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.syntax import Syntax

#: Lines of code and output shown per block on the terminal (the trajectory keeps everything).
SHOW_LINES = 12


class Renderer:
    """Draws trajectory events on stderr as they happen. ``quiet`` shows only warnings/errors."""

    def __init__(self, *, quiet: bool = False, verbose: bool = False) -> None:
        self.quiet = quiet
        self.verbose = verbose
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)

    def on_event(self, ev: dict[str, Any]) -> None:
        """Render one event (see ``rlm_cli.trace`` for the types)."""
        kind = ev.get("type")
        indent = "  " * int(ev.get("depth", 0))
        if kind == "notice":
            if ev.get("level") == "warning":
                self.err.print(f"{indent}[yellow]warning:[/] {escape(str(ev['message']))}")
            elif not self.quiet:
                self.err.print(f"{indent}[dim]{escape(str(ev['message']))}[/]")
            return
        if self.quiet:
            return
        if kind == "corpus":
            self.err.print(f"[bold]corpus[/] {escape(ev['summary'])} [dim]({ev['load_s']:.2f} s, "
                           f"sandbox {ev['sandbox']})[/]")
        elif kind == "iteration":
            self.err.rule(f"{indent}iteration {ev['iteration']}" + (f" (depth {ev['depth']})" if ev["depth"] else ""),
                          style="cyan", align="left")
        elif kind == "root_call":
            cost = ev.get("cost_usd")
            cost_s = f", ${cost:.4f}" if isinstance(cost, (int, float)) else ""
            self.err.print(f"{indent}[dim]root model: {ev['input_tokens']:,} in / {ev['output_tokens']:,} out "
                           f"tokens, {ev['latency_s']:.1f} s{cost_s}[/]")
            if self.verbose:
                self.err.print(escape(_clip(ev.get("response", ""), 40)))
        elif kind == "code":
            self.err.print(Syntax(_clip(ev["code"], SHOW_LINES), "python", theme="ansi_dark",
                                  line_numbers=False, word_wrap=True))
        elif kind == "output":
            out = ev.get("output") or "(no output)"
            sub = f" · {ev['sub_calls']} sub-calls" if ev.get("sub_calls") else ""
            self.err.print(f"{indent}[dim]→ {ev['output_chars']:,} chars, {ev['elapsed_s']:.2f} s{sub}[/]")
            self.err.print(escape(_indent(_clip(out, SHOW_LINES), indent + "  ")), style="green")
        elif kind == "recursion":
            self.err.print(f"{indent}[magenta]rlm_query → depth {ev['depth']} ({ev['mode']})[/]")
        elif kind == "final":
            self.err.print(f"{indent}[bold green]{ev['status']}[/] after {ev['iterations']} iteration(s)")

    def error(self, message: str) -> None:
        """One error line on stderr."""
        self.err.print(f"[bold red]error:[/] {escape(message)}")

    def warning(self, message: str) -> None:
        """One warning line on stderr."""
        self.err.print(f"[yellow]warning:[/] {escape(message)}")

    def info(self, message: str) -> None:
        """A progress line on stderr (hidden with --quiet)."""
        if not self.quiet:
            self.err.print(escape(message))

    def summary(self, data: dict[str, Any]) -> None:
        """The run's closing line: iterations, sub-calls, tokens, cost, time."""
        if self.quiet:
            return
        usage = data.get("usage", {})
        cost = usage.get("cost_usd")
        cost_s = f"${cost:.4f}" if isinstance(cost, (int, float)) else "cost unknown"
        self.err.print(f"[dim]{data.get('iterations', 0)} iterations, {data.get('sub_calls', 0)} sub-calls, "
                       f"{usage.get('total_tokens', 0):,} tokens, {cost_s}, {data.get('elapsed_s', 0):.1f} s[/]")

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
    """The answer alone on stdout (plain text, newline-terminated)."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


def write_json(doc: dict[str, Any]) -> None:
    """One JSON document on stdout."""
    sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=2, default=str) + "\n")
    sys.stdout.flush()


def _clip(text: str, lines: int) -> str:
    rows = text.rstrip("\n").splitlines()
    if len(rows) <= lines:
        return "\n".join(r[:300] for r in rows)
    return "\n".join(r[:300] for r in rows[:lines]) + f"\n… {len(rows) - lines} more lines"


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines())
