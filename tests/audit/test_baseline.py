"""``--baseline`` (``rlm_cli.audit.baseline``): reading an earlier SARIF or ``--json`` report,
matching findings by fingerprint as a multiset, and the files it refuses (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlm_cli.audit.baseline import Baseline, compare, counted, read_baseline
from rlm_cli.audit.verdicts import Verdict
from rlm_cli.errors import UsageError
from rlm_cli.output.findings import FINGERPRINT_KEY, Finding, Region, Suppression


def finding(fp: str, path: str = "a.py", line: int = 3, check: str = "no-eval") -> Finding:
    return Finding(check, path, Region(line, line), fp, f"{check} at {path}:{line}", "error")


def sarif(results: list[dict], tool: str = "rlm audit") -> dict:
    return {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": tool}}, "results": results}]}


def result(fp: str, state: str | None = None, uri: str = "a.py", line: int = 3) -> dict:
    r = {"ruleId": "no-eval", "level": "warning", "message": {"text": "m"},
         "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri, "uriBaseId": "%SRCROOT%"},
                                             "region": {"startLine": line, "endLine": line + 1}}}],
         "partialFingerprints": {FINGERPRINT_KEY: fp}}
    if state:
        r["baselineState"] = state
    return r


def test_sarif_and_json_reports_are_read(tmp_path: Path) -> None:
    path = tmp_path / "old.sarif"
    path.write_text(json.dumps(sarif([result("f1"), result("f2", "absent"), result("f3", uri="b%20c.py", line=9),
                                      {"ruleId": "x", "message": {"text": "no fingerprint"}}])))
    base = read_baseline(path)
    assert base.kind == "sarif" and [f.fingerprint for f in base.findings] == ["f1", "f3"]  # absent: not a finding
    assert base.findings[0].region == Region(3, 4) and base.findings[0].level == "warning"
    doc = {"schema": "audit-result.v1", "checks": [
        {"id": "no-eval", "severity": "error", "findings": [
            {"check": "no-eval", "path": "a.py", "start_line": 3, "end_line": 3, "fingerprint": "f1",
             "message": "m", "level": "error", "baseline_state": "unchanged"},
            {"check": "no-eval", "path": "a.py", "start_line": 8, "end_line": 8, "fingerprint": "gone",
             "baseline_state": "absent"}]},
        {"id": "passing", "severity": "note"}]}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    base = read_baseline(path)
    assert base.kind == "json" and [(f.check, f.fingerprint) for f in base.findings] == [("no-eval", "f1")]


@pytest.mark.parametrize(("content", "said"), [
    (None, "cannot read the baseline"),
    (b"not json {", "is not JSON"),
    (b"\xff\xfe\x00", "is not JSON"),
    (b"[1, 2]", "is not a SARIF 2.1.0 log or an audit-result.v1 document"),
    (b'{"schema": "ask-result.v1", "answer": "x"}', "is not a SARIF 2.1.0 log"),
    (json.dumps(sarif([], tool="semgrep")).encode(), "SARIF log of another tool"),
    (b'{"schema": "audit-result.v1", "checks": 3}', "is a damaged report"),
    (b'{"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "rlm audit"}}, "results": [{"partialFingerprints":'
     b' {"rlmFindingHash/v1": "f"}}]}]}', "is a damaged report"),
    (b"[" * 100_000, "is not JSON"),
])
def test_files_that_are_not_a_report_are_usage_errors(tmp_path: Path, content: bytes | None, said: str) -> None:
    path = tmp_path / "old"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(UsageError, match=said):
        read_baseline(path)


def test_compare_matches_fingerprints_as_a_multiset_and_lists_the_absent() -> None:
    base = Baseline(Path("old"), "json", (finding("same"), finding("same"), finding("fixed", line=9),
                                          finding("moved", line=20)))
    now = [finding("same"), finding("moved", line=25), finding("same"), finding("same"), finding("added")]
    states, absent = compare(now, base)
    assert [f.baseline_state for f in states] == ["unchanged", "unchanged", "unchanged", "new", "new"]
    assert states[1].region == Region(25, 25)  # moved by inserted lines: the new place, still unchanged
    assert [(f.fingerprint, f.baseline_state) for f in absent] == [("fixed", "absent")]
    # a finding in a file this run did not read is not known to be gone
    _, absent_here = compare(now, base, lambda f: f.path != "a.py")
    assert absent_here == []
    assert [f.failing for f in states] == [False, False, False, True, True]
    accepted = Finding("c", "a.py", Region(1, 1), "s", "m", "error", baseline_state="new",
                       suppression=Suppression("inSource", "ok"))
    assert not accepted.failing
    # a failing check counts while one of its findings fails; its status is kept for the reports
    fail = Verdict("fail", "expected no items, got 2")
    assert counted(fail, states[:3]).status == "pass" and counted(fail, [accepted]).status == "pass"
    assert counted(fail, states).status == "fail" and counted(fail, []).status == "fail"
    assert counted(Verdict("error", "x"), [accepted]).status == "error"
