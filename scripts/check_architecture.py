"""Check that the layout of ``rlm_cli/`` shows its architecture (docs/architecture.md).

Reads every module with :mod:`ast` (nothing is imported) and reports four kinds of violation,
one per line, as ``KIND: detail``:

- ``size``: a module over :data:`MAX_LINES` lines that is not in :data:`SIZE_EXCEPTIONS`;
- ``cycle``: modules that import each other in a circle through module-level imports (imports
  inside a function, or under ``if TYPE_CHECKING:``, run later and do not count here);
- ``layer``: an import, at module level or inside a function, of a unit whose rank in
  :data:`LAYERS` is not lower than the importer's (a unit is a package of ``rlm_cli``, or a
  top-level module), or by or of a unit the table does not name;
- ``private``: a name with a leading underscore (not a dunder) imported from another module of
  the project, or read as an attribute of an imported project module.

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

#: The most lines a module may have unless it is listed in :data:`SIZE_EXCEPTIONS`.
MAX_LINES = 500

#: Modules (dotted, without the package name) allowed over :data:`MAX_LINES`, each with why.
#: Keep this short: an entry is a debt with a reason, not a permission.
#: Entries look like ``"sandbox.seccomp": "one BPF program: its syscall table reads best whole"``.
SIZE_EXCEPTIONS: dict[str, str] = {
    "sandbox.launcher": "554 lines, ~455 of them the Sandbox class: one worker's lifecycle (start, "
                        "exec, interrupt, restart, stop) shares its state; split further it would pass it around",
    "sandbox.corpus_helpers": "570 lines, ~500 of them CorpusView: the REPL helpers over one corpus view "
                              "(grep, search, read_file, files, chunks) share its caches",
}

#: The rank of each unit, lowest first: a unit may import only units of a strictly lower rank
#: (and itself); units of equal rank must not import each other. Derived from the data flow
#: question + paths -> commands -> app -> loop -> (sandbox, models, corpus) -> output and from
#: the imports measured on the tree (``--graph``); docs/architecture.md gives the reasons.
LAYERS: dict[str, int] = {
    "__init__": 0,        # the package's ``__init__``: the version only
    "errors": 0,          # the exception tree and exit codes: imports nothing of the project
    "protocol": 1,        # framing and the message types of both channels
    "schemas": 1,         # JSON Schema files (data only)
    "sockets": 1,         # where Unix sockets go: folders whose paths fit sun_path
    "interrupts": 1,      # Ctrl-C with a final answer in hand is dropped
    "config_keys": 2,     # value rules: choices, sizes, URL checks (no settings resolution)
    "config": 3,          # settings from flags > env > file > defaults, user folders, keys
    "output": 4,          # render, answer files, trajectories, progress, sources, --json documents:
                          # plain data in, text out; the end of the flow, so everything may use it
    "sandbox": 5,         # the worker launcher and the worker (the confined document decoder too)
    "corpus": 6,          # walking, reading, chunking, the index; decodes documents in the sandbox
    "models": 7,          # client, host, relay, budgets, detection, the response cache; counts
                          # tokens with corpus.tokens
    "loop": 8,            # the iteration loop, prompts, history, policies and answer checks
    "app": 9,             # session, one-question runner, batch, replay, chat, phases, doctor
    "evaluation": 10,      # rlm eval: runs generated questions through app
    "mcp": 10,             # the MCP server over one app session
    "audit": 10,           # rlm audit: a checklist of typed questions over one app session, verdicts
    "commands": 11,       # the Typer CLI only: parse, build settings, call app, render, exit codes
    "__main__": 12,       # ``python -m rlm_cli``
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


@dataclass
class Tree:
    """The modules of one package: ``lines`` per module, ``imports`` (project edges only) and
    ``attrs`` (private attributes read on imported project modules: importer, module, name, line)."""

    package: str
    homes: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    imports: list[Import] = field(default_factory=list)
    attrs: list[tuple[str, str, str, int]] = field(default_factory=list)


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
        for sub, level in _walk(node, True):
            if isinstance(sub, ast.Import):
                for a in sub.names:
                    target = _strip(a.name, package)
                    if target is None:
                        continue
                    target = _existing(target, modules)
                    tree.imports.append(Import(mod, target, (), sub.lineno, level))
                    if a.asname:
                        aliases[a.asname] = target
            elif isinstance(sub, ast.ImportFrom):
                base = _resolve_from(sub, mod, _is_package(mod, path), package)
                if base is None:
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


def find_cycles(tree: Tree) -> list[list[str]]:
    """Strongly connected groups of two or more modules (or a module importing itself) in the
    graph of module-level imports, each sorted, the list sorted. Tarjan's algorithm."""
    graph: dict[str, set[str]] = {m: set() for m in tree.lines}
    for imp in tree.imports:
        if imp.module_level and imp.target in graph:
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


def check(tree: Tree, layers: dict[str, int] | None = None, max_lines: int = MAX_LINES,
          size_exceptions: dict[str, str] | None = None) -> list[str]:
    """Every violation of ``tree`` as ``"KIND: detail"`` lines (kinds: size, cycle, layer,
    private), sorted within each kind; empty when the tree is clean."""
    layers = LAYERS if layers is None else layers
    exceptions = SIZE_EXCEPTIONS if size_exceptions is None else size_exceptions
    out: list[str] = []
    for mod, n in sorted(tree.lines.items()):
        if n > max_lines and mod not in exceptions:
            out.append(f"size: {tree.package}.{mod} has {n} lines (limit {max_lines})")
    for group in find_cycles(tree):
        out.append("cycle: " + " <-> ".join(f"{tree.package}.{m}" for m in group))
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
    problems = check(tree)
    for p in problems:
        print(p)
    print(f"{len(problems)} violation(s) in {len(tree.lines)} modules", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
