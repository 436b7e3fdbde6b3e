"""``rlm audit --staged``, the pre-commit hook's scope, through the command against a real git
repository and the scripted server: the checks are about exactly the files the next commit holds,
the very first commit included; an untracked file, an unstaged change and a deleted file are not
asked about, a renamed file is under its new name."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.audit.scripted import checklist_text, script_model
from tests.audit.test_audit_ci import flags, git
from tests.audit.test_audit_cli import audit_validator
from tests.support.cli import run_rlm
from tests.support.fake_llm import FakeLLM

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
EVAL, CLEAN = "import os\nx = eval('1')\n", "x = 1\n"


def findings(doc: dict) -> list[tuple[str, int]]:
    return sorted((f["path"], f["start_line"]) for c in doc["checks"] for f in c["findings"])


def test_staged_from_the_first_commit_on(tmp_path: Path, llm: FakeLLM) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    # the checklist is no code to ask about; a check about files the commit leaves alone is not asked
    (repo / "rlm-audit.toml").write_text(checklist_text(["no-eval", "enough-files"]) + 'include = ["svc/**"]\n')
    for name, text in (("a.py", EVAL), ("b c.py", CLEAN), ("same.py", EVAL), ("gone.py", CLEAN), ("f.py", CLEAN)):
        (repo / name).write_text(text)
    git(repo, "init", "-q")
    git(repo, "add", ".")
    (repo / "b c.py").write_text(EVAL)  # an unstaged edit of a staged file: the file is in the commit
    (repo / "untracked.py").write_text(EVAL)  # not added: not in the commit
    script_model(llm)
    res = run_rlm("audit", ".", *flags(llm), "--staged", "--json", cwd=repo)  # no commit yet: no HEAD
    assert res.code == 8, res.stderr
    doc = json.loads(res.stdout)
    assert not list(audit_validator().iter_errors(doc))
    files = ["a.py", "b c.py", "f.py", "gone.py", "same.py"]
    assert doc["changed_since"] == {"ref": "HEAD", "merge_base": "", "files": files, "staged": True}
    assert findings(doc) == [("a.py", 2), ("b c.py", 2), ("same.py", 2)]  # untracked.py:2 is out of scope
    assert "--staged: 5 changed file(s) staged for the next commit" in res.stderr

    git(repo, "commit", "-qm", "one")
    git(repo, "mv", "b c.py", "renamed é.py")  # counts under its new name
    git(repo, "rm", "-q", "gone.py")  # deleted: nothing to audit
    (repo / "f.py").write_text(EVAL)  # a staged change
    git(repo, "add", "f.py")
    (repo / "same.py").write_text(EVAL + "y = eval('2')\n")  # an unstaged change only
    res = run_rlm("audit", ".", *flags(llm), "--staged", "--json", cwd=repo)
    assert res.code == 8, res.stderr
    doc = json.loads(res.stdout)
    head = git(repo, "rev-parse", "HEAD").strip()
    assert doc["changed_since"] == {"ref": "HEAD", "merge_base": head, "files": ["f.py", "renamed é.py"],
                                    "staged": True}
    assert findings(doc) == [("f.py", 2), ("renamed é.py", 2)]
    unasked = next(c for c in doc["checks"] if c["id"] == "enough-files")
    assert (unasked["status"], unasked["reason"]) == ("pass", "no file it is about is staged for the next commit")
    asked = [json.dumps(r, ensure_ascii=False) for r in llm.requests]
    assert any("the files staged for the next commit: f.py, renamed é.py." in r for r in asked)


def test_staged_errors_are_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "a.py").write_text(CLEAN)
    (tmp_path / "plain" / "rlm-audit.toml").write_text(checklist_text(["no-eval"]))
    env = {"GIT_CEILING_DIRECTORIES": str(tmp_path)}  # no repository above the folder
    for args, said, path in ((["--staged"], "--staged: not a git repository", None),
                             (["--staged"], "--staged needs git", str(tmp_path / "no-git")),
                             (["--changed-since", "HEAD", "--staged"], "--staged and --changed-since", None)):
        res = run_rlm("audit", "plain", "--model", "openai/root", *args, cwd=tmp_path,
                      env={**env, "PATH": path or os.environ["PATH"]})
        assert res.code == 2 and len(res.stderr.strip().splitlines()) <= 2, res.stderr
        assert said in res.stderr and "Traceback" not in res.stderr
