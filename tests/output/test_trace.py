"""Trajectories: what every run writes (and never writes: secrets), the `rlm trace` commands,
and `rlm replay` reproducing the answer with the model server stopped."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlm_cli.app import replay
from rlm_cli.commands.app import app
from rlm_cli.errors import UsageError
from rlm_cli.output.trace import SCHEMA_VERSION, build_tree, event, find_trace, list_traces, read_trace, traces_dir
from tests.support.cli import run_rlm
from tests.support.fake_llm import FakeLLM, repl
from tests.support.inproc import corpus, run

SECRET = "sk-test-SECRET-0123456789abcdef"


def _recorded_run(tmp_path: Path, llm: FakeLLM, **overrides: object) -> tuple[object, Path]:
    """A run with batched sub-calls, a child loop and a FINAL_VAR; returns (Run, trace path)."""
    llm.script("root",
               repl("parts = [context[i:i + 20] for i in range(0, 60, 20)]\n"
                    "answers = llm_query_batched(['Name the first word: ' + p for p in parts])\n"
                    "print(answers)\nprint('<script>alert(1)</script>')"),
               repl("deep = rlm_query('Count the lines', context='a\\nb\\nc')\nprint(deep)"),
               repl("n = len(context.splitlines())\nFINAL(f'lines={n}')"),
               repl("summary = {'sub': answers, 'deep': deep}\nFINAL_VAR('summary')"))
    llm.default("sub", lambda req: "word:" + req["messages"][-1]["content"].split(": ", 1)[1][:5].strip())
    r = run(llm, [corpus(tmp_path)], "Summarise", api_key=SECRET, max_depth=2, **overrides)
    assert r.error is None, r.error
    assert r.outcome is not None and r.outcome.trace_path is not None
    return r, r.outcome.trace_path


def test_every_run_writes_a_trajectory_without_secrets(tmp_path: Path, llm: FakeLLM) -> None:
    r, path = _recorded_run(tmp_path, llm)
    assert path.parent == traces_dir() and path.suffix == ".jsonl"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    text = path.read_text()
    assert SECRET not in text and "SECRET" not in text
    events = [json.loads(line) for line in text.splitlines()]
    head = events[0]
    assert head["type"] == "header" and head["question"] == "Summarise"
    assert head["paths"] == [str(corpus(tmp_path))]
    assert head["config"]["model"] == "openai/root" and head["config"]["max_depth"] == 2
    assert head["config"]["api_key"] == "sk-...cdef"
    for ev in events:
        assert ev["schema"] == SCHEMA_VERSION and isinstance(ev["type"], str)
        assert isinstance(ev["depth"], int) and ev["ts"] > 1e9
        assert "total_tokens" in ev and "total_cost_usd" in ev
    totals = [ev["total_tokens"] for ev in events]
    assert totals == sorted(totals) and totals[-1] > 0
    kinds = {ev["type"] for ev in events}
    assert {"corpus", "mode", "iteration", "root_call", "code", "output", "sub_call", "recursion", "final",
            "summary"} <= kinds
    roots = [ev for ev in events if ev["type"] == "root_call"]
    assert len(roots) == 4 and all(ev["response"] and ev["request_key"] and ev["input_tokens"] > 0 for ev in roots)
    assert all("cost_usd" in ev and "latency_s" in ev for ev in roots)
    subs = [ev for ev in events if ev["type"] == "sub_call"]
    assert len(subs) == 3 and {ev["depth"] for ev in subs} == {1}
    assert all(ev["response"].startswith("word:") and ev["prompt_head"].startswith("Name the first word")
               for ev in subs)
    assert [ev["depth"] for ev in events if ev["type"] == "iteration"] == [0, 0, 1, 0]
    summary = events[-1]
    assert summary["type"] == "summary" and summary["status"] == "final"
    assert json.loads(summary["answer"]) == json.loads(r.answer)  # type: ignore[attr-defined]


def test_trace_flag_and_partial_runs(tmp_path: Path, llm: FakeLLM) -> None:
    target = tmp_path / "my" / "run.jsonl"
    llm.script("root", repl("print(1)"), "best so far")
    r = run(llm, [corpus(tmp_path)], trace=target, max_iterations=1)
    assert r.error is not None and int(r.error.exit_code) == 5
    events = read_trace(target)
    assert events[-1]["type"] == "summary" and events[-1]["status"] == "max_iterations"
    assert events[-1]["answer"] == "best so far"
    assert not traces_dir().exists()  # --trace FILE replaces the default location


def test_tree_nests_iterations_calls_and_recursion() -> None:
    evs = [event("header", 0, run_id="x"), event("iteration", 0, iteration=1), event("root_call", 0),
           event("code", 0), event("sub_call", 1), event("recursion", 1, mode="rlm"), event("iteration", 1),
           event("root_call", 1), event("final", 1, status="final"), event("output", 0), event("iteration", 0),
           event("final", 0, status="final"), event("summary", 0, status="final")]
    root = build_tree(evs)
    kinds = [n.event["type"] for n in root.children if n.event]
    assert kinds == ["iteration", "iteration", "summary"]
    it1 = root.children[0]
    assert [c.event["type"] for c in it1.children if c.event] == ["root_call", "code", "sub_call", "recursion",
                                                                   "output"]
    child = it1.children[3]
    assert [c.event["type"] for c in child.children if c.event] == ["iteration"]
    assert [c.event["type"] for c in child.children[0].children if c.event] == ["root_call", "final"]
    assert [c.event["type"] for c in root.children[1].children if c.event] == ["final"]


def test_a_trace_file_given_twice_holds_the_last_run(tmp_path: Path, llm: FakeLLM) -> None:
    target = tmp_path / "run.jsonl"
    target.write_text("old\n")
    target.chmod(0o644)
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.py").write_text("X = 1\n")
    for answer in ("first", "second"):
        llm.script("root", repl("print(grep('X'))"), repl(f"FINAL({answer!r})"))
        res = run_rlm("ask", str(root), "What is X?", "--model", "openai/root", "--api-base", llm.url, "--mode", "rlm", "--no-llm-cache",
                      "--trace", str(target))
        assert res.code == 0, res.stderr
    events = read_trace(target)
    assert [e["type"] for e in events].count("header") == 1
    assert events[-1]["type"] == "summary" and events[-1]["answer"] == "second"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600  # private again: it holds corpus text


def test_find_trace_by_id_prefix_last_and_path(tmp_path: Path) -> None:
    d = tmp_path / "t"
    d.mkdir()
    for name in ("20250101-000000-aaaaaa", "20250101-000000-aaabbb", "20250102-000000-cccccc"):
        (d / f"{name}.jsonl").write_text(json.dumps(event("header", 0, run_id=name, question="q")) + "\n")
    os.utime(d / "20250102-000000-cccccc.jsonl", (2e9, 2e9))
    assert find_trace("20250101-000000-aaabbb", d).stem == "20250101-000000-aaabbb"
    assert find_trace("20250102", d).stem == "20250102-000000-cccccc"
    assert find_trace("last", d).stem == "20250102-000000-cccccc"
    assert find_trace(str(d / "20250101-000000-aaaaaa.jsonl")).stem == "20250101-000000-aaaaaa"
    with pytest.raises(UsageError, match="matches 2"):
        find_trace("20250101-000000-aaa", d)
    with pytest.raises(UsageError, match="no trajectory"):
        find_trace("nope", d)
    assert [i.run_id for i in list_traces(d)] == ["20250102-000000-cccccc", "20250101-000000-aaabbb",
                                                   "20250101-000000-aaaaaa"]
    assert list_traces(d)[0].status == "incomplete"


def test_trace_commands_list_show_and_export(tmp_path: Path, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    r, path = _recorded_run(tmp_path, llm)
    cli = CliRunner()
    res = cli.invoke(app, ["trace", "list"])
    assert res.exit_code == 0, res.output
    assert path.stem in res.stdout and "final" in res.stdout and "Summarise" in res.stdout
    res = cli.invoke(app, ["trace", "list", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["traces_dir"] == str(traces_dir()) and len(doc["traces"]) == 1
    entry = doc["traces"][0]
    assert entry["run_id"] == path.stem and entry["path"] == str(path) and entry["status"] == "final"
    assert entry["question"] == "Summarise" and entry["mode"] == "rlm" and entry["tokens"] > 0
    assert entry["started"].endswith("+00:00") and entry["elapsed_s"] > 0
    res = cli.invoke(app, ["trace", "show", path.stem[:15]])
    assert res.exit_code == 0, res.output
    out = res.stdout
    for piece in ("iteration 1", "root model openai/root", "sub-call openai/sub", "rlm_query → depth 1 (rlm)",
                  "iteration 1 (depth 1)", "final after 1 iteration", "llm_query_batched"):
        assert piece in out, piece
    monkeypatch.chdir(tmp_path)
    res = cli.invoke(app, ["trace", "export", "last", "--html"])
    assert res.exit_code == 0, res.output
    page = (tmp_path / f"{path.stem}.html").read_text()
    assert (tmp_path / f"{path.stem}.html").stat().st_mode & 0o777 == 0o600  # private like the trace
    res = cli.invoke(app, ["trace", "export", "last", "--html", "-o", str(tmp_path / "no" / "such" / "x.html")])
    assert isinstance(res.exception, UsageError) and "cannot write" in str(res.exception)
    assert not (tmp_path / "no").exists()
    assert page.startswith("<!doctype html>") and "</html>" in page
    assert "src=" not in page and "href=" not in page and "<script" not in page  # self-contained, escaped
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "llm_query_batched" in page and "lines=3" in page and "sk-...cdef" in page and SECRET not in page


def test_replay_reproduces_the_answer_with_the_provider_stopped(tmp_path: Path, llm: FakeLLM) -> None:
    r, path = _recorded_run(tmp_path, llm)
    served = len(llm.requests)
    llm.close()
    plan = replay.plan(path)
    assert plan.settings.api_key is None and plan.question == "Summarise"
    events: list[dict] = []
    outcome = replay.replay(plan, emit=events.append)
    assert outcome.result.answer == r.answer  # type: ignore[attr-defined]
    assert outcome.result.answer == plan.recorded_answer
    assert len(llm.requests) == served
    assert sum(1 for e in events if e["type"] == "sub_call") == 3
    assert [e["depth"] for e in events if e["type"] == "iteration"] == [0, 0, 1, 0]


def test_replay_command_end_to_end(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", repl("hits = [l for l in context.splitlines() if 'gamma' in l]\nprint(hits)"),
               repl("FINAL(llm_query('Rephrase: ' + hits[0]))"))
    llm.script("sub", "Gamma comes before delta.")
    r = run(llm, [corpus(tmp_path)], "Where is gamma?")
    assert r.answer == "Gamma comes before delta."
    llm.close()
    assert r.outcome is not None and r.outcome.trace_path is not None
    res = run_rlm("replay", r.outcome.run_id)
    assert res.code == 0, res.stderr
    assert res.stdout == "Gamma comes before delta.\n"
    assert "differs" not in res.stderr
    res = run_rlm("replay", "no-such-run")
    assert res.code == 2 and "no trajectory" in res.stderr


def test_replay_from_another_folder_sees_the_same_context(tmp_path: Path, llm: FakeLLM,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """File and glob paths are shown relative to the folder the run started in."""
    corpus(tmp_path)
    monkeypatch.chdir(tmp_path)
    llm.script("root", repl("head = context.splitlines()[0]\nprint(head)"), repl("FINAL(head)"))
    r = run(llm, ["corpus/*.txt"], "First line?")
    assert r.answer == "==> corpus/notes.txt <=="
    llm.close()
    assert r.outcome is not None and r.outcome.trace_path is not None
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    outcome = replay.replay(replay.plan(r.outcome.trace_path), emit=lambda e: None)
    assert outcome.result.answer == r.answer
    assert os.getcwd() == str(elsewhere)  # back where it was


def test_direct_mode_run_is_recorded_and_replayed(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", "Four words.")
    r = run(llm, [corpus(tmp_path)], "How many words?", mode="auto")
    assert r.outcome is not None and r.outcome.result.mode == "direct" and r.outcome.trace_path is not None
    llm.close()
    events = read_trace(r.outcome.trace_path)
    assert [e["mode"] for e in events if e["type"] == "mode"] == ["direct"]
    assert [e["response"] for e in events if e["type"] == "root_call"] == ["Four words."]
    outcome = replay.replay(replay.plan(r.outcome.trace_path), emit=lambda e: None)
    assert outcome.result.mode == "direct" and outcome.result.answer == "Four words."


def test_a_recorded_trajectory_rebuilds_byte_identically_from_the_vocabulary(tmp_path: Path, llm: FakeLLM) -> None:
    """Every line of a run's trajectory is an event of ``rlm_cli.events`` with its declared fields,
    in the order :func:`event` writes them (then the totals and a header's signature)."""
    _, path = _recorded_run(tmp_path, llm)
    stamped = ("total_tokens", "total_cost_usd", "signature")
    lines = path.read_text(encoding="utf-8").splitlines()
    for line in lines:
        ev = json.loads(line)
        fields = {k: v for k, v in ev.items() if k not in ("schema", "type", "depth", "ts", *stamped)}
        rebuilt = event(ev["type"], ev["depth"], **fields)
        rebuilt["ts"] = ev["ts"]
        rebuilt.update({k: ev[k] for k in stamped if k in ev})
        assert json.dumps(rebuilt, ensure_ascii=False, default=str) == line
    assert {json.loads(line)["type"] for line in lines} >= {"header", "corpus", "sub_call", "recursion", "summary"}


def test_a_lone_surrogate_is_written_as_its_json_escape_and_reads_back(tmp_path: Path) -> None:
    """A corpus file's ``"\\ud800"`` reaches events (a prompt, an output); it cannot be UTF-8, so the
    trajectory line carries its JSON escape instead of crashing the run (issue 47)."""
    from rlm_cli.output.trace import TraceWriter

    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path)
    writer.write({"type": "x", "text": "a\ud800b é"})
    writer.close()
    raw = path.read_bytes()
    assert b"\\ud800" in raw and "é".encode() in raw
    assert json.loads(raw)["text"] == "a\ud800b é"


def test_a_trajectory_with_odd_lines_is_shown_listed_and_exported_without_a_crash(tmp_path: Path) -> None:
    """A trajectory is a file anyone may edit: a line that is not a JSON object is skipped, and a
    header whose ``config`` or ``paths`` is of another type is shown without them (before: a
    traceback on ``[1, 2]`` as a line, on ``"config": []`` in the HTML export)."""
    traces = tmp_path / "data" / "traces"
    traces.mkdir(parents=True)
    path = traces / "20250101-000000-abcdef.jsonl"
    header = {"schema": SCHEMA_VERSION, "type": "header", "depth": 0, "ts": "noon", "run_id": path.stem,
              "question": "Odd?", "config": ["not", "a", "dict"], "paths": "repo"}
    summary = {"schema": SCHEMA_VERSION, "type": "summary", "depth": 0, "ts": 1.0, "status": "final",
               "answer": "yes", "usage": [], "total_tokens": "many", "total_cost_usd": "free"}
    odd = [{"type": "iteration", "iteration": 1, "phase": "explore", "helpers": ["grep"]},
           {"type": "root_call", "model": "m", "input_tokens": "ten", "latency_s": "slow", "history": [1]},
           {"type": "output", "output": "hi", "output_chars": None, "elapsed_s": [], "sub_calls": "two"},
           {"type": "phase", "iteration": 1, "phase": "explore", "helpers": {"grep": "3"}}]
    lines = [json.dumps(header), "[1, 2]", "42", '"text"',
             *(json.dumps({"schema": SCHEMA_VERSION, "depth": 0, "ts": 1.0, **ev}) for ev in odd), json.dumps(summary)]
    path.write_text("\n".join(lines) + "\n")
    env = {"RLM_DATA_DIR": str(tmp_path / "data")}
    shown = run_rlm("trace", "show", str(path), env=env)
    assert shown.code == 0 and "Traceback" not in shown.stderr, shown.stderr
    listed = run_rlm("trace", "list", "--json", env=env)
    assert listed.code == 0 and "Traceback" not in listed.stderr, listed.stderr
    entry = json.loads(listed.stdout)["traces"][0]
    assert entry["status"] == "final" and entry["tokens"] == 0 and entry["cost_usd"] is None
    out = tmp_path / "page.html"
    exported = run_rlm("trace", "export", str(path), "--html", "-o", str(out), env=env)
    assert exported.code == 0 and "Traceback" not in exported.stderr, exported.stderr
    page = out.read_text(encoding="utf-8")
    assert "Odd?" in page and "<b>Corpus:</b> </p>" in page and "iteration 1" in page and "0.00 s" in page


def test_a_trajectory_with_numbers_out_of_range_is_shown_and_listed_without_a_crash(tmp_path: Path) -> None:
    """JSON as Python reads it holds ``NaN``, ``Infinity`` and ``1e999`` (infinity), and a line's
    ``depth`` may be text: counts that are not finite numbers read as 0, a depth that is not a
    number as 0, a start time past the year 9999 as 0 (before: "internal error: OverflowError" on
    ``"total_tokens": 1e999`` and on ``"ts": 1e20``, ValueError on ``NaN`` and on ``"depth": "x"``)."""
    traces = tmp_path / "data" / "traces"
    traces.mkdir(parents=True)
    path = traces / "20250101-000000-abcdef.jsonl"
    header = {"schema": SCHEMA_VERSION, "type": "header", "depth": 0, "ts": 1e20, "run_id": path.stem,
              "question": "Odd?", "config": {}, "paths": []}
    lines = [json.dumps(header),
             '{"type": "iteration", "depth": "x", "iteration": 1}',
             '{"type": "iteration", "depth": 1e999, "iteration": 2}',
             '{"type": "root_call", "depth": NaN, "model": "m", "input_tokens": Infinity, "output_tokens": NaN}',
             '{"type": "phase", "depth": 0, "iteration": 1, "phase": "explore", "helpers": {"grep": 1e999}}',
             '{"type": "summary", "depth": 0, "status": "final", "answer": "yes", "total_tokens": NaN,'
             ' "elapsed_s": NaN, "usage": {"root": {"calls": 1e999}, "sub": {"calls": NaN}}, "total_cost_usd": 1e999}']
    path.write_text("\n".join(lines) + "\n")
    env = {"RLM_DATA_DIR": str(tmp_path / "data")}
    shown = run_rlm("trace", "show", str(path), env=env)
    assert shown.code == 0 and "internal error" not in shown.stderr, shown.stderr
    assert "iteration 2" in shown.stdout and "final: 0 tokens" in shown.stdout
    listed = run_rlm("trace", "list", env=env)
    assert listed.code == 0 and "internal error" not in listed.stderr, listed.stderr
    assert "Odd?" in listed.stdout


def test_a_trajectory_with_lone_surrogates_or_bytes_not_utf8_is_shown_listed_and_exported(tmp_path: Path) -> None:
    """rlm writes a lone surrogate of a model's reply or a corpus excerpt as its JSON escape (see
    above), and a file anyone may edit may hold bytes that are not UTF-8: a surrogate is shown as
    U+FFFD, a line that is not UTF-8 is skipped like a torn one, a status is text, not markup
    (before: "internal error: UnicodeEncodeError" from show and export, "UnicodeDecodeError" from
    list for the whole folder, "MarkupError" from list on a status ``[/]``)."""
    traces = tmp_path / "data" / "traces"
    traces.mkdir(parents=True)
    odd = traces / "20250101-000000-aaaaaa.jsonl"
    head = {"schema": SCHEMA_VERSION, "type": "header", "depth": 0, "ts": 1.0, "run_id": odd.stem,
            "question": "Q\ud800?", "config": {"model": "m\udc80"}, "paths": ["a\ud800"]}
    lines = [head, {"schema": SCHEMA_VERSION, "type": "iteration", "depth": 0, "ts": 1.0, "iteration": 1},
             {"schema": SCHEMA_VERSION, "type": "root_call", "depth": 0, "ts": 1.0, "model": "m", "response": "r\udc80"},
             {"schema": SCHEMA_VERSION, "type": "summary", "depth": 0, "ts": 1.0, "status": "final", "answer": "a\ud800"}]
    odd.write_text("".join(json.dumps(line) + "\n" for line in lines))  # ensure_ascii: the escapes
    binary = traces / "20250101-000001-bbbbbb.jsonl"
    binary.write_bytes(json.dumps({**head, "run_id": binary.stem, "question": "Bytes?"}).encode() + b"\n\xff\xfe{}\n"
                       + json.dumps({**lines[-1], "status": "[/]"}).encode() + b"\n")  # rich markup, too
    env = {"RLM_DATA_DIR": str(tmp_path / "data")}
    for path in (odd, binary):
        shown = run_rlm("trace", "show", str(path), env=env)
        assert shown.code == 0 and "internal error" not in shown.stderr, shown.stderr
        page = tmp_path / f"{path.stem}.html"
        exported = run_rlm("trace", "export", str(path), "--html", "-o", str(page), env=env)
        assert exported.code == 0 and "internal error" not in exported.stderr, exported.stderr
    assert "Q\ufffd?" in (tmp_path / f"{odd.stem}.html").read_text("utf-8")
    listed = run_rlm("trace", "list", env=env)
    assert listed.code == 0 and "internal error" not in listed.stderr, listed.stderr
    assert "Bytes?" in listed.stdout and "Q\ufffd?" in listed.stdout and "[/]" in listed.stdout
