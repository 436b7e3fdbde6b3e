"""Prompt text for the root model: pure functions, no I/O.

The design follows the RLM paper (Zhang, Kraska and Khattab, 2025): the corpus lives in the
REPL as ``context``; the root model sees only constant-size metadata and truncated output,
writes code in ```repl blocks, delegates reading to sub-calls, and ends with FINAL/FINAL_VAR.
A short worked example is included because small local models (measured with
Qwen2.5-Coder-1.5B) write no code at all from a bare description.

Every function here returns text (or chat messages) computed only from its arguments, so the
prompts can be rendered and measured in tests (``tests/loop/test_prompts.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlm_cli.models.window import reply_tokens
from rlm_cli.sandbox.mapping import capacity

#: Characters per token assumed when a token budget is stated in characters (conservative:
#: English prose is ~4, source code ~3).
CHARS_PER_TOKEN = 3

#: Root windows below this many tokens get the compact system prompt.
COMPACT_BELOW_TOKENS = 16_000


@dataclass(frozen=True)
class SubCallCapacity:
    """How much one ``llm_query`` can hold, derived from the sub-model's input window.

    ``max_tokens``/``max_chars``: the most a single prompt should carry (three quarters of the
    window; the rest is left for instructions and the answer). ``batch_chars``: the piece size the
    prompt recommends per sub-call (half of the maximum, at most about 50,000 tokens), so that a
    corpus is read in tens of calls of tens of thousands of tokens rather than thousands of tiny ones.
    """

    window_tokens: int
    max_tokens: int
    max_chars: int
    batch_chars: int


def sub_call_capacity(window_tokens: int) -> SubCallCapacity:
    """The :class:`SubCallCapacity` of a sub-model whose input window is ``window_tokens``."""
    window_tokens = max(1_000, int(window_tokens))
    max_tokens = window_tokens * 3 // 4
    batch_tokens = max(500, min(max_tokens // 2, 50_000))
    return SubCallCapacity(window_tokens, max_tokens, max_tokens * CHARS_PER_TOKEN, batch_tokens * CHARS_PER_TOKEN)


SYSTEM_PROMPT = """You answer a question about a corpus that is far too large to read at once, by writing Python code in a persistent REPL. The corpus is NOT in this conversation; it is in the REPL.

The REPL holds:
- `context`: str, the whole corpus; each file starts with a line `==> path <==`. `context["path"]` is one file's text.
- `files`: list of dicts (path, size, chars, lines, tokens, start, end); a file's text is context[f["start"]:f["end"]].
- `chunks`: list of dicts (id, path, start_line, end_line, start, end, tokens): the corpus cut along semantic boundaries (functions, sections, paragraphs).
- `grep(pattern, path_glob=None, ignore_case=False, max_results=100000)` -> [{"file", "line", "text", "in"}]: every line matching the regex (up to max_results; None: no limit); h["match"] is the text of the pattern's group; "in" is the function or class holding the line (Python files).
- `read_file(path, start_line=None, end_line=None)` -> str with line numbers; `chunk_text(i)` -> the text of chunk i.
- `search(query, k=10)` -> chunks ranked by keyword relevance (BM25): [{"chunk", "file", "start_line", "end_line", "score"}].
- `data[path]`: a JSON/JSONL/CSV/TSV file or web access log parsed (JSON -> its object; the others -> rows as dicts); `records(glob=None)` -> every row of those tables, each dict with "_file" and "_line" (count and group with comprehensions); `frame(path)` -> a pandas DataFrame.
- `llm_query(prompt)` -> str: one call to a sub-model that sees ONLY the prompt string you give it. It holds up to about <SUB_MAX_TOKENS> tokens (about <SUB_MAX_CHARS> characters).
- `llm_query_batched(prompts)` -> list[str]: many sub-calls run concurrently; answers come back in the same order.
- `llm_map(items, instruction, choices=None)` -> list: one sub-model answer per item (items: a list of str, e.g. a file's text .splitlines()), <MAP_ITEMS> items a sub-call; None where none came; with choices (a list of labels), each answer is one of them.
- `rlm_query(prompt, context=None)` -> str: <RLM_QUERY>
- `SHOW_VARS()`: list the variables you have created.
- `FINAL(answer)`: finish with the answer. `FINAL_VAR(name)`: finish with the value of a variable (e.g. FINAL_VAR("report")).

How to work:
1. Explore first: look at the structure (sizes, paths, a few grep hits) before reading anything.
2. Filter with code: grep, search, regex and slicing cost nothing; use them to find the parts that matter.
3. Decompose when the answer depends on judging text (its meaning, intent or tone), not on matching it: no pattern sees meaning. Ask the sub-model: llm_map for many short items, llm_query_batched for pieces of about <BATCH_CHARS> characters (whole chunks or files), with a precise instruction. To compare kinds (which is most common), name every kind in choices: one pass labels them all. A sub-call costs about one of your turns: prefer tens of large sub-calls to thousands of tiny ones.
4. Aggregate in Python: keep sub-answers in variables (they persist between turns) and combine them with code (count, filter, rank).
5. Finish: when the printed output supports your answer, call FINAL(answer) in a ```repl block, or FINAL_VAR(name) for a long answer built in a variable. Cite file paths and line numbers.

Only what your code prints comes back to you, cut to <MAX_OUTPUT_CHARS> characters: print counts, summaries and short excerpts, never whole files. Do not reassign `context`, `files`, `chunks` or the helpers. A grep for a name also finds its imports and calls: to find where something is defined, grep for `def name` or `class name`. A search that finds nothing proves little: loosen it (a shorter pattern, ignore_case=True) before you conclude.

Each reply: a short thought, then one ```repl block, then stop. Never write the output yourself: the REPL runs your block after your reply ends and sends the real output in the next message. The first two exchanges below are worked examples of this (not your task)."""

COMPACT_SYSTEM_PROMPT = """Answer a question about a corpus by writing Python in ```repl blocks. The corpus is not shown to you; it is in the REPL:
`context` (str: all files, each after a line `==> path <==`; `context["path"]`: one file), `files` (dicts: path, lines, start, end), `chunks` (dicts: path, start_line, end_line),
`grep(pattern)` -> [{"file","line","text","in"}] ("in": the enclosing function), `read_file(path, start_line, end_line)`, `search(query, k=10)`,
`data[path]` (parsed JSON/JSONL/CSV, access logs), `records(glob=None)` (all rows as dicts with "_file", "_line"), `frame(path)` (pandas),
`llm_query(prompt)` -> str (a sub-model that sees only that prompt; up to <SUB_MAX_CHARS> chars), `llm_query_batched(prompts)` -> list[str],
`llm_map(items, instruction, choices=None)` -> one answer per item (<MAP_ITEMS> items a sub-call; choices: the labels allowed), `rlm_query(prompt, context=None)` -> str, `SHOW_VARS()`, `FINAL(answer)` or `FINAL_VAR(name)` to finish.
Explore with code first, filter with grep. When the answer depends on what text means rather than on words you can match, judge it with sub-calls (llm_map, each call about the cost of one of your turns) and count in code. Only printed output comes back (cut to <MAX_OUTPUT_CHARS> chars).
Each reply: one ```repl block, then stop. Never write its output yourself: the real output comes in the next message. The first two exchanges below are examples (not your task)."""

#: The prompts' words on ``context["path"]``, left out where ``context`` is a plain ``str``.
BY_PATH_LINE = ' `context["path"]` is one file\'s text.'
BY_PATH_COMPACT = '; `context["path"]`: one file'

_RLM_QUERY_RECURSIVE = ("a sub-RLM: a fresh REPL like this one over `context` (a str you pass, or this "
                        "corpus) that works through the prompt with its own code and sub-calls and returns "
                        "its final answer. Slower and costlier than llm_query; use it for sub-problems that "
                        "themselves need exploring.")
_RLM_QUERY_PLAIN = ("at this depth the same as llm_query(prompt + context): a plain sub-call (no REPL).")


def system_prompt(*, sub_window_tokens: int, max_output_chars: int, root_window_tokens: int | None = None,
                  recursion: bool = False, by_path: bool = True) -> str:
    """The root model's system prompt.

    Args:
        sub_window_tokens: the sub-model's input window in tokens; the prompt states what one
            sub-call can hold, which piece size to send (see :func:`sub_call_capacity`) and how
            many items ``llm_map`` puts in one sub-call (``sandbox.mapping.capacity``).
        max_output_chars: how much of a block's printed output the model gets back.
        root_window_tokens: the root model's input window; below ``COMPACT_BELOW_TOKENS`` the
            compact variant is used so that a 4,000-token window leaves room to work.
        recursion: whether ``rlm_query`` starts a sub-RLM here (``--max-depth`` not reached) or
            is a plain sub-call.
        by_path: whether ``context["path"]`` gives a file's text in the worker
            (``protocol.context_by_path``); when not, the prompt does not offer it.
    """
    cap = sub_call_capacity(sub_window_tokens)
    template = (COMPACT_SYSTEM_PROMPT if root_window_tokens and root_window_tokens < COMPACT_BELOW_TOKENS
                else SYSTEM_PROMPT)
    if not by_path:
        template = template.replace(BY_PATH_LINE, "").replace(BY_PATH_COMPACT, "")
    map_items = capacity(sub_window_tokens, reply_tokens(sub_window_tokens)).max_items
    return (template.replace("<SUB_MAX_TOKENS>", f"{cap.max_tokens:,}")
            .replace("<MAP_ITEMS>", f"{map_items:,}")
            .replace("<SUB_MAX_CHARS>", f"{cap.max_chars:,}")
            .replace("<BATCH_CHARS>", f"{cap.batch_chars:,}")
            .replace("<RLM_QUERY>", _RLM_QUERY_RECURSIVE if recursion else _RLM_QUERY_PLAIN)
            .replace("<MAX_OUTPUT_CHARS>", f"{max_output_chars:,}"))


def first_user_prompt(question: str, metadata: str) -> str:
    """The first user message: the corpus metadata and the question."""
    return (f"{metadata}\n\nQuestion: {question}\n\n"
            "Start by exploring `context` with code in a ```repl block. Do not answer before running code.")


def leads_reply(code: str) -> str:
    """The turn rlm writes for the root model before its first call: ``code`` (the call of
    ``leads``), whose real output follows as the next user message (``rlm_cli.sandbox.leads``).
    Written as the model's own turn so that it reads like every later turn: code, then output."""
    return f"First, the leads: a keyword search of the question's names and words.\n```repl\n{code}\n```"


#: What the feedback of the leads turn says before the usual "Continue".
LEADS_NOTE = ("These leads come from the corpus but may be incomplete: check one with read_file or grep, or, "
              "if a line above already answers the question, call FINAL(answer).")


def output_message(blocks: list[tuple[str, str]], *, notes: list[str] | None = None, left: int | None = None,
                   question: str = "") -> str:
    """The user message feeding back each block's ``(code, shown output)``, then any ``notes``
    (e.g. why a FINAL was not accepted), the iterations ``left`` and the question (see
    :func:`reminder`)."""
    parts = []
    for i, (_, out) in enumerate(blocks, 1):
        label = f"Output of block {i}:" if len(blocks) > 1 else "Output:"
        parts.append(f"{label}\n{out if out.strip() else '(no output)'}")
    parts.extend(f"[{n}]" for n in notes or [])
    parts.append("Continue. Call FINAL(answer) or FINAL_VAR(name) in a ```repl block when you have the answer."
                 + (f" {iterations_left(left)}" if left is not None else ""))
    if question:
        parts.append(reminder(question))
    return "\n\n".join(parts)


#: Characters of the question repeated at the end of each feedback message.
REMINDER_CHARS = 300


def reminder(question: str) -> str:
    """The question, repeated at the end of every feedback message (its first
    :data:`REMINDER_CHARS` characters): small models lose track of it a few turns in, and answer
    the worked example's question instead."""
    q = " ".join(question.split())
    return f"(The question: {q[:REMINDER_CHARS]}{'...' if len(q) > REMINDER_CHARS else ''})"


def iterations_left(left: int) -> str:
    """How many root-model turns remain (``left`` counts the turns after this one)."""
    if left <= 0:
        return "This was your last iteration."
    if left <= 3:
        return f"Only {left} iteration{'s' if left > 1 else ''} left: finish with FINAL soon."
    return f"({left} iterations left.)"


def truncate_output(text: str, total_chars: int, limit: int) -> str:
    """Cut ``text`` to about ``limit`` characters (head and tail kept) with a note of what was cut;
    ``total_chars`` is how much the code actually printed."""
    if len(text) <= limit and total_chars <= len(text):
        return text
    head = text[: limit * 3 // 4]
    tail = text[-(limit // 4):] if limit >= 8 else ""
    return (f"{head}\n[... output truncated: {total_chars:,} characters printed, showing the first "
            f"{len(head):,} and last {len(tail):,} ...]\n{tail}")


# -- history compaction ----------------------------------------------------------------------------

def compact_reply(iteration: int, codes: list[str], code_chars: int = 600) -> str:
    """An old assistant turn shortened to the code that ran (each block cut to ``code_chars``)."""
    if not codes:
        return f"[turn {iteration}, shortened: no code]"
    shown = []
    for code in codes:
        body = code.strip()
        if len(body) > code_chars:
            body = body[:code_chars] + f"\n# ... ({len(code) - code_chars:,} more characters)"
        shown.append(f"```repl\n{body}\n```")
    return f"[turn {iteration}, shortened to the code that ran]\n" + "\n".join(shown)


def compact_feedback(outputs: list[str], head_chars: int = 300) -> str:
    """The output message of an old turn shortened to the head of each block's output."""
    if not outputs:
        return "[earlier feedback omitted]"
    parts = []
    for out in outputs:
        text = out.strip() or "(no output)"
        more = f" [... {len(text) - head_chars:,} more characters]" if len(text) > head_chars else ""
        parts.append(text[:head_chars] + more)
    return "Output (shortened):\n" + "\n---\n".join(parts)


def omitted_turns(first: int, last: int) -> tuple[str, str]:
    """The (assistant, user) pair that stands for turns ``first..last`` dropped from the history."""
    span = f"turn {first}" if first == last else f"turns {first}-{last}"
    return (f"[{span} omitted to fit the context window]",
            "Those turns ran in the REPL; every variable they created still exists (SHOW_VARS() lists them). "
            "Continue.")


# -- messages for finishing rules ----------------------------------------------------------------

FORMAT_REMINDER = ("Your reply had no ```repl code block and no FINAL. Write Python in a ```repl block to "
                   "explore `context`, or finish with FINAL(answer) inside a ```repl block.")

FIRST_TURN_FINAL = ("You answered before reading any output of code, so the answer was not accepted. Explore "
                    "`context` with a ```repl block first; the answer must come from the corpus.")

PROSE_FINAL = ("You mentioned FINAL in your text, but that does not finish the run. When you have the "
               "answer, call FINAL(answer) or FINAL_VAR(name) inside a ```repl block.")

FINAL_WITH_UNSEEN_CODE = ("Your FINAL with a written-out answer came next to code whose output you had not "
                          "seen yet, so it was not accepted. Check the output above; then finish with FINAL "
                          "in a ```repl block.")

EMPTY_FINAL = ("Your FINAL gave an empty answer (nothing, or None), so it was not accepted. Finish with the "
               "answer itself: FINAL(\"...\") or FINAL_VAR(\"name\") of a variable that holds it.")

CLAIMED_OUTPUT = ("Your reply went on after the code block as if you knew its output. You cannot know it: "
                  "the REPL runs your code after your reply ends, and the real output is the one shown above. "
                  "That text was removed. End each reply right after its ```repl block.")

NOT_AN_ANSWER = ("That reply does not answer the question. Run code in a ```repl block to find the answer in "
                 "`context`, or, if the output above already shows it, call FINAL(answer).")

#: The note for a figure of 0 (code that matched nothing, see ``Orchestrator._zero_figure``).
CHECK_ZERO = ("Your answer is 0, which is what code gives when its filter matches nothing. Check the filter first: "
              "print len() of the lines it keeps and two of them (a regex or split that fails on every line gives 0 "
              "too). If you are sure, call FINAL with the same answer again.")
CHECK_NEGATIVE = ("Your answer says nothing was found. A search that finds nothing proves little: look again "
                  "another way (a shorter or looser pattern, ignore_case=True, another spelling or file, read_file "
                  "around a likely place) before you conclude. If you are sure, call FINAL with the same answer again.")


def ungrounded(tokens: list[str]) -> str:
    """The note for a written-out answer naming ``tokens`` that appear nowhere the model was
    shown (``checks.Ungrounded``)."""
    named = ", ".join(f"`{t}`" for t in tokens[:6])
    return (f"Your answer names {named}, which appear{'s' if len(tokens) == 1 else ''} nowhere in the output you "
            "were shown. Check with code (grep, read_file, or print the value) and answer from what the REPL "
            "printed. If you are sure, call FINAL with the same answer again.")


def default_cap(helpers: list[str]) -> str:
    """The note for a figure given in a turn where, or the turn after one where, ``helpers``
    stopped at their default cap (``checks.DefaultCap``)."""
    return (f"In this turn or the one before, {' and '.join(f'{h}()' for h in helpers)} stopped at its default "
            "max_results, so a count or total over its result leaves out the rest. Pass max_results=None (or narrow the pattern) and "
            "compute it again. If the cap does not matter here, call FINAL with the same answer again.")


def check_missing(missing: list[str], items: list[str], lines: dict[str, list[str]] | None = None) -> str:
    """The note for an answer that leaves out ``missing``, of the ``items`` the question lists
    (``reply.missing_items``): it names them and quotes the lines of the output already shown
    that name them (``lines``: ``{item: [line]}``, from ``reply.lines_naming``)."""
    named = ", ".join(f"'{i}'" for i in missing)
    quoted = [f"  {line}" for item in missing for line in (lines or {}).get(item, [])]
    seen = ("\nLines of the output above that name them:\n" + "\n".join(quoted) + "\n") if quoted else " "
    return (f"The question asks about each of {len(items)} things, and your answer leaves out {named}.{seen}"
            "Answer about all of them in one FINAL, from the output above or from code that looks them up (say "
            "which you cannot find). If your answer covers them already, call FINAL with the same answer again.")


REPEATED_CODE = ("You ran this same code before; its output is above and will not change. Do something "
                 "different, or finish with FINAL if you have the answer.")

STUCK_ANSWER = ("You have run the same code several times; its output will not change, so do not search again. "
                "Give your final answer now, from the output above: FINAL(answer) in a ```repl block, or the "
                "answer as plain text. If the output does not hold the answer, say what is missing.")

SEARCH_DIFFERENTLY = ("That does not answer the question. Searching the same way again will show nothing new: "
                      "write a different search (another pattern, ignore_case=True, another file) in a ```repl block.")


def answer_now(times: int) -> str:
    """The note for code the model had already run, ``times`` turns in a row (2 or more)."""
    return (f"You ran code you had already run, {times} turns in a row; its output will not change. If the output "
            "above answers the question, call FINAL(answer) in a ```repl block now; if not, search another way.")


#: How each helper is called, quoted when the model calls it wrongly.
HELPER_USAGE = {
    "grep": "grep(pattern, path_glob=None, ignore_case=False, max_results=100000) searches all of `context` "
            "(no need to pass it) and returns [{'file', 'line', 'text'}] for every matching line",
    "read_file": "read_file(path, start_line=None, end_line=None) returns numbered lines of one file",
    "search": "search(query, k=10) returns the best chunks: [{'chunk', 'file', 'start_line', 'end_line', 'score'}]",
    "chunk_text": "chunk_text(i) returns the text of chunk i (chunks[i]), or of the chunk holding a text or a "
                  "grep/search row",
    "llm_query": "llm_query(prompt) sends one string to the sub-model and returns its answer",
    "llm_query_batched": "llm_query_batched([prompt1, prompt2, ...]) returns a list of answers",
    "llm_map": "llm_map(items, instruction, choices=None) returns one answer per item of the list items "
               "(instruction: a str; choices: a list of the labels allowed)",
    "FINAL_VAR": "FINAL_VAR('name') finishes with the value of the variable called name",
}


def later_blocks_skipped(n: int) -> str:
    """Why the last ``n`` blocks of a reply did not run."""
    return (f"{n} later block{'s' if n > 1 else ''} of your reply did not run: blocks stop at the first error or "
            "FINAL. Check the output above, then continue.")


def repeated_error(error: str, times: int, line: str | None = None) -> str:
    """The note for an error that came back in consecutive turns (``times`` in a row), naming
    the failing ``line`` when known, with the right call when the error or the line is about a
    helper."""
    helper = next((usage for name, usage in HELPER_USAGE.items() if line and f"{name}(" in line), None) or next(
        (usage for name, usage in HELPER_USAGE.items() if f"{name}(" in error or f"'{name}'" in error
         or f" {name}" in error), None)
    fix = f" The right call: {helper}." if helper else ""
    at = f" (in the line `{line[:120]}`)" if line else ""
    return (f"This is the same error as in your previous turn{f' ({times + 1} turns in a row)' if times > 1 else ''}: "
            f"{error[:200]}{at}. Repeating the code will fail again: change it.{fix}")


def best_answer_prompt() -> str:
    """The last message at the iteration limit: answer from what was learned, no more code."""
    return ("You have used all iterations. Do not write code. Give your best final answer now, from what "
            "you have learned so far, as plain text.")


DIRECT_SYSTEM = ("Answer the question using only the corpus below. Each file starts with a line "
                 "`==> path <==`. Cite file paths and line numbers where useful. Reply with the answer only.")


def direct_prompt(question: str, context: str) -> list[dict[str, str]]:
    """Messages for direct mode: the whole corpus and the question in one call."""
    return [{"role": "system", "content": DIRECT_SYSTEM},
            {"role": "user", "content": f"{context}\n\nQuestion: {question}"}]


#: Characters of each earlier question and answer a session shows the root model, and of the whole note.
SESSION_QUESTION_CHARS = 300
SESSION_ANSWER_CHARS = 800
SESSION_NOTE_CHARS = 6_000
#: Lines of the REPL variable listing shown.
SESSION_VARIABLE_LINES = 40


def session_note(turns: list[tuple[str, str, str]], variables: str = "") -> str:
    """What a question asked in a session (``rlm chat``, several questions per run) is told of
    the questions before it: each earlier ``(question, answer, status)``, newest last, with the
    question cut to :data:`SESSION_QUESTION_CHARS` and the answer to :data:`SESSION_ANSWER_CHARS`
    characters (older turns are dropped first to keep the note under :data:`SESSION_NOTE_CHARS`),
    then ``variables``, the REPL's ``SHOW_VARS()`` listing (up to :data:`SESSION_VARIABLE_LINES`
    lines). Empty when there is neither."""

    def cut(text: str, n: int) -> str:
        text = " ".join(text.split()) if len(text) > n else text.strip()
        return text if len(text) <= n else text[:n].rstrip() + " [...]"

    blocks: list[str] = []
    used = 0
    for n, (question, answer, status) in reversed(list(enumerate(turns, 1))):
        shown = cut(answer, SESSION_ANSWER_CHARS) if answer.strip() else "(no answer)"
        label = "" if status == "final" else f" ({status.replace('_', ' ')})"
        block = f"Q{n}: {cut(question, SESSION_QUESTION_CHARS)}\nA{n}{label}: {shown}"
        if blocks and used + len(block) > SESSION_NOTE_CHARS:
            blocks.append(f"({n} earlier question{'s' if n > 1 else ''} left out)")
            break
        blocks.append(block)
        used += len(block)
    parts = []
    if blocks:
        parts.append("Earlier questions in this session and their answers (for follow-up questions):\n"
                     + "\n\n".join(reversed(blocks)))
    rows = [r for r in variables.strip().splitlines() if r.strip() and r.strip() != "(no variables yet)"]
    if rows:
        more = len(rows) - SESSION_VARIABLE_LINES
        parts.append("Variables you defined for earlier questions are still in the REPL (name: type size); "
                     "reuse them instead of recomputing:\n" + "\n".join(rows[:SESSION_VARIABLE_LINES])
                     + (f"\n... and {more} more (SHOW_VARS() lists them all)" if more > 0 else ""))
    return "\n\n".join(parts)
