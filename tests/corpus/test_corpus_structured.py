"""Parsing JSON, JSONL and CSV/TSV into the payloads the REPL worker loads, broken files included."""

from __future__ import annotations

import gzip
import json
import marshal
from array import array
from pathlib import Path
from typing import Any

from rlm_cli.config import CorpusOptions
from rlm_cli.corpus import accesslog, structured
from rlm_cli.corpus.store import load_corpus
from rlm_cli.corpus.structured import MISSING, parse
from rlm_cli.sandbox.corpus_helpers import CorpusView
from rlm_cli.sandbox.data_helpers import DataView, Rows


def rows_of(payload: dict[str, Any], i: int = 0) -> Rows:
    """The table as the worker sees it, after the same marshal round trip as the data file."""
    return Rows("f", marshal.loads(structured.encode(payload))["tables"][i])


def lines_of(table: dict[str, Any]) -> list[int]:
    a = array("I")
    a.frombytes(table["lines"])
    return list(a)


def test_jsonl_keeps_a_bad_line_as_an_error_entry_with_its_line_number() -> None:
    text = '{"id": 1, "s": "open"}\n\n{"id": 2, "s": "closed"}\n{"id": 3, "s": \n[1, 2]\n{"s": "x", "id": 4}\n'
    payload, summary = parse("jsonl", text)
    rows = rows_of(payload)
    assert len(rows) == 5  # the blank line is no row; the bad line is one
    assert list(rows) == [{"id": 1, "s": "open"}, {"id": 2, "s": "closed"},
                          {"_error": "Expecting value at column 16", "_line": 4, "_text": '{"id": 3, "s":'},
                          [1, 2], {"s": "x", "id": 4}]
    assert lines_of(payload["tables"][0]) == [1, 3, 4, 5, 6]  # lines in the file, the blank one counted
    assert summary["rows"] == 5 and summary["errors"] == 1
    assert summary["first_error"] == [4, "Expecting value at column 16"]
    assert summary["keys"] == ["id", "s"] and summary["sample"] == [["id", "1"], ["s", '"open"']]


def test_jsonl_rows_with_different_keys_keep_exactly_their_keys() -> None:
    text = "".join(json.dumps(r) + "\n" for r in [{"a": 1}, {"b": {"nested": [1, 2]}}, {"a": 3, "b": None}, {}])
    payload, summary = parse("jsonl", text)
    assert list(rows_of(payload)) == [{"a": 1}, {"b": {"nested": [1, 2]}}, {"a": 3, "b": None}, {}]
    assert payload["tables"][0]["full"] is False and summary["nkeys"] == 2


def test_repeated_short_strings_are_stored_once() -> None:
    text = "".join(json.dumps({"status": s}) + "\n" for s in ["open", "closed"] * 500)
    col = marshal.loads(structured.encode(parse("jsonl", text)[0]))["tables"][0]["cols"][0]
    assert len(col) == 1000 and len({id(v) for v in col}) == 2


def test_a_sparse_jsonl_file_is_stored_as_row_dicts() -> None:
    text = "".join(json.dumps({f"k{i}": i, "id": i}) + "\n" for i in range(200))  # 201 keys, 2 per row
    payload, summary = parse("jsonl", text)
    table = payload["tables"][0]
    assert "rows" in table and "cols" not in table
    rows = rows_of(payload)
    assert rows[7] == {"k7": 7, "id": 7} and len(rows) == 200 and summary["nkeys"] == 201


def test_csv_values_are_strings_unless_the_column_is_clearly_numeric() -> None:
    text = "id,zip,price,code,note,when\n1,02134,1.5,7,hello,2024-01-02\n2,10001,,08,,2024-02-03\n-3,94105,2e3,9,x,\n"
    payload, summary = parse("csv", text)
    rows = list(rows_of(payload))
    assert rows[0] == {"id": 1, "zip": "02134", "price": 1.5, "code": "7", "note": "hello", "when": "2024-01-02"}
    assert rows[1] == {"id": 2, "zip": "10001", "price": None, "code": "08", "note": "", "when": "2024-02-03"}
    assert rows[2]["id"] == -3 and rows[2]["price"] == 2000.0
    assert summary["rows"] == 3 and "ragged" not in summary and "delimiter" not in summary


def test_ragged_csv_rows_are_filled_or_keep_their_surplus() -> None:
    text = "a,b,c\n1,2,3\n4,5\n6,7,8,9,10\n"
    payload, summary = parse("csv", text)
    assert list(rows_of(payload)) == [{"a": 1, "b": 2, "c": 3}, {"a": 4, "b": 5, "c": None},
                                      {"a": 6, "b": 7, "c": 8, "_extra": ["9", "10"]}]
    assert summary["ragged"] == 2


def test_the_delimiter_is_sniffed_when_the_extension_is_wrong() -> None:
    semi, s1 = parse("csv", "name;amount;city\nAnn;1,5;Oslo\nBo;2,25;Rome\nCy;3;Nice\n")
    assert list(rows_of(semi))[1] == {"name": "Bo", "amount": "2,25", "city": "Rome"}
    assert s1["delimiter"] == ";"
    commas, s2 = parse("tsv", "a,b\n1,2\n3,4\n")
    assert list(rows_of(commas)) == [{"a": 1, "b": 2}, {"a": 3, "b": 4}] and s2["delimiter"] == ","
    tabs, s3 = parse("tsv", "a\tb, c\n1\tx, y\n")  # commas inside fields do not fool it
    assert list(rows_of(tabs)) == [{"a": 1, "b, c": "x, y"}] and "delimiter" not in s3


def test_quoted_fields_spanning_lines_keep_the_line_where_each_row_starts() -> None:
    text = 'id,text\n1,"first\nsecond"\n2,plain\n\n3,"a ""quote"""\n'
    payload, _ = parse("csv", text)
    assert list(rows_of(payload)) == [{"id": 1, "text": "first\nsecond"}, {"id": 2, "text": "plain"},
                                      {"id": 3, "text": 'a "quote"'}]
    assert lines_of(payload["tables"][0]) == [2, 4, 6]


def test_blank_and_repeated_header_names_are_made_unique() -> None:
    payload, _ = parse("csv", "name,,name, name ,x\n1,2,3,4,5\n")
    assert payload["tables"][0]["keys"] == ["name", "column_2", "name_2", "name_3", "x"]


def test_json_object_array_and_invalid_file() -> None:
    obj, s = parse("json", '{"version": "1.2", "deps": ["a", "b"], "n": 3}')
    assert obj["value"] == {"version": "1.2", "deps": ["a", "b"], "n": 3}
    assert s["shape"] == "object with 3 keys" and s["sample"][0] == ["version", '"1.2"']
    arr, s = parse("json", '[\n  {"id": 1},\n  {"id": 2,\n   "x": [1,\n 2]},\n  {"id": 3}\n]\n')
    assert arr["value"] == [{"id": 1}, {"id": 2, "x": [1, 2]}, {"id": 3}]
    assert lines_of({"lines": arr["lines"]}) == [2, 3, 6]  # where each element starts
    assert s["shape"] == "array of 3 objects" and s["rows"] == 3
    bad, s = parse("json", '{\n  "a": 1,\n  "b": \n}\n')
    assert bad == {"kind": "json", "error": "Expecting value: line 4 column 1 (char 20)", "line": 4}
    assert s["error"].startswith("Expecting value")


def test_a_json_file_holding_one_object_per_line_is_read_as_jsonl() -> None:
    payload, summary = parse("json", '{"a": 1}\n{"a": 2}\n')
    assert payload["kind"] == "jsonl" and summary["misnamed"] is True
    assert list(rows_of(payload)) == [{"a": 1}, {"a": 2}]


def test_values_marshal_cannot_hold_become_an_error_not_a_crash() -> None:
    deep: Any = []
    for _ in range(3000):
        deep = [deep]
    blob = structured.encode({"kind": "json", "value": deep, "lines": None})
    assert "error" in marshal.loads(blob)
    _, s = parse("json", "[" * 100_000 + "]" * 100_000)  # deeper than the JSON parser goes
    assert "error" in s
    assert MISSING is ...


def test_a_long_field_is_kept_and_an_unreadable_line_is_reported_where_parsing_stopped() -> None:
    big = "x" * 300_000  # over the csv module's default field limit (131,072)
    payload, summary = parse("csv", f'id,text\n1,"{big}"\n2,after\n')
    assert [r["text"] for r in rows_of(payload)] == [big, "after"] and "errors" not in summary
    payload, summary = parse("csv", 'id,text\n1,ok\n2,"unclosed\n3,lost\n4,lost\n')
    assert list(rows_of(payload))[1] == {"id": 2, "text": "unclosed\n3,lost\n4,lost\n"}  # what csv reads
    assert summary["errors"] == 1
    assert summary["first_error"] == [3, 'an unclosed " makes the row at line 3 run to the end of the file']


ACCESS_LINES = [
    '203.0.113.7 - - [14/Sep/2026:06:00:41 +0200] "GET /index.html HTTP/1.1" 200 5120 "-" "curl/8.5"',
    '198.51.100.3 - ann [14/Sep/2026:06:01:57 +0200] "POST /api/login HTTP/2.0" 401 - "https://x.example/" "Mozilla/5.0"',
    '192.0.2.1 - - [14/Sep/2026:06:02:00 +0000] "\\x16\\x03\\x01" 400 157',  # a probe's garbage, Common format
]


def test_an_access_log_is_recognised_by_its_lines_not_its_name() -> None:
    text = "\n".join(ACCESS_LINES) + "\n"
    assert accesslog.sniff(text) and accesslog.sniff("\n\n" + text)
    assert not accesslog.sniff("\n".join(ACCESS_LINES[:2]))  # two lines are too few to tell
    assert not accesslog.sniff("import os\n" + text)  # the first line decides
    assert not accesslog.sniff(text + "".join(f"other line {i}\n" for i in range(20)))
    assert not accesslog.sniff("") and not accesslog.sniff('{"a": 1}\n' * 5)


def test_an_access_log_becomes_rows_with_typed_status_and_size_and_error_rows() -> None:
    text = "\n".join([*ACCESS_LINES, "", "not a request line"]) + "\n"
    payload, summary = accesslog.parse(text)
    rows = rows_of(payload)
    assert len(rows) == 4 and lines_of(payload["tables"][0]) == [1, 2, 3, 5]
    assert rows[0] == {"ip": "203.0.113.7", "time": "14/Sep/2026:06:00:41 +0200", "method": "GET",
                       "path": "/index.html", "status": 200, "size": 5120, "referer": "-", "agent": "curl/8.5",
                       "user": "-", "ident": "-", "protocol": "HTTP/1.1", "extra": None}
    assert rows[1]["status"] == 401 and rows[1]["size"] is None and rows[1]["user"] == "ann"
    assert rows[2]["method"] is None and rows[2]["status"] == 400 and rows[2]["agent"] is None
    assert rows[3] == {"_error": "not an access log line", "_line": 5, "_text": "not a request line"}
    assert summary["kind"] == "accesslog" and summary["rows"] == 4 and summary["errors"] == 1
    assert [k for k, _ in summary["sample"]] == ["ip", "time", "method", "path", "status", "size"]


def test_access_log_variants_escapes_and_compression(tmp_path: Path) -> None:
    nginx = ('10.0.0.1 - - [14/Sep/2026:06:00:41 +0000] "GET /a HTTP/1.1" 200 12 "-" "Mozilla \\"X\\" 1.0" '
             '"203.0.113.9, 10.0.0.2"')
    apache_d = '10.0.0.1 - - [14/Sep/2026:06:00:41 +0000] "GET /b HTTP/1.1" 304 - "-" "curl/8" 1532'
    rows = rows_of(accesslog.parse("\n".join([nginx, apache_d, nginx]) + "\n")[0])
    assert rows[0]["agent"] == 'Mozilla "X" 1.0' and rows[0]["extra"] == '"203.0.113.9, 10.0.0.2"'
    assert rows[1]["status"] == 304 and rows[1]["size"] is None and rows[1]["extra"] == "1532"
    # A quoted field that never closes is no row (and costs one pass, not memory per character).
    assert accesslog._LINE.match('1.2.3.4 - - [x] "' + "a" * 1_000_000) is None
    # Rotated and compressed logs are read as access logs too.
    root = tmp_path / "logs"
    root.mkdir()
    (root / "access.log.2.gz").write_bytes(gzip.compress(("\n".join([nginx] * 5) + "\n").encode()))
    corpus = load_corpus([str(root)], CorpusOptions(use_cache=False))
    view = CorpusView.from_bundle(str(corpus.index_file), str(corpus.context_file))
    recs = list(DataView(view.structured, str(corpus.data_file)).records("*.gz"))
    assert len(recs) == 5 and recs[0]["path"] == "/a" and recs[0]["_file"] == "access.log.2.gz"
