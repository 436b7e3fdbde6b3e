"""What answer a reply gives: ``FINAL`` calls written in code or in text, and the answer of a
last request (the iteration limit, or a stuck model asked for it).

A ``FINAL`` whose argument the code's constants alone give (a literal, ``str(1658)``,
``bool(1)``: ``provenance.written_value``) is an answer *written out*; one of a variable or an
expression of what the code read is *computed* (its value in the REPL). ``FINAL(answer)`` of a placeholder name never
assigned (:data:`PLACEHOLDER_NAMES`) is no answer.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

from rlm_cli import protocol
from rlm_cli.loop import reply
from rlm_cli.loop.partial import partial_answer
from rlm_cli.loop.provenance import written_value
from rlm_cli.sandbox.launcher import Sandbox

#: Calls that finish the run with the answer given (``Final``/``final``: :data:`protocol.FINAL_ALIASES`).
ANSWER_FINISHERS = ("FINAL", *protocol.FINAL_ALIASES)
#: Every call that finishes the run: the answer given, or ``FINAL_VAR`` of a variable's name.
FINISHERS = (*ANSWER_FINISHERS, "FINAL_VAR")
_CALLS_A_FINISHER = re.compile(r"\b(?:" + "|".join(FINISHERS) + r")\s*\(")
#: Names that stand for an answer rather than being one: ``FINAL(answer)`` of such a name never
#: assigned is refused, where ``FINAL(gone)`` is taken as the word written.
PLACEHOLDER_NAMES = frozenset({"answer", "final_answer", "result", "results", "res", "ans", "output", "out",
                               "response", "value", "x"})


def only_finishes(code: str) -> bool:
    """Whether ``code`` does nothing but call FINAL/FINAL_VAR with literal arguments."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    calls = 0
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
            return False
        call = stmt.value
        if not (isinstance(call.func, ast.Name) and call.func.id in FINISHERS):
            return False
        if not all(isinstance(a, ast.Constant) for a in call.args) or call.keywords:
            return False
        calls += 1
    return calls > 0


def literal_finals(blocks: list[reply.Block]) -> list[str]:
    """The answers of consecutive blocks that do nothing but call ``FINAL`` with one literal
    (stops at the first other block): a small model writes one such block per part of its
    answer, the first of which would end the run with one part."""
    out: list[str] = []
    for block in blocks:
        if not only_finishes(block.code):
            break
        for stmt in ast.parse(block.code).body:
            call = stmt.value  # type: ignore[attr-defined]  # only_finishes: FINAL(...) expressions
            if call.func.id in ANSWER_FINISHERS and len(call.args) == 1 and isinstance(call.args[0].value, (str, int, float)):
                out.append(str(call.args[0].value))
    return out


def literal_final(code: str) -> bool:
    """Whether ``code`` calls FINAL with an answer written out (``provenance.written_value``: the
    code's constants alone give it, however joined, re-spelled or wrapped: ``'1' + '658'``,
    ``str(1658)``, ``bool(1)``, ``eval('Tr' + 'ue')``, ``len(files) * 0 + 1658``),
    as opposed to a value the code computed, or ``FINAL_VAR`` of a text that is not a variable
    name."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FINISHERS \
                and node.args and not node.keywords:
            args = node.args
            if node.func.id == "FINAL_VAR":
                if isinstance(args[0], ast.Constant) and isinstance(args[0].value, str) \
                        and not args[0].value.isidentifier():
                    return True
            elif all(written_value(a) for a in args):
                return True
    return False


def text_final_value(sandbox: Sandbox, tf: reply.TextFinal, notes: list[str],
                     notice: Callable[[str], None]) -> tuple[str | None, bool]:
    """The answer a FINAL line of the text gives, as the same call in a code block would:
    ``(answer, written_out)``. A literal is taken as written; a variable or expression is
    evaluated in the REPL (``FINAL(x)`` gives the value of ``x``); a ``FINAL(...)`` whose
    argument is not valid, defined Python is taken as the text written (``written_out``).
    ``(None, False)`` with the reason in ``notes`` (and told to ``notice``) when ``FINAL_VAR``
    names no variable or the expression fails."""
    literal = tf.literal()
    if literal is not None:
        return literal, True
    result = sandbox.execute(tf.call, cell=0, map_output=False)
    if result.final is not None:
        return result.final, False
    if tf.func == "FINAL" and not result.final_error and not result.lost:
        err = reply.error_signature(result.output) or ""
        if err.startswith(("NameError", "SyntaxError", "AttributeError")) and \
                tf.source.strip().lower() not in PLACEHOLDER_NAMES:
            return tf.source, True  # e.g. FINAL(urllib/parse.py), FINAL(gone): prose that parses as Python
        # FINAL(answer) of a placeholder never assigned: the model meant a variable it did not make.
    problem = (result.final_error or result.lost
               or f"{tf.call[:80]} failed: {(reply.error_signature(result.output) or result.output.strip())[:300]}")
    notes.append(problem)
    notice(problem)
    return None, False


def best_text(best: str, sandbox: Sandbox, last_output: str, notice: Callable[[str], None]) -> tuple[str, bool]:
    """``(answer, written_out)`` of the reply to a last request (the iteration limit, or a
    stuck model asked for its answer): a FINAL in it (its value), else its text without code
    when it reads as an answer, else "no answer" with the head of the last output; never raw
    code. A FINAL called in a code block of the reply counts: that block runs in the REPL
    (only it; a block without FINAL does not run), and its answer is computed unless the
    block wrote it out. ``last_output`` is what the model was shown of the last block run."""
    found = reply.find_text_final(best, answer_lines=True)
    if found is not None:
        value, written = text_final_value(sandbox, found, [], notice)
        if value is not None:
            return value, written
    for block in reply.plan(best).blocks:
        if _CALLS_A_FINISHER.search(block.code):
            result = sandbox.execute(block.code, cell=0)
            if result.final is not None:
                return result.final, literal_final(block.code)
            break
    prose = reply.without_notes(reply.outside_code(best)).strip()
    if prose and reply.looks_like_answer(prose):
        return prose, True
    return partial_answer(best, [last_output]), True


def quotes_leads(answer: str, leads: str, question: str) -> bool:
    """Whether ``answer`` quotes a specific token of the ``leads`` output that the ``question``
    does not have: a fact taken from the corpus lines it was shown."""
    from rlm_cli.loop.grounding import specific_tokens

    if not leads:
        return False
    asked = question.lower()
    return any(tok in leads and tok.lower() not in asked for kind, tok in specific_tokens(answer) if kind != "number")
