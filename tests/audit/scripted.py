"""A scripted audit: a checklist of checks over a copy of the standard library's ``json`` package,
and a scripted root model that answers each check with real code run in the REPL (a grep, then a
typed ``FINAL``), so every value comes from the corpus."""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path
from typing import Any

from tests.support.fake_llm import FakeLLM, first_prompt, repl, turn

#: check id -> (severity, type, expectation TOML, question, code run first, code that ends the run).
CHECKS: dict[str, tuple[str, str, str, str, str, str]] = {
    "no-pickle": ("error", "bool", "expect = false", "Does any module import pickle?",
                  "hits = grep(r'^\\s*(import|from) pickle')\nprint(len(hits))", "FINAL(len(hits) > 0)"),
    "no-eval": ("error", "locations", "empty = true", "Where is eval() or exec() called?",
                "hits = grep(r'\\b(eval|exec)\\(', max_results=None)\nprint(len(hits))",
                "locs = [f\"{h['file']}:{h['line']}\" for h in hits]\nFINAL_VAR('locs')"),
    "enough-files": ("error", "int", "min = 3", "How many Python files are in the package?",
                     "n = len([f for f in files if f['path'].endswith('.py')])\nprint(n)", "FINAL(n)"),
    "decoder-classes": ("warning", "list", "max = 1", "Which classes does decoder.py define?",
                        "hits = grep(r'^class (\\w+)', path_glob='decoder.py')\nprint(hits)",
                        "import re\nnames = [re.match(r'class (\\w+)', h['text']).group(1) for h in hits]\n"
                        "FINAL_VAR('names')"),
    "todo-free": ("warning", "int", "max = 0", "How many TODO or XXX comments are there?",
                  "hits = grep(r'#.*(TODO|XXX)', max_results=None)\nprint(len(hits))", "FINAL(len(hits))"),
    "regexes": ("note", "locations", "empty = false", "Where are regular expressions compiled?",
                "hits = grep(r're\\.compile\\(', max_results=None)\nprint(len(hits))",
                "locs = [f\"{h['file']}:{h['line']}\" for h in hits]\nFINAL_VAR('locs')"),
    "mean-lines": ("note", "number", "max = 100000", "What is the mean number of lines per file?",
                   "m = sum(f['lines'] for f in files) / len(files)\nprint(m)", "FINAL(m)"),
    "summary": ("note", "json", "", "Give a JSON object with the number of files under the key files.",
                "d = {'files': len(files)}\nprint(d)", "FINAL_VAR('d')"),
    "percent-format": ("error", "locations", "empty = true",
                       "Where are strings built with % formatting of values into messages?",
                       "hits = grep(r\"'[^']*%[rsd][^']*' %\", max_results=None)\nprint(len(hits))",
                       "locs = [f\"{h['file']}:{h['line']}\" for h in hits][:5]\nFINAL_VAR('locs')"),
}


def json_repo(tmp_path: Path) -> Path:
    """``tmp_path/repo``: a copy of the standard library's ``json`` package (its ``.py`` files)."""
    src = Path(sysconfig.get_paths()["stdlib"]) / "json"
    root = tmp_path / "repo"
    shutil.copytree(src, root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return root


def checklist_text(ids: list[str]) -> str:
    """The TOML checklist of the checks ``ids``."""
    out = []
    for cid in ids:
        severity, kind, expect, question, _, _ = CHECKS[cid]
        out.append(f'[[check]]\nid = "{cid}"\nquestion = "{question}"\ntype = "{kind}"\nseverity = "{severity}"\n'
                   + (f"{expect}\n" if expect else "") + "\n")
    return "".join(out)


def script_model(llm: FakeLLM, delay_s: float = 0.0, model: str = "root") -> None:
    """The root ``model`` answers every check of :data:`CHECKS` in two turns: its code, then its
    FINAL (each reply after ``delay_s`` seconds)."""
    from tests.support.fake_llm import Reply

    def answer(req: dict[str, Any]) -> str:
        asked = first_prompt(req)
        cid = next((c for c, spec in CHECKS.items() if f"Question: {spec[3]}" in asked), None)
        if cid is None:
            return repl("FINAL('not a check')")
        return repl(CHECKS[cid][4] if turn(req) == 0 else CHECKS[cid][5])

    llm.default(model, Reply(text=answer, delay_s=delay_s) if delay_s else answer)
