"""``rlm audit`` on every pull request (issue 48), through the command against the scripted server:
its own reports are not corpus on a second run, ``--changed-since REF`` asks only about the files
a change touched, a CI log gets progress lines and retries, a cancelled run still writes the reports
of the checks that finished, and ``$GITHUB_OUTPUT`` gets the step's outputs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
from pathlib import Path

from junitparser import JUnitXml

from tests.audit.scripted import checklist_text, json_repo, script_model
from tests.audit.test_audit_cli import audit_validator, sarif_validator
from tests.support.cli import rlm_argv, run_rlm
from tests.support.fake_llm import FakeLLM, Reply


def flags(llm: FakeLLM) -> list[str]:
    return ["--model", "openai/root", "--api-base", llm.url, "--policy", "standard"]


def git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=root, env=env, check=True,
                          capture_output=True, text=True).stdout


def read_outputs(path: Path) -> dict[str, str]:
    """``$GITHUB_OUTPUT`` as GitHub reads it: ``NAME<<DELIMITER`` ... ``DELIMITER`` blocks."""
    text, out = path.read_text(), {}
    text = text.removeprefix("earlier=1\n")
    for m in re.finditer(r"^([\w-]+)<<(ghadelimiter_[\w-]+)\n(.*?)\n\2$", text, re.S | re.M):
        out[m.group(1)] = m.group(3)
    assert text.count("<<") == len(out)
    return out


def test_a_second_run_in_the_same_folder_sees_the_same_files(tmp_path: Path, llm: FakeLLM) -> None:
    repo = json_repo(tmp_path)
    (repo / "rlm-audit.toml").write_text(checklist_text(["enough-files", "no-eval", "summary"]))
    script_model(llm)
    args = ["audit", ".", *flags(llm), "--sarif", "rlm.sarif", "--junit", "rlm-junit.xml", "--json", "-o", "audit.json",
            "--codequality", "rlm-cq.json"]
    first = run_rlm(*args, cwd=repo)
    assert first.code == 0, first.stderr
    doc1 = json.loads((repo / "audit.json").read_text())
    (repo / "old").mkdir()  # reports of earlier runs under other names: told by their content
    (repo / "old" / "earlier.sarif").write_text((repo / "rlm.sarif").read_text())
    (repo / "old" / "earlier.json").write_text((repo / "audit.json").read_text())
    (repo / "old" / "junit.xml").write_text((repo / "rlm-junit.xml").read_text())
    second = run_rlm(*args, cwd=repo)
    assert second.code == 0, second.stderr
    doc2 = json.loads((repo / "audit.json").read_text())
    assert doc1["corpus"]["files"] == doc2["corpus"]["files"] == 5
    values = [{c["id"]: c["value"] for c in d["checks"]} for d in (doc1, doc2)]
    assert values[0] == values[1] and values[1]["summary"] == {"files": 5} and values[1]["no-eval"] == []
    assert "left out 7 report file(s) rlm wrote" in second.stderr and "old/earlier.sarif" in second.stderr
    assert doc2["totals"]["from_cache"]  # the same corpus: every check served by the response cache
    sarif = json.loads((repo / "rlm.sarif").read_text())
    assert sarif["runs"][0]["results"] == []


def test_changed_since_reports_only_the_changed_file(tmp_path: Path, llm: FakeLLM) -> None:
    repo = json_repo(tmp_path)
    (tmp_path / "audit.toml").write_text(checklist_text(["no-eval", "enough-files"]))
    (repo / "encoder.py").write_text((repo / "encoder.py").read_text() + "\nx = eval('1')\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    (repo / "decoder.py").write_text((repo / "decoder.py").read_text() + "\ny = eval('2')\n")
    git(repo, "commit", "-qam", "two")
    script_model(llm)
    outputs = tmp_path / "github_output"
    res = run_rlm("audit", "repo", "--checklist", "audit.toml", *flags(llm), "--changed-since", "HEAD~1",
                  "--json", cwd=tmp_path, env={"GITHUB_OUTPUT": str(outputs)})
    assert res.code == 8, res.stderr
    doc = json.loads(res.stdout)
    assert not list(audit_validator().iter_errors(doc))
    assert doc["changed_since"]["files"] == ["decoder.py"] and doc["corpus"]["files"] == 5  # all read, one asked about
    no_eval = next(c for c in doc["checks"] if c["id"] == "no-eval")
    assert no_eval["status"] == "fail" and [loc["file"] for loc in no_eval["locations"]] == ["decoder.py"]  # from the repository root
    asked = next(r for r in llm.requests if "eval()" in json.dumps(r))
    assert "changed since HEAD~1: decoder.py" in json.dumps(asked)
    assert read_outputs(outputs) == {"passed": "1", "failed": "1", "errors": "0", "new": "1",
                                     "incomplete": "false", "exit-code": "8"}
    # nothing changed: every check passes, no model is asked, no corpus loaded
    sent = len(llm.requests)
    res = run_rlm("audit", "repo", "--checklist", "audit.toml", *flags(llm), "--changed-since", "HEAD", "--json",
                  cwd=tmp_path)
    assert res.code == 0 and len(llm.requests) == sent, res.stderr
    assert {c["status"] for c in json.loads(res.stdout)["checks"]} == {"pass"}
    assert "0 changed file(s)" in res.stderr
    for ref, where in (("no-such-ref", "repo"), ("HEAD", str(json_repo(tmp_path / "bare")))):
        res = run_rlm("audit", where, "--checklist", "audit.toml", *flags(llm), "--changed-since", ref, cwd=tmp_path)
        assert res.code == 2 and len(res.stderr.strip().splitlines()) <= 2, res.stderr
        assert "--changed-since" in res.stderr and "Traceback" not in res.stderr


def test_progress_lines_retries_and_sigterm_writes_the_finished_checks(tmp_path: Path, llm: FakeLLM) -> None:
    json_repo(tmp_path)
    (tmp_path / "audit.toml").write_text(checklist_text(["enough-files", "no-eval"]))
    script_model(llm, delay_s=0.3)
    llm.script("root", Reply(status=503, text="busy"))  # the first request fails once: a retry
    outputs = tmp_path / "github_output"
    cmd = [*rlm_argv(), "audit", "repo", "--checklist", "audit.toml", *flags(llm), "--sarif", "out.sarif",
           "--junit", "out.xml", "--json", "-o", "out.json", "--retries", "2"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "RLM_PROGRESS_EVERY": "0.2", "GITHUB_OUTPUT": str(outputs)})
    lines: list[str] = []
    first_done = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("[1/2]"):
                first_done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert first_done.wait(120), "".join(lines)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 143
    reader.join(10)
    err = "".join(lines)
    assert re.search(r"progress: 0/2 checks done, \d+ s: enough-files iteration \d", err), err
    assert "retrying (attempt 2)" in err and "1 retry" in err
    sarif = json.loads((tmp_path / "out.sarif").read_text())
    assert not list(sarif_validator().iter_errors(sarif))
    inv = sarif["runs"][0]["invocations"][0]
    assert inv["executionSuccessful"] is False and inv["exitCode"] == 143
    assert "cancelled (SIGTERM)" in inv["toolExecutionNotifications"][-1]["message"]["text"]
    cases = [case.name for suite in JUnitXml.fromfile(str(tmp_path / "out.xml")) for case in suite]
    assert cases == ["enough-files"]
    doc = json.loads((tmp_path / "out.json").read_text())
    assert not list(audit_validator().iter_errors(doc))
    assert doc["status"] == "interrupted" and doc["incomplete"] == {"signal": "SIGTERM", "not_run": ["no-eval"]}
    assert read_outputs(outputs)["incomplete"] == "true"


def test_rlm_reports_are_told_by_their_first_bytes() -> None:
    from rlm_cli.corpus.selfreports import is_rlm_report

    ours = [b'{\n  "$schema": "x",\n  "version": "2.1.0",\n  "runs": [\n    {\n      "tool": {\n        "driver": {\n'
            b'          "name": "rlm audit",', b'<?xml version="1.0"?>\n<testsuites name="rlm audit" tests="2">',
            b'{\n  "schema": "audit-result.v1",', b'{"schema": "ask-result.v1", "answer": "x"}\n',
            b'[\n  {\n    "type": "issue",\n    "engine_name": "rlm audit",\n    "check_name": "no-eval",']
    theirs = [b'{"runs": [{"tool": {"driver": {"name": "CodeQL"}}}]}', b'<testsuites name="pytest">',
              b'{"name": "rlm audit", "schema": "audit-result.v1"}', b'[{"check_name": "eslint", "engine_name": "eslint"}]']
    assert all(is_rlm_report(h) for h in ours) and not any(is_rlm_report(h) for h in theirs)


def test_github_output_is_multiline_safe_and_ci_step_variables_share_a_model_host(tmp_path: Path) -> None:
    from rlm_cli.audit.view import github_output
    from rlm_cli.models.shared import fingerprint
    from rlm_cli.output.findings import AuditReport, Totals

    report = AuditReport([], Totals(3, 1, 1, 0, 1, 0, 0, None), 8, "error", "rlm-audit.toml", str(tmp_path), "")
    out = tmp_path / "out"
    out.write_text("earlier=1\n")
    github_output(report, Path("a\nb.sarif"), out)
    assert read_outputs(out) == {"passed": "1", "failed": "2", "errors": "0", "new": "0", "incomplete": "false",
                                 "exit-code": "8", "sarif": "a\nb.sarif"}
    base = {"PATH": "/bin", "OPENAI_API_KEY": "k1"}
    step1 = {**base, "GITHUB_OUTPUT": "/r/_temp/1", "GITHUB_STEP_SUMMARY": "/r/s1", "INPUT_PATHS": "a"}
    step2 = {**base, "GITHUB_OUTPUT": "/r/_temp/2", "GITHUB_STEP_SUMMARY": "/r/s2", "GITHUB_ACTION": "__run_2"}
    assert fingerprint(step1) == fingerprint(step2) == fingerprint(base)
    assert fingerprint({**base, "OPENAI_API_KEY": "k2"}) != fingerprint(base)
