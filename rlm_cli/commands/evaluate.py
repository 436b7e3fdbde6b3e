"""``rlm eval``: generated questions with exact answers over the user's corpus, run and scored."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

from rlm_cli.commands.complete import words
from rlm_cli.commands.options import (
    ColorOpt,
    DebugOpt,
    JsonOpt,
    PathsArg,
    QuietOpt,
    RunFlags,
    VerboseOpt,
    opt,
    run_options,
    use_color,
)
from rlm_cli.errors import UsageError
from rlm_cli.evaluation.task import FAMILIES as FAMILY_NAMES

QUESTIONS = "Questions"


@run_options(without=("mode", "direct_max_tokens", "trace", "require_support"))
def eval_cmd(
    paths: PathsArg,
    families: Annotated[str, opt("--families", section=QUESTIONS, metavar="LIST", complete=words(FAMILY_NAMES),
                                 help="Families, comma-separated: needle,code,aggregate,pairs,semantic (all).")
                        ] = ",".join(FAMILY_NAMES),
    limit: Annotated[int, opt("--limit", section=QUESTIONS, min=1, metavar="N",
                              help="Questions per family (default 10).")] = 10,
    seed: Annotated[int, opt("--seed", section=QUESTIONS, metavar="N",
                             help="Same seed and corpus, same questions (default 0).")] = 0,
    split: Annotated[str, opt("--split", section=QUESTIONS, metavar="SPLIT", complete=words(("dev", "test")),
                              help="dev: tune on it (default); test: other wordings, report it.")] = "dev",
    modes: Annotated[str, opt("--modes", section=QUESTIONS, metavar="LIST", complete=words(("rlm", "direct")),
                              help="rlm,direct (direct where the corpus fits; default rlm).")] = "rlm",
    jobs: Annotated[int, opt("--jobs", "-j", section=QUESTIONS, min=1, metavar="N",
                             help="Questions run at once (default 1).")] = 1,
    records: Annotated[int, opt("--records", section=QUESTIONS, min=20, metavar="N",
                                help="Size of the generated files (default 1000).")] = 1000,
    report: Annotated[Path | None, opt("--report", section=QUESTIONS, metavar="FILE",
                                       help="Also write a Markdown report to FILE.")] = None,
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

