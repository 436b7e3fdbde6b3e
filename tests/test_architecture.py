"""``scripts/check_architecture.py``: the layout rules of docs/architecture.md. The checker must be
able to fail (each kind of violation planted in a small tree) and pass on a clean one; the real
``rlm_cli/`` must pass it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_architecture.py"
sys.path.insert(0, str(SCRIPT.parent))
from check_architecture import (  # noqa: E402
    LAYERS,
    MAX_ATTRIBUTES,
    MAX_FUNCTION_LINES,
    check,
    find_cycles,
    parse_tree,
)

#: A small package laid out like rlm_cli, clean: imports go down the ranks only.
CLEAN = {
    "__init__.py": '__version__ = "0"\n',
    "errors.py": "class RLMError(Exception):\n    pass\n",
    "config.py": "from pkg.errors import RLMError\n\nSETTING = RLMError\n",
    "corpus/__init__.py": "from pkg.corpus.store import Corpus\n",
    "corpus/store.py": "from pkg import config\n\n\nclass Corpus:\n    x = config.SETTING\n",
    "loop/__init__.py": "",
    "loop/orchestrator.py": "from pkg.corpus import Corpus\nfrom . import prompts\n\n\ndef run():\n"
                            "    from pkg.output import trace\n    return Corpus, prompts, trace\n",
    "loop/prompts.py": "TEXT = 'x'\n",
    "output/__init__.py": "",
    "output/trace.py": "from pkg import __version__\n\nVERSION = __version__\n",
    "app/__init__.py": "",
    "app/session.py": "from pkg.loop.orchestrator import run\n",
    "commands/__init__.py": "from pkg.app import session\n",
}


def _tree(tmp_path: Path, extra: dict[str, str] | None = None) -> Path:
    root = tmp_path / "pkg"
    for rel, text in {**CLEAN, **(extra or {})}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _problems(tmp_path: Path, extra: dict[str, str] | None = None, **kw: object) -> list[str]:
    kw.setdefault("function_exceptions", {})  # rlm_cli's own would be stale in a planted tree
    kw.setdefault("size_limits", {})
    kw.setdefault("attribute_limits", {})
    return check(parse_tree(_tree(tmp_path, extra), "pkg"), **kw)  # type: ignore[arg-type]


def test_a_clean_tree_passes(tmp_path: Path) -> None:
    assert _problems(tmp_path) == []


def test_a_long_module_is_reported_unless_given_a_limit_of_its_own(tmp_path: Path) -> None:
    long = {"corpus/big.py": "x = 1\n" * 501}
    assert _problems(tmp_path, long) == ["size: pkg.corpus.big has 501 lines (limit 500)"]
    assert _problems(tmp_path, long, size_limits={"corpus.big": (600, "a table")}) == []
    assert _problems(tmp_path, {"corpus/big.py": "x = 1\n" * 500}) == []
    # a mixed module gets a lower limit: it may not grow until it is split
    assert _problems(tmp_path, {"corpus/big.py": "x = 1\n" * 301}, size_limits={"corpus.big": (300, "mixed")}) == [
        "size: pkg.corpus.big has 301 lines (limit 300)"]


def test_a_long_function_is_reported_unless_excepted_and_a_stale_exception_too(tmp_path: Path) -> None:
    body = "    x = 1\n" * (MAX_FUNCTION_LINES - 1)
    extra = {"loop/long.py": f"class A:\n    def run(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n"
                             f"def ok():\n{body}",
             "loop/longer.py": f"def f():\n{body}    y = 2\n"}
    assert _problems(tmp_path, extra) == [
        f"function: pkg.loop.longer:f (line 1) has {MAX_FUNCTION_LINES + 1} lines (limit {MAX_FUNCTION_LINES})"]
    assert _problems(tmp_path, extra, function_exceptions={"loop.longer:f": "a state machine"}) == []
    assert _problems(tmp_path, extra, function_exceptions={"loop.longer:f": "x", "loop.long:ok": "y",
                                                           "loop.long:gone": "z"}) == [
        "function: the exception for pkg.loop.long:gone is stale: it is gone",
        f"function: the exception for pkg.loop.long:ok is stale: it has {MAX_FUNCTION_LINES} lines, within the "
        f"limit of {MAX_FUNCTION_LINES}",
    ]


def test_a_class_with_too_many_attributes_is_reported_unless_given_a_limit_and_a_stale_limit_too(
        tmp_path: Path) -> None:
    n = MAX_ATTRIBUTES
    fields = "".join(f"    f{i}: int = 0\n" for i in range(n - 2))
    # fields in the body, names assigned on self in methods (nested functions too, a tuple target,
    # an augmented assignment, one name twice): n + 1 distinct names; a nested class's are its own
    body = (f"class Big:\n{fields}\n    def __init__(self):\n        self.a, self.b = 1, 2\n"
            "        self.f0 = 3\n\n    def grow(self):\n        def inner():\n            self.c += 1\n"
            "        class Local:\n            def __init__(self):\n                self.z = 1\n"
            "        return inner, Local\n\n\nclass Small:\n    def __init__(self):\n        self.a = 1\n")
    extra = {"loop/state.py": body}
    assert _problems(tmp_path, extra) == [
        f"attributes: pkg.loop.state:Big (line 1) has {n + 1} attributes (limit {n})"]
    assert _problems(tmp_path, extra, attribute_limits={"loop.state:Big": (n + 1, "a record")}) == []
    assert _problems(tmp_path, extra, attribute_limits={"loop.state:Big": (n + 1, "x"), "loop.state:Small": (9, "y"),
                                                        "loop.state:Gone": (30, "z")}) == [
        "attributes: the limit for pkg.loop.state:Gone is stale: it is gone",
        f"attributes: the limit for pkg.loop.state:Small is stale: it has 1, within the limit of {n}",
    ]


def test_a_module_level_cycle_is_reported(tmp_path: Path) -> None:
    extra = {"loop/a.py": "from pkg.loop import b\n", "loop/b.py": "import pkg.loop.a\n"}
    assert _problems(tmp_path, extra) == ["cycle: pkg.loop.a <-> pkg.loop.b"]


def test_a_cycle_through_a_function_level_or_type_checking_import_is_reported_too(tmp_path: Path) -> None:
    extra = {"loop/a.py": "from pkg.loop import b\n",
             "loop/b.py": "def f():\n    from pkg.loop import a\n    return a\n",
             "loop/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.loop import d\n",
             "loop/d.py": "from pkg.loop import c\n"}
    late = " (through imports inside functions or under TYPE_CHECKING)"
    assert _problems(tmp_path, extra) == [f"cycle: pkg.loop.a <-> pkg.loop.b{late}",
                                          f"cycle: pkg.loop.c <-> pkg.loop.d{late}"]
    assert find_cycles(parse_tree(tmp_path / "pkg", "pkg")) == []  # no circle at import time
    assert find_cycles(parse_tree(tmp_path / "pkg", "pkg"), module_level=False) == [["loop.a", "loop.b"],
                                                                                    ["loop.c", "loop.d"]]


def test_the_worker_reaches_only_its_own_modules_and_the_standard_library(tmp_path: Path) -> None:
    worker = {"protocol.py": "import json\n", "sandbox/__init__.py": "", "sandbox/helpers.py": "import re\n",
              "sandbox/worker.py": "import os\nfrom pkg import protocol\nfrom pkg.sandbox import helpers\n"
                                   "def frame():\n    import pandas\n    return pandas\n"}
    assert _problems(tmp_path, worker, layers={**LAYERS, "protocol": 1}) == []
    bad = {**worker, "sandbox/helpers.py": "import requests\n\ndef f():\n    from pkg.corpus import store\n"
                                           "    return store\n",
           "sandbox/launcher.py": "x = 1\n", "sandbox/worker.py": worker["sandbox/worker.py"]
           + "from pkg.sandbox import launcher\n"}
    assert sorted(p for p in _problems(tmp_path, bad) if p.startswith("worker")) == [
        "worker: pkg.sandbox.helpers:1 imports requests, reached from pkg.sandbox.worker",
        "worker: pkg.sandbox.worker reaches pkg.config",
        "worker: pkg.sandbox.worker reaches pkg.corpus.store",
        "worker: pkg.sandbox.worker reaches pkg.sandbox.launcher",
    ]


def test_an_upward_import_is_reported_at_module_and_function_level(tmp_path: Path) -> None:
    extra = {"corpus/store.py": "from pkg.loop import prompts\n",
             "output/trace.py": "def f():\n    from pkg.app.session import run\n    return run\n"}
    assert [p for p in _problems(tmp_path, extra) if p.startswith("layer")] == [
        f"layer: pkg.corpus.store:1 (corpus, rank {LAYERS['corpus']}) imports pkg.loop.prompts "
        f"(loop, rank {LAYERS['loop']})",
        f"layer: pkg.output.trace:2 (output, rank {LAYERS['output']}) imports pkg.app.session "
        f"(app, rank {LAYERS['app']}) (in a function)",
    ]


def test_peers_of_equal_rank_may_not_import_each_other(tmp_path: Path) -> None:
    assert LAYERS["mcp"] == LAYERS["evaluation"]
    extra = {"evaluation/__init__.py": "", "mcp/__init__.py": "", "mcp/server.py": "from pkg import evaluation\n"}
    assert _problems(tmp_path, extra) == [f"layer: pkg.mcp.server:1 (mcp, rank {LAYERS['mcp']}) imports "
                                          f"pkg.evaluation (evaluation, rank {LAYERS['evaluation']})"]


def test_a_unit_missing_from_the_layer_table_is_reported(tmp_path: Path) -> None:
    problems = _problems(tmp_path, {"session.py": "from pkg.errors import RLMError\n"})
    assert problems == ["layer: unit pkg.session is not in the layer table"]


def test_a_private_name_from_another_module_is_reported(tmp_path: Path) -> None:
    extra = {"corpus/store.py": "from pkg.config import _secret, __all__\n",
             "loop/prompts.py": "from pkg.corpus import store\n\nx = store._helper\ny = store.__name__\n"
                                "def _own():\n    return _own\n",
             "loop/reply.py": "from .prompts import _own\n"}
    assert sorted(_problems(tmp_path, extra)) == [
        "private: pkg.corpus.store:1 imports _secret from pkg.config",
        "private: pkg.loop.prompts:3 reads corpus.store._helper",
        "private: pkg.loop.reply:1 imports _own from pkg.loop.prompts",
    ]


def test_the_command_line_exit_status(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    ok = subprocess.run([sys.executable, str(SCRIPT), "--root", str(root), "--package", "pkg", "--graph"],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "commands [" in ok.stdout and "0 violation(s)" in ok.stderr
    (root / "corpus" / "store.py").write_text("from pkg.app import session\n")
    bad = subprocess.run([sys.executable, str(SCRIPT), "--root", str(root), "--package", "pkg"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "layer: pkg.corpus.store:1" in bad.stdout
    missing = subprocess.run([sys.executable, str(SCRIPT), "--root", str(tmp_path / "nope")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2


def test_rlm_cli_follows_the_layout() -> None:
    problems = check(parse_tree(ROOT / "rlm_cli", "rlm_cli"))
    assert problems == [], "\n".join(problems)
