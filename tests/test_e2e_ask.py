"""End-to-end: the ``rlm`` command as a subprocess against the scripted model server."""

from __future__ import annotations

import json
import random
import re
import string
from pathlib import Path

import pytest

from tests.conftest import model_flags, run_rlm
from tests.fake_llm import FakeLLM, last_user, repl


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
                  r"space after loading the corpus \([\d,]+ characters of context\); use --memory-limit (\d+)M or more",
                  res.stderr)
    assert m, res.stderr
    assert int(m[2]) >= int(m[1]) + 64  # the advice leaves the room the check asks for
    assert "Traceback" not in res.stderr
    assert llm.chat_requests("root") == []


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
    from tests.fake_llm import Reply

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
