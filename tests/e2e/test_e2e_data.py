"""End-to-end: the root model answers a counting question over 20,000 JSONL tickets and a CSV from
``records()``, through the real ``rlm`` command, worker and scripted model server."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from tests.support.cli import model_flags, run_rlm
from tests.support.data_kit import tickets, write_jsonl
from tests.support.fake_llm import FakeLLM, last_user, question_message, repl


def make_helpdesk(root: Path) -> tuple[int, int]:
    """20,000 tickets (one line broken) and a CSV of teams; returns (the exact answer, bad lines)."""
    rows = tickets(20_000)
    write_jsonl(root / "exports" / "tickets.jsonl", rows)
    lines = (root / "exports" / "tickets.jsonl").read_text().splitlines(keepends=True)
    lines[7_000] = lines[7_000][:25] + "\n"  # a line cut in the middle, as an export crash leaves it
    (root / "exports" / "tickets.jsonl").write_text("".join(lines))
    with open(root / "teams.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["team", "region", "lead"])
        for i in range(1, 13):
            w.writerow([f"team-{i}", "EU" if i % 3 == 0 else "US", f"Lead {i}"])
    eu = {f"team-{i}" for i in range(1, 13) if i % 3 == 0}
    good = rows[:7_000] + rows[7_001:]
    answer = sum(1 for t in good if t["status"] == "open" and t["priority"] == "urgent" and t["team"] in eu)
    return answer, 1


def test_counting_question_answered_exactly_from_records(tmp_path: Path, llm: FakeLLM) -> None:
    root = tmp_path / "helpdesk"
    answer, bad = make_helpdesk(root)
    llm.script("root",
               repl("print(data)\nprint(len(records()), records('*.csv')[0])"),
               repl("eu = {r['team'] for r in records('teams.csv') if r['region'] == 'EU'}\n"
                    "bad = [r['_line'] for r in records('*.jsonl') if '_error' in r]\n"
                    "n = sum(1 for r in records('*.jsonl') if r.get('status') == 'open' "
                    "and r.get('priority') == 'urgent' and r.get('team') in eu)\n"
                    "print(n, bad)"),
               repl("FINAL(str(n))"))
    res = run_rlm("ask", str(root), "How many open urgent tickets belong to EU teams?", *model_flags(llm), "--json")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["answer"] == str(answer) and doc["status"] == "final"
    assert answer > 50  # a real count, not a trivial one
    root_calls = llm.chat_requests("root")
    first = question_message(root_calls[0])
    # The root model's first view describes the data without showing it.
    assert "Structured files: 2 (1 jsonl (20,000 rows), 1 csv (12 rows))" in first
    assert "exports/tickets.jsonl: jsonl; 20,000 rows; 1 bad line (first: line 7001" in first
    assert 'keys: id=1, status="' in first and 'teams.csv: csv; 12 rows; keys: team="team-1", region="US"' in first
    assert len(first) < 4_000
    assert "20012 {'team': 'team-1', 'region': 'US', 'lead': 'Lead 1', '_file': 'teams.csv', '_line': 2}" in \
        last_user(root_calls[1])
    assert f"{answer} [{7_001}]" in last_user(root_calls[2])
    assert "read as 1 csv, 1 jsonl" in res.stderr
    # A second run parses nothing: the bundle, parsed data included, comes from the cache.
    llm.script("root", repl("print(len(records()))"), repl("FINAL(str(len(records())))"))
    again = run_rlm("ask", str(root), "How many records?", *model_flags(llm), "--json", "-v")
    assert again.code == 0, again.stderr
    assert json.loads(again.stdout)["answer"] == "20012" and "(all from cache)" in again.stderr


def test_an_access_log_is_rows_in_records(tmp_path: Path, llm: FakeLLM) -> None:
    """A plain text file in the Common/Combined Log Format (any name) is parsed into rows, as a
    JSONL file is: a count over requests is one comprehension, not a regex of the log format."""
    root = tmp_path / "logs"
    root.mkdir()
    lines = [f'10.0.0.{i % 9} - {"-" if i % 4 else "ann"} [14/Sep/2026:06:{i % 60:02d}:00 +0200] '
             f'"{"POST" if i % 3 == 0 else "GET"} /api/v{i % 2} HTTP/1.1" {404 if i % 7 == 0 else 200} '
             f'{"-" if i % 10 == 0 else 100 + i} "-" "curl/8"' for i in range(300)]
    lines[50] = "garbage that is no request"
    (root / "web-1").write_text("\n".join(lines) + "\n")  # no extension: found by its lines
    (root / "notes.txt").write_text("GET /api/v1 was slow on Monday\n")
    want = sum(1 for i in range(300) if i != 50 and i % 7 == 0 and i % 3 == 0)
    llm.script("root", repl("rows = records()\nprint(len(rows), rows[1])"),
               repl("n = sum(1 for r in rows if r.get('status') == 404 and r.get('method') == 'POST')\n"
                    "bad = [r['_line'] for r in rows if '_error' in r]\nprint(n, bad)\nFINAL(n)"))
    res = run_rlm("ask", str(root), "How many POST requests got a 404?", *model_flags(llm), "--json", "--no-leads")
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout)["answer"] == str(want)
    reqs = llm.chat_requests("root")
    first = question_message(reqs[0])
    assert "Structured files: 1 (1 accesslog (300 rows))" in first
    assert 'web-1: accesslog; 300 rows; 1 bad line (first: line 51' in first
    assert 'keys: ip="10.0.0.0", time="14/Sep/2026:06:00:00 +0200", method="POST", path="/api/v0", status=404' in first
    assert ("300 {'ip': '10.0.0.1', 'time': '14/Sep/2026:06:01:00 +0200', 'method': 'GET', 'path': '/api/v1', "
            "'status': 200, 'size': 101, 'referer': '-', 'agent': 'curl/8', 'user': '-', 'ident': '-', "
            "'protocol': 'HTTP/1.1', 'extra': None, '_file': 'web-1', '_line': 2}") in last_user(reqs[1])
    assert len(reqs) == 2 and want > 5
