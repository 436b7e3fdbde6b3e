"""``rlm audit``: a checklist of typed questions over one loaded corpus, each ending ``pass``,
``fail``, ``error`` or ``unsupported``, with reports CI systems read.

``checklist`` reads and checks the TOML checklist; ``verdicts`` decides each check's status from
the typed outcome of its run, and the run's exit code; ``findings`` places and fingerprints each
finding, with paths from the repository root; ``run`` asks the checks in one warm session
(``rlm_cli.app``) and builds the typed report (``rlm_cli.output.findings.AuditReport``) that
every report format reads, one module per format in ``rlm_cli.output.reports`` (JUnit, SARIF,
workflow commands, Code Quality, the ``audit-result.v1`` document); ``changed`` is
``--changed-since`` and ``--staged`` (the files a git change touched); ``view`` shows the run on stderr (progress
lines in a CI log) and writes ``$GITHUB_OUTPUT``. rlm's own reports are left out of the corpus
(``rlm_cli.corpus.selfreports``). See docs/audit.md.
"""
