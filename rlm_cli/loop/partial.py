"""The answer of a run that stopped before the model gave one (a budget, the iteration limit).

What a user reads there is what the model said or what its code computed, never a note rlm
wrote for the model: tracebacks, ``hint:`` lines, ``[note: ...]`` lines, truncation markers and
the ``Error: ...`` strings a failed sub-call returns to the code (shown as
:data:`SUB_CALL_FAILED`) stay in the trajectory (the ``output`` events keep them whole).
"""

from __future__ import annotations

import re

from rlm_cli.loop import reply

#: How a partial answer without any answer of the model's begins.
NO_ANSWER_PREFIX = "No final answer yet:"
#: Characters of each output, and of the model's words, kept in a partial answer.
PARTIAL_OUTPUT_CHARS = 1_000
PARTIAL_WORDS_CHARS = 2_000

#: What rlm writes into a block's output for the model: a traceback (through its exception line),
#: hint and note lines, truncation markers, and a lost REPL's or a failed FINAL's bracketed note.
_FOR_THE_MODEL = (
    re.compile(r"^Traceback \(most recent call last\):\n(?:[ \t].*\n|\n)*?[A-Za-z_][\w.]*(?:Error|Exception|Exit|"
               r"Interrupt|Warning)?\b.*(?:\n|$)", re.MULTILINE),
    re.compile(r"^[ \t]*(?:hint|note): .*(?:\n|$)", re.MULTILINE | re.IGNORECASE),
    re.compile(r"^[ \t]*\[(?:note: |\.\.\. output truncated|FINAL|[^\n]*REPL state was lost)[^\n]*\][ \t]*(?:\n|$)",
               re.MULTILINE),
)


#: What a failed sub-call's ``Error: ...`` string (rlm's words for the model, printed by the code)
#: becomes in a partial answer.
SUB_CALL_FAILED = "[a sub-call failed]"
#: Those strings: ``llm_query``'s and ``rlm_query``'s errors (the model host's, the relay's, a
#: sub-RLM's), up to the end of the line or of the quoted string holding them (a printed list).
_SUB_CALL_ERROR = re.compile(r"Error: (?:budget exceeded|model \S+: |the model relay |the sub-RLM |"
                             r"[^\n'\"]*; pass long text as context= instead)[^\n'\"]*")


def model_output(output: str) -> str:
    """``output`` (what a block's output looked like to the model) without what rlm wrote there
    for the model (:data:`_FOR_THE_MODEL`; a failed sub-call's error string becomes
    :data:`SUB_CALL_FAILED`): what the code itself printed."""
    for rx in _FOR_THE_MODEL:
        output = rx.sub("", output)
    return _SUB_CALL_ERROR.sub(SUB_CALL_FAILED, output).strip()


def partial_answer(last_reply: str, outputs: list[str]) -> str:
    """The best answer of a run stopped early, from the root model's ``last_reply`` and the
    shown ``outputs`` of its last code blocks. Never code, never a note for the model:

    * a ``FINAL(answer)`` line in the reply's text with a written-out answer: that answer;
    * otherwise ``No final answer yet`` followed by the reply's text outside code blocks (what
      the model said it was doing or had found; up to :data:`PARTIAL_WORDS_CHARS` characters,
      without lines that imitate rlm's notes) and the head of what each block printed
      (:func:`model_output`, :data:`PARTIAL_OUTPUT_CHARS` characters each).
    """
    found = reply.find_text_final(last_reply)
    literal = found.literal() if found is not None else None
    if literal is not None:
        return literal
    words = reply.outside_code(last_reply)
    words = words[:words.index("```")] if "```" in words else words  # an unclosed block: code to the end
    words = reply.without_notes(words).strip()
    parts = [NO_ANSWER_PREFIX + " the run stopped before the model gave one."]
    if words:
        parts.append("The model's last words (its code left out):\n" + _clipped(words, PARTIAL_WORDS_CHARS))
    heads = [_clipped(o, PARTIAL_OUTPUT_CHARS) for o in (model_output(x) for x in outputs) if o]
    if heads:
        parts.append("What its last code printed:\n" + "\n---\n".join(heads))
    return "\n\n".join(parts)


def _clipped(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars] + f" [... {len(text) - chars:,} more characters]"
