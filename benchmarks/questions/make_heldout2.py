"""Write ``heldout2.jsonl``: a second held-out set for the question bench, with golds computed by code.

    python benchmarks/questions/make_heldout2.py    # rewrites benchmarks/questions/heldout2.jsonl

Written after the rules of issue 37 were frozen, because the first held-out set was spent (it had
been run and read while those rules were tuned). Like ``heldout.jsonl`` it is for judging only: run
it blind (``bench_questions.py --set heldout2`` prints nothing per question) and never read it per
question while tuning. Its stdlib questions are about packages that none of ``dev.jsonl``,
``dev2.jsonl`` and ``heldout.jsonl`` asks about, and its log and JSONL questions ask other things of
the same generated corpora (``make_data.py``); both are checked below without printing anything of
any set. Each gold is computed by code (``ast`` over this interpreter's standard library, the
records ``make_data.py`` writes) and asserted unambiguous (a unique maximum, an exact count), and
every gold is scored against itself with ``scoring.score`` before the file is written. Each
question is phrased the way a person at a shell might ask it, unlike ``rlm eval``'s templates.
"""

from __future__ import annotations

import ast
import json
import sys
from collections import Counter, defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_data  # noqa: E402
import scoring  # noqa: E402
from make_questions import COMMON_EXC, PYVER, STDLIB, Package, package_imports, render  # noqa: E402

SET = "heldout2"
OTHER_SETS = ("dev.jsonl", "dev2.jsonl", "heldout.jsonl")


def _top(counter: Counter[str]) -> str:
    """The key with the highest count; asserts it is the only one with that count."""
    (a, na), (_, nb) = counter.most_common(2)
    assert na > nb, "a tie: change the question"
    return a


def _assigned(pkg: Package, rel: str, name: str) -> ast.expr:
    """The value node of the one module-level ``name = ...`` in ``rel``."""
    found = [n.value for n in pkg.files[rel].body if isinstance(n, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)]
    assert len(found) == 1, name
    return found[0]


def _where(pkg: Package) -> dict[str, list[str]]:
    """Class name -> files of ``pkg`` defining a class of that name (at any depth)."""
    where: dict[str, list[str]] = defaultdict(list)
    for f, m in pkg.files.items():
        for n in ast.walk(m):
            if isinstance(n, ast.ClassDef):
                where[n.name].append(f)
    return where


# -- the standard library ----------------------------------------------------------------------------

def _most_classes(pkg: Package) -> dict[str, Any]:
    top = Counter({f: sum(isinstance(n, ast.ClassDef) for n in m.body) for f, m in pkg.files.items()})
    nested = Counter({f: sum(isinstance(n, ast.ClassDef) for n in ast.walk(m)) for f, m in pkg.files.items()})
    gold = _top(top)
    assert _top(nested) == gold  # the same file whether nested classes count or not
    return {"kind": "max", "score": "path", "gold": gold, "aliases": pkg.path_aliases(gold),
            "question": f"which file in {pkg.folder}/ defines the most classes?"}


def _method_owner(pkg: Package, method: str) -> dict[str, Any]:
    owners = [c for _, c, f in pkg.functions() if c and f.name == method]
    assert len(owners) == 1, owners
    classes = sorted({k.name for _, k in pkg.classes()})
    return {"kind": "lookup", "score": "identifier", "gold": owners[0], "options": [k for k in classes if k != owners[0]],
            "question": f"Which class in {pkg.folder} has a {method} method?"}


def _dict_size(pkg: Package, rel: str, name: str) -> dict[str, Any]:
    value = _assigned(pkg, rel, name)
    assert isinstance(value, ast.Dict) and None not in value.keys
    keys = [ast.literal_eval(k) for k in value.keys if k is not None]
    assert len(set(keys)) == len(keys)  # no key written twice
    return {"kind": "count", "score": "number", "gold": len(keys),
            "question": f"How many entries are in the {name} dict in {pkg.folder}/{rel}?"}


def _int_constant(pkg: Package, rel: str, name: str) -> dict[str, Any]:
    value = ast.literal_eval(_assigned(pkg, rel, name))
    assert type(value) is int
    assert sum(n.targets[0].id == name for p in pkg.files.values() for n in p.body if isinstance(n, ast.Assign)
               and isinstance(n.targets[0], ast.Name)) == 1  # one MAGIC in the package
    return {"kind": "lookup", "score": "number", "gold": value,
            "question": f"what's {name} set to in {pkg.folder}/{rel}?"}


def _alias_count(pkg: Package, codec: str) -> dict[str, Any]:
    value = _assigned(pkg, "aliases.py", "aliases")
    assert isinstance(value, ast.Dict)
    pairs = [(ast.literal_eval(k), ast.literal_eval(v)) for k, v in zip(value.keys, value.values, strict=True)
             if k is not None]
    assert len({k for k, _ in pairs}) == len(pairs)
    names = [k for k, v in pairs if v == codec]
    assert len(names) >= 5
    assert not scoring.figures(" ".join(names))  # listing the aliases adds no figure to an answer
    return {"kind": "count", "score": "number", "gold": len(names),
            "question": f"In {pkg.folder}/aliases.py, how many alias names map to the {codec} codec?"}


def _most_methods(pkg: Package, rel: str) -> dict[str, Any]:
    per = Counter({n.name: sum(isinstance(s, ast.FunctionDef) for s in n.body)
                   for n in pkg.files[rel].body if isinstance(n, ast.ClassDef)})
    gold = _top(per)
    assert len(_where(pkg)[gold]) == 1
    return {"kind": "max", "score": "identifier", "gold": gold, "options": sorted(set(per) - {gold}),
            "question": f"Which class in {pkg.folder}/{rel} defines the most methods?"}


def _base_class(pkg: Package, cls: str) -> dict[str, Any]:
    where = _where(pkg)
    assert len(where[cls]) == 1
    node = next(n for n in ast.walk(pkg.files[where[cls][0]]) if isinstance(n, ast.ClassDef) and n.name == cls)
    assert len(node.bases) == 1 and isinstance(node.bases[0], ast.Name)
    gold = node.bases[0].id
    return {"kind": "lookup", "score": "identifier", "gold": gold, "options": sorted(set(COMMON_EXC) - {gold}),
            "question": f"{cls} in {pkg.folder} - what's its base class?"}


def _class_file(pkg: Package, cls: str) -> dict[str, Any]:
    files = _where(pkg)[cls]
    assert len(files) == 1
    return {"kind": "lookup", "score": "path", "gold": files[0], "aliases": pkg.path_aliases(files[0]),
            "question": f"where is the {cls} class defined in {pkg.folder}?"}


def _param_count(pkg: Package, rel: str, func: str) -> dict[str, Any]:
    fns = [f for p, c, f in pkg.functions() if f.name == func]
    assert len(fns) == 1 and fns[0] in pkg.files[rel].body
    a = fns[0].args
    assert not a.vararg and not a.kwarg
    return {"kind": "count", "score": "number", "gold": len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs),
            "question": f"How many parameters does {func}() in {pkg.folder}/{rel} take?"}


def _no_import(pkg: Package, module: str) -> dict[str, Any]:
    assert module not in package_imports(pkg)
    assert not any(module in (pkg.root / f).read_text(encoding="utf-8") for f in pkg.files)  # not even mentioned
    modules = sorted(f"{pkg.folder}.{f[:-3].replace('/', '.')}" for f in pkg.files if not f.endswith("__init__.py"))
    return {"kind": "negative", "score": "none", "gold": "none", "options": modules,
            "question": f"Which modules of the {pkg.folder} package import {module}?"}


def stdlib_questions() -> list[dict[str, Any]]:
    """Ten questions, one per stdlib package none of the other sets asks about."""
    p = {name: Package(name) for name in ("asyncio", "collections", "html", "re", "encodings", "xmlrpc", "tomllib",
                                          "importlib", "multiprocessing", "dbm")}
    rows = [
        _most_classes(p["asyncio"]),
        _method_owner(p["collections"], "new_child"),
        _dict_size(p["html"], "entities.py", "name2codepoint"),
        _int_constant(p["re"], "_constants.py", "MAGIC"),
        _alias_count(p["encodings"], "gb2312"),
        _most_methods(p["xmlrpc"], "client.py"),
        _base_class(p["tomllib"], "TOMLDecodeError"),
        _class_file(p["importlib"], "TraversableResources"),
        _param_count(p["multiprocessing"], "managers.py", "AutoProxy"),
        _no_import(p["dbm"], "pickle"),
    ]
    assert len(rows) == len(p)
    return [{"corpus": f"stdlib:{name}", "python": PYVER, **q} for name, q in zip(p, rows, strict=True)]


# -- the access log ----------------------------------------------------------------------------------

def log_questions() -> list[dict[str, Any]]:
    recs = make_data.log_records()
    ips = {r["ip"] for r in recs}
    day = Counter(r["time"].strftime("%Y-%m-%d") for r in recs)["2026-09-15"]
    assert {r["path"] for r in recs if r["status"] == 401} == {"/api/login"}
    assert {r["method"] for r in recs if r["path"] == "/api/login"} == {"POST"}
    users = Counter(r["user"] for r in recs if r["user"] != "-")
    user = _top(users)
    ip404 = _top(Counter(r["ip"] for r in recs if r["status"] == 404))
    pages = Counter(r["path"] for r in recs if r["path"].startswith("/products/"))
    page = _top(pages)
    others = sorted(set(pages) - {page})
    assert not any(r["status"] == 503 for r in recs)
    return [{"corpus": "log", **q} for q in (
        {"kind": "count", "score": "number", "gold": day,
         "question": "How many requests came in on 15 September 2026, going by the log's timestamps?"},
        {"kind": "count", "score": "number", "gold": sum(r["status"] == 401 for r in recs),
         "question": "how many login attempts were rejected with a 401?"},
        {"kind": "max", "score": "choice", "gold": user, "options": sorted(set(users) - {user}),
         "question": "Which logged-in user (the user field of the log) made the most requests?"},
        {"kind": "max", "score": "choice", "gold": ip404, "options": sorted(ips - {ip404}),
         "question": "which IP address got the most 404s?"},
        {"kind": "count", "score": "number", "gold": sum(r["status"] >= 500 for r in recs),
         "question": "How many responses in the log have a 5xx status code?"},
        {"kind": "max", "score": "choice", "gold": page, "aliases": [page.rsplit("/", 1)[1]],
         "options": others + [o.rsplit("/", 1)[1] for o in others],
         "question": "Which product page (a path under /products/) was requested most often?"},
        {"kind": "negative", "score": "none", "gold": "none", "options": [],
         "question": "Were any requests answered with a 503? List them if so."},
    )]


# -- the orders --------------------------------------------------------------------------------------

def jsonl_questions() -> list[dict[str, Any]]:
    orders = make_data.orders()
    coupons = Counter(o["coupon"] for o in orders if "coupon" in o)
    coupon = _top(coupons)
    revenue: Counter[str] = Counter()
    for o in orders:
        for it in o["items"]:
            revenue[it["sku"]] += it["qty"] * it["unit_price"]
    sku = _top(revenue)
    titles = {it["sku"]: it["title"] for o in orders for it in o["items"]}
    eth = sum(it["qty"] for o in orders for it in o["items"] if it["sku"] == "BNS-ETH")
    post = {o["customer"]["id"] for o in orders if o["customer"]["email"].endswith("@post.example")}
    assert len({o["customer"]["name"] for o in orders if o["customer"]["id"] in post}) == len(post)
    stamp = [(datetime.strptime(o["placed_at"], "%Y-%m-%dT%H:%M:%SZ"), o["order_id"]) for o in orders]
    assert stamp == sorted(stamp)
    july = [i for i, (t, _) in enumerate(stamp) if (t.year, t.month) == (2026, 7)]
    first, before = stamp[july[0]][0], stamp[july[0] - 1][0]
    midnight = datetime(2026, 7, 1)
    assert first - midnight >= timedelta(hours=5) and midnight - before >= timedelta(hours=5)  # any time zone agrees
    ids = [oid for _, oid in stamp]
    assert len(set(ids)) == len(ids)
    return [{"corpus": "jsonl", **q} for q in (
        {"kind": "count", "score": "number", "gold": sum(o["status"] == "refunded" for o in orders),
         "question": "how many orders got refunded?"},
        {"kind": "max", "score": "choice", "gold": coupon, "options": sorted(set(coupons) - {coupon}),
         "question": "Counting every order in the file whatever its status, which coupon code shows up most often?"},
        {"kind": "sum", "score": "number", "gold": round(sum(o["shipping"] for o in orders), 2), "tolerance": 0.01,
         "question": "How much was charged for shipping across all the orders, in EUR?"},
        {"kind": "max", "score": "choice", "gold": sku, "aliases": [titles[sku]],
         "options": sorted(set(revenue) - {sku}) + sorted(t for s, t in titles.items() if s != sku),
         "question": "Which product brought in the most money overall (quantity times unit price, over every order)?"},
        {"kind": "sum", "score": "number", "gold": eth,
         "question": "How many units of BNS-ETH were ordered in total, counting quantities?"},
        {"kind": "count", "score": "number", "gold": len(post),
         "question": "how many different customers have an email address at post.example?"},
        {"kind": "lookup", "score": "choice", "gold": ids[july[0]], "options": ids[:july[0]] + ids[july[0] + 1:],
         "question": "What's the order id of the first order placed in July 2026?"},
    )]


# -- the set -----------------------------------------------------------------------------------------

def self_check(rows: list[dict[str, Any]]) -> None:
    """Each gold, given as the answer, scores right; a wrong answer of the same sort scores wrong."""
    for q in rows:
        assert scoring.score(q, str(q["gold"]))[0], q["id"]
        if q["score"] == "number":
            wrong = str(q["gold"] + 1)
        elif q["score"] in ("choice", "identifier"):
            wrong = str(q["options"][0])
        else:
            wrong = {"path": "nowhere_else.py", "none": "yes, 3 of them"}[q["score"]]
        assert not scoring.score(q, wrong)[0], q["id"]


def build() -> list[dict[str, Any]]:
    rows = stdlib_questions() + log_questions() + jsonl_questions()
    rows = [{"id": f"k{i:02d}", "set": SET, **q} for i, q in enumerate(rows, 1)]
    assert len(rows) == 24 and len({q["question"] for q in rows}) == len(rows)
    others = [json.loads(x) for name in OTHER_SETS
              for x in (HERE / name).read_text(encoding="utf-8").splitlines() if x.strip()]
    taken = {q["corpus"] for q in others if q["corpus"].startswith("stdlib:")}
    assert not {q["corpus"] for q in rows} & taken, "a stdlib package another set asks about"
    assert not {q["question"] for q in rows} & {q["question"] for q in others}
    assert all((STDLIB / q["corpus"].split(":", 1)[1]).is_dir() for q in rows if q["corpus"].startswith("stdlib:"))
    self_check(rows)
    return rows


def main() -> None:
    rows = build()
    (HERE / f"{SET}.jsonl").write_text(render(rows), encoding="utf-8")
    per = Counter(q["corpus"].split(":", 1)[0] for q in rows)
    print(f"{SET}: {len(rows)} questions ({', '.join(f'{k} {n}' for k, n in per.items())}); self-check passed")


if __name__ == "__main__":
    main()
