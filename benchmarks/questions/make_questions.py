"""Write the question sets of the question bench (``dev.jsonl``, ``heldout.jsonl``) with golds computed by code.

    python benchmarks/questions/make_questions.py            # both files, next to this script
    python benchmarks/questions/make_questions.py --check    # exit 1 if the files differ from a fresh run

Golds over the standard library come from ``ast`` over the real files of the interpreter running
this script (``sysconfig.get_paths()['stdlib']``; each line records its ``python`` version, and the
bench refuses to score a stdlib question on another version). Golds over the access log and the
orders file come from the records ``make_data.py`` writes. Each question picks its subject with a
seeded random choice among the candidates that give one unambiguous answer.

A line: ``id``, ``set``, ``corpus`` (``stdlib:<folder under the stdlib>``, ``log`` or ``jsonl``),
``kind`` (what it asks: ``count``, ``sum``, ``max``, ``lookup``, ``negative``, ...), ``question``,
``gold``, ``score`` (how ``scoring.py`` compares: ``number``, ``choice``, ``identifier``, ``path``,
``none``), and per scoring kind ``options`` (every other answer of the same sort, each naming a
wrong answer), ``aliases`` (other spellings of the gold) or ``tolerance``.

Dev and held-out share no question and no subject. Tune on dev only; never read held-out per question.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import sys
import sysconfig
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_data  # noqa: E402

HERE = Path(__file__).resolve().parent
STDLIB = Path(sysconfig.get_paths()["stdlib"])
PYVER = ".".join(map(str, sys.version_info[:3]))
COMMON_EXC = ("ValueError", "TypeError", "KeyError", "IndexError", "RuntimeError", "AttributeError", "OSError",
              "NotImplementedError", "LookupError", "Exception", "StopIteration", "AssertionError", "IOError")


# -- the standard library, through ast ---------------------------------------------------------------

class Package:
    """Every ``.py`` file of one stdlib folder, parsed: ``files`` maps corpus-relative paths to modules."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.root = STDLIB / folder
        self.files = {p.relative_to(self.root).as_posix(): ast.parse(p.read_text(encoding="utf-8"))
                      for p in sorted(self.root.rglob("*.py")) if "__pycache__" not in p.parts}

    def classes(self) -> list[tuple[str, ast.ClassDef]]:
        """``(path, class)`` for every class at module level."""
        return [(f, n) for f, m in self.files.items() for n in m.body if isinstance(n, ast.ClassDef)]

    def functions(self) -> list[tuple[str, str | None, ast.FunctionDef]]:
        """``(path, owning class or None, function)`` for module-level functions and methods."""
        out: list[tuple[str, str | None, ast.FunctionDef]] = []
        for f, m in self.files.items():
            for n in m.body:
                if isinstance(n, ast.FunctionDef):
                    out.append((f, None, n))
                elif isinstance(n, ast.ClassDef):
                    out.extend((f, n.name, s) for s in n.body if isinstance(s, ast.FunctionDef))
        return out

    def path_aliases(self, rel: str) -> list[str]:
        """Spellings of a file that count as naming it: relative to the corpus, with the folder, and the
        bare file name when no other file of the package has it."""
        names = [rel, f"{self.folder}/{rel}"]
        base = rel.rsplit("/", 1)[-1]
        if sum(1 for f in self.files if f.rsplit("/", 1)[-1] == base) == 1 and base not in names:
            names.append(base)
        return names


def _raised(fn: ast.FunctionDef) -> set[str]:
    out = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Raise) and n.exc is not None:
            e = n.exc.func if isinstance(n.exc, ast.Call) else n.exc
            if isinstance(e, ast.Name):
                out.add(e.id)
            elif isinstance(e, ast.Attribute):
                out.add(e.attr)
            else:
                out.add("?")
        elif isinstance(n, ast.Raise):
            out.add("?")  # a bare re-raise: the answer would not be one name
    return out


def _nparams(fn: ast.FunctionDef) -> int | None:
    a = fn.args
    if a.vararg or a.kwarg:
        return None
    return len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)


def _unique(names: list[str]) -> set[str]:
    c = Counter(names)
    return {n for n, k in c.items() if k == 1}


def q_method_owner(pkg: Package, rng: random.Random, phrasing: str) -> dict[str, Any]:
    fns = pkg.functions()
    all_names = [f.name for _, _, f in fns]
    methods = [(p, c, f) for p, c, f in fns if c and not f.name.startswith("_") and f.name in _unique(all_names)]
    p, c, f = rng.choice(methods)
    classes = sorted({k.name for _, k in pkg.classes()})
    return {"kind": "lookup", "score": "identifier", "gold": c, "options": [k for k in classes if k != c],
            "question": phrasing.format(m=f.name, pkg=pkg.folder)}


def q_constant(pkg: Package, rng: random.Random, phrasing: str) -> dict[str, Any]:
    consts: list[tuple[str, str, int]] = []
    for p, m in pkg.files.items():
        for n in m.body:
            if (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                    and n.targets[0].id.isupper() and isinstance(n.value, ast.Constant)
                    and type(n.value.value) is int and n.value.value > 1):
                consts.append((p, n.targets[0].id, n.value.value))
    uniq = _unique([c for _, c, _ in consts])
    p, name, value = rng.choice([c for c in consts if c[1] in uniq])
    return {"kind": "lookup", "score": "number", "gold": value,
            "question": phrasing.format(name=name, file=f"{pkg.folder}/{p}", pkg=pkg.folder)}


def q_raises(pkg: Package, rng: random.Random, phrasing: str) -> dict[str, Any]:
    fns = pkg.functions()
    uniq = _unique([f.name for _, _, f in fns])
    cands = [(p, c, f, next(iter(_raised(f)))) for p, c, f in fns
             if f.name in uniq and not f.name.startswith("__") and len(_raised(f)) == 1 and "?" not in _raised(f)]
    p, c, f, exc = rng.choice(cands)
    qual = f"{c}.{f.name}" if c else f.name
    known = {k.name for _, k in pkg.classes() if k.name.endswith(("Error", "Exception", "Warning"))}
    return {"kind": "lookup", "score": "identifier", "gold": exc,
            "options": sorted((known | set(COMMON_EXC)) - {exc}),
            "question": phrasing.format(qual=qual, file=f"{pkg.folder}/{p}", pkg=pkg.folder)}


def q_param_count(pkg: Package, rng: random.Random, phrasing: str) -> dict[str, Any]:
    fns = pkg.functions()
    uniq = _unique([f.name for _, _, f in fns])
    cands = [(p, f, _nparams(f)) for p, c, f in fns if c is None and f.name in uniq and not f.name.startswith("_")
             and (_nparams(f) or 0) >= 2]
    p, f, n = rng.choice(cands)
    return {"kind": "count", "score": "number", "gold": n,
            "question": phrasing.format(func=f.name, file=f"{pkg.folder}/{p}", pkg=pkg.folder)}


def q_base_file(pkg: Package, rng: random.Random, phrasing: str) -> dict[str, Any]:
    where = defaultdict(list)
    for p, k in pkg.classes():
        where[k.name].append(p)
    cands = []
    for p, k in pkg.classes():
        for b in k.bases:
            name = b.attr if isinstance(b, ast.Attribute) else b.id if isinstance(b, ast.Name) else None
            if name and len(where.get(name, [])) == 1 and where[name][0] != p and len(where[k.name]) == 1:
                cands.append((p, k.name, name, where[name][0]))
    p, cls, base, bfile = rng.choice(sorted(set(cands)))
    return {"kind": "lookup", "score": "path", "gold": bfile, "aliases": pkg.path_aliases(bfile),
            "options": sorted(f for f in pkg.files if f != bfile),
            "question": phrasing.format(cls=cls, file=f"{pkg.folder}/{p}", pkg=pkg.folder)}


def q_class_count(pkg: Package, rng: random.Random, phrasing: str) -> dict[str, Any]:
    per = Counter(p for p, _ in pkg.classes())
    p = rng.choice(sorted(f for f, n in per.items() if n >= 3))
    return {"kind": "count", "score": "number", "gold": per[p],
            "question": phrasing.format(file=f"{pkg.folder}/{p}", pkg=pkg.folder)}


def q_all_count(pkg: Package, rng: random.Random, phrasing: str) -> dict[str, Any]:
    cands = []
    for p, m in pkg.files.items():
        for n in m.body:
            if (isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)
                    and isinstance(n.value, (ast.List, ast.Tuple))):
                cands.append((p, len(n.value.elts)))
    p, k = rng.choice(cands)
    return {"kind": "count", "score": "number", "gold": k,
            "question": phrasing.format(file=f"{pkg.folder}/{p}", pkg=pkg.folder)}


def package_imports(pkg: Package) -> set[str]:
    """Top-level names of the absolute imports anywhere in ``pkg``."""
    imported: set[str] = set()
    for m in pkg.files.values():
        for n in ast.walk(m):
            if isinstance(n, ast.Import):
                imported |= {a.name.split(".")[0] for a in n.names}
            elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                imported.add(n.module.split(".")[0])
    return imported


def q_no_import(pkg: Package, rng: random.Random, phrasing: str) -> dict[str, Any]:
    imported = package_imports(pkg)
    cands = [m for m in ("subprocess", "pickle", "sqlite3", "asyncio", "shutil", "tempfile", "ctypes")
             if m not in imported]
    mod = rng.choice(cands)
    modules = sorted(f"{pkg.folder}.{f[:-3].replace('/', '.')}" for f in pkg.files if not f.endswith("__init__.py"))
    return {"kind": "negative", "score": "none", "gold": "none", "options": modules,
            "question": phrasing.format(mod=mod, pkg=pkg.folder)}


def q_most_params(pkg: Package, rng: random.Random, phrasing: str) -> dict[str, Any]:
    per: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for p, c, f in pkg.functions():
        a = f.args
        if c is None:
            per[p].append((len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs), f.name))
    cands = []
    for p, fs in per.items():
        ranked = sorted(fs, reverse=True)
        if len(ranked) >= 4 and ranked[0][0] > ranked[1][0]:
            cands.append((p, ranked[0][1], [n for _, n in ranked[1:]]))
    p, name, others = rng.choice(sorted(cands))
    return {"kind": "max", "score": "identifier", "gold": name, "options": sorted(others),
            "question": phrasing.format(file=f"{pkg.folder}/{p}", pkg=pkg.folder)}


# -- the log and the orders ---------------------------------------------------------------------------

def _log_questions(set_name: str) -> list[dict[str, Any]]:
    recs = make_data.log_records()
    paths = sorted({r["path"] for r in recs} - {"/"})
    ips = Counter(r["ip"] for r in recs)

    def most(counter: Counter[str]) -> str:
        (a, na), (_, nb) = counter.most_common(2)
        assert na > nb, "a tie: change the question"
        return a

    if set_name == "dev":
        static = Counter(r["path"] for r in recs if r["path"].startswith("/static/"))
        return [
            {"kind": "count", "score": "number", "gold": sum(r["status"] == 500 for r in recs),
             "question": "how many requests in this access log failed with an HTTP 500?"},
            {"kind": "max", "score": "choice", "gold": most(static), "options": sorted(set(static) - {most(static)}),
             "question": "Which file under /static/ gets requested the most?"},
            {"kind": "count", "score": "number", "gold": len(ips),
             "question": "How many different client IP addresses appear in the log?"},
            {"kind": "max", "score": "number", "gold": max(r["size"] or 0 for r in recs),
             "question": "What's the biggest response body size (in bytes) that the server sent?"},
        ]
    login = sum(r["method"] == "POST" and r["path"] == "/api/login" for r in recs)
    gone = {r["path"] for r in recs if r["status"] == 410}
    assert len(gone) == 1
    return [
        {"kind": "count", "score": "number", "gold": sum(r["status"] == 404 for r in recs),
         "question": "How many requests got a 404 response?"},
        {"kind": "sum", "score": "number", "gold": sum(r["size"] or 0 for r in recs if r["path"].startswith("/static/")),
         "question": "What is the total number of bytes served for paths under /static/ ?"},
        {"kind": "count", "score": "number", "gold": login,
         "question": "count the POST requests to /api/login"},
        {"kind": "max", "score": "choice", "gold": most(ips), "options": sorted(set(ips) - {most(ips)}),
         "question": "Which client IP sent the most requests?"},
        {"kind": "negative", "score": "none", "gold": "none", "options": [],
         "question": "Did anyone send DELETE requests? If so, how many?"}
        if not any(r["method"] == "DELETE" for r in recs) else {},
        {"kind": "count", "score": "number", "gold": sum(r["agent"].startswith("curl/") for r in recs),
         "question": "How many of the requests were made with curl?"},
        {"kind": "lookup", "score": "choice", "gold": next(iter(gone)), "options": sorted(set(paths) - gone),
         "question": "One URL answers 410 Gone. Which path is it?"},
    ]


def _jsonl_questions(set_name: str) -> list[dict[str, Any]]:
    orders = make_data.orders()
    names = sorted({o["customer"]["name"] for o in orders})
    ids = {o["customer"]["name"]: o["customer"]["id"] for o in orders}

    def top(counter: Counter[str]) -> str:
        (a, na), (_, nb) = counter.most_common(2)
        assert na > nb, "a tie: change the question"
        return a

    if set_name == "dev":
        carriers = Counter(o["carrier"] for o in orders if "carrier" in o)
        delivered = [o["total"] for o in orders if o["status"] == "delivered"]
        return [
            {"kind": "count", "score": "number", "gold": sum(o["status"] == "processing" for o in orders),
             "question": "How many orders are still in processing?"},
            {"kind": "count", "score": "number", "gold": len(names),
             "question": "how many distinct customers have placed an order?"},
            {"kind": "max", "score": "choice", "gold": top(carriers), "options": sorted(set(carriers) - {top(carriers)}),
             "question": "Which shipping carrier handled the largest number of orders?"},
            {"kind": "mean", "score": "number", "gold": round(sum(delivered) / len(delivered), 2), "tolerance": 0.01,
             "question": "What's the average order total (EUR) for delivered orders? Round to cents."},
        ]
    per_customer = Counter(o["customer"]["name"] for o in orders)
    best = top(per_customer)
    totals = sorted(orders, key=lambda o: o["total"], reverse=True)
    assert totals[0]["total"] > totals[1]["total"]
    units: Counter[str] = Counter()
    for o in orders:
        for it in o["items"]:
            units[it["sku"]] += it["qty"]
    sku = top(units)
    titles = {it["sku"]: it["title"] for o in orders for it in o["items"]}
    assert not any(o.get("carrier") == "FedEx" for o in orders)
    return [
        {"kind": "max", "score": "choice", "gold": best, "aliases": [ids[best]],
         "options": sorted(set(names) - {best}),
         "question": "Who is the customer with the most orders?"},
        {"kind": "sum", "score": "number", "tolerance": 0.01,
         "gold": round(sum(o["total"] for o in orders if o["status"] == "cancelled"), 2),
         "question": "What do the cancelled orders add up to, in euros (sum of their totals)?"},
        {"kind": "max", "score": "choice", "gold": totals[0]["order_id"],
         "options": [o["order_id"] for o in totals[1:]],
         "question": "which order has the highest total? give me its order id"},
        {"kind": "max", "score": "choice", "gold": sku, "aliases": [titles[sku]],
         "options": sorted(set(units) - {sku}) + sorted(t for s, t in titles.items() if s != sku),
         "question": "Counting quantities, which product SKU sold the most units overall?"},
        {"kind": "count", "score": "number", "gold": sum(o["placed_at"].startswith("2026-03") for o in orders),
         "question": "How many orders were placed in March 2026?"},
        {"kind": "negative", "score": "none", "gold": "none", "options": [o["order_id"] for o in orders],
         "question": "List the orders that were shipped with FedEx."},
        {"kind": "count", "score": "number", "gold": sum(o.get("coupon") == "BREW5" for o in orders),
         "question": "How many orders used the coupon code BREW5?"},
    ]


# -- the sets ----------------------------------------------------------------------------------------

#: (corpus folder, generator, phrasing) per set: dev and held-out ask about different subjects.
STDLIB_PLAN: dict[str, list[tuple[str, Any, str]]] = {
    "dev": [
        ("concurrent", q_method_owner, "In concurrent/, which class implements a `{m}` method?"),
        ("logging", q_constant, "what's the value of {name} in {file}?"),
        ("json", q_param_count, "How many arguments does `{func}` in {file} accept?"),
        ("concurrent", q_all_count, "How many names are exported through __all__ in {file}?"),
    ],
    "heldout": [
        ("email", q_method_owner, "Which class has the method {m}()?"),
        ("http", q_constant, "What value is the constant {name} given in {file}?"),
        ("logging", q_raises, "When `{qual}` fails, which exception type does it raise?"),
        ("email", q_param_count, "how many parameters does {func}() take?"),
        ("email", q_base_file, "`{cls}` is declared in {file}. In which file is its base class defined?"),
        ("http", q_class_count, "How many top-level classes does {file} define?"),
        ("json", q_no_import, "Which modules of the json package import {mod}?"),
        ("logging", q_most_params, "In {file}, which module-level function has the longest parameter list?"),
    ],
}


def build(set_name: str) -> list[dict[str, Any]]:
    """The questions of one set (``dev`` or ``heldout``), golds filled in."""
    out: list[dict[str, Any]] = []
    packages: dict[str, Package] = {}
    for i, (folder, gen, phrasing) in enumerate(STDLIB_PLAN[set_name]):
        pkg = packages.setdefault(folder, Package(folder))
        q = gen(pkg, random.Random(f"{set_name}:{i}:{gen.__name__}"), phrasing)
        out.append({"corpus": f"stdlib:{folder}", "python": PYVER, **q})
    out += [{"corpus": "log", **q} for q in _log_questions(set_name) if q]
    out += [{"corpus": "jsonl", **q} for q in _jsonl_questions(set_name)]
    prefix = "d" if set_name == "dev" else "h"
    return [{"id": f"{prefix}{i + 1:02d}", "set": set_name, **q} for i, q in enumerate(out)]


def render(rows: list[dict[str, Any]]) -> str:
    """The JSON Lines text of a set (key order fixed)."""
    keys = ("id", "set", "corpus", "kind", "question", "gold", "score", "aliases", "tolerance", "options", "python")
    return "".join(json.dumps({k: r[k] for k in keys if k in r}, ensure_ascii=False) + "\n" for r in rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the files instead of writing them")
    args = ap.parse_args()
    dev, held = build("dev"), build("heldout")
    assert not {q["question"] for q in dev} & {q["question"] for q in held}
    status = 0
    for name, rows in (("dev", dev), ("heldout", held)):
        path, text = HERE / f"{name}.jsonl", render(rows)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                print(f"{path} differs from a fresh run", file=sys.stderr)
                status = 1
        else:
            path.write_text(text, encoding="utf-8")
            print(f"{path}: {len(rows)} questions")
    return status


if __name__ == "__main__":
    sys.exit(main())
