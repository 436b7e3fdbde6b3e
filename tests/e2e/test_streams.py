"""Standard streams closed, full or left by their reader, and Ctrl-C around the final answer
(issue 36): one clear line or the SIGPIPE behaviour, never an internal error, never a model call
after stdout is gone; an answer that is final is printed and recorded as final; a run stopped
before its question started still writes its trajectory."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cli import model_flags, rlm_argv
from tests.support.fake_llm import FakeLLM, Reply, repl


def corpus(tmp_path: Path) -> Path:
    (tmp_path / "c").mkdir(exist_ok=True)
    (tmp_path / "c" / "a.txt").write_text("alpha\nbeta\n")
    return tmp_path / "c"


def shell(command: str, tmp_path: Path, llm: FakeLLM, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``rlm ask CORPUS q? FLAGS`` through ``sh -c`` with ``command``'s redirections after it;
    stderr comes back in ``err.txt`` unless ``command`` redirects it."""
    argv = " ".join(f"'{a}'" for a in [*rlm_argv(), "ask", str(corpus(tmp_path)), "q?", *model_flags(llm),
                                        "--mode", "rlm", "--no-llm-cache"])
    return subprocess.run(["sh", "-c", f"{argv} {command}"], capture_output=True, text=True, timeout=240,
                          cwd=tmp_path, env={**os.environ, **(env or {})})


def test_a_closed_stdout_is_one_line_and_no_model_call(tmp_path: Path, llm: FakeLLM) -> None:
    llm.default("root", repl("FINAL('x')"))
    res = shell(">&- 2>err.txt", tmp_path, llm)
    err = (tmp_path / "err.txt").read_text()
    assert res.returncode == 2, err
    assert "standard output is closed" in err and "--output" in err and "internal error" not in err
    assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1
    assert llm.chat_requests("root") == []
    ok = shell(f">&- 2>err.txt -o {tmp_path / 'answer.txt'}", tmp_path, llm)
    assert ok.returncode == 0, (tmp_path / "err.txt").read_text()
    assert (tmp_path / "answer.txt").read_text() == "x\n"


def test_a_closed_stderr_or_stdin_loses_only_what_went_there(tmp_path: Path, llm: FakeLLM) -> None:
    llm.default("root", repl("print('working')\nFINAL('the answer')"))
    for redirect in ("2>&-", "<&-", "2>&- <&-"):
        res = shell(redirect, tmp_path, llm)
        assert res.returncode == 0, (redirect, res.stderr)
        assert res.stdout == "the answer\n", redirect  # the diagnostics never land in stdout
        assert "internal error" not in res.stderr
    argv = [*rlm_argv(), "ask", "-", "q?", *model_flags(llm)]
    res = subprocess.run(["sh", "-c", " ".join(f"'{a}'" for a in argv) + " <&-"], capture_output=True, text=True,
                         timeout=240)
    assert res.returncode == 2 and "internal error" not in res.stderr, res.stderr  # '-' with stdin closed


def test_a_full_stdout_is_one_clear_line(tmp_path: Path, llm: FakeLLM) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    llm.default("root", repl("FINAL('the answer')"))
    res = shell("> /dev/full", tmp_path, llm)
    assert res.returncode == 2, res.stderr
    assert "cannot write to standard output: No space left on device" in res.stderr
    assert "internal error" not in res.stderr and "Traceback" not in res.stderr and "Exception ignored" not in res.stderr
    json_res = shell("--json > /dev/full", tmp_path, llm)
    assert json_res.returncode == 2 and "Exception ignored" not in json_res.stderr, json_res.stderr


def test_a_full_stderr_drops_the_diagnostics_and_answers(tmp_path: Path, llm: FakeLLM) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    llm.default("root", repl("print('working')\nFINAL('the answer')"))
    res = shell("-v 2> /dev/full", tmp_path, llm)
    assert res.returncode == 0 and res.stdout == "the answer\n"


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "sigint-ignored"])
def test_a_reader_that_leaves_mid_run_stops_it_before_the_next_model_call(tmp_path: Path, llm: FakeLLM,
                                                                         run_tmp: Path, background: bool) -> None:
    """`rlm ask ... | head -c0`-like: the reader goes away while the first root call is on; rlm
    stops with 141 at once instead of running the loop to its end for nobody. Also as a
    background job of a script (`... | head &`), which starts with SIGINT ignored: the watch
    interrupts with a signal of its own (it made all three calls there)."""
    llm.script("root", Reply(repl("print('one')"), delay_s=5.0), repl("print('two')"), repl("FINAL('done')"))
    read, write = os.pipe()

    def ignore_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = subprocess.Popen([*rlm_argv(), "ask", str(corpus(tmp_path)), "q?", *model_flags(llm), "--mode", "rlm",
                             "--no-llm-cache"], stdout=write, stderr=subprocess.PIPE,
                            env={**os.environ, "TMPDIR": str(run_tmp)},
                            preexec_fn=ignore_sigint if background else None)  # noqa: PLW1509 - a signal disposition only
    os.close(write)
    deadline = time.monotonic() + 60
    while not llm.chat_requests("root") and time.monotonic() < deadline:
        time.sleep(0.05)
    os.close(read)  # the reader goes away during the first root call
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 141, err
    assert b"Traceback" not in err
    assert len(llm.chat_requests("root")) == 1  # no call after stdout was gone
    assert [p.name for p in run_tmp.iterdir()] == []  # worker, relay and scratch all removed


def _trajectories(tmp_path: Path) -> list[list[dict]]:
    folder = tmp_path / "userdirs" / "data" / "traces"
    return [[json.loads(line) for line in p.read_text().splitlines()] for p in sorted(folder.glob("*.jsonl"))]


def test_ctrl_c_right_after_the_final_answer_prints_it(tmp_path: Path, llm: FakeLLM, run_tmp: Path) -> None:
    llm.default("root", repl("FINAL('the final answer')"))
    proc = subprocess.Popen([*rlm_argv(), "ask", str(corpus(tmp_path)), "q?", *model_flags(llm), "--mode", "rlm",
                             "--no-llm-cache"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "TMPDIR": str(run_tmp)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stderr is not None
    seen = b""
    deadline = time.monotonic() + 120
    while b"final after" not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 1.0)
        if ready:
            chunk = os.read(proc.stderr.fileno(), 4096)
            if not chunk:
                break
            seen += chunk
    proc.send_signal(signal.SIGINT)  # while the worker is being stopped or the answer written
    out, err = proc.communicate(timeout=60)
    assert b"final after" in seen, seen + err
    assert proc.returncode == 0, seen + err
    assert out == b"the final answer\n"
    (trace,) = _trajectories(tmp_path)
    assert trace[-1]["type"] == "summary" and trace[-1]["status"] == "final"
    assert [p.name for p in run_tmp.iterdir()] == []  # worker, relay and scratch all removed


def test_ctrl_c_before_the_question_starts_still_writes_the_trajectory(tmp_path: Path, llm: FakeLLM,
                                                                        run_tmp: Path) -> None:
    """Ctrl-C while the session opens (here: waiting for a model host of its own to import litellm)."""
    llm.default("root", repl("FINAL('x')"))
    proc = subprocess.Popen([*rlm_argv(), "ask", str(corpus(tmp_path)), "q?", *model_flags(llm), "--mode", "rlm"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "TMPDIR": str(run_tmp), "RLM_HOST_IDLE": "0"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stderr is not None
    seen = b""
    deadline = time.monotonic() + 120
    while b"corpus loaded" not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 1.0)
        if ready:
            chunk = os.read(proc.stderr.fileno(), 4096)
            if not chunk:
                break
            seen += chunk
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, seen + err
    (trace,) = _trajectories(tmp_path)
    assert trace[0]["type"] == "header" and trace[0]["question"] == "q?"
    assert trace[-1]["type"] == "summary" and trace[-1]["status"] == "interrupted"
    assert trace[-1]["exit_code"] == 130
