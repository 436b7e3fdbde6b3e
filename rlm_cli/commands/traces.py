"""``rlm trace list/show/export/rm/prune`` and ``rlm replay``: recorded trajectories."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rlm_cli.commands.complete import choice, trace_ids
from rlm_cli.commands.delivery import answer_format, emit_partial
from rlm_cli.commands.options import (
    ColorOpt,
    CorpusFlags,
    DebugOpt,
    JsonOpt,
    Opt,
    QuietOpt,
    TraceRefArg,
    corpus_options,
    use_color,
)
from rlm_cli.errors import PartialAnswerError, UsageError
from rlm_cli.output.formats import Report

if TYPE_CHECKING:
    from rlm_cli.app.housekeeping import Removed

trace_app = typer.Typer(no_args_is_help=True, help="Inspect recorded trajectories (JSONL, one per run).")



@trace_app.command("list")
def trace_list(
    count: Annotated[int | None, Opt("--max-count", "-n", min=1, metavar="N",
                                     help="Only the newest N.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """List the recorded trajectories, newest first."""
    from rlm_cli.output import answer, render, tables, trace

    infos = trace.list_traces()[:count]
    if json_out:
        answer.write_json({"traces_dir": str(trace.traces_dir()), "traces": [trace.info_dict(i) for i in infos]})
        return
    if not infos:
        render.Renderer().info(f"no trajectories in {trace.traces_dir()}")
        return
    tables.print_trace_list(infos)


@trace_app.command("show")
def trace_show(ref: TraceRefArg) -> None:
    """Show one trajectory as a tree: iterations, code, outputs, sub-calls, recursion."""
    from rlm_cli.output import trace, trace_view

    events = trace.read_trace(trace.find_trace(ref))
    trace_view.print_trace_tree(events[0], trace.build_tree(events))


@trace_app.command("rm")
def trace_rm(refs: Annotated[list[str] | None, typer.Argument(
        metavar="ID...", autocompletion=trace_ids,
        help="Run ids, unique prefixes, 'last', or .jsonl paths in the traces folder.")] = None) -> None:
    """Remove trajectories (each id is checked first; nothing outside the traces folder)."""
    from rlm_cli.app import housekeeping

    _said(housekeeping.remove(housekeeping.resolve_refs(refs or [])), dry_run=False)


@trace_app.command("prune")
def trace_prune(
    older_than: Annotated[str | None, Opt("--older-than", metavar="AGE", help="Remove those started more than AGE "
                                          "ago (30d, 12h, 2w).")] = None,
    keep: Annotated[int | None, Opt("--keep", min=0, metavar="N", help="Keep the newest N (with --older-than: "
                                    "remove only old ones beyond them).")] = None,
    dry_run: Annotated[bool, Opt("--dry-run", help="Only list what would be removed.")] = False,
) -> None:
    """Remove old trajectories: each removed run id on stdout, the total on stderr."""
    from rlm_cli.app import housekeeping

    _said(housekeeping.prune(older_than=older_than, keep=keep, dry_run=dry_run), dry_run=dry_run)


def _said(removed: Removed, *, dry_run: bool) -> None:
    """Each removed trajectory's run id on stdout, then a line on stderr with the count and bytes."""
    from rlm_cli.output import answer, render, trace
    from rlm_cli.output.text import plural

    if removed.paths:
        answer.write_text("".join(f"{p.stem}\n" for p in removed.paths))
    verb = "would remove" if dry_run else "removed"
    render.Renderer().info(f"{verb} {plural(len(removed.paths), 'trajectory', 'trajectories')} "
                           f"({removed.bytes:,} bytes) from {trace.traces_dir()}")


@trace_app.command("export")
def trace_export(
    ref: TraceRefArg,
    html: Annotated[bool, Opt("--html", help="Export as one self-contained HTML file.")] = False,
    output: Annotated[Path | None, Opt("--output", "-o", metavar="FILE", help="Where to write (default: ID.html here).")] = None,
) -> None:
    """Export one trajectory to share it (HTML)."""
    from rlm_cli.output import render, trace, trace_view

    if not html:
        raise UsageError("choose an export format", hint="--html")
    path = trace.find_trace(ref)
    events = trace.read_trace(path)
    out = output or Path(f"{path.stem}.html")
    page = trace_view.trace_html(events[0], trace.build_tree(events))
    try:  # private like the trajectory it comes from (it holds the corpus excerpts the model saw)
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(page)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}", hint="choose another --output") from None
    render.Renderer().info(f"wrote {out}")



@corpus_options
def replay(
    ref: TraceRefArg,
    paths: Annotated[list[str] | None, typer.Argument(metavar="[PATH...]", help="The corpus to replay over "
                                                      "(default: the recorded paths of a run of yours; a "
                                                      "trajectory from elsewhere needs them).")] = None,
    *,
    flags: CorpusFlags,
    sandbox: Annotated[str | None, Opt("--sandbox", metavar="LEVEL", autocompletion=choice("sandbox"),
                                       help="Your level, never the recorded one.")] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    color: ColorOpt = "auto",
    debug: DebugOpt = False,
) -> None:
    """Re-run a recorded run from its recorded model responses, without calling any provider, with
    your sandbox, corpus and models (a trajectory is input from whoever made it)."""
    from rlm_cli import config
    from rlm_cli.app import replay as replay_mod
    from rlm_cli.config_keys import check_choice
    from rlm_cli.output import answer, render, trace

    started = time.monotonic()
    use_color(color)
    level = None if sandbox is None else check_choice("sandbox", sandbox, "--sandbox")
    base = config.resolve({"sandbox": level})
    base.corpus = flags.options()
    p = replay_mod.plan(trace.find_trace(ref), sandbox=level, base=base, paths=list(paths or []))
    ui = render.Renderer(quiet=quiet)
    stdin_bytes = sys.stdin.buffer.read() if "-" in p.paths else None
    try:
        outcome = replay_mod.replay(p, emit=ui.on_event, stdin_bytes=stdin_bytes)
    except PartialAnswerError as exc:
        emit_partial(exc, ui, Report(answer_format(json_out)), p.settings, round(time.monotonic() - started, 3))
        raise
    finally:
        ui.close()
    from rlm_cli.output.documents import outcome_document

    r = outcome.result
    doc = outcome_document(outcome, round(time.monotonic() - started, 3))
    doc["trace"] = str(p.path)
    doc["same_answer"] = r.answer == p.recorded_answer
    if not doc["same_answer"]:
        ui.warning("the replayed answer differs from the recorded one")
    ui.summary(doc)
    answer.write_json(doc) if json_out else answer.write_answer(r.answer)
