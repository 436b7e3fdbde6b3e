"""``rlm eval``: generators checked against the corpus by independent routes, scorers, and the
command end to end against the scripted server (a right model scores 100%, a wrong one 0%, a
timed-out one is counted wrong)."""

from __future__ import annotations

import dis
import json
import random
import re
import shutil
import sysconfig
import types
from collections import Counter
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from rlm_cli.config import CorpusOptions, prepare_offline_env
from rlm_cli.evaluation import scoring
from rlm_cli.evaluation.harness import corpus_text
from rlm_cli.evaluation.tasks import generate, plant
from tests.support.cli import model_flags, run_rlm
from tests.support.fake_llm import FakeLLM, Reply, repl

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _load(paths: list[str]) -> Any:
    prepare_offline_env()
    from rlm_cli.corpus import load_corpus

    return load_corpus(paths, CorpusOptions(use_cache=False))


@pytest.fixture(scope="module")
def py_corpus(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A copy of three stdlib packages: enough Python for every code question kind."""
    root = tmp_path_factory.mktemp("pycorpus")
    for pkg in ("json", "email", "logging", "http"):
        shutil.copytree(STDLIB / pkg, root / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return _load([str(root)])


# -- generators against independent routes ---------------------------------------------------------

def _param_text(src: str, name: str) -> str:
    """The text between the parentheses of ``def name(`` (balanced), found without ``ast``."""
    m = re.search(r"def\s+" + re.escape(name) + r"\s*\(", src)
    assert m, name
    depth, i = 1, m.end()
    while depth:
        depth += {"(": 1, ")": -1}.get(src[i], 0)
        i += 1
    return src[m.end():i - 1]


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [p.strip() for p in [*parts, cur] if p.strip()]


def _strip_comments(text: str) -> str:
    return re.sub(r"#[^\n]*", "", text)


def _callers_by_bytecode(src: str, name: str) -> int:
    """Functions (and methods) whose compiled code, with its comprehensions and lambdas, loads
    global ``name``: an independent count of who calls it."""
    def loads(code: types.CodeType) -> bool:
        if any(ins.opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_FAST", "LOAD_DEREF") and ins.argval == name for ins in dis.get_instructions(code)):
            return True
        return any(isinstance(c, types.CodeType) and c.co_name.startswith("<") and loads(c) for c in code.co_consts)

    def functions(code: types.CodeType) -> list[types.CodeType]:
        out = []
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                if not c.co_name.startswith("<"):
                    out.append(c)
                out += functions(c)
        return out

    return sum(1 for f in functions(compile(src, "<src>", "exec")) if loads(f))


def test_code_gold_answers_match_independent_routes(py_corpus: Any) -> None:
    ct = corpus_text(py_corpus)
    tasks = generate(["code"], ct, limit=24, seed=3, records=100)["code"]
    kinds = Counter(t.kind for t in tasks)
    assert set(kinds) == {"defines", "default", "bases", "calls"}, kinds
    for t in tasks:
        src = ct.text(t.extra["file"])
        if t.kind == "defines":
            name = re.search(r"`(\w+)`", t.question).group(1)  # type: ignore[union-attr]
            owners = [p for p in ct.paths if re.search(r"^\s*(async\s+)?def\s+" + name + r"\s*\(", ct.text(p), re.M)]
            assert owners == [t.gold], (t.question, owners)
        elif t.kind == "default":
            func = re.search(r"(?:function|method) `([\w.]+)`", t.question).group(1).rsplit(".", 1)[-1]  # type: ignore[union-attr]
            param = re.search(r"parameter `(\w+)`", t.question).group(1)  # type: ignore[union-attr]
            params = {p.split("=", 1)[0].split(":")[0].strip(): p.split("=", 1)[1].strip()
                      for p in _split_top(_strip_comments(_param_text(src, func))) if "=" in p}
            written = params[param]
            try:
                assert eval(written) == eval(t.gold)  # literals: the same value, however quoted
            except (NameError, AttributeError, SyntaxError):
                assert written.replace(" ", "") == t.gold.replace(" ", "")
        elif t.kind == "bases":
            cls = re.search(r"class `(\w+)`", t.question).group(1)  # type: ignore[union-attr]
            m = re.search(r"^class\s+" + cls + r"\s*\(([^)]*)\)\s*:", src, re.M)
            assert m, cls
            bases = [b for b in _split_top(_strip_comments(m.group(1))) if "=" not in b]
            assert [b.replace(" ", "") for b in bases] == t.gold
        else:
            name = re.search(r"call `(\w+)`", t.question).group(1)  # type: ignore[union-attr]
            assert _callers_by_bytecode(src, name) == t.gold, t.question


def test_needle_is_planted_once_in_memory_and_files_are_untouched(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(30):
        (root / f"f{i:02d}.txt").write_text("".join(f"line {j} of file {i}\n" for j in range(200)))
    before = {p.name: p.read_bytes() for p in root.iterdir()}
    corpus = _load([str(root)])
    tasks = generate(["needle"], corpus_text(corpus), limit=3, seed=9, records=100)["needle"]
    assert [t.kind for t in tasks] == ["single", "single", "multi"]
    from rlm_cli.corpus.store import derive_corpus

    for t in tasks:
        assert t.edit is not None
        derived = derive_corpus(corpus, replace=t.edit.replace, add=list(t.edit.add))
        keys = t.gold if isinstance(t.gold, list) else [t.gold]
        for key in keys:
            hits = [f.path for f in derived.files if key in derived.context[f.start:f.end]]
            assert len(hits) == 1 and derived.context.count(key) == 1
            assert key not in corpus.context
        # the model-visible layout is consistent: every file's text sits behind its header
        for f in derived.files:
            assert derived.context[:f.start].endswith(f"==> {f.path} <==\n")
        shutil.rmtree(derived.bundle_dir)
    assert {p.name: p.read_bytes() for p in root.iterdir()} == before


def test_plant_puts_the_sentence_on_a_line_of_its_own() -> None:
    text = "a = 1\nb = 2\nc = 3\n"
    assert plant(text, "KEY", 0.5, "x.py") == "a = 1\n# KEY\nb = 2\nc = 3\n"
    assert plant(text, "KEY", 0.0, "x.txt") == "KEY\na = 1\nb = 2\nc = 3\n"


def test_aggregate_and_pairs_gold_recounted_from_the_generated_text(tmp_path: Path) -> None:
    (tmp_path / "readme.txt").write_text("hello\n")
    corpus = _load([str(tmp_path / "readme.txt")])
    got = generate(["aggregate", "pairs"], corpus_text(corpus), limit=8, seed=5, records=400)
    agg = got["aggregate"]
    assert {t.kind for t in agg} == {"count", "sum", "most", "least"}
    assert agg[0].edit is not None
    (path, text), = agg[0].edit.add
    rows = [dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line)) for line in text.splitlines()]
    assert len(rows) == 400
    for t in agg:
        q = t.question
        if t.kind == "count":
            svc, lvl = re.search(r"service=(\w+) and level=(\w+)", q).groups()  # type: ignore[union-attr]
            assert t.gold == sum(r["service"] == svc and r["level"] == lvl for r in rows)
        elif t.kind == "sum":
            svc = re.search(r"service=(\w+)\?", q).group(1)  # type: ignore[union-attr]
            assert t.gold == sum(int(r["latency_ms"]) for r in rows if r["service"] == svc)
        else:
            what, field, value = re.search(r"which (\w+) has the \w+ lines with (\w+)=(\w+)", q).groups()  # type: ignore[union-attr]
            c = Counter(r[what] for r in rows if r[field] == value)
            ranked = c.most_common() if t.kind == "most" else sorted(c.items(), key=lambda kv: kv[1])
            if t.kind == "least" and what == "service":  # a service with no such line counts 0
                ranked = sorted(((s, c.get(s, 0)) for s in t.extra["labels"]), key=lambda kv: kv[1])
            assert ranked[0][0] == t.gold and ranked[0][1] != ranked[1][1]
    for t in got["pairs"]:
        assert t.edit is not None
        (_, text), = t.edit.add
        tickets = [re.match(r"ticket (\S+) customer=(\S+) product=(\S+)", line).groups()  # type: ignore[union-attr]
                   for line in text.splitlines()]
        pairs = sorted(sorted([a[0], b[0]]) for a, b in combinations(tickets, 2) if a[1:] == b[1:])
        assert (pairs if t.kind == "list" else len(pairs)) == t.gold
        assert pairs


def test_same_seed_same_questions(py_corpus: Any) -> None:
    ct = corpus_text(py_corpus)
    a = generate(["needle", "code"], ct, limit=4, seed=11, records=100)
    b = generate(["code", "needle"], ct, limit=4, seed=11, records=100)
    c = generate(["needle", "code"], ct, limit=4, seed=12, records=100)
    assert [t.question for t in a["code"]] == [t.question for t in b["code"]]
    assert [t.question for t in a["needle"]] == [t.question for t in b["needle"]]
    assert [t.question for t in a["code"]] != [t.question for t in c["code"]]


# -- scorers ----------------------------------------------------------------------------------------

def test_scorers_are_lenient_to_phrasing_and_exact_on_the_fact() -> None:
    paths = ["urllib/parse.py", "distutils/command/upload.py", "email/utils.py", "json/__init__.py"]
    assert scoring.score("path", "It is defined in `urllib/parse.py` at line 374.", "urllib/parse.py", paths=paths)
    assert scoring.score("path", "/usr/lib/python3.11/urllib/parse.py", "urllib/parse.py", paths=paths)
    assert scoring.score("path", "parse.py", "urllib/parse.py", paths=paths)
    assert not scoring.score("path", "distutils/command/upload.py (it imports it from urllib/parse.py)",
                             "urllib/parse.py", paths=paths)
    assert not scoring.score("path", "in __init__.py", "email/__init__.py", paths=paths + ["email/__init__.py"])
    assert scoring.score("literal", 'The default is "utf-8".', "'utf-8'")
    assert scoring.score("literal", "default: utf-8", "'utf-8'")
    assert not scoring.score("literal", "default: utf-16", "'utf-8'")
    assert scoring.score("literal", "It defaults to None.", "None")
    assert not scoring.score("literal", "It defaults to 0.", "None")
    assert scoring.score("literal", "the default is an empty string", "''")
    assert scoring.score("names", "It inherits from io.TextIOBase and Mixin", ["io.TextIOBase", "Mixin"])
    assert not scoring.score("names", "The bases of `Codec` are `_Feature` and `TestFrozen_1`.", ["codecs.Codec"],
                             ignore=["Codec"])
    assert scoring.score("names", "`Codec` in `encodings/cp932.py` extends `codecs.Codec`.", ["codecs.Codec"],
                         ignore=["Codec"])
    assert not scoring.score("names", "It inherits from Mixin", ["io.TextIOBase", "Mixin"])
    # Naming the class itself is not naming its base of the same last name.
    assert not scoring.score("names", "The class `Codec` is defined on 6 lines.", ["codecs.Codec"], ignore=["Codec"])
    assert scoring.score("number", "There are 4 functions that call it.", 4)
    assert scoring.score("number", "Counting them in `a1.py` and line 12 ... so the answer is four.", 4)
    assert scoring.score("number", "94,376", 94376)
    assert not scoring.score("number", "There are 5 such lines.", 4)
    labels = ["auth", "billing", "search"]
    assert scoring.score("label", "search", "search", labels=labels)
    assert scoring.score("label", "auth has 3, billing 5 and search 9. So search has the most.", "search",
                         labels=labels)
    assert not scoring.score("label", "auth or search", "search", labels=labels)
    gold = [["T1001", "T2002"], ["T3003", "T4004"]]
    assert scoring.score("pairs", "T2002 & T1001; (T4004, T3003)", gold, id_pattern=r"\bT\d{4,}\b")
    assert not scoring.score("pairs", "T1001 & T2002", gold, id_pattern=r"\bT\d{4,}\b")
    assert not scoring.score("pairs", "T1001 & T3003, T2002 & T4004", gold, id_pattern=r"\bT\d{4,}\b")
    assert scoring.score("key", "The codes: ABCD-1234 and wxyz-9876", ["ABCD-1234", "WXYZ-9876"])
    assert not scoring.score("key", "ABCD-1234", ["ABCD-1234", "WXYZ-9876"])


# -- the command end to end -------------------------------------------------------------------------

def _haystack(root: Path) -> Path:
    rng = random.Random(4)
    words = "alpha beta gamma delta request served cache miss user token".split()
    root.mkdir(parents=True)
    for i in range(12):
        (root / f"part{i:02d}.log").write_text("".join(" ".join(rng.choices(words, k=10)) + "\n"
                                                       for _ in range(400)))
    return root


def _question(req: dict[str, Any]) -> str:
    first = next(str(m["content"]) for m in req["messages"] if m["role"] == "user" and "Question: " in str(m["content"]))
    return re.search(r"Question: (.*?)\n", first, re.S).group(1)  # type: ignore[union-attr]


def _right(req: dict[str, Any]) -> str:
    """Solves needle questions for real: code in the REPL that finds each project's code."""
    q = _question(req)
    m = re.search(r"codes? of the (.+?) projects?\?", q)
    assert m, q
    names = re.split(r", | and ", m.group(1))
    return repl(f"import re\nnames = {names!r}\n"
                "found = {n: re.search('secret code of the ' + n + r' project is ([A-Z0-9-]+)', context).group(1)"
                " for n in names}\nFINAL(', '.join(f'{n}: {c}' for n, c in found.items()))")


def _run_eval(llm: FakeLLM, corpus: Path, tmp_path: Path, *extra: str) -> Any:
    res = run_rlm("eval", str(corpus), "--families", "needle", "--limit", "3", "--json", "--report",
                  str(tmp_path / "report.md"), *model_flags(llm), *extra)
    return res, (json.loads(res.stdout) if res.stdout.strip() else None)


def test_eval_right_model_scores_100_wrong_model_0(tmp_path: Path, llm: FakeLLM) -> None:
    corpus = _haystack(tmp_path / "logs")
    llm.default("root", _right)
    res, doc = _run_eval(llm, corpus, tmp_path)
    assert res.code == 0, res.stderr
    (group,) = doc["summary"]
    assert (group["family"], group["mode"], group["correct"], group["ran"]) == ("needle", "rlm", 3, 3)
    assert group["accuracy"] == 1.0
    assert all(r["correct"] and r["status"] == "final" and r["trace"] for r in doc["results"])
    assert all(Path(r["trace"]).exists() for r in doc["results"])
    report = (tmp_path / "report.md").read_text()
    assert "| needle | rlm | 3/3 | 100% |" in report
    assert doc["results"][0]["run_id"] in report
    assert group["cached_calls"] == 0 and group["tokens"] > 0
    # the answers' support verdicts (issue 37): code computed every one, and all were right
    assert doc["support"] == [{"verdict": "computed", "answers": 3, "correct": 3}]
    assert "| computed | 3 | 3 | 100% |" in report and "coverage 3/3" in report
    # Again with the LLM cache (the first question only: the same seed gives the same first task):
    # the same replies, replayed; the cached calls are counted, not as tokens.
    res, doc = _run_eval(llm, corpus, tmp_path, "--limit", "1")
    (again,) = doc["summary"]
    assert again["correct"] == again["ran"] == 1 and again["cached_calls"] >= 1 and again["tokens"] == 0
    assert all(r["cached_calls"] >= 1 for r in doc["results"])

    # The same questions (same seed; the first two) answered wrongly: 0%, and every wrong one is listed.
    llm.default("root", repl("n = len(context)\nFINAL('The secret code is ABCD-1234.')"))
    res, doc = _run_eval(llm, corpus, tmp_path, "--no-llm-cache", "--limit", "2")
    assert res.code == 0, res.stderr
    (group,) = doc["summary"]
    assert (group["correct"], group["ran"], group["accuracy"]) == (0, 2, 0.0)
    assert all(r["status"] == "final" and r["correct"] is False for r in doc["results"])
    # a code nothing showed, written out at once (the checks objected and were overruled): guesses
    assert doc["support"] == [{"verdict": "unsupported", "answers": 2, "correct": 0}]
    # the corpus on disk was never changed
    assert not any("secret code" in p.read_text() for p in corpus.iterdir())


def test_eval_timed_out_model_is_counted_wrong(tmp_path: Path, llm: FakeLLM) -> None:
    corpus = _haystack(tmp_path / "logs")
    llm.default("root", Reply(text=_right, delay_s=3.0))
    res, doc = _run_eval(llm, corpus, tmp_path, "--request-timeout", "0.5", "--retries", "0", "--limit", "1")
    assert res.code == 0, res.stderr
    (r,) = doc["results"]
    assert r["correct"] is False and r["status"] == "error" and "tim" in r["error"].lower()
    assert doc["summary"][0]["accuracy"] == 0.0


def test_eval_direct_mode_reports_does_not_fit(tmp_path: Path, llm: FakeLLM) -> None:
    corpus = _haystack(tmp_path / "logs")  # ~50k tokens: over a 16k window
    llm.default("root", _right)
    res = run_rlm("eval", str(corpus), "--families", "needle", "--limit", "2", "--modes", "rlm,direct",
                  "--root-model-window", "16384", *model_flags(llm))
    assert res.code == 0, res.stderr
    assert "| needle | rlm | 2/2 | 100% |" in res.stdout
    assert re.search(r"\| needle \| direct \| 0/0 \| n/a \|.*\| 2 does not fit \|", res.stdout)
    assert "does_not_fit" in res.stderr


def test_eval_usage_errors(tmp_path: Path, llm: FakeLLM) -> None:
    corpus = _haystack(tmp_path / "logs")
    res = run_rlm("eval", str(corpus), "--families", "needle,poetry", *model_flags(llm))
    assert res.code == 2 and "unknown family 'poetry'" in res.stderr and res.stdout == ""
    res = run_rlm("eval", str(corpus), "--modes", "fast", "--json", *model_flags(llm))
    assert res.code == 2 and json.loads(res.stdout)["status"] == "error"
    res = run_rlm("eval", str(corpus), "--families", "code", *model_flags(llm))
    assert res.code == 2 and "no question could be generated" in res.stderr
    assert "no parsable Python files" in res.stderr


# -- splits and answer-check statistics --------------------------------------------------------------


def test_the_dev_split_asks_what_the_families_always_asked_and_test_words_it_otherwise(py_corpus: Any) -> None:
    from rlm_cli.evaluation.phrasing import TEMPLATES

    ct = corpus_text(py_corpus)
    dev = generate(["needle", "code", "aggregate", "pairs"], ct, limit=8, seed=1, records=200)
    assert dev == generate(["needle", "code", "aggregate", "pairs"], ct, limit=8, seed=1, records=200, split="dev")
    assert any(t.question.startswith("Which file defines the function `") for t in dev["code"])
    test = generate(["needle", "code", "aggregate", "pairs"], ct, limit=8, seed=1, records=200, split="test")
    dev_q = {t.question for ts in dev.values() for t in ts}
    for fam, tasks in test.items():
        assert tasks, fam
        for t in tasks:
            assert t.question not in dev_q and "{" not in t.question  # other wording, every field filled
            assert not any(t.question == tpl for tpl in TEMPLATES[(fam, t.kind)]["dev"])
    # Other seeds: other needles, files and records.
    assert {t.gold if isinstance(t.gold, str) else tuple(t.gold) for t in test["needle"]}.isdisjoint(
        {t.gold if isinstance(t.gold, str) else tuple(t.gold) for t in dev["needle"]})
    # The test needles are planted in other sentences; each planted key is in the derived text once.
    for t in test["needle"]:
        assert t.edit is not None
        text = "".join(t.edit.replace.values())
        for key in ([t.gold] if isinstance(t.gold, str) else t.gold):
            assert text.count(key) == 1 and "secret code" not in text.split(key)[0][-80:]


def _right_any_wording(req: dict[str, Any]) -> str:
    """Finds a planted key whatever the split's wording: the one ``AAAA-0000`` token in the corpus
    after the team or project the question names."""
    q = _question(req)
    m = re.search(r"(?:the|of the) (\w+ \w+) (?:team|project)", q)
    assert m, q
    name = m.group(1)
    return repl(f"import re\nm = re.search(r'{name}[^\\n]*?([A-Z]{{4}}-\\d{{4}})', context)\nFINAL(m.group(1))")


def test_rlm_eval_split_test_and_the_checks_it_reports(tmp_path: Path, llm: FakeLLM) -> None:
    corpus = _haystack(tmp_path / "logs")

    # Each question: a written-out guess before reading anything (the evidence check sends it back), then code.
    guess = repl("FINAL('ZZZZ-0000')")
    llm.script("root", guess, _right_any_wording, guess, _right_any_wording)
    res = run_rlm("eval", str(corpus), "--families", "needle", "--limit", "2", "--split", "test", "--json",
                  "--no-llm-cache", "--no-leads", "--report", str(tmp_path / "r.md"), *model_flags(llm))
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["meta"]["split"] == "test" and doc["summary"][0]["correct"] == 2
    assert all("team" in r["question"] for r in doc["results"])
    (ev,) = doc["checks"]
    assert ev == {"check": "evidence", "fired": 2, "questions": 2, "changed": 2, "right_to_wrong": 0,
                  "wrong_to_right": 2}
    assert all(r["checks"][0]["answer"] == "ZZZZ-0000" and r["checks"][0]["right"] is False for r in doc["results"])
    assert "| evidence | 2 | 2 | 2 | 0 | 2 |" in (tmp_path / "r.md").read_text()
    res = run_rlm("eval", str(corpus), "--split", "holdout", *model_flags(llm))
    assert res.code == 2 and "unknown split 'holdout'" in res.stderr
