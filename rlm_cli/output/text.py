"""Plain text shared by the terminal view, the trajectory viewers and the answer writers: the
control characters that must not reach a terminal, costs, helper counts, progress lines, and
clipping. Standard library only (no rich): the core may format with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from rlm_cli.events import ProgressEvent, whole

#: Terminal control characters (C0 but tab and newline, DEL, C1): model replies, REPL output and
#: corpus text shown on stderr could otherwise set the window title, clear the screen or write the
#: clipboard (ESC sequences, seen in a trial); each is shown as U+FFFD instead.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


#: A UTF-16 surrogate code point: a Python str can hold one alone (a JSON ``"\ud800"`` escape, a
#: file decoded with ``surrogateescape``), UTF-8 cannot encode it.
SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(text: str) -> str:
    """``text`` with each lone surrogate (:data:`SURROGATE`) replaced by U+FFFD, so it encodes as
    UTF-8: what plain text written to stdout or a file does with one (JSON keeps it as an escape:
    ``output.answer.json_text``)."""
    return text if text.isascii() else SURROGATE.sub("\ufffd", text)


def safe_text(text: str) -> str:
    """``text`` with its terminal control characters (:data:`CONTROL`) replaced by U+FFFD
    (a CRLF line end is a newline first: servers and Windows files send them)."""
    return CONTROL.sub("\ufffd", text.replace("\r\n", "\n"))


def cost_text(value: object) -> str:
    """``$0.0123`` for a number of USD, ``cost unknown`` for anything else (an unpriced model)."""
    return usd(value) if isinstance(value, (int, float)) else "cost unknown"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 file``, ``2 files``, ``1,024 chunks``: ``n`` (with thousands separators) and ``word``,
    or its plural (``many``, else ``word`` + ``s``) when ``n`` is not 1."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"


def money(value: object, calls: int | None = None) -> str:
    """The one rule for a cost of several calls: ``none`` when no call completed (``calls`` is 0:
    nothing was spent, nor priced), ``unknown`` when a model that answered is not priced
    (``value`` is not a number), else USD (:func:`usd`; ``$0.0000`` only for calls that cost
    nothing, such as answers from the response cache)."""
    if calls == 0:
        return "none"
    return usd(value) if isinstance(value, (int, float)) else "unknown"


def completed_calls(usage: Mapping[str, object]) -> int:
    """Model calls that completed, from a run's ``usage`` (``{"root": G, "sub": G}``, as in
    ``rlm ask --json``): each group's ``calls`` less its ``abandoned_calls`` (sent, never
    answered before the run stopped; they spent nothing rlm can count). ``usage`` may also be
    one group alone."""
    groups = [usage.get(g) for g in ("root", "sub")] if ("root" in usage or "sub" in usage) else [usage]

    return sum(max(0, whole(g.get("calls")) - whole(g.get("abandoned_calls")))  # a file read back may hold anything
               for g in groups if isinstance(g, Mapping))


def usd(value: float) -> str:
    """``$0.0123``; a cost under $0.0001 with two significant digits (``$0.000032``), so a
    cheap call never reads as free; ``$0.0000`` only for zero."""
    if 0 < value < 0.0001:
        return f"${value:.2g}" if value < 1e-6 else f"${value:.6f}".rstrip("0")
    return f"${value:.4f}"


def helpers_text(helpers: Mapping[str, object]) -> str:
    """`` (grep ×3, read_file ×1)``: the REPL helpers an iteration called (name -> count), most
    called first; empty when none was (a count that is not a number, in a trajectory read back,
    is left out)."""
    counts = {k: v for k, v in helpers.items() if isinstance(v, int)}
    parts = [f"{k} ×{v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if v]
    return f" ({', '.join(parts)})" if parts else ""


def progress_line(ev: ProgressEvent) -> str:
    """One progress event as text: ``sub-calls 23/61 · 8 in flight · 1 failed · 45,210 tokens ·
    $0.0123 · 12.4 s``, or ``indexing 120/5,000 files · 4.1/96.0 MB · 12.3 MB/s``."""
    if ev.get("kind") == "index":
        mb = 1_000_000
        return (f"indexing {ev['files']:,}/{ev['files_total']:,} files · {ev['bytes'] / mb:,.1f}/"
                f"{ev['bytes_total'] / mb:,.1f} MB · {ev['rate_bps'] / mb:,.1f} MB/s · {ev['elapsed_s']:.1f} s")
    label = "sub-RLMs" if ev.get("kind") == "sub_rlms" else "sub-calls"
    finished = int(ev.get("done", 0)) + int(ev.get("failed", 0))
    return (f"{label} {finished}/{ev.get('total', 0)} · {ev.get('in_flight', 0)} in flight · "
            f"{ev.get('failed', 0)} failed · {int(ev.get('tokens') or 0):,} tokens · {cost_text(ev.get('cost_usd'))} · "
            f"{float(ev.get('elapsed_s') or 0):.1f} s")


def clip(text: str, lines: int) -> str:
    """``text`` cut to its first ``lines`` lines (each cut at 300 characters), with a ``… N more
    lines`` line when some were left out."""
    rows = text.rstrip("\n").splitlines()
    if len(rows) <= lines:
        return "\n".join(r[:300] for r in rows)
    return "\n".join(r[:300] for r in rows[:lines]) + f"\n… {len(rows) - lines} more lines"


def indent_lines(text: str, prefix: str) -> str:
    """``text`` with ``prefix`` before each of its lines."""
    return "\n".join(prefix + line for line in text.splitlines())
