"""``rlm audit --changed-since REF`` and ``--staged``: the files a change touched are what the
checks are about.

``--changed-since REF`` (a pull request in CI): the files that differ between the working tree and
the merge base of REF and ``HEAD`` (``git merge-base REF HEAD``; ``git diff --name-only
--no-renames MB``: committed since then and not yet committed alike), plus untracked files git does
not ignore (``git ls-files --others --exclude-standard``): the working tree as it is, added or not.

``--staged`` (the pre-commit hook): the files staged for the next commit, exactly what it will hold
(``git diff --cached --name-only --no-renames``: against ``HEAD``, or before the first commit every
file in the index); untracked files and unstaged changes are not, a renamed file is under its new
name.

Deleted files are not changes to audit in either. The whole corpus is still loaded and may be read
for context; each check is told which files it is about, a ``locations`` answer elsewhere is
dropped, and a check none of whose files changed passes without a model call.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rlm_cli.errors import UsageError

#: Changed files named in a check's question; more are counted, not listed.
LISTED = 200


@dataclass(frozen=True)
class Scope:
    """The files changed since ``ref`` (its merge base with ``HEAD``: ``merge_base``), or staged
    for the next commit (``staged``; ``ref`` ``HEAD`` and ``merge_base`` its commit, ``""`` before
    the first commit), as corpus paths (``files``; those outside the PATHs are left out)."""

    ref: str
    merge_base: str
    files: frozenset[str]
    staged: bool = False

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
        return (f"This audit is about the files {self.which()}: {listed}. Other files may be read "
                "for context, but answer only about these.")

    def which(self) -> str:
        """Which files these are, in words: ``changed since REF`` or ``staged for the next commit``."""
        return "staged for the next commit" if self.staged else f"changed since {self.ref}"

    def unasked(self) -> str:
        """Why a check none of whose files is in the scope passes without a model call."""
        return f"no file it is about is {self.which()}" if self.staged else f"no file it is about {self.which()}"

    def document(self) -> dict[str, object]:
        """The ``changed_since`` section of the audit document (``staged``: only when true)."""
        return {"ref": self.ref, "merge_base": self.merge_base, "files": sorted(self.files),
                **({"staged": True} if self.staged else {})}


def _run(args: list[str], cwd: str, flag: str) -> subprocess.CompletedProcess[str]:
    """``git ARGS`` run in ``cwd``, its output captured (file names of any bytes as lone
    surrogates); ``flag`` (``--changed-since``, ``--staged``) begins an error's line.

    Raises:
        UsageError: git is missing.
    """
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False,
                              encoding="utf-8", errors="surrogateescape")
    except OSError as exc:
        raise UsageError(f"{flag} needs git: {exc.strerror or exc}", hint="install git") from None


def _git(args: list[str], cwd: str, flag: str) -> str:
    """The standard output of ``git ARGS`` in ``cwd`` (:func:`_run`).

    Raises:
        UsageError: git is missing or the command failed (its first error line is said).
    """
    done = _run(args, cwd, flag)
    if done.returncode == 0:
        return done.stdout
    first = next((ln for ln in done.stderr.splitlines() if ln.strip()), f"git {args[0]} failed")
    hint = ("run it in a git repository with a ref it knows (fetch with depth 0 in CI)" if flag == "--changed-since"
            else "run it in the git repository of the commit")
    raise UsageError(f"{flag}: {first.removeprefix('fatal: ')}", hint=hint)


def _top(paths: list[str], flag: str) -> str:
    """The top folder of the git repository that the first folder PATH, else the current folder,
    lies in.

    Raises:
        UsageError: not a git repository, or git missing.
    """
    folders = [p for p in paths if p != "-" and os.path.isdir(p)]
    start = os.path.abspath(folders[0] if folders else ".")
    return _git(["rev-parse", "--show-toplevel"], start, flag).strip()


def changed_since(ref: str, paths: list[str], leave_out: Iterable[str] = ()) -> Scope:
    """The :class:`Scope` of ``ref`` for a run over ``paths`` (the git repository is the one the
    first folder PATH, else the current folder, lies in); ``leave_out``: files that are not
    corpus whatever git says of them (rlm's own reports, which an earlier run left untracked).

    Raises:
        UsageError: not a git repository, ``ref`` unknown, or git missing.
    """
    if ref.startswith("-"):
        raise UsageError(f"--changed-since: {ref!r} is not a ref", hint="e.g. --changed-since origin/main")
    flag = "--changed-since"
    top = _top(paths, flag)
    base = _git(["merge-base", "--end-of-options", ref, "HEAD"], top, flag).strip()
    names = _git(["diff", "--name-only", "--no-renames", "--no-relative", "-z", base, "--"], top, flag)
    names += _git(["ls-files", "--others", "--exclude-standard", "-z"], top, flag)
    return Scope(ref, base, frozenset(_corpus_paths(_present(top, names, leave_out), paths)))


def staged(paths: list[str], leave_out: Iterable[str] = ()) -> Scope:
    """The :class:`Scope` of ``--staged`` for a run over ``paths`` (the repository as for
    :func:`changed_since`): the files the next commit holds that it adds or changes, against
    ``HEAD`` (``git diff --cached``, which before the first commit gives every staged file).

    Raises:
        UsageError: not a git repository, or git missing.
    """
    flag = "--staged"
    top = _top(paths, flag)
    found = _run(["rev-parse", "--verify", "-q", "HEAD^{commit}"], top, flag)  # exit 1: no commit yet
    head = found.stdout.strip() if found.returncode == 0 else ""
    names = _git(["diff", "--cached", "--name-only", "--no-renames", "--no-relative", "--diff-filter=d", "-z", "--"],
                 top, flag)
    return Scope("HEAD", head, frozenset(_corpus_paths(_present(top, names, leave_out), paths)), staged=True)


def _present(top: str, names: str, leave_out: Iterable[str]) -> set[str]:
    """The files of ``names`` (git's ``-z`` list, relative to ``top``) that are in the working
    tree (a deleted file is nothing to audit) and not in ``leave_out``, as absolute paths."""
    out = {os.path.realpath(p) for p in leave_out}
    return {os.path.join(top, n) for n in names.split("\0")
            if n and os.path.isfile(os.path.join(top, n)) and os.path.realpath(os.path.join(top, n)) not in out}


def _corpus_paths(files: set[str], paths: list[str]) -> set[str]:
    """``files`` (absolute) as the corpus names them (``walk.discover``: relative to a single
    folder PATH; else relative to the current folder when under it, else absolute), keeping
    only those under a PATH. A name that is not UTF-8 or holds a control character is given as
    the corpus gives it (``corpus.links.display_text``: such bytes as U+FFFD), never with the
    lone surrogates that no prompt or report can encode."""
    from rlm_cli.corpus.links import display_text

    roots = [os.path.realpath(p) for p in paths if p != "-"]
    here = os.path.realpath(".")
    out = set()
    for f in files:
        real = os.path.realpath(f)
        if not any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots):
            continue
        if len(roots) == 1 and os.path.isdir(roots[0]):
            out.add(display_text(os.path.relpath(real, roots[0]).replace(os.sep, "/")))
        elif real.startswith(here.rstrip(os.sep) + os.sep):
            out.add(display_text(os.path.relpath(real, here).replace(os.sep, "/")))
        else:
            out.add(display_text(real))
    return out
