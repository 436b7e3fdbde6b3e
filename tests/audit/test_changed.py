"""``rlm_cli.audit.changed`` against real git repositories: ``--staged`` (the pre-commit hook)
lists exactly what the next commit holds, before the first commit too; ``--changed-since REF``
compares the working tree, so files not yet added count there; either says one clear error
outside a git repository or without git."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from rlm_cli.audit.changed import changed_since, staged
from rlm_cli.errors import UsageError
from tests.audit.test_audit_ci import git

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
HOSTILE = sys.platform == "linux"  # file names of any bytes: Linux file systems


def write(root: Path, name: str | bytes, text: str = "x = 1\n") -> None:
    path = os.path.join(os.fsencode(root), name if isinstance(name, bytes) else os.fsencode(name))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def test_staged_before_and_after_the_first_commit_against_changed_since(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    for name in ("a.py", "sp ace.py", "svc/s.py", "old.py", "gone.py", "same.py", "edited.py"):
        write(repo, name)
    if HOSTILE:
        write(repo, b"bad\xffname.py")
        write(repo, "nl\nname.py")
    write(repo, "untracked.py")
    write(repo, ".gitignore", "ignored.py\n")
    write(repo, "ignored.py")
    git(repo, "add", "--", *(p for p in os.listdir(repo) if p not in (".git", "untracked.py", "ignored.py")))
    write(repo, "a.py", "x = 2\n")  # an unstaged edit of a staged file: still staged
    scope = staged([str(repo)])  # no commit yet: everything in the index
    hostile = {"bad\ufffdname.py", "nl\ufffdname.py"} if HOSTILE else set()
    assert scope.files == {".gitignore", "a.py", "sp ace.py", "svc/s.py", "old.py", "gone.py", "same.py", "edited.py",
                           *hostile}
    assert scope.document() == {"ref": "HEAD", "merge_base": "", "files": sorted(scope.files), "staged": True}
    assert "staged for the next commit: " in scope.question_note()

    git(repo, "commit", "-qm", "one")
    head = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "mv", "old.py", "new name é.py")  # a rename counts under the new name
    git(repo, "rm", "-q", "gone.py")  # a deletion is not audited
    write(repo, "same.py", "x = 3\n")  # staged change
    git(repo, "add", "same.py")
    write(repo, "edited.py", "x = 4\n")  # unstaged change only: not in the commit
    write(repo, "svc/new.py")
    git(repo, "add", "svc/new.py")
    scope = staged([str(repo)])
    assert scope.files == {"new name é.py", "same.py", "svc/new.py"}
    assert (scope.ref, scope.merge_base, scope.staged) == ("HEAD", head, True)
    # --changed-since compares the working tree: the unstaged edit and the untracked file count there
    since = changed_since("HEAD", [str(repo)])
    assert since.files == scope.files | {"a.py", "edited.py", "untracked.py"}
    assert since.document() == {"ref": "HEAD", "merge_base": head, "files": sorted(since.files)}
    # from a subfolder, its files only, named from it; a file left out (an rlm report) is none
    monkeypatch.chdir(repo / "svc")
    assert staged(["."]).files == {"new.py"}
    assert staged(["."], leave_out=[str(repo / "svc" / "new.py")]).files == set()


@pytest.mark.parametrize("flag", ["--staged", "--changed-since"])
def test_outside_a_repository_or_without_git_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             flag: str) -> None:
    def scope() -> object:
        return staged([str(tmp_path)]) if flag == "--staged" else changed_since("HEAD", [str(tmp_path)])

    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # no repository above tmp_path
    with pytest.raises(UsageError) as err:
        scope()
    assert str(err.value).startswith(f"{flag}: not a git repository"), err.value
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(UsageError) as err:
        scope()
    assert str(err.value).startswith(f"{flag} needs git"), err.value


def test_staged_reads_the_index_git_commit_gives_the_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``git commit -a`` or ``git commit PATH`` runs the hook with ``GIT_INDEX_FILE`` naming the
    index the commit is made from (relative to the top folder): that index is the one read."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    write(repo, "a.py")
    write(repo, "b.py")
    git(repo, "add", "a.py")
    shutil.copy(repo / ".git" / "index", repo / ".git" / "next-index")
    monkeypatch.setenv("GIT_INDEX_FILE", ".git/next-index")
    git(repo, "add", "b.py")
    (repo / "sub").mkdir()  # git is asked from the first folder PATH: the relative index still resolves
    assert staged([str(repo / "sub"), str(repo)]).files == {os.path.realpath(repo / n) for n in ("a.py", "b.py")}
    monkeypatch.delenv("GIT_INDEX_FILE")
    assert staged([str(repo)]).files == {"a.py"}
