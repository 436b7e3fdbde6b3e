"""Composition of one ``rlm ask`` run: corpus -> model client -> LMHandler -> orchestrator.

Kept apart from ``cli.py`` so the command functions stay thin and the core can be driven from
tests or other programs: ``ask(settings, paths, question, emit=...)`` returns an
:class:`AskOutcome` or raises an ``RLMError``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlm_cli.config import Settings
from rlm_cli.corpus import Corpus, load_corpus
from rlm_cli.errors import NoModelError, PartialAnswerError
from rlm_cli.lm_handler import LMHandler, ModelClient
from rlm_cli.orchestrator import Orchestrator, RunResult, corpus_meta
from rlm_cli.sandbox.launcher import WorkerSpec, resolve_level
from rlm_cli.trace import event

Emit = Callable[[dict[str, Any]], None]

NO_MODEL_HINT = ("set one with --model (e.g. --model openai/gpt-5-mini), the RLM_MODEL environment variable, "
                 "or `rlm config set model MODEL`")


@dataclass
class AskOutcome:
    """A finished run: the result, the corpus it read and the usage summary."""

    result: RunResult
    corpus: Corpus
    usage: dict[str, Any]
    sandbox: str


def require_model(settings: Settings) -> str:
    """The root model name.

    Raises:
        NoModelError: none configured.
    """
    if not settings.model:
        raise NoModelError("no model configured", hint=NO_MODEL_HINT)
    return settings.model


def ask(settings: Settings, paths: list[str], question: str, *, emit: Emit,
        stdin_bytes: bytes | None = None) -> AskOutcome:
    """Load the corpus at ``paths`` and answer ``question`` with the RLM loop.

    Raises:
        UsageError / EmptyCorpusError: bad paths or nothing to read.
        NoModelError: no model configured.
        PartialAnswerError / BudgetExceededError: stopped without a final answer (partial inside).
        ProviderError: the provider failed.
    """
    require_model(settings)
    level, warning = resolve_level(settings.sandbox)
    if warning:
        emit(event("notice", 0, message=warning, level="warning"))
    started = time.monotonic()
    corpus = load_corpus(paths, settings.corpus, stdin_bytes=stdin_bytes,
                         on_warning=lambda w: emit(event("notice", 0, message=w, level="warning")))
    emit(event("corpus", 0, summary=corpus.summary(), files=len(corpus.files), chars=len(corpus.context),
               tokens=corpus.total_tokens, chunks=len(corpus.chunks), load_s=round(time.monotonic() - started, 3),
               sandbox=level))
    temp_bundle = not settings.corpus.use_cache or "-" in paths
    client = ModelClient(settings)
    hide = tuple(os.path.abspath(p) for p in paths if p != "-")
    handler: LMHandler | None = None
    try:
        handler = LMHandler(client, on_sub_call=lambda info: emit(event("sub_call", info.pop("depth"), **info)))
        handler.on_rlm_query = _recursion(settings, client, handler, level, emit, corpus, hide)
        orch = Orchestrator(settings, client, handler, sandbox_level=level, emit=emit, hide_paths=hide)
        assert corpus.context_file is not None and corpus.bundle_dir is not None
        spec = WorkerSpec(index_file=corpus.bundle_dir / "index.json", context_file=corpus.context_file)
        try:
            result = orch.run(question, spec, corpus_meta(corpus))
        except PartialAnswerError as exc:
            exc.usage = client.usage.summary()  # type: ignore[attr-defined]
            exc.corpus = corpus  # type: ignore[attr-defined]
            raise
        return AskOutcome(result, corpus, client.usage.summary(), level)
    finally:
        if handler is not None:
            handler.close()
        if temp_bundle and corpus.bundle_dir is not None:
            shutil.rmtree(corpus.bundle_dir, ignore_errors=True)


def _recursion(settings: Settings, client: ModelClient, handler: LMHandler, level: str, emit: Emit,
               corpus: Corpus, hide: tuple[str, ...]) -> Callable[[str, str | None, int], str]:
    """The ``rlm_query`` handler: a child loop at depth + 1, or a plain sub-call at the limit."""

    def on_rlm_query(prompt: str, context: str | None, depth: int) -> str:
        child_depth = depth + 1
        if child_depth >= settings.max_depth:
            model = settings.effective_sub_model
            assert model is not None
            content = prompt if context is None else f"{prompt}\n\n{context}"
            emit(event("recursion", child_depth, mode="plain", prompt_chars=len(content)))
            return client.complete([{"role": "user", "content": content}], model=model, role="sub",
                                   depth=child_depth).text
        emit(event("recursion", child_depth, mode="rlm", prompt_chars=len(prompt)))
        child = Orchestrator(settings, client, handler, sandbox_level=level, emit=emit, depth=child_depth,
                             hide_paths=hide)
        if context is None:
            assert corpus.bundle_dir is not None
            spec = WorkerSpec(index_file=corpus.bundle_dir / "index.json", context_file=corpus.context_file)
            meta = corpus_meta(corpus)
        else:
            spec = WorkerSpec(context_text=context)
            meta = {"chars": len(context), "tokens": len(context) // 4, "files": 1, "chunks": 0,
                    "prefix": context[:300]}
        try:
            return child.run(prompt, spec, meta).answer
        except PartialAnswerError as exc:
            return exc.partial or f"Error: the sub-RLM stopped without an answer ({exc.message})"

    return on_rlm_query
