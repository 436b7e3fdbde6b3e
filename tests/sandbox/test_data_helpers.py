"""``data``, ``records()`` and ``frame()`` as model code sees them: from a real bundle, in process and
inside the sandboxed worker."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import load_corpus
from rlm_cli.corpus.model import Corpus
from rlm_cli.sandbox.corpus_helpers import CorpusView
from rlm_cli.sandbox.data_helpers import PANDAS_HINT, DataView, Records, Rows
from rlm_cli.sandbox.launcher import Sandbox, WorkerSpec
from tests.support.data_kit import tickets
from tests.support.sandbox_kit import all_levels


@pytest.fixture
def corpus(tmp_path: Path) -> Corpus:
    root = tmp_path / "corpus"
    rows = tickets(50)
    lines = [json.dumps(r) for r in rows]
    lines.insert(10, "{oops")  # line 11 is not JSON
    lines.insert(20, "")  # a blank line
    (root / "exports").mkdir(parents=True)
    (root / "exports" / "tickets.jsonl").write_text("\n".join(lines) + "\n")
    (root / "users.csv").write_text('id,name,bio\n1,Ann,"line one\nline two"\n2,Bo,short\n3,Cy,\n')
    (root / "config.json").write_text(json.dumps({"name": "svc", "retries": 3, "hosts": ["a", "b"]}, indent=2))
    (root / "list.json").write_text('[\n {"id": "x"},\n 42\n]\n')
    (root / "README.md").write_text("# not data\n")
    return load_corpus([str(root)], CorpusOptions())


def views(corpus: Corpus) -> tuple[CorpusView, DataView]:
    view = CorpusView.from_bundle(str(corpus.index_file), str(corpus.context_file))
    return view, DataView(view.structured, str(corpus.data_file))


def test_data_maps_each_structured_file_to_its_parsed_value_loaded_on_use(corpus: Corpus) -> None:
    view, dv = views(corpus)
    data = dv.data
    assert list(data) == ["config.json", "exports/tickets.jsonl", "list.json", "users.csv"]
    assert "README.md" not in data and len(data) == 4
    assert dv._loaded == {}  # nothing read yet
    assert "exports/tickets.jsonl (jsonl, 51 rows)" in repr(data)
    assert data["config.json"] == {"name": "svc", "retries": 3, "hosts": ["a", "b"]}
    assert list(dv._loaded) == ["config.json"]  # only what was asked for
    assert data["list.json"] == [{"id": "x"}, 42]
    tickets_rows = data["tickets.jsonl"]  # a unique suffix is enough
    assert tickets_rows is data["exports/tickets.jsonl"] and isinstance(tickets_rows, Rows)
    assert len(tickets_rows) == 51 and tickets_rows[0] == tickets(1)[0]
    assert tickets_rows[10] == {"_error": "Expecting property name enclosed in double quotes at column 2",
                                "_line": 11, "_text": "{oops"}
    assert tickets_rows[-1]["id"] == 50 and [r["id"] for r in tickets_rows[49:]] == [49, 50]
    assert tickets_rows.column("status")[:3] == [t["status"] for t in tickets(3)]
    assert list(data["users.csv"]) == [{"id": 1, "name": "Ann", "bio": "line one\nline two"},
                                       {"id": 2, "name": "Bo", "bio": "short"}, {"id": 3, "name": "Cy", "bio": ""}]
    with pytest.raises(KeyError, match="no structured file 'tickets.csv'.*did you mean"):
        data["tickets.csv"]
    with pytest.raises(IndexError, match="has 51 rows"):
        tickets_rows[51]
    with pytest.raises(KeyError, match="no column 'nope'"):
        tickets_rows.column("nope")
    assert tickets_rows == list(tickets_rows) and "51 rows of exports/tickets.jsonl" in repr(tickets_rows)


def test_records_carry_file_and_line_that_read_file_agrees_with(corpus: Corpus) -> None:
    view, dv = views(corpus)
    recs = dv.records()
    assert isinstance(recs, Records) and dv._loaded == {}  # len needs nothing loaded
    assert len(recs) == 51 + 3 + 2  # tickets (with the bad line), users, the JSON array's elements
    assert not dv._loaded
    every = list(recs)
    assert len(every) == len(recs)
    for r in every:
        shown = view.read_file(r["_file"], r["_line"], r["_line"])
        key = "id" if "id" in r else "_value" if "_value" in r else "_text"
        assert str(r[key]) in shown, (r, shown)
    bad = [r for r in every if "_error" in r]
    assert bad == [{"_error": "Expecting property name enclosed in double quotes at column 2", "_line": 11,
                    "_text": "{oops", "_file": "exports/tickets.jsonl"}]
    assert [r["_line"] for r in every if r["_file"] == "users.csv"] == [2, 4, 5]  # a quoted field spans 2-3
    assert {"_value": 42, "_file": "list.json", "_line": 3} in every
    assert len(dv.records("*.csv")) == 3 and len(dv.records("exports/*")) == 51 and len(dv.records("*.md")) == 0
    assert recs[51] == every[51] and recs[-1] == every[-1] and recs[49:53] == every[49:53]
    assert recs[::20] == every[::20]
    expected = sum(1 for t in tickets(50) if t["status"] == "open")
    assert sum(1 for r in recs if r.get("status") == "open") == expected
    assert "56 rows from 3 files" in repr(recs)


def test_frame_builds_a_dataframe_or_says_how_to_get_pandas(corpus: Corpus, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pandas")
    _, dv = views(corpus)
    df = dv.frame("tickets.jsonl")
    assert len(df) == 50 and str(df["id"].dtype) == "int64"  # the bad line is left out
    assert list(df.columns) == ["id", "status", "priority", "team", "subject", "minutes"]
    assert dv.frame("users.csv")["name"].tolist() == ["Ann", "Bo", "Cy"]
    assert dv.frame("config.json").shape[0] == 2  # a JSON object with a list: one row per host
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"pip install '/path/to/rlm\[data\]'"):
        dv.frame("users.csv")


def test_a_corpus_without_structured_files_has_empty_data(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("plain\n")
    corpus = load_corpus([str(tmp_path / "a.txt")], CorpusOptions())
    assert corpus.data_file is None
    view = CorpusView.from_bundle(str(corpus.index_file), str(corpus.context_file))
    dv = DataView(view.structured, None)
    assert len(dv.data) == 0 and len(dv.records()) == 0 and "no structured files" in repr(dv.data)


@pytest.mark.parametrize("level", all_levels())
def test_the_worker_namespace_has_data_records_and_frame(level: str, corpus: Corpus) -> None:
    sock_dir = tempfile.mkdtemp(prefix="rlm-test-sock-")
    os.chmod(sock_dir, 0o711)
    spec = WorkerSpec(index_file=corpus.index_file, context_file=corpus.context_file, data_file=corpus.data_file)
    assert corpus.data_file is not None and corpus.data_file.name.startswith("data-")
    try:
        with Sandbox(level, spec, socket_path=os.path.join(sock_dir, "lm.sock"), token="t") as box:
            res = box.execute("from collections import Counter\n"
                              "c = Counter(r['status'] for r in records('*.jsonl') if 'status' in r)\n"
                              "print(len(records()), dict(sorted(c.items())), data['users.csv'][1]['name'])\n"
                              "data = None; records = None")
            assert res.ok, res.output
            counts: dict[str, int] = {}
            for t in tickets(50):
                counts[t["status"]] = counts.get(t["status"], 0) + 1
            first, note = res.output.split("\n", 1)
            assert first == f"56 {dict(sorted(counts.items()))} Bo"
            assert "reassigned `records`" in note  # the model is told its rebinding is undone
            res = box.execute("print(type(data).__name__, len(records('*.csv')))")  # rebinding is undone
            assert res.output == "DataMap 3\n", res.output
            try:
                import pandas  # noqa: F401 - the worker runs the same Python: pandas is there too
                res = box.execute("df = frame('tickets.jsonl')\nprint(df.shape, int((df.status == 'open').sum()))")
                assert res.output == f"(50, 6) {counts['open']}\n", res.output
            except ImportError:
                pass
            res = box.execute("import sys\nsys.modules['pandas'] = None\nframe('users.csv')")
            assert not res.ok and PANDAS_HINT in res.output
    finally:
        os.rmdir(sock_dir)


def test_a_records_row_names_its_keys_when_one_is_missing(corpus: Corpus) -> None:
    _, dv = views(corpus)
    row = dv.records("*.csv")[0]
    assert row.get("outcome") is None  # get keeps its default
    with pytest.raises(KeyError, match=r"'outcome': this row has no such key; its keys are \['id', 'name', 'bio'\]"):
        row["outcome"]
    assert all(isinstance(r, dict) for r in dv.records())


def test_an_unreadable_row_says_so_and_a_glob_without_rows_is_noted(corpus: Corpus) -> None:
    _, dv = views(corpus)
    bad = dv.records("*.jsonl")[10]
    with pytest.raises(KeyError, match=r"'status': line 11 of exports/tickets.jsonl could not be read as a row"):
        bad["status"]
    assert dv.unmatched == [] and len(dv.records("./exports/tickets.jsonl")) == 51  # ./ is dropped
    assert len(dv.records("orders.csv")) == 0 and len(dv.records("nope/*.jsonl")) == 0
    note = dv.explain_unmatched()
    assert note.startswith("[note: records('orders.csv') matched no data file, so it gave no rows (1 more such calls);")
    assert "the files with rows are 'exports/tickets.jsonl', 'list.json', 'users.csv'" in note
    assert dv.explain_unmatched() == ""
