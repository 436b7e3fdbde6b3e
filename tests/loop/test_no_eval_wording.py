"""Nothing in the loop knows the eval: no prompt, note, example, stop word or pattern of the loop
(``rlm_cli/loop/``, ``leads``) shares a phrase with any ``rlm eval`` template, of either split."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from rlm_cli.evaluation.phrasing import TEMPLATES
from rlm_cli.loop import prompts
from rlm_cli.loop.examples import example_messages
from rlm_cli.sandbox import leads

ROOT = Path(__file__).resolve().parents[2] / "rlm_cli"
#: The loop, and the sandbox's texts the model reads (leads, the hints after a failed block).
LOOP_SOURCES = [*sorted((ROOT / "loop").glob("*.py")), ROOT / "sandbox" / "leads.py", ROOT / "sandbox" / "execution.py",
                ROOT / "output" / "answer.py"]  # answer.py: the line that calls an unsupported answer a guess
#: Words of four in a row that a template and the loop may share only by chance of English.
N = 4
#: The NLTK English stop-word list (words of three letters or more) and the quantifiers and modal
#: verbs it leaves out: function words, which any two English texts share.
FUNCTION_WORDS = frozenset("""
many much every either whose could would may might must shall also
about above after again against all and any are aren because been before being below between both but can
couldn did didn does doesn doing don down during each few for from further had hadn has hasn have haven having
her here hers herself him himself his how into isn its itself just mightn more most mustn myself needn nor not
now off once only other our ours ourselves out over own same shan she should shouldn some such than that the
their theirs them themselves then there these they this those through too under until very was wasn were weren
what when where which while who whom why will with won wouldn you your yours yourself yourselves
""".split())


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9_]+", text.lower())


def _template_grams() -> set[tuple[str, ...]]:
    """Every N words in a row of a template's literal text (placeholders cut the text)."""
    grams: set[tuple[str, ...]] = set()
    for splits in TEMPLATES.values():
        for templates in splits.values():
            for template in templates:
                for piece in re.split(r"\{[^}]*\}", template):
                    w = _words(piece)
                    grams |= {tuple(w[i:i + N]) for i in range(len(w) - N + 1)}
    return grams


def _loop_strings() -> list[tuple[str, str]]:
    """``(file, text)`` of every string the loop's code holds, docstrings and dict keys left out
    (the model never reads them), plus the texts the prompt functions build."""
    out: list[tuple[str, str]] = []
    for path in LOOP_SOURCES:
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        # dict keys are field names of records (a trajectory's ``latency_s``), never text a model reads
        keys = {id(k) for n in ast.walk(tree) if isinstance(n, ast.Dict) for k in n.keys if k is not None}
        out += [(path.name, n.value) for n in ast.walk(tree)
                if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs | keys]
    built = [prompts.system_prompt(sub_window_tokens=32_768, max_output_chars=10_000, recursion=True),
             prompts.system_prompt(sub_window_tokens=8_000, max_output_chars=2_000, root_window_tokens=8_000),
             *(m["content"] for m in example_messages()), prompts.check_missing(["b"], ["a", "b", "c"]),
             prompts.ungrounded(["x_y"]), prompts.default_cap(["grep"]), prompts.best_answer_prompt()]
    return out + [("prompts (built)", t) for t in built]


def test_no_loop_text_shares_a_phrase_with_an_eval_template() -> None:
    grams = _template_grams()
    assert len(grams) > 100  # the templates were read
    shared = []
    for where, text in _loop_strings():
        w = _words(text)
        for i in range(len(w) - N + 1):
            gram = tuple(w[i:i + N])
            if gram in grams and not set(gram) <= FUNCTION_WORDS:
                shared.append((where, " ".join(gram)))
    assert shared == []


def test_the_leads_stop_words_are_function_words_not_the_templates_words() -> None:
    template_words = {w for splits in TEMPLATES.values() for ts in splits.values() for t in ts
                      for w in _words(re.sub(r"\{[^}]*\}", " ", t))}
    content = template_words - FUNCTION_WORDS
    assert content & leads.STOPWORDS == set()
    assert {"project", "secret", "written", "somewhere", "defines", "file", "default", "base"} <= content


def test_the_worked_example_is_unlike_every_family() -> None:
    example = " ".join(m["content"] for m in example_messages()).lower()
    for word in ("secret code", "project", "defines", "default value", "base class", "how many functions",
                 "service=", "latency", "ticket", "customer"):
        assert word not in example


def test_no_loop_text_shows_the_eval_s_generated_log_fields() -> None:
    """An example over the fields of the eval's generated logs (``service=S ... latency_ms=N``)
    would hand a model that family's solution."""
    fields = ("latency", "service=", "level=", "user=", "msg=")
    found = [(where, f) for where, text in _loop_strings() for f in fields if f in text.lower()]
    assert found == []
