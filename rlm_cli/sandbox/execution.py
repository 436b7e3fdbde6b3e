"""Running one code block in the worker: its output kept within bounds (:class:`CappedWriter`),
the values of its top-level expressions shown (:func:`echo_expressions`), its traceback limited
to its own frames with hints (:func:`format_error`), and its result frame kept within the
control channel's size (:func:`result_frame`). Runs inside the sandbox: the standard library and
``rlm_cli.protocol`` only."""

from __future__ import annotations

import ast
import io
import re
import sys
import traceback
from typing import Any

from rlm_cli import protocol

#: Characters of a block's stdout kept in memory: head and tail (the middle is counted only).
KEEP_HEAD = 200_000
KEEP_TAIL = 20_000


class CappedWriter(io.TextIOBase):
    """A text stream keeping the first ``KEEP_HEAD`` and last ``KEEP_TAIL`` characters written,
    and counting all of them, so ``print(context)`` of any size costs bounded memory and
    linear time (many small writes do not re-copy the tail)."""

    def __init__(self) -> None:
        self.head: list[str] = []
        self.head_len = 0
        self.tail: list[str] = []
        self.tail_len = 0
        self.total = 0

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        n = len(s)
        self.total += n
        if self.head_len >= KEEP_HEAD:  # the hot path of a long print loop
            self.tail.append(s)
            self.tail_len += n
            if self.tail_len > 2 * KEEP_TAIL:  # compact: amortised O(1) per character
                joined = "".join(self.tail)[-KEEP_TAIL:]
                self.tail, self.tail_len = [joined], len(joined)
            return n
        room = KEEP_HEAD - self.head_len
        self.head.append(s[:room])
        self.head_len += min(room, n)
        if n > room:
            self.tail.append(s[room:][-KEEP_TAIL:])
            self.tail_len += len(self.tail[-1])
        return n

    def getvalue(self) -> tuple[str, int]:
        """``(kept text, total characters written)``; an omission marker separates head and tail."""
        head = "".join(self.head)
        tail = "".join(self.tail)[-KEEP_TAIL:]
        omitted = self.total - self.head_len - len(tail)
        if omitted <= 0:
            return head + tail, self.total
        return f"{head}\n[... {omitted:,} characters omitted ...]\n{tail}", self.total


#: The name under which a block's top-level expression statements report their values.
ECHO_NAME = "__rlm_echo__"


#: Calls whose result is a count, a position or a status nobody reads (``f.write(...)``,
#: ``os.write``, ``os.waitpid``).
QUIET_CALLS = frozenset({"write", "writelines", "send", "sendall", "seek", "truncate", "flush", "close",
                          "waitpid", "wait", "join", "kill"})


def _io_call(node: ast.expr) -> bool:
    """Whether ``node`` calls one of :data:`QUIET_CALLS` (its value is not shown)."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in QUIET_CALLS


def echo_expressions(tree: ast.Module) -> ast.Module:
    """``tree`` with each top-level expression statement (a bare ``grep(...)`` line, not only the
    last one) writing its value to ``out`` as Python's interactive console does: ``None`` shows
    nothing, a ``str`` is written as it is, anything else as its ``repr`` (``Worker._echo``).
    Models write several such lines in one block and expect to see each; constants (a bare string
    used as a comment) and I/O calls (:data:`QUIET_CALLS`) stay silent. The echo function is bound in the namespace as :data:`ECHO_NAME`."""
    changed = False
    for i, stmt in enumerate(tree.body):
        if isinstance(stmt, ast.Expr) and not isinstance(stmt.value, ast.Constant) and not _io_call(stmt.value):
            call = ast.Call(func=ast.Name(id=ECHO_NAME, ctx=ast.Load()), args=[stmt.value], keywords=[])
            tree.body[i] = ast.copy_location(ast.Expr(value=ast.copy_location(call, stmt.value)), stmt)
            changed = True
    if changed:
        ast.fix_missing_locations(tree)
    return tree


#: Said after a block that loops over ``context`` itself: a ``str``, so one character at a time (seen
#: with Qwen2.5-Coder-1.5B: ``for line in context: if "golden citadel" in line`` found nothing, and
#: the model answered that the corpus holds no such text).
BY_CHAR_NOTE = ("[note: `for ... in context` goes over `context` one character at a time; for its lines use "
                 "`context.splitlines()`, or grep(pattern) for the lines that match.]\n")


def iterates_context(tree: ast.AST) -> bool:
    """Whether a ``for`` loop or a comprehension of ``tree`` iterates the name ``context``."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            it = node.iter
            if isinstance(it, ast.Name) and it.id == "context":
                return True
    return False


#: How a hint names a file's text, when ``context["path"]`` works and when it does not.
FILE_TEXT = "context['a.py']"
FILE_TEXT_PLAIN = "context[f['start']:f['end']] for f in files with f['path'] == 'a.py'"


def format_error(info: Any, by_path: bool = True, example_path: str = "a.py") -> str:
    """The traceback of a failed block, limited to the block's own frames, with a hint for the
    mistakes models often make; ``by_path``: whether ``context["path"]`` works in this worker
    (``protocol.context_by_path``), so that a hint never offers a call that fails;
    ``example_path``: a corpus path a hint's example code may name (the file the question names,
    else the largest)."""
    etype, evalue, tb = info
    try:
        frames = [f for f in traceback.extract_tb(tb) if f.filename.startswith("<cell")]
        text = "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames))
        text += "".join(traceback.format_exception_only(etype, evalue))
        if etype is TypeError and re.search(r"(Row|Hit) found", str(evalue)):  # ", ".join(grep(...)) and the like
            text += ("hint: grep and search return rows (dicts), not strings: join their fields, e.g. "
                     "'\n'.join(f\"{h['file']}:{h['line']}: {h['text']}\" for h in hits)\n")
        line = (frames[-1].line or "") if frames else ""
        if etype is TypeError and str(evalue).startswith("list indices must be") and \
                re.search(r"\bfiles\s*\[\s*[\"'fr]", line):  # files["a.py"]: a list, not a dict
            path = _indexed_path("files", line)
            text += ("hint: `files` is a list of dicts, one per file (f['path'], f['lines'], f['start'], f['end']); "
                     f"a file's text is {(FILE_TEXT if by_path else FILE_TEXT_PLAIN).replace('a.py', path)}, "
                     f"its numbered lines read_file('{path}', 20, 40)\n")
        if etype is TypeError and not by_path and str(evalue).startswith("string indices must be") and \
                re.search(r"\bcontext\s*\[\s*[\"'fr]", line):  # context["a.py"] on a plain str
            path = _indexed_path("context", line)
            text += ("hint: this corpus is too large for `context` to be indexed by path too, so it is a plain str: "
                     f"a file's text is {FILE_TEXT_PLAIN.replace('a.py', path)}, its numbered lines "
                     f"read_file('{path}', 20, 40)\n")
        name = getattr(evalue, "name", None) if etype is NameError else None
        if isinstance(name, str) and name.upper() in ("FINAL", "FINAL_VAR") and name not in ("FINAL", "FINAL_VAR"):
            text += (f"hint: `{name}` is spelled in capitals: FINAL(answer), or FINAL_VAR('variable_name') "
                     "for the value of a variable\n")
        elif isinstance(name, str) and name in JSON_WORDS:
            text += (f"hint: Python writes `{JSON_WORDS[name]}`, not `{name}` (JSON's word); json.loads(text) reads "
                     "JSON into Python values\n")
        elif isinstance(name, str) and used_as_module(name, line):
            text += f"hint: `{name}` is a module: `import {name}` first, in this block\n"
        elif isinstance(name, str) and name in FROM_IMPORTS:
            text += f"hint: `{name}` comes from a module: `from {FROM_IMPORTS[name]} import {name}` first, in this block\n"
        elif isinstance(name, str) and name.isidentifier() and re.search(rf"\b{name}\s*\(", line):
            text += (f"hint: nothing here defines a function `{name}`; the REPL's helpers are listed in the first "
                     "message (grep, read_file, search, llm_query, llm_map, ...), and a function you def persists\n")
        elif isinstance(name, str) and name.isidentifier() and name not in sys.stdlib_module_names and \
                re.search(rf"\b{name}\s*\.\s*[A-Za-z_]", line) and not re.search(rf"\b{name}\s*=", line):
            text += (f"hint: nothing assigned or imported `{name}`: if it names a module, import it first (only the "
                     "standard library is sure to be installed here); if a variable, assign it first\n")
        elif isinstance(name, str) and name.isidentifier():
            text += unassigned_hint(name, by_path, example_path, line)
        if etype is ValueError and str(evalue).startswith(("invalid literal for int()", "could not convert string")):
            text += ("hint: that text is not a number; take the number out of a line with a regex group, e.g. "
                     "int(re.search(r'port (\\d+)', h['text']).group(1)), or h['match'] of a grep whose "
                     "pattern has one group: grep(r'port (\\d+)')\n")
        return text
    except BaseException:  # noqa: BLE001 - a hostile __str__ must not take the worker down
        return f"{getattr(etype, '__name__', 'Exception')}: (the error could not be formatted)\n"


#: Names models use without their import, and the module each comes from.
FROM_IMPORTS = {"Counter": "collections", "defaultdict": "collections", "OrderedDict": "collections",
                "deque": "collections", "namedtuple": "collections", "Path": "pathlib", "datetime": "datetime",
                "timedelta": "datetime", "dataclass": "dataclasses", "reduce": "functools",
                "partial": "functools", "chain": "itertools", "groupby": "itertools", "pprint": "pprint",
                "dedent": "textwrap", "mean": "statistics", "median": "statistics", "fnmatch": "fnmatch"}
#: Words of JSON (and other languages) a model writes for Python's constants.
JSON_WORDS = {"true": "True", "false": "False", "null": "None", "none": "None", "nil": "None"}
#: Types whose methods a variable is often used with: ``numbers.append(3)`` is a list never
#: assigned, not the ``numbers`` module.
_VALUE_TYPES = (str, list, dict, set, tuple, int, float, bytes)


def used_as_module(name: str, line: str) -> bool:
    """Whether ``name.attr`` on ``line`` (a failing line) reads as a standard module used without
    its import (``re.findall``), rather than a variable never assigned that happens to share a
    module's name (``numbers.append``, ``code.split``): the module must be a standard one, and have
    ``attr`` when it is already loaded here; when it is not, ``attr`` must not be a method of a
    plain value (``str``, ``list``, ``dict``...). Nothing is imported to decide."""
    m = re.search(rf"\b{re.escape(name)}\s*\.\s*(\w+)", line)
    if not m or name not in sys.stdlib_module_names:
        return False
    attr, module = m.group(1), sys.modules.get(name)
    if module is not None:
        return hasattr(module, attr)
    return not any(hasattr(t, attr) for t in _VALUE_TYPES)


def unassigned_hint(name: str, by_path: bool, example_path: str, line: str = "") -> str:
    """The hint for a name no block assigned: a variable exists only once code assigns it, with
    an assignment to copy (a file's lines, of ``example_path``; valid Python whether or not
    ``context["path"]`` works, ``by_path``). ``FINAL(name)`` on the failing ``line`` is told to
    assign it from what the code found, or to give the answer itself. The 1.5B model called
    ``llm_map(lines, ...)`` with no ``lines`` 71 times in 9 trajectories (2026-12-06), up to 17
    times in a row, the bare traceback its only answer."""
    head = f"hint: no code has assigned `{name}` yet: a variable exists only after a block assigns it. "
    if re.search(rf"\b(?:FINAL|FINAL_VAR|Final|final)\s*\(.*\b{re.escape(name)}\b", line):
        return head + (f"Assign `{name}` from what your code computed, or give FINAL the answer itself, "
                       "written out: FINAL('...')\n")
    if by_path:
        source = f"{name} = context[{example_path!r}].splitlines()"
    else:
        source = (f"f = next(f for f in files if f['path'] == {example_path!r}); "
                  f"{name} = context[f['start']:f['end']].splitlines()")
    return head + f"Assign it first, in this block, e.g. for a file's lines: {source}\n"


def _indexed_path(name: str, line: str) -> str:
    """The path in ``name["some/path.py"]`` on ``line`` (a block's failing line), for a hint that
    shows the working form with the model's own path; ``a.py`` when there is none."""
    m = re.search(rf"\b{name}\s*\[\s*[rf]?[\"']([^\"'\n]{{1,200}})[\"']", line)
    return m.group(1).replace("'", "") if m and "{" not in m.group(1) else "a.py"


def result_frame(result: dict[str, Any]) -> dict[str, Any]:
    """``result``, with a FINAL answer too large for one control frame replaced by an error."""
    if result.get("final") is not None and len(result["final"]) * 4 > protocol.MAX_CONTROL_BYTES // 2:
        size = len(protocol.encode_frame(result))
        if size > protocol.MAX_CONTROL_BYTES - 4096:
            result = dict(result, final=None, final_error=(
                f"the FINAL answer is {size:,} bytes; answers are limited to "
                f"{protocol.MAX_CONTROL_BYTES // 2**20} MiB. Give a shorter answer"))
    return result
