"""Faults a hostile or broken provider, corpus or code block can cause, through the ``rlm`` command:
an endless stream, a huge reply, a pathological ignore file, terminal escapes on stdout, output
lost at a cell timeout, a worker patched by an earlier question of a session (issue #26)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time
from pathlib import Path

import pytest

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import ignore
from rlm_cli.corpus.loader import LoadReport
from rlm_cli.corpus.walk import discover
from rlm_cli.errors import UsageError
from tests.support.cli import model_flags, rlm_argv, run_rlm
from tests.support.fake_llm import FakeLLM, Reply, last_user, repl

#: A gitignore pattern whose regex backtracks exponentially on a long run of ``a`` (about 2**14 steps
#: per character of a path like ``aaaa...a1.txt``).
PATHOLOGICAL = "*a" * 14 + "*b"


def _corpus(tmp_path: Path, text: str = "the secret is 42\n", name: str = "notes.txt") -> Path:
    root = tmp_path / "corpus"
    root.mkdir(exist_ok=True)
    (root / name).write_text(text)
    return root


def test_an_endless_stream_ends_at_request_timeout(tmp_path: Path, llm: FakeLLM) -> None:
    """A root reply streamed for ever (only --timeout stopped it before) ends at --request-timeout."""
    llm.script("root", Reply(text="more and more ", endless=True, stream_delay_s=0.01))
    res = run_rlm("ask", str(_corpus(tmp_path)), "q?", *model_flags(llm), "--request-timeout", "1.5",
                  "--retries", "0", "--no-llm-cache", timeout=60)  # an endless stream would pass 60 s
    assert res.code == 4, res.stderr
    assert "did not end within --request-timeout (1.5 s)" in res.stderr and "Traceback" not in res.stderr


def test_a_huge_reply_is_cut_and_said(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("r = llm_query('hi')\nprint(len(r), r[:3])"), repl("FINAL('done')"))
    llm.default("sub", "abc" * 1_000_000)  # 3,000,000 characters
    res = run_rlm("ask", str(_corpus(tmp_path)), "q?", *model_flags(llm), "--no-llm-cache")
    assert res.code == 0, res.stderr
    assert "the reply of openai/sub was 3,000,000 characters; only the first 1,000,000 were kept" in res.stderr
    assert "1000000 abc" in last_user(llm.chat_requests("root")[1])


def test_loading_stops_at_timeout_on_a_pathological_gitignore(tmp_path: Path, llm: FakeLLM) -> None:
    """Before: 90 s in pathspec's regex, and --timeout did not cover loading."""
    root = _corpus(tmp_path)
    (root / ".gitignore").write_text(PATHOLOGICAL + "\n")
    for i in range(3):
        (root / ("a" * 40 + f"{i}.txt")).write_text("x\n")
    res = run_rlm("ask", str(root), "q?", *model_flags(llm), "--timeout", "1.5", "--no-cache", timeout=60)
    assert res.code == 6, res.stderr
    assert "time budget reached while loading the corpus" in res.stderr
    assert llm.requests == []


@pytest.mark.timeout(60, method="thread")  # the signal method would hold SIGALRM, which the loader's timer uses
def test_an_ignore_file_that_matches_too_slowly_is_an_error_naming_it(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --timeout, each ignore file has a time cap; dropping its rules would load what the
    user meant to hide, so the load stops instead."""
    monkeypatch.setattr(ignore, "IGNORE_FILE_SECONDS", 0.4)
    root = tmp_path / "repo"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / ".gitignore").write_text(PATHOLOGICAL + "\n")
    for i in range(3):
        (root / "sub" / ("a" * 40 + f"{i}.txt")).write_text("x\n")
    with pytest.raises(UsageError, match=r"ignore rules of sub/\.gitignore took over 0\.4 s") as info:
        discover([str(root)], CorpusOptions(), LoadReport())  # uncapped, it would pass the test's 60 s timeout
    assert "--no-ignore" in (info.value.hint or "")
    (root / "sub" / ".gitignore").write_text("*.log\n")  # an ordinary one is no trouble
    assert len(discover([str(root)], CorpusOptions(), LoadReport())) == 3


def _on_a_terminal(argv: list[str], env: dict[str, str]) -> tuple[int, bytes]:
    """Run ``argv`` with stdout on a pseudo-terminal (stderr to a pipe); its exit code and stdout."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdout=slave, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    _, err = proc.communicate(timeout=30)
    return proc.returncode, out + err


def test_terminal_escapes_in_the_answer_and_cited_paths_never_reach_a_terminal(tmp_path: Path,
                                                                               llm: FakeLLM) -> None:
    """OSC 52 (writes the clipboard) and a clear-screen, from the answer and from a corpus file's
    name listed by --cite: neutralised on a terminal, kept as they are in a pipe (data)."""
    name = "evil\x1b[2J.txt"
    root = _corpus(tmp_path, name=name)
    evil = "the secret is 42 \x1b]52;c;cHduZWQ=\x07\x1b[2J\x9b31m"
    code = f"print(read_file(files[0]['path']))\nFINAL({evil!r} + ' (' + files[0]['path'] + ')')"  # cites it
    llm.default("root", repl(code))
    argv = [*rlm_argv(), "ask", str(root), "q?", *model_flags(llm), "--cite", "--no-llm-cache"]
    code_tty, out = _on_a_terminal(argv, dict(os.environ))
    assert code_tty == 0, out
    text = out.decode("utf-8", "replace")
    assert "the secret is 42" in text and "Sources:" in text and "evil" in text
    assert b"\x1b" not in out and "\x9b" not in text and b"\x07" not in out, out
    res = run_rlm("ask", str(root), "q?", *model_flags(llm), "--cite", "--no-llm-cache")
    assert res.code == 0, res.stderr
    assert evil in res.stdout  # into a pipe: the answer's bytes as they are
    assert "evil\ufffd[2J.txt" in res.stdout  # a file name is text: its control characters are U+FFFD


def test_what_a_cell_printed_before_its_timeout_is_shown(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("import time\nprint('step 1 done')\nprint('step 2 done')\ntime.sleep(60)"),
               repl("FINAL('ok')"))
    res = run_rlm("ask", str(_corpus(tmp_path)), "q?", *model_flags(llm), "--cell-timeout", "1.5", "--no-llm-cache")
    assert res.code == 0, res.stderr
    shown = last_user(llm.chat_requests("root")[1])
    assert "the cell timed out after 1.5 s and was killed. Before that it printed" in shown, shown
    assert "step 1 done\nstep 2 done\n[end of what it printed]" in shown
    assert "REPL state was lost" in shown


def test_a_worker_patched_by_an_earlier_question_is_replaced(tmp_path: Path, llm: FakeLLM) -> None:
    """Question 1's code rewires FINAL in the worker (its own answer shows it took); before, question
    2's answer came out 'HACKED' too. Now the worker is checked between questions and a fresh one
    answers question 2."""
    patch = "w = llm_query.__self__\nw._helpers['FINAL'] = lambda *v: setattr(w.final, 'value', 'HACKED')"
    llm.script("root", repl(patch), repl("FINAL('first answer')"),
               repl("print(len(context))"), repl("FINAL('second answer')"))
    res = run_rlm("ask", str(_corpus(tmp_path)), "--question", "one?", "--question", "two?", *model_flags(llm), "--json",
                  "--no-llm-cache")
    assert res.code == 0, res.stderr
    answers = [json.loads(line)["answer"] for line in res.stdout.splitlines()]
    assert answers == ["HACKED", "second answer"], answers
    assert res.stderr.count("changed the REPL worker's own code (helper.FINAL") == 1, res.stderr
    # Without a change the worker (and its variables) are kept from one question to the next.
    llm.script("root", repl("kept = 'from question 3'\nprint(len(context))"), repl("FINAL('third answer')"),
               repl("print(kept)"), repl("FINAL(kept)"))
    res = run_rlm("ask", str(_corpus(tmp_path)), "--question", "three?", "--question", "four?", *model_flags(llm), "--json",
                  "--no-llm-cache")
    assert res.code == 0, res.stderr
    assert [json.loads(line)["answer"] for line in res.stdout.splitlines()] == ["third answer", "from question 3"]
    assert "changed the REPL worker's own code" not in res.stderr
