"""``--baseline FILE``: an earlier run's report, against which each finding is ``new`` or
``unchanged``, and the earlier findings no longer found are ``absent`` (issue 48).

The file is a SARIF log or an ``rlm audit --json`` document (``audit-result.v1``) that rlm wrote;
it is read and checked before anything loads (:func:`read_baseline`: a missing, unreadable or
foreign file is exit 2). Findings are matched by fingerprint
(:data:`~rlm_cli.output.findings.FINGERPRINT_KEY`: SARIF's ``partialFingerprints``, the JSON
finding's ``fingerprint``), as a multiset: two earlier findings with one fingerprint excuse two
now, not three. Matching ignores line numbers, so a finding moved by lines inserted above it
stays ``unchanged``. An earlier report's own ``absent`` results are not findings of it.

:func:`compare` sets SARIF's ``baselineState`` on each finding: ``unchanged`` ones do not fail
the run (``Finding.failing``), ``new`` ones do; the ``absent`` ones come back as findings of
their own, for the reports to list.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm_cli.audit.verdicts import Verdict
from rlm_cli.errors import UsageError
from rlm_cli.output.findings import FINGERPRINT_KEY, Finding, Region

#: The ``schema`` of the ``--json`` document a baseline may be.
AUDIT_SCHEMA = "audit-result.v1"
#: The SARIF tool name of rlm's reports.
SARIF_TOOL = "rlm audit"
#: Bytes a baseline file may have (a report of tens of thousands of findings fits).
MAX_BYTES = 256 * 1024 * 1024
_LEVELS = {"error": "error", "warning": "warning", "note": "note", "none": "note"}


@dataclass(frozen=True)
class Baseline:
    """The findings of an earlier report (``path``), as :class:`~rlm_cli.output.findings.Finding`
    records (``baseline_state`` ``None``), and its ``kind`` (``sarif`` or ``json``)."""

    path: Path
    kind: str
    findings: tuple[Finding, ...]


def read_baseline(path: Path) -> Baseline:
    """The earlier report in ``path``.

    Raises:
        UsageError: it is missing, unreadable, too large, not JSON, or not a SARIF log or
            ``audit-result.v1`` document of rlm (the message names the file and what is wrong).
    """
    hint = "give --baseline the --sarif or --json -o report of an earlier rlm audit run"
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read the baseline {path}: {exc.strerror or exc}", hint=hint) from None
    if len(data) > MAX_BYTES:
        raise UsageError(f"the baseline {path} is over {MAX_BYTES // (1024 * 1024)} MB", hint=hint)
    try:
        doc = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise UsageError(f"the baseline {path} is not JSON: not a SARIF or rlm audit --json report",
                         hint=hint) from None
    try:
        if isinstance(doc, dict) and doc.get("schema") == AUDIT_SCHEMA:
            return Baseline(path, "json", tuple(findings_of_json(doc)))
        if isinstance(doc, dict) and isinstance(doc.get("runs"), list) and str(doc.get("version")) == "2.1.0":
            return Baseline(path, "sarif", tuple(findings_of_sarif(doc)))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(f"the baseline {path} is a damaged report ({type(exc).__name__}: {exc})",
                         hint=hint) from None
    raise UsageError(f"the baseline {path} is not a SARIF 2.1.0 log or an {AUDIT_SCHEMA} document", hint=hint)


def _line(value: object, default: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return default
    return value


def findings_of_json(doc: dict[str, Any]) -> list[Finding]:
    """The findings of an ``audit-result.v1`` document (its checks' ``findings`` that are not
    ``absent``).

    Raises:
        TypeError, KeyError, ValueError: the document is not shaped as the schema says.
    """
    out = []
    for check in doc["checks"]:
        for f in check.get("findings") or []:
            if f.get("baseline_state") == "absent" or not isinstance(f.get("fingerprint"), str):
                continue
            start = _line(f.get("start_line"))
            out.append(Finding(str(f.get("check") or check["id"]), str(f["path"]),
                               Region(start, max(start, _line(f.get("end_line"), start))), f["fingerprint"],
                               str(f.get("message") or ""), str(f.get("level") or check.get("severity") or "error")))
    return out


def findings_of_sarif(doc: dict[str, Any]) -> list[Finding]:
    """The results of the rlm runs of a SARIF log that carry rlm's fingerprint and are not
    ``absent``.

    Raises:
        UsageError: the log has no run of rlm (another tool's SARIF).
        TypeError, KeyError, ValueError: it is not shaped as SARIF 2.1.0 says.
    """
    runs = [r for r in doc["runs"] if ((r.get("tool") or {}).get("driver") or {}).get("name") == SARIF_TOOL]
    if not runs:
        raise UsageError("the baseline is the SARIF log of another tool (no run of rlm audit in it)",
                         hint="give --baseline the --sarif report of an earlier rlm audit run")
    out = []
    for run in runs:
        for r in run.get("results") or []:
            key = (r.get("partialFingerprints") or {}).get(FINGERPRINT_KEY)
            if r.get("baselineState") == "absent" or not isinstance(key, str):
                continue
            loc = ((r.get("locations") or [{}])[0] or {}).get("physicalLocation") or {}
            region = loc.get("region") or {}
            start = _line(region.get("startLine"))
            out.append(Finding(str(r["ruleId"]), _path_of(loc.get("artifactLocation") or {}),
                               Region(start, max(start, _line(region.get("endLine"), start))), key,
                               str((r.get("message") or {}).get("text") or ""),
                               _LEVELS.get(str(r.get("level") or "error"), "error")))
    return out


def _path_of(artifact: dict[str, Any]) -> str:
    """A report path from a SARIF ``artifactLocation``: its URI decoded (a ``file://`` URI: the
    absolute path)."""
    from urllib.parse import unquote, urlsplit

    uri = str(artifact.get("uri") or "")
    return unquote(urlsplit(uri).path) if uri.startswith("file:") else unquote(uri)


def compare(findings: Iterable[Finding], baseline: Baseline,
            looked_at: Callable[[Finding], bool] = lambda f: True) -> tuple[list[Finding], list[Finding]]:
    """``(findings, absent)``: each of ``findings`` with its ``baseline_state`` (``unchanged``
    when the baseline holds its fingerprint not yet matched, else ``new``), and the baseline's
    findings that none matched, as ``absent`` ones (in the baseline's order), among those this
    run ``looked_at`` (a finding in a file outside this run's corpus, or of a check no longer
    in the checklist, is not known to be gone: it is left out)."""
    left = Counter(f.fingerprint for f in baseline.findings)
    out = []
    for f in findings:
        if left[f.fingerprint] > 0:
            left[f.fingerprint] -= 1
            out.append(dataclasses.replace(f, baseline_state="unchanged"))
        else:
            out.append(dataclasses.replace(f, baseline_state="new"))
    absent = []
    for f in reversed(baseline.findings):  # the last of equal fingerprints are the ones left over
        if left[f.fingerprint] > 0:
            left[f.fingerprint] -= 1
            if looked_at(f):
                absent.append(dataclasses.replace(f, baseline_state="absent"))
    return out, absent[::-1]


def counted(verdict: Verdict, findings: Sequence[Finding]) -> Verdict:
    """``verdict`` as the exit code weighs it: a ``fail`` or ``unsupported`` check whose findings
    all are accepted (none ``failing``: each suppressed or in the baseline) counts as a pass;
    any other verdict as it is."""
    if verdict.status in ("fail", "unsupported") and findings and not any(f.failing for f in findings):
        return dataclasses.replace(verdict, status="pass")
    return verdict
