"""``rlm audit``: a checklist of typed questions over one loaded corpus, each ending ``pass``,
``fail``, ``error`` or ``unsupported``, with reports CI systems read.

``checklist`` reads and checks the TOML checklist; ``verdicts`` decides each check's status and
the run's exit code; ``run`` asks the checks in one warm session (``rlm_cli.app``) and builds the
``audit-result.v1`` document; the reports (JUnit, SARIF, workflow commands) are rendered from
that document by ``rlm_cli.output.audit_reports``. See docs/audit.md.
"""
