"""The text of an ``estimate.v1`` document (``rlm ask --estimate``, ``rlm audit --estimate``):
one line per question, then the totals. Plain data in, text out."""

from __future__ import annotations

from typing import Any

from rlm_cli.output.text import plural


def _usd(value: float | None) -> str:
    return "unpriced" if value is None else f"${value:.4f}"


def estimate_text(doc: dict[str, Any]) -> str:
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
                 + (f"; --max-cost ${t['max_cost']:g} for the whole run" if t.get("max_cost") is not None else "")
                 + f". {t['note'][0].upper()}{t['note'][1:]}.")
    c = doc["corpus"]
    lines.append(f"corpus: {plural(c['files'], 'file')}, {plural(c['tokens'], 'token')}")
    return "\n".join(lines) + "\n"
