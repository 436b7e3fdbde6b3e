"""``rlm_query`` from the REPL: a child loop one level down, or a plain sub-call at ``max_depth``;
and the ``sub_call`` trajectory event of a sub-call."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rlm_cli.config import Settings
from rlm_cli.corpus import Corpus
from rlm_cli.errors import MaxIterationsError, UsageError
from rlm_cli.events import Emit, event
from rlm_cli.loop.fitting import fit_question
from rlm_cli.loop.meta import corpus_meta, text_meta
from rlm_cli.loop.orchestrator import Orchestrator
from rlm_cli.loop.policy import Policy
from rlm_cli.models.client import ModelClient
from rlm_cli.models.relay import LMHandler
from rlm_cli.output.trace import PROMPT_HEAD_CHARS, request_key
from rlm_cli.sandbox.launcher import WorkerSpec


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


def recursion_handler(settings: Settings, client: ModelClient, handler: LMHandler, level: str, emit: Emit,
               corpus: Corpus, hide: tuple[str, ...], policy: Policy | None = None) -> Callable[[str, str | None, int], str]:
    """The ``rlm_query`` handler: a child loop at depth + 1 with its own worker and the same
    handler, client, usage, budget and ``policy`` (``None``: the one ``settings`` name); a plain
    sub-call once depth + 1 reaches ``max_depth``."""

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
                             hide_paths=hide, policy=policy)
        if context is None:
            spec, meta = corpus.worker_spec(), corpus_meta(corpus)
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
