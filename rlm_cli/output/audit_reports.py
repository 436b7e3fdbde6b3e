"""The reports of ``rlm audit``, each rendered from the ``audit-result.v1`` document (plain data
in, text out; nothing is decided here):

* :func:`junit_text`: JUnit XML, one ``<testcase>`` per check (``classname`` ``rlm.audit``), a
  ``<failure>`` for ``fail`` and ``unsupported`` (``type`` is the severity, or ``unsupported``),
  an ``<error>`` for ``error``; the text holds the question, the answer, the value, the
  expectation and the locations and sources it rests on;
* :func:`sarif_text`: SARIF 2.1.0, one rule per check (``defaultConfiguration.level`` from its
  severity: error -> ``error``, warning -> ``warning``, note -> ``note``), one result per
  ``fail`` or ``unsupported`` check, located at its ``locations`` answer or the lines it rests on
  (the first location is the result's, the others ``relatedLocations``), else at the check in
  the checklist; checks that ended ``error`` are ``toolExecutionNotifications``. Paths are
  relative to the current folder (``%SRCROOT%``), as GitHub code scanning expects;
* :func:`github_commands`: GitHub Actions workflow commands, one annotation per failing check
  (``::error file=PATH,line=N,endLine=M,title=rlm audit: ID::MESSAGE``; ``::warning`` and
  ``::notice`` for the other severities), and :func:`summary_markdown`, the job summary table;
* :func:`table_rows`: the rows of the table ``rlm audit`` shows on stderr.
"""

from __future__ import annotations

import json
from typing import Any
from xml.etree import ElementTree as ET

#: SARIF ``level`` and workflow command of each severity.
LEVELS = {"error": "error", "warning": "warning", "note": "note"}
COMMANDS = {"error": "error", "warning": "warning", "note": "notice"}
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
#: Characters of an answer a report quotes.
ANSWER_CHARS = 2_000


def _loc_text(loc: dict[str, Any]) -> str:
    a, b = loc["start_line"], loc["end_line"]
    return f"{loc['file']}:{a}" + (f"-{b}" if b != a else "")


def _source_text(s: dict[str, Any]) -> str:
    a, b = s["start_line"], s["end_line"]
    return f"{s['path']}:{a}" + (f"-{b}" if b != a else "") + (" (cited)" if s.get("cited") else "")


def _value_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)[:ANSWER_CHARS]


def check_details(c: dict[str, Any]) -> str:
    """The plain-text account of one check: question, status and why, answer, value,
    expectation, locations and sources (JUnit's failure text)."""
    lines = [f"Question: {c['question']}", f"Status: {c['status']} ({c['severity']}): {c['reason']}"]
    if c.get("expectation"):
        lines.append(f"Expectation: {c['expectation']}")
    if c.get("answer") is not None:
        lines.append("Answer: " + str(c["answer"])[:ANSWER_CHARS])
    if c["type"] != "text" and c.get("value") is not None:
        lines.append(f"Value ({c['type']}): {_value_text(c['value'])}")
    if c.get("locations"):
        lines.append("Locations: " + ", ".join(_loc_text(loc) for loc in c["locations"]))
    if c.get("sources"):
        lines.append("Sources: " + ", ".join(_source_text(s) for s in c["sources"][:20]))
    trace = (c.get("run") or {}).get("trace")
    if trace:
        lines.append(f"Trajectory: {trace}")
    return "\n".join(lines) + "\n"


def junit_text(doc: dict[str, Any]) -> str:
    """The JUnit XML report of an audit document."""
    totals = doc["totals"]
    suites = ET.Element("testsuites", name="rlm audit", tests=str(totals["checks"]),
                        failures=str(totals["fail"] + totals["unsupported"]), errors=str(totals["error"]),
                        time=f"{doc['elapsed_s']:.3f}")
    suite = ET.SubElement(suites, "testsuite", name=f"rlm audit {doc['checklist']}", tests=str(totals["checks"]),
                          failures=str(totals["fail"] + totals["unsupported"]), errors=str(totals["error"]),
                          skipped="0", time=f"{doc['elapsed_s']:.3f}")
    props = ET.SubElement(suite, "properties")
    for name, value in (("checklist", doc["checklist"]), ("exit_code", doc["exit_code"]),
                        ("fail_on", doc["fail_on"]), ("cost_usd", doc["totals"].get("cost_usd")),
                        ("incomplete", "true" if doc.get("incomplete") else "false")):
        ET.SubElement(props, "property", name=name, value="" if value is None else str(value))
    for c in doc["checks"]:
        elapsed = float((c.get("run") or {}).get("elapsed_s") or 0.0)
        case = ET.SubElement(suite, "testcase", name=c["id"], classname="rlm.audit", time=f"{elapsed:.3f}")
        if c["status"] == "pass":
            ET.SubElement(case, "system-out").text = check_details(c)
            continue
        tag = "error" if c["status"] == "error" else "failure"
        kind = "unsupported" if c["status"] == "unsupported" else c["severity"]
        node = ET.SubElement(case, tag, message=f"{c['status']}: {c['reason']}"[:500], type=kind)
        node.text = check_details(c)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _region(loc: dict[str, Any]) -> dict[str, Any]:
    return {"physicalLocation": {"artifactLocation": {"uri": loc["file"], "uriBaseId": "%SRCROOT%"},
                                 "region": {"startLine": loc["start_line"], "endLine": loc["end_line"]}}}


def sarif_text(doc: dict[str, Any], version: str) -> str:
    """The SARIF 2.1.0 log of an audit document (``version``: rlm's)."""
    rules, results, notes = [], [], []
    for index, c in enumerate(doc["checks"]):
        first_line = c["question"].splitlines()[0]
        rules.append({"id": c["id"], "name": c["id"], "shortDescription": {"text": first_line[:200]},
                      "fullDescription": {"text": c["question"]},
                      "help": {"text": f"{c['question']}\nType: {c['type']}; expectation: {c['expectation'] or 'none'}"},
                      "defaultConfiguration": {"level": LEVELS[c["severity"]]},
                      "properties": {"answerType": c["type"], "expectation": c["expectation"],
                                     "tags": ["rlm-audit", c["severity"]]}})
        if c["status"] == "error":
            notes.append({"level": "error", "message": {"text": f"check {c['id']} could not be decided: {c['reason']}"},
                          "associatedRule": {"id": c["id"], "index": index}})
            continue
        if c["status"] == "pass":
            continue
        locations = [_region(loc) for loc in c["locations"]] or [_checklist_location(doc, c)]
        message = f"{c['id']}: {c['reason']}" + (" (the answer is unsupported)" if c["status"] == "unsupported" else "")
        answer = str(c.get("answer") or "")
        result: dict[str, Any] = {"ruleId": c["id"], "ruleIndex": index, "level": LEVELS[c["severity"]],
                                  "message": {"text": f"{message}\n{answer[:ANSWER_CHARS]}".strip()},
                                  "locations": locations[:1], "properties": {"status": c["status"]}}
        if len(locations) > 1:
            result["relatedLocations"] = [{"id": n, **loc} for n, loc in enumerate(locations[1:], 1)]
        results.append(result)
    cut = doc.get("incomplete")
    if cut:  # a cancelled run (SIGINT, SIGTERM): the checks that finished, and which did not run
        notes.append({"level": "error", "message": {"text": f"the run was cancelled ({cut['signal']}): "
                                                            f"{len(cut['not_run'])} check(s) did not run: "
                                                            + ", ".join(cut["not_run"])}})
    run: dict[str, Any] = {
        "tool": {"driver": {"name": "rlm audit", "version": version, "rules": rules}},
        "originalUriBaseIds": {"%SRCROOT%": {"description": {"text": "the folder rlm audit ran in"}}},
        "invocations": [{"executionSuccessful": not notes, "exitCode": doc["exit_code"],
                         "toolExecutionNotifications": notes}],
        "results": results,
        "properties": {"totals": doc["totals"]},
    }
    return json.dumps({"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}, ensure_ascii=False, indent=2) + "\n"


def _checklist_location(doc: dict[str, Any], c: dict[str, Any]) -> dict[str, Any]:
    """Where a failing check without locations points: its ``[[check]]`` in the checklist."""
    return _region({"file": doc["checklist"], "start_line": max(1, int(c.get("line") or 1)),
                    "end_line": max(1, int(c.get("line") or 1))})


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_commands(doc: dict[str, Any]) -> str:
    """The workflow commands of an audit document: one annotation per ``fail`` or
    ``unsupported`` check at its first location (else at its line of the checklist), and an
    ``::error`` per check that could not be decided."""
    out = []
    for c in doc["checks"]:
        if c["status"] == "pass":
            continue
        # the check's severity; an undecided check is an error only where it fails the run (exit 3/4/5/6)
        stops = c["status"] == "error" and doc["exit_code"] and c.get("exit_code") == doc["exit_code"]
        command = "error" if stops else COMMANDS[c["severity"]]
        loc = c["locations"][0] if c["locations"] else {"file": doc["checklist"], "start_line": c.get("line") or 1,
                                                        "end_line": c.get("line") or 1}
        more = len(c["locations"]) - 1
        message = f"{c['status']}: {c['reason']}" + (f" (and {more} more location{'s' if more > 1 else ''})"
                                                    if more > 0 else "")
        props = (f"file={_escape_property(str(loc['file']))},line={loc['start_line']},endLine={loc['end_line']},"
                 f"title={_escape_property('rlm audit: ' + c['id'])}")
        out.append(f"::{command} {props}::{_escape_data(message)}\n")
    return "".join(out)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")[:200]


def summary_markdown(doc: dict[str, Any]) -> str:
    """The job summary: a heading with the result, a Markdown table of the checks, the totals."""
    t = doc["totals"]
    head = (f"### rlm audit: {doc['status']} ({t['pass']} pass, {t['fail']} fail, {t['error']} error, "
            f"{t['unsupported']} unsupported; exit {doc['exit_code']})\n\n")
    rows = ["| check | severity | status | answer | why | where |", "| --- | --- | --- | --- | --- | --- |"]
    for c in doc["checks"]:
        where = ", ".join(_loc_text(loc) for loc in c["locations"][:3])
        value = c["value"] if c["type"] != "text" else c.get("answer")
        rows.append(f"| `{c['id']}` | {c['severity']} | {c['status']} | {_cell(_value_text(value) if value is not None else '')} "
                    f"| {_cell(c['reason'])} | {_cell(where)} |")
    cost = t.get("cost_usd")
    tail = f"\n\n{t['calls']} model calls ({t['cached_calls']} from the cache), cost " + (
        "unknown" if cost is None else f"${cost:.4f}") + (f"; {t['note']}" if t.get("note") else "") + "\n"
    return head + "\n".join(rows) + tail


def table_rows(doc: dict[str, Any]) -> list[list[str]]:
    """Rows of the stderr table: check, severity, status, value (short), why."""
    rows = []
    for c in doc["checks"]:
        value = c["value"] if c["type"] != "text" else c.get("answer")
        rows.append([c["id"], c["severity"], c["status"], "" if value is None else _value_text(value)[:40],
                     " ".join(str(c["reason"]).split())[:80]])
    return rows
