"""The command package: nothing heavy at import, and the shared options written once."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from rlm_cli.commands import options
from rlm_cli.commands.app import app
from rlm_cli.errors import UsageError
from tests.support.cli import run_rlm


def test_importing_the_commands_leaves_litellm_out() -> None:
    code = "import sys, rlm_cli.commands.app; print('litellm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def _names(command: object) -> list[str]:
    return list(inspect.signature(command).parameters)  # type: ignore[arg-type]


def test_run_flags_keep_their_order_in_every_command() -> None:
    commands = {c.name or c.callback.__name__: c.callback for c in app.registered_commands}  # type: ignore[union-attr]
    shared = list(options.RUN_FLAGS)
    for name, left_out in (("ask", ()), ("chat", ("direct_max_tokens",)), ("mcp", ("trace", "require_support")),
                           ("eval", ("mode", "direct_max_tokens", "trace", "require_support"))):
        params = _names(commands[name])
        assert "run" not in params
        assert [p for p in params if p in options.RUN_FLAGS] == [n for n in shared if n not in left_out], name
    for name in ("index", "stats"):
        params = _names(commands[name])
        assert [p for p in params if p in options.CORPUS_FLAGS] == list(options.CORPUS_FLAGS), name


def test_run_flags_build_the_settings() -> None:
    values = {name: default for name, (_, default) in options.RUN_FLAGS.items()}
    values.update(memory_limit="512M", no_llm_cache=True, include=["*.py"], max_file_size="1M")
    settings = options.RunFlags(values).settings()
    assert settings.memory_limit == 512 * 2**20
    assert settings.llm_cache is False
    assert settings.corpus.include == ["*.py"] and settings.corpus.max_file_size == 2**20
    values["memory_limit"] = "lots"
    with pytest.raises(UsageError):
        options.RunFlags(values).settings()


def test_a_question_that_starts_with_a_dash_is_told_to_go_after_double_dash(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    r = run_rlm("ask", str(tmp_path), "-how many files?")
    assert r.code == 2 and r.stdout == ""
    assert r.stderr.strip().endswith("goes after `--`: rlm ask PATH -- '-how many files?')")
    r = run_rlm("ask", str(tmp_path), "--modle", "x", "q")  # a mistyped flag keeps click's suggestion
    assert r.code == 2 and "--model" in r.stderr and "ask --help`)" in r.stderr and "`--`" not in r.stderr
    r = run_rlm("ask", str(tmp_path), "--max-iter", "3", "q")  # a prefix: what it begins, only
    assert r.code == 2 and "No such option: --max-iter (did you mean --max-iterations?)" in r.stderr
    r = run_rlm("ask", str(tmp_path), "--jsn", "q")
    assert r.code == 2 and "No such option: --jsn (did you mean --json?)" in r.stderr
    r = run_rlm("ask", str(tmp_path), "--bogus", "q")  # nothing close: no suggestion (it offered --jobs)
    assert r.code == 2 and r.stderr.strip() == "error: No such option: --bogus (see `rlm ask --help`)"


@pytest.mark.parametrize(("args", "said"), [
    (["--max-iterations", "0"], "--max-iterations must be at least 1, not 0"),
    (["--max-iterations=-3"], "--max-iterations must be at least 1, not -3"),
    (["--max-iterations", "2.5"], "--max-iterations must be a whole number, not 2.5"),
    (["--max-cost", "x"], "--max-cost must be a number, not 'x'"),
    (["--temperature", "-1"], "--temperature must be at least 0, not -1"),
])
def test_a_value_out_of_range_or_of_the_wrong_kind_is_said_in_rlm_s_words(tmp_path: Path, args: list[str],
                                                                         said: str) -> None:
    """Typer checks option values with pydantic, whose words ("Input should be greater than or
    equal to 1") reached the user as they were."""
    (tmp_path / "a.py").write_text("x = 1\n")
    r = run_rlm("ask", str(tmp_path), "q", *args)
    assert r.code == 2 and r.stdout == ""
    assert r.stderr.strip() == f"error: {said} (see `rlm ask --help`)", r.stderr
