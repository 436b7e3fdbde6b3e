"""The terminal: plain and live styles, the streamed reply, phases and progress lines."""

from __future__ import annotations

import io
import os
import re
import select
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from rlm_cli.output.answer import summary_line
from rlm_cli.output.render import Renderer
from rlm_cli.output.style import display_style
from rlm_cli.output.text import completed_calls, progress_line
from rlm_cli.output.trace import event
from tests.support.cli import model_flags, rlm_argv, run_rlm
from tests.support.fake_llm import FakeLLM, Reply, repl


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("color, tty, env, expected", [
    ("auto", True, {}, (True, True)),
    ("auto", False, {}, (False, False)),
    ("auto", True, {"NO_COLOR": "1"}, (False, False)),
    ("auto", True, {"TERM": "dumb"}, (False, False)),
    ("never", True, {}, (False, False)),
    ("always", False, {"NO_COLOR": "1"}, (True, True)),  # the flag wins over the environment
])
def test_display_style(color: str, tty: bool, env: dict[str, str], expected: tuple[bool, bool]) -> None:
    stream = TTY() if tty else io.StringIO()
    assert display_style(color, stream, env) == expected


def test_display_style_rejects_other_words() -> None:
    with pytest.raises(ValueError, match="auto, always, never"):
        display_style("sometimes")


def _feed(r: Renderer, events: list[dict[str, Any]]) -> None:
    for ev in events:
        r.on_event(ev)
    r.close()


def _iteration(n: int, reply: list[str], output: str, phase: str, helpers: dict[str, int],
               progress: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    evs = [event("iteration", 0, iteration=n), event("stream", 0, state="start", model="openai/root")]
    evs += [event("stream", 0, state="delta", model="openai/root", text=t) for t in reply]
    evs.append(event("root_call", 0, model="openai/root", response="".join(reply), input_tokens=1200,
                     output_tokens=30, cost_usd=None, latency_s=2.5))
    evs.append(event("code", 0, iteration=n, block=1, code="x = 1\n"))
    evs += progress or []
    evs.append(event("output", 0, iteration=n, block=1, output=output, output_chars=len(output), elapsed_s=0.25,
                     sub_calls=8 if progress else 0, helpers=helpers))
    evs.append(event("phase", 0, iteration=n, phase=phase, helpers=helpers))
    return evs


def _batch(done: int, failed: int, in_flight: int, finished: bool = False) -> dict[str, Any]:
    return event("progress", 0, kind="sub_calls", group=1, batch=True, done=done, failed=failed,
                 in_flight=in_flight, total=8, elapsed_s=1.5, tokens=12345, cost_usd=None, finished=finished)


def test_plain_output_snapshot() -> None:
    """Phases, the streamed reply and a batch's progress lines, as a log file shows them."""
    out = io.StringIO()
    r = Renderer(color="auto", stream=out)
    progress = [_batch(0, 0, 1), _batch(1, 0, 7), _batch(2, 0, 6), _batch(4, 1, 3), _batch(5, 1, 2),
                _batch(7, 1, 0, finished=True)]
    _feed(r, [*_iteration(1, ["Let me ", "look.\n```repl\nx = 1\n", "```"], "42", "explore", {"grep": 1}),
              *_iteration(2, ["Fan out.\n```repl\nx = 1\n```\n"], "['a', 'b']", "decompose",
                          {"llm_query_batched": 1, "llm_query": 8}, progress),
              event("final", 0, status="final", iterations=2)])
    assert out.getvalue() == """\
── iteration 1 ──
openai/root:
Let me look.
```repl
x = 1
```
root model: 1,200 in / 30 out tokens, 2.5 s, first token 0.0 s, cost unknown
→ 2 chars, 0.25 s
  42
iteration 1: explore (grep ×1)
── iteration 2 ──
openai/root:
Fan out.
```repl
x = 1
```
root model: 1,200 in / 30 out tokens, 2.5 s, first token 0.0 s, cost unknown
batch of 8 sub-calls started
sub-calls 2/8 · 6 in flight · 0 failed · 12,345 tokens · cost unknown · 1.5 s
sub-calls 5/8 · 3 in flight · 1 failed · 12,345 tokens · cost unknown · 1.5 s
sub-calls 6/8 · 2 in flight · 1 failed · 12,345 tokens · cost unknown · 1.5 s
sub-calls 8/8 · 0 in flight · 1 failed · 12,345 tokens · cost unknown · 1.5 s
→ 10 chars, 0.25 s · 8 sub-calls
  ['a', 'b']
iteration 2: decompose (llm_query ×8, llm_query_batched ×1)
final after 2 iterations
"""


def test_quiet_shows_nothing_but_errors() -> None:
    out = io.StringIO()
    r = Renderer(quiet=True, stream=out)
    _feed(r, [*_iteration(1, ["hi"], "x", "explore", {"grep": 1}), _batch(2, 0, 6),
              event("notice", 0, message="careful", level="warning")])
    r.warning("a warning")
    r.info("some info")
    r.summary({"iterations": 1})
    assert out.getvalue() == ""
    r.error("it broke")
    assert out.getvalue() == "error: it broke\n"


def test_live_style_draws_a_transient_region_and_keeps_the_prose() -> None:
    out = TTY()
    r = Renderer(color="always", stream=out)
    _feed(r, [*_iteration(1, ["Let me look.\n```repl\nx = 1\n```"], "42", "explore", {"grep": 1},
                          [_batch(0, 0, 1), _batch(8, 0, 0, finished=True)])])
    text = out.getvalue()
    assert "\x1b[" in text  # colours and cursor movement: a terminal
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    assert "Let me look." in plain and "iteration 1: explore" in plain
    assert "sub-calls 8/8 · 0 in flight" in plain  # the finished batch stays on screen
    assert "```repl" not in plain.split("root model:")[0].split("Let me look.")[-1]  # code shown once, as code


def test_live_indexing_line_is_transient_and_its_end_stays() -> None:
    out = TTY()
    r = Renderer(color="always", stream=out)
    for files, finished in ((10, False), (40, True)):
        r.on_event(event("progress", 0, kind="index", files=files, files_total=40, bytes=files * 1000,
                         bytes_total=40_000, rate_bps=20_000, elapsed_s=2.0, finished=finished))
    r.close()
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert "indexing 40/40 files · 0.0/0.0 MB · 0.0 MB/s · 2.0 s" in plain


def test_progress_line_for_indexing() -> None:
    ev = event("progress", 0, kind="index", files=120, files_total=5000, bytes=4_100_000, bytes_total=96_000_000,
               rate_bps=12_300_000, elapsed_s=0.3, finished=False)
    assert progress_line(ev) == "indexing 120/5,000 files · 4.1/96.0 MB · 12.3 MB/s · 0.3 s"


def _normalize(stderr: str) -> str:
    text = re.sub(r"\d[\d,]* in / \d[\d,]* out tokens", "N in / N out tokens", stderr)
    text = re.sub(r"\d[\d,]* tokens", "N tokens", text)
    text = re.sub(r"\d[\d,]* in/\d[\d,]* out", "N in/N out", text)
    text = re.sub(r"\d+\.\d+ s", "T s", text)
    text = re.sub(r"\d+ in flight", "N in flight", text)
    text = re.sub(r"sandbox \w[\w-]*", "sandbox LEVEL", text)
    # Which sandbox notes print depends on the machine (bubblewrap, Landlock, a Python installation
    # other users cannot read): none of them is part of the snapshot.
    return "\n".join(line for line in text.splitlines() if not line.startswith(("warning: sandbox", "sandbox:")))


def test_plain_stderr_of_a_real_run_snapshot(tmp_path: Path, llm: FakeLLM) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "notes.txt").write_text("".join(f"note {i}: the value is {i * 7}\n" for i in range(40)))
    llm.default("sub", "ok")
    llm.script("root",
               repl("print(grep('value is 14')[0]['line'])"),
               repl("answers = llm_query_batched([f'part {i}' for i in range(8)])\nprint(len(answers))"),
               repl("FINAL('14 is on line 3')"))
    res = run_rlm("ask", str(tmp_path / "c"), "Where is 14?", *model_flags(llm), "--no-llm-cache")
    assert res.code == 0, res.stderr
    assert res.stdout == "14 is on line 3\n"
    assert _normalize(res.stderr) == """\
corpus loaded 1 file, 1,013 bytes, N tokens, 1 chunk (T s, sandbox LEVEL)
mode rlm (--mode rlm)
policy guided (auto: the root model's input window is unknown (no model info for it; --root-model-window gives it), so the aids for small and local models are on)
── iteration 1 ──
openai/root:
Let me run some code.
```repl
print(grep('value is 14')[0]['line'])
```
root model: N in / N out tokens, T s, first token T s, cost unknown
→ 2 chars, T s
  3
iteration 1: explore (grep ×1)
── iteration 2 ──
openai/root:
Let me run some code.
```repl
answers = llm_query_batched([f'part {i}' for i in range(8)])
print(len(answers))
```
root model: N in / N out tokens, T s, first token T s, cost unknown
batch of 8 sub-calls started
sub-calls 2/8 · N in flight · 0 failed · N tokens · cost unknown · T s
sub-calls 4/8 · N in flight · 0 failed · N tokens · cost unknown · T s
sub-calls 6/8 · N in flight · 0 failed · N tokens · cost unknown · T s
sub-calls 8/8 · N in flight · 0 failed · N tokens · cost unknown · T s
→ 2 chars, T s · 8 sub-calls
  8
iteration 2: decompose (llm_query ×8, llm_query_batched ×1)
── iteration 3 ──
openai/root:
Let me run some code.
```repl
FINAL('14 is on line 3')
```
root model: N in / N out tokens, T s, first token T s, cost unknown
→ 0 chars, T s
  (no output)
iteration 3: terminate (FINAL ×1)
final after 3 iterations
3 iterations, 8 sub-calls; tokens root N in/N out, sub N in/N out; cost unknown (root unknown, sub unknown); T s"""


def test_first_tokens_reach_stderr_before_the_call_ends(tmp_path: Path, llm: FakeLLM) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.txt").write_text("hello\n")
    reply = "Streaming my thoughts now.\n" + "more words " * 12 + "\n```repl\nprint(len(context))\n```"
    pieces = -(-len(reply) // 8)
    llm.script("root", Reply(reply, stream_chunk_chars=8, stream_delay_s=0.15), repl("FINAL('done')"))
    env = dict(os.environ)
    proc = subprocess.Popen([*rlm_argv(), "ask", str(tmp_path / "c"), "q?", *model_flags(llm)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    seen = b""
    written_when_seen = None
    deadline = time.monotonic() + 120
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.05)
        if ready:
            chunk = os.read(proc.stderr.fileno(), 65536)
            if not chunk:
                break
            seen += chunk
            if written_when_seen is None and b"Streaming my" in seen:
                with llm.lock:  # how much of the reply the server had sent when stderr showed its start
                    written_when_seen = sum(1 for model, _, _ in llm.stream_log if model == "root")
                break
    proc.communicate(timeout=120)
    assert written_when_seen is not None, seen.decode(errors="replace")
    assert written_when_seen < pieces // 2, (written_when_seen, pieces)  # the call was far from over
    assert proc.returncode == 0


def test_color_always_styles_stderr_even_in_a_pipe(tmp_path: Path, llm: FakeLLM) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.txt").write_text("hello\n")
    llm.default("root", repl("FINAL(len(context) > 0)"))
    llm.script("root", repl("print(1)"))
    styled = run_rlm("ask", str(tmp_path / "c"), "q?", *model_flags(llm), "--color", "always", "--no-llm-cache")
    assert styled.code == 0, styled.stderr
    assert "\x1b[" in styled.stderr and "\x1b[" not in styled.stdout  # the answer is never styled
    # (plain output in a pipe, NO_COLOR, TERM=dumb and --color never: test_display_style and the snapshots)
    bad = run_rlm("ask", str(tmp_path / "c"), "q?", *model_flags(llm), "--color", "sometimes")
    assert bad.code == 2 and "--color must be one of auto, always, never" in bad.stderr


def test_quiet_run_prints_only_errors(tmp_path: Path, llm: FakeLLM) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.txt").write_text("hello\n")
    (tmp_path / "c" / "big.txt").write_text("x" * 2000)  # skipped with a warning
    llm.script("root", repl("print(context['a.txt'])"), repl("FINAL('ok')"))  # (a printed constant is no reading)
    res = run_rlm("ask", str(tmp_path / "c"), "q?", *model_flags(llm), "--quiet", "--max-file-size", "1K")
    assert res.code == 0 and res.stdout == "ok\n" and res.stderr == ""
    res = run_rlm("ask", str(tmp_path / "nope"), "q?", *model_flags(llm), "--quiet")
    assert res.code == 2 and res.stderr.startswith("error: no such file or directory")


@pytest.mark.parametrize("color", ["never", "always"])
def test_terminal_escape_sequences_from_the_model_and_the_repl_never_reach_stderr(tmp_path: Path, llm: FakeLLM,
                                                                                  color: str) -> None:
    # A window title, a clipboard write (OSC 52) and a screen clear, in a reply and in printed output.
    title, clip, clear = "\x1b]0;pwned\x07", "\x1b]52;c;cGF5bG9hZA==\x07", "\x1b[2J"
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.txt").write_text("alpha\n")
    llm.script("root", f"Thinking {title}{clip}\n" + repl("print('\\x1b[2J\\x1b]0;x\\x07 out')"),
               repl("FINAL('done')"))
    res = run_rlm("ask", str(tmp_path / "c"), "q?", *model_flags(llm), "--mode", "rlm", "--color", color)
    assert res.code == 0 and res.stdout == "done\n", res.stderr
    assert "pwned" in res.stderr and " out" in res.stderr  # shown, with their controls replaced
    for seq in (title, clip, clear, "\x1b]0;", "\x1b]52", "\x07"):
        assert seq not in res.stderr
    if color == "never":
        assert "\x1b" not in res.stderr


def test_calls_that_failed_after_retries_are_said_at_the_end(tmp_path: Path, llm: FakeLLM) -> None:
    """A run whose sub-calls all failed may still give an answer (built on error messages): the
    closing lines must say so instead of reading like a clean run."""
    (tmp_path / "a.txt").write_text("hello\n")
    llm.default("sub", Reply(text="down", status=503))
    llm.script("root", repl("parts = llm_query_batched(['one', 'two'])\nFINAL('done')"), repl("FINAL('done')"))
    res = run_rlm("ask", str(tmp_path), "q?", *model_flags(llm), "--retries", "0", "--policy", "paper",
                  "--no-leads", "--no-llm-cache")
    assert res.code == 0, res.stderr
    assert "warning: 2 model calls failed: the code got an error message" in res.stderr
    # the summary line; the answer, written before any output was read, is then said to be a guess
    summary, guess = res.stderr.strip().splitlines()[-2:]
    assert ", 2 failed calls;" in summary and guess.endswith("treat this answer as a guess")
    clean = run_rlm("ask", str(tmp_path), "q?", *model_flags(llm), "--policy", "paper", "--no-leads")
    assert "failed" not in clean.stderr  # silent when nothing failed


def test_a_cheap_call_never_reads_as_free() -> None:
    from rlm_cli.output.text import cost_text, usd

    assert [usd(v) for v in (0, 3.2e-05, 0.0123, 1.5)] == ["$0.0000", "$0.000032", "$0.0123", "$1.5000"]
    assert usd(4e-08) != "$0.0000" and cost_text(None) == "cost unknown"


def test_a_call_abandoned_at_a_stop_is_no_completed_call_in_the_cost() -> None:
    """A stop (--timeout, Ctrl-C) while the only root call was in flight: that call is counted
    (``abandoned_calls``) but completed nothing, so the closing line says ``cost none`` and
    never ``$0.0000``, however the stop raced the request."""
    abandoned = {"calls": 1, "abandoned_calls": 1, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}
    data = {"iterations": 1, "usage": {"root": abandoned, "sub": {"calls": 0}, "cost_usd": 0.0}, "elapsed_s": 2.7}
    line = summary_line(data)
    assert "cost none (no model call completed)" in line and "$0.0000" not in line, line
    answered = {**abandoned, "calls": 2, "cost_usd": 0.0123}
    line = summary_line({**data, "usage": {"root": answered, "sub": {"calls": 0}, "cost_usd": 0.0123}})
    assert "cost $0.0123 (root $0.0123, sub no calls)" in line, line
    assert completed_calls({"root": answered, "sub": {"calls": 3, "abandoned_calls": 1}}) == 3


def test_a_late_progress_event_of_a_finished_batch_is_dropped() -> None:
    """Sub-call threads report as they end; one that loses the race to the last sends its "4 of 8"
    after the batch is reported finished. It was shown as a new batch ("batch of 8 sub-calls
    started" twice, seen in CI); now it is dropped."""
    out = io.StringIO()
    r = Renderer(color="auto", stream=out)
    _feed(r, [_batch(2, 0, 6), _batch(8, 0, 0, finished=True), _batch(4, 0, 4)])
    text = out.getvalue()
    assert text.count("batch of 8 sub-calls started") == 1 and text.count("sub-calls 4/8") == 0, text
