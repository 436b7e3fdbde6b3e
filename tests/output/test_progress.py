"""Progress events: streamed replies, batches of sub-calls, sub-RLMs and corpus indexing."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import load_corpus
from rlm_cli.output.progress import INDEX_QUIET_S, Progress, index_callback, stream_callback
from rlm_cli.output.trace import TRANSIENT_TYPES, TraceSink, TraceWriter, event, read_trace


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _req(kind: str = "completion", batch: tuple[int, int] | None = None) -> dict[str, Any]:
    req: dict[str, Any] = {"type": kind, "prompt": "p"}
    if batch is not None:
        req["batch"] = {"id": batch[0], "size": batch[1]}
    return req


def test_a_batch_reports_its_start_every_quarter_and_its_end() -> None:
    seen: list[dict[str, Any]] = []
    clock = Clock()
    p = Progress(seen.append, lambda: (1234, None), clock=clock)
    for _ in range(8):
        p.on_request("start", 0, _req(batch=(1, 8)), None)  # all within MIN_INTERVAL_S: one event
    for i in range(8):
        p.on_request("end", 0, _req(batch=(1, 8)), {"ok": i != 5})
    done = [(e["done"] + e["failed"], e["in_flight"], e["finished"]) for e in seen]
    assert done == [(0, 1, False), (2, 6, False), (4, 4, False), (6, 2, False), (8, 0, True)]
    last = seen[-1]
    assert last["failed"] == 1 and last["total"] == 8 and last["batch"] and last["tokens"] == 1234
    assert last["cost_usd"] is None and last["kind"] == "sub_calls" and last["type"] == "progress"


def test_each_quarter_is_sent_with_its_own_count_while_another_sub_call_ends() -> None:
    """A quarter's event says the count that reached it, and comes before the next one's, even when
    another sub-call's answer lands while it is being made (before: built after the tracker's lock
    was let go, the 2/8 event said 3/8; on a machine under load a batch of 8 showed 2/8, 6/8, 8/8
    and never 4/8)."""
    seen: list[dict[str, Any]] = []
    p: Progress
    calls = [0]
    other: list[threading.Thread] = []

    def totals() -> tuple[int, None]:  # called while the event of the second answer is made
        calls[0] += 1
        if calls[0] == 2:
            t = threading.Thread(target=p.on_request, args=("end", 0, _req(batch=(1, 8)), {"ok": True}))
            other.append(t)
            t.start()
            t.join(0.3)  # it waits for the tracker: the event being made keeps its count
        return 0, None

    p = Progress(seen.append, totals, clock=Clock())
    for _ in range(8):
        p.on_request("start", 0, _req(batch=(1, 8)), None)
    for _ in range(2):
        p.on_request("end", 0, _req(batch=(1, 8)), {"ok": True})
    other[0].join()
    for _ in range(5):
        p.on_request("end", 0, _req(batch=(1, 8)), {"ok": True})
    assert [e["done"] for e in seen] == [0, 2, 4, 6, 8]


def test_single_calls_and_sub_rlms_are_grouped_per_block_and_end_with_it() -> None:
    seen: list[dict[str, Any]] = []
    clock = Clock()
    p = Progress(seen.append, lambda: (0, 0.5), clock=clock)
    for _ in range(3):
        p.on_request("start", 1, _req(), None)
        clock.now += 1
        p.on_request("end", 1, _req(), {"ok": True})
    p.on_request("start", 1, _req("rlm_query"), None)
    p.on_request("end", 1, _req("rlm_query"), {"ok": False, "error": "x"})
    p.on_request("start", 1, {"type": "other"}, None)  # not a model request: ignored
    p(event("output", 1, block=1))  # the block ended: its groups end too
    ends = [e for e in seen if e.get("finished")]
    assert [(e["kind"], e["done"], e["failed"], e["total"], e["batch"]) for e in ends] == [
        ("sub_calls", 3, 0, 3, False), ("sub_rlms", 0, 1, 1, False)]
    assert ends[0]["elapsed_s"] == 3.0 and ends[0]["cost_usd"] == 0.5
    assert seen[-1]["type"] == "output"  # forwarded after the groups' last events


def test_stream_callback_and_transient_events_stay_out_of_the_trajectory(tmp_path: Path) -> None:
    shown: list[dict[str, Any]] = []
    writer = TraceWriter(tmp_path / "t.jsonl")
    sink = TraceSink(writer, shown.append)
    sink(event("header", 0, run_id="x"))
    on_delta = stream_callback(sink, 0, "openai/root")
    on_delta("Hel")
    on_delta(None)
    on_delta("Hello")
    sink(event("progress", 0, kind="index", files=1))
    writer.close()
    assert [(e["type"], e.get("state")) for e in shown[1:]] == [
        ("stream", "start"), ("stream", "delta"), ("stream", "restart"), ("stream", "delta"), ("progress", None)]
    assert [e["type"] for e in read_trace(tmp_path / "t.jsonl")] == ["header"]
    assert TRANSIENT_TYPES == {"stream", "progress"}


def test_indexing_reports_files_and_bytes_once_it_takes_a_while(tmp_path: Path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    for i in range(5):
        (root / f"f{i}.txt").write_text("x" * (1000 * (i + 1)) + "\n")
    calls: list[tuple[int, int, int, int]] = []
    load_corpus([str(root)], CorpusOptions(use_cache=False), on_progress=lambda *a: calls.append(a))
    assert calls[-1] == (5, 5, 15_005, 15_005) and [c[0] for c in calls] == [1, 2, 3, 4, 5]
    assert all(a[2] <= b[2] for a, b in zip(calls, calls[1:], strict=False))

    seen: list[dict[str, Any]] = []
    clock = Clock()
    on_progress = index_callback(seen.append, clock=clock)
    on_progress(1, 4, 100, 400)  # quick: nothing to show yet
    clock.now += INDEX_QUIET_S + 0.5
    on_progress(2, 4, 200, 400)
    on_progress(3, 4, 300, 400)  # within MIN_INTERVAL_S of the last one: skipped
    clock.now += 1
    on_progress(4, 4, 400, 400)
    assert [(e["files"], e["bytes"], e["finished"]) for e in seen] == [(2, 200, False), (4, 400, True)]
    assert seen[-1]["rate_bps"] == round(400 / 2.0) and seen[-1]["kind"] == "index"
    quick: list[dict[str, Any]] = []
    fast = index_callback(quick.append, clock=Clock())
    fast(1, 1, 10, 10)
    assert quick == []  # a corpus that loads in a blink shows no progress at all


def test_a_run_reports_its_sub_rlm_and_the_sub_rlms_batch(tmp_path: Path) -> None:
    from tests.support.fake_llm import FakeLLM, repl
    from tests.support.inproc import corpus, run

    llm = FakeLLM()
    try:
        llm.default("sub", "part done")
        llm.script("root",
                   repl("print(rlm_query('Count the parts'))"),  # depth 0
                   repl("print(llm_query_batched(['a', 'b', 'c']))"),  # depth 1, the sub-RLM
                   repl("FINAL('three parts')"),
                   repl("FINAL('the sub-RLM says three parts')"))
        r = run(llm, [corpus(tmp_path)], "Go", max_depth=2)
    finally:
        llm.close()
    assert r.error is None and r.answer == "the sub-RLM says three parts"
    ends = [(e["depth"], e["kind"], e["done"], e["total"], e["batch"]) for e in r.of("progress") if e["finished"]]
    assert ends == [(1, "sub_calls", 3, 3, True), (0, "sub_rlms", 1, 1, False)]
    assert [(e["depth"], e["iteration"], e["phase"]) for e in r.of("phase")] == [
        (1, 1, "decompose"), (1, 2, "terminate"), (0, 1, "decompose"), (0, 2, "terminate")]
