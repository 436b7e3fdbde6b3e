"""SARIF 2.1.0 (``rlm audit --sarif``): one rule per check (``defaultConfiguration.level`` from
its severity: error -> ``error``, warning -> ``warning``, note -> ``note``), one result per
finding (a ``locations`` check: one per location; another check: one at the evidence its run
read, the rest as ``relatedLocations``; else at the check in the checklist), each with
``partialFingerprints`` under rlm's own key (``findings.FINGERPRINT_KEY``), its
``baselineState`` when a baseline was given (``new``, ``unchanged``; the baseline's findings
this run no longer has follow as ``absent`` results of ``kind`` ``pass``) and its
``suppressions``; checks that ended ``error`` are ``toolExecutionNotifications``.

URIs: a file under the repository root is an RFC 3986 relative reference (percent-encoded) with
``uriBaseId`` ``%SRCROOT%``, which ``run.originalUriBaseIds`` declares as the root's ``file://``
URI (ending in ``/``); a file outside it is an absolute ``file://`` URI (:func:`artifact_location`).
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath
from typing import NotRequired, TypedDict
from urllib.parse import quote

from rlm_cli.output.findings import FINGERPRINT_KEY, AuditReport, CheckReport, Finding, Location
from rlm_cli.output.reports.text import ANSWER_CHARS, strict_json

#: SARIF ``level`` of each severity.
LEVELS = {"error": "error", "warning": "warning", "note": "note"}
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
#: The base id of paths from the repository root.
SRCROOT = "%SRCROOT%"


class ArtifactLocation(TypedDict):
    """SARIF's ``artifactLocation``: a URI, relative to ``uriBaseId`` when it has one."""

    uri: str
    uriBaseId: NotRequired[str]


class _Region(TypedDict):
    startLine: int
    endLine: int


class _Physical(TypedDict):
    artifactLocation: ArtifactLocation
    region: _Region


class SarifLocation(TypedDict):
    """SARIF's ``location``: a file and its lines."""

    physicalLocation: _Physical


class RelatedLocation(SarifLocation):
    """An entry of a result's ``relatedLocations``: a location with its ``id`` (1, 2...)."""

    id: int


class Text(TypedDict):
    """SARIF's ``message`` (and the rules' descriptions): plain ``text``."""

    text: str


class Suppression(TypedDict):
    """SARIF's ``suppression``: ``inSource`` or ``external``, and why."""

    kind: str
    justification: str


class Rule(TypedDict):
    """SARIF's ``reportingDescriptor``: one per check."""

    id: str
    shortDescription: Text
    fullDescription: Text
    help: Text
    defaultConfiguration: dict[str, str]
    properties: dict[str, object]


class Result(TypedDict):
    """SARIF's ``result``: a finding (or, with ``kind`` ``pass``, a baseline's finding now absent),
    its keys in the order they are written."""

    ruleId: str
    ruleIndex: int
    kind: NotRequired[str]
    level: str
    message: Text
    locations: list[SarifLocation]
    partialFingerprints: dict[str, str]
    properties: NotRequired[dict[str, str]]
    relatedLocations: NotRequired[list[RelatedLocation]]
    baselineState: NotRequired[str]
    suppressions: NotRequired[list[Suppression]]


class Run(TypedDict):
    """SARIF's ``run``: the tool and its rules, the root's URI, the invocation, the results."""

    tool: dict[str, object]
    originalUriBaseIds: dict[str, object]
    invocations: list[dict[str, object]]
    results: list[Result]
    properties: dict[str, object]


#: The SARIF 2.1.0 log (the functional form: ``$schema`` is no Python name).
SarifLog = TypedDict("SarifLog", {"$schema": str, "version": str, "runs": list[Run]})


def folder_uri(folder: str) -> str:
    """The ``file://`` URI of an absolute folder, ending in ``/``."""
    uri = PurePosixPath(folder.replace(os.sep, "/")).as_uri()
    return uri if uri.endswith("/") else uri + "/"


def artifact_location(path: str) -> ArtifactLocation:
    """The ``artifactLocation`` of a report path: a percent-encoded reference against
    :data:`SRCROOT`, or a ``file://`` URI for an absolute path (a file outside the root)."""
    if path.startswith("/"):
        return {"uri": PurePosixPath(path).as_uri()}
    return {"uri": quote(path, safe="/"), "uriBaseId": SRCROOT}


def _physical(path: str, start: int, end: int) -> SarifLocation:
    return {"physicalLocation": {"artifactLocation": artifact_location(path),
                                 "region": {"startLine": start, "endLine": end}}}


def _rule(c: CheckReport) -> Rule:
    first_line = (c.question.splitlines() or [""])[0]
    return {"id": c.id, "shortDescription": {"text": first_line[:200]},
            "fullDescription": {"text": c.question},
            "help": {"text": f"{c.question}\nType: {c.type}; expectation: {c.expectation or 'none'}"},
            "defaultConfiguration": {"level": LEVELS[c.severity]},
            "properties": {"answerType": c.type, "expectation": c.expectation, "tags": ["rlm-audit", c.severity]}}


def _related(n: int, loc: Location) -> RelatedLocation:
    return {"id": n, **_physical(loc.path, loc.region.start_line, loc.region.end_line)}


def _result(c: CheckReport, index: int, f: Finding) -> Result:
    answer = (c.answer or "")[:ANSWER_CHARS]
    result: Result = {
        "ruleId": c.id, "ruleIndex": index, "level": LEVELS[f.level],
        "message": {"text": f"{c.id}: {f.message}\n{answer}".strip()},
        "locations": [_physical(f.path, f.region.start_line, f.region.end_line)],
        "partialFingerprints": {FINGERPRINT_KEY: f.fingerprint},
        "properties": {"status": f.status, "placedAt": f.where}}
    if f.related:
        result["relatedLocations"] = [_related(n, loc) for n, loc in enumerate(f.related, 1)]
    if f.baseline_state is not None:
        result["baselineState"] = f.baseline_state
    if f.suppression is not None:
        result["suppressions"] = [{"kind": f.suppression.kind, "justification": f.suppression.reason}]
    return result


def _absent(index: int, f: Finding) -> Result:
    """A finding of the baseline this run no longer has: ``baselineState`` ``absent``, ``kind``
    ``pass`` and ``level`` ``none`` (no problem now: nothing raises an alert for it)."""
    return {"ruleId": f.check, "ruleIndex": index, "kind": "pass", "level": "none",
            "message": {"text": f"{f.check}: no longer found ({f.message})" if f.message else
                        f"{f.check}: no longer found"},
            "locations": [_physical(f.path, f.region.start_line, f.region.end_line)],
            "partialFingerprints": {FINGERPRINT_KEY: f.fingerprint}, "baselineState": "absent"}


def sarif_log(report: AuditReport, version: str) -> SarifLog:
    """The SARIF 2.1.0 log of an audit (``version``: rlm's)."""
    rules: list[Rule] = []
    results: list[Result] = []
    notes: list[dict[str, object]] = []
    for index, c in enumerate(report.checks):
        rules.append(_rule(c))
        if c.status == "error":
            notes.append({"level": "error", "message": {"text": f"check {c.id} could not be decided: {c.reason}"},
                          "associatedRule": {"id": c.id, "index": index}})
        results.extend(_result(c, index, f) for f in c.findings)
    cut = report.incomplete
    if cut:  # a cancelled run (SIGINT, SIGTERM): the checks that finished, and which did not run
        notes.append({"level": "error", "message": {"text": f"the run was cancelled ({cut['signal']}): "
                                                            f"{len(cut['not_run'])} check(s) did not run: "
                                                            + ", ".join(cut["not_run"])}})
    rule_index = {c.id: n for n, c in enumerate(report.checks)}  # an absent finding of a check now gone: left out
    results.extend(_absent(rule_index[f.check], f) for f in report.absent if f.check in rule_index)
    run: Run = {
        "tool": {"driver": {"name": "rlm audit", "version": version, "rules": rules}},
        "originalUriBaseIds": {SRCROOT: {"uri": folder_uri(report.root_dir),
                                         "description": {"text": "The repository root."}}},
        "invocations": [{"executionSuccessful": not notes, "exitCode": report.exit_code,
                         "toolExecutionNotifications": notes}],
        "results": results,
        "properties": {"totals": report.totals.to_dict()},
    }
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def sarif_text(report: AuditReport, version: str) -> str:
    """The SARIF 2.1.0 log of an audit as JSON text (RFC 8259: ``text.strict_json``)."""
    return strict_json(sarif_log(report, version))
