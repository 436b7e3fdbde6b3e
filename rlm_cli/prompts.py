"""Prompt text for the root model: pure functions, no I/O.

The design follows the RLM paper (Zhang, Kraska and Khattab, 2025): the corpus lives in the
REPL as ``context``; the root model sees only constant-size metadata and truncated output,
writes code in ```repl blocks, delegates reading to sub-calls, and ends with FINAL/FINAL_VAR.
A short worked example is included because small local models (measured with
Qwen2.5-Coder-1.5B) write no code at all from a bare description.
"""

from __future__ import annotations

from typing import Any

SYSTEM_PROMPT = """You answer a question about a large corpus by writing Python code in a persistent REPL.
The corpus is NOT in this conversation. It is in the REPL:
- `context`: str, the whole corpus; each file starts with a line `==> path <==`.
- `files`: list of dicts (path, size, chars, lines, tokens, start, end); a file's text is context[f["start"]:f["end"]].
- `chunks`: list of dicts (id, path, start_line, end_line, start, end, tokens): the corpus split along semantic boundaries.
- `grep(pattern, path_glob=None, ignore_case=False, max_results=200)` -> [{"file", "line", "text"}] (regex per line).
- `read_file(path, start_line=None, end_line=None)` -> str with line numbers; `chunk_text(i)` -> str.
- `search(query, k=10)` -> chunks ranked by BM25 keyword relevance [{"chunk", "file", "start_line", "end_line", "score"}].
- `llm_query(prompt)` -> str: ask a sub-model; it sees only the prompt you give it (up to about <SUB_WINDOW_CHARS> characters).
- `llm_query_batched(prompts)` -> list[str]: many sub-calls run concurrently; answers in the same order.
- `rlm_query(prompt, context=None)` -> str: a recursive sub-RLM with its own REPL over `context` (a str you pass, or the same corpus).
- `SHOW_VARS()`: list the variables you created.
- `FINAL(answer)`: finish with the answer text. `FINAL_VAR(name)`: finish with the value of a variable.

How to work:
1. Explore first: print sizes, file paths, grep results. Only printed output comes back to you, truncated to <MAX_OUTPUT_CHARS> characters, so print summaries, not whole files.
2. Filter with code (grep, search, regex, slicing) before calling models.
3. For reading and judging text, send sizeable pieces (tens of thousands of characters, whole chunks or files) to llm_query_batched rather than thousands of tiny calls; collect the answers in variables and aggregate them in Python.
4. Variables persist between turns. Do not reassign `context`, `files`, `chunks` or the helper functions.
5. When you know the answer, call FINAL(answer) in code, or FINAL_VAR(name) for a long answer stored in a variable. Cite file paths and line numbers where useful.

Write code in ```repl blocks; every block you write is run and you see its output.

Example.
Question: Where is the function `parse_config` defined?
```repl
hits = grep(r"def parse_config\\b")
print(hits[:5])
```
Output: [{'file': 'app/config.py', 'line': 42, 'text': 'def parse_config(path):'}]
```repl
FINAL("`parse_config` is defined in app/config.py at line 42.")
```"""

COMPACT_SYSTEM_PROMPT = """Answer a question about a corpus by writing Python in ```repl blocks; the corpus is not shown to you.
REPL: `context` (str, all files, each after a line `==> path <==`), `files` (dicts: path, start, end, lines),
`grep(pattern)` -> [{"file","line","text"}], `read_file(path, start_line, end_line)`, `search(query, k=10)`,
`llm_query(prompt)` -> str (sub-model, up to <SUB_WINDOW_CHARS> chars), `llm_query_batched(prompts)` -> list[str],
`FINAL(answer)` or `FINAL_VAR(name)` to finish. Only printed output comes back (truncated to <MAX_OUTPUT_CHARS> chars).
Example:
```repl
print(grep(r"def parse_config\\b")[:5])
```
Output: [{'file': 'app/config.py', 'line': 42, 'text': 'def parse_config(path):'}]
```repl
FINAL("parse_config is defined in app/config.py at line 42.")
```"""

#: Root windows below this many tokens get the compact system prompt.
COMPACT_BELOW_TOKENS = 8000


def system_prompt(*, sub_window_tokens: int, max_output_chars: int, root_window_tokens: int | None = None) -> str:
    """The root model's system prompt. ``sub_window_tokens`` is the sub-model's input window;
    the prompt states it in characters (about 4 per token, leaving a quarter for the answer)."""
    template = (COMPACT_SYSTEM_PROMPT if root_window_tokens and root_window_tokens < COMPACT_BELOW_TOKENS
                else SYSTEM_PROMPT)
    return (template.replace("<SUB_WINDOW_CHARS>", f"{int(sub_window_tokens * 3):,}")
            .replace("<MAX_OUTPUT_CHARS>", f"{max_output_chars:,}"))


def corpus_metadata(meta: dict[str, Any]) -> str:
    """Constant-size description of the corpus (never its content beyond a short prefix).

    ``meta`` keys: ``chars``, ``tokens``, ``files`` (count), ``chunks``, ``top_dirs`` (list of
    ``(dir, files)``), ``types`` (list of ``(ext, files)``), ``sample_paths``, ``prefix``.
    """
    top = ", ".join(f"{d} ({n})" for d, n in meta.get("top_dirs", [])[:12]) or "(none)"
    types = ", ".join(f"{e} ({n})" for e, n in meta.get("types", [])[:12]) or "(none)"
    samples = "\n".join(f"  {p}" for p in meta.get("sample_paths", [])[:8])
    prefix = meta.get("prefix", "")[:300].replace("```", "'''")
    return (f"The corpus: {meta['chars']:,} characters, about {meta['tokens']:,} tokens, "
            f"{meta['files']:,} files in {meta['chunks']:,} chunks.\n"
            f"Top-level folders: {top}\nFile types: {types}\nSome paths:\n{samples}\n"
            f"The first characters of `context`:\n{prefix}")


def first_user_prompt(question: str, metadata: str) -> str:
    """The first user message: the corpus metadata and the question."""
    return (f"{metadata}\n\nQuestion: {question}\n\n"
            "Start by exploring `context` with code in a ```repl block. Do not answer before running code.")


def output_message(blocks: list[tuple[str, str]]) -> str:
    """The user message feeding back each block's (code, truncated output)."""
    parts = []
    for i, (_, out) in enumerate(blocks, 1):
        label = f"Output of block {i}:" if len(blocks) > 1 else "Output:"
        parts.append(f"{label}\n{out if out.strip() else '(no output)'}")
    parts.append("Continue. Call FINAL(answer) or FINAL_VAR(name) in a ```repl block when you have the answer.")
    return "\n\n".join(parts)


def truncate_output(text: str, total_chars: int, limit: int) -> str:
    """Cut ``text`` to ``limit`` characters (head and tail kept) with a note of what was cut;
    ``total_chars`` is how much the code actually printed."""
    if len(text) <= limit and total_chars <= len(text):
        return text
    head = text[: limit * 3 // 4]
    tail = text[-(limit // 4):] if limit >= 8 else ""
    return (f"{head}\n[... output truncated: {total_chars:,} characters printed, showing the first "
            f"{len(head):,} and last {len(tail):,} ...]\n{tail}")


FORMAT_REMINDER = ("Your reply had no ```repl code block and no FINAL. Write Python in a ```repl block to "
                   "explore `context`, or finish with FINAL(answer) inside a ```repl block.")

FIRST_TURN_FINAL = ("You tried to finish before running any code. Explore `context` with a ```repl block "
                    "first; the answer must come from the corpus.")


def best_answer_prompt() -> str:
    """The last message at the iteration limit: answer from what was learned, no more code."""
    return ("You have used all iterations. Do not write code. Give your best final answer now, from what "
            "you have learned so far, as plain text.")


def direct_prompt(question: str, context: str) -> list[dict[str, str]]:
    """Messages for direct mode: the whole corpus and the question in one call."""
    return [{"role": "system", "content": "Answer the question using the corpus below. Cite file paths."},
            {"role": "user", "content": f"{context}\n\nQuestion: {question}"}]
