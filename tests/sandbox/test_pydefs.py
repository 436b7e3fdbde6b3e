"""``pydefs.definitions`` (grep's ``"in"``, read by indentation) gives ``ast``'s answer."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

from rlm_cli.sandbox import pydefs

#: Source whose structure a reading by indentation could get wrong, each with ``ast``'s answer to match.
TRICKY = {
    "string at column 0 in a body": 'def f():\n    x = """\nnot code\ndef fake():\n    pass\n"""\n    return x\n\ny = 1\n',
    "code in a docstring": 'class A:\n    """Example:\n\ndef g():\n    return 1\n"""\n    def m(self):\n        pass\n',
    "quotes and brackets in comments": "def f():\n    x = 1  # it's (open [ {\n    # def not_this():\n    return x\n# ) ' \"\nz = 2\n",
    "bracket continuation at column 0": "def f():\n    x = call(1,\n2)\n    return x\n\ndef g():\n    y = [\n]\n",
    "backslash continuation": "def f():\n    x = 1 + \\\n2\n    return x\nz = 3\n",
    "decorated first statement": "class A:\n    @property\n    def p(self):\n        return 1\n\n    @staticmethod\n    @other(\n        1)\n    def q():\n        pass\n",
    "one-line bodies": "def f(): pass\nclass C: x = 1\nasync def g(): return 2\n",
    "nested and async": "class A:\n    class B:\n        async def m(self):\n            def inner():\n                return 1\n            return inner\n",
    "inside blocks": "if X:\n    def f():\n        pass\nelse:\n    class G:\n        pass\ntry:\n    def h(): pass\nexcept E:\n    pass\n"
                     "with c:\n    def w():\n        pass\n",
    "match statement": "match x:\n    case 1:\n        def f():\n            pass\n    case _:\n        pass\n",
    "header with colons": 'def f(x: dict[str, int] = {"a": 1}, y=lambda: 0, *, z: "T:X" = ":") -> "R":\n    return x\n',
    "class keywords": "class M(Base, metaclass=Meta, **kw):\n    pass\n",
    "multi-line header": "def f(\na,\nb=(1,\n2),\n):\n    return a\n",
    "string edge cases": "def f():\n    a = 'it\\'s (' + \"\\\"]\" + r'\\\\' + '''x \"\"\" '' y'''\n    b = f\"{a:>10} {{ }}\"\n    return a\n",
    "triple quote with quotes inside": 'def f():\n    s = """a "b" ""c"" \\""" d"""\n    return s\nq = 1\n',
    "trailing comments": "def f():\n    return 1\n    # trailing\n\n# module\ndef g():\n    pass\n        # deeper\n",
    "crlf": "class A:\r\n    def m(self):\r\n        return 1\r\n\r\nx = 1\r\n",
    "no final newline": "def f():\n    return 1",
    "unicode names": "class Größe:\n    def maß(self):\n        return 'ü'\n",
    "names that are not keywords": "undef = 1\nclassy = 2\ndef_ = 3\nmy_class = 4\ndef real():\n    pass\n",
    "empty": "",
    "string statement after a body": 'def f():\n    pass\n"""module string"""\ndef g():\n    pass\n',
    "lambda and comprehension": "def f():\n    g = lambda: [x for x in y]\n    return g\n",
    # found by a fuzzer (stdlib mutants and generated programs) against the first version:
    "continuation after the keyword": "def \\\nf():\n    pass\nclass\\\nn():\n    ()\n    def _():()",
    "form feed after the keyword": "def\x0cf():\n    pass\nasync\x0cdef g():\n    pass\n",
    "async continued onto the def": "class A:\n    async \\\ndef f(self):\n        pass\n    @d\n    async \\\n    def g(self): pass\n",
    "continuation after the colon": "def f(): \\\n    pass\ndef g(): \x0c\n    pass\n",
    "a line of only a backslash": "def f():\n    \\\n    pass\ndef g():\n    x = 1\n\\\n    y = 2\ndef h():\n    pass\n    \\\n\n",
    "lambda in the return annotation": "def f() -> lambda: 0:\n    pass\n",
    "lone carriage return in a string": 'x = """a\rb"""\ny = "a\\\rb"\ndef f():\n    pass\n',
    "continuation in a string of a crlf file": 'x = "\\\r\ndef g(): pass"\r\ndef f():\r\n    pass\r\n',
    "names ast normalises": "def \ufb01():\n    pass\ndef \u2118():\n    pass\ndef a\u00b7b():\n    pass\ndef a\u0301b():\n    pass\n",
}


@pytest.mark.parametrize("name", sorted(TRICKY))
def test_reading_by_indentation_gives_asts_answer(name: str) -> None:
    src = TRICKY[name]
    assert pydefs.definitions(src) == pydefs.ast_definitions(src), src


def test_the_table_is_not_trivial() -> None:
    """Each case has definitions (a table of empty answers would agree by saying nothing)."""
    assert sum(bool(pydefs.ast_definitions(src)) for src in TRICKY.values()) == len(TRICKY) - 1
    assert pydefs.definitions(TRICKY["string at column 0 in a body"]) == [(2, 7, "f")]
    # a class whose first statement is decorated: its body starts at the def, as ast says
    assert pydefs.definitions(TRICKY["decorated first statement"]) == [(3, 10, "A"), (4, 4, "A.p"), (10, 10, "A.q")]


def test_strings_left_open_cost_a_scan_not_a_backtracking_search() -> None:
    """A string that never closes (a broken or hostile file) once made the literal pattern try
    every way to split its text: a 100-character line took minutes. Now each is read at once."""
    for src in ("def f():\n    a = 'it\\'s (' + r'\\' + 'x' + 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy'\n",
                "x = '" + "ab\\'" * 5000 + "\ndef g():\n    pass\n",
                'x = """' + 'a\\"' * 5000 + '\ndef g():\n    pass\n',
                'x = "' + "\\\\" * 5000 + "\n"):
        pydefs.definitions(src)  # returns (the suite's timeout would fail it otherwise)
    assert pydefs.definitions("x = '" + "ab\\'" * 5000 + "\ndef g():\n    pass\n") == [(3, 3, "g")]


def _nested(depth: int) -> str:
    return "".join(" " * (4 * i) + f"def f{i}():\n" for i in range(depth)) + " " * (4 * depth) + "pass\n"


#: Shapes (about 100 KB each) that cost quadratic or worse time in an earlier reading: a quote
#: tried again at each of 50,000 quotes, a bracket count from the colon at every candidate line,
#: headers that never close, code nested 98 deep. Each now takes milliseconds; a regression
#: shows as this test running into the suite's timeout.
HOSTILE = {
    "escaped quotes, never closed": "\\'" * 50_000,
    "escaped triple quotes on lines": "\\'''\n" * 20_000,
    "a list at column 0": "def f():\n    x = [\n" + "1,\n" * 30_000 + "]\n    return x\n",
    "headers that never close": "def f(:\n" * 12_000,
    "unbalanced brackets": ("def f():\n    (\n" + "x\n" * 3) * 3_000,
    "nested 98 deep": _nested(98) * 4,
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_shapes_are_read_in_linear_time(name: str) -> None:
    src = HOSTILE[name]
    got = pydefs.definitions(src)
    try:
        import ast

        ast.parse(src)
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return  # not Python: any answer, but an answer
    assert got == pydefs.ast_definitions(src) != []


def test_indentation_with_tabs_or_form_feeds_is_read_by_ast() -> None:
    for src in ("def f():\n\tif x:\n\t\treturn 1\n\treturn 2\n", "def f():\n \f   return 1\n"):
        assert pydefs.definitions(src) == pydefs.ast_definitions(src) != []
    tab_in_string = 'def f():\n    return "\t"\n'  # a tab inside a string is not indentation
    assert pydefs.definitions(tab_in_string) == [(2, 2, "f")]


def test_a_file_ast_rejects_still_gets_its_indentation_read() -> None:
    py2 = "def main():\n    print 'hello'\n\nclass A:\n    def m(self):\n        exec 'x'\n"
    assert pydefs.ast_definitions(py2) == []
    assert pydefs.definitions(py2) == [(2, 2, "main"), (5, 6, "A"), (6, 6, "A.m")]


def test_blanked_keeps_lines_and_indentation_and_drops_literals() -> None:
    src = "x = '(' # ) def\n    s = '''a\n  b\n'''\n"
    code = pydefs.blanked(src)
    assert code.count("\n") == src.count("\n")
    assert code.split("\n")[0].rstrip() == "x = \x01"
    assert code.split("\n")[1] == "    s = \x01" and code.split("\n")[2] == "\x00"


def test_the_standard_library_read_both_ways_agrees() -> None:
    """One file in six of the standard library (about 300 files): the same definitions."""
    root = Path(sysconfig.get_paths()["stdlib"])
    paths = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)[::6]
    checked = 0
    for path in paths:
        try:
            src = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        expected = pydefs.ast_definitions(src)
        if not expected:
            continue
        assert pydefs.definitions(src) == expected, path
        checked += 1
    assert checked > 200
