"""Count ``Any`` in the signatures of ``rlm_cli``'s packages (issue 50).

For every function and method of a package (module-level and nested), each parameter and each
return annotation is one *slot*; a slot counts as ``Any`` when its annotation names ``Any``
anywhere (``Any``, ``dict[str, Any]``, ``Callable[..., Any]``...). ``*args`` and ``**kwargs`` are
slots like any other; an unannotated slot (``self``, ``cls``) is not counted at all.

Prints one line per package: the slots, those naming ``Any``, their share, and with ``--names``
the ``Any`` slots whose parameter name is one of the seams of issue 50 (``ui``, ``settings``,
``host``, ``session``, ``backend``).

Usage::

    python scripts/count_any.py [--names] [PACKAGE ...]
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "rlm_cli"
DEFAULT = ("commands", "app", "audit", "output", "loop")
SEAMS = frozenset({"ui", "settings", "host", "session", "backend"})


def _names_any(node: ast.expr | None) -> bool:
    """True when the annotation ``node`` mentions ``Any`` (as a name, an attribute or a string)."""
    if node is None:
        return False
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == "Any":
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "Any":
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and "Any" in sub.value:
            return True
    return False


def count(package: str) -> tuple[int, int, list[str]]:
    """``(slots, any_slots, seam_hits)`` over every ``.py`` file under ``rlm_cli/PACKAGE``.

    ``seam_hits`` are ``"path:line name"`` for the ``Any`` parameters named as a seam.
    """
    base = ROOT / package
    files = sorted(base.rglob("*.py")) if base.is_dir() else [ROOT / f"{package}.py"]
    slots = hits = 0
    seams: list[str] = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = fn.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
            params += [p for p in (a.vararg, a.kwarg) if p is not None]
            for p in params:
                if p.annotation is None:
                    continue
                slots += 1
                if _names_any(p.annotation):
                    hits += 1
                    if p.arg in SEAMS:
                        seams.append(f"{path.relative_to(ROOT.parent)}:{p.lineno} {p.arg}")
            if fn.returns is not None:
                slots += 1
                hits += _names_any(fn.returns)
    return slots, hits, seams


def main(argv: list[str] | None = None) -> int:
    """Print the table; always exit 0 (a measure, not a gate)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packages", nargs="*", default=list(DEFAULT))
    parser.add_argument("--names", action="store_true", help="list the Any parameters named as a seam")
    args = parser.parse_args(argv)
    total_slots = total_hits = 0
    for package in args.packages:
        slots, hits, seams = count(package)
        total_slots += slots
        total_hits += hits
        share = 100.0 * hits / slots if slots else 0.0
        print(f"{package:10} {slots:5} slots {hits:4} Any {share:5.1f}%  seams typed Any: {len(seams)}")
        if args.names:
            for line in seams:
                print(f"    {line}")
    share = 100.0 * total_hits / total_slots if total_slots else 0.0
    print(f"{'total':10} {total_slots:5} slots {total_hits:4} Any {share:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
