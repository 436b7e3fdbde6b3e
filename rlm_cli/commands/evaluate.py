"""``rlm eval``: generated questions with exact answers over the user's corpus, run and scored."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

from rlm_cli.commands.options import (
    ColorOpt,
    DebugOpt,
    JsonOpt,
    Opt,
    PathsArg,
    QuietOpt,
    RunFlags,
    VerboseOpt,
    run_options,
    use_color,
)
from rlm_cli.errors import UsageError


@run_options(without=("mode", "direct_max_tokens", "trace", "require_support"))
def eval_cmd(
    paths: PathsArg,
    families: Annotated[str, Opt("--families", help="Comma-separated task families: needle, code, aggregate, "
                                 "pairs, semantic.")] = "needle,code,aggregate,pairs,semantic",
    limit: Annotated[int, Opt("--limit", min=1, help="Questions per family.")] = 10,
    seed: Annotated[int, Opt("--seed", help="Same seed and corpus, same questions.")] = 0,
    split: Annotated[str, Opt("--split", help="dev: the families' own wording (tune on it); test: other wordings "
                              "and seeds (report it, never tune on it).")] = "dev",
    modes: Annotated[str, Opt("--modes", help="Comma-separated: rlm, direct (direct only where the corpus fits "
                              "the root model's window).")] = "rlm",
    jobs: Annotated[int, Opt("--jobs", min=1, help="Questions run at once.")] = 1,
    records: Annotated[int, Opt("--records", min=20, help="Lines of the generated log (aggregate); a "
                                "quarter of it, of each ticket list (pairs); a tenth, of each message file "
                                "(semantic).")] = 1000,
    report: Annotated[Path | None, Opt("--report", help="Also write a Markdown report to FILE.")] = None,
    *,
    run: RunFlags,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    color: ColorOpt = "auto",
    debug: DebugOpt = False,
) -> None:
    """Measure answer quality on your own corpus: generated questions with exact answers, run like
    `rlm ask` and scored. Budgets (--timeout, --max-cost...) apply to each question."""
    from rlm_cli.evaluation import cli_run
    from rlm_cli.output import answer, render

    use_color(color)
    settings = run.settings()
    ui = render.Renderer(quiet=quiet, verbose=verbose)
    doc, markdown = cli_run.evaluate(settings, paths, families=_words(families, "--families"),
                                     modes=_words(modes, "--modes"), limit=limit, seed=seed, jobs=jobs,
                                     records=records, ui=ui, command=_command_line(), split=split)
    if report is not None:
        cli_run.write_atomic(report, markdown)
        ui.info(f"report written to {report}")
    answer.write_json(doc) if json_out else answer.write_answer(cli_run.summary_text(doc))


def _words(value: str, flag: str) -> list[str]:
    words = [w.strip() for w in value.split(",") if w.strip()]
    if not words:
        raise UsageError(f"{flag} is empty")
    return list(dict.fromkeys(words))


def _command_line() -> str:
    import shlex

    args = [a if not a.startswith("sk-") else "***" for a in sys.argv[1:]]
    if "--api-key" in args and args.index("--api-key") + 1 < len(args):
        args[args.index("--api-key") + 1] = "***"
    return "rlm " + " ".join(shlex.quote(a) for a in args)

