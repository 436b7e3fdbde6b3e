"""``rlm audit --baseline`` and inline suppressions through the command (issue 48), with the
scripted model answering ``no-eval`` (a ``locations`` check, ``empty = true``) by a real grep:
three findings in two files are a failing run (exit 8); against that run's report, one new
finding fails and the old three are ``unchanged`` even after lines are inserted above them; a new
finding accepted by an ``rlm-audit: ignore[no-eval]`` comment, with one old finding gone
(``absent``), exits 0; a baseline that is not a report is exit 2 before anything loads."""

from __future__ import annotations

import json
from pathlib import Path

from junitparser import JUnitXml, Skipped

from tests.audit.scripted import checklist_text, script_model
from tests.audit.test_audit_cli import audit_validator, flags, sarif_validator
from tests.audit.test_audit_reports import multitool, multitool_errors
from tests.support.cli import run_rlm
from tests.support.fake_llm import FakeLLM

A_PY = 'def f(s):\n    return eval(s)\n\n\ndef g(s):\n    return eval(s + "1")\n'
B_PY = 'import os\nx = eval("1")\ny = 2\nz = 3\n'


def states(doc: dict) -> dict[tuple[str, int], tuple[str | None, bool]]:
    """``(path, line) -> (baseline_state, suppressed)`` of every finding of the document."""
    return {(f["path"], f["start_line"]): (f["baseline_state"], f["suppression"] is not None)
            for c in doc["checks"] for f in c["findings"]}


def test_baseline_new_unchanged_absent_and_a_suppressed_finding(tmp_path: Path, llm: FakeLLM) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text(A_PY)
    (repo / "b.py").write_text(B_PY)
    (tmp_path / "checks.toml").write_text(checklist_text(["no-eval"]))
    script_model(llm)
    audit = ("audit", "repo", "--checklist", "checks.toml", *flags(llm))

    # 1. three findings in two files: exit 8; the reports are the baseline of the runs below
    res = run_rlm(*audit, "--sarif", "old.sarif", "--json", "-o", "old.json", cwd=tmp_path)
    assert res.code == 8, res.stderr
    old = json.loads((tmp_path / "old.json").read_text())
    assert states(old) == {("repo/a.py", 2): (None, False), ("repo/a.py", 6): (None, False),
                           ("repo/b.py", 2): (None, False)}

    # 2. lines inserted above the old findings, one new eval (with a bare marker: it accepts nothing)
    (repo / "a.py").write_text("# a header\n\n" + A_PY)
    (repo / "b.py").write_text(B_PY + "\n\nw = eval('4')  # rlm-audit: ignore\n")
    summary = tmp_path / "summary.md"
    res = run_rlm(*audit, "--baseline", "old.sarif", "--sarif", "new.sarif", "--json", "-o", "new.json", "--github",
                  cwd=tmp_path, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert res.code == 8, res.stderr
    doc = json.loads((tmp_path / "new.json").read_text())
    assert not list(audit_validator().iter_errors(doc))
    assert states(doc) == {("repo/a.py", 4): ("unchanged", False), ("repo/a.py", 8): ("unchanged", False),
                           ("repo/b.py", 2): ("unchanged", False), ("repo/b.py", 7): ("new", False)}
    assert doc["baseline"] == "old.sarif" and doc["absent"] == []
    assert doc["totals"]["findings"] == {"findings": 4, "failing": 1, "new": 1, "unchanged": 3, "absent": 0,
                                         "suppressed": 0}
    # --github annotates the new finding only; stderr and the job summary say how many of each
    assert [line.split(",")[0] for line in res.stdout.splitlines()] == ["::error file=repo/b.py"]
    assert "4 findings, 1 failing (1 new, 3 unchanged, 0 absent against the baseline; 0 suppressed)" in res.stderr
    assert "1 new, 3 unchanged, 0 absent against the baseline" in summary.read_text()
    assert "repo/b.py:7: 'rlm-audit: ignore' without [CHECK-ID] accepts nothing" in res.stderr
    sarif = json.loads((tmp_path / "new.sarif").read_text())
    assert not list(sarif_validator().iter_errors(sarif))
    assert sorted(r["baselineState"] for r in sarif["runs"][0]["results"]) == ["new", "unchanged", "unchanged",
                                                                               "unchanged"]

    # 3. against the JSON report of run 1: nothing new fails; a new eval accepted by a comment,
    #    one old eval gone
    (repo / "a.py").write_text(A_PY.replace('eval(s + "1")', 's + "1"'))
    (repo / "b.py").write_text(B_PY)
    (repo / "c.js").write_text("// fixtures\nlet v = eval(x); // rlm-audit: ignore[no-eval] test fixture only\n")
    res = run_rlm(*audit, "--baseline", "old.json", "--sarif", "last.sarif", "--junit", "last.xml", "--json",
                  cwd=tmp_path)
    assert res.code == 0, res.stderr
    assert "fail (accepted)" in res.stderr  # the table
    (case,) = [case for suite in JUnitXml.fromfile(str(tmp_path / "last.xml")) for case in suite]
    assert [type(r) for r in case.result] == [Skipped] and case.result[0].message.startswith("fail, accepted: ")
    doc = json.loads(res.stdout)
    assert not list(audit_validator().iter_errors(doc))
    assert doc["status"] == "pass" and doc["checks"][0]["status"] == "fail"  # the check still says what it found
    assert states(doc) == {("repo/a.py", 2): ("unchanged", False), ("repo/b.py", 2): ("unchanged", False),
                           ("repo/c.js", 2): ("new", True)}
    accepted = next(f for f in doc["checks"][0]["findings"] if f["path"] == "repo/c.js")
    assert accepted["suppression"] == {"kind": "inSource", "reason": "test fixture only"}
    assert [(f["path"], f["start_line"], f["baseline_state"]) for f in doc["absent"]] == [("repo/a.py", 6, "absent")]
    sarif = json.loads((tmp_path / "last.sarif").read_text())
    assert not list(sarif_validator().iter_errors(sarif))
    results = sarif["runs"][0]["results"]
    assert [r.get("suppressions") for r in results if r["baselineState"] == "new"] == [
        [{"kind": "inSource", "justification": "test fixture only"}]]
    gone = [r for r in results if r["baselineState"] == "absent"]
    assert len(gone) == 1 and gone[0]["kind"] == "pass" and gone[0]["level"] == "none"
    assert gone[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "repo/a.py"
    if multitool() is not None:  # Microsoft's validator, where installed (.ci/run installs it)
        assert multitool_errors([tmp_path / "new.sarif", tmp_path / "last.sarif"], tmp_path) == {
            "new.sarif": [], "last.sarif": []}


def test_a_baseline_that_is_not_a_report_is_exit_2_before_loading(tmp_path: Path, llm: FakeLLM) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text(A_PY)
    (tmp_path / "checks.toml").write_text(checklist_text(["no-eval"]))
    (tmp_path / "notes.json").write_text('{"a": 1}')
    for given, said in (("missing.sarif", "cannot read the baseline missing.sarif"),
                        ("notes.json", "the baseline notes.json is not a SARIF 2.1.0 log")):
        res = run_rlm("audit", "repo", "--checklist", "checks.toml", *flags(llm), "--baseline", given, cwd=tmp_path)
        assert res.code == 2 and said in res.stderr and "Traceback" not in res.stderr, res.stderr
        assert len([line for line in res.stderr.splitlines() if line.startswith("error:")]) == 1
        assert "corpus" not in res.stderr and not res.stdout
    assert not llm.requests
