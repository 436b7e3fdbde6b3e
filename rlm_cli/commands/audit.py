"""``rlm audit``: a checklist of typed questions over one loaded corpus, with reports CI reads."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlm_cli.commands.delivery import Format, audit_reports, deliver_audit, deliver_estimate
from rlm_cli.commands.invocation import INVOCATION
from rlm_cli.commands.options import (
    ColorOpt,
    DebugOpt,
    JsonOpt,
    Opt,
    QuietOpt,
    RunFlags,
    VerboseOpt,
    run_options,
    use_color,
)
from rlm_cli.errors import UsageError

FileOpt = Annotated[Path | None, Opt(metavar="FILE")]


@run_options()
def audit(
    paths: Annotated[list[str] | None, typer.Argument(metavar="[PATH...]", help="Files, folders or globs (default: .).")] = None,
    *,
    run: RunFlags,
    checklist: Annotated[Path | None, Opt("--checklist", metavar="FILE", help="The checklist (TOML [[check]] tables; "
                                          "default: rlm-audit.toml at the root of the first PATH).")] = None,
    jobs: Annotated[int, Opt("--jobs", min=1, help="Checks run at once, each in its own worker (default 1).")] = 1,
    junit: Annotated[Path | None, Opt("--junit", metavar="FILE", help="Write a JUnit XML report to FILE.")] = None,
    sarif: Annotated[Path | None, Opt("--sarif", metavar="FILE", help="Write a SARIF 2.1.0 report to FILE.")] = None,
    github: Annotated[bool, Opt("--github", help="GitHub Actions annotations on stdout, and the job summary "
                                                  "when GITHUB_STEP_SUMMARY is set.")] = False,
    json_out: JsonOpt = False,
    output: Annotated[Path | None, Opt("--output", "-o", metavar="FILE", help="Write the --json document to FILE.")] = None,
    fail_on: Annotated[str, Opt("--fail-on", metavar="SEVERITY", help="error|warning|note: the lowest severity "
                                "whose failing check fails the run, exit 8 (default error).")] = "error",
    estimate: Annotated[bool, Opt("--estimate", help="Print what each check would cost, calling no model.")] = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    color: ColorOpt = "auto",
    debug: DebugOpt = False,
) -> None:
    """Run the checklist's checks over the corpus at PATH...: each ends pass, fail, error or
    unsupported; exit 8 when a check of error severity (or --fail-on) fails."""
    from rlm_cli.audit.checklist import SEVERITIES, default_path, read_checklist
    from rlm_cli.output import render

    host = INVOCATION.take_host()
    try:
        use_color(color)
        if fail_on not in SEVERITIES:
            raise UsageError(f"--fail-on must be one of {', '.join(SEVERITIES)} (not {fail_on!r})")
        reports = audit_reports(junit=junit, sarif=sarif, github=github, json_out=json_out, output=output)
        where = paths or ["."]
        listed = read_checklist(checklist or default_path(where))
        settings = run.settings()
        ui = render.Renderer(quiet=quiet, verbose=verbose)
        if estimate:
            from rlm_cli.app.estimate import estimate as cost_of
            from rlm_cli.audit.run import check_question, without_checklist

            asked = [(c.id, check_question(c), c.type, c.model) for c in listed.checks]
            settings = without_checklist(settings, where, listed.path)
            deliver_estimate(cost_of(settings, where, asked, backend=host, emit=ui.on_event),
                             Format.JSON if json_out else Format.TEXT, ui)
            return
        from rlm_cli.audit.view import run_audit

        doc = run_audit(settings, where, listed, jobs=jobs, backend=host, ui=ui, fail_on=fail_on)
        deliver_audit(doc, reports, ui)
        if doc["exit_code"]:
            raise typer.Exit(doc["exit_code"])
    finally:
        host.close()
