"""Composition of one ``rlm ask`` run: corpus -> model client -> LMHandler -> orchestrator.

Kept apart from ``cli.py`` so the command functions stay thin and the core can be driven from
tests or other programs: ``ask(settings, paths, question, emit=...)`` returns an
:class:`AskOutcome` or raises an ``RLMError``. Every run writes a trajectory (``rlm_cli.trace``)
unless ``record=False``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm_cli import __version__
from rlm_cli.config import CHOICES, Settings
from rlm_cli.corpus import Corpus, load_corpus
from rlm_cli.corpus.tokens import encoding
from rlm_cli.errors import (
    DoesNotFitError,
    ExitCode,
    MaxIterationsError,
    NoModelError,
    PartialAnswerError,
    RLMError,
    UsageError,
)
from rlm_cli.history import input_budget, request_tokens
from rlm_cli.lm_handler import LMHandler, ModelClient
from rlm_cli.models import ensure_model
from rlm_cli.orchestrator import (
    DEFAULT_WINDOW,
    Orchestrator,
    RunResult,
    corpus_meta,
    first_messages,
    run_direct,
    text_meta,
)
from rlm_cli.phases import PhaseTagger
from rlm_cli.progress import Progress, index_callback
from rlm_cli.prompts import direct_prompt
from rlm_cli.sandbox.launcher import WorkerSpec, resolve_level, run_notes
from rlm_cli.sources import SourceCollector, build_sources, direct_rows
from rlm_cli.trace import PROMPT_HEAD_CHARS, TraceSink, TraceWriter, event, new_run_id, request_key, traces_dir

Emit = Callable[[dict[str, Any]], None]

NO_MODEL_HINT = ("set one with --model (e.g. --model openai/gpt-5-mini), the RLM_MODEL environment variable, "
                 "or `rlm config set model MODEL`")
MODES = CHOICES["mode"]


@dataclass
class AskOutcome:
    """A finished run: the result, the corpus it read, the usage summary and its trajectory."""

    result: RunResult
    corpus: Corpus
    usage: dict[str, Any]
    sandbox: str
    run_id: str = ""
    trace_path: Path | None = None
    #: What the run looked at (``rlm_cli.sources``) and how many ranges were left out of the list.
    sources: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    sources_omitted: int = 0


def require_model(settings: Settings) -> str:
    """The root model name.

    Raises:
        NoModelError: none configured.
    """
    if not settings.model:
        raise NoModelError("no model configured", hint=NO_MODEL_HINT)
    return settings.model


def model_window(client: ModelClient, model: str, override: int | None) -> tuple[int, str]:
    """The input window of ``model`` in tokens and where it came from: ``(override, "flag")``,
    the client's lookup in litellm's model info (``"model info"``), or
    ``(DEFAULT_WINDOW, "default")`` for a model litellm does not know (most local models)."""
    if override:
        return int(override), "flag"
    try:
        window = int(client.input_window(model))
    except RLMError:
        return DEFAULT_WINDOW, "default"
    return window, "default" if window == DEFAULT_WINDOW else "model info"


def choose_mode(settings: Settings, corpus_tokens: int, root_window: int) -> tuple[str, str]:
    """``(mode, reason)``: ``rlm`` or ``direct``. ``auto`` goes direct when the corpus is under
    ``direct_max_tokens`` and under ``direct_max_fraction`` of the root model's input window.

    Raises:
        UsageError: ``settings.mode`` is not one of :data:`MODES`.
    """
    if settings.mode not in MODES:
        raise UsageError(f"unknown mode {settings.mode!r}", hint="use auto, rlm or direct")
    if settings.mode != "auto":
        return settings.mode, f"--mode {settings.mode}"
    limit = min(settings.direct_max_tokens, int(root_window * settings.direct_max_fraction))
    if corpus_tokens < limit:
        return "direct", (f"the corpus ({corpus_tokens:,} tokens) is under {limit:,} tokens, so it goes to the "
                          f"root model in one call")
    return "rlm", f"the corpus ({corpus_tokens:,} tokens) is over {limit:,} tokens, so it stays in the REPL"


def direct_tokens(corpus: Corpus, question: str) -> int:
    """Tokens a direct-mode request for ``question`` over ``corpus`` needs: the corpus, the
    prompt around it and about 12 tokens per file for its ``==> path <==`` header."""
    return corpus.total_tokens + request_tokens(direct_prompt(question, "")) + len(corpus.files) * 12


#: Share of the root model's input budget, after the system prompt and the corpus description,
#: that a question may take; the other half is left for the turns of the loop.
QUESTION_SHARE = 0.5
#: A question that must be cut to fewer tokens than this cannot be asked (exit 2).
MIN_QUESTION_TOKENS = 256


def fit_question(settings: Settings, question: str, meta: dict[str, Any], depth: int = 0) -> tuple[str, str | None]:
    """``(question, note)``: the question as the loop at ``depth`` will send it, and a note for
    stderr when it had to be shortened (``None`` when it is sent whole).

    Rule: a question may take at most :data:`QUESTION_SHARE` of the tokens the root model's input
    budget (``history.input_budget`` of ``settings.root_model_window``) leaves after the system
    prompt and the corpus description, so that a few turns still fit. A longer one keeps its
    head (two thirds) and its end (a third: the instruction after a pasted text usually comes
    last) around a marker that tells the model how much was cut; without it, ``History`` would
    cut the first message's end silently. Tokens are counted with ``o200k_base``.

    Raises:
        UsageError: the question is too long and less than :data:`MIN_QUESTION_TOKENS` tokens
            are left for it (a window too small for the loop at all).
    """
    window = settings.root_model_window or DEFAULT_WINDOW
    fixed = request_tokens(first_messages(settings, "", meta, depth))
    room = int((input_budget(window) - fixed) * QUESTION_SHARE)
    enc = encoding()
    ids = enc.encode_ordinary(question)
    if len(ids) <= room:
        return question, None
    if room < MIN_QUESTION_TOKENS:
        raise UsageError(f"the question ({len(ids):,} tokens) does not fit: the root model's input window of "
                         f"{window:,} tokens leaves {max(room, 0):,} tokens for it after the system prompt and the "
                         "corpus description, and half of the window for the turns",
                         hint="put long material in a file passed as a PATH and keep the question short, or use "
                              "a model with a larger window (--root-model-window)")
    marker = "\n\n[... {cut:,} characters of the question were cut here to fit the model's input window ...]\n\n"
    keep = room - len(enc.encode_ordinary(marker.format(cut=len(question))))
    head, tail = enc.decode(ids[:keep * 2 // 3]), enc.decode(ids[len(ids) - (keep - keep * 2 // 3):])
    cut = len(question) - len(head) - len(tail)
    note = (f"the question ({len(question):,} characters, {len(ids):,} tokens) was shortened to about {room:,} "
            f"tokens to fit the root model's input window of {window:,} tokens: its middle ({cut:,} characters) "
            "was cut, its beginning and end were kept (put long material in a file passed as a PATH instead)")
    return head + marker.format(cut=cut) + tail, note


def ask(settings: Settings, paths: list[str], question: str, *, emit: Emit, stdin_bytes: bytes | None = None,
        client: ModelClient | None = None, record: bool = True, corpus: Corpus | None = None) -> AskOutcome:
    """Load the corpus at ``paths`` and answer ``question`` (RLM loop or direct, per ``settings.mode``).

    ``client`` replaces the litellm client (replay passes one that answers from a trajectory);
    ``record`` writes the trajectory to ``settings.trace`` or a new file under ``traces_dir()``;
    ``corpus`` is an already loaded corpus for ``paths`` (``rlm eval`` passes derived ones), which
    the caller keeps and deletes.

    Raises:
        UsageError / EmptyCorpusError: bad paths or nothing to read.
        NoModelError: no model configured.
        PartialAnswerError / BudgetExceededError: stopped without a final answer (partial inside;
            ``trace_path`` attached).
        ProviderError: the provider failed.
    """
    ensure_model(settings, lambda message: emit(event("notice", 0, message=message)))
    settings = dataclasses.replace(settings)  # windows get resolved into this copy
    client = client or ModelClient(settings, started=time.monotonic(),
                                   notify=lambda message: sink(event("notice", 0, message=message, level="warning")))
    run_id = new_run_id()
    trace_path = (settings.trace or traces_dir() / f"{run_id}.jsonl") if record else None
    created = trace_path is not None and not trace_path.exists()
    new_dirs = [d for d in trace_path.parents if not d.exists()] if created and trace_path is not None else []
    writer = TraceWriter(trace_path) if trace_path is not None else None
    totals = lambda: (client.usage.total_tokens, client.usage.cost_usd)  # noqa: E731
    # Events flow: turns counted -> phases added -> progress groups closed -> sources kept ->
    # trajectory + terminal.
    progress = Progress(TraceSink(writer, emit, totals=totals), totals)
    collector = SourceCollector(progress)
    sink = PhaseTagger(collector)
    turns = _TurnCounter(sink)
    started = time.monotonic()
    sink(event("header", 0, run_id=run_id, rlm_version=__version__, question=question, cwd=os.getcwd(),
               paths=[p if p == "-" else os.path.abspath(p) for p in paths], config=settings.redacted()))
    try:
        outcome = _ask(settings, paths, question, turns, stdin_bytes, client, progress, corpus)
        res = outcome.result
        outcome.sources, outcome.sources_omitted = _sources(collector, res.answer, outcome.corpus, res.mode)
        sink(event("summary", 0, status=res.status, answer=res.answer, mode=res.mode, iterations=res.iterations,
                   sub_calls=res.sub_calls, usage=outcome.usage, elapsed_s=round(time.monotonic() - started, 3),
                   sources=outcome.sources, sources_omitted=outcome.sources_omitted))
    except RLMError as exc:
        result = getattr(exc, "result", None)
        status = ("max_iterations" if isinstance(exc, MaxIterationsError) else
                  "budget_exceeded" if isinstance(exc, PartialAnswerError) else "error")
        if result is None and isinstance(exc, PartialAnswerError):  # a budget stop: count what ran
            result = RunResult(answer=exc.partial, status=status, iterations=turns.root_turns,
                               sub_calls=client.usage.sub_calls, elapsed_s=round(time.monotonic() - started, 3),
                               mode=getattr(exc, "mode", "rlm"))
            exc.result = result  # type: ignore[attr-defined]
        corpus = getattr(exc, "corpus", None)
        found, omitted = (_sources(collector, getattr(exc, "partial", "") or "", corpus, getattr(exc, "mode", "rlm"))
                          if corpus is not None else ([], 0))
        exc.sources, exc.sources_omitted = found, omitted  # type: ignore[attr-defined]
        sink(event("summary", 0, status=status, answer=getattr(exc, "partial", ""), error=exc.message,
                   exit_code=int(exc.exit_code), mode=getattr(exc, "mode", None),
                   iterations=result.iterations if result else turns.root_turns,
                   sub_calls=result.sub_calls if result else client.usage.sub_calls, usage=client.usage.summary(),
                   elapsed_s=round(time.monotonic() - started, 3), sources=found, sources_omitted=omitted))
        exc.trace_path = trace_path  # type: ignore[attr-defined]
        if (exc.exit_code in (ExitCode.USAGE, ExitCode.NO_MODEL) and not client.usage.records
                and writer is not None and created):
            # Bad input that never reached a model leaves nothing behind (no stray trajectory).
            writer.close()
            assert trace_path is not None
            trace_path.unlink(missing_ok=True)
            for folder in new_dirs:  # deepest first; a folder another run wrote into stays
                try:
                    folder.rmdir()
                except OSError:
                    break
            exc.trace_path = None  # type: ignore[attr-defined]
        raise
    except (KeyboardInterrupt, SystemExit) as exc:  # Ctrl-C, or SIGTERM (SystemExit 143, see cli)
        signal_name = "SIGINT" if isinstance(exc, KeyboardInterrupt) else "SIGTERM"
        code = ExitCode.INTERRUPTED if isinstance(exc, KeyboardInterrupt) else ExitCode.TERMINATED
        sink(event("summary", 0, status="interrupted", answer="", signal=signal_name, exit_code=int(code),
                   error=f"interrupted by {signal_name}", iterations=turns.root_turns,
                   sub_calls=client.usage.sub_calls, usage=client.usage.summary(),
                   elapsed_s=round(time.monotonic() - started, 3)))
        raise
    finally:
        if writer is not None:
            writer.close()
    outcome.run_id, outcome.trace_path = run_id, trace_path
    return outcome


def _sources(collector: SourceCollector, answer: str, corpus: Corpus, mode: str) -> tuple[list[dict[str, Any]], int]:
    """The run's ``sources`` and how many were left out (see ``rlm_cli.sources``)."""
    files = [(f.path, f.lines) for f in corpus.files]
    rows = direct_rows(files) if mode == "direct" else collector.rows
    return build_sources(rows, answer, files)


class _TurnCounter:
    """The ``emit`` target between the loops and the trajectory: forwards every event and counts
    the root loop's answered turns (``root_call`` events at depth 0), which is what a run that
    stopped early (budget, Ctrl-C) reports as its ``iterations``."""

    def __init__(self, forward: Emit) -> None:
        self.forward = forward
        self.root_turns = 0

    def __call__(self, ev: dict[str, Any]) -> None:
        if ev.get("type") == "root_call" and ev.get("depth") == 0:
            self.root_turns += 1
        self.forward(ev)


def skipped_files(corpus: Corpus) -> dict[str, Any]:
    """``{"skipped": [{"path", "reason"}, ...], "skipped_count": n}``: the files and folders the
    corpus left out (the first ``loader.MAX_NAMED_SKIPS``; a folder's path ends with ``/``) and
    how many there were in all (``--json``'s corpus section and the trajectory's corpus event)."""
    return {"skipped": [{"path": path, "reason": reason} for path, reason in corpus.report.named],
            "skipped_count": sum(corpus.report.skipped.values())}


def _ask(settings: Settings, paths: list[str], question: str, emit: Emit, stdin_bytes: bytes | None,
         client: ModelClient, progress: Progress | None = None, given: Corpus | None = None) -> AskOutcome:
    level, warning = resolve_level(settings.sandbox)
    if warning:
        emit(event("notice", 0, message=warning, level="warning"))
    started = time.monotonic()
    corpus = given or load_corpus(paths, settings.corpus, stdin_bytes=stdin_bytes,
                                  on_warning=lambda w: emit(event("notice", 0, message=w, level="warning")),
                                  on_progress=index_callback(emit))
    emit(event("corpus", 0, summary=corpus.summary(), files=len(corpus.files), chars=corpus.chars,
               tokens=corpus.total_tokens, chunks=len(corpus.chunks), load_s=round(time.monotonic() - started, 3),
               sandbox=level, **skipped_files(corpus)))
    try:
        return _answer(settings, paths, question, emit, client, corpus, level, progress)
    finally:
        if corpus.temporary and given is None:
            shutil.rmtree(corpus.bundle_dir, ignore_errors=True)


def _answer(settings: Settings, paths: list[str], question: str, emit: Emit, client: ModelClient, corpus: Corpus,
            level: str, progress: Progress | None = None) -> AskOutcome:
    model = require_model(settings)
    root_window, root_src = model_window(client, model, settings.root_model_window)
    sub_model = settings.effective_sub_model or model
    sub_window, sub_src = model_window(client, sub_model, settings.sub_model_window)
    settings.root_model_window, settings.sub_model_window = root_window, sub_window
    mode, reason = choose_mode(settings, corpus.total_tokens, root_window)
    needed = direct_tokens(corpus, question)
    if mode == "direct" and settings.mode == "auto" and needed > root_window // 2:
        mode, reason = "rlm", (f"the corpus is small, but with the question it needs {needed:,} tokens, over half "
                               f"the root model's window of {root_window:,}, so it stays in the REPL")
    emit(event("mode", 0, mode=mode, reason=reason, root_window=root_window, root_window_source=root_src,
               sub_window=sub_window, sub_window_source=sub_src))
    if mode == "direct":
        if needed > root_window:
            raise DoesNotFitError(f"--mode direct: the corpus needs {needed:,} tokens but the root model's input "
                                  f"window is {root_window:,}", hint="use --mode rlm (or auto)")
        try:
            result = run_direct(settings, client, question, corpus.context, emit=emit)
        except PartialAnswerError as exc:
            _attach(exc, client, corpus, "direct")
            raise
        return AskOutcome(result, corpus, client.usage.summary(), level)
    for run_note in run_notes(level):  # once per run, not once per sub-RLM worker
        emit(event("notice", 0, message=run_note))
    question, note = fit_question(settings, question, corpus_meta(corpus))
    if note:
        emit(event("notice", 0, message=note, level="warning"))
    hide = tuple(os.path.abspath(p) for p in paths if p != "-")
    handler = LMHandler(client, on_sub_call=lambda info: emit(sub_call_event(info)),
                        on_request=progress.on_request if progress is not None else None)
    try:
        handler.on_rlm_query = _recursion(settings, client, handler, level, emit, corpus, hide)
        orch = Orchestrator(settings, client, handler, sandbox_level=level, emit=emit, hide_paths=hide)
        spec = WorkerSpec(index_file=corpus.index_file, context_file=corpus.context_file,
                          data_file=corpus.data_file)
        try:
            result = orch.run(question, spec, corpus_meta(corpus))
        except PartialAnswerError as exc:
            _attach(exc, client, corpus, "rlm")
            raise
        if client.fatal is not None:  # e.g. a sub-call's 401 in the block that called FINAL
            raise client.fatal
        return AskOutcome(result, corpus, client.usage.summary(), level)
    finally:
        handler.close()


def _attach(exc: PartialAnswerError, client: ModelClient, corpus: Corpus, mode: str) -> None:
    exc.usage = client.usage.summary()  # type: ignore[attr-defined]
    exc.corpus = corpus  # type: ignore[attr-defined]
    exc.mode = mode  # type: ignore[attr-defined]


def sub_call_event(info: dict[str, Any], *, depth: int | None = None) -> dict[str, Any]:
    """The ``sub_call`` trajectory event for one sub-call reported by the LMHandler (``info``:
    caller ``depth``, ``model``, ``messages``, ``response``, tokens, cost, latency). The event's
    depth is one below the caller's; the prompt is kept as a head plus its request key."""
    info = dict(info)
    messages = info.pop("messages", None) or []
    caller = int(info.pop("depth", 0))
    prompt = "\n".join(str(m.get("content", "")) for m in messages)
    return event("sub_call", caller + 1 if depth is None else depth, **info,
                 request_key=request_key(str(info.get("model")), messages), prompt_head=prompt[:PROMPT_HEAD_CHARS])


def _recursion(settings: Settings, client: ModelClient, handler: LMHandler, level: str, emit: Emit,
               corpus: Corpus, hide: tuple[str, ...]) -> Callable[[str, str | None, int], str]:
    """The ``rlm_query`` handler: a child loop at depth + 1 with its own worker and the same
    handler, client, usage and budget; a plain sub-call once depth + 1 reaches ``max_depth``."""

    def on_rlm_query(prompt: str, context: str | None, depth: int) -> str:
        child_depth = depth + 1
        if not handler.recurses(depth):
            model = settings.effective_sub_model
            assert model is not None
            content = prompt if context is None else f"{prompt}\n\n{context}"
            emit(event("recursion", child_depth, mode="plain", prompt_chars=len(content),
                       prompt_head=prompt[:PROMPT_HEAD_CHARS]))
            messages: list[dict[str, Any]] = [{"role": "user", "content": content}]
            started = time.monotonic()
            done = client.complete(messages, model=model, role="sub", depth=child_depth)
            r = done.record
            emit(sub_call_event({"depth": depth, "model": model, "messages": messages, "response": done.text,
                                 "prompt_chars": len(content), "answer_chars": len(done.text),
                                 "input_tokens": r.input_tokens, "output_tokens": r.output_tokens,
                                 "cost_usd": r.cost_usd, "latency_s": round(time.monotonic() - started, 3)}))
            return done.text
        emit(event("recursion", child_depth, mode="rlm", prompt_chars=len(prompt),
                   context_chars=len(context) if context is not None else corpus.chars,
                   prompt_head=prompt[:PROMPT_HEAD_CHARS]))
        child = Orchestrator(settings, client, handler, sandbox_level=level, emit=emit, depth=child_depth,
                             hide_paths=hide)
        if context is None:
            spec = WorkerSpec(index_file=corpus.index_file, context_file=corpus.context_file,
                              data_file=corpus.data_file)
            meta = corpus_meta(corpus)
        else:
            spec, meta = WorkerSpec(context_text=context), text_meta(context)
        try:
            prompt, note = fit_question(settings, prompt, meta, child_depth)
        except UsageError as exc:
            return f"Error: {exc.message}; pass long text as context= instead"
        if note:
            emit(event("notice", child_depth, message=f"sub-RLM: {note}", level="warning"))
        try:
            return child.run(prompt, spec, meta).answer
        except MaxIterationsError as exc:  # a budget stop propagates: it ends the whole tree
            return exc.partial or f"Error: the sub-RLM stopped without an answer ({exc.message})"

    return on_rlm_query
