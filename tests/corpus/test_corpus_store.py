"""The chunk index and its cache: layout of ``context``, chunk records, reuse of unchanged files,
re-indexing of edited ones, atomic writes under a crash, corrupt bundles, ``--no-cache``, stdin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import build, bundle, cleanup, indexing, model, store
from rlm_cli.corpus.bundle import cache_key, index_root
from rlm_cli.corpus.model import Corpus, read_context
from rlm_cli.corpus.store import load_corpus
from rlm_cli.corpus.tokens import count_tokens
from rlm_cli.errors import EmptyCorpusError
from rlm_cli.protocol import pack_column, unpack_column

ROOT = Path(__file__).resolve().parents[2]
OLD = time.time() - 3600  # an mtime the cache trusts without re-reading (not "racy")


def make_tree(root: Path, files: dict[str, str | bytes], *, old: bool = True) -> Path:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
        if old:
            os.utime(p, (OLD, OLD))
    return root


def code_file(n: int, tag: str = "") -> str:
    return "".join(f"def f{tag}{i}(x):\n    '''doc {i} {tag}'''\n    return x + {i}\n\n\n" for i in range(n))


def sample(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "repo", {"a.py": code_file(40, "a"), "b/b.py": code_file(30, "b"),
                                         "c.md": "# C\n\ntext\n", "d.txt": "no newline at end"})


def opts(**kw: object) -> CorpusOptions:
    return CorpusOptions(chunk_tokens=100, **kw)  # type: ignore[arg-type]


def patch_reads(monkeypatch: pytest.MonkeyPatch, read: object) -> None:
    """Replace ``loader.read_source`` where the store (cache checks) and the build call it."""
    monkeypatch.setattr(store, "read_source", read)
    monkeypatch.setattr(build, "read_source", read)


def assert_consistent(corpus: Corpus) -> None:
    """Every record agrees with the context text and with tiktoken."""
    ctx = corpus.context
    assert len(ctx) == corpus.chars
    assert corpus.context_file.stat().st_size == corpus.context_bytes
    for f in corpus.files:
        assert ctx[f.start - len(model.header_line(f.path)):f.start] == model.header_line(f.path)
        text = ctx[f.start:f.end]
        assert f.lines == text.count("\n") + (0 if text.endswith("\n") else 1)
        mine = corpus.chunks[f.first_chunk:f.first_chunk + f.n_chunks]
        assert mine and mine[0].start == f.start and mine[-1].end == f.end  # chunks tile the file exactly
        assert all(c.path == f.path for c in mine)
        assert f.tokens == sum(c.tokens for c in mine)
    for i, c in enumerate(corpus.chunks):
        assert c.id == i
        piece = ctx[c.start:c.end]
        f = next(f for f in corpus.files if f.path == c.path)
        assert f.start <= c.start < c.end <= f.end  # no chunk crosses a file
        assert c.start_line == ctx.count("\n", f.start, c.start) + 1
        assert c.end_line == ctx.count("\n", f.start, c.end - 1) + 1
        assert c.tokens == count_tokens(piece)


def test_context_layout_and_records(tmp_path: Path) -> None:
    corpus = load_corpus([str(sample(tmp_path))], opts())
    assert [f.path for f in corpus.files] == ["a.py", "b/b.py", "c.md", "d.txt"]
    assert corpus.context.startswith("==> a.py <==\ndef fa0(x):\n")
    assert corpus.context.endswith("==> d.txt <==\nno newline at end\n\n")
    assert "\n\n==> b/b.py <==\n" in corpus.context
    assert len(corpus.chunks) > 4  # the code files are several chunks at 100 tokens
    assert corpus.head(13) == "==> a.py <==\n"
    assert_consistent(corpus)
    assert corpus.summary().startswith(f"loaded 4 files, {corpus.total_bytes:,} bytes, {corpus.total_tokens:,} tokens")


@pytest.mark.parametrize(("text", "width"), [("", 1), ("plain", 1), ("café ÿ\x00", 1), ("Ā", 2), ("жук", 2),
                                             ("\uffff", 2), ("ok 😀", 4), ("\U0010ffff", 4)])
def test_char_width_is_what_cpython_stores_per_character(text: str, width: int) -> None:
    assert model.char_width(text) == width
    if text:  # CPython agrees: 1,000 more copies take 1,000 * len * width more bytes
        assert sys.getsizeof(text * 2000) - sys.getsizeof(text * 1000) == 1000 * len(text) * width


def test_each_file_records_the_width_context_needs_and_the_cache_keeps_it(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "repo", {"a.py": "x = 1\n", "b.txt": "naïve café\n", "c.md": "# Москва\n",
                                         "d.txt": "ok 😀\n", "ж.txt": "ascii only\n"})
    first = load_corpus([str(root)], opts())
    widths = {"a.py": 1, "b.txt": 1, "c.md": 2, "d.txt": 4, "ж.txt": 2}  # a header line counts too
    assert {f.path: f.width for f in first.files} == widths
    assert first.char_width == 4
    assert abs(sys.getsizeof(first.context) - first.context_memory) < 100
    again = load_corpus([str(root)], opts())
    assert again.from_cache == 5 and {f.path: f.width for f in again.files} == widths
    (root / "d.txt").unlink()
    third = load_corpus([str(root)], opts())
    assert third.char_width == 2 and abs(sys.getsizeof(third.context) - third.context_memory) < 100


def test_bundles_of_another_layout_version_are_removed_unless_in_use(tmp_path: Path) -> None:
    first = load_corpus([str(sample(tmp_path))], opts())
    root = first.bundle_dir.parent
    m = cleanup.VERSION_HEAD.match(first.index_file.read_bytes())
    assert m is not None and int(m[1]) == model.INDEX_VERSION  # the sweep reads real indexes right
    stale, busy = root / ("a" * 24), root / ("b" * 24)
    for d in (stale, busy):
        d.mkdir()
        (d / "index.json").write_text('{"version": 1, "files": {}}')
        (d / "context-0123.txt").write_text("old")
    holder = bundle.pin(busy / "context-0123.txt")  # a run of the old version still uses it
    other = make_tree(tmp_path / "other", {"x.txt": "x\n"})
    load_corpus([str(other)], opts())  # a new bundle folder: old versions are swept
    assert not stale.exists() and busy.exists() and first.bundle_dir.exists()
    assert holder is not None
    os.close(holder)
    assert cleanup.remove_old_versions(root) == 1 and not busy.exists() and first.bundle_dir.exists()


def test_a_load_that_fails_leaves_no_cache_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = make_tree(tmp_path / "bin", {"a.png": b"\x89PNG\x00\x00", "b.bin": b"\x00\x01" * 100})
    with pytest.raises(EmptyCorpusError, match="binary"):
        load_corpus([str(binary)], opts())
    assert not index_root().exists()
    real = store.read_source
    calls: list[str] = []

    def interrupted(sf: object, o: object, r: object) -> object:
        calls.append("x")
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(sf, o, r)  # type: ignore[arg-type]

    patch_reads(monkeypatch, interrupted)
    with pytest.raises(KeyboardInterrupt):
        load_corpus([str(sample(tmp_path))], opts())
    assert not index_root().exists()  # Ctrl-C during a first index: no folder, no temp file


def test_decoding_notes_are_the_same_whether_files_are_read_or_cached(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "repo", {"a.txt": "plain\n", "b.txt": "caf\xe9 cr\xe8me\n".encode("latin-1"),
                                         "c.txt": "x" * 5000 + "\n", "d.txt": "other\n"})
    o = opts(max_file_size=1000, truncate_large=True)
    first = load_corpus([str(root)], o)
    assert "decoded 1 latin-1, 1 truncated" in first.summary()
    assert {f.path: f.notes for f in first.files} == {"a.txt": "", "b.txt": "latin-1", "c.txt": "truncated",
                                                      "d.txt": ""}
    cached = load_corpus([str(root)], o)
    assert cached.from_cache == 4 and "decoded 1 latin-1, 1 truncated" in cached.summary()
    (root / "d.txt").write_text("edited\n")
    partly = load_corpus([str(root)], o)
    assert (partly.from_cache, partly.reindexed) == (3, 1) and "decoded 1 latin-1, 1 truncated" in partly.summary()


def test_cached_bundle_is_private_to_the_user(tmp_path: Path) -> None:
    """The cache holds a copy of possibly private files: nobody else may read it."""
    corpus = load_corpus([str(sample(tmp_path))], opts())
    bundle = corpus.context_file.parent
    assert bundle.stat().st_mode & 0o777 == 0o700
    for name in ("index.json", corpus.context_file.name):
        assert (bundle / name).stat().st_mode & 0o777 == 0o600, name
    temp = load_corpus([str(sample(tmp_path))], opts(use_cache=False))
    assert temp.context_file.parent.stat().st_mode & 0o777 == 0o700
    assert temp.context_file.stat().st_mode & 0o777 == 0o600


def test_second_load_reuses_the_cache_without_reading_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = sample(tmp_path)
    first = load_corpus([str(root)], opts())
    assert (first.from_cache, first.reindexed) == (0, 4)

    def no_read(*a: object, **k: object) -> None:
        raise AssertionError("an unchanged file was read")

    patch_reads(monkeypatch, no_read)
    second = load_corpus([str(root)], opts())
    assert (second.from_cache, second.reindexed) == (4, 0)
    assert "(all from cache)" in second.summary()
    assert second.context_file == first.context_file
    assert second.chunks == first.chunks and second.files == first.files
    assert second._context is None  # the parent did not even decode the context


def test_an_edit_reindexes_only_the_changed_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = sample(tmp_path)
    first = load_corpus([str(root)], opts())
    (root / "b" / "b.py").write_text(code_file(31, "B"))
    read: list[str] = []
    real = store.read_source
    patch_reads(monkeypatch, lambda sf, o, r: read.append(sf.display) or real(sf, o, r))
    second = load_corpus([str(root)], opts())
    assert read == ["b/b.py"]
    assert (second.from_cache, second.reindexed) == (3, 1)
    assert "(3 from cache, 1 re-indexed)" in second.summary()
    assert "def fB30(x)" in second.context and "def fb0" not in second.context
    assert_consistent(second)
    fresh = load_corpus([str(root)], opts(use_cache=False))
    assert [(c.path, c.start, c.end, c.tokens, c.sha1) for c in second.chunks] == \
           [(c.path, c.start, c.end, c.tokens, c.sha1) for c in fresh.chunks]
    assert not first.context_file.exists() or first._pin is not None  # old file kept only while pinned


def test_added_and_removed_files_update_the_bundle(tmp_path: Path) -> None:
    root = sample(tmp_path)
    load_corpus([str(root)], opts())
    (root / "c.md").unlink()
    make_tree(root, {"e/new.rst": "Title\n=====\n\nbody\n"})
    corpus = load_corpus([str(root)], opts())
    assert [f.path for f in corpus.files] == ["a.py", "b/b.py", "d.txt", "e/new.rst"]
    assert (corpus.from_cache, corpus.reindexed) == (3, 1)
    assert_consistent(corpus)


def test_binary_and_empty_files_are_remembered_and_not_read_again(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_tree(tmp_path / "r", {"a.py": "x = 1\n", "img.png": b"\x89PNG\x00" + b"\x01" * 20000,
                                      "bom.txt": b"\xef\xbb\xbf", "zero.txt": b""})
    first = load_corpus([str(root)], opts())
    assert [f.path for f in first.files] == ["a.py"]
    assert dict(first.report.skipped) == {"binary": 1, "empty": 2}
    real = store.read_source

    def no_read(*a: object, **k: object) -> None:
        raise AssertionError("a remembered binary or empty file was read again")

    patch_reads(monkeypatch, no_read)
    second = load_corpus([str(root)], opts())
    assert (second.from_cache, second.reindexed) == (1, 0)  # a full cache hit...
    assert dict(second.report.skipped) == {"binary": 1, "empty": 2}  # ...that still reports the skipped files
    patch_reads(monkeypatch, real)
    make_tree(root, {"img.png": "now it is text\n"})
    third = load_corpus([str(root)], opts())
    assert [f.path for f in third.files] == ["a.py", "img.png"] and third.reindexed == 1


def test_a_same_size_edit_within_the_clock_tick_is_caught_by_the_hash(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "r", {"a.txt": "version one\n"}, old=False)  # just written: racy
    first = load_corpus([str(root)], opts())
    st = (root / "a.txt").stat()
    (root / "a.txt").write_text("version two\n")  # same size...
    os.utime(root / "a.txt", ns=(st.st_atime_ns, st.st_mtime_ns))  # ...and the same mtime
    second = load_corpus([str(root)], opts())
    assert "version two" in second.context and second.reindexed == 1
    assert first.files[0].sha1 != second.files[0].sha1


def test_a_touched_but_unchanged_file_keeps_its_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = sample(tmp_path)
    first = load_corpus([str(root)], opts())
    os.utime(root / "a.py", (OLD + 60, OLD + 60))

    def no_chunking(*a: object, **k: object) -> None:
        raise AssertionError("a file whose content did not change was chunked again")

    monkeypatch.setattr(build, "index_text", no_chunking)
    second = load_corpus([str(root)], opts())
    assert (second.from_cache, second.reindexed) == (4, 0)
    assert second.chunks == first.chunks
    saved = json.loads(second.index_file.read_text())
    assert unpack_column(saved["files"]["mtime_ns"])[0] == (root / "a.py").stat().st_mtime_ns  # it learnt the mtime


def test_options_are_part_of_the_cache_key(tmp_path: Path) -> None:
    root = sample(tmp_path)
    assert cache_key([str(root)], opts()) != cache_key([str(root)], CorpusOptions(chunk_tokens=500))
    assert cache_key([str(root)], opts()) != cache_key([str(root)], opts(include=["*.py"]))
    a = load_corpus([str(root)], opts())
    b = load_corpus([str(root)], CorpusOptions(chunk_tokens=500))
    assert a.bundle_dir != b.bundle_dir and len(b.chunks) < len(a.chunks)


def test_no_cache_writes_only_a_temporary_bundle(tmp_path: Path) -> None:
    corpus = load_corpus([str(sample(tmp_path))], opts(use_cache=False))
    assert corpus.temporary and not index_root().exists()
    assert corpus.index_file.exists() and read_context(corpus.context_file) == corpus.context


def test_stdin_is_a_file_called_stdin(tmp_path: Path) -> None:
    corpus = load_corpus(["-"], opts(), stdin_bytes=b"line one\nline two\n")
    assert [f.path for f in corpus.files] == ["<stdin>"] and corpus.temporary
    assert corpus.context == "==> <stdin> <==\nline one\nline two\n\n"
    both = load_corpus([str(sample(tmp_path)), "-"], opts(), stdin_bytes=b"extra\n")
    assert both.files[-1].path == "<stdin>" and both.temporary


def test_dense_text_is_split_again_to_stay_near_the_token_target(tmp_path: Path) -> None:
    import random

    rng = random.Random(1)
    cjk = "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(3000))  # ~1 token per character
    text = "\n".join(cjk[i:i + 60] for i in range(0, len(cjk), 60)) + "\n"
    corpus = load_corpus([str(make_tree(tmp_path / "r", {"zh.txt": text}))], opts())
    assert max(c.tokens for c in corpus.chunks) <= 100 * indexing.OVERSIZE
    assert_consistent(corpus)


# -- corrupt caches and crashes ------------------------------------------------------------------

def corrupt_cases() -> list[str]:
    return ["garbage index", "truncated context", "flipped byte", "missing context", "bad columns"]


@pytest.mark.parametrize("case", corrupt_cases())
def test_a_corrupt_cache_is_rebuilt_with_a_warning(tmp_path: Path, case: str) -> None:
    root = sample(tmp_path)
    first = load_corpus([str(root)], opts())
    good = first.context
    os.close(first._pin or os.open(os.devnull, os.O_RDONLY))
    idx, ctx = first.index_file, first.context_file
    if case == "garbage index":
        idx.write_bytes(b'{"version": 3, "files": [tru')
    elif case == "truncated context":
        ctx.write_bytes(ctx.read_bytes()[:-10])
    elif case == "flipped byte":
        data = bytearray(ctx.read_bytes())
        data[100] ^= 0x01
        ctx.write_bytes(bytes(data))
    elif case == "missing context":
        ctx.unlink()
    else:
        doc = json.loads(idx.read_text())
        if case == "bad columns":
            doc["chunks"]["tokens"] = pack_column(list(unpack_column(doc["chunks"]["tokens"]))[:-1])
        else:  # a packed column whose bytes are not a whole number of int64s
            doc["chunks"]["start"] = {"int64": "AAAA"}
        idx.write_text(json.dumps(doc))
    warnings: list[str] = []
    second = load_corpus([str(root)], opts(), on_warning=warnings.append)
    assert len(warnings) == 1 and "is corrupt" in warnings[0] and "rebuilding it" in warnings[0]
    assert second.context == good and second.reindexed == 4
    assert_consistent(second)
    assert load_corpus([str(root)], opts(), on_warning=warnings.append).from_cache == 4 and len(warnings) == 1


_CRASH = """
import os, signal, sys
from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import build, bundle, store
where = sys.argv[2]
if where == "context":
    real_put = build.BundleWriter._put
    def put(self, data, chars):
        if self.nbytes > 2000:
            os.kill(os.getpid(), signal.SIGKILL)  # killed in the middle of the context file
        real_put(self, data, chars)
    build.BundleWriter._put = put
else:
    def write(path, data):
        with open(path, "wb") as fh:  # a NON-atomic write killed halfway would corrupt the index...
            fh.write(data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    real = bundle.atomic_write
    def atomic(path, data):  # ...so kill the real atomic write after its temp file is half written
        import tempfile
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".tmp")
        os.write(fd, data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    bundle.atomic_write = atomic
store.load_corpus([sys.argv[1]], CorpusOptions(chunk_tokens=100))
"""


@pytest.mark.parametrize("where", ["context", "index"])
def test_a_run_killed_while_writing_leaves_a_usable_cache(tmp_path: Path, where: str) -> None:
    root = sample(tmp_path)
    first = load_corpus([str(root)], opts())
    before = first.index_file.read_bytes()
    (root / "a.py").write_text(code_file(45, "z"))
    proc = subprocess.run([sys.executable, "-c", _CRASH, str(root), where], cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True)
    assert proc.returncode == -9, proc.stderr  # really killed
    assert first.index_file.read_bytes() == before  # the old index is intact...
    strays = list(first.bundle_dir.glob(".*.tmp"))
    assert strays  # ...and the half-written file is only a temp file
    for stray in first.bundle_dir.glob(".index-*.tmp"):  # index temps are collected once 10 minutes old
        os.utime(stray, (OLD, OLD))
    warnings: list[str] = []
    corpus = load_corpus([str(root)], opts(), on_warning=warnings.append)
    assert warnings == []  # nothing corrupt was found
    assert "def fz44(x)" in corpus.context and corpus.reindexed == 1
    assert_consistent(corpus)
    assert not list(first.bundle_dir.glob(".*.tmp"))  # the stray temp file was cleaned up


def test_a_context_file_in_use_is_not_deleted_by_another_run(tmp_path: Path) -> None:
    root = sample(tmp_path)
    first = load_corpus([str(root)], opts())
    (root / "d.txt").write_text("changed once")
    second = load_corpus([str(root)], opts())
    assert first.context_file != second.context_file
    assert first.context_file.exists()  # still pinned by `first`
    assert first._pin is not None
    os.close(first._pin)
    first._pin = None
    (root / "d.txt").write_text("changed twice")
    third = load_corpus([str(root)], opts())
    assert not first.context_file.exists()  # no longer in use: collected
    assert second.context_file.exists()  # `second` still holds its own
    assert sorted(p.name for p in third.bundle_dir.iterdir()) == sorted(
        ["index.json", second.context_file.name, third.context_file.name])


def test_an_unwritable_cache_falls_back_to_a_temporary_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("RLM_CACHE_DIR", str(blocker / "cache"))
    warnings: list[str] = []
    corpus = load_corpus([str(sample(tmp_path))], opts(), on_warning=warnings.append)
    assert corpus.temporary and len(corpus.files) == 4
    assert any("cannot write the corpus cache" in w for w in warnings)


# -- parsed structured data ----------------------------------------------------------------------

def data_tree(tmp_path: Path) -> Path:
    rows = "".join(json.dumps({"id": i, "tag": "t" + str(i % 3)}) + "\n" for i in range(300))
    return make_tree(tmp_path / "data", {"a.jsonl": rows, "b.csv": "x,y\n1,2\n3,4\n", "c.json": '{"k": [1, 2]}',
                                         "notes.txt": "plain\n"})


def worker_data(corpus: Corpus) -> dict[str, object]:
    from rlm_cli.sandbox.corpus_helpers import CorpusView
    from rlm_cli.sandbox.data_helpers import DataView

    view = CorpusView.from_bundle(str(corpus.index_file), str(corpus.context_file))
    dv = DataView(view.structured, str(corpus.data_file))
    return {p: (list(v) if not isinstance(v, dict) else v) for p, v in dv.data.items()}


def test_parsed_data_is_cached_and_only_an_edited_file_is_parsed_again(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from rlm_cli.corpus import structured

    root = data_tree(tmp_path)
    parsed: list[str] = []
    real = structured.parse
    monkeypatch.setattr(structured, "parse", lambda kind, text: parsed.append(kind) or real(kind, text))
    first = load_corpus([str(root)], opts())
    assert sorted(parsed) == ["csv", "json", "jsonl"]
    assert first.data_file is not None and first.data_file.name == bundle.data_name(first.context_file)
    expected = worker_data(first)
    assert expected["b.csv"] == [{"x": 1, "y": 2}, {"x": 3, "y": 4}] and len(expected["a.jsonl"]) == 300  # type: ignore[arg-type]
    parsed.clear()
    second = load_corpus([str(root)], opts())
    assert parsed == [] and second.from_cache == 4 and second.data_file == first.data_file
    assert [f.dmeta for f in second.files] == [f.dmeta for f in first.files]
    assert "read as 1 csv, 1 json, 1 jsonl" in second.summary()
    assert worker_data(second) == expected
    os.close(first._pin or os.open(os.devnull, os.O_RDONLY))
    os.close(second._pin or os.open(os.devnull, os.O_RDONLY))
    (root / "b.csv").write_text("x,y\n5,6\n")
    third = load_corpus([str(root)], opts())
    assert parsed == ["csv"] and (third.from_cache, third.reindexed) == (3, 1)
    assert worker_data(third) == {**expected, "b.csv": [{"x": 5, "y": 6}]}
    assert not first.context_file.exists() and not first.data_file.exists()  # swept together
    assert sorted(p.name for p in third.bundle_dir.iterdir()) == sorted(
        ["index.json", third.context_file.name, bundle.data_name(third.context_file)])


@pytest.mark.parametrize("case", ["flipped byte", "missing", "other python"])
def test_a_damaged_data_file_or_another_python_rebuilds_the_bundle(tmp_path: Path, case: str) -> None:
    root = data_tree(tmp_path)
    first = load_corpus([str(root)], opts())
    expected = worker_data(first)
    assert first.data_file is not None
    if case == "flipped byte":
        data = bytearray(first.data_file.read_bytes())
        data[50] ^= 0x01
        first.data_file.write_bytes(bytes(data))
    elif case == "missing":
        first.data_file.unlink()
    else:
        doc = json.loads(first.index_file.read_text())
        doc["python"] = "cpython-2.7"
        first.index_file.write_text(json.dumps(doc))
    warnings: list[str] = []
    second = load_corpus([str(root)], opts(), on_warning=warnings.append)
    if case == "other python":
        assert warnings == []  # not corrupt, just not ours: rebuilt quietly
    else:
        assert len(warnings) == 1 and "data file" in warnings[0] and "rebuilding it" in warnings[0]
    assert second.reindexed == 4 and worker_data(second) == expected
