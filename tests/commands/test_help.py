"""Unix manners of the command line (issue 40): ``--help`` that fits a screen per section with no
name cut, ``-h``, every option documented in full in the docs, ``-q`` meaning ``--quiet`` (the old
``-q QUESTION`` still working for a release, with a warning), a question placed first or forgotten
caught with the order to use, and completions that offer values."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import typer.main

from rlm_cli.commands.app import app
from tests.support.cli import model_flags, run_rlm
from tests.support.fake_llm import FakeLLM, repl

ROOT = Path(__file__).resolve().parents[2]
NARROW = {"COLUMNS": "80"}


def commands() -> list[tuple[list[str], object]]:
    """Every leaf command of ``rlm`` as ``(words, click command)``."""
    out: list[tuple[list[str], object]] = []

    def walk(cmd: object, words: list[str]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, [*words, name])
        else:
            out.append((words, cmd))
    walk(typer.main.get_command(app), [])
    return out


def test_ask_help_fits_a_screen_per_section_with_nothing_cut() -> None:
    res = run_rlm("ask", "--help", env=NARROW)
    assert res.code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) < 100, len(lines)
    assert max(len(line) for line in lines) <= 80
    assert "…" not in res.stdout and "<bool>" not in res.stdout and "<str>" not in res.stdout
    for section in ("Questions:", "Models:", "Loop:", "Budgets:", "Sandbox:", "Corpus:", "Output:"):
        assert section in lines
    assert "  --sandbox LEVEL         auto|bwrap|sandbox-exec|process|none" in lines  # the whole value list


@pytest.mark.parametrize("words", [w for w, _ in commands()], ids=" ".join)
def test_every_command_takes_h_and_its_options_are_documented(words: list[str]) -> None:
    res = run_rlm(*words, "-h", env=NARROW)
    assert res.code == 0 and res.stdout.startswith("Usage: rlm "), res.stderr
    assert "…" not in res.stdout
    assert re.search(r"<(?:int|str|float|bool|path|int range|float range)>", res.stdout) is None, res.stdout  # a word
    docs = "".join((ROOT / "docs" / name).read_text() for name in ("usage.md", "audit.md", "eval.md"))
    cmd = dict((tuple(w), c) for w, c in commands())[tuple(words)]
    names = [o for p in cmd.params for o in (*p.opts, *getattr(p, "secondary_opts", ())) if o.startswith("--")]
    missing = [o for o in names if o != "--help" and not re.search(re.escape(o) + r"(?![\w-])", docs)]
    assert missing == [], f"rlm {' '.join(words)}: not in docs/usage.md, audit.md or eval.md: {missing}"


def test_eval_offers_its_families_as_they_are() -> None:
    from rlm_cli.commands.evaluate import FAMILY_NAMES
    from rlm_cli.evaluation.tasks import FAMILIES

    assert FAMILY_NAMES == FAMILIES  # --help and completion name the families without importing them


def test_the_command_list_has_whole_summaries() -> None:
    res = run_rlm("--help", env=NARROW)
    listed = res.stdout.split("Commands:")[1].strip().splitlines()
    assert len(listed) == len({w[0] for w, _ in commands()})
    assert all(line.rstrip().endswith(".") and not line.rstrip().endswith("...") for line in listed), listed


def test_q_is_quiet_and_the_old_q_question_warns_for_a_release(tmp_path: Path, llm: FakeLLM) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    llm.default("root", repl("word = context.split()[-1]\nFINAL(word + ' it is')"))
    quiet = run_rlm("ask", str(tmp_path / "a.txt"), "Which word?", "-q", *model_flags(llm), "--mode", "rlm")
    assert quiet.code == 0 and quiet.stdout == "alpha it is\n", quiet.stderr
    assert quiet.stderr == ""  # only errors
    old = run_rlm("ask", str(tmp_path / "a.txt"), "-q", "Which word is it?", *model_flags(llm), "--mode", "rlm",
                  "--json")
    assert old.code == 0, old.stderr
    assert "warning: -q QUESTION is deprecated: -q now means --quiet" in old.stderr
    assert json.loads(old.stdout.splitlines()[0])["question"] == "Which word is it?"  # asked as --question


def test_a_question_put_first_or_forgotten_is_caught_before_loading(tmp_path: Path, llm: FakeLLM) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "a.py").write_text("x = 1\n")
    first = run_rlm("ask", "What is x?", str(tmp_path / "repo"), *model_flags(llm))
    assert first.code == 2 and "'What is x?' is no file or folder: the question goes last" in first.stderr
    assert f"rlm ask {tmp_path / 'repo'} 'What is x?'" in first.stderr
    forgot = run_rlm("ask", str(tmp_path / "repo"), str(tmp_path / "repo" / "a.py"), *model_flags(llm))
    assert forgot.code == 2 and "is a file or folder, not a question" in forgot.stderr
    assert llm.requests == [] and "corpus loaded" not in first.stderr + forgot.stderr
    assert len(first.stderr.strip().splitlines()) == len(forgot.stderr.strip().splitlines()) == 1


def complete(line: str, env: dict[str, str] | None = None) -> list[str]:
    """What bash completion offers after ``line`` (its last word may be partial)."""
    words = line.split(" ")
    res = run_rlm(env={"_RLM_COMPLETE": "complete_bash", "COMP_WORDS": line, "COMP_CWORD": str(len(words) - 1),
                       **(env or {})})
    return res.stdout.split()


def test_completions_offer_values(tmp_path: Path) -> None:
    assert complete("rlm ask --mode ") == ["auto", "rlm", "direct"]
    assert complete("rlm ask --sandbox p") == ["process"]
    assert complete("rlm ask --policy g") == ["guided"]
    assert complete("rlm ask --answer-type l") == ["list", "locations"]
    assert complete("rlm ask --color a") == ["auto", "always"]
    assert complete("rlm audit --fail-on w") == ["warning"]
    assert complete("rlm ask -m ", {"RLM_MODEL": "openai/local"}) == ["openai/local"]
    traces = Path(os.environ["RLM_DATA_DIR"]) / "traces"
    traces.mkdir(parents=True)
    (traces / "20261205-101010-abcdef.jsonl").write_text("{}\n")
    assert complete("rlm trace show ") == ["last", "20261205-101010-abcdef"]
    assert complete("rlm replay 2026") == ["20261205-101010-abcdef"]
