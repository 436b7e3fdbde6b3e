"""Question generators of ``rlm eval``: questions whose exact answers are computed by code.

Every generator is seeded (``random.Random(f"{seed}:{family}")``), so the same seed and corpus
give the same questions, and adding a family does not change another's. Each returns
:class:`Task` objects; a task that needs the corpus changed (a planted needle, generated
records) carries a :class:`CorpusEdit`, applied in memory by ``store.derive_corpus``: the
user's files are never touched.

Families (docs/eval.md lists them with their scoring rules):

* ``needle`` (S-NIAH style): a sentence holding a random key planted as a new line at a
  random depth of ``context`` (kind ``single``); every third question plants three keys in
  different files and asks for all of them (kind ``multi``).
* ``code``: facts Python's ``ast`` answers exactly, from the corpus's own ``.py`` files: which
  file defines a function (``defines``), a parameter's default (``default``), a class's bases
  (``bases``), how many functions of a file call a name (``calls``).
* ``aggregate`` (OOLONG style): a generated log of ``records`` lines appended to the corpus;
  counts, sums and most/least frequent labels over every line.
* ``pairs``: a generated ticket list appended to the corpus; which pairs (and how many pairs)
  of tickets share a customer and a product (a quadratic comparison).
* ``semantic`` (OOLONG style, ``evaluation.semantic``): a generated file of customer messages per
  question, each of a hidden category that no keyword gives away; counts, the most common
  category, the ids of the rarest one: every message must be judged by its meaning.
"""

from __future__ import annotations

import ast
import random
import re
import string
from collections import Counter
from collections.abc import Iterator
from typing import Any

from rlm_cli.evaluation.phrasing import Phrasing
from rlm_cli.evaluation.semantic import semantic_tasks
from rlm_cli.evaluation.task import FAMILIES, CorpusEdit, CorpusText, Task, free_path


def generate(families: list[str], corpus: CorpusText, *, limit: int, seed: int, records: int,
             split: str = "dev") -> dict[str, list[Task]]:
    """Up to ``limit`` tasks per family in ``families`` (fewer where the corpus cannot give more:
    ``code`` needs Python files). ``records`` sizes the generated log, ticket lists and message files. ``split``
    (``evaluation.phrasing``): ``dev``, the wording and seeds the families always had, or
    ``test``, other wordings and other random streams (``f"{seed}:{family}:test"``).

    Raises:
        ValueError: an unknown family name or split.
    """
    out: dict[str, list[Task]] = {}
    for fam in families:
        rng = random.Random(f"{seed}:{fam}" if split == "dev" else f"{seed}:{fam}:{split}")
        phr = Phrasing(split, random.Random(f"{seed}:{fam}:{split}:phrasing"))
        if fam == "needle":
            out[fam] = needle_tasks(corpus, rng, limit, phr)
        elif fam == "code":
            out[fam] = code_tasks(corpus, rng, limit, phr)
        elif fam == "aggregate":
            out[fam] = aggregate_tasks(corpus, rng, limit, records, phr)
        elif fam == "pairs":
            out[fam] = pairs_tasks(corpus, rng, limit, records, phr)
        elif fam == "semantic":
            out[fam] = semantic_tasks(corpus, rng, limit, records, phr)
        else:
            raise ValueError(f"unknown family {fam!r}; choose from {', '.join(FAMILIES)}")
    return out


# -- needle ------------------------------------------------------------------------------------

_ADJ = ("amber", "silent", "crimson", "hollow", "northern", "velvet", "brisk", "gilded", "quiet", "rapid",
        "scarlet", "frozen", "lunar", "copper", "misty", "golden")
_NOUN = ("falcon", "harbor", "lantern", "meadow", "orchid", "quarry", "summit", "tundra", "willow", "canyon",
         "glacier", "beacon", "compass", "prairie", "citadel", "delta")


def _key(rng: random.Random) -> str:
    return "".join(rng.choices(string.ascii_uppercase, k=4)) + "-" + "".join(rng.choices(string.digits, k=4))


def plant(text: str, sentence: str, fraction: float, path: str) -> str:
    """``text`` with ``sentence`` inserted as a line of its own at the line boundary nearest to
    ``fraction`` (0..1) of its length; in a ``.py`` file the line is a comment."""
    line = ("# " if path.endswith(".py") else "") + sentence
    pos = int(len(text) * fraction)
    cut = text.rfind("\n", 0, pos) + 1  # start of the line holding pos (0: the first line)
    return f"{text[:cut]}{line}\n{text[cut:]}"


def _pick_file(corpus: CorpusText, rng: random.Random, sizes: list[int], total: int) -> tuple[str, float]:
    """A file and a fraction inside it, for a uniform random depth of ``context`` (skipping the
    first 2%, which the root model sees in its metadata)."""
    target = rng.uniform(0.02, 1.0) * total
    acc = 0
    for path, size in zip(corpus.paths, sizes, strict=True):
        if acc + size >= target and size:
            return path, (target - acc) / size
        acc += size
    return corpus.paths[-1], 0.5


def needle_tasks(corpus: CorpusText, rng: random.Random, limit: int, phr: Phrasing | None = None) -> list[Task]:
    """Single-key questions, and every third one a three-key question (kind ``multi``)."""
    phr = phr or Phrasing("dev")
    sizes = [len(corpus.text(p)) for p in corpus.paths]
    total = sum(sizes)
    tasks = []
    for i in range(limit):
        n = 3 if i % 3 == 2 else 1
        names = rng.sample([(a, b) for a in _ADJ for b in _NOUN], n)
        keys = [_key(rng) for _ in range(n)]
        replace: dict[str, str] = {}
        for (adj, noun), key in zip(names, keys, strict=True):
            path, frac = _pick_file(corpus, rng, sizes, total)
            sentence = phr.ask("needle", "sentence", adj=adj, noun=noun, key=key)
            replace[path] = plant(replace.get(path, corpus.text(path)), sentence, frac, path)
        projects = [f"{a} {b}" for a, b in names]
        if n == 1:
            question = phr.ask("needle", "single", p=projects[0])
        else:
            question = phr.ask("needle", "multi", ps=", ".join(projects[:-1]), last=projects[-1])
        tasks.append(Task(f"needle-{i + 1}", "needle", "single" if n == 1 else "multi", question,
                          keys[0] if n == 1 else keys, "key", edit=CorpusEdit(f"needle-{i + 1}", replace)))
    return tasks


# -- code ----------------------------------------------------------------------------------------

_CODE_KINDS = ("defines", "default", "bases", "calls")


def _defs_regex(name: str) -> re.Pattern[str]:
    return re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+" + re.escape(name) + r"[ \t]*\(", re.MULTILINE)


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, bool]]:
    """``(qualified name, node, False)`` of every top-level function and every method of a
    top-level class (nested functions are never asked about)."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node, False
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield f"{node.name}.{sub.name}", sub, False


def _all_defs(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _q_defines(path: str, tree: ast.Module, text: str, corpus: CorpusText, ctx: str,
               rng: random.Random, phr: Phrasing) -> Task | None:
    names = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
             and len(n.name) >= 6 and not n.name.startswith(("test", "__"))]
    rng.shuffle(names)
    for name in names[:8]:
        if len(_defs_regex(name).findall(ctx)) == 1:
            return Task("", "code", "defines", phr.ask("code", "defines", name=name),
                        path, "path", {"paths": corpus.paths})
    return None


def _q_default(path: str, tree: ast.Module, text: str, corpus: CorpusText, ctx: str,
               rng: random.Random, phr: Phrasing) -> Task | None:
    counts = Counter(n.name for n in _all_defs(tree))
    cands = []
    for qual, node, _ in _functions(tree):
        if counts[node.name] != 1 or node.name.startswith("test"):
            continue
        a = node.args
        positional = a.posonlyargs + a.args
        pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults, strict=True))
        pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None]
        for arg, default in pairs:
            value = ast.unparse(default)
            if len(value) <= 40 and "\n" not in value:
                cands.append((qual, arg.arg, value))
    if not cands:
        return None
    qual, param, value = rng.choice(cands)
    what = f"the method `{qual}`" if "." in qual else f"the function `{qual}`"
    return Task("", "code", "default", phr.ask("code", "default", path=path, param=param, what=what, qual=qual),
                value, "literal")


def _q_bases(path: str, tree: ast.Module, text: str, corpus: CorpusText, ctx: str,
             rng: random.Random, phr: Phrasing) -> Task | None:
    counts = Counter(n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef))
    cands = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.bases and counts[n.name] == 1
             and all(isinstance(b, (ast.Name, ast.Attribute)) for b in n.bases)]
    if not cands:
        return None
    node = rng.choice(cands)
    bases = [ast.unparse(b) for b in node.bases]
    return Task("", "code", "bases", phr.ask("code", "bases", path=path, cls=node.name), bases, "names",
                {"ignore": [node.name]})


def _q_calls(path: str, tree: ast.Module, text: str, corpus: CorpusText, ctx: str,
             rng: random.Random, phr: Phrasing) -> Task | None:
    """A name called (as a plain ``name(...)``) by 2-8 top-level functions or methods, and used
    nowhere else in the file (no attribute call ``.name(``, no reference without a call, no
    call at module level or from a nested function): the count is then unambiguous."""
    funcs = list(_functions(tree))
    top = {id(node): qual for qual, node, _ in funcs}
    if not all(id(d) in top for d in _all_defs(tree)) or len(set(top.values())) != len(funcs):
        return None  # nested functions, or two defs of one name (property setters): ambiguous
    callers: dict[str, set[str]] = {}
    bad: set[str] = set()
    for qual, node, _ in _functions(tree):
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name):
                callers.setdefault(sub.func.id, set()).add(qual)
    called_ids = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    in_funcs = {id(sub) for _, node, _ in _functions(tree) for sub in ast.walk(node)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and (id(n) not in called_ids or id(n) not in in_funcs):
            bad.add(n.id)  # referenced without a call, or called outside a function
        elif isinstance(n, ast.Attribute):
            bad.add(n.attr)
    cands = sorted((name, len(q)) for name, q in callers.items() if 2 <= len(q) <= 8 and name not in bad
                   and len(name) >= 3)
    if not cands:
        return None
    name, count = rng.choice(cands)
    return Task("", "code", "calls", phr.ask("code", "calls", path=path, name=name), count, "number")


_CODE_MAKERS = {"defines": _q_defines, "default": _q_default, "bases": _q_bases, "calls": _q_calls}


def code_tasks(corpus: CorpusText, rng: random.Random, limit: int, phr: Phrasing | None = None) -> list[Task]:
    """Questions about the corpus's Python files, the four kinds in turn (see the module doc).
    Files are visited in a seeded random order; each file gives at most one question."""
    py = [p for p in corpus.paths if p.endswith(".py")]
    rng.shuffle(py)
    ctx = corpus.context() if py else ""
    tasks: list[Task] = []
    kinds = list(_CODE_KINDS)
    misses = Counter[str]()
    for path in py:
        if len(tasks) >= limit:
            break
        text = corpus.text(path)
        if len(text) > 400_000:
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError):
            continue
        kind = kinds[len(tasks) % len(kinds)]
        if misses[kind] > 200:  # this corpus has none of that kind: take the next
            kind = kinds[(len(tasks) + 1) % len(kinds)]
        task = _CODE_MAKERS[kind](path, tree, text, corpus, ctx, rng, phr or Phrasing("dev"))
        if task is None:
            misses[kind] += 1
            continue
        task.id = f"code-{len(tasks) + 1}"
        task.extra.setdefault("file", path)
        tasks.append(task)
    return tasks


# -- generated records: aggregate and pairs --------------------------------------------------------

_SERVICES = ("auth", "billing", "search", "gateway", "storage", "mailer", "scheduler", "reports")
_LEVELS = ("INFO", "WARN", "ERROR")
_MESSAGES = ("request served", "cache miss", "retrying upstream", "slow query", "token refreshed",
             "connection reset", "queue drained", "config reloaded")


def generate_log(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """``n`` log records with skewed services, levels and users (so that most/least are unique
    more often), in time order."""
    users = [f"u{rng.randrange(1000, 9999)}" for _ in range(max(6, n // 40))]
    svc_w = [rng.uniform(0.3, 3.0) for _ in _SERVICES]
    user_w = [rng.uniform(0.2, 3.0) for _ in users]
    out = []
    for i in range(n):
        out.append({"ts": f"2026-11-{1 + i * 28 // max(1, n):02d}T{rng.randrange(24):02d}:{rng.randrange(60):02d}:"
                          f"{rng.randrange(60):02d}Z",
                    "service": rng.choices(_SERVICES, svc_w)[0], "level": rng.choices(_LEVELS, (6, 3, 1))[0],
                    "user": rng.choices(users, user_w)[0], "latency_ms": rng.randrange(1, 900),
                    "msg": rng.choice(_MESSAGES)})
    return out


def log_text(recs: list[dict[str, Any]]) -> str:
    """The records as log lines: ``TS service=S level=L user=U latency_ms=N msg="..."``."""
    return "".join(f'{r["ts"]} service={r["service"]} level={r["level"]} user={r["user"]} '
                   f'latency_ms={r["latency_ms"]} msg="{r["msg"]}"\n' for r in recs)


def _unique_extreme(counter: Counter[str], labels: list[str], most: bool) -> str | None:
    ranked = sorted(labels, key=lambda lab: counter.get(lab, 0), reverse=most)
    if len(ranked) < 2 or counter.get(ranked[0], 0) == counter.get(ranked[1], 0):
        return None
    return ranked[0]


def aggregate_tasks(corpus: CorpusText, rng: random.Random, limit: int, records: int,
                    phr: Phrasing | None = None) -> list[Task]:
    """Questions over a generated log of ``records`` lines (kinds ``count``, ``sum``, ``most``,
    ``least``, in turn; most/least ask for a service given a level or a user given a service, and
    only where the extreme is unique); every line can change the answer."""
    phr = phr or Phrasing("dev")
    recs = generate_log(rng, records)
    path = free_path(corpus, "service.log")
    edit = CorpusEdit("aggregate", add=((path, log_text(recs)),))
    users = sorted({r["user"] for r in recs})
    tasks: list[Task] = []
    tries = 0
    while len(tasks) < limit and tries < limit * 50:
        tries += 1
        kind = ("count", "sum", "most", "least")[len(tasks) % 4]
        svc, lvl = rng.choice(_SERVICES), rng.choice(_LEVELS)
        task: Task | None = None
        if kind == "count":
            n = sum(1 for r in recs if r["service"] == svc and r["level"] == lvl)
            task = Task("", "aggregate", kind, phr.ask("aggregate", kind, path=path, svc=svc, lvl=lvl), n, "number")
        elif kind == "sum":
            n = sum(r["latency_ms"] for r in recs if r["service"] == svc)
            task = Task("", "aggregate", kind, phr.ask("aggregate", kind, path=path, svc=svc), n, "number")
        else:  # most / least: services given a level, or users given a service
            most = kind == "most"
            if rng.random() < 0.5:
                c = Counter(r["service"] for r in recs if r["level"] == lvl)
                label = _unique_extreme(c, list(_SERVICES), most=most)
                what, labels, where = "service", list(_SERVICES), f"level={lvl}"
            else:
                c = Counter(r["user"] for r in recs if r["service"] == svc)
                label = _unique_extreme(c, sorted(c), most=most)
                what, labels, where = "user", users, f"service={svc}"
            if label:
                task = Task("", "aggregate", kind, phr.ask("aggregate", kind, path=path, what=what, where=where,
                                                           where_words=where.replace("=", " is ")),
                            label, "label", {"labels": labels})
        if task is not None and not any(t.question == task.question for t in tasks):
            task.id, task.edit = f"aggregate-{len(tasks) + 1}", edit
            tasks.append(task)
    return tasks


def generate_tickets(rng: random.Random, n: int, pairs: int) -> tuple[list[dict[str, str]], list[list[str]]]:
    """``n`` tickets with distinct (customer, product) combinations except ``pairs`` planted pairs
    that share both; returns the tickets and the gold pairs (ticket ids, each pair sorted)."""
    products = [f"{a}-{b}" for a in ("alpha", "bravo", "delta", "omega", "sigma") for b in ("kit", "pro", "max",
                                                                                             "lite")]
    combos = [(f"C{c}", p) for c in range(100, 100 + max(10, n)) for p in products]
    chosen = rng.sample(combos, n - pairs)
    tickets = [{"id": "", "customer": c, "product": p} for c, p in chosen]
    for src in rng.sample(range(len(tickets)), pairs):
        tickets.append(dict(tickets[src]))
    rng.shuffle(tickets)
    ids = rng.sample(range(1000, 1000 + 9 * n), n)
    for t, i in zip(tickets, ids, strict=True):
        t["id"] = f"T{i}"
    groups: dict[tuple[str, str], list[str]] = {}
    for t in tickets:
        groups.setdefault((t["customer"], t["product"]), []).append(t["id"])
    gold = sorted(sorted(g) for g in groups.values() if len(g) == 2)
    return tickets, gold


def tickets_text(tickets: list[dict[str, str]]) -> str:
    """One line per ticket: ``ticket T1234 customer=C123 product=alpha-kit status=open``."""
    return "".join(f"ticket {t['id']} customer={t['customer']} product={t['product']}\n" for t in tickets)


def pairs_tasks(corpus: CorpusText, rng: random.Random, limit: int, records: int,
                phr: Phrasing | None = None) -> list[Task]:
    """Questions over a generated ticket list of ``records`` lines, each with its own list: which
    pairs share a customer and a product (kind ``list``) and how many such pairs (``count``)."""
    phr = phr or Phrasing("dev")
    tasks = []
    for i in range(limit):
        n_pairs = rng.randint(2, 5)
        tickets, gold = generate_tickets(rng, max(records // 4, 2 * n_pairs + 4), n_pairs)
        path = free_path(corpus, f"tickets-{i + 1}.txt")
        edit = CorpusEdit(f"pairs-{i + 1}", add=((path, tickets_text(tickets)),))
        if i % 2 == 0:
            tasks.append(Task(f"pairs-{i + 1}", "pairs", "list", phr.ask("pairs", "list", path=path), gold, "pairs",
                              {"id_pattern": r"\bT\d{4,}\b"}, edit))
        else:
            tasks.append(Task(f"pairs-{i + 1}", "pairs", "count", phr.ask("pairs", "count", path=path), len(gold),
                              "number", edit=edit))
    return tasks
