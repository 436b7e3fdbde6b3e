"""The reports of ``rlm audit``, one module per format, each rendering the typed
:class:`~rlm_cli.output.findings.AuditReport` (plain data in, text out; nothing is decided here):

* ``junit``: JUnit XML, a ``<testcase>`` per check;
* ``sarif``: SARIF 2.1.0, a rule per check, a result per finding;
* ``github``: GitHub Actions workflow commands (an annotation per finding) and the job summary;
* ``codequality``: GitLab Code Quality JSON, an object per finding;
* ``text``: what the reports share (a check's account in words, strict JSON, the stderr table).

A new format is a module here with ``NAME_text(report) -> str`` (docs/extending.md).
"""
