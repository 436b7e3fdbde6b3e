"""The audit's verdicts (``rlm_cli.audit.verdicts``): expectations per type, the support-verdict
hook, and the exit code's ranking; the checklist's defaults and the default path."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from rlm_cli.audit.checklist import Check, default_path, parse_check, read_checklist
from rlm_cli.audit.run import check_question, path_prefix, scope_matcher
from rlm_cli.audit.verdicts import CheckOutcome, Evidence, Verdict, decide, exit_code, meets
from rlm_cli.errors import UsageError


def check(**fields: Any) -> Check:
    row = {"id": "c", "question": "q?", **fields}
    return parse_check(row, 1, "t.toml")


def outcome(value: Any, **more: Any) -> CheckOutcome:
    return CheckOutcome(str(value), value, **more)


@pytest.mark.parametrize(("fields", "value", "passed"), [
    ({"type": "bool", "expect": False}, False, True), ({"type": "bool", "expect": False}, True, False),
    ({"type": "int", "max": 0}, 0, True), ({"type": "int", "max": 0}, 3, False), ({"type": "int", "min": 2}, 1, False),
    ({"type": "int", "equals": 4}, 4, True), ({"type": "number", "equals": 0.3}, 0.1 + 0.2, True),
    ({"type": "number", "min": 1, "max": 2}, 2.5, False), ({"type": "list", "empty": True}, [], True),
    ({"type": "list", "empty": True}, ["a"], False), ({"type": "list", "empty": False}, [], False),
    ({"type": "list", "max": 1}, ["a", "b"], False), ({"type": "locations", "min": 1}, ["a.py:1"], True),
    ({"type": "json", "equals": {"a": [1]}}, {"a": [1]}, True), ({"type": "json", "equals": {"a": 1}}, {"a": 2}, False),
    ({"type": "text", "equals": "yes"}, "yes", True), ({"type": "int"}, 7, True),
    ({"type": "int", "equals": 1}, True, False),  # a bool is no int
])
def test_expectations(fields: dict[str, Any], value: Any, passed: bool) -> None:
    assert meets(check(**fields), value)[0] is passed


def test_an_unsupported_answer_never_passes_and_errors_partial_runs_and_ill_typed_answers_are_errors() -> None:
    c = check(type="bool", expect=False)
    assert decide(c, outcome(False, unsupported=True), lambda p: True).status == "unsupported"
    assert decide(c, outcome(False), lambda p: True).status == "pass"
    c = check(type="int", max=0)
    assert decide(c, CheckOutcome(None, error="boom", run_code=4), lambda p: True).run_code == 4
    v = decide(c, CheckOutcome("x", stopped_at="max_iterations", run_code=5), lambda p: True)
    assert (v.status, v.run_code, v.reason) == ("error", 5, "stopped at the iteration limit without a final answer")
    v = decide(c, CheckOutcome("x", stopped_at="cost", run_code=6), lambda p: True)
    assert (v.status, v.run_code, v.reason) == ("error", 6, "stopped at the cost budget without a final answer")
    v = decide(c, outcome(None, problem="it is not a whole number"), lambda p: True)
    assert v.status == "error" and "not a whole number" in v.reason


def test_locations_outside_the_check_scope_are_dropped() -> None:
    c = check(type="locations", empty=True, include=["src/**"], exclude=["src/tests/**"])
    v = decide(c, outcome(["src/a.py:3", "src/tests/t.py:1", "docs/x.md:2"]), scope_matcher(c))
    assert v.status == "fail" and v.locations == [("src/a.py", 3, 3)]
    assert "only files matching src/**" in check_question(c) and "no files matching src/tests/**" in check_question(c)


def test_a_finding_rests_on_lines_read_with_code_never_on_a_lead_it_did_not_examine() -> None:
    """Issue 48 item 3: a ``bool`` check's place is a ``grep``/``read_file`` hit, cited ones first."""
    c = check(type="bool", expect=False)
    seen = (Evidence("cli/opts.py", 323, 323, ("leads",)), Evidence("net/session.py", 304, 304, ("grep",)),
            Evidence("net/session.py", 315, 315, ("grep", "leads"), cited=True))
    v = decide(c, outcome(True, evidence=seen), lambda p: True)
    assert v.status == "fail" and v.locations == [("net/session.py", 315, 315), ("net/session.py", 304, 304)]
    only_leads = decide(c, outcome(True, evidence=seen[:1]), lambda p: True)
    assert only_leads.status == "fail" and only_leads.locations == []


def test_exit_code_ranks_and_severities() -> None:
    err, warn, note = check(severity="error"), check(severity="warning"), check(severity="note")
    fail, ok = Verdict("fail", ""), Verdict("pass", "")
    assert exit_code([(err, ok), (warn, fail)]) == 0
    assert exit_code([(err, fail)]) == 8
    assert exit_code([(warn, fail)], "warning") == 8 and exit_code([(note, fail)], "warning") == 0
    assert exit_code([(note, Verdict("unsupported", ""))], "note") == 8
    assert exit_code([(err, Verdict("error", "", 5)), (err, Verdict("error", "", 6))]) == 6
    assert exit_code([(err, fail), (err, Verdict("error", "", 6))]) == 8
    assert exit_code([(note, Verdict("error", "", 4)), (err, fail)]) == 4  # a provider failure counts always
    assert exit_code([(warn, Verdict("error", "", 5))]) == 0


def test_checklist_defaults_and_where_it_is_looked_for(tmp_path: Path) -> None:
    c = check()
    assert (c.type, c.severity, c.has_expect, c.expectation()) == ("text", "error", False, "")
    assert check(type="list", min=1, max=3).expectation() == "count >= 1, count <= 3"
    assert default_path([str(tmp_path)]) == tmp_path / "rlm-audit.toml"
    (tmp_path / "a.py").write_text("x = 1\n")
    assert default_path([str(tmp_path / "a.py")]) == tmp_path / "rlm-audit.toml"
    assert default_path([str(tmp_path / "src" / "*.py")]) == tmp_path / "rlm-audit.toml"
    f = tmp_path / "c.toml"
    f.write_text('# checks\n\n[[check]]\nid = "one"\nquestion = "q?"\n\n[[check]]\n  id = "two"\nquestion = "r?"\n')
    assert [(c.id, c.line) for c in read_checklist(f).checks] == [("one", 4), ("two", 8)]
    f.write_text('[audit]\nx = 1\n')
    with pytest.raises(UsageError, match="unknown table or key 'audit'"):
        read_checklist(f)


def test_report_paths_are_from_the_repository_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 48 item 4: the git top level, else the CI checkout under which the folder lies, else
    the working folder; a folder outside it keeps its absolute path."""
    for name in ("GITHUB_WORKSPACE", "CI_PROJECT_DIR"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "src").mkdir()
    monkeypatch.chdir(tmp_path)
    assert path_prefix(["src"]) == "src/" and path_prefix(["."]) == "" and path_prefix(["src", "."]) == ""
    assert path_prefix([str(tmp_path.parent)]) == str(tmp_path.parent) + "/"
    monkeypatch.chdir(tmp_path / "src")
    assert path_prefix(["."]) == ""  # no repository: from the working folder
    monkeypatch.setenv("CI_PROJECT_DIR", str(tmp_path))
    assert path_prefix(["."]) == "src/"
    subprocess.run(["git", "init", "-q", str(tmp_path / "src")], check=True)
    assert path_prefix(["."]) == ""  # the git top level wins


def test_an_audit_whose_model_has_no_key_exits_3_not_1() -> None:
    """The audit ranks exit codes with the one ranker (``errors.worst_exit_code``): a check whose
    run found no model (3) is worse than a failed check (8) and is not reported as internal (1)."""
    from rlm_cli.audit.checklist import Check
    from rlm_cli.audit.verdicts import Verdict, exit_code

    def check(cid: str) -> Check:
        return Check(id=cid, question="q", type="bool", line=1)

    no_model = Verdict("error", "no model")
    no_model.run_code = 3
    assert exit_code([(check("a"), Verdict("fail", "x")), (check("b"), no_model)]) == 3
