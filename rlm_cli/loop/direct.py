"""Direct mode: the question and the whole corpus in one root call (no REPL)."""

from __future__ import annotations

import time
from typing import Any

from rlm_cli import interrupts
from rlm_cli.config import Settings
from rlm_cli.events import Emit, event
from rlm_cli.loop import prompts, reply
from rlm_cli.loop.checks import Candidate, Judge
from rlm_cli.loop.policy import Policy
from rlm_cli.loop.result import RunResult, policy_of
from rlm_cli.loop.support import direct_support
from rlm_cli.loop.typed import AnswerSpec, asked, typed_checks
from rlm_cli.models.client import ModelClient
from rlm_cli.models.window import request_tokens
from rlm_cli.output.progress import stream_callback
from rlm_cli.output.trace import request_key


def run_direct(settings: Settings, client: ModelClient, question: str, context: str, *, emit: Emit,
               answer: AnswerSpec | None = None, policy: Policy | None = None) -> RunResult:
    """Direct mode: the question and the whole corpus in one root call (no REPL). A typed
    question (``answer``) whose reply is not a well-typed value is sent back once (the
    ``answer_type`` check): a second call, with the reply and the note.

    Raises:
        BudgetExceededError / ProviderError: from the model call.
    """
    model = settings.model
    assert model is not None
    started = time.monotonic()
    question = asked(question, answer)
    messages: list[dict[str, Any]] = list(prompts.direct_prompt(question, context))
    judge = Judge(typed_checks(answer), emit)
    for iteration in (1, 2):
        emit(event("iteration", 0, iteration=iteration))
        text = _call(client, model, messages, emit)
        found = reply.find_text_final(text)
        literal = found.literal() if found is not None else None
        final = literal if literal is not None else text.strip()
        judged = judge.review(Candidate(question, final, True, "direct", iteration))
        if judged.answer is not None:
            break
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": judged.note}]
    interrupts.final_in_hand()  # a Ctrl-C from now on must not lose it
    policy = policy if policy is not None else policy_of(settings)
    # The question (a session note before it included) is left out of what the answer may rest on.
    support = direct_support(final, question, context, policy.number_floor)
    emit(event("final", 0, status="final", iterations=iteration, answer=final, answer_chars=len(final),
               support=support.to_dict()))
    return RunResult(answer=final, status="final", iterations=iteration, sub_calls=0,
                     elapsed_s=round(time.monotonic() - started, 3), mode="direct", policy=policy.name,
                     support=support)


def _call(client: ModelClient, model: str, messages: list[dict[str, Any]], emit: Emit) -> str:
    """One root call of direct mode; returns its text."""
    completion = client.complete(messages, model=model, role="root", depth=0,
                                 on_delta=stream_callback(emit, 0, model))
    r = completion.record
    emit(event("root_call", 0, model=model, response=completion.text, request_key=request_key(model, messages),
               request_tokens=request_tokens(messages), direct=True, input_tokens=r.input_tokens,
               output_tokens=r.output_tokens, cost_usd=r.cost_usd, latency_s=round(r.latency_s, 3)))
    return completion.text
