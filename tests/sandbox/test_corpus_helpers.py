"""The REPL's corpus helpers (``grep``, ``read_file``, ``chunk_text``, ``search``) on a bundle
written by the store, as the worker loads it."""

from __future__ import annotations

import os
import random
import re
import signal
import time
from pathlib import Path

import pytest

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus.store import load_corpus
from rlm_cli.sandbox.bm25 import TERM
from rlm_cli.sandbox.corpus_helpers import CorpusView


def make_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content.encode())
    return root


FILES = {
    "src/app.py": "import os\n\ndef main():\n    retry = 3  # RETRY policy\n    return retry\n",
    "src/util/net.py": "RETRY_LIMIT = 5\ndef fetch(url):\n    for i in range(RETRY_LIMIT):\n        pass\n",
    "docs/guide.md": "# Guide\n\nSet the retry policy in config.\nretry retry retry\n",
    "win.txt": "first line\r\nsecond retry line\r\nthird\r\n",
    "tail.txt": "no newline\nlast retry",
}


@pytest.fixture
def view(tmp_path: Path) -> CorpusView:
    corpus = load_corpus([str(make_tree(tmp_path / "repo", FILES))], CorpusOptions(use_cache=False))
    return CorpusView.from_bundle(str(corpus.index_file), str(corpus.context_file))


def naive_grep(files: dict[str, str], pattern: str, flags: int = 0) -> list[dict[str, object]]:
    """One result per matching line, computed line by line (the obvious, slow way). The regex
    sees a CRLF line with its ``\r`` (as in the file); the result shows the line without it."""
    rx = re.compile(pattern, flags)
    out: list[dict[str, object]] = []
    for path, text in files.items():
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        for n, line in enumerate(lines, 1):
            if rx.search(line):
                out.append({"file": path, "line": n, "text": line.removesuffix("\r")})
    return out


def test_bundle_layout_seen_by_the_worker(view: CorpusView) -> None:
    assert [f["path"] for f in view.files] == ["docs/guide.md", "src/app.py", "src/util/net.py", "tail.txt", "win.txt"]
    f = view.files[1]
    assert set(f) == {"path", "size", "chars", "lines", "tokens", "start", "end", "first_chunk", "n_chunks", "kind"}
    assert f["kind"] == ""  # plain text (structured files say "jsonl", "csv"...)
    assert view.context[f["start"]:f["end"]] == FILES["src/app.py"] and f["lines"] == 5
    c = view.chunks[0]
    assert set(c) == {"id", "path", "start_line", "end_line", "start", "end", "tokens", "sha1"}
    assert view.chunk_text(0) == FILES["docs/guide.md"] and c["start_line"] == 1 and c["end_line"] == 4
    assert view.chunk_text(-1) == FILES["win.txt"]
    past = len(view.context) + 5
    with pytest.raises(IndexError, match=f"chunk {past} does not exist: there are 5 chunks"):
        view.chunk_text(past)
    # a number past the last chunk but inside context is a character offset: the chunk holding it
    at = view.context.index("def ", view.files[1]["start"])
    assert at >= 5 and view.chunk_text(at) == view.chunk_text(view.chunks[1]["id"])
    assert view.chunks[1]["start"] <= at < view.chunks[1]["end"]
    # on a file's header line ("==> src/app.py <=="), as context.find(path) lands: that file's text
    header = view.context.find("src/app.py")
    assert header < view.files[1]["start"] and view.chunk_text(header + 10) == view.chunk_text(1)


def test_chunk_text_of_a_string_is_what_a_model_means_by_it(view: CorpusView) -> None:
    at = view.context.index("def ", view.files[1]["start"])
    words = view.context[at:at + 12]
    assert view.chunk_text(words) == view.chunk_text(at) == view.chunk_text(1)  # text: the chunk holding it
    assert view.chunk_text("src/util/net.py") == view.chunk_text(2) and view.chunk_text("util/net.py") == view.chunk_text(2)
    assert view.chunk_text("3") == view.chunk_text(3)
    with pytest.raises(ValueError, match="nowhere in `context`.*chunk number"):
        view.chunk_text("XKWR-7354 is not here")


def test_grep_reports_file_and_line_like_a_line_by_line_search(view: CorpusView) -> None:
    ordered = {f["path"]: FILES[f["path"]] for f in view.files}
    for pattern, flags in [("retry", 0), ("retry", re.I), ("^def ", 0), ("line$", 0), ("line\r$", 0),
                           (r"\bRETRY_\w+", 0),
                           ("import", 0), ("last retry$", 0), ("zzz", 0)]:
        got = view.grep(pattern, ignore_case=bool(flags & re.I))
        # Python hits also name their enclosing function ("in"; see the ast test below)
        assert [{k: v for k, v in h.items() if k != "in"} for h in got] == naive_grep(ordered, pattern,
                                                                                   flags | re.M), pattern
    assert view.grep("retry retry") == [{"file": "docs/guide.md", "line": 4, "text": "retry retry retry"}]


def test_grep_options(view: CorpusView) -> None:
    assert {h["file"] for h in view.grep("retry", ignore_case=True, path_glob="*.py")} == {"src/app.py",
                                                                                            "src/util/net.py"}
    assert {h["file"] for h in view.grep("retry", ignore_case=True, path_glob="src/util/*")} == {"src/util/net.py"}
    assert {h["file"] for h in view.grep("retry", ignore_case=True, path_glob="**/net.py")} == {"src/util/net.py"}
    assert len(view.grep("retry", ignore_case=True, max_results=3)) == 3
    assert view.grep(re.compile("retry", re.I), path_glob="*.md")[0]["line"] == 3
    assert len(view.grep("")) == sum(f["lines"] for f in view.files)  # an empty match: one hit per line, no hang
    multi = view.grep(r"main\(\):\n    retry")  # a match over two lines is reported at its first line
    assert multi == [{"file": "src/app.py", "line": 3, "text": "def main():"}]


def test_grep_says_when_it_stopped_at_max_results_and_none_returns_every_match(view: CorpusView) -> None:
    every = view.grep("retry", ignore_case=True, max_results=None)
    assert len(every) == 8 and view.grep_capped == 0  # below the cap: not marked
    view.grep("retry", ignore_case=True, max_results=3)
    assert view.grep_capped == 3  # stopped at its cap: there may be more (the worker says so)
    view.grep_capped = 0
    assert len(view.grep("retry", ignore_case=True, limit=None)) == 8 and view.grep_capped == 0
    assert len(view.grep("retry", "first line\nretry\nretry", 1)) == 1 and view.grep_capped == 1  # a text's own grep


def test_grep_agrees_with_naive_search_on_random_corpora(tmp_path: Path) -> None:
    rng = random.Random(11)
    words = ["alpha", "beta", "Gamma", "delta", "x", "", "needle", "NEEDLE"]
    files = {}
    for i in range(12):
        lines = [" ".join(rng.choice(words) for _ in range(rng.randrange(0, 6))) for _ in range(rng.randrange(1, 40))]
        files[f"d{i % 3}/f{i:02d}.txt"] = "\n".join(lines) + rng.choice(["", "\n", "\r\n"])
    corpus = load_corpus([str(make_tree(tmp_path / "r", files))], CorpusOptions(use_cache=False, chunk_tokens=50))
    view = CorpusView.from_bundle(str(corpus.index_file), str(corpus.context_file))
    ordered = {f["path"]: files[f["path"]] for f in view.files if files[f["path"]]}
    for pattern in ["needle", "^beta", "x$", "alpha beta", "[Gg]amma"]:
        assert view.grep(pattern, max_results=10_000) == naive_grep(ordered, pattern, re.M)
    assert view.grep("needle", ignore_case=True, max_results=10_000) == naive_grep(ordered, "needle", re.M | re.I)


def test_one_scan_across_files_finds_exactly_what_a_search_per_file_finds(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(5)
    words = ["alpha", "beta", "needle", "x", "==>", "<==", "", "  ", "end", "\t", "42"]
    files = {}
    for i in range(30):
        lines = [" ".join(rng.choice(words) for _ in range(rng.randrange(0, 5))) for _ in range(rng.randrange(1, 12))]
        files[f"d{i % 4}/f{i:02d}.py" if i % 3 else f"d{i % 4}/f{i:02d}.txt"] = \
            "\n".join(lines) + rng.choice(["", "\n", "\n\n", "\r\n", " "])
    files["d0/code.py"] = "class A:\n    def m(self):\n        return 'needle'\n\ndef f():\n    return 42\n"
    corpus = load_corpus([str(make_tree(tmp_path / "r", files))], CorpusOptions(use_cache=False, chunk_tokens=40))
    view = CorpusView.from_bundle(str(corpus.index_file), str(corpus.context_file))
    patterns = ["needle", "^beta", "x$", "alpha beta", "end\\s*", "\\s+", "==>", "<==", "\\bend\\b", "\\n",
                "(?s)needle.+alpha", "[\\s\\S]{3}", "needle\\s*$", "^", "$", "(?<=\\n)end", "\\Aalpha", "x(?=\\n)",
                "end\\Z", "(?-m:$)", "(?-m:beta$)", "\\d+", "(a|b)", "(?i)ALPHA", "x\\n+", " $", "return (\\w+)"]
    fast = {p: view.grep(p, max_results=None) for p in patterns}
    capped = {p: view.grep(p, max_results=7) for p in patterns}
    globbed = {p: view.grep(p, "*.py", max_results=None) for p in patterns}
    from rlm_cli.sandbox import grep_engine
    assert grep_engine.scans_across_files(re.compile("needle", re.M))
    assert not grep_engine.scans_across_files(re.compile("x(?=\\n)", re.M))
    monkeypatch.setattr(grep_engine, "scans_across_files", lambda rx: False)  # one search per file
    for p in patterns:
        slow = view.grep(p, max_results=None)
        assert [(h["file"], h["line"], h["text"], h["match"], h.get("in")) for h in fast[p]] == \
            [(h["file"], h["line"], h["text"], h["match"], h.get("in")) for h in slow], p
        assert capped[p] == view.grep(p, max_results=7), p
        assert globbed[p] == view.grep(p, "*.py", max_results=None), p


def test_read_file_ranges(view: CorpusView) -> None:
    assert view.read_file("src/app.py", 3, 4) == "3: def main():\n4:     retry = 3  # RETRY policy"
    assert view.read_file("src/app.py") == ("1: import os\n2: \n3: def main():\n4:     retry = 3  # RETRY policy\n"
                                            "5:     return retry")
    assert view.read_file("net.py", 2, 2) == "2: def fetch(url):"  # a unique path suffix
    assert view.read_file("win.txt", 2) == "2: second retry line\n3: third"  # \r not shown
    assert view.read_file("tail.txt", 2, 99) == "2: last retry"  # end clamped; last line without newline
    assert view.read_file("src/app.py", 5, 3) == ""
    with pytest.raises(ValueError, match="start_line 9 is past the end of tail.txt"):
        view.read_file("tail.txt", 9)
    with pytest.raises(FileNotFoundError, match="did you mean one of \\['src/app.py'\\]"):
        view.read_file("src/ap.py")
    long = CorpusView("\n".join(f"l{i}" for i in range(1, 120)))
    assert long.read_file("<context>", 99, 101) == " 99: l99\n100: l100\n101: l101"


def test_grep_hits_cite_lines_that_read_file_shows(view: CorpusView) -> None:
    for hit in view.grep("retry", ignore_case=True):
        shown = view.read_file(hit["file"], hit["line"], hit["line"])
        assert shown.split(": ", 1)[1] == hit["text"]


def test_search_ranks_the_chunk_with_a_planted_phrase_first(tmp_path: Path) -> None:
    rng = random.Random(3)
    vocab = [f"word{i}" for i in range(400)] + ["config", "parse", "retry", "timeout", "socket"]
    files = {}
    for i in range(60):
        files[f"f{i:02d}.txt"] = "\n".join(" ".join(rng.choice(vocab) for _ in range(12)) for _ in range(30)) + "\n"
    body = files["f41.txt"].split("\n")
    body[6] += " the quantum marmalade protocol handles retry budgets"
    files["f41.txt"] = "\n".join(body)
    corpus = load_corpus([str(make_tree(tmp_path / "r", files))], CorpusOptions(use_cache=False, chunk_tokens=120))
    view = CorpusView.from_bundle(str(corpus.index_file), str(corpus.context_file))
    top = view.search("quantum marmalade protocol", k=5)
    assert top[0]["file"] == "f41.txt"
    assert "quantum marmalade protocol" in view.chunk_text(top[0]["chunk"])
    assert top[0]["start_line"] <= 7 <= top[0]["end_line"]
    assert all(top[0]["score"] > r["score"] for r in top[1:])
    assert view.search("nothing_matches_this_zz") == []


def _haystack(n_lines: int = 3000) -> str:
    """Random words, and "needle" at the end of line 1235 (or of the last line)."""
    rng = random.Random(5)
    vocab = [f"w{i}" for i in range(300)]
    return "".join(" ".join(rng.choice(vocab) for _ in range(10)) + (" needle\n" if i == min(1234, n_lines - 1) else "\n")
                   for i in range(n_lines))


def test_a_background_index_build_gives_the_same_results_and_search_waits_for_it() -> None:
    text = _haystack()
    built_inline = CorpusView(text).search("needle w7 w42", k=5)
    view = CorpusView(text)
    thread = view.start_index_build()
    assert view.search("needle w7 w42", k=5) == built_inline  # called mid-build: waits, same answer
    thread.join(10)
    assert not thread.is_alive() and view.search("needle", k=1)[0]["chunk"] == built_inline[0]["chunk"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_search_in_a_child_forked_while_the_index_was_being_built_does_not_hang() -> None:
    view = CorpusView(_haystack(300))
    with view._bm25_lock:  # what the builder thread holds while it builds
        pid = os.fork()
        if pid == 0:  # the child has no builder thread: it must build the index itself
            code = 2
            try:
                code = 0 if view.search("needle", k=1) else 1
            finally:
                os._exit(code)  # never return into pytest from the child
    deadline = time.monotonic() + 20
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("search() in the forked child hung on the parent's lock")
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(status) == 0


def test_search_scores_match_bm25s(tmp_path: Path) -> None:
    bm25s = pytest.importorskip("bm25s")
    rng = random.Random(8)
    vocab = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
    docs = ["\n".join(" ".join(rng.choice(vocab[: rng.randrange(3, 10)]) for _ in range(rng.randrange(5, 40)))
                      for _ in range(3)) for _ in range(30)]
    view = CorpusView("".join(d + "\n" for d in docs))
    view.chunks = []
    pos = 0
    for i, d in enumerate(docs):  # one chunk per document
        view.chunks.append({"id": i, "path": "<context>", "start_line": 0, "end_line": 0, "start": pos,
                            "end": pos + len(d) + 1})
        pos += len(d) + 1
    model = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    model.index([TERM.findall(d.lower()) for d in docs], show_progress=False)
    for query in ["alpha", "beta gamma", "kappa iota theta", "zeta epsilon alpha"]:
        expected = model.get_scores(TERM.findall(query))
        got = {r["chunk"]: r["score"] for r in view.search(query, k=len(docs))}
        for i, score in enumerate(expected):
            assert got.get(i, 0.0) == pytest.approx(float(score), abs=1e-3), (query, i)


def test_a_raw_context_gets_pseudo_file_and_chunks() -> None:
    text = "".join(f"line {i} {'needle' if i == 700 else 'hay'}\n" for i in range(1, 2001))
    view = CorpusView(text)
    assert view.files[0]["path"] == "<context>" and view.files[0]["lines"] == 2000
    assert view.grep("needle") == [{"file": "<context>", "line": 700, "text": "line 700 needle"}]
    assert len(view.chunks) > 1 and view.chunks[-1]["end"] == len(text)
    best = view.search("needle", k=1)[0]
    assert best["start_line"] <= 700 <= best["end_line"]
    assert view.read_file("<context>", 700, 700) == "700: line 700 needle"


def test_grep_hits_in_python_name_their_enclosing_definition_like_ast_does() -> None:
    """``in`` (the function or class holding a hit) agrees with ``ast``'s line ranges on real code."""
    import ast
    import sysconfig

    root = Path(sysconfig.get_paths()["stdlib"])
    texts = {rel: (root / rel).read_text(encoding="utf-8") for rel in ("json/decoder.py", "email/utils.py",
                                                                       "logging/handlers.py", "argparse.py")}
    context, files, pos = "", [], 0
    for rel, text in texts.items():
        files.append({"path": rel, "size": len(text), "chars": len(text), "lines": text.count("\n"), "tokens": 1,
                      "start": pos, "end": pos + len(text), "first_chunk": 0, "n_chunks": 0})
        context += text
        pos += len(text)
    view = CorpusView(context, files, [])
    checked = 0
    for rel, text in texts.items():
        owner: dict[int, str] = {}

        def visit(node: ast.AST, prefix: str, owner: dict[int, str]) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    qual = f"{prefix}{child.name}"
                    body_start = child.body[0].lineno
                    for n in range(body_start, (child.end_lineno or body_start) + 1):
                        owner[n] = qual
                    visit(child, qual + ".", owner)
                else:
                    visit(child, prefix, owner)

        visit(ast.parse(text), "", owner)
        lines = text.split("\n")
        for hit in view.grep(r"\w\(", path_glob=rel, max_results=100_000):
            n = hit["line"]
            stripped = lines[n - 1].strip()
            if not stripped or stripped.startswith(("#", "@", ")", "]", "}")) or lines[n - 2].rstrip().endswith(("(", ",", "\\")):
                continue  # continuation lines and decorators: the indentation rule does not apply
            assert hit.get("in") == owner.get(n), (rel, n, lines[n - 1], hit.get("in"), owner.get(n))
            checked += 1
    assert checked > 1000


def test_grep_hits_answer_match_and_groups_without_printing_them() -> None:
    view = CorpusView("a service=x level=1\nb service=y level=22\n")
    hits = view.grep(r"service=(\S+) level=(\d+)")
    assert [h["groups"] for h in hits] == [("x", "1"), ("y", "22")]
    assert [h["match"] for h in hits] == ["service=x level=1", "service=y level=22"]  # two groups: the whole match
    assert [h["match"] for h in view.grep(r"service=(\S+)")] == ["x", "y"]  # one group: it, as re.findall
    assert repr(hits[0]) == "{'file': '<context>', 'line': 1, 'text': 'a service=x level=1'}"
    with pytest.raises(KeyError, match="this row has the keys"):
        hits[0]["nope"]


def test_the_literal_parts_of_a_pattern_are_its_words_and_numbers() -> None:
    from rlm_cli.sandbox.near_miss import literal_parts
    assert literal_parts(r"HTTP/1.1\s+500") == ["HTTP", "500"]
    assert literal_parts(r'(?P<ip>\d+\.\d+) "GET (/static/[^ ]+)') == ["static", "GET"]  # no group name, no class
    assert literal_parts(r"^INFO\s*=\s*(\d+)") == ["INFO"]
    assert literal_parts(r"timeout|retry") == []  # alternatives need not appear together
    assert literal_parts(r"^\s*$") == [] and literal_parts("x{2,3}") == []


def test_where_a_pattern_stops_fitting_a_line_is_the_longest_start_that_matches() -> None:
    from rlm_cli.sandbox.near_miss import where_it_stops
    line = '203.0.113.148 - - [14/Sep/2026:06:12:20 +0200] "GET /about HTTP/1.1" 500 408 "-" "curl/8.5.0"'
    assert where_it_stops(r"HTTP\/1\.1\s+500", line) == (r"HTTP\/1\.1", '" 500 408 "-', r"\s+500")
    assert where_it_stops(r"GET\s+/about\s+500", line) == (r"GET\s+/about\s+", 'HTTP/1.1" 50', "500")
    assert where_it_stops(r"(GET|POST) /api", line) == ("(GET|POST) /a", "bout HTTP/1.", "pi")
    assert where_it_stops(r"curl/8\.5\.0\"x", line) == (r'curl/8\.5\.0\"', "", "x")  # at the line's end
    assert where_it_stops("get /ABOUT x", line, re.IGNORECASE) == ("get /ABOUT ", "HTTP/1.1\" 50", "x")
    # No start holding a word fits: nothing to say (a lone "s" or "^" fits any line).
    assert where_it_stops("status=500", line) is None and where_it_stops("^GET", line, re.M) is None
    assert where_it_stops("zz" * 200, line) is None  # too long to try every start


def test_an_empty_grep_is_explained_by_the_lines_that_hold_its_words(view: CorpusView) -> None:
    assert view.grep("retry  policy") == []
    note = view.explain_empty_greps()
    assert note.startswith("[note: grep('retry  policy') matched no line, but some lines hold 'policy', 'retry'")
    assert "\n  src/app.py:4:     retry = 3  # RETRY policy\n" in note and "docs/guide.md:3:" in note
    assert "In the first, 'retry ' fits, then the line goes on with 'policy in co', where the pattern wants ' policy'" in note
    assert view.explain_empty_greps() == ""  # said once
    assert view.grep("retry", path_glob="lib/*.py") == [] and "searched nothing" in view.explain_empty_greps()
    assert view.grep("RETRY", path_glob="util/net.py")  # a path's tail is enough
    for _ in range(4):
        view.grep("nothing here at all")
    assert "2 more grep() calls of this block matched no line" in view.explain_empty_greps()
