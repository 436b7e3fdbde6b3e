"""The text of an ``estimate.v1`` document (``rlm ask --estimate``, ``rlm audit --estimate``):
one line per question, then the totals. Plain data in, text out."""

from __future__ import annotations

from typing import TypedDict

from rlm_cli.output.text import plural


class QuestionEstimate(TypedDict):
    """One question's estimate (``app.estimate``): its id (as the questions file gave it), root
    model, mode and why, policy; the first request's tokens and its price (USD, ``None`` when the
    model is not priced) with a reply of ``reply_cap`` tokens; the upper bound (tokens, USD, and
    in words); the costs of earlier finished runs of the model (their count and median)."""

    id: str | int | float | None
    model: str
    mode: str
    reason: str
    policy: str
    first_tokens: int
    first_cost_usd: float | None
    first_input_cost_usd: float | None
    reply_cap: int
    bound_tokens: int | None
    bound_cost_usd: float | None
    bound: str
    priced: bool
    earlier_runs: int
    median_cost_usd: float | None


class EstimateTotals(TypedDict):
    """The totals of an estimate: USD ``None`` when a question's is unknown."""

    questions: int
    first_cost_usd: float | None
    bound_cost_usd: float | None
    max_cost: float | None
    note: str
    prompt_cache: bool


class EstimateCorpus(TypedDict):
    """The corpus an estimate was made over."""

    files: int
    tokens: int
    chunks: int


class EstimateDocument(TypedDict):
    """The ``estimate.v1`` document (``rlm ask --estimate --json``), its keys in their order."""

    schema: str
    questions: list[QuestionEstimate]
    totals: EstimateTotals
    corpus: EstimateCorpus


def _usd(value: float | None) -> str:
    return "unpriced" if value is None else f"${value:.4f}"


def estimate_text(doc: EstimateDocument) -> str:
    """One line per question (id, model, mode, first request's tokens and worst-case price, the
    upper bound, the median of earlier runs), then the totals and what the estimate rests on."""
    lines = []
    for q in doc["questions"]:
        cost = f", {_usd(q['bound_cost_usd'])}" if q["bound_cost_usd"] is not None else ""
        bound = f"at most {q['bound_tokens']:,} tokens{cost} in all" if q["bound_tokens"] else q["bound"]
        earlier = (f"; median of {q['earlier_runs']} earlier run(s) {_usd(q['median_cost_usd'])}"
                   if q["earlier_runs"] else "")
        price = ("(the model is not priced)" if q["first_cost_usd"] is None else
                 f"up to {_usd(q['first_cost_usd'])} with a {q['reply_cap']:,}-token reply")
        lines.append(f"[{q['id']}] {q['model']}, {q['mode']} ({q['policy']}): first request {q['first_tokens']:,} "
                     f"tokens {price}; {bound}{earlier}")
    t = doc["totals"]
    first = "unpriced" if t["first_cost_usd"] is None else f"up to {_usd(t['first_cost_usd'])}"
    lines.append(f"{t['questions']} question(s): first requests {first}; cost bound "
                 + (_usd(t["bound_cost_usd"]) if t["bound_cost_usd"] is not None else "unknown (no price, or no limit)")
                 + (f"; --max-cost ${t['max_cost']:g} for the whole run" if t["max_cost"] is not None else "")
                 + f". {t['note'][0].upper()}{t['note'][1:]}.")
    c = doc["corpus"]
    lines.append(f"corpus: {plural(c['files'], 'file')}, {plural(c['tokens'], 'token')}")
    return "\n".join(lines) + "\n"
