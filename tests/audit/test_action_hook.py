"""The GitHub Action (``action.yml``) and the pre-commit hook (``.pre-commit-hooks.yaml``), each run
the way its users run it: the action's steps with bash in a GitHub-like environment (the runner's
files and variables, ``${{ }}`` expressions filled in as the runner does, only where the runner
does), the hook through pre-commit's own ``try-repo``; both against the scripted model server.

Both install rlm from this repository into a fresh virtual environment with pip, as users get it.
To keep that to seconds, pip installs rlm alone (``PIP_NO_DEPS``) and its dependencies are taken
from the test environment (``PYTHONPATH``: pip does not process the ``.pth`` files there, so the
rlm that runs is the one just installed). Even so each test takes 20 to 70 s (a virtual environment
and a build of rlm), so they run when ``RLM_TEST_INSTALLS=1`` (``.ci/run`` runs them in a step of
their own after the suite)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.audit.scripted import checklist_text, json_repo, script_model
from tests.support.fake_llm import FakeLLM

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.environ.get("RLM_TEST_INSTALLS") != "1",
                                reason="installs rlm with pip (20-70 s): set RLM_TEST_INSTALLS=1 (.ci/run does)")
_EXPR = re.compile(r"\$\{\{\s*([\w.-]+)\s*\}\}")


def install_env(tmp_path: Path) -> dict[str, str]:
    """The environment that makes pip's install of rlm quick (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_", "RLM_TEST_BIN"))}
    env.update({"PIP_NO_DEPS": "1", "PYTHONPATH": sysconfig.get_paths()["purelib"], "PIP_NO_INPUT": "1",
                "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home")})
    return env


def _expand(text: str, context: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        assert m.group(1) in context, f"the test runner does not know ${{{{ {m.group(1)} }}}}"
        return context[m.group(1)]
    return _EXPR.sub(one, text)


def run_action(workspace: Path, inputs: dict[str, str], env: dict[str, str], tmp: Path, first: int = 0) -> dict[str, Any]:
    """Run ``action.yml``'s steps (from step ``first``: 1 reuses the install of an earlier run) as
    the runner does a composite action: each ``run`` with ``bash --noprofile --norc -eo
    pipefail``, its ``env`` expanded, a ``$GITHUB_OUTPUT`` file of its own; returns the action's
    outputs, the step results and the summary."""
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    context = {"github.action_path": str(ROOT)}
    for name, spec in action["inputs"].items():
        context[f"inputs.{name}"] = inputs.get(name, str(spec.get("default", "")))
    summary = tmp / "summary.md"
    steps: dict[str, dict[str, str]] = {}
    results = []
    for n, step in enumerate(action["runs"]["steps"][first:], first):
        assert "${{" not in step["run"], "inputs reach the script as variables, never as its text"
        out = tmp / f"output-{n}"
        out.write_text("")
        step_env = {**env, "GITHUB_ACTIONS": "true", "CI": "true", "GITHUB_WORKSPACE": str(workspace),
                    "RUNNER_TEMP": str(tmp / "runner-temp"), "GITHUB_ACTION_PATH": str(ROOT),
                    "GITHUB_OUTPUT": str(out), "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_ACTION": f"__run_{n}"}
        (tmp / "runner-temp").mkdir(exist_ok=True)
        step_env.update({k: _expand(str(v), context) for k, v in (step.get("env") or {}).items()})
        assert step["shell"] == "bash"
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=workspace,
                              env=step_env, capture_output=True, text=True, timeout=300)
        results.append(proc)
        values = {m[0]: m[2] for m in re.findall(r"^([\w-]+)<<(ghadelimiter_[\w-]+)\n(.*?)\n\2$", out.read_text(),
                                                 re.S | re.M)}
        if "id" in step:
            steps[step["id"]] = values
            context.update({f"steps.{step['id']}.outputs.{k}": v for k, v in values.items()})
        if proc.returncode:
            break
    outputs = {name: _EXPR.sub(lambda m: context.get(m.group(1), ""), spec["value"])
               for name, spec in action["outputs"].items()}
    return {"outputs": outputs, "steps": results, "summary": summary.read_text() if summary.exists() else ""}


def test_the_github_action_installs_rlm_from_its_checkout_and_audits(tmp_path: Path, llm: FakeLLM) -> None:
    repo = json_repo(tmp_path)
    (repo / "rlm-audit.toml").write_text(checklist_text(["enough-files", "percent-format"]))
    script_model(llm)
    hostile = "x; touch $GITHUB_WORKSPACE/pwned #"  # an input is data: it never reaches a shell as code
    # the worker starts with a scrubbed environment: without PYTHONPATH, landlockpy (not installed,
    # PIP_NO_DEPS) is not there for the process level
    env = {**install_env(tmp_path), "RLM_API_BASE": llm.url, "RLM_POLICY": "standard", "RLM_SANDBOX": "none"}
    ran = run_action(repo, {"model": "openai/root", "args": "--jobs 1 --max-iterations 6",
                            "checklist": "", "paths": ". ", "sarif": "out dir/rlm.sarif"}, env, tmp_path)
    install, audit = ran["steps"]
    assert install.returncode == 0, install.stderr
    assert audit.returncode == 8, audit.stderr  # percent-format fails: the job fails
    assert ran["outputs"] == {"passed": "1", "failed": "1", "errors": "0", "new": "1", "sarif": "out dir/rlm.sarif",
                              "incomplete": "false", "exit-code": "8"}
    sarif = json.loads((repo / "out dir" / "rlm.sarif").read_text())
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["percent-format"]
    assert "::error file=decoder.py,line=34" in audit.stdout and "rlm audit: fail" in ran["summary"]
    ran = run_action(repo, {"checklist": hostile, "paths": hostile}, env, tmp_path, first=1)
    assert ran["steps"][0].returncode == 2 and not (repo / "pwned").exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_pre_commit_hook_through_pre_commit_try_repo(tmp_path: Path, llm: FakeLLM) -> None:
    pre_commit = Path(sysconfig.get_paths()["scripts"]) / "pre-commit"
    if not pre_commit.exists():
        pytest.skip("pre-commit is not installed (the test extra has it)")
    source = tmp_path / "rlm-src"  # try-repo clones a repository at a commit: this tree, committed
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(source)], check=True)
    tracked = subprocess.run(["git", "ls-files", "-z", "--modified", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split("\0")
    for rel in filter(None, tracked):  # the working tree's changes, as they are now
        target = source / rel
        if (ROOT / rel).is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, target)
    git_env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    env = {**install_env(tmp_path), **git_env, "RLM_MODEL": "openai/root", "RLM_API_BASE": llm.url,
           "RLM_POLICY": "standard", "RLM_SANDBOX": "none"}
    subprocess.run(["git", "add", "-A"], cwd=source, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "wip", "--allow-empty"], cwd=source, check=True, env=env)
    repo = json_repo(tmp_path)
    (repo / "rlm-audit.toml").write_text(checklist_text(["percent-format", "enough-files"]))
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-qm", "one"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    (repo / "scanner.py").write_text((repo / "scanner.py").read_text() + "\nmsg = 'bad %r' % (1,)\n")
    subprocess.run(["git", "add", "scanner.py"], cwd=repo, check=True, env=env)
    (repo / "notes.py").write_text("msg = 'bad %r' % (2,)\n")  # untracked: not in the commit, not asked about
    script_model(llm)
    proc = subprocess.run([str(pre_commit), "try-repo", str(source), "rlm-audit", "--verbose"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the hook failed the commit
    out = proc.stdout
    assert "rlm audit" in out and "percent-format (error): fail" in out, out
    assert "--staged: 1 changed file(s) staged for the next commit" in out and "notes.py" not in out, out
    # the very first commit (no HEAD yet): what is staged, not decoder.py (line 34 fails the check), left untracked
    first = json_repo(tmp_path / "first")
    (first / "rlm-audit.toml").write_text(checklist_text(["percent-format"]))
    for args in (["init", "-q", "-b", "main"], ["add", "scanner.py", "rlm-audit.toml"]):
        subprocess.run(["git", *args], cwd=first, check=True, env=env)
    proc = subprocess.run([str(pre_commit), "try-repo", str(source), "rlm-audit", "--verbose"], cwd=first, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "percent-format (error): pass" in proc.stdout and "--staged: 1 changed file(s)" in proc.stdout, proc.stdout
