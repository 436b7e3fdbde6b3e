"""Files a user (or a pull request) may edit, read back by ``rlm`` commands: an odd shape that is
still valid JSON either works or is a clear exit-2 error, never an internal error."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.cli import run_rlm, two_file_repo
from tests.support.fake_llm import FakeLLM


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
