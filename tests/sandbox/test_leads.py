"""``leads(question)``: the keyword search run before the root model's first turn (issue #10).

Unit tests on a ``CorpusView``; then through the loop: the first request carries the leads, a
FINAL on turn 1 may rest on them, ``--no-leads`` turns them off, and the trajectory keeps them."""

from __future__ import annotations

import json
from pathlib import Path

from rlm_cli.loop.prompts import LEADS_NOTE
from rlm_cli.sandbox.corpus_helpers import CorpusView
from rlm_cli.sandbox.leads import leads, question_terms
from tests.support.cli import model_flags, run_rlm
from tests.support.fake_llm import FakeLLM, repl
from tests.support.inproc import run
from tests.support.sandbox_kit import corpus_view

FILES = {
    "pkg/config.py": ("import os\n\n\nclass Loader(BaseLoader, Mixin):\n    pass\n\n\n"
                      "def parse_config(path,\n                 strict=False, retries=3):\n    return load(path)\n\n\n"
                      "def load(path):\n    return open(path).read()\n\n\n"
                      "def reload(path):\n    return load(path) + load(path)\n"),
    "pkg/app.py": ("from pkg.config import parse_config\n\n\ndef main():\n    cfg = parse_config('x')\n"
                   "    return cfg.load()\n"),
    "notes/log.txt": "\n".join(f"line {i}: the quiet river flows" for i in range(200))
                     + "\nThe secret code of the frozen willow project is MMXF-8921.\n"
                     + "\n".join(f"frozen yogurt {i}" for i in range(50)) + "\n",
}


def view() -> CorpusView:
    return corpus_view(FILES)


def test_terms_tell_paths_names_and_words_apart() -> None:
    t = question_terms("In the file `pkg/config.py`, what is the default of `strict` in `Loader.parse`, "
                       "and why does parse_config retry?")
    assert t["paths"] == ["pkg/config.py"]
    assert t["names"] == ["strict", "Loader.parse", "parse_config"]
    # Function words are dropped; content words are kept ("file" is weighted by its rarity, not dropped).
    assert "retry" in t["words"] and "the" not in t["words"] and "what" not in t["words"] and "file" in t["words"]
    assert question_terms("What is it?") == {"paths": [], "names": [], "phrases": [], "words": []}


def test_apostrophes_are_not_quotes_and_long_questions_are_read_only_so_far() -> None:
    t = question_terms("What's `parse_qsl` and what's it for? Isn't 'launch code' set?")
    assert t["names"] == ["parse_qsl"] and t["phrases"] == ["launch code"]
    assert question_terms("café " * 100_000 + "`late_name`")["names"] == []  # past QUESTION_CHARS
    assert "café" in question_terms("Where is the café menu?")["words"]


def test_a_name_gets_its_definition_with_the_whole_signature_and_its_callers() -> None:
    text = leads(view(), "Which file defines the function `parse_config`?")
    assert "pkg/config.py:8: def parse_config(path, strict=False, retries=3):" in text
    assert "`parse_config` is called from 1 function in pkg/app.py: main" in text
    found = text.split("lines with the most question words")[0]
    assert "pkg/app.py:1" not in found  # the import is neither a definition nor a call


def test_callers_are_counted_per_function_and_attribute_calls_are_not_calls() -> None:
    text = leads(view(), "In the file `pkg/config.py`, how many functions call `load`?")
    assert "files named in the question: pkg/config.py" in text
    assert "`load` is called from 2 functions in pkg/config.py: parse_config, reload" in text  # not app.py's cfg.load()


def test_a_name_missing_from_the_named_file_is_looked_up_in_the_whole_corpus() -> None:
    text = leads(view(), "Where is `parse_config` called in notes/log.txt?")
    assert "`parse_config` is not in notes/log.txt; in the whole corpus:" in text
    assert "pkg/config.py:8: def parse_config(" in text


def test_a_constant_is_defined_where_it_is_assigned() -> None:
    v = corpus_view({"k.py": "MAX_RETRIES = 5\n\ndef f():\n    return MAX_RETRIES\n"})
    text = leads(v, "What is MAX_RETRIES?")
    assert "`MAX_RETRIES` is defined at:\n  k.py:1: MAX_RETRIES = 5" in text


def test_a_private_name_with_one_underscore_is_a_name() -> None:
    assert question_terms("What is the value of _MAXLINE in http.client?")["names"] == ["_MAXLINE", "http.client"]
    v = corpus_view({"client.py": "_MAXLINE = 65536\n\ndef read(fp):\n    return fp.readline(_MAXLINE + 1)\n"})
    assert "`_MAXLINE` is defined at:\n  client.py:1: _MAXLINE = 65536" in leads(v, "What is _MAXLINE set to?")


def test_a_parameter_beside_its_function_gets_no_misleading_definition() -> None:
    text = leads(view(), "What is the default of the parameter `strict` of the function `parse_config`?")
    assert "def parse_config(path, strict=False, retries=3):" in text and "`strict`" not in text
    assert "`strict` is on" in leads(view(), "Where is `strict` used?")  # alone, it is the subject


def test_words_found_nowhere_give_no_leads() -> None:
    assert leads(view(), "Where is the zyxwv quantum flux?") == ""


def test_a_class_shows_its_bases() -> None:
    assert "pkg/config.py:4: class Loader(BaseLoader, Mixin):" in leads(view(), "What are the bases of `Loader`?")


def test_the_line_with_the_rarest_question_words_comes_first() -> None:
    text = leads(view(), "What is the secret code of the frozen willow project?")
    rows = [r for r in text.splitlines() if r.startswith("  ")]
    assert rows[0].startswith("  notes/log.txt:201: The secret code of the frozen willow project is MMXF-8921.")
    assert "'frozen' in 51 lines" in text and "'willow' in 1 line" in text  # lines per word, with the unit


def test_leads_stay_within_their_size_and_say_nothing_for_an_empty_question() -> None:
    assert leads(view(), "What is it?") == ""
    short = leads(view(), "Which file defines the function `parse_config`?", max_chars=120)
    assert len(short) <= 120 and short.endswith("[... leads cut]")
    assert "not in the corpus" in leads(view(), "Where is `no_such_name` defined?")


def test_the_first_request_shows_the_leads_and_a_turn_one_final_may_rest_on_them(tmp_path: Path,
                                                                                 llm: FakeLLM) -> None:
    root = tmp_path / "repo"
    for path, text in FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    llm.script("root", repl("FINAL('MMXF-8921')"))
    r = run(llm, [root], "What is the secret code of the frozen willow project?")
    assert r.error is None and r.answer == "MMXF-8921"
    *_, question, call, output = llm.chat_requests("root")[0]["messages"]
    assert "Question: What is the secret code" in question["content"]
    assert call["role"] == "assistant" and "```repl\nleads(question, max_chars=" in call["content"]
    assert output["role"] == "user" and LEADS_NOTE in output["content"]
    assert "notes/log.txt:201: The secret code of the frozen willow project" in output["content"]
    assert "(20 iterations left.)" not in output["content"] and "(8 iterations left.)" in output["content"]
    (ev,) = r.of("leads")
    assert "MMXF-8921" in ev["output"] and r.outcome is not None and r.outcome.result.iterations == 1


def test_no_leads_leaves_the_first_message_without_them_and_turn_one_must_explore(tmp_path: Path,
                                                                                 llm: FakeLLM) -> None:
    root = tmp_path / "repo"
    (root / "a.py").parent.mkdir(parents=True)
    (root / "a.py").write_text("def parse_config():\n    return 1\n")
    llm.script("root", repl("FINAL('a.py')"), repl("print(grep('def parse_config'))"), repl("FINAL('a.py')"))
    r = run(llm, [root], "Which file defines `parse_config`?", leads=False)
    assert r.answer == "a.py" and r.outcome is not None and r.outcome.result.iterations == 3  # turn 1 refused
    assert "Question: " in str(llm.chat_requests("root")[0]["messages"][-1]["content"])
    assert not r.of("leads")


def test_leads_without_corpus_lines_do_not_let_turn_one_finish(tmp_path: Path, llm: FakeLLM) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    llm.script("root", repl("FINAL('guess')"), repl("print(question)"), repl("FINAL('seen')"))
    r = run(llm, [root], "What is in `src/missing/nothere.py`?")
    assert r.answer == "seen" and r.outcome is not None and r.outcome.result.iterations == 3
    assert "no file in the corpus matches" in r.of("leads")[0]["output"]
    assert "What is in `src/missing/nothere.py`?" in r.of("output")[1]["output"]  # `question` is set


def test_the_question_is_in_the_repl_without_leads_and_leads_checks_its_arguments(tmp_path: Path,
                                                                                 llm: FakeLLM) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.py").write_text("def parse_config():\n    return 1\n")
    llm.script("root", repl("print(question)\nleads()"), repl("leads(42)"), repl("FINAL('ok')"))
    r = run(llm, [root], "Where is `parse_config`?", leads=False)
    assert r.answer == "ok" and not r.of("leads")
    first, second = (e["output"] for e in r.of("output")[:2])
    assert first.startswith("Where is `parse_config`?\n") and "a.py:1: def parse_config():" in first
    assert "TypeError: leads() takes the text to look up (a str), got int" in second


def test_rlm_ask_no_leads_flag_and_the_trajectory(tmp_path: Path, llm: FakeLLM) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.py").write_text("def parse_config():\n    return 1\n")
    trace = tmp_path / "t.jsonl"
    llm.script("root", repl("FINAL(grep('def parse_config')[0]['file'])"), repl("FINAL(grep('def parse_config')[0]['file'])"))
    on = run_rlm("ask", str(root), "Which file defines `parse_config`?", *model_flags(llm), "--mode", "rlm",
                 "--no-llm-cache", "--trace", str(trace))
    assert on.code == 0 and on.stdout.strip() == "a.py"
    kinds = [json.loads(line)["type"] for line in trace.read_text().splitlines()]
    assert kinds.index("leads") < kinds.index("root_call")
    off = run_rlm("ask", str(root), "Which file defines `parse_config`?", *model_flags(llm), "--mode", "rlm",
                  "--no-llm-cache", "--no-leads")
    assert off.code == 0 and off.stdout.strip() == "a.py"
    firsts = [str(req["messages"][-1]["content"]) for req in llm.chat_requests("root")]
    assert LEADS_NOTE in firsts[0] and "a.py:1: def parse_config():" in firsts[0]
    assert LEADS_NOTE not in firsts[1] and "Question: " in firsts[1]


def test_the_lines_leads_show_are_sources_of_the_answer(tmp_path: Path, llm: FakeLLM) -> None:
    shown: list[tuple[str, int]] = []
    text = leads(view(), "Which file defines the function `parse_config`?", shown=shown)
    assert ("pkg/config.py", 8) in shown and all(f"{p}:{n}" in text for p, n in shown)
    root = tmp_path / "repo"
    for path, body in FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(body)
    llm.script("root", repl("FINAL('MMXF-8921 (notes/log.txt:201)')"))
    res = run_rlm("ask", str(root), "What is the secret code of the frozen willow project?", *model_flags(llm),
                  "--json")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert {"path": "notes/log.txt", "start_line": 201, "end_line": 201, "how": ["leads"], "cited": True} \
        in doc["sources"]
    events = [json.loads(line) for line in Path(doc["trace"]).read_text().splitlines()]
    (ev,) = [e for e in events if e["type"] == "leads"]
    assert ["leads", "notes/log.txt", 201, 201] in ev["sources"]


def test_a_first_reply_in_prose_that_quotes_the_leads_is_the_answer(tmp_path: Path, llm: FakeLLM) -> None:
    root = tmp_path / "repo"
    for path, body in FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(body)
    question = "What is the secret code of the frozen willow project?"
    llm.script("root", "The secret code of the frozen willow project is MMXF-8921.")
    r = run(llm, [root], question)
    assert r.answer == "The secret code of the frozen willow project is MMXF-8921."
    assert r.outcome is not None and r.outcome.result.iterations == 1
    # Prose that quotes nothing of the leads (here: only the question's own words) is reminded of the format.
    llm.script("root", "The frozen willow project has a secret code.", repl("FINAL('MMXF-8921')"))
    r = run(llm, [root], question)
    assert r.answer == "MMXF-8921" and r.outcome is not None and r.outcome.result.iterations == 2


def test_a_question_naming_three_rare_pairs_of_words_gets_all_three_lines() -> None:
    files = {f"m{i}.py": "".join(f"x{i}_{n} = {n}\n" for n in range(30)) for i in range(3)}
    for i, (a, b, key) in enumerate([("golden", "citadel", "A-1"), ("rapid", "beacon", "B-2"),
                                     ("amber", "glacier", "C-3")]):
        files[f"m{i}.py"] += f"# The secret code of the {a} {b} project is {key}.\n"
    text = leads(corpus_view(files), "What are the secret codes of the golden citadel, rapid beacon and amber "
                                     "glacier projects?")
    assert all(key in text for key in ("A-1", "B-2", "C-3")), text


def test_lines_holding_a_name_the_question_gives_come_before_lines_that_share_its_phrasing() -> None:
    # Seen on the standard library: "# Given the path to a ... defined .pyc file, return the path"
    # outranked the line defining the function the question named (it shares "give", "path", "file").
    v = corpus_view({"a/notes.py": "# Given the path to a defined file, give the path of the file\n" * 3,
                     "b/tool.py": "def frobnicate_widget(x):\n    return x\n"})
    text = leads(v, "Which file defines the function `frobnicate_widget`? Give the file's path.")
    assert "b/tool.py:1: def frobnicate_widget(x):" in text and "a/notes.py" not in text
    # Without a definition of the name, the lines holding it are the leads, before those sharing the phrasing.
    v = corpus_view({"a/notes.py": "# Given the path to a defined file, give the path of the file\n" * 3,
                     "b/tool.py": "x = 1\nfrobnicate_widget(x)\n"})
    lines = leads(v, "Which file uses `frobnicate_widget`? Give the file's path.").split("question words", 1)[1]
    assert "b/tool.py:2" in lines and "a/notes.py" not in lines


def test_a_method_s_definition_names_its_class_and_defined_names_need_no_word_lines() -> None:
    v = corpus_view({"shop/cart.py": "class Cart:\n    def apply_coupon(self, code):\n        return code\n",
                     "shop/other.py": "# a class with a method\n"})
    text = leads(v, "Which class has a method named `apply_coupon`?")
    assert "shop/cart.py:2 (in Cart): def apply_coupon(self, code):" in text
    assert "question words" not in text and "shop/other.py" not in text


def test_a_path_named_with_the_folder_above_the_corpus_finds_its_file() -> None:
    # `rlm ask Lib/logging "... in logging/__init__.py?"`: the corpus's paths start below `logging/`.
    v = corpus_view({"__init__.py": "import os\n\nINFO = 20\nDEBUG = 10\n", "handlers.py": "INFO = 'x'\n"})
    text = leads(v, "what's the value of INFO in logging/__init__.py?")
    assert "no file in the corpus matches" not in text
    assert "__init__.py:3: INFO = 20" in text
    # Only whole paths from the corpus root count: a tail that names no file still says so.
    text = leads(v, "what is in logging/config.py?")
    assert "no file in the corpus matches logging/config.py" in text
