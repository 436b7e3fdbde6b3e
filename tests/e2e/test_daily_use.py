"""End-to-end: what a person using ``rlm`` every day notices (issue 40), through the ``rlm``
command against the scripted model server."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import model_flags, run_rlm, two_file_repo
from tests.support.fake_llm import FakeLLM

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
