"""A model that answers right in the fewest calls pays no extra root call and keeps its answer
under ``auto`` with a 200k window (``standard``): scripted trajectories of a strong model stand in
for one, on questions of kinds ``rlm eval`` does not generate, including the ones a review saw
sent back by the earlier rules (a count next to a capped peek, a paging cell, "what does the
`retries` parameter mean", a right "no" and a right 0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import model_flags, run_rlm
from tests.support.fake_llm import FakeLLM, repl
from tests.support.inproc import run

STRONG_WINDOW = 200_000

FILES = {
    "shop/cart.py": "from shop.errors import CouponExpired\n\n\nclass Cart:\n    def __init__(self):\n"
                    "        self.items = []\n\n    def apply_coupon(self, code, retries=3):\n"
                    "        \"\"\"retries: how many times a failed coupon lookup is tried again.\"\"\"\n"
                    "        if code.startswith('X'):\n            raise CouponExpired(code)\n        return code\n",
    "shop/errors.py": "class ShopError(Exception):\n    pass\n\n\nclass CouponExpired(ShopError):\n    pass\n",
    "shop/settings.py": "MAX_UPLOAD_BYTES = 10 * 1024 * 1024\nCACHE_DIR = '/var/cache/shop'\n",
    "shop/kv.py": "def get(key):\n    return STORE[key]\n\n\ndef put(key, value):\n    STORE[key] = value\n\n\n"
                  "def delete(key):\n    return STORE.pop(key, None) is not None\n",
    "CHANGELOG.md": "# Changelog\n\n## 2.4.1 - 2026-10-03\n- fix coupons\n\n## 2.4.0 - 2026-09-12\n- carts\n",
    "logs/access.log": "".join(
        f'10.0.0.{i % 7} - - [02/Nov/2026:10:{i % 60:02d}:00 +0000] "{"POST" if i % 5 == 0 else "GET"} '
        f'{"/static/app.css" if i % 3 == 0 else "/api/orders/" + str(i)} HTTP/1.1" '
        f'{404 if i % 11 == 0 else 200} {100 + i}\n' for i in range(300)),
    "data/orders.jsonl": "".join(json.dumps({"order_id": i, "customer": f"c-{i % 4 if i % 9 else 7}",
                                             "total": 10 + i % 13}) + "\n" for i in range(60)),
}
N_404 = sum(1 for i in range(300) if i % 11 == 0)
STATIC_BYTES = sum(100 + i for i in range(300) if i % 3 == 0)


def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


#: (question, the strong model's replies, its answer). Each ends in as few root calls as it can.
TRAJECTORIES = [
    ("Which class has a method named `apply_coupon`?",
     [repl("print([(h['file'], h['line'], h.get('in')) for h in grep(r'def apply_coupon\\b')])"),
      repl("FINAL('Cart (shop/cart.py, line 8)')")], "Cart (shop/cart.py, line 8)"),
    ("What is the maximum upload size?",
     [repl("print(grep(r'UPLOAD'))"),
      repl("FINAL('MAX_UPLOAD_BYTES = 10 * 1024 * 1024, i.e. 10 MiB (10,485,760 bytes), in shop/settings.py')")],
     "MAX_UPLOAD_BYTES = 10 * 1024 * 1024, i.e. 10 MiB (10,485,760 bytes), in shop/settings.py"),
    ("What does the `retries` parameter mean?",
     [repl("print(read_file('shop/cart.py', 8, 9))"),
      repl("FINAL('How many times a failed coupon lookup is tried again (Cart.apply_coupon; default 3).')")],
     "How many times a failed coupon lookup is tried again (Cart.apply_coupon; default 3)."),
    ("What is the most recent release?",
     [repl("print(grep(r'^## ', 'CHANGELOG.md'))"), repl("FINAL('2.4.1, released 2026-10-03')")],
     "2.4.1, released 2026-10-03"),
    ("Which exception does `apply_coupon` raise, and which file defines it?",
     [repl("print(read_file('shop/cart.py', 8, 12))\nprint(grep(r'class CouponExpired'))"),
      repl("FINAL('CouponExpired, a ShopError defined in shop/errors.py')")],
     "CouponExpired, a ShopError defined in shop/errors.py"),
    ("Is `eval` called anywhere?",
     [repl("print(len(grep(r'\\beval\\(')))"), repl("FINAL('No: nothing in the repository calls eval().')")],
     "No: nothing in the repository calls eval()."),
    ("How many requests in the access log got a 500?",
     [repl("FINAL(str(sum(1 for h in grep(r'\" 500 ', 'logs/access.log'))))")], "0"),
    ("How many requests got a 404?",  # a peek capped by the model, then the count over every match
     [repl("print(grep(r'\" 404 ', max_results=3))\nn = len(grep(r'\" 404 ', max_results=None))\nFINAL(str(n))")],
     str(N_404)),
    ("How many bytes were served under /static/?",
     [repl("import re\nrows = grep(r'GET /static/\\S* HTTP/1.1\" \\d+ (\\d+)')\nFINAL(str(sum(int(h['match']) for h in rows)))")],
     None),  # computed: STATIC_BYTES less the POSTs (checked below by the scorer-free rule: code computed it)
    ("Which customer has the most orders?",
     [repl("from collections import Counter\nc = Counter(r['customer'] for r in records('*.jsonl'))\n"
           "print(c.most_common(3))"), repl("FINAL('c-3, with 14 orders')")], "c-3, with 14 orders"),
    ("What do `get`, `put` and `delete` return?",
     [repl("print(read_file('shop/kv.py'))"),
      repl("FINAL('get returns the stored value, put returns None, delete returns whether the key was there')")],
     "get returns the stored value, put returns None, delete returns whether the key was there"),
    ("Where is the cache folder configured?",
     [repl("FINAL(grep(r'CACHE_DIR\\s*=')[0]['file'])")], "shop/settings.py"),
    ("Summarize what the shop package contains.",
     [repl("report = '\\n'.join(sorted({f['path'] for f in files if f['path'].startswith('shop/')}))\nprint(report)"),
      repl("FINAL_VAR('report')")], "shop/cart.py\nshop/errors.py\nshop/kv.py\nshop/settings.py"),
]


@pytest.mark.parametrize("question, replies, answer", TRAJECTORIES, ids=[t[0][:40] for t in TRAJECTORIES])
def test_a_strong_model_pays_no_extra_root_call_under_auto(tmp_path: Path, llm: FakeLLM, question: str,
                                                           replies: list[str], answer: str | None) -> None:
    llm.script("root", *replies)
    r = run(llm, [repo(tmp_path)], question, root_model_window=STRONG_WINDOW, max_iterations=6)
    assert r.error is None and r.outcome is not None
    assert r.outcome.result.status == "final" and r.outcome.result.policy == "standard"
    assert len(llm.chat_requests("root")) == len(replies)  # not one root call more
    assert [e for e in r.of("check") if e["verdict"] != "accept"] == []
    if answer is not None:
        assert r.answer == answer
    assert not r.of("leads")  # standard runs no leads: the first request is the question alone


def test_the_counts_the_strong_model_computed_are_right(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script("root", TRAJECTORIES[8][1][0])
    r = run(llm, [repo(tmp_path)], TRAJECTORIES[8][0], root_model_window=STRONG_WINDOW)
    assert r.answer == str(sum(100 + i for i in range(300) if i % 3 == 0 and i % 5 != 0))
    assert STATIC_BYTES > int(r.answer)  # the POSTs to /static/ are left out by the pattern


def test_a_paging_cell_run_again_with_a_cursor_is_not_a_repeat_under_guided(tmp_path: Path, llm: FakeLLM) -> None:
    # Seen in a review: a loop that re-ran one cell with a cursor was called repeated code, the
    # model was asked for its answer before its last page ran, and the answer was wrong.
    page = repl("for h in hits[start:start + 10]:\n    print(h['text'][:40])\nstart += 10\nprint('next', start)")
    llm.script("root", repl("hits = grep(r'\" 404 ')\nstart = 0\nprint(len(hits))"), page, page, page,
               repl("FINAL(str(start))"))
    r = run(llm, [repo(tmp_path)], "Page through the 404s.", policy="guided", leads=False, max_iterations=8)
    assert r.answer == "30"
    texts = [o["output"] for o in r.of("output")]
    assert any("next 30" in t for t in texts)  # the last page ran
    assert not any("repeated" in n for n in r.notices()) and len(llm.chat_requests("root")) == 5


def test_rlm_ask_json_reports_the_policy_and_no_extra_call(tmp_path: Path, llm: FakeLLM) -> None:
    question, replies, answer = TRAJECTORIES[0]
    llm.script("root", *replies)
    res = run_rlm("ask", str(repo(tmp_path)), question, *model_flags(llm), "--mode", "rlm",
                  "--root-model-window", str(STRONG_WINDOW), "--json")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["answer"] == answer and doc["policy"] == "standard" and doc["iterations"] == 2
    assert len(llm.chat_requests("root")) == 2
