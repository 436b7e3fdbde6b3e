"""JUnit XML (``rlm audit --junit``): one ``<testcase>`` per check (``classname`` ``rlm.audit``), a
``<failure>`` for ``fail`` and ``unsupported`` (``type`` is the severity, or ``unsupported``), an
``<error>`` for ``error``, a ``<skipped>`` for a failing check whose findings are all accepted
(suppressed, or in the ``--baseline`` report: ``CheckReport.accepted``); the text holds the question, the answer, the value, the expectation
and the locations and sources it rests on (``text.check_details``).

XML 1.0 has no C0 control character but tab, newline and carriage return, no lone surrogate and
neither U+FFFE nor U+FFFF: each is written visibly as its Python escape (``\\x1b``, ``\\ud800``,
``\\ufffe``) so that an answer quoting a coloured log line still gives a file every XML parser
reads (:func:`xml_text`).
"""

from __future__ import annotations

import re
from xml.etree import ElementTree as ET

from rlm_cli.output.findings import AuditReport
from rlm_cli.output.reports.text import check_details

#: What XML 1.0 cannot hold (its ``Char`` production).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def xml_text(text: str) -> str:
    """``text`` with every character XML 1.0 cannot hold written as its escape (``\\x1b``)."""
    return _NOT_XML.sub(_escape, text)


def junit_text(report: AuditReport) -> str:
    """The JUnit XML report of an audit."""
    t = report.totals
    elapsed = f"{report.elapsed_s:.3f}"
    accepted = sum(1 for c in report.checks if c.accepted)
    failures, errors, tests = str(t.failed + t.unsupported - accepted), str(t.errors), str(t.checks)
    suites = ET.Element("testsuites", name="rlm audit", tests=tests, failures=failures, errors=errors, time=elapsed)
    suite = ET.SubElement(suites, "testsuite", name=xml_text(f"rlm audit {report.checklist}"), tests=tests,
                          failures=failures, errors=errors, skipped=str(accepted), time=elapsed)
    props = ET.SubElement(suite, "properties")
    for name, value in (("checklist", report.checklist), ("exit_code", report.exit_code),
                        ("fail_on", report.fail_on), ("cost_usd", t.cost_usd),
                        ("incomplete", "true" if report.incomplete else "false")):
        ET.SubElement(props, "property", name=name, value="" if value is None else xml_text(str(value)))
    for c in report.checks:
        case = ET.SubElement(suite, "testcase", name=c.id, classname="rlm.audit", time=f"{c.elapsed_s:.3f}")
        if c.status == "pass" or c.accepted:
            if c.accepted:  # every finding suppressed or in the baseline: not a failure of this run
                ET.SubElement(case, "skipped", message=xml_text(f"{c.status}, accepted: {c.reason}"[:500]))
            ET.SubElement(case, "system-out").text = xml_text(check_details(c))
            continue
        tag = "error" if c.status == "error" else "failure"
        kind = "unsupported" if c.status == "unsupported" else c.severity
        node = ET.SubElement(case, tag, message=xml_text(f"{c.status}: {c.reason}"[:500]), type=kind)
        node.text = xml_text(check_details(c))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
