"""The hints a failed block's traceback gets (``sandbox.execution.format_error``): each must be
right for the mistake made, and any code it offers must be valid Python."""

from __future__ import annotations

import ast
import linecache
import re
import sys

import pytest

from rlm_cli.sandbox.execution import format_error


def _error_of(code: str, by_path: bool = True) -> str:
    """The formatted error of running ``code`` as a block (``<cell 1>``) in an empty namespace."""
    name = "<cell 1>"
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    try:
        exec(compile(code, name, "exec"), {"__builtins__": __builtins__})  # noqa: S102 - the test's own code
    except Exception:  # noqa: BLE001 - any error is what is formatted
        return format_error(sys.exc_info(), by_path, "notes/a b.md")
    raise AssertionError("the block did not fail")


@pytest.mark.parametrize("code", ["print(re.findall('a', 'abc'))", "x = json.loads('1')",
                                  "print(statistics.mean([1, 2]))"])
def test_a_module_used_without_import_gets_an_import(code: str) -> None:
    name = code.split("(")[1].split(".")[0] if code.startswith("print") else "json"
    assert f"hint: `{name}` is a module: `import {name}` first" in _error_of(code)


@pytest.mark.parametrize(("code", "name"), [("numbers.append(3)", "numbers"), ("print(code.split())", "code"),
                                            ("string.strip()", "string")])
def test_a_variable_named_like_a_module_gets_an_assignment_not_an_import(code: str, name: str) -> None:
    text = _error_of(code)
    assert "is a module" not in text and f"no code has assigned `{name}` yet" in text


@pytest.mark.parametrize(("word", "python"), [("true", "True"), ("false", "False"), ("null", "None"),
                                              ("none", "None")])
def test_json_words_are_told_their_python_spelling(word: str, python: str) -> None:
    text = _error_of(f"x = {{'ok': {word}}}")
    assert f"hint: Python writes `{python}`, not `{word}`" in text and "splitlines" not in text


def test_final_of_a_name_never_assigned_is_told_to_assign_it_or_give_the_answer() -> None:
    text = _error_of("def FINAL(a):\n    return a\nFINAL(answer)\n")  # FINAL stands in for the worker's
    assert "hint: no code has assigned `answer` yet" in text and "splitlines" not in text
    assert "FINAL('" in text  # the answer itself, written out, is the other way


@pytest.mark.parametrize("by_path", [True, False])
def test_the_assignment_a_hint_offers_is_valid_python(by_path: bool) -> None:
    text = _error_of("kinds = sorted(lines)", by_path)
    code = re.search(r"e\.g\. for a file's lines: (.*)$", text, re.M)
    assert code is not None, text
    ast.parse(code.group(1))  # raises SyntaxError if the offered code is not Python
    assert "notes/a b.md" in code.group(1)


@pytest.mark.parametrize(("code", "module"), [("c = Counter('abc')", "collections"),
                                              ("d = defaultdict(int)", "collections")])
def test_a_name_a_module_exports_gets_its_from_import(code: str, module: str) -> None:
    name = code.split("= ")[1].split("(")[0]
    assert f"hint: `{name}` comes from a module: `from {module} import {name}` first" in _error_of(code)


@pytest.mark.parametrize("code", ["a = np.array([1])", "df = pd.DataFrame()"])
def test_a_module_outside_the_standard_library_is_not_offered_a_file_s_lines(code: str) -> None:
    text = _error_of(code)
    assert "nothing assigned or imported" in text and "splitlines" not in text


@pytest.mark.parametrize("call", ["FINAL(str(answer))", "FINAL(f'{answer}')", "FINAL_VAR(answer)"])
def test_final_around_a_name_never_assigned_gets_the_final_hint(call: str) -> None:
    func = call.split("(")[0]
    text = _error_of(f"def {func}(a):\n    return a\n{call}\n")
    assert "Assign `answer` from what your code computed" in text and "splitlines" not in text
