"""Every answer check fires where it should and stays silent on realistic questions and answers
unlike any ``rlm eval`` template (the precision tables), and the Judge enforces limits."""

from __future__ import annotations

from typing import Any

import pytest

from rlm_cli.loop import prompts
from rlm_cli.loop.checks import (
    Candidate,
    DefaultCap,
    Empty,
    Evidence,
    Judge,
    ListedItems,
    NothingFound,
    Ungrounded,
    counts_nothing,
)
from rlm_cli.loop.grounding import specific_tokens
from rlm_cli.loop.policy import GUIDED, STANDARD


def cand(answer: str, question: str = "What is it?", shown: str = "", *, written: bool = True, unseen: int = 0,
         seen: bool = True, caps: tuple[str, ...] = (), extra: tuple[str, ...] = ()) -> Candidate:
    """A candidate answer; ``shown`` is the REPL output the model read (the first message is left out)."""
    return Candidate(question, answer, written, "block", 2, unseen, seen, shown, caps, extra, shown)


#: (question, REPL output the model read, a right answer written out by the model). None of these
#: is shaped like an ``rlm eval`` question: classes with a method, constants, exceptions, parameter
#: meanings, releases, access-log and order figures, environment variables.
GROUNDED = [
    ("Which class in `shop/cart.py` has the method `apply_coupon`?",
     "shop/cart.py 41 def apply_coupon(self, code): in Cart", "`Cart` (shop/cart.py, line 41)."),
    ("What is the value of `MAX_UPLOAD_BYTES`?", "app/settings.py:3: MAX_UPLOAD_BYTES = 10 * 1024 * 1024",
     "10 * 1024 * 1024 bytes, i.e. 10 MiB (10,485,760 bytes), set in app/settings.py."),
    ("Which exception does `load_profile` raise when the file is missing?",
     "    if not path.exists():\n        raise ProfileNotFound(path)", "It raises ProfileNotFound."),
    ("How many parameters does `send_mail` take?", "mail.py 12 def send_mail(to, subject, body, cc=None):",
     "4: to, subject, body and cc (cc is optional)."),
    ("What does the `retries` parameter mean?",
     "retries: how many times a failed request is tried again (default 3)",
     "It is how many times a failed request is tried again before the client gives up; the default is 3."),
    ("What is the most recent release?", "CHANGELOG.md\n## 2.4.1 - 2026-10-03\n## 2.4.0 - 2026-09-12",
     "2.4.1, released on 2026-10-03 (CHANGELOG.md)."),
    ("How many requests got a 404?", "Counter({200: 1532, 404: 37, 500: 4})", "37 requests got a 404."),
    ("How many bytes were served under /static/?", "1284322", "1,284,322 bytes were served under /static/."),
    ("Which customer placed the most orders?", "[('c-1042', 17), ('c-0007', 12)]",
     "Customer c-1042, with 17 orders."),
    ("Where is `BaseHandler` defined?", "wsgiref/handlers.py 97 class BaseHandler:", "In wsgiref/handlers.py."),
    ("Is TLS verification turned off anywhere?", "client.py 88 session.verify = False",
     "Yes: client.py sets session.verify = False on line 88."),
    ("What is the maximum upload size?", "config.py 5 MAX_UPLOAD_MB = 10", "10 MB (MAX_UPLOAD_MB in config.py)."),
    ("Which environment variable sets the log level?",
     "logs.py 7 level = os.environ.get('APP_LOG_LEVEL', 'INFO')", "APP_LOG_LEVEL; it defaults to INFO."),
    ("Does anything besides `save` write the store file?", "store.py 30 def save(self): in Store\n"
     "store.py 33     self.path.write_text(data)", "No: only `save()` in store.py writes it."),
]
#: The rows whose answer adds a figure worked out from what was shown (strict ``ungrounded`` asks).
DERIVED = {3}  # row 1 states 10 * 1024 * 1024, which shows 10,485,760 (grounding.stated_values)


def _ids(rows: list[Any]) -> list[str]:
    return [r[0][:40] for r in rows]


@pytest.mark.parametrize("question, shown, answer", GROUNDED, ids=_ids(GROUNDED))
def test_standard_checks_stay_silent_on_grounded_answers(question: str, shown: str, answer: str) -> None:
    c = cand(answer, question, shown)
    for check in STANDARD.make_checks():
        assert check.review(c).action == "accept", check.name


@pytest.mark.parametrize("question, shown, answer", [r for i, r in enumerate(GROUNDED) if i not in DERIVED],
                         ids=_ids([r for i, r in enumerate(GROUNDED) if i not in DERIVED]))
def test_guided_checks_stay_silent_on_grounded_answers(question: str, shown: str, answer: str) -> None:
    c = cand(answer, question, shown)
    for check in GUIDED.make_checks():
        assert check.review(c).action == "accept", check.name


def test_at_least_ten_grounded_answers_for_each_preset() -> None:
    assert len(GROUNDED) >= 10 and len(GROUNDED) - len(DERIVED) >= 10


# -- evidence -----------------------------------------------------------------------------------------


def test_evidence_refuses_a_written_answer_next_to_unread_output_or_before_any() -> None:
    check = Evidence()
    assert check.review(cand("Cart", unseen=120)).note == prompts.FINAL_WITH_UNSEEN_CODE
    assert check.review(cand("Cart", seen=False)).note == prompts.FIRST_TURN_FINAL
    # A computed answer rests on code, not on the model reading: accepted either way.
    assert check.review(cand("Cart", written=False, unseen=120, seen=False)).action == "accept"


# -- empty --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("answer", ["", "None", "  \n"])
def test_empty_answers_are_sent_back(answer: str) -> None:
    assert Empty().review(cand(answer)).note == prompts.EMPTY_FINAL


@pytest.mark.parametrize("answer", ["0", "False", "[]", "none of them"])
def test_short_answers_are_not_empty(answer: str) -> None:
    assert Empty().review(cand(answer)).action == "accept"


# -- ungrounded ---------------------------------------------------------------------------------------


def test_specific_tokens_are_paths_versions_names_and_numbers() -> None:
    tokens = specific_tokens("See os.path.join in Lib/posixpath.py (v3.11.7), XKWR-7354, parse_config, "
                             "HTTPServer, 1,234 rows, e.g. 3 of them, i.e. all; the user said so.")
    assert tokens == [("path", "Lib/posixpath.py"), ("version", "v3.11.7"), ("name", "XKWR-7354"),
                      ("name", "os.path.join"), ("name", "parse_config"), ("name", "HTTPServer"),
                      ("number", "1,234")]


def test_ungrounded_fires_on_an_answer_that_names_only_what_it_was_never_shown() -> None:
    shown = "app.py 3 import os\napp.py 9 def main():"
    v = Ungrounded().review(cand("The cache lives in CACHE_DIR, set in shop/config.py.", "Where is the cache?", shown))
    assert v.action == "send_back" and "`CACHE_DIR`" in v.note and "`shop/config.py`" in v.note
    v = Ungrounded().review(cand("There were 1,234 failed logins.", "How many failed logins?", "Counter({'ok': 9})"))
    assert v.action == "send_back" and "`1,234`" in v.note
    # Computed by code: not checked.
    assert Ungrounded().review(cand("1,234", written=False)).action == "accept"


def test_strict_ungrounded_fires_on_any_token_never_shown() -> None:
    shown = "Counter({404: 37, 200: 1532})"
    answer = "37 requests got a 404, from 12 addresses."
    assert Ungrounded().review(cand(answer, "How many 404s?", shown)).action == "accept"  # 37 was shown
    v = Ungrounded(min_number=0, strict=True).review(cand(answer, "How many 404s?", shown))
    assert v.action == "send_back" and "`12`" in v.note and "`37`" not in v.note
    # A small count made up from nothing: only strict (guided) asks.
    assert Ungrounded(min_number=0, strict=True).review(cand("There are 3.", "How many?", "x = 1")).action == "send_back"
    assert Ungrounded().review(cand("There are 3.", "How many?", "x = 1")).action == "accept"


def test_ungrounded_ignores_what_the_question_itself_names() -> None:
    c = cand("`parse_config` in pkg/config.py has 404 lines.", "Does `parse_config` in pkg/config.py have 404 lines?",
             "True")
    assert Ungrounded(strict=True, min_number=0).review(c).action == "accept"


def guided_ungrounded() -> Ungrounded:
    return next(c for c in GUIDED.make_checks() if isinstance(c, Ungrounded))


def test_guided_drops_list_items_never_shown_when_the_model_names_them_again() -> None:
    shown = "encodings/cp932.py:12: class Codec(codecs.Codec):"
    q = "Which classes does `Codec` in encodings/cp932.py inherit from?"
    answer = "Codec inherits from codecs.Codec, codecs.StreamWriter and codecs.StreamReader"
    check = guided_ungrounded()
    first = check.review(cand(answer, q, shown))
    assert first.action == "send_back" and "`codecs.StreamWriter`" in first.note
    again = check.review(cand(answer, q, shown))
    assert again.action == "rewrite" and again.answer == "Codec inherits from codecs.Codec"
    # standard never rewrites: it sends back once (when nothing was shown) and then accepts
    plain = Ungrounded(min_number=0, strict=True)
    assert plain.review(cand(answer, q, shown)).action == "send_back"
    assert plain.review(cand(answer, q, shown)).action == "accept"


#: (question, REPL output read, an answer given again after the note) on which guided does not
#: drop anything: the unseen token is not a whole list item, nothing shown would remain, or the
#: answer is not a list.
NOT_PRUNED = [
    ("Which function parses the config?", "cfg.py 3 import os", "parse_config in cfg.py"),
    ("What does `load` raise?", "io.py 9 def load(p):", "It raises ProfileNotFound when the file is missing."),
    ("Which classes subclass `Base`?", "x.py 1 import y", "FooHandler, BarHandler"),  # nothing shown remains
    ("How many parameters does `f` take?", "m.py 2 def f(a, b):", "f takes 2 parameters: a and b."),
    ("Where is the cache dir set?", "app.py 9 def main():", "In shop/config.py, as CACHE_DIR."),
    ("Which customers ordered most?", "[('c-1042', 17)]", "c-1042 with 17 orders, then c-0007_b with 12_000"),
    ("Which modules import `ssl`?", "net/http.py 4 import ssl", "net/http.py imports it (and maybe net/ftp_x.py too)"),
    ("Which env var sets the port?", "srv.py 3 port = 80", "APP_PORT_NUM, read in srv.py"),
    ("What is the newest version?", "## 2.4.1", "2.4.1; 2.5.0rc1 is not released"),
    ("Which class has `apply_coupon`?", "cart.py 41 def apply_coupon(self): in Cart", "Cart (see CartMixin_v2 too)"),
    ("What is the default timeout?", "client.py 5 TIMEOUT_S = 30", "TIMEOUT_S = 30 seconds, overridable via RLM_TIMEOUT_S"),
]


@pytest.mark.parametrize("question, shown, answer", NOT_PRUNED, ids=_ids(NOT_PRUNED))
def test_guided_does_not_drop_anything_from_answers_that_are_not_lists_of_whole_items(question: str, shown: str,
                                                                                    answer: str) -> None:
    check = guided_ungrounded()
    check.review(cand(answer, question, shown))
    assert check.review(cand(answer, question, shown)).action == "accept"


# -- default cap --------------------------------------------------------------------------------------


def test_default_cap_fires_on_a_figure_only_when_a_default_cap_was_hit() -> None:
    v = DefaultCap().review(cand("100000 lines mention it.", caps=("grep",)))
    assert v.action == "send_back" and "grep() stopped at its default max_results" in v.note
    assert DefaultCap().review(cand("100000 lines mention it.")).action == "accept"  # no cap hit
    assert DefaultCap().review(cand("wsgiref/handlers.py", caps=("grep",))).action == "accept"  # no figure
    assert DefaultCap().review(cand("Yes, 404 is there.", "Is 404 logged?", caps=("grep",))).action == "accept"


# -- nothing found ------------------------------------------------------------------------------------


@pytest.mark.parametrize("answer", ["No matching requests were found.", "0", "none", "zero",
                                    "There are no POST requests to /api/login.", "0 rows match.",
                                    "The function is not defined in the corpus."])
def test_nothing_found_fires_on_answers_that_found_nothing(answer: str) -> None:
    assert NothingFound().review(cand(answer)).action == "send_back"


def test_counts_nothing_reads_counts_of_zero_only() -> None:
    assert counts_nothing("0 orders") and counts_nothing("no matching lines") and counts_nothing("None")
    assert not counts_nothing("10 orders") and not counts_nothing("The default timeout is 30 seconds.")


# -- listed items -------------------------------------------------------------------------------------


def test_listed_items_sends_back_an_answer_that_leaves_some_out_and_joins_the_parts() -> None:
    q = "What do `get`, `put` and `delete` return?"
    check = ListedItems()
    v = check.review(cand("get returns the value.", q, "kv.py 3 def get(key):\nkv.py 9 def put(key, value):"))
    assert v.action == "send_back" and "leaves out 'put', 'delete'" in v.note and "kv.py 9 def put" in v.note
    v = check.review(cand("put returns None; delete returns True.", q))
    assert v.action == "rewrite" and v.answer == "get returns the value.\nput returns None; delete returns True."
    # Extra FINAL-only blocks of one reply are joined when they answer more of the items.
    v = ListedItems().review(cand("get: the value", q, extra=("put: None", "delete: True")))
    assert v.action == "rewrite" and v.answer == "get: the value\nput: None\ndelete: True"


@pytest.mark.parametrize("question, answer", [
    ("Which of `json`, `pickle` and `marshal` does shelve.py import?", "pickle"),
    ("Is the default one of red, green and blue?", "blue"),
    ("What do `get`, `put` and `delete` return?", "get returns the value, put returns None, delete returns True."),
    ("What do `get` and `put` return?", "get returns the value."),  # two items: no list of three
    ("In the file `kv.py`, how many functions and methods call `get`?", "2"),  # a clause, not a list
])
def test_listed_items_stays_silent_on_choices_and_whole_answers(question: str, answer: str) -> None:
    assert ListedItems().review(cand(answer, question)).action == "accept"


# -- the judge ----------------------------------------------------------------------------------------


def test_the_judge_stops_at_the_first_send_back_and_each_check_fires_at_most_its_limit() -> None:
    events: list[dict[str, Any]] = []
    judge = Judge(STANDARD.make_checks(), events.append)
    guess = cand("CACHE_DIR in shop/config.py", "Where is the cache?", "app.py 3 import os", seen=False)
    first = judge.review(guess)
    assert first.answer is None and first.note == prompts.FIRST_TURN_FINAL
    assert [(e["check"], e["verdict"]) for e in events] == [("evidence", "send_back")]
    events.clear()
    second = judge.review(guess)  # evidence is spent; ungrounded fires once
    assert second.answer is None and [(e["check"], e["verdict"]) for e in events][:2] == [
        ("evidence", "accept"), ("empty", "accept")] and events[-1]["check"] == "ungrounded"
    assert events[0]["limit_reached"] is True
    events.clear()
    third = judge.review(guess)  # every check spent: the same answer is taken
    assert third.answer == "CACHE_DIR in shop/config.py"
    assert {e["verdict"] for e in events} == {"accept"} and all(e["type"] == "check" for e in events)
    assert {"iteration", "source", "written_out", "answer", "fired"} <= set(events[0])


def test_a_rewrite_reaches_the_checks_after_it() -> None:
    events: list[dict[str, Any]] = []
    judge = Judge([ListedItems(), Empty()], events.append)
    out = judge.review(cand("", "What do `get`, `put` and `delete` return?", extra=("get: 1", "put: 2", "delete: 3")))
    assert out.answer == "get: 1\nput: 2\ndelete: 3"
    assert [e["verdict"] for e in events] == ["rewrite", "accept"]
