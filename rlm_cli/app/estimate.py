"""What questions will cost, known before any of it is spent (``rlm ask --estimate``, ``rlm audit
--estimate``). No model is called: the corpus is loaded (the index cache serves an unchanged one),
the models' input windows and prices come from litellm's map (in the model host: ``models.host``),
and the first request of each question is built as the loop would build it and counted.

Per question: the mode it would run in; the first request's input tokens and its price (those
tokens, and at most the reply cap on top: ``first_cost_usd`` is that worst case); an upper bound
at the limits (``--max-iterations`` root calls plus the last ask for the best answer, each at most
the root model's input budget and reply cap, and ``--max-sub-calls`` sub-calls, each at most the
sub-model's window; no bound without ``--max-sub-calls``, or with sub-RLMs, ``--max-depth`` > 1;
``--max-cost`` caps it); and, when the trajectory folder holds earlier runs of the same root
model, their median cost per question. Unpriced models (most local ones) have token figures and
no prices (``None``). A rerun whose requests are in the response cache costs nothing; the
estimate says so (it cannot know which will be). Prices assume no provider prompt cache (the
worst case; ``totals.prompt_cache`` says whether breakpoints would be sent).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from rlm_cli.answer_types import AnswerType
from rlm_cli.app.plan import model_window, require_model
from rlm_cli.app.question import QuestionId
from rlm_cli.config import Settings
from rlm_cli.corpus import Corpus, check_paths, load_corpus
from rlm_cli.events import Emit, event, is_type
from rlm_cli.loop.fitting import choose_mode, direct_tokens
from rlm_cli.loop.meta import CorpusMeta, corpus_meta, first_messages
from rlm_cli.loop.policy import resolve_policy
from rlm_cli.loop.typed import AnswerSpec, asked
from rlm_cli.models.backend import Backend
from rlm_cli.models.budget import Budget
from rlm_cli.models.client import ModelClient
from rlm_cli.models.usage import Usage
from rlm_cli.models.window import input_budget, reply_tokens, request_tokens
from rlm_cli.output.estimates import EstimateDocument, QuestionEstimate
from rlm_cli.output.progress import index_callback
from rlm_cli.output.trace import traces_dir

#: Trajectories read for the median of earlier runs (the newest).
MAX_TRACES = 400
#: The ``schema`` of an estimate document.
ESTIMATE_SCHEMA = "estimate.v1"
#: What the prices assume about the provider's prompt cache (``models.caching``).
PROMPT_CACHE_NOTE = ("the prices count every input token at the full input price, as if the provider's prompt cache "
                     "served none: the root prefix it serves (a tenth of the price on Claude, half on OpenAI) "
                     "only lowers them")


def _price(tokens_in: int, tokens_out: int, prices: tuple[float, float] | None) -> float | None:
    return None if prices is None else round(tokens_in * prices[0] + tokens_out * prices[1], 6)


def earlier_costs(model: str, directory: Path | None = None) -> list[float]:
    """The cost in USD of each earlier finished question of root model ``model`` in the
    trajectory folder (its newest :data:`MAX_TRACES` files; unpriced runs left out)."""
    folder = directory or traces_dir()
    if not folder.is_dir():
        return []
    files = sorted(folder.glob("*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True)[:MAX_TRACES]
    costs = []
    for path in files:
        try:
            with open(path, "rb") as fh:
                header = json.loads(fh.readline() or b"{}")
                fh.seek(0, 2)
                fh.seek(max(0, fh.tell() - 65_536))
                last = json.loads(fh.read().splitlines()[-1])
        except (OSError, ValueError, IndexError):
            continue
        if not isinstance(header, dict) or not isinstance(last, dict):  # a file anyone may edit holds anything
            continue
        config = header.get("config")
        if not isinstance(config, dict) or config.get("model") != model or not is_type(last, "summary"):
            continue
        usage = last.get("usage")
        cost = usage.get("cost_usd") if isinstance(usage, dict) else None
        if last.get("status") == "final" and isinstance(cost, (int, float)) and math.isfinite(cost):
            costs.append(float(cost))
    return costs


def estimate(settings: Settings, paths: list[str], questions: Sequence[tuple[QuestionId, str, str, str | None]], *,
             backend: Backend | None, emit: Emit, stdin_bytes: bytes | None = None) -> EstimateDocument:
    """The ``estimate.v1`` document of ``questions`` (``(id, text, answer type, root model or
    None)``) over the corpus at ``paths``: ``questions`` (one estimate each, see the module
    docstring), ``totals`` and the corpus. Calls no model.

    Raises:
        UsageError: bad paths or an empty corpus; NoModelError: no model configured.
    """
    check_paths(paths)
    model = require_model(settings)
    usage = Usage()
    client = ModelClient(settings, usage, Budget(settings, usage), backend=backend)
    corpus = load_corpus(paths, settings.corpus, stdin_bytes=stdin_bytes, on_progress=index_callback(emit),
                         on_warning=lambda w: emit(event("notice", 0, message=w, level="warning")))
    try:
        meta = corpus_meta(corpus)
        sub_model = settings.effective_sub_model or model
        sub_window, _ = model_window(client, sub_model, settings.sub_model_window)
        rows: list[QuestionEstimate] = []
        for qid, text, kind, own_model in questions:
            root = own_model or model
            window, source = model_window(client, root, settings.root_model_window)
            s = dataclasses.replace(settings, model=root, root_model_window=window, sub_model_window=sub_window,
                                    policy=resolve_policy(settings.policy, window, source)[0].name)
            rows.append(_one(s, client, corpus, meta, qid, asked(text, AnswerSpec(AnswerType(kind))), sub_model))
    finally:
        if corpus.temporary:
            import shutil

            shutil.rmtree(corpus.bundle_dir, ignore_errors=True)
    return {"schema": ESTIMATE_SCHEMA, "questions": rows,
            "totals": {"questions": len(rows), "first_cost_usd": _total([r["first_cost_usd"] for r in rows]),
                       "bound_cost_usd": _total([r["bound_cost_usd"] for r in rows]),
                       "max_cost": settings.max_cost,
                       "note": ("no model was called; a rerun on an unchanged corpus is served by the response cache "
                                "at no cost" if settings.llm_cache else "no model was called") + f"; {PROMPT_CACHE_NOTE}",
                       "prompt_cache": settings.prompt_cache},
            "corpus": {"files": len(corpus.files), "tokens": corpus.total_tokens, "chunks": len(corpus.chunks)}}


def _total(costs: list[float | None]) -> float | None:
    """The sum of ``costs`` (USD, to 6 places), ``None`` when one of them is unknown."""
    known = [c for c in costs if c is not None]
    return round(sum(known), 6) if len(known) == len(costs) else None


def _one(s: Settings, client: ModelClient, corpus: Corpus, meta: CorpusMeta, qid: QuestionId, question: str,
         sub_model: str) -> QuestionEstimate:
    """One question's estimate (see the module docstring)."""
    root = s.model or ""
    window = s.root_model_window or 0
    mode, reason = choose_mode(s, corpus.total_tokens, window)
    if mode == "direct" and s.mode == "auto" and direct_tokens(corpus, question) > window // 2:
        mode, reason = "rlm", "the corpus with the question needs over half the root model's window"
    cap, prices = reply_tokens(window), client.prices(root)
    sub_cap, sub_prices = reply_tokens(s.sub_model_window or window), client.prices(sub_model)
    if mode == "direct":
        tokens = direct_tokens(corpus, question)
        bound_tokens, bound_cost = 2 * (tokens + cap), _price(2 * tokens, 2 * cap, prices)  # one typed retry
        bound_note = "direct: one call (two when a typed answer is sent back)"
    else:
        tokens = request_tokens(first_messages(s, question, meta))
        calls = s.max_iterations + 1
        budget = input_budget(window)
        bound_tokens = calls * (budget + cap)
        bound_cost = _price(calls * budget, calls * cap, prices)
        bound_note = f"{calls} root calls of at most {budget:,} + {cap:,} tokens"
        if s.max_depth > 1 or s.max_sub_calls is None:
            bound_tokens, bound_cost = 0, None
            bound_note = ("no bound: sub-RLMs (--max-depth > 1) run loops of their own" if s.max_depth > 1 else
                          "no bound: set --max-sub-calls to bound the sub-calls")
        elif s.max_sub_calls:
            sub_in = input_budget(s.sub_model_window or window)
            bound_tokens += s.max_sub_calls * (sub_in + sub_cap)
            sub_cost = _price(s.max_sub_calls * sub_in, s.max_sub_calls * sub_cap, sub_prices)
            bound_cost = None if bound_cost is None or sub_cost is None else round(bound_cost + sub_cost, 6)
            bound_note += f" and {s.max_sub_calls:,} sub-calls of at most {sub_in:,} + {sub_cap:,}"
    if s.max_cost is not None and bound_cost is not None and bound_cost > s.max_cost:
        bound_cost, bound_note = s.max_cost, bound_note + f"; --max-cost caps it at ${s.max_cost:g}"
    costs = earlier_costs(root)
    return {"id": qid, "model": root, "mode": mode, "reason": reason, "policy": s.policy, "first_tokens": tokens,
            "first_cost_usd": _price(tokens, cap, prices), "first_input_cost_usd": _price(tokens, 0, prices),
            "reply_cap": cap, "bound_tokens": bound_tokens or None, "bound_cost_usd": bound_cost,
            "bound": bound_note, "priced": prices is not None,
            "earlier_runs": len(costs), "median_cost_usd": round(statistics.median(costs), 6) if costs else None}
