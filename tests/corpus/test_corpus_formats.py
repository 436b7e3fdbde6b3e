"""Reading files beyond plain text: compressed files, PDFs, notebooks, Parquet and Excel, with the
failures each can bring (a truncated .gz, a decompression bomb, an encrypted PDF, a missing extra)."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import sys
import tomllib
from pathlib import Path

import pytest

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import file_kinds, load_corpus
from rlm_cli.corpus.model import Corpus
from rlm_cli.sandbox.corpus_helpers import CorpusView
from rlm_cli.sandbox.data_helpers import PANDAS_HINT, DataView
from tests.support.data_kit import encrypt_pdf, make_pdf, notebook


def load(root: Path, **kw: object) -> tuple[Corpus, list[str]]:
    warnings: list[str] = []
    corpus = load_corpus([str(root)], CorpusOptions(**kw), on_warning=warnings.append)  # type: ignore[arg-type]
    return corpus, warnings


def text_of(corpus: Corpus, path: str) -> str:
    f = next(f for f in corpus.files if f.path == path)
    return corpus.context[f.start:f.end]


def view_of(corpus: Corpus) -> tuple[CorpusView, DataView]:
    view = CorpusView.from_bundle(str(corpus.index_file), str(corpus.context_file))
    return view, DataView(view.structured, str(corpus.data_file) if corpus.data_file else None)


def test_kind_of_reads_the_name_under_the_compression_suffix() -> None:
    assert file_kinds.kind_of("logs/app.log.gz") == ("", "gz")
    assert file_kinds.kind_of("x/Rows.JSONL.XZ") == ("jsonl", "xz")
    assert file_kinds.kind_of("t.tsv.bz2") == ("tsv", "bz2")
    assert file_kinds.kind_of("a.pdf") == ("pdf", "")
    assert file_kinds.kind_of(".gz") == ("", "")
    assert file_kinds.kind_of("notes.ipynb") == ("notebook", "")


def test_compressed_files_are_read_transparently_and_counted_by_kind(tmp_path: Path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    log = "".join(f"2024-01-01 request {i} ok\n" for i in range(200))
    (root / "app.log.gz").write_bytes(gzip.compress(log.encode()))
    (root / "old.log.bz2").write_bytes(bz2.compress(b"bz2 line\n"))
    (root / "older.log.xz").write_bytes(lzma.compress(b"xz line\n"))
    (root / "rows.jsonl.gz").write_bytes(gzip.compress(b'{"a": 1}\n{"a": 2}\n'))
    (root / "fake.gz").write_bytes(b"just text named .gz\n")  # no gzip magic: read as the text it is
    corpus, warnings = load(root)
    assert warnings == []
    assert text_of(corpus, "app.log.gz") == log
    assert text_of(corpus, "old.log.bz2") == "bz2 line\n" and text_of(corpus, "older.log.xz") == "xz line\n"
    assert text_of(corpus, "fake.gz") == "just text named .gz\n"
    assert "read as 1 bz2, 2 gz, 1 jsonl, 1 xz" in corpus.summary()
    _, dv = view_of(corpus)
    assert list(dv.data["rows.jsonl.gz"]) == [{"a": 1}, {"a": 2}]
    assert [f.size for f in corpus.files if f.path == "app.log.gz"][0] < len(log)  # size on disk, compressed


def test_a_truncated_or_damaged_archive_is_skipped_with_a_warning_naming_it(tmp_path: Path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    whole = gzip.compress(b"line\n" * 10_000)
    (root / "cut.log.gz").write_bytes(whole[: len(whole) // 2])
    (root / "bad.log.xz").write_bytes(b"\xfd7zXZ\x00" + b"\x00garbage" * 10)
    (root / "ok.txt").write_text("fine\n")
    corpus, warnings = load(root)
    assert [f.path for f in corpus.files] == ["ok.txt"]
    assert corpus.report.skipped["corrupt"] == 2
    assert any(w.startswith("skipped cut.log.gz: the gz data is truncated") for w in warnings), warnings
    assert any(w.startswith("skipped bad.log.xz: the xz data is damaged") for w in warnings), warnings


def test_decompressed_size_counts_against_max_file_size(tmp_path: Path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    (root / "bomb.log.gz").write_bytes(gzip.compress(b"A" * 5_000_000 + b"\n"))  # 5 MB from about 5 KB
    (root / "ok.txt").write_text("fine\n")
    assert (root / "bomb.log.gz").stat().st_size < 20_000
    corpus, warnings = load(root, max_file_size=1_000_000)
    assert [f.path for f in corpus.files] == ["ok.txt"] and corpus.report.skipped["too large"] == 1
    assert any("bomb.log.gz: over --max-file-size 1,000,000 bytes once decompressed" in w for w in warnings)
    corpus, warnings = load(root, max_file_size=1_000_000, truncate_large=True, use_cache=False)
    assert len(text_of(corpus, "bomb.log.gz")) == 1_000_000
    assert corpus.report.decoded["truncated"] == 1 and any("truncated bomb.log.gz" in w for w in warnings)


def test_pdf_pages_become_text_with_page_markers(tmp_path: Path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    (root / "report.pdf").write_bytes(make_pdf(["Quarterly report\nRevenue grew 12%", "Risks (see appendix)"]))
    corpus, warnings = load(root)
    assert warnings == []
    assert text_of(corpus, "report.pdf") == ("--- page 1 ---\nQuarterly report\nRevenue grew 12%\n"
                                             "--- page 2 ---\nRisks (see appendix)\n")
    view, _ = view_of(corpus)
    assert view.read_file("report.pdf", 4, 5) == "4: --- page 2 ---\n5: Risks (see appendix)"
    assert view.grep("Risks")[0]["line"] == 5
    assert "read as 1 pdf" in corpus.summary()


def test_encrypted_and_unreadable_pdfs_are_skipped_with_a_warning_naming_them(tmp_path: Path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    plain = make_pdf(["Secret plans"])
    (root / "locked.pdf").write_bytes(encrypt_pdf(plain))
    (root / "broken.pdf").write_bytes(plain[: len(plain) // 3])
    (root / "scan.pdf").write_bytes(make_pdf([""]))
    (root / "ok.txt").write_text("fine\n")
    corpus, warnings = load(root)
    assert [f.path for f in corpus.files] == ["ok.txt"]
    assert corpus.report.skipped["encrypted"] == 1 and corpus.report.skipped["no text"] == 1
    assert corpus.report.skipped["unreadable"] == 1
    assert "skipped locked.pdf: the PDF is encrypted with a password" in warnings
    assert any(w.startswith("skipped broken.pdf: not a readable PDF") for w in warnings), warnings
    assert any(w.startswith("skipped scan.pdf: the PDF has no text layer") for w in warnings), warnings
    assert "Secret plans" not in corpus.context


def test_a_pdf_opened_by_the_empty_password_is_read(tmp_path: Path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    (root / "owner-only.pdf").write_bytes(encrypt_pdf(make_pdf(["Readable anyway"]), password=""))
    corpus, warnings = load(root)
    assert warnings == [] and "Readable anyway" in text_of(corpus, "owner-only.pdf")


def test_without_the_extras_pdf_parquet_and_excel_are_skipped_naming_the_extra(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "c"
    root.mkdir()
    (root / "a.pdf").write_bytes(make_pdf(["text"]))
    (root / "t.parquet").write_bytes(b"PAR1" + b"\x00" * 64 + b"PAR1")
    (root / "b.xlsx").write_bytes(b"PK\x03\x04" + b"\x00" * 64)
    (root / "ok.txt").write_text("fine\n")
    for name in ("pypdf", "pandas"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails as if not installed
    corpus, warnings = load(root, use_cache=False)
    assert [f.path for f in corpus.files] == ["ok.txt"] and corpus.report.skipped["extra not installed"] == 3
    assert "skipped a.pdf: reading PDF files needs pypdf: pip install '/path/to/rlm[documents]' (the documents extra, or the wheel with [documents])" in warnings
    assert ("skipped t.parquet: reading Parquet files needs pandas and pyarrow: pip install '/path/to/rlm[data]' (the data extra, or the wheel with [data])"
            in warnings)
    assert "skipped b.xlsx: reading Excel files needs pandas and openpyxl: pip install '/path/to/rlm[data]' (the data extra, or the wheel with [data])" in warnings



def test_every_install_hint_names_an_extra_the_package_has() -> None:
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    extras = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    for kind, extra in file_kinds.EXTRA_FOR.items():
        assert extra in extras and f"rlm[{extra}]' (the {extra} extra" in file_kinds.missing_reader(kind)
    # the REPL worker imports nothing of corpus: frame()'s hint names the table readers' extra itself
    assert f"rlm[{file_kinds.EXTRA_FOR['parquet']}]" in PANDAS_HINT and file_kinds.EXTRA_FOR['excel'] == file_kinds.EXTRA_FOR['parquet']

def test_a_notebook_becomes_its_cells_and_text_outputs(tmp_path: Path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    (root / "analysis.ipynb").write_text(notebook([
        {"cell_type": "markdown", "source": ["# Churn\n", "We look at churn."]},
        {"cell_type": "code", "source": "df = load()\ndf.shape", "outputs": [
            {"output_type": "stream", "name": "stdout", "text": ["loading...\n"]},
            {"output_type": "execute_result", "data": {"text/plain": ["(120, 4)"], "image/png": "iVBORw0KGgo="},
             "metadata": {}, "execution_count": 1}]},
        {"cell_type": "code", "source": "1/0", "outputs": [
            {"output_type": "error", "ename": "ZeroDivisionError", "evalue": "division by zero",
             "traceback": ["\x1b[0;31mZeroDivisionError\x1b[0m: division by zero"]}]}]))
    (root / "broken.ipynb").write_text('{"cells": [')
    corpus, warnings = load(root)
    assert warnings == []
    assert text_of(corpus, "analysis.ipynb") == (
        "# %% [markdown] cell 1\n# Churn\nWe look at churn.\n\n"
        "# %% [code] cell 2\ndf = load()\ndf.shape\n# Out:\nloading...\n# Out:\n(120, 4)\n\n"
        "# %% [code] cell 3\n1/0\n# Out:\nZeroDivisionError: division by zero\nZeroDivisionError: division by zero\n\n")
    assert text_of(corpus, "broken.ipynb") == '{"cells": ['  # not a notebook's JSON: kept as text
    assert "iVBORw0KGgo" not in corpus.context
    assert corpus.report.kinds["notebook"] == 1


def test_parquet_and_excel_become_csv_text_and_tables(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    pytest.importorskip("openpyxl")
    root = tmp_path / "c"
    root.mkdir()
    df = pd.DataFrame({"id": [1, 2, 3], "name": ["a", "b,c", None], "score": [1.5, None, 3.0],
                       "when": pd.to_datetime(["2024-01-02", "2024-02-03", "2024-03-04"])})
    df.to_parquet(root / "t.parquet")
    with pd.ExcelWriter(root / "book.xlsx") as xw:
        df.drop(columns=["when"]).to_excel(xw, sheet_name="Q1", index=False)
        pd.DataFrame({"k": ["x"]}).to_excel(xw, sheet_name="Notes", index=False)
    corpus, warnings = load(root)
    assert warnings == []
    assert text_of(corpus, "t.parquet") == ('id,name,score,when\n1,a,1.5,2024-01-02T00:00:00\n'
                                            '2,"b,c",,2024-02-03T00:00:00\n3,,3.0,2024-03-04T00:00:00\n')
    assert text_of(corpus, "book.xlsx") == "## sheet Q1\nid,name,score\n1,a,1.5\n2,\"b,c\",\n3,,3.0\n## sheet Notes\nk\nx\n"
    view, dv = view_of(corpus)
    rows = dv.data["t.parquet"]
    assert rows[1] == {"id": 2, "name": "b,c", "score": None, "when": "2024-02-03T00:00:00"}
    assert set(dv.data["book.xlsx"]) == {"Q1", "Notes"}
    recs = [r for r in dv.records("book.xlsx")]
    assert recs[-1] == {"k": "x", "_file": "book.xlsx", "_line": 8, "_sheet": "Notes"}
    assert view.read_file("book.xlsx", 8, 8) == "8: x"
    frame = dv.frame("t.parquet")
    assert str(frame["when"].dtype).startswith("datetime64") and frame["id"].tolist() == [1, 2, 3]
    assert dv.frame("book.xlsx", sheet="Notes")["k"].tolist() == ["x"]
    assert corpus.report.kinds["parquet"] == 1 and corpus.report.kinds["excel"] == 1


def test_bom_and_utf16_csv_headers_are_clean(tmp_path: Path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    (root / "bom.csv").write_bytes(b"\xef\xbb\xbfid,name\n1,Ann\n")
    (root / "wide.tsv").write_bytes("id\tname\n2\tBo\n".encode("utf-16"))
    corpus, _ = load(root)
    _, dv = view_of(corpus)
    assert list(dv.data["bom.csv"]) == [{"id": 1, "name": "Ann"}]
    assert list(dv.data["wide.tsv"]) == [{"id": 2, "name": "Bo"}]
    assert json.dumps(corpus.files[0].dmeta).count("\\ufeff") == 0


def test_pdf_reading_does_not_write_to_stderr(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "c"
    root.mkdir()
    raw = make_pdf(["Odd but readable"]).replace(b"startxref\n", b"startxref\n9")  # a wrong xref offset
    (root / "odd.pdf").write_bytes(raw)
    corpus, _ = load(root)
    assert "Odd but readable" in text_of(corpus, "odd.pdf")  # pypdf repairs it, and says nothing
    assert capfd.readouterr().err == ""
