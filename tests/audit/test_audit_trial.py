"""``rlm audit`` pull-request features tried as a hostile pull request would (the trial of issues
47 and 48), through the command against the scripted server: file names that are not UTF-8 or
hold a newline, renamed and deleted files under ``--changed-since`` from a subfolder."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.audit.scripted import checklist_text, script_model
from tests.audit.test_audit_ci import flags, git
from tests.support.cli import run_rlm
from tests.support.fake_llm import FakeLLM

EVAL = "import os\nx = eval('1')\n"


@pytest.mark.skipif(sys.platform != "linux", reason="file names of any bytes: Linux file systems")
def test_changed_since_with_hostile_file_names_from_a_subfolder(tmp_path: Path, llm: FakeLLM) -> None:
    repo = tmp_path / "repo"
    svc = repo / "svc"
    svc.mkdir(parents=True)
    (svc / "rlm-audit.toml").write_text(checklist_text(["no-eval"]))
    (svc / "old_name.py").write_text("def r():\n    return 1\n")
    (svc / "gone.py").write_text("y = 1\n")
    (svc / "same.py").write_text(EVAL)  # unchanged: not reported
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    git(repo, "mv", "svc/old_name.py", "svc/new name é.py")
    git(repo, "rm", "-q", "svc/gone.py")
    (svc / "new name é.py").write_text("def r():\n    return eval('1')\n")
    with open(os.path.join(os.fsencode(svc), b"bad\xffname.py"), "w") as fh:  # not UTF-8
        fh.write(EVAL)
    (svc / "nl\nname.py").write_text(EVAL)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "two")
    script_model(llm)
    res = run_rlm("audit", ".", *flags(llm), "--changed-since", "HEAD~1", "--json", cwd=svc)
    assert res.code == 8, res.stderr
    doc = json.loads(res.stdout)
    assert doc["changed_since"]["files"] == ["bad\ufffdname.py", "new name é.py", "nl\ufffdname.py"]
    found = sorted((f["path"], f["start_line"]) for c in doc["checks"] for f in c["findings"])
    assert found == [("svc/bad\ufffdname.py", 2), ("svc/new name é.py", 2), ("svc/nl\ufffdname.py", 2)]


def test_lone_surrogates_in_a_corpus_json_file_and_in_repl_output_are_no_crash(tmp_path: Path,
                                                                               llm: FakeLLM) -> None:
    """A ``"\\ud800"`` escape in a corpus JSON file (shown in the corpus summary) and printed by
    the model's code reach the next request as U+FFFD, not an internal error."""
    from tests.support.fake_llm import repl

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "data.json").write_text('{"a": "\\ud800 x"}\n')
    llm.script("root", repl("print(data['data.json']['a'])"), repl("FINAL(data['data.json']['a'])"))
    res = run_rlm("ask", "c", "What is a?", *flags(llm), "--mode", "rlm", "--json", cwd=tmp_path)
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout)["answer"] in ("\ufffd x", "\ud800 x")
    sent = json.dumps(llm.requests, ensure_ascii=False)
    assert "\ufffd x" in sent and "\ud800" not in sent
    # the plain answer (served by the response cache): U+FFFD on stdout
    res = run_rlm("ask", "c", "What is a?", *flags(llm), "--mode", "rlm", cwd=tmp_path)
    assert res.code == 0 and res.stdout.strip() == "\ufffd x", res.stderr


@pytest.mark.parametrize("before, after, line, moved_to", [
    # code appended after a finding on a file's last line (a blank line, then a function)
    (["import pickle", "x = pickle.loads(b)"], ["import pickle", "x = pickle.loads(b)", "", "", "def g():", "    pass"],
     2, 2),
    # a header and a blank line put above a finding on a file's first line
    (["x = pickle.loads(b)", "y = 1"], ["# header", "", "x = pickle.loads(b)", "y = 1"], 1, 3),
])
def test_fingerprint_of_a_finding_at_a_file_edge_survives_code_added_past_a_blank_line(
        before: list[str], after: list[str], line: int, moved_to: int) -> None:
    """A file's edge counts as a blank line: the commonest change, a function appended after a
    blank line, keeps the fingerprint of a finding on the old last line."""
    from rlm_cli.audit.findings import fingerprint

    assert fingerprint("c", "p.py", after, moved_to, moved_to, 0) == fingerprint("c", "p.py", before, line, line, 0)
