"""The confined document decoder's options and failure paths (``rlm_cli.corpus.decode``)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from rlm_cli.config import CorpusOptions, decode_limits
from rlm_cli.corpus import decode, file_kinds
from rlm_cli.corpus.loader import SourceFile
from rlm_cli.errors import UsageError
from tests.security.test_hostile_documents import slow_pdf
from tests.support.cli import run_rlm
from tests.support.data_kit import make_pdf


def test_decode_limits_come_from_flags_then_the_config_file_then_the_defaults() -> None:
    assert decode_limits(None, None, {}) == (60.0, 2 * 1024**3)
    assert decode_limits(None, None, {"decode_timeout": 5, "decode_memory": "512M"}) == (5.0, 512 * 1024**2)
    assert decode_limits(2.5, "1G", {"decode_timeout": 5, "decode_memory": "512M"}) == (2.5, 1024**3)
    with pytest.raises(UsageError, match="--decode-memory 64M is too small"):
        decode_limits(None, "64M", {})
    with pytest.raises(UsageError, match="decode_memory"):
        decode_limits(None, None, {"decode_memory": "lots"})
    with pytest.raises(UsageError, match="decode_timeout"):
        decode_limits(None, None, {"decode_timeout": 0})


def test_bad_decode_flags_are_one_line_usage_errors(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x\n")
    res = run_rlm("index", str(tmp_path), "--decode-memory", "10M")
    assert res.code == 2
    assert res.stderr.strip().splitlines()[0].startswith("error: --decode-memory 10M is too small")
    res = run_rlm("config", "set", "decode_memory", "1G")
    assert res.code == 0, res.stderr
    res = run_rlm("config", "show")
    assert "decode_memory" in res.stdout and "1G" in res.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_decoder_killed_mid_document_is_a_decode_crash_and_the_next_one_works(tmp_path: Path) -> None:
    path = tmp_path / "hang.pdf"
    path.write_bytes(slow_pdf())
    sf = SourceFile("hang.pdf", str(path), path.stat().st_size, 0)
    d = decode.Decoder(timeout_s=3600)  # the PDF keeps pypdf busy for hours: only the kill can end it

    def kill_soon() -> None:
        time.sleep(1.5)
        assert d._box is not None and d._box.proc is not None
        os.killpg(d._box.proc.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_soon)
    try:
        fd = os.open(path, os.O_RDONLY)
        killer.start()
        with pytest.raises(file_kinds.Unreadable) as info:  # it returns at all: the kill was noticed
            d.decode_file(fd, sf, "pdf", "", CorpusOptions())
        assert info.value.reason == "decode crash"
        assert str(info.value).startswith("skipped hang.pdf: the document decoder died reading it (")
        os.close(fd)
        good = tmp_path / "ok.pdf"
        good.write_bytes(make_pdf(["fine again"]))
        fd = os.open(good, os.O_RDONLY)
        out = d.decode_file(fd, SourceFile("ok.pdf", str(good), good.stat().st_size, 0), "pdf", "", CorpusOptions())
        os.close(fd)
        assert "fine again" in out.text and d.starts == 2
    finally:
        killer.join()
        d.close()


def test_a_decoder_that_cannot_start_skips_documents_with_one_reason(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decode.Decoder, "_start", lambda self: (_ for _ in ()).throw(OSError("no sandbox here")))
    root = tmp_path / "c"
    root.mkdir()
    (root / "a.pdf").write_bytes(make_pdf(["one"]))
    (root / "b.pdf").write_bytes(make_pdf(["two"]))
    (root / "ok.txt").write_text("text still loads\n")
    from rlm_cli.corpus import load_corpus

    warnings: list[str] = []
    corpus = load_corpus([str(root)], CorpusOptions(use_cache=False), on_warning=warnings.append)
    assert [f.path for f in corpus.files] == ["ok.txt"]
    assert corpus.report.skipped == {"decoder unavailable": 2}
    assert "skipped a.pdf: the document decoder could not start (no sandbox here)" in warnings
