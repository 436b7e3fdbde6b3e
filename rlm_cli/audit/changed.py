"""``rlm audit --changed-since REF``: the files a pull request changed are what the checks are about.

The changed files are those that differ between the working tree and the merge base of REF and
``HEAD`` (``git merge-base REF HEAD``; ``git diff --name-only --no-renames MB``: committed since
then and not yet committed alike), plus untracked files git does not ignore
(``git ls-files --others --exclude-standard``); deleted files are not. The whole corpus is still
loaded and may be read for context; each check is told which files it is about, a ``locations``
answer elsewhere is dropped, and a check none of whose files changed passes without a model call.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from rlm_cli.errors import UsageError

#: Changed files named in a check's question; more are counted, not listed.
LISTED = 200


@dataclass(frozen=True)
class Scope:
    """The files changed since ``ref`` (its merge base with ``HEAD``: ``merge_base``), as corpus
    paths (``files``; those outside the PATHs are left out)."""

    ref: str
    merge_base: str
    files: frozenset[str]

    def touches(self, about: Callable[[str], bool]) -> bool:
        """Whether a changed file is one a check is about (``about``: its own scope)."""
        return any(about(p) for p in self.files)

    def matcher(self, about: Callable[[str], bool]) -> Callable[[str], bool]:
        """``about`` narrowed to the changed files."""
        return lambda path: path in self.files and about(path)

    def question_note(self) -> str:
        """What a check's question adds: the files it is about."""
        names = sorted(self.files)
        listed = ", ".join(names[:LISTED]) + (f" and {len(names) - LISTED} more" if len(names) > LISTED else "")
        return (f"This audit is about the files changed since {self.ref}: {listed}. Other files may be read "
                "for context, but answer only about these.")

    def document(self) -> dict[str, object]:
        """The ``changed_since`` section of the audit document."""
        return {"ref": self.ref, "merge_base": self.merge_base, "files": sorted(self.files)}


def _git(args: list[str], cwd: str) -> str:
    """The standard output of ``git ARGS`` in ``cwd``.

    Raises:
        UsageError: git is missing or the command failed (its first error line is said).
    """
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False,
                              encoding="utf-8", errors="surrogateescape")
    except OSError as exc:
        raise UsageError(f"--changed-since needs git: {exc.strerror or exc}", hint="install git") from None
    if done.returncode != 0:
        first = next((ln for ln in done.stderr.splitlines() if ln.strip()), f"git {args[0]} failed")
        raise UsageError(f"--changed-since: {first.removeprefix('fatal: ')}",
                         hint="run it in a git repository with a ref it knows (fetch with depth 0 in CI)")
    return done.stdout


def changed_since(ref: str, paths: list[str]) -> Scope:
    """The :class:`Scope` of ``ref`` for a run over ``paths`` (the git repository is the one the
    first folder PATH, else the current folder, lies in).

    Raises:
        UsageError: not a git repository, ``ref`` unknown, or git missing.
    """
    if ref.startswith("-"):
        raise UsageError(f"--changed-since: {ref!r} is not a ref", hint="e.g. --changed-since origin/main")
    folders = [p for p in paths if p != "-" and os.path.isdir(p)]
    start = os.path.abspath(folders[0] if folders else ".")
    top = _git(["rev-parse", "--show-toplevel"], start).strip()
    base = _git(["merge-base", "--end-of-options", ref, "HEAD"], top).strip()
    names = _git(["diff", "--name-only", "--no-renames", "--no-relative", "-z", base, "--"], top).split("\0")
    names += _git(["ls-files", "--others", "--exclude-standard", "-z"], top).split("\0")
    absolute = {os.path.join(top, n) for n in names if n and os.path.isfile(os.path.join(top, n))}
    return Scope(ref, base, frozenset(_corpus_paths(absolute, paths)))


def _corpus_paths(files: set[str], paths: list[str]) -> set[str]:
    """``files`` (absolute) as the corpus names them (``walk.discover``: relative to a single
    folder PATH; else relative to the current folder when under it, else absolute), keeping
    only those under a PATH."""
    roots = [os.path.realpath(p) for p in paths if p != "-"]
    here = os.path.realpath(".")
    out = set()
    for f in files:
        real = os.path.realpath(f)
        if not any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots):
            continue
        if len(roots) == 1 and os.path.isdir(roots[0]):
            out.add(os.path.relpath(real, roots[0]).replace(os.sep, "/"))
        elif real.startswith(here.rstrip(os.sep) + os.sep):
            out.add(os.path.relpath(real, here).replace(os.sep, "/"))
        else:
            out.add(real)
    return out
