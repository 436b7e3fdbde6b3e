"""Hostile documents cost at most the decoder's limits and are skipped with a reason, through the
``rlm`` command: a PDF that keeps pypdf busy for hours, a gzip bomb of 10 GiB of zeros and a
nested-JSON memory bomb. Each run completes, answers from the other files, stays within
``--decode-timeout``/``--decode-memory`` and leaves no decoder process behind. Normal documents
decode exactly as the in-process readers decode them."""

from __future__ import annotations

import gzip
import json
import marshal
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import decode, file_kinds, load_corpus, structured
from tests.support.cli import model_flags, run_rlm
from tests.support.data_kit import make_pdf, notebook, pdf_from_objects
from tests.support.fake_llm import FakeLLM, repl

#: What the good files say; the scripted model answers from ``context``.
FACT_TXT = "The launch code is Orion-7."
FACT_PDF = "The backup site is Lyra."
ANSWER_CODE = ("FINAL(' '.join(w for w in ('Orion-7', 'Lyra') if w in context) + ' ' + "
               "str(sum(1 for line in context.splitlines() if line.startswith('==> '))))")


def slow_pdf(pages: int = 20_000, ops: int = 20_000) -> bytes:
    """A ~120 KB PDF whose page tree lists one page ``pages`` times; that page's compressed content
    stream holds ``ops`` text operators. pypdf 7 extracts each listed page again (about a second
    each on a busy core), so the file keeps it busy for hours: effectively a parser loop. (pypdf
    7.1 refuses a page tree that cites itself, the classic loop, so this is the crafted file that
    still hangs it.)"""
    import zlib

    content = zlib.compress(b"BT /F1 12 Tf 14 TL 72 720 Td " + b"(hello world) Tj T* " * ops + b"ET", 9)
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>",
            f"<< /Type /Pages /Kids [{' '.join(['3 0 R'] * pages)}] /Count {pages} >>".encode(),
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> >> "
            b"/Contents 4 0 R >>",
            f"<< /Length {len(content)} /Filter /FlateDecode >>\nstream\n".encode() + content + b"\nendstream",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    return pdf_from_objects(objs)


def gzip_bomb(path: Path, gib: int = 10) -> int:
    """Write ``gib`` GiB of zeros as gzip, streamed: one member of 64 MiB compressed once and
    written again and again (a gzip file may hold many members, read one after another). Returns
    the decompressed size in bytes; the file is about 1/1000 of it."""
    member = gzip.compress(b"\0" * (64 * 1024**2), compresslevel=9)
    with open(path, "wb") as fh:
        for _ in range(gib * 16):
            fh.write(member)
    return gib * 1024**3


def json_bomb(path: Path, items: int = 16_000, depth: int = 200) -> None:
    """A JSON array of ``items`` arrays nested ``depth`` deep (6.4 MB): under json's recursion
    limit, but about 50 bytes of Python objects per byte once parsed (340 MB in rlm's process)."""
    element = "[" * depth + "]" * depth
    path.write_text("[" + ",".join([element] * items) + "]")


def good_files(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "notes.txt").write_text(FACT_TXT + "\n")
    (root / "site.pdf").write_bytes(make_pdf([FACT_PDF]))


def decoder_processes(marker: Path) -> list[int]:
    """Live processes whose home is a folder under ``marker`` (the run's TMPDIR: the decoder's HOME
    is its scratch folder there; rlm's model host, which outlives the run, keeps the user's HOME)."""
    found = []
    needle = b"\0HOME=" + str(marker).encode() + b"/"
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if needle in fh.read():
                    found.append(int(name))
        except OSError:
            continue
    return found


def no_decoder_left(marker: Path) -> bool:
    """True once no decoder process of the run under ``marker`` is alive (bubblewrap's inner
    processes die a few milliseconds after the outer one is killed: allow 3 s)."""
    for _ in range(30):
        if not decoder_processes(marker):
            return True
        time.sleep(0.1)
    return False


def ask(root: Path, llm: FakeLLM, tmp_path: Path, *flags: str) -> tuple[dict, str, float]:
    """``rlm ask ROOT QUESTION --json`` with a scripted answer; ``(document, stderr, seconds)``."""
    llm.script("root", repl(ANSWER_CODE))
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    started = time.monotonic()
    res = run_rlm("ask", str(root), "What are the launch code and the backup site?", *model_flags(llm), "--json",
                  "--no-cache", "-v", *flags, env={"TMPDIR": str(tmp)})
    elapsed = time.monotonic() - started
    assert res.code == 0, res.stderr
    return json.loads(res.stdout), res.stderr, elapsed


def skipped(doc: dict) -> dict[str, str]:
    return {s["path"]: s["reason"] for s in doc["corpus"]["skipped"]}


needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@needs_linux
def test_a_pdf_that_hangs_pypdf_is_stopped_at_the_decode_timeout(tmp_path: Path, llm: FakeLLM) -> None:
    root = tmp_path / "corpus"
    good_files(root)
    (root / "hang.pdf").write_bytes(slow_pdf())
    assert (root / "hang.pdf").stat().st_size < 200_000
    doc, stderr, _ = ask(root, llm, tmp_path, "--decode-timeout", "3")
    assert doc["answer"] == "Orion-7 Lyra 2"  # both good files were read, the PDF was not
    assert skipped(doc) == {"hang.pdf": "decode timeout"}
    assert "skipped hang.pdf: decoding it took over --decode-timeout 3 s (the decoder was stopped)" in stderr
    assert "1 decode timeout" in stderr  # the summary line
    # (the PDF keeps pypdf busy for hours: that the run ended at all is the stop, the words say why;
    # no bound on the time a loaded machine takes)
    assert no_decoder_left(tmp_path / "tmp")


@needs_linux
def test_a_gzip_bomb_is_skipped_after_expanding_at_most_max_file_size(tmp_path: Path, llm: FakeLLM) -> None:
    root = tmp_path / "corpus"
    good_files(root)
    size = gzip_bomb(root / "zeros.log.gz")
    on_disk = (root / "zeros.log.gz").stat().st_size
    assert size == 10 * 1024**3 and on_disk < 12 * 1024**2  # 10 GiB in about 10 MiB
    doc, stderr, elapsed = ask(root, llm, tmp_path, "--max-file-size", "16M")
    assert doc["answer"] == "Orion-7 Lyra 2"
    assert skipped(doc) == {"zeros.log.gz": "too large"}
    assert ("skipped zeros.log.gz: over --max-file-size 16,777,216 bytes once decompressed" in stderr), stderr
    assert elapsed < 90, elapsed  # expanding 10 GiB alone would take about a minute of CPU
    assert no_decoder_left(tmp_path / "tmp")


@needs_linux
def test_a_nested_json_memory_bomb_is_skipped_at_the_decode_memory_limit(tmp_path: Path, llm: FakeLLM) -> None:
    root = tmp_path / "corpus"
    good_files(root)
    json_bomb(root / "bomb.json")
    (root / "deep.json").write_text("[" * 1_500_000 + "]" * 1_500_000)  # past json's recursion limit
    doc, stderr, _ = ask(root, llm, tmp_path, "--decode-memory", "128M")
    assert doc["answer"] == "Orion-7 Lyra 3"  # deep.json stays as text, with its parse error
    assert skipped(doc) == {"bomb.json": "decode memory"}
    assert "skipped bomb.json: decoding it needed over --decode-memory 128M (the decoder was stopped)" in stderr
    assert no_decoder_left(tmp_path / "tmp")


@needs_linux
def test_rlm_index_stays_within_the_decode_limits(tmp_path: Path) -> None:
    """The peak memory of ``rlm index`` and every process under it (the decoder included) stays far
    under what parsing the bomb takes in-process (340 MB)."""
    root = tmp_path / "corpus"
    good_files(root)
    json_bomb(root / "bomb.json")
    probe = ("import resource, subprocess, sys, time\n"
             "t = time.monotonic()\n"
             "p = subprocess.run([sys.executable, '-m', 'rlm_cli', 'index', sys.argv[1], '--no-cache', "
             "'--decode-memory', '128M'], capture_output=True, text=True)\n"
             "print(p.returncode, time.monotonic() - t, "
             "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)\n"
             "sys.stderr.write(p.stderr)\n")
    env = dict(os.environ, TMPDIR=str(tmp_path))
    res = subprocess.run([sys.executable, "-c", probe, str(root)], capture_output=True, text=True, env=env,
                         timeout=240)
    code, seconds, peak_mib = res.stdout.split()
    assert code == "0", res.stderr
    assert "skipped 1 decode memory; read as 1 pdf" in res.stderr
    assert float(seconds) < 60
    assert int(peak_mib) < 200, peak_mib  # rlm index alone uses about 60 MiB; the decoder at most 128 MiB
    assert no_decoder_left(tmp_path)


def test_normal_documents_decode_as_the_in_process_readers_do(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    pytest.importorskip("openpyxl")
    root = tmp_path / "docs"
    root.mkdir()
    pdf = make_pdf(["Quarterly report\nRevenue grew 12%", "Risks (see appendix)"])
    (root / "report.pdf").write_bytes(pdf)
    df = pd.DataFrame({"id": [1, 2, 3], "name": ["a", "b,c", None], "score": [1.5, None, 3.0],
                       "when": pd.to_datetime(["2024-01-02", "2024-02-03", "2024-03-04"])})
    df.to_parquet(root / "t.parquet")
    with pd.ExcelWriter(root / "book.xlsx") as xw:
        df.drop(columns=["when"]).to_excel(xw, sheet_name="Q1", index=False)
        pd.DataFrame({"k": ["x"]}).to_excel(xw, sheet_name="Notes", index=False)
    nb = notebook([{"cell_type": "markdown", "source": ["# Churn\n"]},
                   {"cell_type": "code", "source": "1 + 1", "outputs": [
                       {"output_type": "execute_result", "data": {"text/plain": ["2"]}, "metadata": {},
                        "execution_count": 1}]}])
    (root / "a.ipynb").write_text(nb)
    rows = "".join(json.dumps({"n": i, "tag": f"t{i % 7}"}) + "\n" for i in range(40_000))  # over 1 MiB
    (root / "big.jsonl").write_text(rows)
    (root / "rows.jsonl.gz").write_bytes(gzip.compress(b'{"a": 1}\n{"a": 2}\n'))
    decoder = decode.decoder(CorpusOptions())
    corpus = load_corpus([str(root)], CorpusOptions(use_cache=False))
    assert decoder.starts == 1  # one child served all six files
    text = {f.path: corpus.context[f.start:f.end] for f in corpus.files}
    meta = {f.path: f.dmeta for f in corpus.files}
    cap = CorpusOptions().max_file_size
    assert text["report.pdf"] == file_kinds.pdf_text(pdf, "report.pdf")
    assert text["a.ipynb"] == file_kinds.notebook_text(nb)
    data = corpus.data_file.read_bytes() if corpus.data_file else b""
    for name, kind in (("t.parquet", "parquet"), ("book.xlsx", "excel")):
        want_text, want_payload = file_kinds.table_file(kind, (root / name).read_bytes(), name, cap, False)
        assert text[name] == want_text
        assert meta[name] == structured.summarize(want_payload)
    want, want_meta = structured.parse("jsonl", rows)
    assert text["big.jsonl"] == rows and meta["big.jsonl"] == want_meta
    f = next(f for f in corpus.files if f.path == "big.jsonl")
    assert marshal.loads(data[f.dstart:f.dend]) == want  # the payload the worker loads
    assert text["rows.jsonl.gz"] == '{"a": 1}\n{"a": 2}\n' and meta["rows.jsonl.gz"]["rows"] == 2
    assert "read as 1 excel, 1 gz, 2 jsonl, 1 notebook, 1 parquet, 1 pdf" in corpus.summary()


def test_plain_text_never_starts_the_decoder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "src"
    root.mkdir()
    for i in range(20):
        (root / f"m{i}.py").write_text(f"x = {i}\n")
    (root / "small.json").write_text('{"a": [1, 2]}')  # under CHILD_PARSE_BYTES: parsed in-process
    def refuse(self: decode.Decoder) -> None:
        raise AssertionError("the decoder was started for plain text")
    monkeypatch.setattr(decode.Decoder, "_start", refuse)
    corpus = load_corpus([str(root)], CorpusOptions(use_cache=False))
    assert len(corpus.files) == 21 and not corpus.report.skipped


@needs_linux
def test_the_process_level_confines_the_decoder_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without bubblewrap the child is a process under Landlock, seccomp and rlimits: a hanging
    PDF is still stopped, and the next document gets a fresh child."""
    monkeypatch.setattr(decode, "_level", lambda: "process")
    root = tmp_path / "c"
    good_files(root)
    (root / "hang.pdf").write_bytes(slow_pdf())
    (root / "zz.pdf").write_bytes(make_pdf(["after the hang"]))
    # (the PDF keeps pypdf busy for hours: that the load ends at all is the stop)
    corpus = load_corpus([str(root)], CorpusOptions(use_cache=False, decode_timeout=2.0))
    assert corpus.report.skipped == {"decode timeout": 1}
    assert "after the hang" in corpus.context and FACT_PDF in corpus.context


@needs_linux
@pytest.mark.parametrize("level", ["bwrap", "process"])
def test_the_decoder_cannot_reach_the_network_or_other_files(tmp_path: Path, level: str) -> None:
    """The child's confinement at each level, probed by code run right after ``decode_child._confine``
    (what a parser bug that runs code in the child would get): no file outside Python and the
    system folders, no network, nothing written."""
    from rlm_cli.sandbox import launcher, probes, users

    if level == "bwrap" and not probes.bwrap_available():
        pytest.skip("bubblewrap is not available here")
    if level == "process" and probes.confinement().landlock_abi < 1:
        pytest.skip("no Landlock in this kernel: the process level cannot hide files")
    public = tmp_path / "public"  # readable and writable by anyone: only the confinement stops the child
    public.mkdir()
    public.chmod(0o777)
    tmp_path.chmod(0o755)
    secret = public / "secret.txt"
    secret.write_text("top secret")
    secret.chmod(0o644)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    probe = ("import socket\nout = []\n"
             f"try:\n    open({str(secret)!r}).read(); out.append('read')\nexcept OSError: out.append('no-read')\n"
             f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=5); out.append('net')\n"
             "except OSError: out.append('no-net')\n"
             f"try:\n    open({str(public / 'w.txt')!r}, 'w').write('x'); out.append('write')\n"
             "except OSError: out.append('no-write')\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    box = decode._sandbox_class()(level, launcher.WorkerSpec(), socket_path=str(scratch / "none"), token="")
    box.scratch = scratch
    box.drop = drop = users.plan_drop(level)[0]
    if drop and drop.uid != os.geteuid() and level != "bwrap":
        os.chown(scratch, drop.uid, drop.gid)
    argv = box.command(0, 0)
    boot = argv.index("-c") + 1
    config = {"drop_to": [drop.uid, drop.gid] if drop else None, "keep_caps": list(drop.keep_caps) if drop else [],
              "harden": True, "landlock": box.landlock_policy(), "seccomp": probes.confinement().seccomp,
              "limits": {"RLIMIT_AS": 512 * 1024**2}}
    argv[boot] = (argv[boot].split("from rlm_cli")[0] + "import os; from rlm_cli.corpus.decode_child import "
                  f"_confine; _confine({config!r}, os.getppid())\n" + probe + "print(' '.join(out))")
    try:
        res = subprocess.run(argv[:boot + 1], capture_output=True, text=True, timeout=60, cwd="/")
    finally:
        server.close()
    assert res.stdout.split() == ["no-read", "no-net", "no-write"], (res.stdout, res.stderr)
    assert not (public / "w.txt").exists()
