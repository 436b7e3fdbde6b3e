"""Where a session's trajectories go, what a failed question records, and the trajectory of a run
stopped before its question started (Ctrl-C or SIGTERM while the corpus loads or the model host starts): every run that exists
writes one, as the README's exit-code table promises."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from rlm_cli import __version__
from rlm_cli.app.outcome import run_sources, status_of
from rlm_cli.corpus import Corpus
from rlm_cli.errors import ExitCode, PartialAnswerError, RLMError
from rlm_cli.events import Emit, EventDict, event
from rlm_cli.loop.result import RunResult
from rlm_cli.models.client import ModelClient
from rlm_cli.output.documents import skipped_files
from rlm_cli.output.sources import SourceCollector
from rlm_cli.output.trace import TraceSink, TraceWriter, traces_dir


def corpus_event(corpus: Corpus, load_s: float, level: str) -> dict[str, Any]:
    """The ``corpus`` event of ``corpus``, loaded in ``load_s`` seconds, for a worker at sandbox ``level``."""
    return event("corpus", 0, summary=corpus.summary(), files=len(corpus.files), chars=corpus.chars,
                 tokens=corpus.total_tokens, chunks=len(corpus.chunks), load_s=round(load_s, 3),
                 sandbox=level, **skipped_files(corpus))


def trace_path_for(given: str | Path | None, numbered: bool, run_id: str, turn: int) -> Path:
    """The trajectory file of question ``turn`` of a session: ``--trace FILE`` (``given``), one file
    per question when ``numbered`` (``FILE`` with ``-TURN`` before its suffix), else
    ``traces_dir()/RUN_ID.jsonl``."""
    if given is None:
        return traces_dir() / f"{run_id}.jsonl"
    if not numbered:
        return Path(given)
    given = Path(given)
    return given.with_name(f"{given.stem}-{turn}{given.suffix or '.jsonl'}")


def record_stopped_open(path: Path, *, run_id: str, question: str, paths: list[str], config: dict[str, Any],
                        events: list[EventDict], exc: BaseException, elapsed_s: float) -> None:
    """Write the trajectory of a run that ``exc`` (``KeyboardInterrupt``, or ``SystemExit`` from
    SIGTERM) stopped before its question started: the header, the session's events so far
    (``events``: loading, notices) and an ``interrupted`` summary. Best effort: a file that cannot
    be written is left out (the run is being stopped; its error is the interrupt)."""
    sigint = isinstance(exc, KeyboardInterrupt)
    code = ExitCode.INTERRUPTED if sigint else ExitCode.TERMINATED
    try:
        writer = TraceWriter(path)
    except Exception:  # noqa: BLE001 - see the docstring
        return
    try:
        sink = TraceSink(writer, lambda ev: None)
        sink(event("header", 0, run_id=run_id, rlm_version=__version__, question=question, cwd=os.getcwd(),
                   paths=[p if p == "-" else os.path.abspath(p) for p in paths], config=config))
        for ev in events:
            sink(ev)
        name = "SIGINT" if sigint else "SIGTERM"
        sink(event("summary", 0, status="interrupted", answer="", signal=name, exit_code=int(code),
                   error=f"interrupted by {name} before the question started", iterations=0, sub_calls=0,
                   usage=None, elapsed_s=round(elapsed_s, 3)))
    finally:
        writer.close()




def record_failure(exc: RLMError, client: ModelClient, collector: SourceCollector, sink: Emit, started: float,
                   trace_path: Path | None, root_turns: int, policy: str) -> None:
    """Record a question that ended in ``exc``: its summary event (a budget stop counts the root
    turns and sub-calls that ran), sources and trajectory path, in ``exc.report``."""
    report = exc.report
    result = report.result
    status = status_of(exc)
    partial = exc.partial if isinstance(exc, PartialAnswerError) else None
    if result is None and isinstance(exc, PartialAnswerError):  # a budget stop: count what ran
        result = RunResult(answer=exc.partial, status=status, iterations=root_turns,
                           sub_calls=client.usage.sub_calls, elapsed_s=round(time.monotonic() - started, 3),
                           mode=report.mode or "rlm", policy=policy)
        report.result = result
    found, omitted = (run_sources(collector, partial or "", report.corpus, report.mode or "rlm")
                      if report.corpus is not None else ([], 0))
    report.sources, report.sources_omitted = found, omitted
    sink(event("summary", 0, status=status, answer=partial if partial is not None else "", error=exc.message,
               exit_code=int(exc.exit_code), mode=report.mode,
               iterations=result.iterations if result else root_turns,
               sub_calls=result.sub_calls if result else client.usage.sub_calls, usage=client.usage.summary(),
               elapsed_s=round(time.monotonic() - started, 3), sources=found, sources_omitted=omitted))
    report.trace_path = trace_path
    if report.usage is None:
        report.usage = client.usage.summary()


def record_interrupted(exc: KeyboardInterrupt | SystemExit, client: ModelClient, sink: Emit, started: float,
                       root_turns: int) -> None:
    """Record a question stopped by Ctrl-C (``KeyboardInterrupt``) or SIGTERM (``SystemExit``
    143): its ``interrupted`` summary event, with the root turns and the usage so far."""
    signal_name = "SIGINT" if isinstance(exc, KeyboardInterrupt) else "SIGTERM"
    code = ExitCode.INTERRUPTED if isinstance(exc, KeyboardInterrupt) else ExitCode.TERMINATED
    sink(event("summary", 0, status="interrupted", answer="", signal=signal_name, exit_code=int(code),
               error=f"interrupted by {signal_name}", iterations=root_turns,
               sub_calls=client.usage.sub_calls, usage=client.usage.summary(),
               elapsed_s=round(time.monotonic() - started, 3)))


def discard_trace(exc: RLMError, writer: TraceWriter, new_dirs: list[Path]) -> None:
    """Delete the trajectory ``writer`` wrote for a question that failed with ``exc`` before it
    reached a model (bad input leaves no stray trajectory), and the folders made for it
    (``new_dirs``, deepest first; a folder another run wrote into stays); ``exc.report`` then
    names no trajectory."""
    writer.close()
    writer.path.unlink(missing_ok=True)
    for folder in new_dirs:
        try:
            folder.rmdir()
        except OSError:
            break
    exc.report.trace_path = None
