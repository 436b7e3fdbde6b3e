"""End-to-end: the ``rlm`` command as a subprocess against the scripted model server."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import string
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cli import model_flags, rlm_argv, run_rlm
from tests.support.fake_llm import FakeLLM, last_user, question_message, repl


def make_haystack(root: Path, files: int, chars_per_file: int, needle_file: int, needle: str) -> None:
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "log", "entry", "value", "request", "ok", "user"]
    root.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        lines, size = [], 0
        while size < chars_per_file:
            line = " ".join(rng.choice(words) for _ in range(12))
            lines.append(line)
            size += len(line) + 1
        if i == needle_file:
            lines.insert(len(lines) // 2, needle)
        (root / f"part_{i:03d}.log").write_text("\n".join(lines) + "\n")


def test_needle_in_multi_megabyte_corpus_via_final_var(tmp_path: Path, llm: FakeLLM) -> None:
    code = "".join(random.Random(1).choices(string.ascii_uppercase, k=10))
    make_haystack(tmp_path / "logs", files=40, chars_per_file=100_000, needle_file=23,
                  needle=f"the secret code is {code} remember it")
    llm.script("root",
               repl("print(len(context), len(files))"),
               repl("hits = grep(r'secret code is (\\w+)')\nprint(hits)"),
               repl("import re\nm = re.search(r'secret code is (\\w+)', context)\nanswer = m.group(1)\n"
                    "FINAL_VAR('answer')"))
    res = run_rlm("ask", str(tmp_path / "logs"), "What is the secret code?", *model_flags(llm))
    assert res.code == 0, res.stderr
    assert res.stdout == f"{code}\n"
    # The iterations were streamed on stderr, and the corpus never reached the model.
    assert "iteration 1" in res.stderr and "iteration 3" in res.stderr
    assert "part_023.log" in res.stderr  # the grep output shown for iteration 2
    for req in llm.requests:
        assert sum(len(str(m["content"])) for m in req["messages"]) < 30_000
    # Turn 2 saw the grep result, with file and line.
    assert re.search(r"'file': 'part_023\.log', 'line': \d+", last_user(llm.chat_requests("root")[2]))


def test_fan_out_with_llm_query_batched_sums_sub_answers(tmp_path: Path, llm: FakeLLM) -> None:
    corpus = tmp_path / "nums.txt"
    rng = random.Random(3)
    numbers = [rng.randint(1, 1000) for _ in range(400)]
    corpus.write_text("\n".join(f"item {i}: {n}" for i, n in enumerate(numbers)) + "\n")

    def sub_sum(req: dict) -> str:  # the sub-model "reads" its part and answers with the part's sum
        text = last_user(req)
        return str(sum(int(x) for x in re.findall(r"item \d+: (\d+)", text)))

    llm.default("sub", sub_sum)
    llm.script("root",
               repl("lines = context.splitlines()\nprint(len(lines))"),
               repl("parts = ['\\n'.join(lines[i:i+50]) for i in range(0, len(lines), 50)]\n"
                    "answers = llm_query_batched(['Sum the numbers after the colons:\\n' + p for p in parts])\n"
                    "total = sum(int(a) for a in answers)\nprint(len(parts), answers[:3], total)"),
               repl("FINAL(str(total))"))
    res = run_rlm("ask", str(corpus), "What is the sum of all items?", *model_flags(llm), "--json")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["answer"] == str(sum(numbers))
    assert doc["status"] == "final"
    assert doc["iterations"] == 3
    assert doc["sub_calls"] == 9  # 400 lines + the trailing empty line -> 9 parts of 50
    assert len(llm.chat_requests("sub")) == 9
    assert doc["usage"]["by_model"]["openai/sub"]["calls"] == 9
    assert doc["usage"]["by_model"]["openai/root"]["calls"] == 3
    assert doc["usage"]["by_model"]["openai/root"]["input_tokens"] > 0
    assert doc["corpus"]["files"] == 1 and doc["corpus"]["chars"] > 4000
    assert doc["elapsed_s"] > 0


def test_answer_over_one_megabyte_via_final_var(tmp_path: Path, llm: FakeLLM) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    llm.script("root", repl("print(len(context))"),
               repl("big = 'x' * 1_500_000 + 'END'\nFINAL_VAR('big')"))
    res = run_rlm("ask", str(tmp_path / "a.txt"), "Give me a long answer", *model_flags(llm))
    assert res.code == 0, res.stderr
    assert res.stdout == "x" * 1_500_000 + "END\n"


def test_model_that_never_finishes_exits_5_with_partial_answer(tmp_path: Path, llm: FakeLLM) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    llm.script("root", *[repl(f"print({i})") for i in range(3)], "My best guess: hello")
    res = run_rlm("ask", str(tmp_path), "What does it say?", *model_flags(llm), "--max-iterations", "3")
    assert res.code == 5, res.stderr
    assert res.stdout == "My best guess: hello\n"
    assert "PARTIAL" in res.stderr
    assert len(llm.chat_requests("root")) == 4  # 3 iterations + one best-answer call


def test_missing_path_is_usage_error(tmp_path: Path, llm: FakeLLM) -> None:
    res = run_rlm("ask", str(tmp_path / "nope"), "q?", *model_flags(llm))
    assert res.code == 2
    assert res.stdout == ""
    assert "no such file or directory" in res.stderr
    assert "Traceback" not in res.stderr
    assert llm.requests == []


def test_json_errors_are_a_json_document_too(tmp_path: Path, llm: FakeLLM) -> None:
    res = run_rlm("ask", str(tmp_path / "nope"), "q?", *model_flags(llm), "--json")
    assert res.code == 2
    doc = json.loads(res.stdout)
    assert doc["status"] == "error" and doc["exit_code"] == 2 and doc["answer"] is None
    assert "no such file or directory" in doc["error"] and "no such file or directory" in res.stderr
    res = run_rlm("ask", str(tmp_path), "q?", "--max-iterations", "abc", "--json", *model_flags(llm))
    doc = json.loads(res.stdout)  # a flag the parser rejects: the command never ran, --json still holds
    assert res.code == 2 and doc["exit_code"] == 2 and "--max-iterations" in doc["error"]


def test_a_memory_limit_too_small_for_the_loaded_corpus_exits_2_before_any_model_call(tmp_path: Path,
                                                                                      llm: FakeLLM) -> None:
    """Below what the worker holds once the corpus is loaded, every allocation of model code would
    fail: say so and how much to give, instead of a REPL that answers MemoryError to everything."""
    (tmp_path / "a.txt").write_text("hello\n")
    res = run_rlm("ask", str(tmp_path), "q?", "--mode", "rlm", "--memory-limit", "70M", *model_flags(llm))
    assert res.code == 2, res.stderr
    assert res.stdout == ""
    m = re.search(r"error: --memory-limit 70M is too small: the REPL worker already uses (\d+) MiB of address "
                  r"space after loading the corpus \([\d,]+ characters of context\); use --memory-limit (\d+)([MG]) or more",
                  res.stderr)
    assert m, res.stderr
    advice = int(m[2]) * (1024 if m[3] == "G" else 1)
    assert int(m[1]) + 64 <= advice < int(m[1]) + 192  # the room the check asks for, not twice the worker
    assert "Traceback" not in res.stderr
    assert llm.chat_requests("root") == []
    llm.script("root", repl("FINAL('ok')"))  # the advice, typed as given, is taken
    again = run_rlm("ask", str(tmp_path), "q?", "--mode", "rlm", "--memory-limit", m[2] + m[3], *model_flags(llm),
                    "--policy", "paper")
    assert again.code == 0 and again.stdout == "ok\n", again.stderr


def test_a_mistyped_path_is_exit_2_even_without_a_model(tmp_path: Path) -> None:
    res = run_rlm("ask", str(tmp_path / "missing"), "q?")  # no model configured either
    assert res.code == 2, res.stderr
    assert res.stdout == "" and "no such file or directory" in res.stderr and "--model" not in res.stderr


def test_no_model_configured_exits_3(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    res = run_rlm("ask", str(tmp_path), "q?")
    assert res.code == 3
    assert res.stdout == ""
    assert "--model" in res.stderr and "RLM_MODEL" in res.stderr


def test_stdin_corpus_and_env_model(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("print(context[:200])"), repl("FINAL(context.count('complaint'))"))
    res = run_rlm("ask", "-", "How many complaints?", stdin="complaint one\ncomplaint two\npraise\n",
                  env={"RLM_MODEL": "openai/root", "RLM_API_BASE": llm.url})
    assert res.code == 0, res.stderr
    assert res.stdout == "2\n"
    assert "<stdin>" in last_user(llm.chat_requests("root")[1])


def test_several_paths_and_quiet(tmp_path: Path, llm: FakeLLM) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "x.log").write_text("ERROR a\n")
    (tmp_path / "app.log").write_text("ERROR b\nERROR b\n")
    llm.script("root", repl("print([f['path'] for f in files])"), repl("FINAL(len(files))"))
    res = run_rlm("ask", "logs", "app.log", "Which error repeats most?", *model_flags(llm), "--quiet", cwd=tmp_path)
    assert res.code == 0, res.stderr
    assert res.stdout == "2\n"
    assert res.stderr == ""
    assert "'logs/x.log', 'app.log'" in last_user(llm.chat_requests("root")[1])


def test_provider_failure_exits_4(tmp_path: Path, llm: FakeLLM) -> None:
    from tests.support.fake_llm import Reply

    (tmp_path / "a.txt").write_text("hello\n")
    llm.script("root", Reply(status=401))
    res = run_rlm("ask", str(tmp_path), "q?", *model_flags(llm))
    assert res.code == 4, res.stderr
    assert "Traceback" not in res.stderr
    assert res.stdout == ""


@pytest.mark.parametrize("args", [["ask"], ["ask", "only-one-arg"]])
def test_bad_arguments_exit_2(args: list[str]) -> None:
    res = run_rlm(*args)
    assert res.code == 2
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize(("sig", "code", "error"), [(signal.SIGINT, 130, "interrupted (Ctrl-C)"),
                                                    (signal.SIGTERM, 143, "terminated (SIGTERM)")])
def test_an_interrupted_run_prints_its_json_document_and_is_recorded_as_interrupted(
        sig: int, code: int, error: str, tmp_path: Path, llm: FakeLLM) -> None:
    (tmp_path / "a.txt").write_text("some text\n")
    llm.script("root", repl("print('first look')"), repl("import time\nprint('sleeping')\ntime.sleep(120)"))
    traces = Path(os.environ["RLM_DATA_DIR"]) / "traces"
    proc = subprocess.Popen([*rlm_argv(), "ask", str(tmp_path / "a.txt"), "q?",
                             *model_flags(llm), "--mode", "rlm", "--sandbox", "process", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    def second_block_runs() -> bool:
        files = list(traces.glob("*.jsonl")) if traces.is_dir() else []
        return len(files) == 1 and len(llm.requests) >= 2 and files[0].read_text().count('"type": "code"') == 2

    try:
        deadline = time.monotonic() + 120
        while not second_block_runs():
            assert time.monotonic() < deadline and proc.poll() is None, "the second block never started"
            time.sleep(0.05)
        time.sleep(0.5)  # the block is sleeping in the worker
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err
    doc = json.loads(out)  # `| jq` gets a document on Ctrl-C too
    assert doc == {"schema": "ask-result.v1", "status": "interrupted", "error": error, "exit_code": code, "answer": None}
    trace = next(traces.glob("*.jsonl"))
    summary = json.loads(trace.read_text().splitlines()[-1])
    assert summary["type"] == "summary" and summary["status"] == "interrupted" and summary["exit_code"] == code
    assert summary["signal"] == ("SIGINT" if code == 130 else "SIGTERM") and summary["iterations"] == 2
    listed = run_rlm("trace", "list", "--json")
    assert [(t["run_id"], t["status"]) for t in json.loads(listed.stdout)["traces"]] == [(trace.stem, "interrupted")]
    assert "interrupted" in run_rlm("trace", "list").stdout
    shown = run_rlm("trace", "show", "last")
    assert shown.code == 0 and "interrupted (interrupted by SIG" in shown.stdout


def _long_question(chars: int = 130_000) -> str:
    """A pasted text of ``chars`` characters with the instruction at its very end."""
    rng = random.Random(3)
    words = ["invoice", "ledger", "account", "balance", "entry", "credit", "debit", "period", "total", "note"]
    body = " ".join(rng.choice(words) for _ in range(chars // 6))
    instruction = "\n\nINSTRUCTION AT THE END: list the three most frequent words."
    return ("START OF THE PASTED TEXT " + body)[: chars - len(instruction)] + instruction


def test_question_file_with_a_130000_character_question_is_shortened_with_a_warning(
        tmp_path: Path, llm: FakeLLM) -> None:
    question = _long_question()
    assert len(question) == 130_000
    (tmp_path / "q.txt").write_text(question + "\n")
    (tmp_path / "a.txt").write_text("alpha\n")
    llm.script("root", repl("print(len(context))"), repl("FINAL('ledger, entry, total')"))
    res = run_rlm("ask", str(tmp_path / "a.txt"), "--question-file", str(tmp_path / "q.txt"), *model_flags(llm))
    assert res.code == 0, res.stderr
    assert res.stdout == "ledger, entry, total\n"
    assert re.search(r"warning: the question \(130,000 characters, [\d,]+ tokens\) was shortened", res.stderr)
    first = question_message(llm.chat_requests("root")[0])
    assert "Question: START OF THE PASTED TEXT" in first  # its beginning
    assert "INSTRUCTION AT THE END: list the three most frequent words." in first  # and its end survive
    assert "characters of the question were cut here to fit the model's input window" in first
    assert len(first) < 80_000


def test_question_file_from_stdin_is_sent_whole_when_it_fits(tmp_path: Path, llm: FakeLLM) -> None:
    question = _long_question()
    (tmp_path / "a.txt").write_text("alpha\n")
    llm.script("root", repl("print(len(context))"), repl("FINAL('done')"))
    res = run_rlm("ask", str(tmp_path / "a.txt"), "--question-file", "-", "--root-model-window", "200000",
                  *model_flags(llm), stdin=question)
    assert res.code == 0, res.stderr
    assert "shortened" not in res.stderr
    assert f"Question: {question}\n" in question_message(llm.chat_requests("root")[0])


def test_question_file_errors_exit_2_before_any_model_call(tmp_path: Path, llm: FakeLLM) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    (tmp_path / "q.txt").write_text(_long_question())
    both = run_rlm("ask", "-", "--question-file", "-", *model_flags(llm), stdin="corpus text")
    assert both.code == 2 and "cannot both come from standard input" in both.stderr
    tiny = run_rlm("ask", str(tmp_path / "a.txt"), "--question-file", str(tmp_path / "q.txt"),
                   "--root-model-window", "1024", *model_flags(llm), "--json")
    assert tiny.code == 2, tiny.stderr
    assert "does not fit: the root model's input window of 1,024 tokens" in json.loads(tiny.stdout)["error"]
    missing = run_rlm("ask", str(tmp_path / "a.txt"), "--question-file", str(tmp_path / "nope.txt"),
                      *model_flags(llm))
    assert missing.code == 2 and "cannot read --question-file" in missing.stderr
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9?")
    bad = run_rlm("ask", str(tmp_path / "a.txt"), "--question-file", str(tmp_path / "bad.txt"), *model_flags(llm))
    assert bad.code == 2 and "is not UTF-8 text" in bad.stderr
    (tmp_path / "empty.txt").write_text("\n  \n")
    empty = run_rlm("ask", str(tmp_path / "a.txt"), "--question-file", str(tmp_path / "empty.txt"),
                    *model_flags(llm))
    assert empty.code == 2 and "the question is empty" in empty.stderr
    assert llm.requests == []
    assert all("Traceback" not in r.stderr for r in (both, tiny, missing, bad, empty))


@pytest.mark.parametrize("command", [["ask", "MISSING", "q?"], ["index", "MISSING"], ["stats", "MISSING"]])
def test_debug_is_accepted_after_the_command_name(command: list[str], tmp_path: Path, llm: FakeLLM) -> None:
    args = [str(tmp_path / "nope") if a == "MISSING" else a for a in command]
    extra = model_flags(llm) if command[0] == "ask" else []
    res = run_rlm(*args, *extra, "--debug")  # what the README's "rerun with --debug" leads people to type
    assert res.code == 2, res.stderr
    assert "no such option" not in res.stderr.lower()
    assert "Traceback (most recent call last)" in res.stderr and "UsageError" in res.stderr
    assert "no such file or directory" in res.stderr
    plain = run_rlm(*args, *extra)
    assert plain.code == 2 and "Traceback" not in plain.stderr


@pytest.mark.parametrize("closed", ["stdout", "both"])
def test_a_reader_that_goes_away_ends_the_run_quietly_with_141(tmp_path: Path, llm: FakeLLM, closed: str) -> None:
    """`rlm ask ... | true` and `rlm ask -v ... 2>&1 | head -1`: the pipe's reader is gone before
    rlm writes; rlm stops without a traceback or a "bug" exit (1) and leaves no worker behind."""
    (tmp_path / "a.txt").write_text("alpha\n")
    llm.default("root", repl("FINAL('x' * 100_000)"))
    read, write = os.pipe()
    os.close(read)  # the reader went away
    err = write if closed == "both" else subprocess.PIPE
    proc = subprocess.Popen([*rlm_argv(), "ask", str(tmp_path / "a.txt"), "q?",
                             *model_flags(llm), "--mode", "rlm", "-v"], stdout=write, stderr=err)
    os.close(write)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 141, stderr
    assert not stderr or b"Traceback" not in stderr
    # the reader was gone before rlm started: it stops before any model call (it used to run until
    # it had the answer to write when only stdout was closed)
    assert llm.chat_requests("root") == []


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_a_reader_that_leaves_mid_answer_is_141_and_a_whole_answer_is_whole(tmp_path: Path, llm: FakeLLM,
                                                                            unbuffered: str) -> None:
    """`rlm ask ... | head -c 5` of a 5 MB answer: with PYTHONUNBUFFERED=1 stdout's raw write took
    69,632 bytes, the rest was dropped silently and rlm exited 0."""
    (tmp_path / "a.txt").write_text("alpha\n")
    llm.default("root", repl("FINAL('x' * 5_000_000)"))
    env = {**os.environ, "PYTHONUNBUFFERED": unbuffered}
    argv = [*rlm_argv(), "ask", str(tmp_path / "a.txt"), "q?", *model_flags(llm), "--mode", "rlm"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stdout.read(5) == b"xxxxx"
    proc.stdout.close()  # the reader leaves with most of the answer unread
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 141 and b"Traceback" not in stderr, stderr
    whole = subprocess.run(argv, capture_output=True, env=env, timeout=120)
    assert whole.returncode == 0 and whole.stdout == b"x" * 5_000_000 + b"\n"


def test_a_base_url_that_is_not_a_url_is_a_usage_error_before_any_loading(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    for flags, env in (["--api-base", "notaurl"], {}), ([], {"RLM_API_BASE": "localhost:8000"}):
        res = run_rlm("ask", str(tmp_path), "q?", "--model", "openai/x", *flags, env=env)
        assert res.code == 2 and "not an http(s) URL" in res.stderr and "Traceback" not in res.stderr
        assert "corpus loaded" not in res.stderr


def test_a_missing_api_key_fails_at_once_with_exit_4_and_says_which_key(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "RLM_API_KEY", "RLM_API_BASE")}
    proc = subprocess.run([*rlm_argv(), "ask", str(tmp_path), "q?", "--model", "openai/gpt-x",
                           "--mode", "rlm"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 4 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert "check your API key" in proc.stderr and "attempts" not in proc.stderr  # not retried as an outage


def test_an_error_of_a_multi_question_run_is_one_json_line(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    res = run_rlm("ask", str(tmp_path), "--question", "a", "--question", "b", "--json")  # no model configured
    assert res.code == 3
    (line,) = res.stdout.splitlines()
    assert json.loads(line)["exit_code"] == 3
