"""Where an audit's findings are: the repository root the report paths are from, each check's
findings (``rlm_cli.output.findings.Finding``) placed and fingerprinted.

**Paths** (:class:`ReportPaths`) are from the repository root, wherever the PATHs and the working
folder are: the git top level of the folder audited (``git rev-parse --show-toplevel``), else
``GITHUB_WORKSPACE`` or ``CI_PROJECT_DIR`` when the folder lies under it, else the working
folder. A file outside the root keeps its absolute path (a SARIF report gives it as a
``file://`` URI).

**Placement** (issue 48): a failing or unsupported ``locations`` check gives one finding per
location of its answer; any other check gives one finding at the evidence its run read with code
(a ``read_file`` or a ``grep`` hit it printed: ``verdicts.Evidence.read_with_code``; the others
as related locations), never at a lead line it did not examine; with no such evidence, at the
check's line in the checklist.

**Fingerprints** (:func:`fingerprint`) survive lines inserted or removed elsewhere in the file: a
SHA-256 of the check id, the path and the finding's own lines and one line on each side, each
whitespace-collapsed (never a line number), and an occurrence index among the findings of the
check in that file whose text is the same.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rlm_cli.audit.checklist import Check
from rlm_cli.audit.verdicts import Verdict
from rlm_cli.output.findings import Finding, Location, Region, checklist_region

#: The environment variables naming a CI job's checkout, in the order they are tried.
CI_ROOTS = ("GITHUB_WORKSPACE", "CI_PROJECT_DIR")
#: Lines on each side of a finding that its fingerprint reads.
NEIGHBOURS = 1


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def git_top_level(folder: str) -> str | None:
    """The top folder of the git work tree holding ``folder`` (``git rev-parse
    --show-toplevel``), or ``None`` (not in one, or git missing)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=folder, capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    top = out.stdout.strip()
    return os.path.realpath(top) if out.returncode == 0 and top else None


def repository_root(folder: str) -> str:
    """The repository root for a run over ``folder`` (absolute): see the module docstring."""
    folder = os.path.realpath(folder)
    top = git_top_level(folder)
    if top is not None:
        return top
    for name in CI_ROOTS:
        value = os.environ.get(name)
        if value and _under(folder, os.path.realpath(value)):
            return os.path.realpath(value)
    return os.path.realpath(os.getcwd())


@dataclass(frozen=True)
class ReportPaths:
    """Turns corpus paths into report paths: ``base`` is the folder corpus paths are relative to
    (absolute: the one folder PATH, else the working folder), ``root`` the repository root."""

    base: str
    root: str

    @classmethod
    def of_run(cls, paths: Sequence[str]) -> ReportPaths:
        """The paths of a run over ``paths`` (the PATH arguments)."""
        single = len(paths) == 1 and paths[0] != "-" and os.path.isdir(paths[0])
        base = os.path.realpath(paths[0] if single else os.getcwd())
        return cls(base, repository_root(base))

    def absolute(self, corpus_path: str) -> str:
        """The absolute path of a corpus file."""
        return os.path.normpath(os.path.join(self.base, corpus_path))

    def report_path(self, corpus_path: str) -> str:
        """``corpus_path`` from the repository root (``/``-separated), or absolute outside it."""
        return self.from_root(self.absolute(corpus_path))

    def from_root(self, absolute: str) -> str:
        """An absolute path from the repository root, or as given when outside it."""
        absolute = os.path.normpath(os.path.abspath(absolute))
        real = os.path.join(os.path.realpath(os.path.dirname(absolute)), os.path.basename(absolute))
        for candidate in (absolute, real):
            if _under(candidate, self.root) and candidate != self.root:
                return os.path.relpath(candidate, self.root).replace(os.sep, "/")
        return absolute

    @property
    def prefix(self) -> str:
        """What is put before a corpus path to make its report path (``"svc/"``; ``""``: none)."""
        rel = self.from_root(self.base)
        return "" if rel in (".", self.root) or os.path.realpath(self.base) == self.root else rel.rstrip("/") + "/"


def _normal(line: str) -> str:
    return " ".join(line.split())


def fingerprint(check: str, path: str, lines: Sequence[str] | None, start: int, end: int, occurrence: int) -> str:
    """The fingerprint of a finding of ``check`` at lines ``start``-``end`` of ``path`` (``lines``:
    the file's lines, ``None`` when they cannot be read: the line numbers stand in): the first 32
    hex digits of a SHA-256 of the check, the path and the whitespace-collapsed lines with
    :data:`NEIGHBOURS` lines each side, then ``:`` and ``occurrence``. A neighbour past the
    file's first or last line counts as a blank line, so code added after a blank line at the
    end of a file (or above one at its start) keeps the fingerprint."""
    h = hashlib.sha256()
    for part in (check, path):
        h.update(part.encode("utf-8", "surrogatepass") + b"\0")
    if lines is None:
        h.update(f"lines {start}-{end}".encode())
    else:
        for n in range(start - NEIGHBOURS, end + NEIGHBOURS + 1):  # past an edge: a blank line
            text = _normal(lines[n - 1]) if 1 <= n <= len(lines) else ""
            h.update(text.encode("utf-8", "surrogatepass") + b"\n")
    return f"{h.hexdigest()[:32]}:{occurrence}"


#: ``lines_of(corpus_path)``: a corpus file's lines, or ``None``.
LinesOf = Callable[[str], "Sequence[str] | None"]


def checklist_lines(path: str) -> list[str] | None:
    """The lines of the checklist file (``None``: unreadable)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().splitlines()
    except OSError:
        return None


def place(check: Check, verdict: Verdict, message: str, paths: ReportPaths, checklist: str,
          lines_of: LinesOf) -> list[Finding]:
    """The findings of ``check`` (its ``verdict``; none unless it ended ``fail`` or
    ``unsupported``), placed and fingerprinted as the module docstring says; ``checklist`` is
    the checklist's absolute path, ``lines_of`` reads a corpus file's lines."""
    if verdict.status not in ("fail", "unsupported"):
        return []
    spots = [(p, Region(a, b)) for p, a, b in verdict.locations]
    level, seen = check.severity, dict[str, int]()
    if not spots:
        at = checklist_region(check.line)
        where = paths.from_root(checklist)
        text = checklist_lines(checklist)
        return [Finding(check.id, where, at, fingerprint(check.id, where, text, at.start_line, at.end_line, 0), message,
                        level, verdict.status, "checklist")]
    if not check.type.placed:
        first, rest = spots[0], spots[1:]
        spots = [first]
        related = tuple(Location(p, paths.report_path(p), r) for p, r in rest)
    else:
        related = ()
    out = []
    for corpus_path, region in spots:
        path = paths.report_path(corpus_path)
        lines = lines_of(corpus_path)
        key = fingerprint(check.id, path, lines, region.start_line, region.end_line, 0)
        seen[key] = seen.get(key, -1) + 1
        key = key.rsplit(":", 1)[0] + f":{seen[key]}"
        out.append(Finding(check.id, path, region, key, message, level, verdict.status,
                           "answer" if check.type.placed else "evidence", related))
    return out
