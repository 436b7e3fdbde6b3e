"""The pieces of the audit's reports that need no run: fingerprints (occurrences, moved lines),
placement, report paths and URIs of files outside the repository root, XML 1.0 and RFC 8259 text
whatever a corpus holds."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from rlm_cli.answer_types import AnswerType
from rlm_cli.audit.checklist import parse_check
from rlm_cli.audit.findings import ReportPaths, fingerprint, place
from rlm_cli.audit.verdicts import Verdict
from rlm_cli.output.findings import (
    FINGERPRINT_KEY,
    AuditReport,
    CheckReport,
    Finding,
    Region,
    Suppression,
    Totals,
)
from rlm_cli.output.reports.codequality import codequality_issues
from rlm_cli.output.reports.github import github_commands
from rlm_cli.output.reports.junit import xml_text
from rlm_cli.output.reports.sarif import artifact_location, folder_uri, sarif_text
from rlm_cli.output.reports.text import strict_json
from tests.audit.test_audit_cli import sarif_validator


def test_fingerprints_ignore_line_numbers_and_whitespace_and_count_identical_texts() -> None:
    lines = ["a", "eval(x)", "b", "a", "eval(x)", "b"]
    first, second = fingerprint("c", "p.py", lines, 2, 2, 0), fingerprint("c", "p.py", lines, 5, 5, 0)
    assert first == second and first.endswith(":0")  # the same text and neighbours: told apart by occurrence
    moved = ["# new"] + [f"  {ln}  " for ln in lines]
    assert fingerprint("c", "p.py", moved, 3, 3, 0) == first
    assert fingerprint("d", "p.py", lines, 2, 2, 0) != first and fingerprint("c", "q.py", lines, 2, 2, 0) != first
    check = parse_check({"id": "c", "question": "q?", "type": "locations", "empty": True}, 3, "t.toml")
    found = place(check, Verdict("fail", "expected no items", 0, [("p.py", 2, 2), ("p.py", 5, 5)]), "m",
                  ReportPaths("/r/svc", "/r"), "/r/rlm-audit.toml", lambda p: lines)
    assert [(f.path, f.region.start_line) for f in found] == [("svc/p.py", 2), ("svc/p.py", 5)]
    assert [f.fingerprint.rsplit(":", 1)[1] for f in found] == ["0", "1"]
    assert found[0].fingerprint.split(":")[0] == found[1].fingerprint.split(":")[0]


def test_a_check_with_nothing_read_is_placed_at_its_checklist_line(tmp_path: Path) -> None:
    (tmp_path / "rlm-audit.toml").write_text("\n\n[[check]]\nid = \"c\"\n")
    check = dataclasses.replace(parse_check({"id": "c", "question": "q?", "type": "bool", "expect": False}, 1,
                                            "t.toml"), line=4)
    (f,) = place(check, Verdict("fail", "expected false"), "m", ReportPaths(str(tmp_path), str(tmp_path)),
                 str(tmp_path / "rlm-audit.toml"), lambda p: None)
    assert (f.path, f.region.start_line, f.where) == ("rlm-audit.toml", 4, "checklist")
    # a line not known (0): the finding and an undecided check's annotation both point at line 1 (one rule)
    (g,) = place(dataclasses.replace(check, line=0), Verdict("fail", "expected false"), "m",
                 ReportPaths(str(tmp_path), str(tmp_path)), str(tmp_path / "rlm-audit.toml"), lambda p: None)
    undecided = CheckReport("c", "q?", AnswerType.BOOL, "error", "", "error", "the run failed", None, None, 0)
    assert g.region == Region(1, 1)
    assert github_commands(_report(undecided)).startswith("::error file=rlm-audit.toml,line=1,endLine=1,")
    assert place(check, Verdict("pass", "ok"), "m", ReportPaths("/r", "/r"), "/r/x.toml", lambda p: None) == []


def test_uris_are_encoded_references_from_the_root_or_file_uris_outside_it() -> None:
    paths = ReportPaths("/work", "/work/repo")
    assert paths.report_path("repo/a b.py") == "a b.py" and paths.report_path("../x.py") == "/x.py"
    assert artifact_location("svc/sp ace %41 #x.py") == {"uri": "svc/sp%20ace%20%2541%20%23x.py",
                                                         "uriBaseId": "%SRCROOT%"}
    assert artifact_location("uni-é-中.py")["uri"] == "uni-%C3%A9-%E4%B8%AD.py"
    assert artifact_location("comma,colon;name.py")["uri"] == "comma%2Ccolon%3Bname.py"
    assert artifact_location("a:b.py")["uri"] == "a%3Ab.py"  # never read as a scheme
    assert artifact_location("/tmp/a b.py") == {"uri": "file:///tmp/a%20b.py"}  # no uriBaseId (SARIF1004)
    assert folder_uri("/work/repo") == "file:///work/repo/" and folder_uri("/") == "file:///"


@pytest.mark.parametrize("bad", ["\x1b[31m", "\x00", "\x08", "\x0b", "\x1f", "\ud800", "\udfff", "\ufffe", "\uffff"])
def test_xml_text_escapes_what_xml_1_0_cannot_hold_visibly(bad: str) -> None:
    text = xml_text(f"a{bad}b\tc\n")
    root = ET.fromstring(f"<x>{text}</x>".encode("utf-8", "surrogatepass"))
    assert root.text is not None and root.text.startswith("a\\") and root.text.endswith("b\tc\n")
    assert xml_text("\x1b") == "\\x1b" and xml_text("\ud800") == "\\ud800"


def test_strict_json_has_no_nan_and_no_raw_surrogate() -> None:
    text = strict_json({"v": [float("nan"), float("inf"), -float("inf")], "s": "\ud800x"}, indent=None)
    text.encode("utf-8")  # a raw lone surrogate could not be encoded
    assert json.loads(text) == {"v": ["NaN", "Infinity", "-Infinity"], "s": "\ud800x"}
    assert "NaN," not in text and "\\ud800" in text


def _report(*checks: CheckReport) -> AuditReport:
    return AuditReport(list(checks), Totals(len(checks), 0, 1, 1, 0, 2, 0, None), 8, "error", "rlm-audit.toml",
                       "/r", "")


def test_every_format_reads_the_record_baseline_states_and_suppressions_included() -> None:
    """What ``--baseline`` and inline suppressions set on a :class:`Finding` reaches each format:
    SARIF's ``baselineState`` and ``suppressions`` (valid by the OASIS schema); no annotation and no
    Code Quality issue for a suppressed one; an undecided ``warning`` check is a ``::warning``."""
    region = Region(3, 3)
    new = Finding("c", "a.py", region, "f1:0", "expected no items", "error")
    kept = dataclasses.replace(new, fingerprint="f2:0", baseline_state="unchanged")
    quiet = dataclasses.replace(new, fingerprint="f3:0", suppression=Suppression("inSource", "reviewed"))
    failing = CheckReport("c", "q?", AnswerType.LOCATIONS, "error", "count = 0", "fail", "expected no items", "[]", [], 2,
                          findings=[new, kept, quiet], fails_job=True)
    undecided = CheckReport("w", "r?", AnswerType.INT, "warning", "", "error", "the run failed", None, None, 7, exit_code=5)
    report = _report(failing, undecided)
    sarif = json.loads(sarif_text(report, "0"))
    assert not list(sarif_validator().iter_errors(sarif))
    results = sarif["runs"][0]["results"]
    assert [r["partialFingerprints"] for r in results] == [{FINGERPRINT_KEY: f} for f in ("f1:0", "f2:0", "f3:0")]
    assert "baselineState" not in results[0] and results[1]["baselineState"] == "unchanged"
    assert results[2]["suppressions"] == [{"kind": "inSource", "justification": "reviewed"}]
    commands = github_commands(report).splitlines()
    assert len(commands) == 2  # the finding known from the baseline and the suppressed one are not annotated
    assert commands[0].startswith("::error file=a.py,line=3,") and "::fail: expected no items" in commands[0]
    assert commands[1].startswith("::warning file=rlm-audit.toml,line=7,")
    assert [i["fingerprint"] for i in codequality_issues(report)] == ["f1:0", "f2:0"]
