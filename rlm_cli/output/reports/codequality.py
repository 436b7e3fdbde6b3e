"""GitLab Code Quality (``rlm audit --codequality FILE``): a JSON array with one object per
finding that is not suppressed (nor ``absent``: gone since the baseline): ``engine_name`` (``rlm audit``: how a later run tells the file is
not code to audit, ``corpus.selfreports``), ``description``, ``check_name`` (the check's id),
``fingerprint`` (the finding's: ``findings.FINGERPRINT_KEY``), ``severity`` (:data:`SEVERITIES`:
error -> ``major``, warning -> ``minor``, note -> ``info``), ``location.path`` (from the
repository root) and ``location.lines.begin`` (and ``end``). GitLab's format:
docs.gitlab.com/ci/testing/code_quality ("Code Quality report format")."""

from __future__ import annotations

from typing import Any

from rlm_cli.output.findings import AuditReport
from rlm_cli.output.reports.text import strict_json

#: Code Quality ``severity`` (info, minor, major, critical, blocker) of each check severity.
SEVERITIES = {"error": "major", "warning": "minor", "note": "info"}


def codequality_issues(report: AuditReport) -> list[dict[str, Any]]:
    """The Code Quality issues of an audit, one per finding not suppressed and not absent."""
    return [{"type": "issue", "engine_name": "rlm audit", "check_name": f.check, "description": f"{f.check}: {f.message}",
             "categories": ["Bug Risk"], "fingerprint": f.fingerprint, "severity": SEVERITIES[f.level],
             "location": {"path": f.path, "lines": {"begin": f.region.start_line, "end": f.region.end_line}}}
            for f in report.findings if f.suppression is None and f.baseline_state != "absent"]


def codequality_text(report: AuditReport) -> str:
    """The Code Quality report as JSON text (RFC 8259)."""
    return strict_json(codequality_issues(report))
