"""Trajectory viewers: ``rlm trace show`` (a tree on the terminal), ``rlm trace export --html``
(one self-contained page) and ``rlm chat``'s ``/trace``. The events come from ``trace.py``
(read and arranged as a tree there); this module only draws them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO

from rich.console import Console

from rlm_cli.events import EventDict, EventType, is_type
from rlm_cli.output.answer import count, mapping, number
from rlm_cli.output.style import SHOW_LINES, escape_read
from rlm_cli.output.text import clip, cost_text, encodable, helpers_text, money, plural
from rlm_cli.output.trace import Node, completed_calls

#: Characters of a long text (response, output, answer) shown in a trajectory tree node.
TREE_TEXT_CHARS = 600
#: The colour of each event type's node in the terminal tree.
STYLE = {"iteration": "cyan", "root_call": "blue", "code": "yellow", "output": "green", "sub_call": "magenta",
         "recursion": "bold magenta", "final": "bold green", "notice": "dim", "summary": "bold"}
#: The event types whose node of the HTML page starts open.
OPEN_IN_HTML: frozenset[EventType] = frozenset({"iteration", "recursion", "final", "summary"})


def node_text(ev: EventDict, full: bool = False) -> tuple[str, str, str]:
    """``(kind, title, body)`` describing one trajectory event for a tree (terminal or HTML);
    ``body`` is cut to ``TREE_TEXT_CHARS`` unless ``full``. The event is a line of a file anyone
    may edit: each number is read as one (:func:`~rlm_cli.output.answer.count`, ``number``: 0 when
    it is not), each section as a mapping, whatever the event's type says it holds."""
    kind = str(ev.get("type"))

    def cut(text: object) -> str:
        text = str(text or "")
        return text if full or len(text) <= TREE_TEXT_CHARS else text[:TREE_TEXT_CHARS] + f" … ({len(text):,} chars)"

    tokens = f"{count(ev, 'input_tokens'):,} in / {count(ev, 'output_tokens'):,} out tokens"
    if is_type(ev, "iteration"):
        phase = f" · {ev['phase']}{helpers_text(mapping(ev.get('helpers')))}" if ev.get("phase") else ""
        return kind, f"iteration {ev.get('iteration')}" + (f" (depth {ev['depth']})" if ev.get("depth") else "") + phase, ""
    if is_type(ev, "root_call"):
        hist = mapping(ev.get("history"))
        shrunk = f", history: {hist.get('compacted', 0)} compacted, {hist.get('omitted', 0)} omitted" if (
            hist.get("compacted") or hist.get("omitted")) else ""
        return kind, (f"root model {ev.get('model')}: {tokens}, {cost_text(ev.get('cost_usd'))}, "
                      f"{number(ev, 'latency_s'):.2f} s{shrunk}"), cut(ev.get("response"))
    if is_type(ev, "code"):
        return kind, f"code block {ev.get('block', 1)}", str(ev.get("code", "")) if full else cut(ev.get("code"))
    if is_type(ev, "output"):
        extra = f", {plural(count(ev, 'sub_calls'), 'sub-call')}" if count(ev, "sub_calls") else ""
        return kind, f"output: {count(ev, 'output_chars'):,} chars, {number(ev, 'elapsed_s'):.2f} s{extra}", cut(
            ev.get("output") or "(no output)")
    if is_type(ev, "leads"):
        text = str(ev.get("output") or "(none)")
        return kind, f"leads: {len(text):,} chars, {number(ev, 'elapsed_s'):.2f} s", text if full else cut(text)
    if is_type(ev, "sub_call"):
        return kind, f"sub-call {ev.get('model')}: {tokens}, {cost_text(ev.get('cost_usd'))}", (
            f"prompt: {cut(ev.get('prompt_head'))}\n→ {cut(ev.get('response'))}")
    if is_type(ev, "recursion"):
        return kind, f"rlm_query → depth {ev.get('depth')} ({ev.get('mode')})", cut(ev.get("prompt_head"))
    if is_type(ev, "final"):
        n = ev.get("iterations")
        return kind, f"{ev.get('status')} after {n} iteration{'' if n == 1 else 's'}", cut(ev.get("answer"))
    if is_type(ev, "check"):
        limit = " (its limit reached)" if ev.get("limit_reached") else ""
        return kind, f"check {ev.get('check')}: {str(ev.get('verdict', '')).replace('_', ' ')}{limit}", cut(
            ev.get("note") or ev.get("rewritten") or "")
    if is_type(ev, "prompt"):
        return kind, (f"prompt: system {len(str(ev.get('system') or '')):,} chars, "
                      f"first message {len(str(ev.get('first') or '')):,} chars"), cut(ev.get("first"))
    if is_type(ev, "notice"):
        return kind, f"{ev.get('level', 'note')}: {ev.get('message')}", ""
    if is_type(ev, "corpus"):
        return kind, f"corpus: {ev.get('summary')}", ""
    if is_type(ev, "mode"):
        policy = f", policy {ev['policy']}" if ev.get("policy") else ""
        reason = f"{ev.get('reason', '')}" + (f"\n{ev['policy_reason']}" if ev.get("policy_reason") else "")
        return kind, f"mode {ev.get('mode')}{policy}", reason
    if is_type(ev, "summary"):
        err = f" ({ev['error']})" if ev.get("error") else ""
        cost = money(ev.get("total_cost_usd"), completed_calls([ev]))  # a summary without usage: no call began
        return kind, (f"{ev.get('status')}{err}: {count(ev, 'total_tokens'):,} tokens, cost {cost}, "
                      f"{number(ev, 'elapsed_s'):.1f} s"), cut(ev.get("answer"))
    return kind, kind, ""



def print_trace_tree(header: Mapping[str, object], root: Node, file: IO[str] | None = None) -> None:
    """``rlm trace show``: the trajectory tree (``trace.Node``) on stdout (or ``file``: ``rlm
    chat``'s ``/trace`` writes it on stderr)."""
    from rich.tree import Tree

    title = f"[bold]{escape_read(header.get('run_id'))}[/] {escape_read(header.get('question', ''))}"
    tree = Tree(title)

    def add(parent: Tree, node: Node) -> None:
        kind, head, body = node_text(node.event or {})  # only the root has no event
        label = f"[{STYLE.get(kind, 'white')}]{escape_read(head)}[/]"
        if body:
            label += "\n" + escape_read(clip(body, SHOW_LINES))
        branch = parent.add(label)
        for child in node.children:
            add(branch, child)

    for child in root.children:
        add(tree, child)
    Console(highlight=False, file=file).print(tree)



def trace_html(header: Mapping[str, object], root: Node) -> str:
    """``rlm trace export --html``: one self-contained HTML page (inline CSS, no scripts, no
    external resources) with the configuration and the whole tree, texts in full."""
    import html

    def esc(value: object) -> str:  # a lone surrogate (a JSON escape in the file) as U+FFFD
        return html.escape(encodable(str(value)), quote=True)

    def render(node: Node) -> str:
        kind, head, body = node_text(node.event or {}, full=True)  # only the root has no event
        inner = f"<pre>{esc(body)}</pre>" if body else ""
        kids = "".join(render(c) for c in node.children)
        kids = f"<ul>{kids}</ul>" if kids else ""
        is_open = " open" if kind in OPEN_IN_HTML else ""
        return f'<li class="{esc(kind)}"><details{is_open}><summary>{esc(head)}</summary>{inner}{kids}</details></li>'

    config = mapping(header.get("config"))  # a file read back may hold anything
    paths = header.get("paths")
    corpus = ", ".join(map(str, paths)) if isinstance(paths, list) else ""
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
<p><b>Corpus:</b> {esc(corpus)}</p>
<details><summary>Configuration (secrets removed)</summary><table>{rows}</table></details>
<ul>{body}</ul>
</body></html>
"""
