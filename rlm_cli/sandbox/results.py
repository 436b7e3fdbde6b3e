"""What one code block produced (:class:`ExecResult`), read from the worker's ``result`` frame
field by field (:func:`parse_result`: model code controls the worker and can forge frames)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlm_cli import protocol

#: Characters of one block's output the parent accepts (the worker keeps 220,000).
MAX_OUTPUT_CHARS = 256_000


@dataclass
class ExecResult:
    """What one code block produced. ``lost`` says why the REPL state was lost (timeout, crash or
    a broken control frame), in which case the worker was restarted with ``context`` reloaded."""

    output: str
    output_chars: int
    ok: bool
    final: str | None = None
    final_error: str | None = None
    elapsed_s: float = 0.0
    lost: str | None = None
    #: Helper calls the block made (``{"grep": 2, "llm_query": 8, ...}``; see ``sandbox.observe``).
    helpers: dict[str, int] = field(default_factory=dict)
    #: Corpus lines the block looked at: ``(how, path, start_line, end_line)``.
    sources: list[tuple[str, str, int, int]] = field(default_factory=list)
    #: Helpers that stopped at their default cap in the block (``["grep"]``; see ``loop.checks.DefaultCap``).
    default_caps: list[str] = field(default_factory=list)


#: Characters of a timed-out block's output kept in the note about its timeout (head and tail).
PRINTED_NOTE_CHARS = 4_000


def timeout_note(limit: float, cell_timeout: float) -> str:
    """What the model and the user are told of a block killed after ``limit`` seconds: rounded (a
    block bounded by what was left of ``--timeout`` had 1.2 s, not 1.23456 s), and naming the
    run's ``--timeout`` when it, not ``cell_timeout``, was the bound."""
    shown = f"{limit:.1f}".removesuffix(".0")
    by_run = "" if limit >= cell_timeout else " (all the run's --timeout had left)"
    return f"the cell timed out after {shown} s{by_run} and was killed"


def printed_note(output: str, chars: int) -> str:
    """The end of a timeout's ``lost`` text: what the block printed before it was killed, at
    most :data:`PRINTED_NOTE_CHARS` characters of it (its head and tail)."""
    text = output.rstrip("\n")
    if len(text) > PRINTED_NOTE_CHARS:
        half = PRINTED_NOTE_CHARS // 2
        text = f"{text[:half]}\n[... {len(text) - 2 * half:,} characters omitted ...]\n{text[-half:]}"
    return f". Before that it printed ({max(chars, len(output)):,} characters):\n{text}\n[end of what it printed]"


def parse_result(msg: dict[str, Any]) -> ExecResult:
    """Check a ``result`` frame field by field (model code can forge frames).

    Raises:
        ProtocolError: a field is missing or has the wrong type.
    """
    def opt_str(key: str) -> str | None:
        value = msg.get(key)
        if value is not None and not isinstance(value, str):
            raise protocol.ProtocolError(f"result field {key!r} is not a string")
        return value

    output, chars, ok, elapsed = msg.get("output"), msg.get("output_chars"), msg.get("ok"), msg.get("elapsed_s", 0.0)
    if (msg.get("type") != "result" or not isinstance(output, str) or not isinstance(ok, bool)
            or not isinstance(chars, int) or isinstance(chars, bool) or chars < 0
            or not isinstance(elapsed, (int, float)) or isinstance(elapsed, bool)):
        raise protocol.ProtocolError("malformed result frame")
    chars = max(chars, len(output))
    if len(output) > MAX_OUTPUT_CHARS:
        output = output[:MAX_OUTPUT_CHARS]
    return ExecResult(output=output, output_chars=chars, ok=ok, final=opt_str("final"),
                      final_error=opt_str("final_error"), elapsed_s=float(elapsed),
                      helpers=helper_counts(msg.get("helpers")), sources=source_rows(msg.get("sources")),
                      default_caps=cap_names(msg.get("default_caps")))


#: The helpers whose default cap a result may report (anything else from the worker is dropped).
CAPPED_HELPERS = frozenset({"grep"})


def cap_names(value: Any) -> list[str]:
    """The ``default_caps`` of a result frame: known helper names only (model code controls the
    worker, so nothing it sends is trusted as is)."""
    if not isinstance(value, list):
        return []
    return [v for v in dict.fromkeys(value) if isinstance(v, str) and v in CAPPED_HELPERS]


#: How a block may have looked at a source (``sandbox.observe``); other rows are dropped.
SOURCE_KINDS = frozenset({"read_file", "grep", "leads", "printed", "sub_call", "rlm_query"})


def helper_counts(value: Any) -> dict[str, int]:
    """The ``helpers`` field of a result frame, keeping only ``{str: non-negative int}`` entries."""
    if not isinstance(value, dict):
        return {}
    return {str(k)[:40]: v for k, v in list(value.items())[:64]
            if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0}


def source_rows(value: Any) -> list[tuple[str, str, int, int]]:
    """The ``sources`` field of a result frame: well-formed ``[how, path, a, b]`` rows only."""
    rows: list[tuple[str, str, int, int]] = []
    if not isinstance(value, list):
        return rows
    for row in value[:5000]:
        if (isinstance(row, list) and len(row) == 4 and row[0] in SOURCE_KINDS and isinstance(row[1], str)
                and all(isinstance(x, int) and not isinstance(x, bool) for x in row[2:]) and 1 <= row[2] <= row[3]):
            rows.append((row[0], row[1], row[2], row[3]))
    return rows


@dataclass(frozen=True)
class WorkerCheck:
    """What earlier code left in a worker that could rewrite later answers (``Sandbox.check``):
    ``changed`` names of the worker's own code it changed (``integrity.Integrity``), ``hooks``
    what it left to run during later code (``hooks.Hooks``, processes left running), in words;
    ``unanswered``: the worker gave no valid answer to the check."""

    changed: list[str] = field(default_factory=list)
    hooks: list[str] = field(default_factory=list)
    unanswered: bool = False

    def __bool__(self) -> bool:
        return bool(self.changed or self.hooks or self.unanswered)
