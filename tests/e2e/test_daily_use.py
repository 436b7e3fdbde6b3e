"""End-to-end: what a person using ``rlm`` every day notices (issue 40), through the ``rlm``
command against the scripted model server."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import model_flags, run_rlm, two_file_repo
from tests.support.fake_llm import NOT_JSON, FakeLLM, Reply

#: The warning of ``--sandbox none``: the same on every machine (unlike what ``auto`` leaves open).
NONE_WARNING = "sandbox: none; model code runs unconfined"


def test_sandbox_notes_show_once_per_machine_and_with_v(tmp_path: Path, llm: FakeLLM) -> None:
    repo = two_file_repo(tmp_path)
    llm.default("root", "FINAL(42)")
    flags = [*model_flags(llm), "--sandbox", "none", "--no-llm-cache"]
    first = run_rlm("ask", str(repo), "What does foo return?", *flags)
    assert first.code == 0, first.stderr
    assert first.stderr.count(NONE_WARNING) == 1
    again = run_rlm("ask", str(repo), "What does foo return?", *flags)
    assert again.code == 0 and again.stdout == "42\n"
    assert NONE_WARNING not in again.stderr  # said once on this machine
    verbose = run_rlm("ask", str(repo), "What does foo return?", *flags, "-v")
    assert NONE_WARNING in verbose.stderr  # -v shows it again
    doctor = run_rlm("doctor", env={"RLM_SANDBOX": "none"})
    assert doctor.code == 0 and NONE_WARNING in doctor.stdout  # rlm doctor always says it


def test_usage_error_is_one_line_without_sandbox_notes(tmp_path: Path, llm: FakeLLM) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    res = run_rlm("ask", str(empty), "What?", *model_flags(llm), "--sandbox", "none")
    assert res.code == 2
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: the corpus is empty"), res.stderr
    # The note was not spent on a run that never ran model code: the next run still shows it.
    llm.default("root", "FINAL(42)")
    ok = run_rlm("ask", str(two_file_repo(tmp_path)), "What does foo return?", *model_flags(llm),
                 "--sandbox", "none")
    assert ok.code == 0 and NONE_WARNING in ok.stderr


def _cite_repo(tmp_path: Path) -> Path:
    root = tmp_path / "cite"
    (root / "src").mkdir(parents=True)
    (root / "src" / "conf.py").write_text("RETRIES = 3\nTIMEOUT = 30\n")
    (root / "src" / "net.py").write_text("from conf import RETRIES\n\ndef fetch():\n    return RETRIES\n")
    (root / "notes.txt").write_text("retries are discussed in the design notes\n")
    return root


def test_cite_lists_only_the_lines_the_answer_rests_on_in_the_json_order(tmp_path: Path, llm: FakeLLM) -> None:
    root = _cite_repo(tmp_path)
    # The leads show lines of every file holding the question's words; the answer cites two files.
    llm.script("root", "```repl\nprint(read_file('src/net.py'))\nprint(read_file('src/conf.py'))\n```",
               "FINAL('fetch (src/net.py:3-4) returns RETRIES, set to 3 in src/conf.py:1')")
    flags = [*model_flags(llm), "--leads", "--no-llm-cache"]
    res = run_rlm("ask", str(root), "Where are retries configured?", *flags, "--cite")
    assert res.code == 0, res.stderr
    answer, _, sources = res.stdout.partition("\n\nSources:\n")
    listed = [line.removeprefix("- ") for line in sources.splitlines()]
    assert listed and all(not line.startswith("notes.txt") for line in listed)  # a lead, not cited
    llm.script("root", "```repl\nprint(read_file('src/net.py'))\nprint(read_file('src/conf.py'))\n```",
               "FINAL('fetch (src/net.py:3-4) returns RETRIES, set to 3 in src/conf.py:1')")
    doc = json.loads(run_rlm("ask", str(root), "Where are retries configured?", *flags, "--json").stdout)
    assert any(not s["cited"] for s in doc["sources"])  # the run looked at more than it cites
    cited = [f"{s['path']}:{s['start_line']}" + (f"-{s['end_line']}" if s["end_line"] != s["start_line"] else "")
             for s in doc["sources"] if s["cited"]]
    assert listed == cited  # the same ranges, in the same order


def test_cite_prints_no_sources_without_a_final_answer(tmp_path: Path, llm: FakeLLM) -> None:
    root = _cite_repo(tmp_path)
    llm.default("root", "```repl\nprint(read_file('src/conf.py'))\n```")
    res = run_rlm("ask", str(root), "Where are retries configured?", *model_flags(llm), "--cite",
                  "--max-iterations", "1", "--no-llm-cache")
    assert res.code == 5, res.stderr
    assert res.stdout and "Sources:" not in res.stdout


def _fails(llm: FakeLLM, tmp_path: Path, *extra: str) -> tuple[int, str]:
    repo = tmp_path / "repo" if (tmp_path / "repo").is_dir() else two_file_repo(tmp_path)
    res = run_rlm("ask", str(repo), "What does foo return?", *model_flags(llm), "--no-llm-cache",
                  "--no-leads", *extra)
    lines = [line for line in res.stderr.splitlines() if line.startswith(("error:", "warning:"))]
    return res.code, "\n".join(lines)


def test_a_timeout_is_not_a_server_that_could_not_be_reached(tmp_path: Path, llm: FakeLLM) -> None:
    llm.default("root", Reply(text="FINAL(42)", delay_s=3))
    code, err = _fails(llm, tmp_path, "--request-timeout", "1", "--retries", "0")
    assert code == 4 and "timed out after 1 s" in err and "raise --request-timeout" in err, err
    assert "could not connect" not in err and "server is running" not in err


def test_a_stream_kept_alive_past_the_request_timeout_is_said_as_a_timeout(tmp_path: Path, llm: FakeLLM) -> None:
    """A server that keeps the stream open with ``: ping`` comments: litellm's read timeout never
    fires, rlm's own stream deadline does; the words are the same as for litellm's timeout (under
    load this path also won the race in the test above and was worded as an unknown failure)."""
    llm.default("root", Reply(text="FINAL(42)", ping_for_s=8))
    code, err = _fails(llm, tmp_path, "--request-timeout", "1", "--retries", "0")
    assert code == 4 and "timed out after 1 s" in err and "raise --request-timeout" in err, err
    assert "kept failing" not in err


def test_a_dropped_connection_is_said_as_such(tmp_path: Path, llm: FakeLLM) -> None:
    llm.default("root", Reply(drop=True))
    code, err = _fails(llm, tmp_path, "--retries", "1")
    assert code == 4 and f"{llm.url} closed the connection without answering (after 2 attempts)" in err, err
    assert "could not connect" not in err
    llm.default("root", Reply(text="FINAL(42) " * 40, stream_cut_after=1, stream_chunk_chars=8))
    code, err = _fails(llm, tmp_path, "--retries", "0")
    assert code == 4 and "dropped in the middle of the reply" in err and "could not connect" not in err, err


def test_attempts_are_counted_one_way_and_a_garbage_reply_is_not_a_plain_one(tmp_path: Path, llm: FakeLLM) -> None:
    llm.default("root", Reply(status=500))
    code, server_error = _fails(llm, tmp_path, "--retries", "1")
    assert code == 4 and "(after 2 attempts)" in server_error, server_error
    llm.default("root", Reply(raw_body=NOT_JSON))
    code, garbage = _fails(llm, tmp_path, "--retries", "1")
    assert code == 4 and "not a chat completion" in garbage and "(after 2 attempts)" in garbage, garbage
    # the error, and the one retry said as what it is (issue 48: retries are visible); nothing calls
    # the garbage a plain reply
    warning, error = garbage.splitlines()
    assert warning.startswith("warning:") and "not a chat completion" in warning and "retrying" in warning, garbage
    assert error.startswith("error:") and "plain reply" not in garbage, garbage


def test_an_api_base_without_a_model_names_the_base_when_its_list_is_unusable(tmp_path: Path, llm: FakeLLM) -> None:
    llm.models_list = []
    res = run_rlm("ask", str(two_file_repo(tmp_path)), "q?", "--api-base", llm.url)
    assert res.code == 3 and res.stderr.count("\n") == 1, res.stderr
    assert f"{llm.url}/models" in res.stderr and "listed no model" in res.stderr and "--model" in res.stderr


def test_no_completed_call_shows_no_cost_and_counts_agree_after_a_stop(tmp_path: Path, llm: FakeLLM) -> None:
    repo = two_file_repo(tmp_path)
    llm.default("root", Reply(text="FINAL(42)", delay_s=4))
    res = run_rlm("ask", str(repo), "What does foo return?", *model_flags(llm), "--no-llm-cache", "--timeout", "2")
    assert res.code == 6, res.stderr
    assert "── iteration 1 ──" in res.stderr and "1 iteration, 0 sub-calls" in res.stderr  # the same count
    assert "cost none (no model call completed)" in res.stderr and "$0.0000" not in res.stderr
    llm.default("root", Reply(status=500))
    failed = run_rlm("ask", str(repo), "What does foo return?", *model_flags(llm), "--no-llm-cache", "--retries", "0")
    assert failed.code == 4
    llm.default("root", "FINAL(42)")
    assert run_rlm("ask", str(repo), "What does foo return?", *model_flags(llm), "--no-llm-cache").code == 0
    listed = run_rlm("trace", "list")
    rows = {line.split()[3]: line.split()[6] for line in listed.stdout.splitlines()[1:]}
    assert rows == {"budget_exceeded": "-", "error": "-", "final": "unknown"}, listed.stdout  # one rule
    docs = json.loads(run_rlm("trace", "list", "--json").stdout)["traces"]
    assert sorted((t["status"], t["calls"]) for t in docs) == [("budget_exceeded", 0), ("error", 0), ("final", 1)]


def _runs(tmp_path: Path, llm: FakeLLM, n: int) -> list[str]:
    """``n`` recorded runs, oldest first: their run ids (the questions of one ``rlm ask``, one after
    another, each with a trajectory of its own)."""
    repo = tmp_path / "repo" if (tmp_path / "repo").is_dir() else two_file_repo(tmp_path)
    llm.default("root", "FINAL(42)")
    questions = [arg for i in range(n) for arg in ("--question", f"q{i}?")]
    assert run_rlm("ask", str(repo), *questions, *model_flags(llm), "--quiet").code == 0
    listed = json.loads(run_rlm("trace", "list", "--json").stdout)["traces"]
    return [t["run_id"] for t in reversed(listed)]


def test_trace_list_n_rm_and_prune_stay_in_the_traces_folder(tmp_path: Path, llm: FakeLLM) -> None:
    ids = _runs(tmp_path, llm, 4)
    traces = Path(json.loads(run_rlm("trace", "list", "--json").stdout)["traces_dir"])
    newest = json.loads(run_rlm("trace", "list", "-n", "2", "--json").stdout)["traces"]
    assert [t["run_id"] for t in newest] == ids[:-3:-1]
    assert len(run_rlm("trace", "list", "-n", "1").stdout.splitlines()) == 2  # the header and one row
    # Nothing outside the traces folder: a copy elsewhere, a link leading out; nothing removed then.
    outside = tmp_path / "mine.jsonl"
    outside.write_bytes((traces / f"{ids[0]}.jsonl").read_bytes())
    (traces / "link.jsonl").symlink_to(outside)
    for ref in (str(outside), "link"):
        res = run_rlm("trace", "rm", ids[0], ref)
        assert res.code == 2 and "rlm removes only those" in res.stderr and res.stdout == "", res.stderr
    assert outside.exists() and (traces / f"{ids[0]}.jsonl").exists()
    (traces / "link.jsonl").unlink()
    res = run_rlm("trace", "rm", ids[0], "last")
    assert res.code == 0 and res.stdout.split() == [ids[0], ids[-1]] and "removed 2 trajectories" in res.stderr
    assert sorted(p.stem for p in traces.glob("*.jsonl")) == sorted(ids[1:3])  # ids of one second: any order
    assert run_rlm("trace", "rm", "nosuchid").code == 2
    # prune: a rule is needed; --dry-run removes nothing; --keep keeps the newest.
    assert run_rlm("trace", "prune").code == 2
    dry = run_rlm("trace", "prune", "--keep", "1", "--dry-run")
    assert dry.code == 0 and dry.stdout.split() == [ids[1]] and "would remove 1 trajectory" in dry.stderr
    assert len(list(traces.glob("*.jsonl"))) == 2
    assert run_rlm("trace", "prune", "--older-than", "1h").stdout == ""  # none is that old
    first = traces / f"{ids[1]}.jsonl"  # make one of them 40 days old
    lines = first.read_text().splitlines()
    head = json.loads(lines[0])
    head["ts"] -= 40 * 86400
    first.write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    assert run_rlm("trace", "prune", "--older-than", "30d").stdout.split() == [ids[1]]
    assert [p.stem for p in traces.glob("*.jsonl")] == [ids[2]]
    assert oct((traces / f"{ids[2]}.jsonl").stat().st_mode & 0o777) == "0o600"
    assert run_rlm("trace", "prune", "--older-than", "soon").code == 2


def test_cache_clear_says_it_keeps_the_trajectories(tmp_path: Path, llm: FakeLLM) -> None:
    _runs(tmp_path, llm, 1)
    res = run_rlm("cache", "clear", "--json")
    assert res.code == 0 and "kept the trajectories (1 file," in res.stderr and "rlm trace prune" in res.stderr
    assert json.loads(res.stdout)["traces_kept"]["files"] == 1
    assert len(json.loads(run_rlm("trace", "list", "--json").stdout)["traces"]) == 1


def test_counts_are_proper_plurals(tmp_path: Path, llm: FakeLLM) -> None:
    corpus = tmp_path / "one"
    corpus.mkdir()
    (corpus / "a.txt").write_text("the answer is 42\n")
    llm.default("root", "FINAL(42)")
    res = run_rlm("ask", str(corpus), "--question", "What is the answer?", *model_flags(llm), "--no-llm-cache")
    assert res.code == 0, res.stderr
    assert "loaded 1 file, " in res.stderr and ", 1 chunk " in res.stderr and "1 question: 1 answered" in res.stderr
    assert "1 files" not in res.stderr and "1 chunks" not in res.stderr


def test_doctor_names_the_model_and_where_it_comes_from(tmp_path: Path, llm: FakeLLM) -> None:
    res = run_rlm("doctor")
    assert res.code == 0 and "\nmodel:          none (not set and nothing detected" in res.stdout
    res = run_rlm("doctor", env={"RLM_MODEL": "openai/root"})
    assert "\nmodel:          openai/root (env RLM_MODEL)" in res.stdout
    doc = json.loads(run_rlm("doctor", "--json", env={"RLM_API_BASE": llm.url}).stdout)
    assert doc["model"]["model"] == "openai/root" and "first model listed by" in doc["model"]["source"]
    assert llm.requests == []  # no model was called


def test_config_unset_removes_a_setting(tmp_path: Path) -> None:
    assert run_rlm("config", "set", "sandbox", "none").code == 0  # `none` is a level here, not a removal
    assert run_rlm("config", "set", "max-cost", "2.5").code == 0
    res = run_rlm("config", "unset", "sandbox")
    assert res.code == 0 and "sandbox removed from" in res.stderr
    shown = run_rlm("config", "show").stdout
    assert 'sandbox = "auto"  # default' in shown and "max_cost = 2.5  # config file" in shown
    again = run_rlm("config", "unset", "sandbox")
    assert again.code == 0 and "is not set in" in again.stderr
    assert run_rlm("config", "unset", "no-such-key").code == 2
    path = Path(run_rlm("config", "path").stdout.strip())
    path.write_text(path.read_text() + "max_cots = 3\n")  # a typo `config show` complains about
    assert run_rlm("config", "show").code == 2
    assert run_rlm("config", "unset", "max_cots").code == 0 and run_rlm("config", "show").code == 0


def test_a_gzip_stream_on_stdin_is_read_like_a_gz_file(tmp_path: Path, llm: FakeLLM) -> None:
    import gzip

    llm.default("root", "```repl\nprint(context[:200])\n```")
    llm.script("root", "```repl\nprint(context[:200])\n```", "FINAL('found')")
    data = gzip.compress(b"2024-01-01 ERROR disk full on db1\n" * 20)
    res = run_rlm("ask", "-", "Which error?", *model_flags(llm), "--no-llm-cache", stdin=data)
    assert res.code == 0 and res.stdout == "found\n", res.stderr
    assert "read as 1 gz" in res.stderr and "disk full on db1" in res.stderr  # what the code printed
    big = gzip.compress(b"x" * 50_000)  # decompressed within --max-file-size, in the decoder
    res = run_rlm("ask", "-", "q?", *model_flags(llm), "--max-file-size", "10K", stdin=big)
    assert res.code == 2 and "1 too large" in res.stderr


def test_skip_advice_fits_the_file(tmp_path: Path, llm: FakeLLM) -> None:
    corpus = tmp_path / "big"
    corpus.mkdir()
    (corpus / "blob.bin").write_bytes(bytes(range(256)) * 100)  # binary, 25 KiB
    (corpus / "notes.txt").write_text("word " * 6000)  # text, 30 KB
    res = run_rlm("ask", str(corpus), "q?", *model_flags(llm), "--max-file-size", "10K")
    assert res.code == 2, res.stderr
    assert "blob.bin" not in res.stderr  # binary: raising --max-file-size would not read it, so no advice
    assert "notes.txt: 30,000 bytes is over --max-file-size" in res.stderr  # this one it would
    assert "(1 binary, 1 too large)" in res.stderr


def test_a_path_over_path_max_is_not_a_permission_problem(tmp_path: Path, llm: FakeLLM) -> None:
    import os
    import sys

    if not sys.platform.startswith("linux"):
        return  # PATH_MAX is Linux's 4,096 bytes here
    root = tmp_path / "deep"
    root.mkdir()
    here = os.open(root, os.O_RDONLY)
    try:  # folders made relative to an open one: the whole path never has to fit
        for _ in range(24):
            os.mkdir("d" * 200, dir_fd=here)
            nxt = os.open("d" * 200, os.O_RDONLY, dir_fd=here)
            os.close(here)
            here = nxt
        fd = os.open("f.txt", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=here)
        os.write(fd, b"hello\n")
        os.close(fd)
    finally:
        os.close(here)
    res = run_rlm("ask", str(root), "q?", *model_flags(llm))
    assert res.code == 2 and "over what the system allows (PATH_MAX" in res.stderr, res.stderr[-600:]
    assert "permissions" not in res.stderr and "1 path too long" in res.stderr


def test_a_cell_cut_by_the_runs_timeout_says_so_rounded(tmp_path: Path, llm: FakeLLM) -> None:
    import re

    llm.script("root", "```repl\nimport time\nprint('a')\ntime.sleep(60)\n```", "FINAL(done)")
    res = run_rlm("ask", str(two_file_repo(tmp_path)), "q?", *model_flags(llm), "--no-llm-cache", "--no-leads",
                  "--timeout", "6")
    assert res.code == 6, res.stderr
    assert re.search(r"the cell timed out after \d+(\.\d)? s \(all the run's --timeout had left\)", res.stderr), res.stderr


def test_the_in_flight_count_is_not_one_low(tmp_path: Path, llm: FakeLLM) -> None:
    llm.default("sub", Reply(text="ok", delay_s=0.3))
    llm.script("root", "```repl\nprint(llm_query_batched([f'part {i}' for i in range(8)]))\n```", "FINAL(done)")
    res = run_rlm("ask", str(two_file_repo(tmp_path)), "q?", *model_flags(llm), "--no-llm-cache", "--no-leads",
                  "--max-concurrency", "2", "--color", "never")
    assert res.code == 0, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.startswith(("sub-calls 2/8", "sub-calls 4/8",
                                                                          "sub-calls 6/8"))]
    assert len(lines) == 3 and all("· 2 in flight ·" in line for line in lines), lines
    assert llm.max_in_flight == 2
