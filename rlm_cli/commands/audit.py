"""``rlm audit``: a checklist of typed questions over one loaded corpus, with reports CI reads."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rlm_cli.commands.complete import SEVERITIES, words
from rlm_cli.commands.delivery import audit_reports, deliver_audit, deliver_estimate, estimate_report
from rlm_cli.commands.invocation import INVOCATION
from rlm_cli.commands.options import (
    ColorOpt,
    DebugOpt,
    JsonOpt,
    QuietOpt,
    RunFlags,
    VerboseOpt,
    opt,
    run_options,
    use_color,
)
from rlm_cli.errors import RLMError, UsageError

if TYPE_CHECKING:
    from rlm_cli.audit.changed import Scope
    from rlm_cli.audit.checklist import Checklist
    from rlm_cli.config import Settings
    from rlm_cli.models.backend import Backend
    from rlm_cli.output.findings import AuditReport
    from rlm_cli.output.formats import Report
    from rlm_cli.output.ui import UI

#: ``rlm audit``'s own sections of ``--help``.
CHECKS, REPORTS = "Checks", "Reports"


@run_options(without=("require_support",))  # an unsupported answer never passes a check: nothing to require
def audit(
    paths: Annotated[list[str] | None, typer.Argument(metavar="[PATH...]",
                                                      help="Files, folders or globs (default: .).")] = None,
    *,
    run: RunFlags,
    checklist: Annotated[Path | None, opt("--checklist", section=CHECKS, metavar="FILE",
                                          help="The checklist (default rlm-audit.toml).")] = None,
    jobs: Annotated[int, opt("--jobs", "-j", section=CHECKS, min=1, metavar="N",
                             help="Checks at once (default 1).")] = 1,
    fail_on: Annotated[str, opt("--fail-on", section=CHECKS, metavar="SEVERITY", complete=words(SEVERITIES),
                                help="Lowest failing severity: error|warning|note.")] = "error",
    max_checks: Annotated[int, opt("--max-checks", section=CHECKS, min=1, metavar="N",
                                   help="Refuse a checklist of more checks (default 200).")] = 200,
    allow_checklist_models: Annotated[bool, opt("--allow-checklist-models", section=CHECKS,
                                                help="Let a check's model be one not named here.")] = False,
    estimate: Annotated[bool, opt("--estimate", section=CHECKS, help="Print what it would cost; call no model.")] = False,
    changed_since: Annotated[str | None, opt("--changed-since", section=CHECKS, metavar="REF",
                                             help="Only files changed since git REF's merge base.")] = None,
    staged: Annotated[bool, opt("--staged", section=CHECKS, help="Only files staged for the next commit.")] = False,
    baseline: Annotated[Path | None, opt("--baseline", section=CHECKS, metavar="FILE",
                                         help="An earlier SARIF or --json report: only new findings fail.")] = None,
    junit: Annotated[Path | None, opt("--junit", section=REPORTS, metavar="FILE",
                                      help="Write a JUnit XML report to FILE.")] = None,
    sarif: Annotated[Path | None, opt("--sarif", section=REPORTS, metavar="FILE",
                                      help="Write a SARIF 2.1.0 report to FILE.")] = None,
    codequality: Annotated[Path | None, opt("--codequality", section=REPORTS, metavar="FILE",
                                            help="Write a GitLab Code Quality report to FILE.")] = None,
    github: Annotated[bool, opt("--github", section=REPORTS, help="GitHub annotations and job summary.")] = False,
    json_out: JsonOpt = False,
    output: Annotated[Path | None, opt("--output", "-o", section=REPORTS, metavar="FILE",
                                       help="Write the --json document to FILE.")] = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    color: ColorOpt = "auto",
    debug: DebugOpt = False,
) -> None:
    """Run a checklist of typed checks over the corpus at PATH...

    Each check ends pass, fail, error or unsupported; exit 8 when one of severity error (or
    --fail-on) fails. The checklist format and CI jobs: docs/audit.md."""
    from rlm_cli.audit.baseline import read_baseline
    from rlm_cli.audit.checklist import admit, check_credentials, default_path, read_checklist
    from rlm_cli.audit.view import deliver_exit_code, deliver_github_output, prepare, run_audit
    from rlm_cli.output import render

    host = INVOCATION.take_host()
    try:
        use_color(color)
        check_flags(fail_on, changed_since, staged)
        reports = audit_reports(junit=junit, sarif=sarif, github=github, json_out=json_out, output=output,
                                codequality=codequality)
        where = paths or ["."]
        listed = read_checklist(checklist or default_path(where))
        earlier = None if baseline is None else read_baseline(baseline)  # before loading: a bad file is exit 2
        ui = render.Renderer(quiet=quiet, verbose=verbose)

        settings, scope = prepare(run.settings(), where, [junit, sarif, output, codequality, baseline], changed_since,
                                  ui, staged=staged, checklist=listed.path)
        admit(listed, settings, allow_models=allow_checklist_models, max_checks=max_checks)
        if estimate:
            estimate_checks(settings, where, listed, scope, host, ui, estimate_report(reports))
            return
        check_credentials(listed, settings, host)

        def deliver(report: AuditReport) -> None:  # also the checks that finished when cancelled
            INVOCATION.json_errors = False  # the document is the --json answer, even of a cancelled run
            deliver_audit(report, reports, ui)
            deliver_github_output(report, sarif, ui)

        report = run_audit(settings, where, listed, jobs=jobs, backend=host, ui=ui, fail_on=fail_on, scope=scope,
                           baseline=earlier, on_cancel=deliver)
        deliver(report)
        if report.exit_code:
            raise typer.Exit(report.exit_code)
    except RLMError as exc:
        deliver_exit_code(int(exc.exit_code))  # ended before its report: the step still gets its exit code
        raise
    finally:
        host.close()


def check_flags(fail_on: str, changed_since: str | None, staged: bool) -> None:
    """Refuse what no run can do: a ``--fail-on`` that is no severity, or both scopes at once.

    Raises:
        UsageError: either (exit 2).
    """
    from rlm_cli.audit.checklist import SEVERITIES

    if fail_on not in SEVERITIES:
        raise UsageError(f"--fail-on must be one of {', '.join(SEVERITIES)} (not {fail_on!r})")
    if staged and changed_since is not None:
        raise UsageError("--staged and --changed-since REF are two scopes: give one",
                         hint="--staged in a pre-commit hook, --changed-since REF for a pull request")


def estimate_checks(settings: Settings, where: list[str], listed: Checklist, scope: Scope | None, host: Backend,
                    ui: UI, out: Report) -> None:
    """``rlm audit --estimate``: what the checks in ``scope`` would cost (``app.estimate``), no
    model called."""
    from rlm_cli.app.estimate import estimate as cost_of
    from rlm_cli.audit.run import check_question, scope_matcher, without_checklist

    asked = [(c.id, check_question(c, scope), c.type, c.model) for c in listed.checks
             if scope is None or scope.touches(scope_matcher(c))]
    settings = without_checklist(settings, where, listed.path)
    deliver_estimate(cost_of(settings, where, asked, backend=host, emit=ui.on_event), out, ui)
