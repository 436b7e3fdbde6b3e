"""Check that the layout of ``rlm_cli/`` shows its architecture (docs/architecture.md).

Reads every module with :mod:`ast` (nothing is imported) and reports seven kinds of violation,
one per line, as ``KIND: detail``:

- ``size``: a module over :data:`MAX_LINES` lines, or over the limit of its own that
  :data:`SIZE_LIMITS` gives it (higher for a file that is one responsibility, lower for a mixed
  one that must not grow);
- ``function``: a function over :data:`MAX_FUNCTION_LINES` lines that is not in
  :data:`FUNCTION_EXCEPTIONS`, or an entry of that table that is stale (its function is gone or
  back within the limit);
- ``attributes``: a class with more than :data:`MAX_ATTRIBUTES` attributes (the names its own
  methods assign on ``self`` and the fields annotated in its body) that :data:`ATTRIBUTE_LIMITS`
  does not allow, or an entry of that table that is stale (its class is gone or back within the
  limit);
- ``cycle``: modules that import each other in a circle, through module-level imports, or
  through any import at all (inside a function, under ``if TYPE_CHECKING:``): the flow of the
  code goes one way, whenever an import runs;
- ``layer``: an import, at module level or inside a function, of a unit whose rank in
  :data:`LAYERS` is not lower than the importer's (a unit is a package of ``rlm_cli``, or a
  top-level module), or by or of a unit the table does not name;
- ``private``: a name with a leading underscore (not a dunder) imported from another module of
  the project, or read as an attribute of an imported project module;
- ``worker``: the REPL worker (``sandbox.worker``) reaching, through its imports at any level, a
  project module outside :data:`WORKER_MODULES` and the worker side of ``sandbox``, or a
  third-party module not in :data:`WORKER_THIRD_PARTY`.

Usage::

    python scripts/check_architecture.py            # check rlm_cli/; exit 1 on any violation
    python scripts/check_architecture.py --graph    # also print the unit dependency graph
    python scripts/check_architecture.py --planned  # today's flat modules counted where they go
    python scripts/check_architecture.py --root DIR --package NAME   # another tree (tests)

Exit status: 0 clean, 1 violations found, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

#: The most lines a module may have unless :data:`SIZE_LIMITS` gives it a limit of its own.
MAX_LINES = 500

#: Modules (dotted, without the package name) with a line limit of their own, each with why: a
#: limit above :data:`MAX_LINES` for a file that is one responsibility (splitting it would only
#: pass its state around), a limit below it for a file that mixes responsibilities and must not
#: grow until it is split. Keep this short: an entry is a decision with a reason.
SIZE_LIMITS: dict[str, tuple[int, str]] = {
    "sandbox.corpus_helpers": (600, "one responsibility: CorpusView, the REPL helpers over one corpus view (grep, "
                                    "search, read_file, files, chunks) sharing its caches"),
    "models.client": (300, "mixed: the client's setup, input windows, the response cache and complete(); what "
                           "else it does has a module of its own (models.pricing, models.sending): it may not grow"),
    "config": (495, "mixed: settings resolution, user folders and the config file's reading and writing; "
                    "the value rules already moved to config_keys; it may not grow"),
}

#: The most lines a function may have (from its ``def`` to its last line, docstring included)
#: unless :data:`FUNCTION_EXCEPTIONS` names it: a screen and a half.
MAX_FUNCTION_LINES = 80

#: Functions (``module:Qualified.name``) allowed over :data:`MAX_FUNCTION_LINES`, each with why.
#: An entry whose function is gone or back within the budget is reported (``stale``).
FUNCTION_EXCEPTIONS: dict[str, str] = {}

#: The most attributes a class may have unless :data:`ATTRIBUTE_LIMITS` gives it a limit of its
#: own: the distinct names its own methods assign on ``self`` plus the fields annotated in its
#: body (a dataclass's). A class holding more state than that is usually several things sharing
#: their state through ``self``.
MAX_ATTRIBUTES = 20

#: Classes (``module:Qualified.Name``) with an attribute limit of their own, each with why: a
#: record whose fields are each a value of one thing (not state that several jobs share), or a
#: mixed class at its present count that must not grow until it is split. An entry whose class is
#: gone or back within :data:`MAX_ATTRIBUTES` is reported (``stale``).
ATTRIBUTE_LIMITS: dict[str, tuple[int, str]] = {
    "config:Settings": (33, "a record: one field per setting a user can give (flag, environment, config "
                            "file), resolved once; no method changes more than one of them; it grows by one with each new "
                            "setting (33: prompt_cache)"),
    "corpus.model:FileEntry": (22, "a record: the columns of one file's row of the saved index (a slots "
                                   "dataclass, one per file of corpora of a million files: a nested "
                                   "object per group of columns would cost memory per file)"),
    "output.findings:CheckReport": (21, "a record: one check of an audit as every report format reads it, each "
                                        "field a value of that check (checklist fields, status, answer, findings, "
                                        "run fields carried into --json); built once, never changed"),
    "app.session:Session": (33, "mixed: the resolved run plan (the mode and its reason are the plan's; "
                                "the models and the sandbox level, decided before the corpus loads, one "
                                "frozen Opening), the clients, the worker pool and the budget clock; "
                                "it may not grow"),
}

#: The project modules the REPL worker (``sandbox.worker``) may reach through its imports, at
#: any level: the wire format, the exception tree (with the JSON shapes it names: ``shapes``, data
#: only) and value rules it shares with rlm, and the
#: worker side of the sandbox package. It runs in the confined process: nothing of the corpus
#: loader, the model layer, the loop, the app or the terminal output may be in it.
WORKER_MODULES = frozenset({"protocol", "errors", "shapes", "config_keys"})
#: Sandbox modules of rlm's side (the launcher and what only it uses): never in the worker.
LAUNCHER_SIDE = frozenset({"sandbox.launcher", "sandbox.spawning", "sandbox.watchers", "sandbox.argv", "sandbox.levels", "sandbox.probes", "sandbox.users",
                           "sandbox.reaper", "sandbox.processes", "sandbox.ipc", "sandbox.paths",
                           "sandbox.notices", "sandbox.results"})
#: Third-party modules the worker may import, each with why (everything else it imports is the
#: standard library).
WORKER_THIRD_PARTY: dict[str, str] = {
    "landlockpy": "sandbox.hardening applies the Landlock policy with it while the worker confines itself",
    "pandas": "data_helpers.frame() builds a DataFrame of a table when the model asks for one (imported there, "
              "only when installed)",
}

#: The rank of each unit, lowest first: a unit may import only units of a strictly lower rank
#: (and itself); units of equal rank must not import each other. Derived from the data flow
#: question + paths -> commands -> app -> loop -> (sandbox, models, corpus) -> output and from
#: the imports measured on the tree (``--graph``); docs/architecture.md gives the reasons.
LAYERS: dict[str, int] = {
    "__init__": 0,        # the package's ``__init__``: the version only
    "shapes": 0,          # the JSON shapes of a run's outcome (usage, sources, support verdict):
                          # TypedDicts per the schemas, imported by every layer that passes them
    "errors": 1,          # the exception tree and exit codes: imports only ``shapes``
    "protocol": 2,        # framing and the message types of both channels
    "schemas": 2,         # JSON Schema files (data only)
    "sockets": 2,         # where Unix sockets go: folders whose paths fit sun_path
    "interrupts": 2,      # Ctrl-C with a final answer in hand is dropped
    "answer_types": 2,    # the answer types (--answer-type, a check's type) and their traits
    "events": 2,          # the trajectory event vocabulary (a typed class per type) and event():
                          # every package emits events, output only receives them
    "config_keys": 3,     # value rules: choices, sizes, URL checks (no settings resolution)
    "config": 4,          # settings from flags > env > file > defaults, user folders, keys
    "output": 5,          # render, answer files, trajectories, progress, sources, --json documents:
                          # plain data in, text out; the end of the flow, so everything may use it
    "sandbox": 6,         # the worker launcher and the worker (the confined document decoder too)
    "corpus": 7,          # walking, reading, chunking, the index; decodes documents in the sandbox
    "models": 8,          # client, host, relay, budgets, detection, the response cache; counts
                          # tokens with corpus.tokens
    "loop": 9,            # the iteration loop, prompts, history, policies and answer checks
    "app": 10,             # session, one-question runner, batch, replay, chat, phases, doctor
    "evaluation": 11,      # rlm eval: runs generated questions through app
    "mcp": 11,             # the MCP server over one app session
    "audit": 11,           # rlm audit: a checklist of typed questions over one app session, verdicts
    "commands": 12,       # the Typer CLI only: parse, build settings, call app, render, exit codes
    "__main__": 13,       # ``python -m rlm_cli``
}


#: Where each flat module of the tree before issue 22's moves is going (``--planned`` reads
#: today's tree as if moved, to show which edges the new layout will reject).
PLANNED_HOMES: dict[str, str] = {
    "cli": "commands", "session": "app", "runner": "app", "batch": "app", "replay": "app",
    "chat": "app", "phases": "app", "doctor": "app", "render": "output", "outfile": "output",
    "trace": "output", "progress": "output", "sources": "output", "documents": "output",
    "mcp_server": "mcp", "history": "loop", "llm_cache": "models",
}


@dataclass(frozen=True)
class Import:
    """One import statement's edge: ``importer`` and ``target`` are dotted module names inside
    the package (without its name); ``names`` the names taken by ``from ... import``;
    ``module_level`` false inside a function or under ``if TYPE_CHECKING:``."""

    importer: str
    target: str
    names: tuple[str, ...]
    line: int
    module_level: bool


@dataclass(frozen=True)
class Function:
    """One function or method: ``module`` (dotted, without the package name), ``name`` (its
    qualified name inside the module, ``Class.method``, ``outer.inner``), its first line (the
    ``def``) and its length in lines, from the ``def`` to its last line (docstring included,
    decorators not)."""

    module: str
    name: str
    line: int
    length: int


@dataclass(frozen=True)
class ClassInfo:
    """One class: ``module``, ``name`` (qualified inside the module: ``Outer.Inner``), its first
    line and its ``attributes`` (sorted: the names its own methods, nested functions included,
    assign on ``self``, and the names annotated in its body; a nested class's are its own)."""

    module: str
    name: str
    line: int
    attributes: tuple[str, ...]


@dataclass
class Tree:
    """The modules of one package: ``lines`` per module, ``imports`` (project edges only),
    ``external`` (imports of modules outside the package: importer, top-level name, line),
    ``attrs`` (private attributes read on imported project modules: importer, module, name,
    line) and ``functions``."""

    package: str
    homes: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    imports: list[Import] = field(default_factory=list)
    external: list[tuple[str, str, int]] = field(default_factory=list)
    attrs: list[tuple[str, str, str, int]] = field(default_factory=list)
    functions: list[Function] = field(default_factory=list)
    classes: list[ClassInfo] = field(default_factory=list)


def module_name(path: Path, root: Path) -> str:
    """``root/a/b.py`` -> ``a.b``; ``root/a/__init__.py`` -> ``a``; ``root/__init__.py`` -> ``__init__``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def unit_of(module: str, homes: dict[str, str] | None = None) -> str:
    """The layering unit of a module: its first component (``loop.checks`` -> ``loop``), or
    where ``homes`` says that component is going."""
    first = module.split(".", 1)[0]
    return (homes or {}).get(first, first)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, module_level: bool) -> Iterable[tuple[ast.AST, bool]]:
    """Every node below ``node`` with whether it runs at import time."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield child, module_level
            yield from _walk(child, False)
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            yield child, module_level
            for stmt in child.body:
                yield stmt, False
                yield from _walk(stmt, False)
            for stmt in child.orelse:
                yield stmt, module_level
                yield from _walk(stmt, module_level)
        else:
            yield child, module_level
            yield from _walk(child, module_level)


def _is_package(module: str, path: Path) -> bool:
    return path.name == "__init__.py" and module != "__init__"


def parse_tree(root: Path, package: str, homes: dict[str, str] | None = None) -> Tree:
    """Read every ``*.py`` under ``root`` (the folder of ``package``) and collect its project
    imports; ``homes`` maps top-level names to the unit they count in (see :data:`PLANNED_HOMES`).
    Raises ``SyntaxError`` for a module that does not parse."""
    tree = Tree(package, dict(homes or {}))
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    modules = {module_name(p, root): p for p in files}
    for mod, path in modules.items():
        text = path.read_text(encoding="utf-8")
        tree.lines[mod] = len(text.splitlines())
        node = ast.parse(text, filename=str(path))
        aliases: dict[str, str] = {}  # local name -> project module it is bound to
        tree.functions += _functions(node, mod)
        tree.classes += _classes(node, mod)
        for sub, level in _walk(node, True):
            if isinstance(sub, ast.Import):
                for a in sub.names:
                    target = _strip(a.name, package)
                    if target is None:
                        tree.external.append((mod, a.name.split(".")[0], sub.lineno))
                        continue
                    target = _existing(target, modules)
                    tree.imports.append(Import(mod, target, (), sub.lineno, level))
                    if a.asname:
                        aliases[a.asname] = target
            elif isinstance(sub, ast.ImportFrom):
                base = _resolve_from(sub, mod, _is_package(mod, path), package)
                if base is None:
                    if sub.level == 0 and sub.module and sub.module != "__future__":
                        tree.external.append((mod, sub.module.split(".")[0], sub.lineno))
                    continue
                for a in sub.names:
                    sub_mod = f"{base}.{a.name}" if base else a.name
                    if sub_mod in modules:  # ``from pkg import module``
                        tree.imports.append(Import(mod, sub_mod, (), sub.lineno, level))
                        aliases[a.asname or a.name] = sub_mod
                    else:
                        target = _existing(base, modules) if base else "__init__"
                        tree.imports.append(Import(mod, target, (a.name,), sub.lineno, level))
            elif (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name)
                  and sub.value.id in aliases and _private(sub.attr)):
                tree.attrs.append((mod, aliases[sub.value.id], sub.attr, sub.lineno))
    return tree


def _functions(node: ast.AST, module: str, prefix: str = "") -> list[Function]:
    """Every function below ``node`` (methods and nested functions included), by qualified name."""
    out: list[Function] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            name = prefix + child.name
            end = child.end_lineno or child.lineno
            out.append(Function(module, name, child.lineno, end - child.lineno + 1))
            out += _functions(child, module, name + ".")
        elif isinstance(child, ast.ClassDef):
            out += _functions(child, module, prefix + child.name + ".")
        else:
            out += _functions(child, module, prefix)
    return out


def _classes(node: ast.AST, module: str, prefix: str = "") -> list[ClassInfo]:
    """Every class below ``node`` (nested ones included, by qualified name) with its attributes."""
    out: list[ClassInfo] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef):
            name = prefix + child.name
            out.append(ClassInfo(module, name, child.lineno, tuple(sorted(_attributes(child)))))
            out += _classes(child, module, name + ".")
        elif not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            out += _classes(child, module, prefix)
    return out


def _attributes(cls: ast.ClassDef) -> set[str]:
    """The fields annotated in ``cls``'s body and the names its methods assign on ``self``."""
    names = {st.target.id for st in cls.body if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)}
    todo: list[ast.AST] = [st for st in cls.body if isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef)]
    while todo:
        sub = todo.pop()
        if isinstance(sub, ast.ClassDef):
            continue  # a class defined in a method has attributes of its own
        targets: list[ast.expr] = []
        if isinstance(sub, ast.Assign):
            targets = sub.targets
        elif isinstance(sub, ast.AnnAssign | ast.AugAssign):
            targets = [sub.target]
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    names.add(t.attr)
        todo.extend(ast.iter_child_nodes(sub))
    return names


def _strip(name: str, package: str) -> str | None:
    """``rlm_cli.loop.checks`` -> ``loop.checks``; ``rlm_cli`` -> ``__init__``; None outside."""
    if name == package:
        return "__init__"
    if name.startswith(package + "."):
        return name[len(package) + 1:]
    return None


def _existing(target: str, modules: dict[str, Path]) -> str:
    """The longest prefix of ``target`` that is a module of the tree (``target`` itself if none)."""
    parts = target.split(".")
    for n in range(len(parts), 0, -1):
        cand = ".".join(parts[:n])
        if cand in modules:
            return cand
    return target


def _resolve_from(node: ast.ImportFrom, mod: str, is_pkg: bool, package: str) -> str | None:
    """The module a ``from X import ...`` reads, inside the package, or None when outside.
    Returns ``""`` for ``from <package> import x`` (x then names a top-level module or a name)."""
    if node.level == 0:
        if node.module == package:
            return ""
        return _strip(node.module or "", package)
    here = mod.split(".") if mod != "__init__" else []
    if not is_pkg:
        here = here[:-1]
    up = node.level - 1
    if up > len(here):
        return None
    base = here[:len(here) - up] if up else here
    if node.module:
        base = base + node.module.split(".")
    return ".".join(base)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def find_cycles(tree: Tree, module_level: bool = True) -> list[list[str]]:
    """Strongly connected groups of two or more modules (or a module importing itself) in the
    graph of module-level imports (``module_level=False``: of every import, inside functions and
    under ``if TYPE_CHECKING:`` too), each sorted, the list sorted. Tarjan's algorithm."""
    graph: dict[str, set[str]] = {m: set() for m in tree.lines}
    for imp in tree.imports:
        if (imp.module_level or not module_level) and imp.target in graph:
            graph[imp.importer].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1 or v in graph[v]:
                out.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def unit_graph(tree: Tree) -> dict[str, dict[str, list[str]]]:
    """``{importer unit: {imported unit: ["importer:line", ...]}}`` over all imports (module
    level and function level), edges inside one unit left out."""
    graph: dict[str, dict[str, list[str]]] = {}
    for imp in tree.imports:
        a, b = unit_of(imp.importer, tree.homes), unit_of(imp.target, tree.homes)
        if a != b:
            graph.setdefault(a, {}).setdefault(b, []).append(f"{imp.importer}:{imp.line}")
    return graph


def worker_closure(tree: Tree, entry: str = "sandbox.worker") -> set[str]:
    """The project modules ``entry`` reaches through its imports, at every level (itself included)."""
    edges: dict[str, set[str]] = {}
    for imp in tree.imports:
        edges.setdefault(imp.importer, set()).add(imp.target)
    seen, todo = {entry}, [entry]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen and nxt in tree.lines:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _worker_problems(tree: Tree, third_party: dict[str, str]) -> list[str]:
    """The worker's imports that break its rule (:data:`WORKER_MODULES`, :data:`WORKER_THIRD_PARTY`)."""
    entry = "sandbox.worker"
    if entry not in tree.lines:
        return []
    reach = worker_closure(tree, entry)
    out = [f"worker: {tree.package}.{entry} reaches {tree.package}.{m}" for m in sorted(reach)
           if m not in WORKER_MODULES and (not m.startswith("sandbox.") or m in LAUNCHER_SIDE)]
    stdlib = sys.stdlib_module_names
    for importer, name, line in sorted(tree.external):
        if importer in reach and name not in stdlib and name not in third_party:
            out.append(f"worker: {tree.package}.{importer}:{line} imports {name}, reached from {tree.package}.{entry}")
    return out


def _function_problems(tree: Tree, max_lines: int, exceptions: dict[str, str]) -> list[str]:
    """Functions over ``max_lines`` not in ``exceptions``, and entries of ``exceptions`` that are stale."""
    out: list[str] = []
    lengths = {f"{f.module}:{f.name}": f for f in tree.functions}
    for key, f in sorted(lengths.items()):
        if f.length > max_lines and key not in exceptions:
            out.append(f"function: {tree.package}.{key} (line {f.line}) has {f.length} lines (limit {max_lines})")
    for key in sorted(exceptions):
        f = lengths.get(key)
        if f is None or f.length <= max_lines:
            why = "is gone" if f is None else f"has {f.length} lines, within the limit of {max_lines}"
            out.append(f"function: the exception for {tree.package}.{key} is stale: it {why}")
    return out


def _attribute_problems(tree: Tree, max_attributes: int, limits: dict[str, tuple[int, str]]) -> list[str]:
    """Classes over their attribute limit (``limits``, else ``max_attributes``), and entries of
    ``limits`` that are stale."""
    out: list[str] = []
    classes = {f"{c.module}:{c.name}": c for c in tree.classes}
    for key, c in sorted(classes.items()):
        limit = limits[key][0] if key in limits else max_attributes
        if len(c.attributes) > limit:
            out.append(f"attributes: {tree.package}.{key} (line {c.line}) has {len(c.attributes)} attributes "
                       f"(limit {limit})")
    for key in sorted(limits):
        entry = classes.get(key)
        if entry is None or len(entry.attributes) <= max_attributes:
            why = "is gone" if entry is None else f"has {len(entry.attributes)}, within the limit of {max_attributes}"
            out.append(f"attributes: the limit for {tree.package}.{key} is stale: it {why}")
    return out


def check(tree: Tree, layers: dict[str, int] | None = None, max_lines: int = MAX_LINES,
          size_limits: dict[str, tuple[int, str]] | None = None, max_function_lines: int = MAX_FUNCTION_LINES,
          function_exceptions: dict[str, str] | None = None,
          worker_third_party: dict[str, str] | None = None, max_attributes: int = MAX_ATTRIBUTES,
          attribute_limits: dict[str, tuple[int, str]] | None = None) -> list[str]:
    """Every violation of ``tree`` as ``"KIND: detail"`` lines (kinds: size, function, attributes,
    cycle, layer, private, worker), sorted within each kind; empty when the tree is clean."""
    layers = LAYERS if layers is None else layers
    limits = SIZE_LIMITS if size_limits is None else size_limits
    out: list[str] = []
    for mod, n in sorted(tree.lines.items()):
        limit = limits[mod][0] if mod in limits else max_lines
        if n > limit:
            out.append(f"size: {tree.package}.{mod} has {n} lines (limit {limit})")
    out += _function_problems(tree, max_function_lines,
                              FUNCTION_EXCEPTIONS if function_exceptions is None else function_exceptions)
    out += _attribute_problems(tree, max_attributes, ATTRIBUTE_LIMITS if attribute_limits is None else attribute_limits)
    module_cycles = find_cycles(tree)
    for group in module_cycles:
        out.append("cycle: " + " <-> ".join(f"{tree.package}.{m}" for m in group))
    for group in find_cycles(tree, module_level=False):
        if group not in module_cycles:
            out.append("cycle: " + " <-> ".join(f"{tree.package}.{m}" for m in group)
                       + " (through imports inside functions or under TYPE_CHECKING)")
    units = {unit_of(m, tree.homes) for m in tree.lines}
    for unit in sorted(units - set(layers)):
        out.append(f"layer: unit {tree.package}.{unit} is not in the layer table")
    seen: set[tuple[str, str]] = set()
    for imp in sorted(tree.imports, key=lambda i: (i.importer, i.line, i.target)):
        a, b = unit_of(imp.importer, tree.homes), unit_of(imp.target, tree.homes)
        if a == b or a not in layers or b not in layers or (imp.importer, imp.target) in seen:
            continue
        if layers[b] >= layers[a]:
            seen.add((imp.importer, imp.target))
            where = "" if imp.module_level else " (in a function)"
            out.append(f"layer: {tree.package}.{imp.importer}:{imp.line} ({a}, rank {layers[a]}) imports "
                       f"{tree.package}.{imp.target} ({b}, rank {layers[b]}){where}")
    for imp in tree.imports:
        for name in imp.names:
            if _private(name) and imp.target != imp.importer:
                out.append(f"private: {tree.package}.{imp.importer}:{imp.line} imports {name} "
                           f"from {tree.package}.{imp.target}")
    for importer, target, name, line in tree.attrs:
        if target != importer:
            out.append(f"private: {tree.package}.{importer}:{line} reads {target}.{name}")
    out += _worker_problems(tree, WORKER_THIRD_PARTY if worker_third_party is None else worker_third_party)
    return out


def format_graph(tree: Tree, layers: dict[str, int] | None = None) -> str:
    """The unit dependency graph, one importer per line, units by rank (unranked last), each
    edge with its number of imports; an edge that goes up is marked ``UP``."""
    layers = LAYERS if layers is None else layers
    graph = unit_graph(tree)
    units = sorted({unit_of(m, tree.homes) for m in tree.lines}, key=lambda u: (layers.get(u, 99), u))
    lines = []
    for u in units:
        edges = graph.get(u, {})
        rank = layers.get(u)
        parts = []
        for v in sorted(edges, key=lambda v: (layers.get(v, 99), v)):
            up = rank is None or v not in layers or layers[v] >= rank
            parts.append(f"{v}({len(edges[v])}{' UP' if up else ''})")
        lines.append(f"{u} [{'?' if rank is None else rank}] -> {', '.join(parts) or '-'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = Path(__file__).resolve().parent.parent
    parser.add_argument("--root", type=Path, default=here / "rlm_cli", help="the package folder")
    parser.add_argument("--package", default="rlm_cli", help="the package's import name")
    parser.add_argument("--graph", action="store_true", help="print the unit dependency graph")
    parser.add_argument("--planned", action="store_true",
                        help="count today's flat modules in the units they are moving to (PLANNED_HOMES)")
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        print(f"error: not a folder: {args.root}", file=sys.stderr)
        return 2
    tree = parse_tree(args.root, args.package, PLANNED_HOMES if args.planned else None)
    if args.graph:
        print(format_graph(tree))
        print()
    own = args.root.resolve() == (here / "rlm_cli").resolve()  # the tables name rlm_cli's modules only
    problems = check(tree, size_limits=None if own else {}, function_exceptions=None if own else {},
                     attribute_limits=None if own else {})
    for p in problems:
        print(p)
    print(f"{len(problems)} violation(s) in {len(tree.lines)} modules", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
