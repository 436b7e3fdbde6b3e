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
            if self.verbose:
                named = ev.get("skipped") or []
                for row in named:
                    self.err.print(f"[dim]skipped {escape(str(row['path']))} ({escape(str(row['reason']))})[/]")
                more = int(ev.get("skipped_count") or 0) - len(named)
                if more > 0:
                    self.err.print(f"[dim]... and {more:,} more skipped (counted in the summary above)[/]")
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
        elif kind == "mode":
            self.err.print(f"[bold]mode[/] {ev['mode']} [dim]({escape(str(ev.get('reason', '')))})[/]")
        elif kind == "sub_call" and self.verbose:
            self.err.print(f"{indent}[dim]sub-call {ev.get('model')}: {ev.get('input_tokens', 0):,} in / "
                           f"{ev.get('output_tokens', 0):,} out tokens, {ev.get('latency_s', 0):.1f} s[/]")
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
        """The run's closing line: iterations, sub-calls, tokens and cost split between the root
        model and sub-calls ("unknown" when a model is not priced), cache hits, retries, time."""
        if self.quiet:
            return
        usage = data.get("usage") or {}
        root, sub = usage.get("root") or {}, usage.get("sub") or {}

        def cost(value: Any) -> str:
            return f"${value:.4f}" if isinstance(value, (int, float)) else "unknown"

        def tokens(group: dict[str, Any]) -> str:
            return f"{group.get('input_tokens', 0):,} in/{group.get('output_tokens', 0):,} out"

        extra = "".join(f", {usage[k]} {label}" for k, label in (("cached_calls", "cached"), ("retries", "retries"))
                        if usage.get(k))
        self.err.print(f"[dim]{data.get('iterations', 0)} iterations, {data.get('sub_calls', 0)} sub-calls; "
                       f"tokens root {tokens(root)}, sub {tokens(sub)}; cost {cost(usage.get('cost_usd'))} "
                       f"(root {cost(root.get('cost_usd'))}, sub {cost(sub.get('cost_usd'))}){extra}; "
                       f"{data.get('elapsed_s', 0):.1f} s[/]")

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
        return kind, f"iteration {ev.get('iteration')}" + (f" (depth {ev['depth']})" if ev.get("depth") else ""), ""
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
            table.add_column(col, no_wrap=True, min_width={"id": 22, "started": 16}.get(col, widest))
    for i in infos:
        started = _dt.datetime.fromtimestamp(i.started).strftime("%Y-%m-%d %H:%M")
        table.add_row(i.run_id, started, i.status, i.mode, f"{i.tokens:,}",
                      _money(i.cost_usd) if i.cost_usd is not None else "?", escape(i.question[:80]))
    Console(soft_wrap=False).print(table)


def print_trace_tree(header: dict[str, Any], root: Any) -> None:
    """``rlm trace show``: the trajectory tree (``trace.Node``) on stdout."""
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
    Console(highlight=False).print(tree)


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
