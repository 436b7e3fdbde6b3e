"""The audit's reports whatever the corpus holds (issues 47 and 48), through ``rlm audit`` with a
scripted model over a git repository whose audited folder is ``svc/``: file names with spaces,
``%``, ``#``, non-ASCII letters, commas, colons and semicolons (a text ``locations`` answer names
them); an answer quoting a coloured log line. One SARIF result per finding with fingerprints of
rlm's own that survive a line inserted at the top of a file; paths from the repository root;
JUnit that strict XML parsers read; the GitLab Code Quality report; SARIF valid by the OASIS
schema and by Microsoft's SARIF multitool (when installed: ``npm install -g
@microsoft/sarif-multitool``, or ``RLM_SARIF_MULTITOOL`` naming it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlparse
from xml.etree import ElementTree as ET

import pytest
from junitparser import Failure, JUnitXml

from tests.audit.test_audit_cli import audit_validator, sarif_validator
from tests.support.cli import run_rlm
from tests.support.fake_llm import FakeLLM, first_prompt, repl, turn

SPACE, UNI, COMMA, COLON = "sp ace %41 #x.py", "uni-é-中.py", "comma,colon;name.py", "co:lon.py"
#: check id -> (TOML of the check, code run first, code that ends the run)
CHECKS: dict[str, tuple[str, str, str]] = {
    "no-eval": ('type = "locations"\nempty = true\nquestion = "Where is eval called?"',
                "hits = grep(r'\\beval\\(', max_results=None)\nprint(len(hits))",
                "locs = [f\"{h['file']}:{h['line']}\" for h in hits]\nFINAL_VAR('locs')"),
    "tls-off": ('type = "bool"\nexpect = false\nseverity = "warning"\nquestion = "Is TLS verification off?"',
                "hits = grep(r'verify=False')\nprint(hits)", "FINAL(len(hits) > 0)"),
    "marked": ('type = "locations"\nempty = true\nseverity = "note"\nquestion = "Where is MARK written?"',
               "hits = grep(r'MARK', max_results=None)\nprint(hits)",
               "FINAL(', '.join(f\"{h['file']}:{h['line']}\" for h in hits))"),
    "colour": ('type = "text"\nequals = "ok"\nseverity = "note"\nquestion = "What does the log say?"',
               "hits = grep(r'ERROR')\nprint(hits[0]['text'])", "FINAL(hits[0]['text'])"),
}


def script(llm: FakeLLM) -> None:
    def answer(req: dict[str, Any]) -> str:
        asked = first_prompt(req)
        cid = next(c for c, spec in CHECKS.items() if spec[0].rsplit('question = "', 1)[1].rstrip('"') in asked)
        return repl(CHECKS[cid][1] if turn(req) == 0 else CHECKS[cid][2])
    llm.default("root", answer)


def make_repo(tmp_path: Path) -> Path:
    """``tmp_path/repo``, a git repository; the audited folder is ``repo/svc``."""
    repo = tmp_path / "repo"
    svc = repo / "svc"
    svc.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (svc / SPACE).write_text("import os\n\n\ndef f(x):\n    return eval(x)\n\n\ndef g(y):\n    return eval(y)\n")
    (svc / COMMA).write_text("# MARK\nvalue = eval('1')\n")
    (svc / COLON).write_text("x = 1  # MARK\n")
    (svc / UNI).write_text("import requests\n\n# MARK\nrequests.get('https://x', verify=False)\n")
    (svc / "app.log").write_text("\x1b[31mERROR\x1b[0m disk full\n")
    (svc / "rlm-audit.toml").write_text("".join(f'[[check]]\nid = "{cid}"\n{spec[0]}\n\n'
                                                for cid, spec in CHECKS.items()))
    (tmp_path / "out").mkdir()
    return svc


def multitool() -> str | None:
    """Microsoft's SARIF multitool: ``RLM_SARIF_MULTITOOL``, else ``sarif-multitool`` on PATH."""
    return os.environ.get("RLM_SARIF_MULTITOOL") or shutil.which("sarif-multitool")


def multitool_errors(files: list[Path], tmp_path: Path) -> dict[str, list[str]]:
    """The errors Microsoft's SARIF multitool finds in each of ``files`` (by file name; one run of
    the tool: it takes seconds to start): the rule ids of its own SARIF log's results of level
    ``error`` (SARIF1002 for a bad URI, SARIF1004 for a bad uriBaseId...)."""
    tool = multitool()
    assert tool is not None
    log = tmp_path / "validation.sarif"
    res = subprocess.run([tool, "validate", *map(str, files), "--output", str(log), "--log", "ForceOverwrite"],
                         capture_output=True, text=True, timeout=300, check=False)
    assert log.exists(), res.stdout + res.stderr
    found: dict[str, list[str]] = {f.name: [] for f in files}
    for run in json.loads(log.read_text("utf-8-sig"))["runs"]:
        for r in run.get("results") or []:
            if r.get("level", "warning") == "error":
                uri = r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
                found[Path(unquote(urlparse(uri).path)).name].append(r["ruleId"])
    return found


def audit(svc: Path, llm: FakeLLM, *more: str) -> Any:
    return run_rlm("audit", ".", "--model", "openai/root", "--api-base", llm.url, "--policy", "standard",
                   "--jobs", "2", "--no-llm-cache", *more, cwd=svc)


def by_rule(sarif: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in sarif["runs"][0]["results"]:
        out.setdefault(r["ruleId"], []).append(r)
    return out


def place(result: dict[str, Any], base: str) -> tuple[str, int]:
    """The file (an absolute path, decoded from its URI against the base) and line of a result."""
    loc = result["locations"][0]["physicalLocation"]
    art = loc["artifactLocation"]
    uri = urljoin(base, art["uri"]) if art.get("uriBaseId") == "%SRCROOT%" else art["uri"]
    return unquote(urlparse(uri).path), loc["region"]["startLine"]


def test_reports_of_hostile_names_from_a_subfolder_one_result_per_finding_and_stable_fingerprints(
        tmp_path: Path, llm: FakeLLM) -> None:
    svc = make_repo(tmp_path)
    script(llm)
    out = tmp_path / "out"
    res = audit(svc, llm, "--sarif", str(out / "a.sarif"), "--junit", str(out / "j.xml"), "--codequality",
                str(out / "cq.json"), "--json", "-o", str(out / "a.json"))
    assert res.code == 8, res.stderr  # no-eval (error) fails
    doc = json.loads((out / "a.json").read_text())
    assert not list(audit_validator().iter_errors(doc))
    assert doc["root"] == "svc/" and doc["root_dir"] == str((tmp_path / "repo").resolve())
    assert {c["id"]: c["status"] for c in doc["checks"]} == {c: "fail" for c in CHECKS}

    sarif_file = out / "a.sarif"
    sarif = json.loads(sarif_file.read_text("utf-8"))
    assert not list(sarif_validator().iter_errors(sarif))
    base = sarif["runs"][0]["originalUriBaseIds"]["%SRCROOT%"]["uri"]
    assert base == (tmp_path / "repo").resolve().as_uri() + "/"
    results = by_rule(sarif)
    # every result's URI is a percent-encoded reference from the repository root that decodes to the real file
    for r in sarif["runs"][0]["results"]:
        uri = r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        assert uri.startswith("svc/") and " " not in uri and "#" not in uri and "," not in uri, uri
        path, line = place(r, base)
        assert Path(path).is_file() and Path(path).parent == svc.resolve(), path
        assert set(r["partialFingerprints"]) == {"rlmFindingHash/v1"}
    # a locations check: one result per finding (three in two files), each fingerprinted
    evals = sorted(place(r, base) for r in results["no-eval"])
    assert [(Path(p).name, n) for p, n in evals] == [(COMMA, 2), (SPACE, 5), (SPACE, 9)]
    prints = {place(r, base): r["partialFingerprints"]["rlmFindingHash/v1"] for r in results["no-eval"]}
    assert len(set(prints.values())) == 3 and not any("relatedLocations" in r for r in results["no-eval"])
    # a bool check: at the line its grep read, not at a lead
    (tls,) = results["tls-off"]
    assert (Path(place(tls, base)[0]).name, place(tls, base)[1]) == (UNI, 4)
    assert tls["properties"]["placedAt"] == "evidence" and tls["level"] == "warning"
    # a text answer naming files with commas, colons, semicolons and non-ASCII letters keeps each whole
    assert sorted(Path(place(r, base)[0]).name for r in results["marked"]) == [COLON, COMMA, UNI]

    # JUnit: the answer quoting a coloured log line stays readable by strict parsers
    raw = (out / "j.xml").read_bytes()
    assert b"\x1b" not in raw and b"\\x1b[31mERROR" in raw
    ET.fromstring(raw)  # expat: strict XML 1.0
    cases = {case.name: case for suite in JUnitXml.fromfile(str(out / "j.xml")) for case in suite}
    failure = next(r for r in cases["colour"].result if isinstance(r, Failure))
    assert "Answer: \\x1b[31mERROR\\x1b[0m disk full" in (failure.text or "")
    if shutil.which("xmllint"):
        subprocess.run(["xmllint", "--noout", str(out / "j.xml")], check=True)

    # GitLab Code Quality: an issue per finding with the fields GitLab reads
    issues = json.loads((out / "cq.json").read_text())
    assert len(issues) == 3 + 1 + 3 + 1
    for issue in issues:
        assert set(issue) >= {"description", "check_name", "fingerprint", "severity", "location"}
        assert issue["location"]["path"].startswith("svc/") and issue["location"]["lines"]["begin"] >= 1
    assert {i["check_name"]: i["severity"] for i in issues} == {"no-eval": "major", "tls-off": "minor",
                                                                "marked": "info", "colour": "info"}
    assert len({i["fingerprint"] for i in issues}) == len(issues)
    assert sorted(i["location"]["path"] for i in issues if i["check_name"] == "no-eval") == [
        f"svc/{COMMA}", f"svc/{SPACE}", f"svc/{SPACE}"]

    # a line inserted at the top of one file moves its findings, not their fingerprints
    (svc / SPACE).write_text("# a new first line\n" + (svc / SPACE).read_text())
    res = audit(svc, llm, "--sarif", str(out / "b.sarif"))
    assert res.code == 8, res.stderr
    again = {place(r, base): r["partialFingerprints"]["rlmFindingHash/v1"]
             for r in by_rule(json.loads((out / "b.sarif").read_text()))["no-eval"]}
    moved = {(p, n + (Path(p).name == SPACE)): fp for (p, n), fp in prints.items()}
    assert again == moved


@pytest.mark.skipif(multitool() is None, reason="Microsoft's SARIF multitool is not installed (npm install -g "
                                                "@microsoft/sarif-multitool, or set RLM_SARIF_MULTITOOL)")
def test_sarif_of_hostile_names_from_a_subfolder_has_no_error_in_microsofts_validator(
        tmp_path: Path, llm: FakeLLM) -> None:
    """Issue 47's target: 0 errors (SARIF1002 was a raw file name, SARIF1004 a uriBaseId on an
    absolute path); the same log with one raw file name gives SARIF1002, so the check can fail."""
    svc = make_repo(tmp_path)
    script(llm)
    out = tmp_path / "out"
    res = audit(svc, llm, "--sarif", str(out / "a.sarif"))
    assert res.code == 8, res.stderr
    raw_uri = json.loads((out / "a.sarif").read_text("utf-8"))
    assert len(raw_uri["runs"][0]["results"]) == 8
    raw_uri["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] = SPACE
    (out / "raw.sarif").write_text(json.dumps(raw_uri), "utf-8")
    assert multitool_errors([out / "a.sarif", out / "raw.sarif"], tmp_path) == {"a.sarif": [],
                                                                                "raw.sarif": ["SARIF1002"]}
