"""The prompts render, teach the method, state sub-call capacity from the real window, fit
small windows, and stay the same size whatever the corpus size."""

from __future__ import annotations

import random
import re
from pathlib import Path

from rlm_cli.config import CorpusOptions, Settings
from rlm_cli.corpus import load_corpus
from rlm_cli.corpus.tokens import count_tokens
from rlm_cli.loop import prompts
from rlm_cli.loop.history import output_limit
from rlm_cli.loop.meta import corpus_meta, corpus_metadata, first_messages
from rlm_cli.models.window import input_budget, request_tokens

HELPERS = ("context", "files", "chunks", "grep(", "read_file(", "search(", "llm_query(", "llm_query_batched(",
           "llm_map(", "rlm_query(", "SHOW_VARS()", "FINAL(", "FINAL_VAR(")


def test_full_system_prompt_teaches_the_method() -> None:
    text = prompts.system_prompt(sub_window_tokens=128_000, max_output_chars=10_000, root_window_tokens=200_000)
    for name in HELPERS:
        assert name in text, name
    for idea in ("Explore first", "Filter with code", "Decompose when the answer depends on judging text",
                 "A sub-call costs about one of your turns", "llm_query_batched", "To compare kinds (which is most common), name every kind in choices", "Aggregate in Python",
                 "Only what your code prints comes back", "10,000 characters", "```repl"):
        assert idea in text, idea
    assert "<" + "SUB_" not in text and "<MAX_OUTPUT_CHARS>" not in text  # every placeholder filled
    assert "Never write the output yourself" in text and "worked example" in text


def test_the_worked_examples_are_real_turns_the_output_arriving_as_the_next_message() -> None:
    """Issue #10: the model's turn ends with its code; the output is the next (user) message. The
    first example finds a fact with grep; the second judges each line with llm_map and counts in code."""
    msgs = first_messages(Settings(model="m"), "q", _meta())
    assert [m["role"] for m in msgs] == ["system", *["user", "assistant"] * 4, "user"]
    ask, code, output, final = msgs[1:5]
    assert "not your task" in ask["content"]
    assert code["content"].rstrip().endswith("```") and 'grep(r"environ")' in code["content"]
    assert "Output:" not in code["content"]
    assert output["content"].startswith("Output:\n2\ntool/paths.py 8 ")
    assert 'FINAL("TOOL_CACHE_HOME (read in tool/paths.py, line 8' in final["content"]
    ask, code, output, final = msgs[5:9]
    assert "not your task" in ask["content"] and "judgment, not a word to match" in code["content"]
    assert 'llm_map(entries, "Does this entry fix a crash?", choices=["yes", "no"])' in code["content"]
    assert 'print(len(entries), fixes.count("yes"))' in code["content"]
    assert code["content"].rstrip().endswith("```") and output["content"].startswith("Output:\n31 6\n")
    assert 'FINAL("6 of the 31 entries' in final["content"]
    assert msgs[-1]["content"].endswith("Do not answer before running code.") and "Question: q" in msgs[-1]["content"]


def test_sub_call_capacity_comes_from_the_window() -> None:
    big = prompts.sub_call_capacity(272_000)
    small = prompts.sub_call_capacity(8_192)
    assert big.max_tokens == 204_000 and big.max_chars == 612_000
    assert big.batch_chars == 50_000 * prompts.CHARS_PER_TOKEN  # tens of thousands of tokens, capped
    assert small.max_tokens == 6_144 and small.batch_chars == 3_072 * prompts.CHARS_PER_TOKEN
    text_big = prompts.system_prompt(sub_window_tokens=272_000, max_output_chars=10_000)
    text_small = prompts.system_prompt(sub_window_tokens=8_192, max_output_chars=10_000)
    assert "about 204,000 tokens (about 612,000 characters)" in text_big
    assert "pieces of about 150,000 characters" in text_big
    assert "132 items a sub-call" in text_big and "4 items a sub-call" in text_small  # llm_map: window // 2048
    assert "about 6,144 tokens (about 18,432 characters)" in text_small


def test_rlm_query_line_depends_on_the_depth_limit() -> None:
    rec = prompts.system_prompt(sub_window_tokens=32_000, max_output_chars=1000, recursion=True)
    plain = prompts.system_prompt(sub_window_tokens=32_000, max_output_chars=1000, recursion=False)
    assert "a sub-RLM: a fresh REPL" in rec and "plain sub-call" not in rec
    assert "plain sub-call (no REPL)" in plain
    s = Settings(model="m", max_depth=2)
    assert "a sub-RLM" in first_messages(s, "q", _meta(), depth=0)[0]["content"]
    assert "plain sub-call" in first_messages(s, "q", _meta(), depth=1)[0]["content"]


def test_compact_prompt_leaves_room_in_a_4000_token_window() -> None:
    s = Settings(model="m", root_model_window=4_000, sub_model_window=4_000)
    msgs = first_messages(s, "Where is the retry policy configured, and what are its defaults?", _meta())
    system = msgs[0]["content"]
    assert system.startswith("Answer a question about a corpus by writing Python")  # the compact variant
    for name in HELPERS:
        assert name in system, name
    used = request_tokens(msgs)
    budget = input_budget(4_000)
    assert used < budget // 2, (used, budget)  # over half the usable window is left to work in
    assert output_limit(budget, 10_000) == budget // 2  # outputs shrink to fit small windows too
    assert output_limit(input_budget(16_384), 10_000) == 5_898
    assert output_limit(input_budget(128_000), 10_000) == 10_000
    full = first_messages(Settings(model="m", root_model_window=128_000), "q", _meta())
    assert count_tokens(system) < count_tokens(full[0]["content"]) * 0.6


def test_corpus_metadata_is_bounded() -> None:
    meta = _meta()
    meta["top_dirs"] = [(f"dir{i}/" + "x" * 200, i) for i in range(100)]
    meta["sample_paths"] = ["p/" * 300 for _ in range(50)]
    meta["prefix"] = "```" + "y" * 10_000
    text = corpus_metadata(meta)
    assert len(text) < 3_500
    assert "```" not in text  # the prefix cannot open a code block


def _make_logs(root: Path, total_bytes: int) -> None:
    rng = random.Random(5)
    words = "error warning request user session timeout retry value config module handler cache".split()
    pool = [" ".join(rng.choice(words) for _ in range(10)) for _ in range(500)]
    for i in range(max(1, total_bytes // 50_000)):
        d = root / f"service_{i % 10}" / f"part_{i // 200}"
        d.mkdir(parents=True, exist_ok=True)
        lines = [f"{i:05d} {line}" for line in rng.choices(pool, k=50_000 // 60 + 1)]
        (d / f"log_{i:05d}.{('log', 'txt', 'md')[i % 3]}").write_text("\n".join(lines) + "\n")


def test_first_prompt_is_the_same_size_for_1mb_and_30mb(tmp_path: Path) -> None:
    sizes = {}
    options = CorpusOptions(use_cache=False)
    for mb in (1, 30):
        root = tmp_path / f"c{mb}"
        _make_logs(root, mb * 1_000_000)
        corpus = load_corpus([str(root)], options)
        assert corpus.total_bytes >= mb * 1_000_000
        msgs = first_messages(Settings(model="m"), "Which error repeats most?", corpus_meta(corpus))
        sizes[mb] = request_tokens(msgs)
    assert abs(sizes[30] - sizes[1]) / sizes[1] < 0.05, sizes
    # About 1,450 tokens before the second worked example (llm_map, issue 42: ~170 tokens, what made
    # a 1.5B model decompose at all; ~60 more for its choices); a small fraction of a 16k window.
    assert sizes[1] < 1_750, sizes


def test_small_prompt_pieces_render() -> None:
    assert prompts.first_user_prompt("Why?", "META").startswith("META\n\nQuestion: Why?")
    msg = prompts.output_message([("a", "out1"), ("b", "")], notes=["careful"])
    assert "Output of block 1:\nout1" in msg and "Output of block 2:\n(no output)" in msg and "[careful]" in msg
    cut = prompts.truncate_output("a" * 1000 + "b" * 1000, 2000, 400)
    assert cut.startswith("a" * 300) and cut.endswith("b" * 100) and "2,000 characters printed" in cut
    assert prompts.truncate_output("short", 5, 400) == "short"
    rec = prompts.compact_reply(7, ["x = 1\n" + "y" * 1000])
    assert rec.startswith("[turn 7") and "```repl\nx = 1" in rec and "more characters" in rec
    assert prompts.compact_feedback(["z" * 1000]).count("z") == 300
    a, u = prompts.omitted_turns(2, 9)
    assert "turns 2-9 omitted" in a and "SHOW_VARS()" in u
    direct = prompts.direct_prompt("Q?", "==> a.txt <==\nhello\n")
    assert direct[0]["role"] == "system" and direct[1]["content"].endswith("Question: Q?")
    assert "Do not write code" in prompts.best_answer_prompt()


def _meta() -> dict:
    return {"chars": 1_234_567, "tokens": 300_000, "files": 120, "chunks": 800,
            "top_dirs": [("src/", 100), ("docs/", 20)], "types": [(".py", 100), (".md", 20)],
            "sample_paths": ["src/a.py", "docs/b.md"], "prefix": "==> src/a.py <==\nimport os\n"}


def _make_structured(root: Path, n: int) -> None:
    """``n`` small structured files of three kinds, spread over folders."""
    for i in range(n):
        d = root / f"part{i % 20:02d}"
        d.mkdir(parents=True, exist_ok=True)
        kind = i % 3
        if kind == 0:
            (d / f"events_{i:05d}.jsonl").write_text(
                "".join(f'{{"id": {i * 10 + j}, "type": "click", "user": "u{j}"}}\n' for j in range(3)))
        elif kind == 1:
            (d / f"table_{i:05d}.csv").write_text(f"id,name,amount\n{i},item {i},{i * 1.5}\n")
        else:
            (d / f"config_{i:05d}.json").write_text(f'{{"service": "svc{i}", "replicas": {i % 7}, "tags": ["a"]}}')


def test_structured_metadata_is_the_same_size_for_10_and_10000_files(tmp_path: Path) -> None:
    texts = {}
    for n in (10, 10_000):
        root = tmp_path / f"s{n}"
        _make_structured(root, n)
        corpus = load_corpus([str(root)], CorpusOptions(use_cache=False))
        meta = corpus_meta(corpus)
        assert meta["structured"]["files"] == n
        texts[n] = corpus_metadata(meta)
    small, big = texts[10], texts[10_000]
    part = {n: t[t.index("Structured files:"):t.index("The first characters")] for n, t in texts.items()}
    # The same lines; only the digits of counts and sample values differ.
    assert abs(len(part[10_000]) - len(part[10])) <= 80, (part[10], part[10_000])
    assert len(part[10_000]) < 2_000
    assert re.sub(r"[\d,]+", "0", part[10_000]).count("\n") == re.sub(r"[\d,]+", "0", part[10]).count("\n")
    assert abs(len(big) - len(small)) <= 200, (len(small), len(big))
    assert part[10_000].count("\n  ") == 7  # six files described, and the "... more" line
    assert "Structured files: 10,000 (3,334 jsonl (10,002 rows), 3,333 json, 3,333 csv (3,333 rows))" in big
    assert re.search(r"table_\d+\.csv: csv; 1 row; keys: id=\d+, name=\"item \d+\", amount=[\d.]+", big), big
    assert re.search(r"events_\d+\.jsonl: jsonl; 3 rows; keys: id=\d+, type=\"click\", user=\"u0\"", big), big
    assert re.search(r"config_\d+\.json: json; object with 3 keys; keys: service=\"svc\d+\", replicas=\d, "
                     r"tags=\[\"a\"\]", big), big
    assert "... and 9,994 more (`data` lists them all)" in big


def test_metadata_mentions_pdf_page_markers_and_bounds_each_file_line() -> None:
    meta = _meta()
    meta["structured"] = {"files": 1, "rows": 5, "by_kind": [("jsonl", 1, 5)], "pdf": 2,
                          "shown": [{"path": "x/" * 200 + "f.jsonl", "kind": "jsonl", "rows": 5, "errors": 2,
                                     "first_error": [3, "E" * 500], "nkeys": 400,
                                     "keys": ["k" * 100] * 16, "sample": [["k" * 100, "v" * 100]] * 6}]}
    text = corpus_metadata(meta)
    line = next(ln for ln in text.splitlines() if "f.jsonl" in ln)
    assert len(line) <= 302 and line.startswith("  ...")
    assert "2 bad lines (first: line 3" in line
    assert "PDF files: 2; in `context` each page starts with a line `--- page N ---`." in text


def test_the_missing_items_note_quotes_the_lines_already_shown_that_name_them() -> None:
    from rlm_cli.loop.prompts import check_missing

    note = check_missing(["b"], ["a", "b"], {"b": ["x.py:3: b is 2"]})
    assert "leaves out 'b'" in note and "\n  x.py:3: b is 2\n" in note and "a: ..." not in note  # no answer shape
    assert "Lines of the output" not in check_missing(["b"], ["a", "b"], {})
