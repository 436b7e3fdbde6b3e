"""Text of ``rlm eval``'s results: the JSON document and the Markdown report (pure functions)."""

from __future__ import annotations

from typing import Any

from rlm_cli.evaluation.harness import GroupSummary, QuestionResult, summarize_checks, summarize_support
from rlm_cli.output.text import usd

#: Version of the ``rlm eval --json`` document.
EVAL_SCHEMA = 1


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def _cost(x: float | None) -> str:
    return "unknown" if x is None else usd(x)


def summary_table(groups: list[GroupSummary]) -> str:
    """A Markdown table: one row per family and mode ("partial": the mean partial score, OOLONG's
    credit for near answers, ``scoring.partial``; "with sub-calls": questions whose run made at least
    one sub-call; "root calls" and "sub-calls": totals; "cached calls": model calls answered from the LLM cache, which spend no tokens;
    ``--no-llm-cache`` makes every call anew)."""
    rows = ["| family | mode | correct | accuracy | partial | median iterations | root calls | with sub-calls "
            "| sub-calls | tokens | cached calls | cost | median s | not run |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for g in groups:
        med_it = "n/a" if g.median_iterations is None else f"{g.median_iterations:g}"
        med_s = "n/a" if g.median_s is None else f"{g.median_s:.1f}"
        not_run = f"{g.does_not_fit} does not fit" if g.does_not_fit else ""
        part = "n/a" if g.partial is None else f"{g.partial:.2f}"
        rows.append(f"| {g.family} | {g.mode} | {g.correct}/{g.ran} | {_pct(g.accuracy)} | {part} | {med_it} "
                    f"| {g.root_calls:,} | {g.with_sub_calls}/{g.ran} | {g.sub_calls:,} | {g.tokens:,} | {g.cached_calls:,} "
                    f"| {_cost(g.cost_usd)} | {med_s} | {not_run} |")
    return "\n".join(rows)


def checks_table(results: list[QuestionResult]) -> str:
    """A Markdown table of the answer checks that fired (``harness.summarize_checks``), or a line
    saying none did."""
    rows = summarize_checks(results)
    if not rows:
        return "No answer check fired."
    out = ["| check | fired | questions | answer changed | right -> wrong | wrong -> right |",
           "|---|---|---|---|---|---|"]
    out += [f"| {c.check} | {c.fired} | {c.questions} | {c.changed} | {c.right_to_wrong} | {c.wrong_to_right} |"
            for c in rows]
    return "\n".join(out)


def support_table(results: list[QuestionResult]) -> str:
    """A Markdown table of the answers' support verdicts (``harness.summarize_support``): per
    verdict how many answers got it and how many were right, then the answers rlm stands behind
    (observed and computed) against all: their accuracy and the coverage."""
    rows = summarize_support(results)
    if not rows:
        return "No question ran."
    out = ["| support | answers | correct | accuracy |", "|---|---|---|---|"]
    out += [f"| {s.verdict} | {s.answers} | {s.correct} | {_pct(s.correct / s.answers if s.answers else None)} |"
            for s in rows]
    stood = [s for s in rows if s.verdict in ("observed", "computed")]
    answers, correct, total = sum(s.answers for s in stood), sum(s.correct for s in stood), sum(s.answers for s in rows)
    if total:
        out += ["", f"Observed or computed: {correct}/{answers} right ({_pct(correct / answers if answers else None)}), "
                    f"coverage {answers}/{total} ({_pct(answers / total)}); all answers: "
                    f"{sum(s.correct for s in rows)}/{total} right."]
    return "\n".join(out)


def _cell(text: Any, n: int = 80) -> str:
    s = " ".join(str(text).split())
    s = s if len(s) <= n else s[: n - 1] + "…"
    return s.replace("|", "\\|")


def markdown(meta: dict[str, Any], groups: list[GroupSummary], results: list[QuestionResult]) -> str:
    """The whole report: what was run (model, corpus, seed, command), the summary table, the
    failure kinds by status, and one row per question with its trajectory id."""
    lines = ["# rlm eval report", ""]
    for key in ("date", "model", "sub_model", "corpus", "split", "seed", "families", "modes", "limit", "records",
                "policy", "sandbox", "command"):
        if meta.get(key) not in (None, ""):
            value = meta[key]
            if isinstance(value, dict):
                value = ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in value.items())
            elif isinstance(value, list):
                value = ", ".join(map(str, value))
            lines.append(f"- **{key.replace('_', ' ')}**: `{value}`" if key == "command" else
                         f"- **{key.replace('_', ' ')}**: {value}")
    lines += ["", "## Summary", "", summary_table(groups), "", "## Support", "", support_table(results), "",
              "## Answer checks", "", checks_table(results), "",
              "## Questions", "",
              "| id | kind | mode | status | support | correct | partial | gold | answer | iterations | root calls "
              "| sub-calls | s | trace |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        mark = "n/a" if r.correct is None else ("yes" if r.correct else "**no**")
        lines.append(f"| {r.task.id} | {r.task.kind} | {r.mode} | {r.status} | {r.support or 'error'} | {mark} | "
                     f"{r.partial:.2f} | {_cell(r.task.gold, 40)} | {_cell(r.answer or r.error or '')} | {r.iterations} "
                     f"| {r.root_calls} | {r.sub_calls} | {r.elapsed_s:.1f} | {r.run_id or ''} |")
    lines += ["", "A failure is one `rlm trace show ID` away."]
    return "\n".join(lines) + "\n"


def document(meta: dict[str, Any], groups: list[GroupSummary], results: list[QuestionResult]) -> dict[str, Any]:
    """The ``--json`` document: ``schema``, ``meta``, ``summary`` (per family and mode),
    ``support`` (per support verdict: ``harness.SupportSummary``), ``checks`` (per answer check
    that fired: ``harness.CheckSummary``) and ``results`` (per question, each with its support
    verdict and the checks that fired on it)."""
    return {"schema": EVAL_SCHEMA, "status": "done", "meta": meta, "summary": [g.to_dict() for g in groups],
            "support": [s.to_dict() for s in summarize_support(results)],
            "checks": [c.to_dict() for c in summarize_checks(results)], "results": [r.to_dict() for r in results]}
