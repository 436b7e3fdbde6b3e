"""rlm's own reports are not corpus (issue 48): a second ``rlm audit . --sarif rlm.sarif`` in the
same folder must not read the first run's reports back as code (a check counting files saw 4,
then 6; a SARIF line became a finding; the changed corpus missed the response cache).

:func:`find_reports` lists the files under the folder PATHs that are rlm reports, told by their
first bytes (cheap: only files named ``*.sarif``, ``*.json``, ``*.jsonl`` or ``*.xml`` are
opened, and only :data:`HEAD_BYTES` of each are read):

* SARIF whose ``tool.driver.name`` is ``rlm audit`` (``output.audit_reports.sarif_text``);
* JUnit XML whose ``<testsuites>`` is named ``rlm audit`` (``junit_text``);
* JSON documents of schema ``audit-result.v1``, ``ask-result.v1`` or ``estimate.v1`` (``--json``,
  ``--json -o``; one per line for ``--questions``);
* GitLab Code Quality JSON whose first issue's ``engine_name`` is ``rlm audit``.

The walk is the corpus's own (``walk.discover`` with the run's options: ignore files and
``--exclude`` apply), so nothing is opened that the run would not read anyway.
"""

from __future__ import annotations

import os
import re

from rlm_cli.config import CorpusOptions

#: Bytes of a candidate file read to tell whether rlm wrote it.
HEAD_BYTES = 8192
#: Names whose files may be rlm reports.
SUFFIXES = (".sarif", ".json", ".jsonl", ".xml")
_SIGNS = (
    re.compile(rb'"driver"\s*:\s*\{\s*"name"\s*:\s*"rlm(?: audit)?"'),  # SARIF
    re.compile(rb'<testsuites\b[^>]*\bname="rlm audit"'),  # JUnit
    re.compile(rb'^\s*\{\s*"schema"\s*:\s*"(?:audit-result|ask-result|estimate)\.v\d+"'),  # --json
    re.compile(rb'^\s*\[\s*\{[^\[\]{}]*"engine_name"\s*:\s*"rlm audit"'),  # GitLab Code Quality
)


def is_rlm_report(head: bytes) -> bool:
    """Whether ``head`` (the first bytes of a file) is the start of a report rlm writes."""
    return any(sign.search(head) for sign in _SIGNS)


def find_reports(paths: list[str], options: CorpusOptions) -> list[str]:
    """The files under the folder ``paths`` (``-`` and plain files are left alone: a file named
    on the command line is meant) that :func:`is_rlm_report` recognises, as absolute paths.
    An unreadable file is not one."""
    from rlm_cli.corpus.loader import LoadReport
    from rlm_cli.corpus.walk import discover

    folders = [p for p in paths if p != "-" and os.path.isdir(p)]
    if not folders:
        return []
    found = []
    for source in discover(folders, options, LoadReport()):
        if source.path is None or not source.path.lower().endswith(SUFFIXES):
            continue
        try:
            with open(source.path, "rb") as fh:
                head = fh.read(HEAD_BYTES)
        except OSError:
            continue
        if is_rlm_report(head):
            found.append(os.path.abspath(source.path))
    return found
