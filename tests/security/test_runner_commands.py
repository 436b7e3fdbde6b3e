"""Issue 47: under GitHub Actions no line ``rlm`` writes to stdout or stderr is a runner command
that did not come from ``--github`` itself: an answer, a REPL output, a model reply and a file
name holding ``##[add-mask]...``, ``::stop-commands::...`` or ``::error::...`` at a line start
reach the log broken (a zero-width space inside the marker), and read the same."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from tests.support.cli import model_flags, rlm_argv, run_rlm
from tests.support.fake_llm import FakeLLM, repl

#: A line the runner reads as a command: ``::`` at its start after white space (TryParseV2), or
#: ``##[`` anywhere (TryParse); lines end at \n, \r or \r\n.
_NEW = re.compile(r"\A\s*::")
HOSTILE = "##[add-mask]x\n::stop-commands::tok\n::error::x\n  ::warning file=a.py::forged"


def runner_commands(text: str) -> list[str]:
    return [line for line in re.split(r"\r\n|\r|\n", text) if _NEW.match(line) or "##[" in line]


def test_ask_answer_outputs_replies_and_file_names_carry_no_runner_command(tmp_path: Path, llm: FakeLLM) -> None:
    corpus = tmp_path / "repo"
    corpus.mkdir()
    (corpus / "##[add-mask]name.txt").write_text(HOSTILE + "\n")
    (corpus / "notes.txt").write_text("C++ std::string stays as it is\n")
    # the reply's prose, the REPL output (the file's text and names) and the answer all hold commands
    llm.script("root", f"{HOSTILE}\n" + repl("print(context)\nprint([f['path'] for f in files])"),
               repl(f"FINAL({HOSTILE!r})"))
    env = {"GITHUB_ACTIONS": "true"}
    res = run_rlm("ask", str(corpus), "What does it say?", *model_flags(llm), "-v", env=env)
    assert res.code == 0, res.stderr
    assert "add-mask" in res.stderr and "stop-commands" in res.stderr and "std::string" in res.stderr
    assert runner_commands(res.stderr) == [] and runner_commands(res.stdout) == []
    assert res.stdout.replace("\u200b", "") == HOSTILE + "\n"  # the answer reads the same
    # --json: the document's strings never start a line, and its ##[ is written #\u0023[: the same value
    res = run_rlm("ask", str(corpus), "What does it say?", *model_flags(llm), "--json", env=env)
    assert res.code == 0 and runner_commands(res.stdout) == [] and runner_commands(res.stderr) == []
    assert json.loads(res.stdout)["answer"] == HOSTILE
    # into a file the runner never reads, the answer is byte for byte
    with open(tmp_path / "answer.txt", "wb") as out:
        proc = subprocess.run([*rlm_argv(), "ask", str(corpus), "What does it say?", *model_flags(llm)], stdout=out,
                              stderr=subprocess.PIPE, env={**os.environ, **env}, timeout=240)
    assert proc.returncode == 0 and (tmp_path / "answer.txt").read_text() == HOSTILE + "\n"
    assert runner_commands(proc.stderr.decode()) == []


def test_audit_github_lines_are_its_own_and_the_job_summary_is_plain_text(tmp_path: Path, llm: FakeLLM) -> None:
    from markdown_it import MarkdownIt

    from tests.support.fake_llm import turn

    corpus = tmp_path / "repo"
    corpus.mkdir()
    (corpus / "a.py").write_text("x = 1\n")
    (tmp_path / "checks.toml").write_text('[[check]]\nid = "hostile"\nquestion = "What does it say?"\n'
                                          'equals = "ok"\n')
    answer = HOSTILE + '\n<img src="https://evil.example/x.png"> [Approve](javascript:alert(1)) | cell'
    (corpus / "hostile.txt").write_text(answer + "\n")  # the pull request's file the answer quotes
    llm.default("root", lambda req: repl("print(read_file('hostile.txt'))") if turn(req) == 0
                else repl("FINAL('\\n'.join(read_file('hostile.txt')))"))
    summary = tmp_path / "summary.md"
    res = run_rlm("audit", "repo", "--checklist", "checks.toml", "--model", "openai/root", "--api-base", llm.url,
                  "--policy", "standard", "--github", "--sarif", "out.sarif", cwd=tmp_path,
                  env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)})
    assert res.code == 8, res.stderr
    assert "add-mask" in res.stderr and runner_commands(res.stderr) == []
    # stdout: --github's one annotation, a command of its own, and no old-style command in its data
    (line,) = res.stdout.splitlines()
    # at the lines the run read (issue 48), its own command whatever the data holds
    assert line.startswith("::error file=repo/hostile.txt,line=1,") and "title=rlm audit%3A hostile::fail: " in line
    assert "add-mask" in line and "##[" not in line
    # the job summary: the answer is text in its cell; no HTML, no link, the table keeps its columns
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    html = md.render(summary.read_text())
    assert "evil.example" in html and "<img" not in html and "<a " not in html
    row = [t for t in md.parse(summary.read_text()) if t.type == "tr_open"]
    cells = [t for t in md.parse(summary.read_text()) if t.type == "td_open"]
    assert len(row) == 2 and len(cells) == 6  # the header row and one check, six columns
