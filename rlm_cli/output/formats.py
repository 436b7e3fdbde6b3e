"""Output formats as one type, and the one path every document and report takes to its reader.

A command's outputs are :class:`Report` values: a :class:`Format` and where it goes (a file, or
stdout when ``path`` is ``None``). :func:`render_answer` turns an ``rlm ask`` document into the
text of its format (the plain answer, or the ``--json`` document); ``rlm audit``'s reports are
rendered by ``rlm_cli.output.reports`` (one module per format). :func:`deliver` writes any of them: to stdout
whole (``answer.write_text``), or to a file atomically (``outfile.write_atomic``), so a reader
never sees half a report and a failure leaves nothing behind.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class Format(enum.Enum):
    """What a document or report is written as."""

    #: The plain answer (``rlm ask``), newline-terminated.
    TEXT = "text"
    #: One JSON document (``--json``): ``ask-result.v1`` or ``audit-result.v1``.
    JSON = "json"
    #: JUnit XML (``rlm audit --junit``): a test case per check.
    JUNIT = "junit"
    #: SARIF 2.1.0 (``rlm audit --sarif``): a rule per check, a result per failing check.
    SARIF = "sarif"
    #: GitHub Actions workflow commands (``rlm audit --github``): annotations, on stdout.
    GITHUB = "github"
    #: GitLab Code Quality JSON (``rlm audit --codequality``): an issue per finding.
    CODEQUALITY = "codequality"


@dataclass(frozen=True)
class Report:
    """One output of a command: its ``format`` and its file (``None``: stdout)."""

    format: Format
    path: Path | None = None


def render_answer(doc: Mapping[str, Any], fmt: Format, cite: bool = False) -> str:
    """The text of an ``rlm ask`` document (``ask-result.v1``) in ``fmt``: the JSON document, or
    the plain answer (with ``--cite``'s sources).

    Raises:
        ValueError: ``fmt`` is not TEXT or JSON.
    """
    from rlm_cli.output.answer import json_text
    from rlm_cli.output.documents import answer_text

    if fmt is Format.JSON:
        return json_text(doc)
    if fmt is Format.TEXT:
        return answer_text(doc, cite)
    raise ValueError(f"an answer has no {fmt.value} form")


def deliver(text: str, path: Path | None) -> None:
    """Write ``text`` to stdout whole (``path`` ``None``) or to ``path`` atomically.

    Raises:
        UsageError: the file cannot be written, or stdout cannot take it (``> /dev/full``).
        BrokenPipeError: stdout's reader went away.
    """
    if path is None:
        from rlm_cli.output.answer import write_text

        write_text(text)
        return
    from rlm_cli.output.outfile import write_atomic

    write_atomic(path, text)


def append(text: str, path: Path) -> None:
    """Append ``text`` to ``path`` (a file others write too, such as GitHub's job summary).

    Raises:
        UsageError: it cannot be written.
    """
    from rlm_cli.errors import UsageError

    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise UsageError(f"cannot append to {path}: {exc.strerror or exc}") from None
