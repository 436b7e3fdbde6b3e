"""A corpus whose ``context`` takes more than ``protocol.CONTEXT_BY_PATH_MAX_BYTES`` (1 GiB) is
loaded as a plain ``str``, not copied into the ``Context`` subclass that answers
``context["path"]`` (issue 25: that copy doubled the worker's memory while it loaded). Every
helper works the same on it; the prompt and the error hints stop offering ``context["path"]``.
The limit is lowered here so that a few small files cross it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm_cli import protocol
from rlm_cli.config import CorpusOptions, Settings
from rlm_cli.corpus.model import char_width
from rlm_cli.corpus.store import load_corpus
from rlm_cli.loop.meta import corpus_meta, first_messages
from rlm_cli.sandbox.corpus_helpers import CorpusView
from rlm_cli.sandbox.memory import worker_need
from rlm_cli.sandbox.texts import Context, str_width
from rlm_cli.sandbox.worker import Worker

FILES = {
    "src/app.py": "import os\n\ndef main():\n    retry = 3  # RETRY policy\n    return retry\n",
    "docs/guide.md": "# Guide \u00e9t\u00e9\n\nSet the retry policy in config \U0001f600.\nretry retry\n",
    "logs/a.log": "".join(f"level=INFO n={i} retry\n" for i in range(300)),
}


@pytest.fixture
def corpus(tmp_path: Path):  # type: ignore[no-untyped-def]
    root = tmp_path / "repo"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return load_corpus([str(root)], CorpusOptions(use_cache=False))


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(protocol, "CONTEXT_BY_PATH_MAX_BYTES", 1000)


def test_str_width_is_the_width_cpython_stores_for_a_decoded_str() -> None:
    for text in ["", "plain ascii", "caf\u00e9", "\u00ff" * 3, "\u0100 wide", "x" * 999 + "\u20ac",
                 "an emoji \U0001f600", "\U0010ffff"]:
        decoded = str(text.encode(), "utf-8")
        assert str_width(decoded) == char_width(text), text


def test_the_limit_is_bytes_of_the_string_at_its_width() -> None:
    limit = protocol.CONTEXT_BY_PATH_MAX_BYTES
    assert protocol.context_by_path(limit, 1) and not protocol.context_by_path(limit + 1, 1)
    assert protocol.context_by_path(limit // 4, 4) and not protocol.context_by_path(limit // 4 + 1, 4)


def test_above_the_limit_context_is_a_plain_str_and_every_helper_answers_the_same(
        corpus, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    sub = CorpusView.from_bundle(str(corpus.index_file), str(corpus.context_file))
    monkeypatch.setattr(protocol, "CONTEXT_BY_PATH_MAX_BYTES", 1000)
    plain = CorpusView.from_bundle(str(corpus.index_file), str(corpus.context_file))
    assert type(plain.context) is str
    assert str_width(plain.context) == 4 and len(plain.context) * 4 > protocol.CONTEXT_BY_PATH_MAX_BYTES
    assert isinstance(sub.context, Context) and sub.context == plain.context
    assert sub.context["app.py"] == FILES["src/app.py"]
    with pytest.raises(TypeError, match="string indices must be integers"):
        plain.context["app.py"]  # noqa: B018 - what a model's code does
    for view in (plain, sub):
        assert [(h["file"], h["line"]) for h in view.grep("retry = 3")] == [("src/app.py", 4)]
        assert len(view.grep(r"n=\d+ retry", path_glob="*.log")) == 300
        assert "4: \u00e9" not in view.read_file("docs/guide.md") and "3: Set the retry" in view.read_file("docs/guide.md")
        assert list(view.read_file("src/app.py"))[3] == "    retry = 3  # RETRY policy\n"
        assert view.chunk_text(0) == sub.chunk_text(0)
        assert view.search("policy config", k=1)[0]["file"] == "docs/guide.md"


def test_the_prompt_offers_context_by_path_only_where_it_works(corpus, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    for window in (200_000, 4_000):  # the full and the compact system prompt
        settings = Settings(root_model_window=window)
        meta = corpus_meta(corpus)
        assert meta["by_path"] is True
        assert 'context["path"]' in first_messages(settings, "q?", meta)[0]["content"]
        monkeypatch.setattr(protocol, "CONTEXT_BY_PATH_MAX_BYTES", 1000)
        meta = corpus_meta(corpus)
        assert meta["by_path"] is False
        system = first_messages(settings, "q?", meta)[0]["content"]
        assert 'context["path"]' not in system and "`context`" in system and "read_file" in system
        monkeypatch.undo()


def test_a_model_that_indexes_a_plain_context_by_path_is_told_what_works(corpus, small_limit) -> None:  # type: ignore[no-untyped-def]
    worker = Worker({"socket": "/nonexistent", "token": "t", "index_file": str(corpus.index_file),
                     "context_file": str(corpus.context_file)})
    out = worker.execute("text = context['src/app.py']\nprint(len(text))", 1)["output"]
    assert "TypeError: string indices must be integers" in out
    assert "hint: this corpus is too large for `context` to be indexed by path" in out
    assert "context[f['start']:f['end']] for f in files with f['path'] == 'src/app.py'" in out
    assert "read_file('src/app.py', 20, 40)" in out  # the model's own path, not a stand-in
    # the hint's way works
    out = worker.execute("f = [f for f in files if f['path'] == 'src/app.py'][0]\n"
                         "print(context[f['start']:f['end']].count('retry'))", 2)["output"]
    assert out.strip() == "2"
    # the hint on files["a.py"] names the same way, not context["a.py"]
    out = worker.execute("files['src/app.py']", 3)["output"]
    assert "context[f['start']:f['end']]" in out and "context['a.py']" not in out


def test_a_plain_context_needs_no_room_for_the_copy_in_the_memory_guard(corpus, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    string = corpus.context_memory
    with_copy = worker_need(corpus)
    monkeypatch.setattr(protocol, "CONTEXT_BY_PATH_MAX_BYTES", 1000)
    without = worker_need(corpus)
    # the loading peak (2x the string) gives way to the indexing peak (the string + 2 bytes a character)
    assert with_copy - without == 2 * string - (string + 2 * corpus.chars) > 0
