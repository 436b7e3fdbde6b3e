"""Tables on stdout: ``rlm stats``, ``rlm cache info``, ``rlm host status`` (through
``Renderer.table``) and ``rlm trace list``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console

from rlm_cli.output.style import escape_read
from rlm_cli.output.text import money

if TYPE_CHECKING:
    from rlm_cli.output.trace import TraceInfo


def print_table(title: str, columns: list[str], rows: Sequence[Sequence[object]]) -> None:
    """A table with ``title`` on stdout: one column per name in ``columns``, one row per list of
    ``rows`` (each cell shown as ``str``, as text: a file name such as ``a[/]b.py`` is no markup)."""
    from rich.table import Table

    table = Table(title=title)
    for c in columns:
        table.add_column(c)
    for r in rows:
        table.add_row(*[escape_read(x) for x in r])
    Console().print(table)


def print_trace_list(infos: Sequence[TraceInfo]) -> None:
    """``rlm trace list``: one row per trajectory (``trace.TraceInfo``), newest first, on stdout."""
    import datetime as _dt

    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    costs = ["-" if not i.calls else money(i.cost_usd) for i in infos]
    for col in ("id", "started", "status", "mode", "tokens", "cost", "question"):
        if col == "question":  # the only column that gives way on a narrow terminal
            table.add_column(col, overflow="ellipsis", no_wrap=True, ratio=1)
        else:  # ids are what `trace show` takes, statuses and costs what scripts grep for: never cut
            values = {"status": [i.status for i in infos], "cost": costs}.get(col, [])
            widest = max([len(col), *(len(v) for v in values)])
            table.add_column(col, no_wrap=True, min_width={"id": 22, "started": 11}.get(col, widest))
    this_year = _dt.datetime.now().year
    for i, cost in zip(infos, costs, strict=True):
        when = _dt.datetime.fromtimestamp(i.started)  # like ls -l: the year only when it is not this one
        started = when.strftime("%m-%d %H:%M" if when.year == this_year else "%Y-%m-%d %H:%M")
        table.add_row(*(escape_read(v) for v in (i.run_id, started, i.status, i.mode)), f"{i.tokens:,}",
                      cost, escape_read(i.question[:80]))
    Console(soft_wrap=False).print(table)

