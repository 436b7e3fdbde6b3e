"""The MCP tools of ``rlm mcp``: their definitions (name, description, input and output schemas,
hints), the check of a call's arguments against its input schema, and the ``path:start-end``
form of a corpus range.
"""

from __future__ import annotations

import functools
from typing import Any

from rlm_cli.answer_types import NAMES

#: Most ``grep`` matches and ``search`` results one call may ask for.
MAX_RESULTS = 1000
#: The longest ``ask`` question, in characters (as ``rlm ask``: ``app.batch.MAX_QUESTION_BYTES``).
MAX_QUESTION_CHARS = 1024**2
#: The longest ``grep`` pattern or ``search`` query, and ``path_glob``, in characters.
MAX_PATTERN_CHARS = 10_000
#: The longest error message about an argument (a message quoting a 50 MB argument is one too).
MAX_PROBLEM_CHARS = 300

_REF = {"type": "string", "description": "path:start-end (1-based, inclusive; path:N for one line)"}
_USAGE = {"type": "object", "description": "tokens, calls and cost of the root model and of sub-calls, as "
                                           "in rlm ask --json"}

#: The tools: name, description, input schema (checked before a call is queued), output schema
#: (``structuredContent``; the text content is the same document as JSON) and hints.
TOOLS: list[dict[str, Any]] = [
    {
        "name": "ask",
        "title": "Ask rlm about the corpus",
        "description": (
            "Answer a question about the corpus this server was started on, however large, with a Recursive "
            "Language Model run: a model writes code that reads the corpus in a sandboxed REPL and calls "
            "sub-models on the pieces it picks. Use it for questions that need reading across many files "
            "(where is X configured, which callers do Y, what changed between A and B); it costs model calls "
            "and takes seconds to minutes. Returns the answer, its status (final, max_iterations or "
            "budget_exceeded; the last two come with partial: true and the best partial answer), its support "
            "(observed, computed, or unsupported: a guess rlm found nothing for; treat it as one), the corpus "
            "lines it rests on (sources and the cited ones, as path:start-end), usage and the trajectory id "
            "(rlm trace show ID). Calls are served one at a time, in the order they arrive: an ask waits for "
            "the calls before it. Each ask is independent (it does not see earlier questions)."),
        "input_schema": {
            "type": "object",
            "properties": {
                "question": {"type": "string", "minLength": 1, "maxLength": MAX_QUESTION_CHARS,
                             "description": "The question, in plain words."},
                "max_cost": {"type": "number", "minimum": 0, "description": (
                    "Stop this ask once it has cost this many USD (priced models only); at most the server's "
                    "--max-cost."), },
                "max_iterations": {"type": "integer", "minimum": 1, "description": (
                    "Root-model turns before this ask stops with its best partial answer; at most the "
                    "server's --max-iterations (default 20).")},
                "answer_type": {"enum": list(NAMES),
                                "description": (
                    "The type the answer must have (default text): the result's value is then a JSON value of "
                    "it (locations: \"path:line\" or \"path:start-end\" strings that exist in the corpus), "
                    "or null when the model gave none.")},
            },
            "required": ["question"],
            "additionalProperties": False,
        },
        "output_schema": {
            "type": "object",
            "properties": {
                "answer": {"type": "string"},
                "status": {"type": "string", "enum": ["final", "max_iterations", "budget_exceeded"]},
                "partial": {"type": "boolean", "description": "true: the run stopped before a final answer"},
                "support": {"type": "object", "description": (
                    "what the answer rests on, as in rlm ask --json: verdict (observed: every specific part "
                    "appears in what the model read; computed: code computed it; unsupported: neither, a guess; "
                    "partial), unsupported (the tokens nothing showed), objections (checks overruled), reason"),
                    "properties": {"verdict": {"type": "string",
                                               "enum": ["observed", "computed", "unsupported", "partial"]},
                                   "unsupported": {"type": "array", "items": {"type": "string"}},
                                   "objections": {"type": "array", "items": {"type": "string"}},
                                   "reason": {"type": "string"}},
                    "required": ["verdict", "unsupported", "objections"]},
                "reason": {"type": "string", "description": "why a partial run stopped"},
                "budget": {"type": ["string", "null"], "description": "cost, tokens, sub_calls or timeout"},
                "sources": {"type": "array", "items": _REF, "description": "the corpus lines the run looked at"},
                "cited": {"type": "array", "items": _REF, "description": "the sources the answer names"},
                "sources_omitted": {"type": "integer"},
                "iterations": {"type": "integer"},
                "sub_calls": {"type": "integer"},
                "usage": _USAGE,
                "elapsed_s": {"type": "number"},
                "mode": {"type": "string", "enum": ["rlm", "direct"]},
                "trace_id": {"type": "string", "description": "rlm trace show ID"},
                "trace": {"type": ["string", "null"], "description": "the trajectory file (JSONL)"},
                "answer_type": {"type": "string", "description": "a typed ask: its answer_type"},
                "value": {"description": "a typed ask: the answer as a JSON value of its type (null: not well typed)"},
                "value_problem": {"type": "string", "description": "why a typed answer has no value"},
                "dropped": {"type": "array", "items": {"type": "string"},
                            "description": "locations left out of value: not in the corpus"},
            },
            "required": ["answer", "status", "partial", "support", "sources", "cited", "usage", "trace_id"],
        },
        "annotations": {"read_only_hint": True, "destructive_hint": False, "idempotent_hint": False,
                        "open_world_hint": True},
    },
    {
        "name": "search",
        "title": "Search the corpus (BM25)",
        "description": (
            "The chunks of the corpus most relevant to a query by BM25 keyword ranking (terms are runs of "
            "letters or digits, case ignored), best first, each with its lines and a preview. No model call; "
            "fast. Good for finding where a topic lives before reading or asking."),
        "input_schema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": MAX_PATTERN_CHARS,
                          "description": "Words to look for."},
                "k": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS,
                      "description": "How many chunks to return (default 10)."},
                "path_glob": {"type": "string", "maxLength": MAX_PATTERN_CHARS, "description": "Only files matching this glob (fnmatch: "
                                                              "'*.py', 'src/*')."},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        "output_schema": {
            "type": "object",
            "properties": {"results": {"type": "array", "items": {
                "type": "object",
                "properties": {"ref": _REF, "path": {"type": "string"}, "start_line": {"type": "integer"},
                               "end_line": {"type": "integer"}, "score": {"type": "number"},
                               "preview": {"type": "string"}},
                "required": ["ref", "path", "start_line", "end_line", "score"]}},
                "truncated": {"type": "boolean"}},
            "required": ["results"],
        },
        "annotations": {"read_only_hint": True, "destructive_hint": False, "idempotent_hint": True,
                        "open_world_hint": False},
    },
    {
        "name": "grep",
        "title": "Grep the corpus",
        "description": (
            "Lines of the corpus matching a Python regular expression (re syntax; ^ and $ match at line "
            "boundaries), in corpus order: path, 1-based line, the line's text (cut at 500 characters) and, "
            "in Python files, the function or class around it. No model call; fast."),
        "input_schema": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "minLength": 1, "maxLength": MAX_PATTERN_CHARS,
                            "description": "A Python regular expression."},
                "path_glob": {"type": "string", "maxLength": MAX_PATTERN_CHARS, "description": "Only files matching this glob (fnmatch: "
                                                              "'*.py', 'src/*')."},
                "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS,
                                "description": "Most matches to return (default 100)."},
                "ignore_case": {"type": "boolean", "description": "Match regardless of case (default false)."},
            },
            "required": ["pattern"],
            "additionalProperties": False,
        },
        "output_schema": {
            "type": "object",
            "properties": {"matches": {"type": "array", "items": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "line": {"type": "integer"},
                               "text": {"type": "string"}, "in": {"type": "string"}},
                "required": ["path", "line", "text"]}},
                "truncated": {"type": "boolean", "description": "true: there are more matches"}},
            "required": ["matches", "truncated"],
        },
        "annotations": {"read_only_hint": True, "destructive_hint": False, "idempotent_hint": True,
                        "open_world_hint": False},
    },
    {
        "name": "corpus_info",
        "title": "What the corpus holds",
        "description": (
            "The corpus this server answers about: its paths, files, bytes, tokens and chunks, files and "
            "tokens by file type, the largest files, files read as structured data or documents (kinds) and "
            "files skipped by reason, and the mode, models and sandbox of ask. No model call."),
        "input_schema": {"type": "object", "properties": {}, "additionalProperties": False},
        "output_schema": {
            "type": "object",
            "properties": {"paths": {"type": "array", "items": {"type": "string"}}, "files": {"type": "integer"},
                           "bytes": {"type": "integer"}, "tokens": {"type": "integer"},
                           "chunks": {"type": "integer"}, "by_type": {"type": "array"},
                           "largest": {"type": "array"}, "kinds": {"type": "object"},
                           "skipped": {"type": "object"}, "mode": {"type": "string"},
                           "model": {"type": ["string", "null"]}, "sub_model": {"type": ["string", "null"]},
                           "sandbox": {"type": "string"}, "asks": {"type": "integer"}},
            "required": ["paths", "files", "tokens", "chunks", "by_type", "kinds"],
        },
        "annotations": {"read_only_hint": True, "destructive_hint": False, "idempotent_hint": True,
                        "open_world_hint": False},
    },
]
TOOL_NAMES = tuple(t["name"] for t in TOOLS)


@functools.cache
def _validator(tool: str) -> Any:
    """The compiled JSON-schema validator of ``tool``'s input (jsonschema comes with the SDK)."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator(next(t for t in TOOLS if t["name"] == tool)["input_schema"])


def check_arguments(tool: str, arguments: dict[str, Any]) -> str | None:
    """The one-line error for ``arguments`` of ``tool`` that do not fit its input schema (``None``:
    they fit), e.g. ``error: invalid arguments for ask: 'question' is a required property``."""
    from jsonschema.exceptions import best_match

    if tool not in TOOL_NAMES:
        return f"error: unknown tool {tool!r} (the tools are {', '.join(TOOL_NAMES)})"
    problem = best_match(_validator(tool).iter_errors(arguments))
    if problem is None:
        return None
    where = ".".join(str(p) for p in problem.absolute_path)
    head = f"error: invalid arguments for {tool}: "
    if problem.validator == "maxLength":  # (jsonschema's message quotes the whole value)
        return (f"{head}{where or 'a value'} is too long: {len(problem.instance):,} characters, at most "
                f"{problem.validator_value:,}")
    message = problem.message
    if len(message) > MAX_PROBLEM_CHARS:
        message = message[:MAX_PROBLEM_CHARS] + "..."
    return head + (f"{where}: " if where else "") + message


def ref(path: str, start: int, end: int) -> str:
    """``path:start-end``, or ``path:N`` for one line (the form of ``rlm ask --cite``)."""
    return f"{path}:{start}" + (f"-{end}" if end != start else "")
