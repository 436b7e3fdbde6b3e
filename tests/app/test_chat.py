"""``rlm chat``: a session driven through a pseudo-terminal (line editing, Ctrl-C) and through a
pipe (scripted), against the scripted model server."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import time
from pathlib import Path

from tests.support.cli import model_flags, rlm_argv, run_rlm, two_file_repo
from tests.support.fake_llm import FakeLLM, Reply, first_prompt, last_user, repl

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


class Terminal:
    """``rlm ARGS`` on a pseudo-terminal (its controlling terminal, so Ctrl-C is a real SIGINT
    from the line discipline); ``expect`` reads until a pattern shows up."""

    def __init__(self, *args: str) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: stdin, stdout and stderr are the terminal
            # As from an interactive shell: a suite started in the background inherits SIGINT
            # ignored, and rlm (like every Unix tool) would keep ignoring Ctrl-C then.
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            argv = rlm_argv()
            os.execv(argv[0], [*argv, *args])
        self.pid, self.fd = pid, fd
        self.seen = ""
        self.at = 0  # what expect() has consumed

    def expect(self, pattern: str, timeout: float = 120) -> str:
        """Read until ``pattern`` (a regex) appears after what earlier calls consumed; returns the
        text up to the match.

        Raises:
            AssertionError: not within ``timeout`` seconds, or the program ended first.
        """
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        while True:
            found = rx.search(self.seen, self.at)
            if found:
                chunk = self.seen[self.at:found.end()]
                self.at = found.end()
                return chunk
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} within {timeout} s; the terminal shows:\n{self.seen[self.at:][-3000:]}"
            ready, _, _ = select.select([self.fd], [], [], min(left, 1.0))
            if ready:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:
                    data = b""
                assert data, f"the program ended before {pattern!r}:\n{self.seen[self.at:][-3000:]}"
                self.seen += _ANSI.sub("", data.decode("utf-8", "replace")).replace("\r", "")

    def send(self, text: str) -> None:
        """Type ``text`` (``\\r`` is Enter, ``\\x03`` Ctrl-C, ``\\x04`` Ctrl-D)."""
        os.write(self.fd, text.encode())

    def wait(self, timeout: float = 60) -> int:
        """The exit status once the program ends (killed after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                select.select([self.fd], [], [], 0.2)
                os.read(self.fd, 65536)
            except OSError:
                pass
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.close(self.fd)
        raise AssertionError(f"rlm chat did not end within {timeout} s:\n{self.seen[-3000:]}")


def test_chat_on_a_terminal_keeps_variables_survives_ctrl_c_and_resets(tmp_path: Path, llm: FakeLLM) -> None:
    root = two_file_repo(tmp_path)
    llm.script("root",
               # 1: a variable is made
               repl("made = 41\nprint('made it')"), repl("FINAL(str(made + 1))"),
               # 2: Ctrl-C while the root model is still answering
               Reply(text=repl("print('never')"), delay_s=30),
               # 3: Ctrl-C while a code block runs
               repl("import time\nprint('sleeping', flush=True)\ntime.sleep(60)"),
               # 4: the variable survived both
               repl("print('made is', made)"), repl("FINAL(str(made))"),
               # 5: after /reset it is gone
               repl("print(made)"), "FINAL(gone)")
    term = Terminal("chat", str(root), *model_flags(llm), "--color", "never", "--no-llm-cache")
    term.expect(r"rlm> ")
    term.send("make a variable\r")
    assert "42" in term.expect(r"rlm> ")

    term.send("this one is slow\r")
    term.expect(r"── iteration 1 ──")
    deadline = time.monotonic() + 60
    while len(llm.chat_requests("root")) < 3:  # the slow reply is being waited for (not a fixed pause)
        assert time.monotonic() < deadline, "the third root request never reached the server"
        time.sleep(0.02)
    term.send("\x03")
    shown = term.expect(r"rlm> ")
    assert "question interrupted" in shown and "keeps its variables" in shown, shown

    term.send("this one sleeps\r")
    term.expect(r"time\.sleep\(60\)")
    time.sleep(2.0)  # the block is running in the worker now
    term.send("\x03")
    shown = term.expect(r"rlm> ", timeout=30)
    assert "question interrupted" in shown and "keeps its variables" in shown, shown

    term.send("is it still there?\r")
    shown = term.expect(r"rlm> ")
    assert "made is 41" in shown
    asked = llm.chat_requests("root")
    first_of_4 = next(r for r in asked if "is it still there?" in first_prompt(r))
    note = first_prompt(first_of_4)
    assert "made: int" in note  # the model is told which variables exist
    assert "Q1: make a variable" in note and "A1: 42" in note  # and what was asked before

    term.send("/reset\r")
    term.expect(r"fresh REPL")
    term.expect(r"rlm> ")
    term.send("and now?\r")
    term.expect(r"rlm> ")
    after = [r for r in llm.chat_requests("root") if "and now?" in first_prompt(r)]
    assert "NameError: name 'made' is not defined" in last_user(after[-1])
    assert "Q1:" not in first_prompt(after[0])  # the history is gone too

    term.send("\x04")  # Ctrl-D ends the session
    assert term.wait() == 0
    assert "sleeping" in term.seen and "never" not in term.seen.split("this one is slow")[1].split("rlm> ")[0]
    history = (Path(os.environ["RLM_DATA_DIR"]) / "chat_history").read_text()
    assert "make a variable" in history and "/reset" in history


def test_scripted_chat_keeps_stdout_for_answers(tmp_path: Path, llm: FakeLLM) -> None:
    root = two_file_repo(tmp_path)
    llm.script("root", repl("hits = grep('def foo')\nprint(hits)"), repl("FINAL(hits[0]['file'])"),
               repl("print(len(hits))"), repl("FINAL(str(len(hits)))"))
    questions = "where is foo defined?\n/cost\nhow many definitions?\n/trace\n/quit\nnever asked\n"
    res = run_rlm("chat", str(root), *model_flags(llm), "--json", stdin=questions)
    assert res.code == 0, res.stderr
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(d["id"], d["question"], d["answer"], d["status"]) for d in lines] == [
        (1, "where is foo defined?", "a.py", "final"), (2, "how many definitions?", "1", "final")]
    assert lines[0]["trace"] != lines[1]["trace"] and all(Path(d["trace"]).is_file() for d in lines)
    assert "2 questions; root 4 calls" in res.stderr  # /cost, on stderr
    assert not any("never asked" in str(r["messages"]) for r in llm.requests)  # /quit ended it
    assert lines[1]["trace"] in res.stderr  # /trace lists the trajectories
    second = json.loads(Path(lines[1]["trace"]).read_text().splitlines()[0])
    assert second["type"] == "header" and second["turn"] == 2 and second["question"] == "how many definitions?"


def test_chat_refuses_the_corpus_on_stdin(tmp_path: Path, llm: FakeLLM) -> None:
    res = run_rlm("chat", "-", *model_flags(llm), stdin="text")
    assert res.code == 2 and "standard input" in res.stderr and not res.stdout
