"""``rlm index``, ``rlm stats`` and ``rlm cache info/clear``: the corpus index and the caches."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from rlm_cli.commands.options import (
    ColorOpt,
    CorpusFlags,
    DebugOpt,
    JsonOpt,
    Opt,
    PathsArg,
    QuietOpt,
    corpus_options,
    use_color,
)
from rlm_cli.errors import UsageError

if TYPE_CHECKING:
    from rlm_cli.config import CorpusOptions
    from rlm_cli.corpus.model import Corpus
    from rlm_cli.output.ui import UI


def _load(paths: list[str], options: CorpusOptions, ui: UI) -> tuple[Corpus, float]:
    import time

    from rlm_cli.corpus import load_corpus
    from rlm_cli.output.progress import index_callback

    if "-" in paths:
        raise UsageError("'-' (stdin) is not cached; give files or folders")
    started = time.monotonic()
    try:
        corpus = load_corpus(paths, options, on_warning=ui.warning, on_progress=index_callback(ui.on_event))
    finally:
        ui.close()
    return corpus, time.monotonic() - started


@corpus_options
def index(paths: PathsArg, *, flags: CorpusFlags, json_out: JsonOpt = False, quiet: QuietOpt = False,
          color: ColorOpt = "auto", debug: DebugOpt = False) -> None:
    """Build or refresh the chunk-index cache of PATH... and print the summary on stderr."""
    from rlm_cli.corpus.stats import index_summary
    from rlm_cli.output import answer, render

    use_color(color)
    ui = render.Renderer(quiet=quiet)
    corpus, elapsed = _load(paths, flags.options(), ui)
    where = "not cached (--no-cache)" if corpus.temporary else f"cache: {corpus.bundle_dir}"
    ui.info(f"{corpus.summary()} in {elapsed:.2f} s; {where}")
    if json_out:
        answer.write_json(index_summary(corpus, elapsed))


@corpus_options
def stats(paths: PathsArg, *, flags: CorpusFlags,
          top: Annotated[int, Opt("--top", min=0, metavar="N", help="How many of the largest files to list.")] = 10,
          json_out: JsonOpt = False, quiet: QuietOpt = False, debug: DebugOpt = False) -> None:
    """Show files, chunks and tokens by file type and the largest files of PATH... (builds the cache)."""
    from rlm_cli.corpus.stats import corpus_stats
    from rlm_cli.output import answer, render

    ui = render.Renderer(quiet=quiet)
    corpus, _ = _load(paths, flags.options(), ui)
    doc = corpus_stats(corpus, top=top)
    if json_out:
        answer.write_json(doc)
        return
    ui.info(corpus.summary())
    ui.table(f"{doc['files']:,} files, {doc['chunks']:,} chunks, {doc['tokens']:,} tokens by file type",
             ["type", "files", "bytes", "tokens", "chunks"],
             [[r["type"], f"{r['files']:,}", f"{r['bytes']:,}", f"{r['tokens']:,}", f"{r['chunks']:,}"]
              for r in doc["by_type"]])
    if doc["largest"]:
        ui.table("Largest files", ["path", "lines", "tokens", "chunks"],
                 [[r["path"], f"{r['lines']:,}", f"{r['tokens']:,}", f"{r['chunks']:,}"] for r in doc["largest"]])
    ctx = doc["context"]
    width = ctx["bytes_per_char"]
    memory = ctx["memory_bytes"]
    ui.table("context in the REPL worker", ["characters", "bytes per character", "memory"],
             [[f"{ctx['chars']:,}", str(width),
               f"{memory / 2**20:,.1f} MiB" if memory >= 2**20 else f"{memory / 1024:,.1f} KiB"]])
    if ctx["wide_files_count"]:
        astral = ctx["astral_files_count"]
        beyond = f"{ctx['wide_files_count']:,} file(s) hold characters beyond U+00FF" + (
            f", {astral:,} of them beyond U+FFFF" if astral else "")
        ui.info(f"Python stores a string at the width of its widest character: {beyond}, so all of context takes "
                f"{width} bytes per character (--exclude them to shrink it; a file's name counts too)")
        more = ctx["wide_files_count"] - len(ctx["wide_files"])
        if ctx["wide_files"]:
            ui.table("Files with characters beyond U+00FF" + (f" ({more:,} more: raise --top)" if more else ""),
                     ["path", "bytes per character", "characters"],
                     [[r["path"], str(r["bytes_per_char"]), f"{r['chars']:,}"] for r in ctx["wide_files"]])



cache_app = typer.Typer(no_args_is_help=True, help="Show or clear the cache (corpus indexes, model responses).")



@cache_app.command("info")
def cache_info(json_out: JsonOpt = False) -> None:
    """Show the cache folder, the size of each cache and the cached corpus indexes."""
    from rlm_cli.corpus.cache import cache_info as info
    from rlm_cli.output import answer, render

    doc = info()
    if json_out:
        answer.write_json(doc)
        return
    ui = render.Renderer()
    ui.info(f"cache folder: {doc['path']} ({doc['bytes']:,} bytes)")
    ui.table("Caches", ["cache", "holds", "files", "bytes"],
             [[c["name"], c["holds"], f"{c['files']:,}", f"{c['bytes']:,}"] for c in doc["caches"]])
    if doc["bundles"]:
        ui.table("Corpus indexes (newest first)", ["roots", "files", "tokens", "bytes"],
                 [[", ".join(b["roots"]) or "(broken)", f"{b['files'] or 0:,}", f"{b['tokens'] or 0:,}",
                   f"{b['bytes']:,}"] for b in doc["bundles"]])


@cache_app.command("clear")
def cache_clear(
    which: Annotated[list[str] | None, typer.Argument(metavar="[CACHE]...", help="index and/or llm "
                                                      "(default: all).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Delete the cached corpus indexes (index) and model responses (llm); trajectories are kept
    (rlm trace prune)."""
    from rlm_cli.corpus.cache import cache_clear as clear
    from rlm_cli.output import answer, render, trace
    from rlm_cli.output.text import plural

    try:
        doc = clear(which)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    files, size = trace.traces_usage()
    doc["traces_kept"] = {"path": str(trace.traces_dir()), "files": files, "bytes": size}
    if json_out:
        answer.write_json(doc)
    ui = render.Renderer()
    ui.info("removed " + ", ".join(f"{r['name']}/ ({r['files']:,} files, {r['bytes']:,} bytes)"
                                   for r in doc["removed"]) + f" from {doc['path']}")
    ui.info(f"kept the trajectories ({plural(files, 'file')}, {size:,} bytes in {trace.traces_dir()}): they are records "
            "of runs, not a cache; `rlm trace prune --older-than 30d` or `rlm trace rm ID` removes them")
