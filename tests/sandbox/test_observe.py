"""The worker's observer: helper counts and the corpus lines a block looked at."""

from __future__ import annotations

import random

from rlm_cli.sandbox.observe import MIN_LINE_CHARS, Observer, WatchedList
from tests.support.sandbox_kit import corpus_view


def _lines(tag: str, n: int, seed: int) -> str:
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa"]
    return "".join(f"{tag} {i}: " + " ".join(rng.choice(words) for _ in range(6)) + "\n" for i in range(1, n + 1))


def test_slices_sent_or_printed_map_to_files_and_lines() -> None:
    a, b = _lines("a", 50, 1), _lines("b", 30, 2)
    view = corpus_view({"src/a.py": a, "docs/b.md": b})
    obs = Observer(view.context, view.files)
    obs.begin_block(None)
    a_lines = a.splitlines(keepends=True)
    # A window cut mid-line (lines 10-20 of a.py) wrapped in an instruction, and a whole file.
    window = "".join(a_lines[9:20])[5:-3]
    obs.note_text("Summarise this part:\n" + window + "\nThanks.", "sub_call")
    obs.note_text("Question?\n" + b, "sub_call")
    obs.note_text("nothing from the corpus here, only a long line of model text", "sub_call")
    report = obs.end_block("")
    assert report["sources"] == [["sub_call", "src/a.py", 10, 20], ["sub_call", "docs/b.md", 1, 30]]


def test_a_slice_across_files_is_split_per_file_and_headers_belong_to_none() -> None:
    a, b = _lines("a", 5, 3), _lines("b", 5, 4)
    view = corpus_view({"a.txt": a, "b.txt": b})
    obs = Observer(view.context, view.files)
    both = view.context[view.files[0]["start"] + len(a.splitlines()[0]) + 1:view.files[1]["end"]]
    assert obs.lines_of(view.context.index(both), view.context.index(both) + len(both)) == [
        ("a.txt", 2, 5), ("b.txt", 1, 5)]


def test_short_or_repeated_lines_do_not_place_a_slice() -> None:
    common = "    return None  # a line found everywhere in the corpus\n"
    files = {f"f{i}.py": f"def f{i}():\n" + common for i in range(20)}
    view = corpus_view(files)
    obs = Observer(view.context, view.files)
    obs.begin_block(None)
    obs.note_text("x\n" + common, "sub_call")  # 20 copies in the corpus: which one? none is claimed
    obs.note_text("def f3():\n", "sub_call")  # shorter than MIN_LINE_CHARS
    assert len("def f3():") < MIN_LINE_CHARS
    assert obs.end_block("")["sources"] == []


def test_grep_hits_count_only_when_printed_and_counts_are_per_block() -> None:
    text = "first line of the file here\nthe retry policy is three attempts\nlast line\n"
    view = corpus_view({"conf.txt": text})
    obs = Observer(view.context, view.files)
    obs.begin_block(None)
    obs.count("grep")
    obs.grep_hits(view.grep("retry"))
    obs.grep_hits(view.grep("first"))
    report = obs.end_block("[{'file': 'conf.txt', 'line': 2, 'text': 'the retry policy is three attempts'}]")
    assert report["sources"] == [["grep", "conf.txt", 2, 2]]  # the unprinted hit is not a source
    assert report["helpers"] == {"grep": 1}
    obs.begin_block(None)
    assert obs.end_block("") == {"helpers": {}, "sources": []}


def test_watched_lists_count_reads_and_stay_lists() -> None:
    view = corpus_view({"a.txt": "hello\n"})
    obs = Observer(view.context, view.files)
    files = WatchedList(view.files, "files", obs)
    obs.begin_block(None)
    assert len(files) == 1 and files[0]["path"] == "a.txt" and [f["path"] for f in files] == ["a.txt"]
    assert isinstance(files, list) and files[:1] == view.files
    assert obs.end_block("")["helpers"] == {"files": 4}


def test_a_paused_background_build_goes_on_when_a_lookup_needs_the_index() -> None:
    import threading

    text = _lines("a", 40, 1)
    view = corpus_view({"a.py": text})
    obs = Observer(view.context, view.files)
    asked = threading.Event()

    def busy() -> bool:  # a code block runs all along: the background build waits...
        asked.set()
        return True

    builder = threading.Thread(target=obs.build_index, args=(busy,), daemon=True)
    builder.start()
    assert asked.wait(5)
    builder.join(0.2)
    assert builder.is_alive() and obs._index is None
    # ...until that block itself needs the index (a sub-call's prompt is mapped while it runs).
    line = text.splitlines()[5]
    obs.begin_block(None)
    obs.note_text(line + "\n", "sub_call")
    assert obs.end_block("")["sources"] == [["sub_call", "a.py", 6, 6]]
    builder.join(5)
    assert not builder.is_alive()
