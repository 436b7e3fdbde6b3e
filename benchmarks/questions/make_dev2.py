"""Write ``dev2.jsonl``: a second tuning set for the question bench, with golds computed by code.

    python benchmarks/questions/make_dev2.py        # rewrites benchmarks/questions/dev2.jsonl

Written because twelve dev questions were too few to tune on (a change worth two dev questions
did not hold on held-out). Like ``dev.jsonl`` it is for tuning only; its stdlib questions are about
packages that neither ``dev.jsonl`` nor ``heldout.jsonl`` asks about (checked below without
printing anything of held-out), and its log and JSONL questions ask other things of the same
generated corpora (``make_data.py``). Each kind is phrased the way a person at a shell might ask
it, unlike ``rlm eval``'s templates.
"""

from __future__ import annotations

import ast
import json
import sys
import sysconfig
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_data  # noqa: E402

STDLIB = Path(sysconfig.get_paths()["stdlib"])
PY = ".".join(map(str, sys.version_info[:3]))


def _tree(rel: str) -> ast.Module:
    return ast.parse((STDLIB / rel).read_text(encoding="utf-8"))


def _classes_with(pkg: str, method: str) -> tuple[list[str], list[str]]:
    """Classes of package ``pkg`` defining ``method`` and every class name in it."""
    having, every = [], set()
    for path in sorted((STDLIB / pkg).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                every.add(node.name)
                if any(isinstance(b, ast.FunctionDef) and b.name == method for b in node.body):
                    having.append(node.name)
    return having, sorted(every)


def _constant(rel: str, name: str) -> Any:
    for node in _tree(rel).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError(name)


def _params(rel: str, cls: str | None, fn: str) -> int:
    for node in ast.walk(_tree(rel)):
        if cls and isinstance(node, ast.ClassDef) and node.name == cls:
            for b in node.body:
                if isinstance(b, ast.FunctionDef) and b.name == fn:
                    a = b.args
                    return len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
        if not cls and isinstance(node, ast.FunctionDef) and node.name == fn:
            a = node.args
            return len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
    raise LookupError(fn)


def _bases(rel: str, cls: str) -> list[str]:
    for node in ast.walk(_tree(rel)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return [ast.unparse(b) for b in node.bases]
    raise LookupError(cls)


def stdlib_questions() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    having, every = _classes_with("urllib", "data_open")
    assert len(having) == 1
    out.append({"corpus": "stdlib:urllib", "kind": "lookup", "score": "identifier", "gold": having[0],
                "options": [c for c in every if c != having[0]][:30],
                "question": "Which class under urllib/ has a method called data_open?"})
    n = _params("wsgiref/handlers.py", "BaseHandler", "start_response")
    out.append({"corpus": "stdlib:wsgiref", "kind": "count", "score": "number", "gold": n,
                "question": "BaseHandler.start_response in wsgiref/handlers.py: how many parameters does it "
                            "have, self included?"})
    bases = _bases("zoneinfo/_common.py", "ZoneInfoNotFoundError")
    out.append({"corpus": "stdlib:zoneinfo", "kind": "lookup", "score": "identifier", "gold": bases[0],
                "options": ["Exception", "ValueError", "LookupError", "OSError", "RuntimeError"],
                "question": "What does ZoneInfoNotFoundError inherit from?"})
    out.append({"corpus": "stdlib:xml", "kind": "lookup", "score": "path", "gold": "sax/expatreader.py",
                "aliases": ["xml/sax/expatreader.py"],
                "question": "where's the ExpatParser class defined in the xml package?"})
    size = _constant("unittest/util.py", "_MAX_LENGTH")
    out.append({"corpus": "stdlib:unittest", "kind": "lookup", "score": "number", "gold": size,
                "question": "What is _MAX_LENGTH set to in unittest's util module?"})
    return out


def log_questions() -> list[dict[str, Any]]:
    recs = make_data.log_records()
    head = sum(r["method"] == "HEAD" for r in recs)
    api = Counter(r["path"] for r in recs if r["path"].startswith("/api/"))
    (top, n1), (_, n2) = api.most_common(2)
    assert n1 > n2
    not_modified = sum(r["status"] == 304 for r in recs)
    post_bytes = sum(r["size"] or 0 for r in recs if r["method"] == "POST")
    return [
        {"corpus": "log", "kind": "count", "score": "number", "gold": head, "question": "Count the HEAD requests in the log."},
        {"corpus": "log", "kind": "max", "score": "choice", "gold": top, "options": sorted(p for p in api if p != top),
         "question": "Which /api/ endpoint was hit most often?"},
        {"corpus": "log", "kind": "count", "score": "number", "gold": not_modified,
         "question": "how many responses were 304 Not Modified?"},
        {"corpus": "log", "kind": "sum", "score": "number", "gold": post_bytes,
         "question": "Add up the response sizes of all POST requests: how many bytes is that?"},
    ]


def jsonl_questions() -> list[dict[str, Any]]:
    orders = make_data.orders()
    de = sum(o["customer"]["country"] == "DE" for o in orders)
    skus = Counter(s for o in orders for s in {i["sku"] for i in o["items"]})
    (top, n1), (_, n2) = skus.most_common(2)
    assert n1 > n2
    highest = max(o["total"] for o in orders)
    big = sum(len(o["items"]) > 2 for o in orders)
    return [
        {"corpus": "jsonl", "kind": "count", "score": "number", "gold": de,
         "question": "How many orders were placed by customers in Germany (country DE)?"},
        {"corpus": "jsonl", "kind": "max", "score": "choice", "gold": top, "options": sorted(s for s in skus if s != top),
         "question": "Which SKU appears in the most orders?"},
        {"corpus": "jsonl", "kind": "max", "score": "number", "gold": highest, "tolerance": 0.01,
         "question": "What's the largest order total in the file?"},
        {"corpus": "jsonl", "kind": "count", "score": "number", "gold": big,
         "question": "how many orders have more than two line items?"},
    ]


def build() -> list[dict[str, Any]]:
    rows = stdlib_questions() + log_questions() + jsonl_questions()
    for i, q in enumerate(rows, 1):
        q["id"] = f"e{i:02d}"
        q["set"] = "dev2"
        if q["corpus"].startswith("stdlib:"):
            q["python"] = PY
    others = [json.loads(x) for name in ("dev.jsonl", "heldout.jsonl")
              for x in (HERE / name).read_text(encoding="utf-8").splitlines() if x.strip()]
    taken = {q["corpus"] for q in others if q["corpus"].startswith("stdlib:")}
    assert not {q["corpus"] for q in rows} & taken, "a stdlib package another set asks about"
    assert not {q["question"] for q in rows} & {q["question"] for q in others}
    return [{k: q[k] for k in ("id", "set", "corpus", "kind", "question", "gold", "score", *[
        k for k in ("options", "aliases", "tolerance", "python") if k in q])} for q in rows]


def main() -> None:
    rows = build()
    (HERE / "dev2.jsonl").write_text("".join(json.dumps(q) + "\n" for q in rows), encoding="utf-8")
    print(f"dev2: {len(rows)} questions")


if __name__ == "__main__":
    main()
