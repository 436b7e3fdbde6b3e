"""The answer on stdout, and the run's closing summary line: stdout carries the answer or the
``--json`` document only, written whole (or an error raised), with its terminal control
characters neutralised when stdout is a terminal. Standard library only (no rich).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Mapping
from typing import IO

from rlm_cli.errors import UsageError
from rlm_cli.events import whole
from rlm_cli.output.text import SURROGATE, completed_calls, encodable, money, safe_text


def write_answer(text: str) -> None:
    """The answer alone on stdout (plain text, newline-terminated); on a terminal its control
    characters are neutralised (:func:`for_stdout`)."""
    write_text(text if text.endswith("\n") else text + "\n")


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


def json_text(doc: object, *, line: bool = False) -> str:
    """A JSON document as printed: indented (one line with ``line``: JSON Lines, the trajectory),
    UTF-8 characters kept, newline-terminated, and RFC 8259 whatever it holds: a float JSON cannot
    hold (``NaN``, ``Infinity``) is ``null``, a lone surrogate (:data:`~rlm_cli.output.text.SURROGATE`)
    is kept as its ``\\uXXXX`` escape (it reads back as the same string), an object JSON does not
    know is its ``str()``. The one place rlm turns a document into JSON text. Under GitHub Actions
    a ``##[`` in a string is written ``#\\u0023[``: the same value, and no runner command in the log
    (``output.workflow_guard``; outside strings JSON has no ``#``)."""
    from rlm_cli.output.workflow_guard import json_for_runner

    text = json.dumps(_finite(doc), ensure_ascii=False, indent=None if line else 2, default=str, allow_nan=False)
    return json_for_runner(SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n")


def json_value(value: object) -> object:
    """``value`` as JSON values every encoder takes: each lone surrogate of a string (or key)
    replaced by U+FFFD, each float that is not finite ``None``. For a serialiser that refuses a
    lone surrogate (pydantic, under the MCP SDK), where :func:`json_text` would keep its escape."""
    if isinstance(value, str):
        return encodable(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {encodable(k) if isinstance(k, str) else k: json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    return value


def _finite(value: object) -> object:
    """``value`` with every float that is not finite made ``None`` (tuples as lists)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def write_json(doc: Mapping[str, object]) -> None:
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
        BrokenPipeError: stdout's reader went away (exit 141).
        UsageError: stdout cannot take it otherwise (``> /dev/full``, a full disk, an I/O error);
            stdout is then ``/dev/null``, so the flush at exit does not fail again.
    """
    try:
        _write_stdout(text)
    except BrokenPipeError:
        raise
    except OSError as exc:
        _drop_stdout()
        raise UsageError(f"cannot write to standard output: {exc.strerror or exc}",
                         hint="free some space or give --output FILE; the answer is in the trajectory "
                              "(rlm trace show last)") from None


def _drop_stdout() -> None:
    """Make stdout ``/dev/null`` (what its buffers hold drains there)."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):
        pass


def _write_stdout(text: str) -> None:
    from rlm_cli.output.workflow_guard import for_stream

    out = sys.stdout
    text = encodable(for_stream(for_stdout(text, out), out))  # under GitHub Actions: no runner command (issue 47)
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


def mapping(value: object) -> Mapping[str, object]:
    """``value`` when it is a JSON object (a ``Mapping``), else an empty one: for a reader of a
    document that may come from a file (a trajectory, ``rlm replay``) and lack a section."""
    return value if isinstance(value, Mapping) else {}


def count(data: Mapping[str, object], key: str) -> int:
    """``data[key]`` as a whole number: 0 when it is missing or not a finite number (a reader of
    a document that may come from a file: :func:`~rlm_cli.events.whole`)."""
    return whole(data.get(key))


def number(data: Mapping[str, object], key: str) -> float:
    """``data[key]`` as a number (seconds, USD): 0.0 when it is missing or not a number (a reader
    of a document that may come from a file)."""
    value = data.get(key)
    return float(value) if isinstance(value, (int, float)) else 0.0


def summary_line(data: Mapping[str, object]) -> str:
    """The run's closing line (without style): iterations, sub-calls, tokens and cost split
    between the root model and sub-calls (:func:`~rlm_cli.output.text.money`: "unknown" when a model is
    not priced; "no calls" for a group without a completed call, "none" for a run without one:
    abandoned calls, sent and never answered, are not completed),
    the share of the input the provider served from its prompt cache, response-cache hits,
    retries, calls that failed after their retries, time.
    ``data`` is an ``rlm ask --json`` document (``iterations``, ``sub_calls``, ``usage``,
    ``elapsed_s``; each may be missing)."""
    usage = mapping(data.get("usage"))
    root, sub = mapping(usage.get("root")), mapping(usage.get("sub"))

    def cost(group: Mapping[str, object]) -> str:
        return "no calls" if not completed_calls(group) else money(group.get("cost_usd"))

    def tokens(group: Mapping[str, object]) -> str:
        return f"{count(group, 'input_tokens'):,} in/{count(group, 'output_tokens'):,} out"

    extra = "".join(f", {usage[k]} {label}" for k, label in (
        ("cached_calls", "cached"), ("retries", "retries"), ("failed_calls", "failed calls")) if usage.get(k))
    read = sum(count(g, "cache_read_tokens") for g in (root, sub))
    total_in = sum(count(g, "input_tokens") for g in (root, sub))
    if read and total_in:  # the provider's own prompt cache (models.caching), not rlm's response cache
        extra = f"; {read / total_in:.0%} of the input ({read:,} tokens) served from the provider's prompt cache{extra}"
    n, subs = count(data, "iterations"), count(data, "sub_calls")
    calls = completed_calls(usage)
    costs = (f"cost {money(usage.get('cost_usd'))} (root {cost(root)}, sub {cost(sub)})"
             if calls else "cost none (no model call completed)")
    elapsed = data.get("elapsed_s")
    seconds = float(elapsed) if isinstance(elapsed, (int, float)) else 0.0
    return (f"{n} iteration{'' if n == 1 else 's'}, {subs} sub-call{'' if subs == 1 else 's'}; "
            f"tokens root {tokens(root)}, sub {tokens(sub)}; {costs}{extra}; {seconds:.1f} s")


def support_warning(support: object) -> str:
    """The one stderr line of an answer whose support verdict (a ``support`` object of ``--json``)
    is ``unsupported``, ``""`` for any other: the tokens nothing showed, or the reason."""
    if not isinstance(support, dict) or support.get("verdict") != "unsupported":
        return ""
    tokens = [str(t) for t in support.get("unsupported") or []]
    if tokens:
        named = ", ".join(f"`{t}`" for t in tokens[:6]) + (f" and {len(tokens) - 6} more" if len(tokens) > 6 else "")
        return f"rlm could not find {named} in the code output or corpus lines the model read: treat this answer as a guess"
    reason = str(support.get("reason") or "rlm found nothing the answer rests on")
    return f"{reason}: treat this answer as a guess"
