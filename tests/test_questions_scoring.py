"""The question bench's scoring (benchmarks/questions/scoring.py): real answers, right and wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.questions import scoring

QDIR = Path(__file__).resolve().parent.parent / "benchmarks" / "questions"


def q(score: str, gold: Any, question: str = "How many?", **extra: Any) -> dict[str, Any]:
    return {"score": score, "gold": gold, "question": question, **extra}


NUM = q("number", 183, "How many requests got a 404 response?")
MONEY = q("number", 10819.28, "What do the cancelled orders add up to, in euros?", tolerance=0.01)
BYTES = q("number", 49150645, "What is the total number of bytes served for paths under /static/ ?")
MARCH = q("number", 106, "How many orders were placed in March 2026?")


@pytest.mark.parametrize(("question", "answer", "right"), [
    (NUM, "183", True),
    (NUM, "There were 183 requests with a 404 status.", True),
    (NUM, "**183** requests returned HTTP 404", True),
    (NUM, "183.0", True),
    (NUM, "200", False),  # a grep's default cap
    (NUM, "There were 183 404s out of 3,200 requests", False),  # a second figure: which is the answer?
    (NUM, "Between 180 and 190", False),
    (NUM, "none", False),
    (MONEY, "€10,819.28", True),
    (MONEY, "The cancelled orders total 10819.28 EUR.", True),
    (MONEY, "10819.3", False),  # the tolerance is a cent
    (MONEY, "10819.2800", True),
    (MONEY, "10,819", False),
    (MONEY, "10819.28 over 97 orders", False),
    (BYTES, "49,150,645 bytes (about 46.9 MB)", True),
    (BYTES, "`49150645`", True),
    (BYTES, "46.9 MB", False),
    (BYTES, "49150645 bytes were served from /static/css/site.css and others", True),  # digits in paths are no figures
    (MARCH, "106 orders were placed in March 2026 (2026-03-01 to 2026-03-31).", True),
    (MARCH, "In 2026-03 there were 105 orders", False),
    (q("number", 443, "What value is the constant HTTPS_PORT given in http/client.py?"), "HTTPS_PORT = 443", True),
    (q("number", 2, "how many parameters does body_line_iterator() take?"),
     "It takes 2 parameters: msg and decode.", True),
    (q("number", 2, "how many parameters does body_line_iterator() take?"), "3", False),
    (q("number", 8, "How many arguments does `JSONObject` in json/decoder.py accept?"),
     "JSONObject accepts eight arguments (one of them, memo, is optional).", True),
    (q("number", 8, "How many arguments does `JSONObject` in json/decoder.py accept?"), "seven arguments", False),
    (q("number", 8, "How many arguments does `JSONObject` in json/decoder.py accept?"), "eight, or 9 with _ws", False),
    (q("number", 20, "what's the value of INFO in logging/__init__.py?"), "INFO is 20 (logging/__init__.py:97).", True),
    (q("number", 20, "what's the value of INFO in logging/__init__.py?"), "20, set on line 97 of __init__.py", True),
    (q("number", 20, "what's the value of INFO in logging/__init__.py?"), "INFO = 20 at __init__.py:97-98", True),
    (q("number", 20, "what's the value of INFO in logging/__init__.py?"), "INFO is 20 or 97", False),
    (q("number", 135, "How many different client IP addresses appear in the log?"),
     "135 distinct IPs, e.g. 192.0.2.213 and 198.51.100.3", True),
])
def test_number(question: dict[str, Any], answer: str, right: bool) -> None:
    assert scoring.score(question, answer)[0] is right, scoring.score(question, answer)


CLS = q("identifier", "Message", "Which class has the method set_boundary()?",
        options=["EmailMessage", "MIMEPart", "Parser", "Charset"])
EXC = q("identifier", "ValueError", "When `basicConfig` fails, which exception type does it raise?",
        options=["TypeError", "KeyError", "RuntimeError"])


@pytest.mark.parametrize(("question", "answer", "right"), [
    (CLS, "Message", True),
    (CLS, "`Message`", True),
    (CLS, "The method is defined on the `Message` class in email/message.py.", True),
    (CLS, "email.message.Message", True),
    (CLS, "Message.set_boundary", True),
    (CLS, "EmailMessage", False),  # a name that contains the gold is another name
    (CLS, "Message or EmailMessage", False),
    (CLS, "message", False),  # the module, not the class
    (CLS, "I could not find it.", False),
    (EXC, "It raises a ValueError when handlers and stream are both given.", True),
    (EXC, "`ValueError`", True),
    (EXC, "ValueError or TypeError", False),
    (EXC, "TypeError", False),
])
def test_identifier(question: dict[str, Any], answer: str, right: bool) -> None:
    assert scoring.score(question, answer)[0] is right, scoring.score(question, answer)


IP = q("choice", "198.51.100.3", "Which client IP sent the most requests?",
       options=["198.51.100.35", "198.51.100.30", "203.0.113.7"])
WHO = q("choice", "Femi Berg", "Who is the customer with the most orders?", aliases=["CU-3168"],
        options=["Femi Costa", "Ana Berg"])
GONE = q("choice", "/products/moka-pot", "One URL answers 410 Gone. Which path is it?",
         options=["/products", "/cart", "/api/cart", "/products/burr-set"])
SKU = q("choice", "DRP-002", "which product SKU sold the most units?", aliases=["Ceramic dripper"],
        options=["GRN-100", "Conical burr grinder"])


@pytest.mark.parametrize(("question", "answer", "right"), [
    (IP, "198.51.100.3", True),
    (IP, "The busiest client was 198.51.100.3.", True),
    (IP, "198.51.100.3 (412 requests)", True),  # a figure beside a name is no second name
    (IP, "198.51.100.35", False),
    (IP, "198.51.100.30 sent the most", False),
    (IP, "198.51.100.3 and 203.0.113.7 tie", False),
    (WHO, "Femi Berg", True),
    (WHO, "femi berg with 25 orders", True),
    (WHO, "Customer CU-3168", True),
    (WHO, "Femi Costa", False),
    (WHO, "Ana Berg", False),
    (GONE, "/products/moka-pot", True),
    (GONE, "`/products/moka-pot`", True),
    (GONE, "https://beanbox.example/products/moka-pot", True),
    (GONE, "/products", False),
    (GONE, "/products/burr-set", False),
    (SKU, "DRP-002", True),
    (SKU, "The Ceramic dripper (DRP-002)", True),
    (SKU, "GRN-100", False),
    (SKU, "DRP-002, then GRN-100", False),
])
def test_choice(question: dict[str, Any], answer: str, right: bool) -> None:
    assert scoring.score(question, answer)[0] is right, scoring.score(question, answer)


BASE = q("path", "mime/nonmultipart.py",
         "`MIMEMessage` is declared in email/mime/message.py. In which file is its base class defined?",
         aliases=["mime/nonmultipart.py", "email/mime/nonmultipart.py", "nonmultipart.py"],
         options=["mime/text.py", "mime/base.py"])


@pytest.mark.parametrize(("answer", "right"), [
    ("mime/nonmultipart.py", True),
    ("email/mime/nonmultipart.py", True),
    ("`/usr/lib/python3.11/email/mime/nonmultipart.py`", True),
    ("./mime/nonmultipart.py", True),
    ("The base class MIMENonMultipart lives in nonmultipart.py.", True),
    ("MIMEMessage (email/mime/message.py) subclasses MIMENonMultipart from email/mime/nonmultipart.py", True),
    ("mime/base.py", False),
    ("mime/nonmultipart.py, which itself builds on mime/base.py", False),
    ("email/mime/message.py", False),
    ("MIMENonMultipart", False),  # a class, not a file
])
def test_path(answer: str, right: bool) -> None:
    assert scoring.score(BASE, answer)[0] is right, scoring.score(BASE, answer)


IMPORT = q("none", "none", "Which modules of the json package import ctypes?",
           options=["json.decoder", "json.encoder", "json.scanner", "json.tool"])
DELETE = q("none", "none", "Did anyone send DELETE requests? If so, how many?")
FEDEX = q("none", "none", "List the orders that were shipped with FedEx.", options=["SO-58100", "SO-58103"])


@pytest.mark.parametrize(("question", "answer", "right"), [
    (IMPORT, "None of them.", True),
    (IMPORT, "No module in the json package imports ctypes.", True),
    (IMPORT, "json.decoder", False),
    (IMPORT, "json/scanner.py imports it (for the C scanner).", False),
    (DELETE, "No, there were no DELETE requests.", True),
    (DELETE, "0", True),
    (DELETE, "There were 0 DELETE requests", True),
    (DELETE, "Yes, 12 DELETE requests.", False),
    (DELETE, "12", False),
    (FEDEX, "No orders were shipped with FedEx.", True),
    (FEDEX, "That list is empty — there isn’t a FedEx shipment.", True),
    (FEDEX, "The list is empty.", True),
    (FEDEX, "There aren't any: carriers are DHL, PostNL, UPS and GLS.", True),
    (FEDEX, "SO-58100", False),
    (FEDEX, "SO-58100 and SO-58103", False),
    (FEDEX, "FedEx orders: see list", False),
    (DELETE, "No final answer yet: the run stopped before the model gave one.", False),
])
def test_none(question: dict[str, Any], answer: str, right: bool) -> None:
    assert scoring.score(question, answer)[0] is right, scoring.score(question, answer)


def test_the_no_answer_prefix_is_rlm_s_own() -> None:
    from rlm_cli.loop.partial import NO_ANSWER_PREFIX

    assert scoring.NO_ANSWER_PREFIX == NO_ANSWER_PREFIX


def test_blank_and_unknown() -> None:
    assert scoring.score(NUM, None) == (False, "no answer")
    assert scoring.score(NUM, "  ")[0] is False
    with pytest.raises(ValueError):
        scoring.score(q("vibes", 1), "1")


def test_figures_skip_non_figures() -> None:
    assert scoring.figures("SO-58100 on 2026-03-14T10:22:00Z from 192.0.2.7 via HTTP/1.1, v3.11.7: 42") == [42.0]
    assert scoring.figures("1,234,567 and 12.5 and 7.") == [1234567.0, 12.5, 7.0]


@pytest.mark.parametrize("name", ["dev", "heldout"])
def test_question_files_are_well_formed(name: str) -> None:
    rows = [json.loads(x) for x in (QDIR / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == {"dev": 12, "heldout": 22}[name]
    assert len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        assert r["corpus"].split(":")[0] in ("stdlib", "log", "jsonl")
        # every gold is scored right by its own scoring, a blank answer wrong
        assert scoring.score(r, str(r["gold"]))[0], r["id"]
        assert not scoring.score(r, "")[0]


def test_sets_share_no_question() -> None:
    dev, held = ({json.loads(x)["question"] for x in (QDIR / f"{n}.jsonl").read_text().splitlines()}
                 for n in ("dev", "heldout"))
    assert not dev & held
