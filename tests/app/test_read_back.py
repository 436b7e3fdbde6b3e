"""Files a user (or a pull request) may edit, read back by ``rlm`` commands: an odd shape that is
still valid JSON either works or is a clear exit-2 error, never an internal error."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support.cli import run_rlm, two_file_repo
from tests.support.fake_llm import FakeLLM, repl


def test_estimate_reads_earlier_trajectories_of_any_shape(tmp_path: Path, llm: FakeLLM) -> None:
    """``--estimate`` takes the median of earlier runs from the traces folder: a trajectory whose
    first or last line is not an object, whose ``config`` is not a table, or whose cost is not a
    finite number is not one of them (before: "internal error: AttributeError" on ``[1, 2]``)."""
    traces = Path(os.environ["RLM_DATA_DIR"]) / "traces"
    traces.mkdir(parents=True)
    model = "openai/gpt-4o-mini"
    good = f'{{"type": "header", "config": {{"model": "{model}"}}}}'
    final = '{"type": "summary", "status": "final", "usage": {"cost_usd": %s}}'
    files = {"a": ("[1, 2]", final % 1), "b": ('"text"', final % 1), "c": ('{"config": [1]}', final % 1),
             "d": ('{"config": "x"}', final % 1), "e": (good, "[1]"), "f": (good, final % "NaN"),
             "g": (good, final % "Infinity"), "h": (good, '"last"'), "z": (good, final % 0.5)}
    for name, (first, last) in files.items():
        (traces / f"{name}.jsonl").write_text(f"{first}\n{last}\n")
    res = run_rlm("ask", str(two_file_repo(tmp_path)), "Where is foo?", "--model", model, "--api-base", llm.url,
                  "--root-model-window", "32768", "--sub-model-window", "32768", "--estimate")
    assert res.code == 0 and "internal error" not in res.stderr, res.stderr
    assert "median of 1 earlier run(s) $0.5000" in res.stdout, res.stdout
    assert not llm.requests


def test_replay_of_a_trajectory_with_odd_token_counts_runs(tmp_path: Path) -> None:
    """A recorded call's tokens and cost are read as numbers only when they are finite ones (0 and
    unknown otherwise; before: "internal error: ValueError" on ``"input_tokens": "ten"``,
    TypeError on a list, OverflowError on ``Infinity``)."""
    def call(n: int, code: str, odd: str) -> str:
        line = json.dumps({"schema": 1, "type": "root_call", "depth": 0, "ts": 2.0, "model": "openai/root",
                           "request_key": f"k{n}", "response": repl(code), "cost_usd": "free"})
        return line[:-1] + f", {odd}}}"

    header = {"schema": 1, "type": "header", "depth": 0, "ts": 1.0, "run_id": "odd", "question": "What?",
              "paths": [], "config": {"max_iterations": 5}}
    lines = [json.dumps(header), call(1, "print(1)", '"input_tokens": "ten", "output_tokens": [1]'),
             call(2, "print(2)", '"input_tokens": Infinity, "output_tokens": NaN'),
             call(3, "FINAL('ok')", '"input_tokens": -5, "output_tokens": 1e999')]
    path = tmp_path / "odd.jsonl"
    path.write_text("\n".join(lines) + "\n")
    res = run_rlm("replay", str(path), str(two_file_repo(tmp_path)), "--json")
    assert res.code == 0 and "internal error" not in res.stderr, res.stderr
    doc = json.loads(res.stdout)
    assert doc["answer"] == "ok" and doc["usage"]["root"]["input_tokens"] == 0
    assert doc["usage"]["root"]["cost_usd"] is None


def test_a_notebook_with_odd_outputs_is_read_not_skipped_as_a_decoder_crash(tmp_path: Path) -> None:
    """A notebook is a corpus file (a pull request's): an output's ``traceback`` or text of another
    type than the format says is left out, and the rest read (before: the document decoder died on
    ``"traceback": 5``, and the notebook was skipped as if it needed over --decode-memory)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    outputs = [{"output_type": "error", "ename": "KeyError", "evalue": "'k'", "traceback": 5},
               {"output_type": "error", "ename": "E", "evalue": "v", "traceback": {"a": 1}},
               {"output_type": "execute_result", "data": {"text/plain": 5}}, {"output_type": "stream", "text": 7}]
    (repo / "a.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "source": "d['k']", "outputs": outputs}]}))
    res = run_rlm("stats", str(repo), "--json")
    assert res.code == 0 and "died" not in res.stderr, res.stderr
    doc = json.loads(res.stdout)
    assert doc["kinds"] == {"notebook": 1} and not doc["skipped"], doc["skipped"]


def test_an_ignore_file_with_patterns_git_matches_nothing_with_is_honoured_without_them(tmp_path: Path) -> None:
    """A ``.gitignore`` comes with the code (a pull request's): a pattern that pathspec cannot
    compile (``!`` alone, a trailing ``\\``, the range ``[z-a]``) matches nothing, as in git, and the
    file's other patterns still hold; the same pattern given to ``--exclude`` is a usage error
    (before: "internal error: GitIgnorePatternError" or "error: bad character range z-a")."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("x = 1\n")
    (repo / "secret.txt").write_text("s\n")
    (repo / ".gitignore").write_text("!\n\\\n[z-a]\nsecret.txt\n")
    res = run_rlm("stats", str(repo), "--json")
    assert res.code == 0 and "internal error" not in res.stderr, res.stderr
    assert [f["path"] for f in json.loads(res.stdout)["largest"]] == ["a.py"]
    res = run_rlm("stats", str(repo), "--exclude", "[z-a]")
    assert res.code == 2 and "--exclude: '[z-a]' is not a gitignore pattern" in res.stderr, res.stderr


def test_stats_shows_file_names_that_look_like_markup_as_they_are(tmp_path: Path) -> None:
    """A corpus file's name is a pull request's too: ``a[/]b.py`` (a folder ``a[``) and ``[b].py``
    are shown as named (before: "internal error: MarkupError" from ``rlm stats``, and ``[b].py``
    shown as ``.py``)."""
    repo = tmp_path / "repo"
    (repo / "a[").mkdir(parents=True)
    (repo / "a[" / "]b.py").write_text("x = 1\n")
    (repo / "[b].py").write_text("y = 2\n")
    res = run_rlm("stats", str(repo), env={"COLUMNS": "200"})
    assert res.code == 0 and "internal error" not in res.stderr, res.stderr
    assert "a[/]b.py" in res.stdout and "[b].py" in res.stdout, res.stdout
