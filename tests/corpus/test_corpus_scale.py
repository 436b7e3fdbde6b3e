"""A large build (issue 25): beyond ``build.EXACT_TOKENS_BYTES`` of files to read, a sample of the
chunks is counted and the rest estimated, and the files are read in worker processes; the
bundle is otherwise the one a small build writes. The limit is lowered here so a small tree is
"large"."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import build, bundle, indexing
from rlm_cli.corpus.model import Corpus
from rlm_cli.corpus.store import load_corpus
from rlm_cli.corpus.tokens import count_tokens

OLD = time.time() - 3600


def tree(root: Path) -> Path:
    """Forty code and text files, plus the files a build skips, warns about or parses."""
    files: dict[str, bytes] = {}
    for i in range(30):
        files[f"pkg/mod_{i:02d}.py"] = "".join(
            f"def function_{i}_{j}(value):\n    '''Return the value that the caller asked for.'''\n"
            "    return value\n\n\n" for j in range(40 + i)).encode()
    for i in range(10):
        files[f"logs/app-{i}.log"] = "".join(
            f"level info from service number {j % 7} about request {j} of the day\n"
            for j in range(400)).encode()
    files["legacy.txt"] = "caf\xe9 na\xefve\n".encode("latin-1") * 50
    files["image.bin"] = b"\x00\x01\x02" * 100
    files["empty.txt"] = b""
    files["rows.jsonl"] = b"".join(json.dumps({"id": i, "ok": i % 2 == 0}).encode() + b"\n" for i in range(50))
    files["big.txt"] = b"word " * 5000
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        os.utime(p, (OLD, OLD))
    return root


def load(root: Path, monkeypatch: pytest.MonkeyPatch, *, large: bool, processes: int = 2,
         use_cache: bool = False) -> Corpus:
    monkeypatch.setattr(build, "EXACT_TOKENS_BYTES", 0 if large else 1 << 40)
    monkeypatch.setattr(build, "default_threads", lambda: processes)
    options = CorpusOptions(use_cache=use_cache, max_file_size=20_000, truncate_large=True, chunk_tokens=300)
    return load_corpus([str(root)], options)


def files_of(c: Corpus) -> list[tuple[object, ...]]:
    return [(f.path, f.size, f.chars, f.lines, f.start, f.end, f.sha1, f.width, f.notes, f.kind, f.dmeta)
            for f in c.files]


def layout(c: Corpus, prefix: str = "") -> list[tuple[object, ...]]:
    return [(c.path, c.start, c.end, c.start_line, c.end_line, c.sha1) for c in c.chunks if c.path.startswith(prefix)]


def test_a_large_build_writes_the_same_bundle_with_sampled_token_counts(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    root = tree(tmp_path / "repo")
    exact = load(root, monkeypatch, large=False)
    sampled = load(root, monkeypatch, large=True)  # read by 2 worker processes
    assert sampled.context == exact.context  # the same files, text and layout
    assert files_of(sampled) == files_of(exact)
    # Chunks tile every file; where no chunk is dense enough to be split again (prose-like code and
    # logs), they are those of the small build. (Dense ones, such as JSON rows, are split by a guess.)
    for f in sampled.files:
        own = sampled.chunks[f.first_chunk:f.first_chunk + f.n_chunks]
        assert own[0].start == f.start and own[-1].end == f.end
        assert all(a.end == b.start for a, b in zip(own, own[1:], strict=False))
    for prefix in ("pkg/", "logs/"):
        assert layout(sampled, prefix) == layout(exact, prefix)
    # Skips, warnings and counts are those of the sequential build, in the same order.
    assert sampled.report.warnings == exact.report.warnings and sampled.report.warnings
    assert sampled.report.named == exact.report.named
    assert (sampled.report.skipped, sampled.report.decoded, sampled.report.kinds) == \
        (exact.report.skipped, exact.report.decoded, exact.report.kinds)
    assert sampled.skipped_files == exact.skipped_files
    assert sampled.data_digest == exact.data_digest  # the parsed JSONL, byte for byte
    # 1 chunk in SAMPLE_EVERY is counted exactly; the others are estimates, and say so.
    counted = [c for c in sampled.chunks if indexing.is_sample(c.sha1)]
    assert counted and all(c.tokens == count_tokens(sampled.context[c.start:c.end]) for c in counted)
    assert sum(f.estimated for f in sampled.files) == len(sampled.chunks) - len(counted)
    assert sampled.tokens_estimated and not exact.tokens_estimated
    assert "about " in sampled.summary() and "about " not in exact.summary()
    assert abs(sampled.total_tokens / exact.total_tokens - 1) < 0.10
    # In one process (a single CPU) the build is the same.
    single = load(root, monkeypatch, large=True, processes=1)
    assert [(c.start, c.end, c.tokens) for c in single.chunks] == [(c.start, c.end, c.tokens) for c in sampled.chunks]


def test_the_cache_keeps_which_counts_are_estimates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tree(tmp_path / "repo")
    first = load(root, monkeypatch, large=True, use_cache=True)
    again = load(root, monkeypatch, large=False, use_cache=True)  # a cache hit reads nothing
    assert again.from_cache == len(again.files) and again.reindexed == 0
    assert [f.estimated for f in again.files] == [f.estimated for f in first.files]
    assert again.total_tokens == first.total_tokens and "about " in again.summary()
    # A bundle written before the column existed loads, its counts exact.
    index = json.loads(again.index_file.read_text())
    del index["files"]["estimated"]
    again.index_file.write_text(json.dumps(index))
    old = load(root, monkeypatch, large=False, use_cache=True)
    assert old.from_cache == len(old.files) and not old.tokens_estimated


def test_a_large_context_file_is_trusted_by_its_recorded_stat_and_rehashed_when_it_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tree(tmp_path / "repo")
    monkeypatch.setattr(bundle, "FULL_VERIFY_BYTES", 0)  # every context file counts as large
    first = load(root, monkeypatch, large=False, use_cache=True)
    good = first.context
    os.close(first._pin or os.open(os.devnull, os.O_RDONLY))
    digests: list[object] = []
    real = bundle.hashlib.file_digest
    monkeypatch.setattr(bundle.hashlib, "file_digest", lambda *a, **k: digests.append(a) or real(*a, **k))
    assert load(root, monkeypatch, large=False, use_cache=True).from_cache == len(first.files)
    assert digests == []  # size, mtime and inode as recorded: not read
    ctx = first.context_file
    data = bytearray(ctx.read_bytes())
    data[100] ^= 0x01
    ctx.write_bytes(bytes(data))  # a new mtime: hashed, found damaged, rebuilt
    warnings: list[str] = []
    monkeypatch.setattr(build, "EXACT_TOKENS_BYTES", 1 << 40)
    second = load_corpus([str(root)], CorpusOptions(max_file_size=20_000, truncate_large=True, chunk_tokens=300),
                         on_warning=warnings.append)
    assert digests and any("is corrupt" in w for w in warnings) and second.context == good


def test_a_larger_build_counts_a_sparser_nested_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    MiB = 1024 * 1024
    # 1 in 16 below 256 MiB read, then the rate halves as the bytes double: 8 to 16 MiB counted.
    assert [indexing.sample_every(n * MiB) for n in (0, 64, 128, 255, 256, 511, 512, 1024, 10**9)] == \
        [16, 16, 16, 16, 32, 32, 64, 128, indexing.MAX_SAMPLE_EVERY]
    # Sparser samples are subsets of denser ones (the same chunks stay counted as a corpus grows).
    hashes = [f"{i * 2654435761 % 2**32:08x}" + "0" * 32 for i in range(5000)]
    at16, at64 = ({h for h in hashes if indexing.is_sample(h, e)} for e in (16, 64))
    assert at64 and at64 < at16
    root = tree(tmp_path / "repo")
    monkeypatch.setattr(indexing, "SAMPLE_BYTES", 512)  # this small tree now reads as a large one
    dense = load(root, monkeypatch, large=True)
    every = indexing.sample_every(sum(p.stat().st_size for p in root.rglob("*") if p.is_file()))
    assert every > 64
    counted = [c for c in dense.chunks if indexing.is_sample(c.sha1, every)]
    assert all(c.tokens == count_tokens(dense.context[c.start:c.end]) for c in counted)
    assert sum(f.estimated for f in dense.files) == len(dense.chunks) - len(counted)


@pytest.mark.skipif(sys.platform != "linux", reason="Linux pipes only")
def test_a_reader_process_answers_on_a_pipe_of_a_mebibyte() -> None:
    import fcntl

    from rlm_cli.corpus import parallel

    with open("/proc/sys/fs/pipe-max-size") as fh:
        if int(fh.read()) < parallel.PIPE_BYTES and os.geteuid() != 0:
            pytest.skip("this kernel caps pipes below 1 MiB")
    worker = parallel._start_worker()
    try:
        assert worker.stdout is not None and worker.stdin is not None
        assert fcntl.fcntl(worker.stdout.fileno(), fcntl.F_GETPIPE_SZ) == parallel.PIPE_BYTES  # default: 64 KiB
    finally:
        worker.stdin.close()
        assert worker.wait(timeout=30) == 0
        worker.stdout.close()
