"""The ``semantic`` family: the generated messages, their gold answers recounted from the generator's
labels, that no single word gives a category away, the splits, and the scorers with OOLONG's
partial credit."""

from __future__ import annotations

import json
import random
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from rlm_cli.evaluation import scoring, semantic
from rlm_cli.evaluation.semantic import CATEGORIES, ID_PATTERN, generate_messages, message
from rlm_cli.evaluation.task import CorpusText
from rlm_cli.evaluation.tasks import generate
from tests.support.cli import model_flags, run_rlm
from tests.support.fake_llm import FakeLLM, last_user, question_message, repl

CORPUS = CorpusText(["readme.txt"], lambda p: "hello\n", lambda: "hello\n")


def _lines(task_text: str) -> dict[str, str]:
    return dict(re.findall(r"^(M\d{4}): (.*)$", task_text, re.M))


def test_gold_answers_follow_the_generator_s_labels_and_the_file_holds_every_message() -> None:
    tasks = generate(["semantic"], CORPUS, limit=6, seed=2, records=500)["semantic"]
    assert [t.kind for t in tasks] == ["count", "most", "ids"] * 2
    rng = random.Random("2:semantic")  # the family's stream on the dev split
    for t in tasks:
        items = generate_messages(rng, 50)
        if t.kind == "count":
            rng.choice(sorted(CATEGORIES))  # the category asked about, drawn after the messages
        assert t.edit is not None
        ((path, text),) = t.edit.add
        assert path == f"rlm-eval/{t.id.replace('semantic', 'messages')}.txt" and f"`{path}`" in t.question
        assert _lines(text) == {i: m for i, _, m in items}  # one line per message, nothing else
        counts = Counter(c for _, c, _ in items)
        if t.kind == "count":
            asked = next(c for c, (plural, _) in CATEGORIES.items() if f" {plural}?" in t.question)
            assert t.gold == counts[asked]
        elif t.kind == "most":
            (top, n1), (_, n2) = counts.most_common(2)
            assert t.gold == top and n1 - n2 >= 2
        else:
            rare = min(counts, key=lambda c: counts[c])
            assert t.gold == sorted(i for i, c, _ in items if c == rare)
            assert 2 <= len(t.gold) < min(n for c, n in counts.items() if c != rare)


def test_no_single_word_gives_a_category_away() -> None:
    """For every category, the best rule "the message holds word w" (w any word, '?' or '!') has an
    F1 below 0.62: about what answering "yes" for every message scores for the most common
    category (2 x 0.45 / 1.45), far from the 0.9 a keyword that marks the category would give."""
    rng = random.Random(0)
    items = [m for _ in range(40) for m in generate_messages(rng, 100)]
    size = Counter(c for _, c, _ in items)
    for cat in CATEGORIES:
        hits: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for _, c, text in items:
            for w in set(re.findall(r"[a-z']+|[?!]", text.lower())):
                hits[w][0] += 1
                hits[w][1] += c == cat
        best = max((2 * h / (n + size[cat]), w) for w, (n, h) in hits.items())
        assert best[0] < 0.62, (cat, best)


def test_noise_adds_an_aside_of_another_category() -> None:
    plain = message(random.Random(5), "complaint", False)
    noisy = message(random.Random(5), "complaint", True)
    assert len(noisy) > len(plain)
    rng = random.Random(1)
    assert sum(len(message(rng, "inquiry", True)) for _ in range(200)) > sum(
        len(message(rng, "inquiry", False)) for _ in range(200))


def test_the_test_split_words_it_otherwise_with_other_messages() -> None:
    dev = generate(["semantic"], CORPUS, limit=6, seed=1, records=300)["semantic"]
    test = generate(["semantic"], CORPUS, limit=6, seed=1, records=300, split="test")["semantic"]
    assert not {t.question for t in dev} & {t.question for t in test}
    assert all("{" not in t.question and "complaint (the writer" in t.question for t in test)
    dev_ids = {i for t in dev for i in _lines(t.edit.add[0][1])}  # type: ignore[union-attr]
    test_ids = {i for t in test for i in _lines(t.edit.add[0][1])}  # type: ignore[union-attr]
    assert len(dev_ids & test_ids) < len(dev_ids) // 4  # other random streams, other messages


CATS = {c: [c, plural] for c, (plural, _) in CATEGORIES.items()}


@pytest.mark.parametrize(("answer", "right"), [
    ("complaint", True), ("Complaints are the most common kind.", True),
    ("inquiries 7, complaints 12, suggestions 3. So: complaints.", True),
    ("complaint or inquiry", False), ("compliments", False), ("I could not tell.", False),
])
def test_category_scorer_takes_either_form(answer: str, right: bool) -> None:
    assert scoring.score("category", answer, "complaint", categories=CATS) is right


def test_partial_credit_is_oolong_s() -> None:
    """OOLONG (Bertsch et al., 2025): a number scores 0.75 ** |gold - answer|; the ids of the rare
    category score their F1 (as OOLONG-Pairs in the RLM paper); anything else 1 or 0."""
    assert scoring.partial("number", "There are 12 complaints.", 12) == 1.0
    assert scoring.partial("number", "14", 12) == pytest.approx(0.5625)
    assert scoring.partial("number", "Counted 40 lines; 11 are complaints.", 12) == pytest.approx(0.75)
    assert scoring.partial("number", "many", 12) == 0.0
    gold = ["M1001", "M2002", "M3003"]
    assert scoring.score("ids", "M3003, M1001 and M2002", gold, id_pattern=ID_PATTERN)
    assert not scoring.score("ids", "M3003, M1001", gold, id_pattern=ID_PATTERN)
    assert scoring.partial("ids", "M3003, M1001", gold, id_pattern=ID_PATTERN) == pytest.approx(0.8)
    assert scoring.partial("ids", "M3003, M1001, M2002, M9999", gold, id_pattern=ID_PATTERN) == pytest.approx(6 / 7)
    assert scoring.partial("ids", "none", gold, id_pattern=ID_PATTERN) == 0.0
    assert scoring.partial("category", "complaints", "complaint", categories=CATS) == 1.0
    assert scoring.partial("category", "inquiries", "complaint", categories=CATS) == 0.0


# -- through the command: one llm_map line answers in one root call ----------------------------------

def _frame_patterns() -> list[tuple[re.Pattern[str], str]]:
    """Each frame of the generator as a pattern (any product), with its category: an independent
    way to label a message right, by the sentence it was built from."""
    out = []
    for cat, frames in semantic._FRAMES.items():
        for frame in frames:
            body = re.escape(frame[1:]).replace(re.escape("{t}"), ".+?")
            out.append((re.compile(f"[{frame[0].upper()}{frame[0].lower()}]{body}"), cat))
    return out


FRAMES = _frame_patterns()


def _label(text: str) -> str:
    (cat,) = {c for p, c in FRAMES if p.search(text)}
    return cat


def _sub_model(wrong: int = 0) -> Any:
    """A sub-model that labels every message of a piece right, in its own words (the first
    ``wrong`` inquiries it sees, as complaints)."""
    left = [wrong]

    def answer(req: dict[str, Any]) -> str:
        items = re.findall(r"^\[(\d+)\] M\d{4}: (.*)$", last_user(req), re.M)
        out = []
        for k, text in items:
            cat = _label(text)
            if cat == "inquiry" and left[0] > 0:
                left[0] -= 1
                cat = "complaint"
            out.append(f"{k}: I would say **{cat.title()}**.")
        return "\n".join(out)
    return answer


def _root(req: dict[str, Any]) -> str:
    """One block per question: llm_map over the file's lines, then count, rank or list in code."""
    q = question_message(req)
    path = re.search(r"`(rlm-eval/messages-\d+\.txt)`", q).group(1)  # type: ignore[union-attr]
    head = (f"lines = context[{path!r}].splitlines()\n"
            "kinds = llm_map(lines, 'What kind of message is this?', "
            "choices=['complaint', 'compliment', 'inquiry', 'suggestion'])\n")
    plural = re.search(r"are (\w+)\?", q)
    if "How many" in q and plural:
        cat = next(c for c, (p, _) in CATEGORIES.items() if p == plural.group(1))
        return repl(head + f"FINAL(str(sum(1 for k in kinds if k == {cat!r})))")
    if plural:
        cat = next(c for c, (p, _) in CATEGORIES.items() if p == plural.group(1))
        return repl(head + f"FINAL(', '.join(l.split(':')[0] for l, k in zip(lines, kinds) if k == {cat!r}))")
    return repl(head + "from collections import Counter\nFINAL(Counter(kinds).most_common(1)[0][0])")


def _eval(llm: FakeLLM, tmp_path: Path, limit: int) -> tuple[Any, dict[str, Any]]:
    corpus = tmp_path / "corpus"
    corpus.mkdir(exist_ok=True)
    (corpus / "readme.txt").write_text("Support inbox export.\n")
    res = run_rlm("eval", str(corpus), "--families", "semantic", "--limit", str(limit), "--records", "300", "--json",
                  "--no-llm-cache", "--report", str(tmp_path / "report.md"), *model_flags(llm))
    return res, json.loads(res.stdout)


def test_one_llm_map_line_answers_each_kind_in_one_root_call(tmp_path: Path, llm: FakeLLM) -> None:
    llm.default("root", _root)
    llm.default("sub", _sub_model())
    res, doc = _eval(llm, tmp_path, 3)
    assert res.code == 0, res.stderr
    (group,) = doc["summary"]
    assert (group["correct"], group["ran"], group["partial"], group["with_sub_calls"]) == (3, 3, 1.0, 3)
    assert group["root_calls"] == 3  # the fewest there can be: one per question
    for r in doc["results"]:
        assert (r["correct"], r["partial"], r["iterations"], r["root_calls"]) == (True, 1.0, 1, 1), r
        assert r["sub_calls"] == 30 // 16 + 1  # 30 messages, 16 a sub-call (a 32k window: 32,768 // 2,048)
    assert "| semantic | rlm | 3/3 | 100% | 1.00 | 1 | 3 | 3/3 |" in (tmp_path / "report.md").read_text()


def test_two_mislabelled_messages_cost_the_exact_count_and_leave_partial_credit(tmp_path: Path,
                                                                              llm: FakeLLM) -> None:
    llm.default("root", _root)
    llm.default("sub", _sub_model(wrong=2))
    res, doc = _eval(llm, tmp_path, 1)
    assert res.code == 0, res.stderr
    (r,) = doc["results"]
    assert r["kind"] == "count" and "are inquiries?" in r["question"]
    assert int(r["answer"]) == r["gold"] - 2
    assert r["correct"] is False and r["partial"] == pytest.approx(0.75 ** 2)
