"""Composition of one ``rlm ask`` run: corpus -> model client -> LMHandler -> orchestrator.

Kept apart from ``cli.py`` so the command functions stay thin and the core can be driven from
tests or other programs: ``ask(settings, paths, question, emit=...)`` returns an
:class:`AskOutcome` or raises an ``RLMError``. Every run writes a trajectory (``rlm_cli.output.trace``)
unless ``record=False``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm_cli.config import Settings
from rlm_cli.config_keys import CHOICES
from rlm_cli.corpus import Corpus
from rlm_cli.corpus.tokens import encoding
from rlm_cli.errors import (
    MaxIterationsError,
    NoModelError,
    PartialAnswerError,
    RLMError,
    UsageError,
)
from rlm_cli.loop.meta import corpus_meta, first_messages, text_meta
from rlm_cli.loop.orchestrator import Orchestrator
from rlm_cli.loop.prompts import direct_prompt
from rlm_cli.loop.result import RunResult
from rlm_cli.models.client import ModelClient
from rlm_cli.models.detect import DEFAULT_WINDOW
from rlm_cli.models.relay import LMHandler
from rlm_cli.models.window import input_budget, request_tokens
from rlm_cli.output.sources import SourceCollector, build_sources, direct_rows
from rlm_cli.output.trace import PROMPT_HEAD_CHARS, Emit, event, request_key
from rlm_cli.sandbox.launcher import WorkerSpec

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
    #: What the run looked at (``rlm_cli.output.sources``) and how many ranges were left out of the list.
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


def fit_question(settings: Settings, question: str, meta: dict[str, Any], depth: int = 0,
                 session_note: str = "") -> tuple[str, str | None]:
    """``(question, note)``: the question as the loop at ``depth`` will send it, and a note for
    stderr when it had to be shortened (``None`` when it is sent whole). ``session_note`` (what a
    session tells the question of earlier ones) counts as part of the fixed prompt.

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
    fixed = request_tokens(first_messages(settings, "", meta, depth, session_note))
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
        client: ModelClient | None = None, record: bool = True, corpus: Corpus | None = None,
        backend: Any = None) -> AskOutcome:
    """Load the corpus at ``paths`` and answer ``question`` (RLM loop or direct, per ``settings.mode``):
    a one-question ``session.Session``.

    ``client`` replaces the litellm client (replay passes one that answers from a trajectory);
    ``backend`` is where litellm runs (``models.host.HostBackend``; default: this process);
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
    from rlm_cli.session import Session  # the session builds on this module's helpers

    with Session(settings, paths, emit=emit, stdin_bytes=stdin_bytes, backend=backend, client=client,
                 corpus=corpus, record=record) as session:
        session.open(question)
        return session.ask(question, emit=emit)


def _sources(collector: SourceCollector, answer: str, corpus: Corpus, mode: str) -> tuple[list[dict[str, Any]], int]:
    """The run's ``sources`` and how many were left out (see ``rlm_cli.output.sources``)."""
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
