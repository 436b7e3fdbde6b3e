"""Direct mode: the question and the whole corpus in one root call (no REPL)."""

from __future__ import annotations

import time
from typing import Any

from rlm_cli import interrupts
from rlm_cli.config import Settings
from rlm_cli.loop import prompts, reply
from rlm_cli.loop.result import RunResult, policy_of
from rlm_cli.loop.support import direct_support
from rlm_cli.models.client import ModelClient
from rlm_cli.models.window import request_tokens
from rlm_cli.output.progress import stream_callback
from rlm_cli.output.trace import Emit, event, request_key


def run_direct(settings: Settings, client: ModelClient, question: str, context: str, *, emit: Emit) -> RunResult:
    """Direct mode: the question and the whole corpus in one root call (no REPL).

    Raises:
        BudgetExceededError / ProviderError: from the model call.
    """
    model = settings.model
    assert model is not None
    started = time.monotonic()
    messages: list[dict[str, Any]] = list(prompts.direct_prompt(question, context))
    emit(event("iteration", 0, iteration=1))
    completion = client.complete(messages, model=model, role="root", depth=0,
                                 on_delta=stream_callback(emit, 0, model))
    r = completion.record
    emit(event("root_call", 0, model=model, response=completion.text, request_key=request_key(model, messages),
               request_tokens=request_tokens(messages), direct=True, input_tokens=r.input_tokens,
               output_tokens=r.output_tokens, cost_usd=r.cost_usd, latency_s=round(r.latency_s, 3)))
    found = reply.find_text_final(completion.text)
    literal = found.literal() if found is not None else None
    answer = literal if literal is not None else completion.text.strip()
    interrupts.final_in_hand()  # a Ctrl-C from now on must not lose it
    policy = policy_of(settings)
    # The question (a session note before it included) is left out of what the answer may rest on.
    support = direct_support(answer, question, context, policy.number_floor)
    emit(event("final", 0, status="final", iterations=1, answer=answer, answer_chars=len(answer),
               support=support.to_dict()))
    return RunResult(answer=answer, status="final", iterations=1, sub_calls=0,
                     elapsed_s=round(time.monotonic() - started, 3), mode="direct", policy=policy.name,
                     support=support)
