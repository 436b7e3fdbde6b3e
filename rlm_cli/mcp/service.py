"""``rlm mcp PATH...``: rlm as a tool for coding agents and editors, over the Model Context Protocol.

One warm :class:`session.Session` serves every call, on standard input and output: the corpus is
loaded once, the model host and the REPL worker start once, so a second ``ask`` starts at its
first model call. The tools (their input and output schemas are :data:`TOOLS`):

* ``ask(question, max_cost?, max_iterations?)``: a full RLM run (or a direct one, per ``--mode``),
  answered with its ``answer``, ``status``, ``sources`` (``path:start-end``), usage and trajectory id;
* ``search(query, k?, path_glob?)`` and ``grep(pattern, path_glob?, max_results?, ignore_case?)``:
  the REPL helpers of the same names, run in the session's worker (no model call);
* ``corpus_info()``: files, bytes, tokens, chunks, file types and kinds, what was skipped.

Threads. The REPL worker dies with the thread that started it, and Ctrl-C is how every part of a
run stops, so the *main* thread owns the session: it opens it, then serves the calls one at a
time, in the order they arrive, from a queue (:class:`Calls`). The protocol (the SDK's
``stdio_server`` and lowlevel ``Server``, on anyio) runs in a second thread: it answers
``initialize`` and ``tools/list`` at once, puts each ``tools/call`` on the queue, and relays the
run's progress (``notifications/progress``: iterations and sub-call batches) until the result
comes. A client's ``notifications/cancelled`` for the call being served becomes a SIGINT to the
main thread (``signal.pthread_kill``), which the run meets as ``rlm chat`` meets Ctrl-C: a model
call is abandoned, a running code block is interrupted (the worker is restarted when it does not
stop within ``session.INTERRUPT_GRACE_S``), sub-RLMs stop at their next model call, and the
trajectory ends with status ``interrupted``; a cancelled call still queued is dropped. A real
Ctrl-C (SIGINT from elsewhere) or SIGTERM ends the server, cleaned up as ``rlm ask`` is.

Each ``ask`` is independent: it starts with an empty REPL namespace and is not told of earlier
questions. Budgets (``--max-cost``, ``--max-tokens``, ``--max-sub-calls``, ``--timeout``) and
``--max-iterations`` hold for each ``ask`` on its own; a call's ``max_cost`` and
``max_iterations`` can lower the server's limits, never raise them.

Before each call the corpus is checked (``corpus.watch``: the paths walked again, files stat'ed)
and loaded again when files changed, with the cache rules of ``rlm ask`` (only new or changed
files are read); the worker then restarts on the new bundle. A tool error (``isError``) reads as
the CLI's one-line error, ``error: MESSAGE (HINT)``; a run stopped by its iteration limit or a
budget is not an error: its result has ``partial: true`` and the best partial answer.

The server reads only the given paths; model-written code runs in the sandboxed worker as with
``rlm ask``. stdout carries only the protocol: while serving, the SDK points file descriptor 1
at stderr, where rlm's own lines go.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import queue
import re
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlm_cli import __version__
from rlm_cli.config import Settings
from rlm_cli.errors import PartialAnswerError, RLMError, UsageError
from rlm_cli.models.budget import Budget
from rlm_cli.models.usage import Usage
from rlm_cli.session import Session

INSTALL_HINT = "pip install 'rlm-cli[mcp]'"
#: Most ``grep`` matches and ``search`` results one call may ask for.
MAX_RESULTS = 1000
#: Characters of a grep or search result document: longer ones drop their last rows (the
#: worker keeps the first 200,000 characters a block prints).
MAX_RESULT_CHARS = 150_000
#: Characters of a search result's ``preview`` (its chunk's first lines).
PREVIEW_CHARS = 400
#: Seconds between two progress messages of one sub-call batch (its start and end always go).
PROGRESS_INTERVAL_S = 0.5
#: Seconds without news after which a call in progress sends a progress message anyway (clients
#: that reset their request timeout on progress then keep waiting through a long model call).
HEARTBEAT_S = 10.0
#: The line the worker prints a helper's result document after.
_MARK = "\x1erlm-mcp\x1e"

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
            "budget_exceeded; the last two come with partial: true and the best partial answer), the corpus "
            "lines it rests on (sources and the cited ones, as path:start-end), usage and the trajectory id "
            "(rlm trace show ID). Calls are served one at a time, in the order they arrive: an ask waits for "
            "the calls before it. Each ask is independent (it does not see earlier questions)."),
        "input_schema": {
            "type": "object",
            "properties": {
                "question": {"type": "string", "minLength": 1, "description": "The question, in plain words."},
                "max_cost": {"type": "number", "minimum": 0, "description": (
                    "Stop this ask once it has cost this many USD (priced models only); at most the server's "
                    "--max-cost."), },
                "max_iterations": {"type": "integer", "minimum": 1, "description": (
                    "Root-model turns before this ask stops with its best partial answer; at most the "
                    "server's --max-iterations (default 20).")},
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
            },
            "required": ["answer", "status", "partial", "sources", "cited", "usage", "trace_id"],
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
                "query": {"type": "string", "minLength": 1, "description": "Words to look for."},
                "k": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS,
                      "description": "How many chunks to return (default 10)."},
                "path_glob": {"type": "string", "description": "Only files matching this glob (fnmatch: "
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
                "pattern": {"type": "string", "minLength": 1, "description": "A Python regular expression."},
                "path_glob": {"type": "string", "description": "Only files matching this glob (fnmatch: "
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


def require_sdk() -> None:
    """Check that the MCP Python SDK (version 2) can be imported.

    Raises:
        UsageError: it is missing, or of another major version (exit 2).
    """
    try:
        import mcp_types  # noqa: F401  (only version 2 of the SDK has it)
        from mcp.server.lowlevel import Server  # noqa: F401
        from mcp.server.stdio import stdio_server  # noqa: F401
    except ImportError:
        raise UsageError("rlm mcp needs the MCP Python SDK (version 2), which is not installed",
                         hint=INSTALL_HINT) from None


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
    return f"error: invalid arguments for {tool}: " + (f"{where}: " if where else "") + problem.message


def ref(path: str, start: int, end: int) -> str:
    """``path:start-end``, or ``path:N`` for one line (the form of ``rlm ask --cite``)."""
    return f"{path}:{start}" + (f"-{end}" if end != start else "")


@dataclasses.dataclass
class Result:
    """What a call returns: a document (``payload``) or a one-line error."""

    payload: dict[str, Any] | None = None
    error: str | None = None


@dataclasses.dataclass(eq=False)
class Call:
    """One ``tools/call`` on its way through the queue. ``post`` hands ``("progress", message)``
    and ``("result", Result)`` to the protocol thread (thread-safe); ``cancel_requested`` is set
    by the client's cancellation, ``interrupted`` once the SIGINT for it was raised."""

    id: Any
    tool: str
    args: dict[str, Any]
    post: Callable[[tuple[str, Any]], None]
    cancel_requested: bool = False
    interrupted: bool = False

    def progress(self, message: str) -> None:
        """Send a progress message to the client (when it asked for progress)."""
        self.post(("progress", message))


class Calls:
    """The queue between the protocol thread (:meth:`put`, :meth:`cancel`, :meth:`stop`) and the
    main thread (:meth:`next`, :meth:`finish`, :meth:`on_sigint`); see the module docstring."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Call | None] = queue.Queue()
        self._lock = threading.Lock()
        self.current: Call | None = None
        #: One entry per SIGINT sent for a cancelled call (read by :meth:`on_sigint`).
        self._signals: collections.deque[Call] = collections.deque()
        self._main = threading.main_thread().ident
        #: A real Ctrl-C arrived: the server ends.
        self.shutdown = False

    def put(self, call: Call) -> int:
        """Queue ``call``; returns how many calls are ahead of it."""
        with self._lock:
            ahead = self._queue.qsize() + (self.current is not None)
            self._queue.put(call)
        return ahead

    def cancel(self, call: Call) -> None:
        """The client cancelled ``call``: interrupt it when it is being served, else drop it when
        its turn comes."""
        with self._lock:
            if call.cancel_requested:
                return
            call.cancel_requested = True
            if call is self.current and self._main is not None:
                self._signals.append(call)
                signal.pthread_kill(self._main, signal.SIGINT)

    def stop(self) -> None:
        """The client went away: interrupt the call being served and end the queue."""
        with self._lock:
            current = self.current
        if current is not None:
            self.cancel(current)
        self._queue.put(None)

    def next(self) -> Call | None:
        """The next call to serve (``None``: the protocol ended), skipping cancelled ones."""
        while True:
            call = self._queue.get()
            if call is None:
                return None
            with self._lock:
                if call.cancel_requested:
                    continue
                self.current = call
                return call

    def finish(self, call: Call, result: Result) -> None:
        """``call`` is over: hand ``result`` to its waiting handler."""
        with self._lock:
            if self.current is call:
                self.current = None
        call.post(("result", result))

    def on_sigint(self, signum: int, frame: Any) -> None:
        """The main thread's SIGINT handler: a SIGINT sent for the call being served raises
        ``KeyboardInterrupt`` (once per call), one sent for a call already over is ignored, and any
        other (Ctrl-C) ends the server."""
        try:
            call = self._signals.popleft()
        except IndexError:
            self.shutdown = True
            raise KeyboardInterrupt from None
        if call is self.current and not call.interrupted:
            call.interrupted = True
            raise KeyboardInterrupt


class _ProgressNotes:
    """An ``emit`` target turning a run's events into progress messages: each root iteration
    (``iteration 2 of at most 20``) and each batch of sub-calls or sub-RLMs as it starts, every
    :data:`PROGRESS_INTERVAL_S` and when it ends (``iteration 2: sub-calls 4/8 done, 4 in flight``)."""

    def __init__(self, send: Callable[[str], None], max_iterations: int) -> None:
        self.send = send
        self.max_iterations = max_iterations
        self.iteration = 0
        self._last: dict[Any, float] = {}

    def __call__(self, ev: dict[str, Any]) -> None:
        kind, depth = ev.get("type"), int(ev.get("depth", 0))
        if kind == "iteration" and depth == 0:
            self.iteration = int(ev.get("iteration", 0))
            self.send(f"iteration {self.iteration} of at most {self.max_iterations}")
        elif kind == "progress" and ev.get("kind") in ("sub_calls", "sub_rlms"):
            group, now = ev.get("group"), time.monotonic()
            first = group not in self._last
            if not (first or ev.get("finished") or now - self._last[group] >= PROGRESS_INTERVAL_S):
                return
            self._last[group] = now
            what = "sub-calls" if ev["kind"] == "sub_calls" else "sub-RLMs"
            done, failed, flying = int(ev.get("done", 0)), int(ev.get("failed", 0)), int(ev.get("in_flight", 0))
            text = f"iteration {self.iteration}: {what} {done + failed}/{ev.get('total', 0)} done"
            text += f", {failed} failed" if failed else ""
            text += f", {flying} in flight" if flying else ""
            self.send(text + (f" (depth {depth})" if depth else ""))


def _helper_code(body: str) -> str:
    """A block running ``body`` (the inside of a function returning a JSON-able document) in the
    worker without leaving a variable behind, printing the document after :data:`_MARK` and
    dropping the last rows of its list while it is over :data:`MAX_RESULT_CHARS` characters."""
    inner = "\n".join("    " + line for line in body.strip().splitlines())
    return (f"def _rlm_mcp():\n    import json\n{inner}\n"
            "def _rlm_mcp_show():\n"
            "    import json\n"
            "    doc = _rlm_mcp()\n"
            "    rows = next((k for k in ('matches', 'results') if k in doc), None)\n"
            "    text = json.dumps(doc, ensure_ascii=False)\n"
            f"    while rows and len(text) > {MAX_RESULT_CHARS} and doc[rows]:\n"
            "        doc[rows] = doc[rows][:len(doc[rows]) * 3 // 4]\n"
            "        doc['truncated'] = True\n"
            "        text = json.dumps(doc, ensure_ascii=False)\n"
            f"    print({_MARK!r} + text)\n"
            "try:\n    _rlm_mcp_show()\nfinally:\n    del _rlm_mcp, _rlm_mcp_show\n")


class _ServedSession(Session):
    """A session whose questions each get budgets of their own, checked against the settings of
    the ask being served (``Service.ask`` sets them for the call)."""

    def question_budget(self, usage: Usage) -> Budget:
        """A fresh budget over ``usage`` (the question's), started now."""
        return Budget(self.settings, usage)


class Service:
    """The warm session and the tools over it, run by the main thread (see the module docstring).

    ``settings`` are the run flags (windows and policy are resolved into the session's copy when
    it opens); ``ui`` is the ``render.Renderer`` of stderr; ``debug`` prints the traceback of an
    internal error there.
    """

    def __init__(self, settings: Settings, paths: list[str], *, host: Any, ui: Any, debug: bool = False) -> None:
        self.settings = settings
        self.paths = paths
        self.host = host
        self.ui = ui
        self.debug = debug
        self.session: Any = None
        self.base: Settings | None = None
        self.stamp: Any = None
        #: Why the session could not open: every call answers it, and it is the exit code.
        self.failure: RLMError | None = None
        self.asks = 0

    # -- life ------------------------------------------------------------------------------------------
    def open(self) -> None:
        """Open the session: model, corpus, mode, windows, worker. An ``RLMError`` is kept in
        :attr:`failure` (and shown on stderr) instead of raised: the server still answers, with it."""
        from rlm_cli.corpus import watch
        from rlm_cli.session import INTERRUPT_GRACE_S

        try:
            self.stamp = watch.stamp(self.paths, self.settings.corpus)
            self.session = _ServedSession(self.settings, self.paths, emit=self.ui.on_event, backend=self.host,
                                          numbered=True, interrupt_grace_s=INTERRUPT_GRACE_S)
            self.session.independent = True
            self.session.open()
        except RLMError as exc:
            self.failure = exc
            self.ui.error(str(exc))
            return
        self.base = self.session.settings
        s = self.base
        self.ui.info(f"rlm mcp: serving {len(self.session.corpus.files):,} files over stdio (tools: "
                     f"{', '.join(TOOL_NAMES)}); mode {self.session.mode}, model {s.model}")

    def close(self) -> None:
        """Stop the worker and delete what the session made (idempotent)."""
        if self.session is not None:
            self.session.close()

    def serve(self, calls: Calls) -> None:
        """Serve calls until the protocol ends.

        Raises:
            KeyboardInterrupt: a real Ctrl-C (not a client's cancellation).
        """
        while True:
            try:
                call = calls.next()
                if call is None:
                    return
                self._serve_one(calls, call)
            except KeyboardInterrupt:
                if calls.shutdown:
                    raise
                # a cancellation that landed between two calls: nothing to stop

    def _serve_one(self, calls: Calls, call: Call) -> None:
        started = time.monotonic()
        result = Result(error="error: internal error: the call ended without a result")
        try:
            result = self.answer(call)
        except KeyboardInterrupt:
            if not call.interrupted:
                raise
            result = Result(error="error: interrupted (the client cancelled the call)")
            self.ui.info(f"[{call.id}] {call.tool}: cancelled by the client after {time.monotonic() - started:.2f} s")
        finally:
            calls.finish(call, result)
        if not call.interrupted:
            what = result.error or (f"status {result.payload.get('status')}" if result.payload and "status" in
                                    result.payload else "done")
            self.ui.info(f"[{call.id}] {call.tool}: {what} in {time.monotonic() - started:.2f} s")

    def answer(self, call: Call) -> Result:
        """Run one call: the corpus checked (and loaded again if files changed), then the tool.

        Raises:
            KeyboardInterrupt: the call was cancelled (or Ctrl-C).
        """
        if self.failure is not None:
            return Result(error=f"error: {self.failure}")
        tools = {"ask": self.ask, "search": self.search, "grep": self.grep, "corpus_info": self.corpus_info}
        try:
            self.refresh(call)
            return Result(payload=tools[call.tool](call))
        except RLMError as exc:
            return Result(error=f"error: {exc}")
        except Exception as exc:  # noqa: BLE001 - a bug: one line for the client, the server goes on
            if self.debug:
                import traceback

                traceback.print_exception(exc)
            return Result(error=f"error: internal error: {type(exc).__name__}: {exc} (rerun the server with "
                                "--debug for the traceback on its stderr, and report it)")

    def refresh(self, call: Call) -> None:
        """Load the corpus again when its files changed since the last check (``corpus.watch``).

        Raises:
            UsageError: a path is gone, or nothing readable is left (the corpus kept is the old one).
            SandboxError: the worker failed to restart on the new corpus.
        """
        from rlm_cli.corpus import load_corpus, watch
        from rlm_cli.output.progress import index_callback
        from rlm_cli.output.trace import event

        now = watch.stamp(self.paths, self.settings.corpus)
        before, self.stamp = self.stamp, now
        if not watch.changed(before, now):
            return
        session = self.session
        started = time.monotonic()
        warn = lambda w: self.ui.on_event(event("notice", 0, message=w, level="warning"))  # noqa: E731
        try:
            corpus = load_corpus(self.paths, self.settings.corpus, on_warning=warn,
                                 on_progress=index_callback(self.ui.on_event))
        except BaseException:
            self.stamp = None  # check again next time
            raise
        old = session.corpus
        if corpus.digest == old.digest and corpus.data_digest == old.data_digest:
            corpus.release()  # the same text (a file touched, or re-hashed after a racy check)
            return
        session.use_corpus(corpus, time.monotonic() - started).release()
        note = f"the corpus changed: {corpus.summary()}"
        self.ui.info(note)
        call.progress(note)

    # -- tools -----------------------------------------------------------------------------------------
    def ask(self, call: Call) -> dict[str, Any]:
        """The ``ask`` tool (see :data:`TOOLS`).

        Raises:
            UsageError, ProviderError, SandboxError...: the run failed (the CLI's errors).
            KeyboardInterrupt: cancelled.
        """
        from rlm_cli.output.documents import partial_document

        question = str(call.args["question"]).strip()
        if not question:
            raise UsageError("the question is empty")
        base, session = self.base, self.session
        assert base is not None
        limits: dict[str, Any] = {}
        if call.args.get("max_iterations") is not None:
            limits["max_iterations"] = min(int(call.args["max_iterations"]), base.max_iterations)
        if call.args.get("max_cost") is not None:
            cost = float(call.args["max_cost"])
            limits["max_cost"] = cost if base.max_cost is None else min(cost, base.max_cost)
        notes = _ProgressNotes(call.progress, limits.get("max_iterations", base.max_iterations))
        verbose = bool(getattr(self.ui, "verbose", False))

        def emit(ev: dict[str, Any]) -> None:
            notes(ev)
            if verbose or (ev.get("type") == "notice" and ev.get("level") == "warning"):
                self.ui.on_event(ev)

        self.asks += 1
        started = time.monotonic()
        session.settings = dataclasses.replace(base, **limits)
        try:
            outcome = session.ask(question, emit=emit, qid=call.id)
        except PartialAnswerError as exc:
            doc = partial_document(exc, session.level, round(time.monotonic() - started, 3))
            self.ui.close()
            self.ui.summary(doc)
            trace = doc.get("trace")
            return {**self._ask_fields(doc), "partial": True, "budget": doc.get("budget"),
                    "reason": str(exc), "trace_id": Path(trace).stem if trace else "", "trace": trace}
        finally:
            session.settings = base
            self.ui.close()
        from rlm_cli.output.documents import outcome_document

        doc = outcome_document(outcome, round(time.monotonic() - started, 3))
        self.ui.summary(doc)
        return {**self._ask_fields(doc), "partial": False, "trace_id": outcome.run_id, "trace": doc.get("trace")}

    @staticmethod
    def _ask_fields(doc: dict[str, Any]) -> dict[str, Any]:
        """The fields of an ``ask`` result taken from an ``rlm ask --json`` document."""
        sources = doc.get("sources") or []
        return {"answer": doc.get("answer") or "", "status": doc["status"],
                "sources": [ref(s["path"], s["start_line"], s["end_line"]) for s in sources],
                "cited": [ref(s["path"], s["start_line"], s["end_line"]) for s in sources if s.get("cited")],
                "sources_omitted": int(doc.get("sources_omitted") or 0), "iterations": int(doc.get("iterations") or 0),
                "sub_calls": int(doc.get("sub_calls") or 0), "usage": doc.get("usage") or {},
                "elapsed_s": doc.get("elapsed_s", 0.0), "mode": doc.get("mode") or "rlm"}

    def grep(self, call: Call) -> dict[str, Any]:
        """The ``grep`` tool: ``grep`` of the REPL in the session's worker.

        Raises:
            UsageError: a bad regular expression, or the block timed out.
        """
        pattern = str(call.args["pattern"])
        try:
            re.compile(pattern, re.MULTILINE)
        except re.error as exc:
            raise UsageError(f"bad regular expression {pattern!r}: {exc}") from None
        n = int(call.args.get("max_results") or 100)
        body = (f"hits = grep({pattern!r}, path_glob={call.args.get('path_glob')!r}, "
                f"ignore_case={bool(call.args.get('ignore_case'))!r}, max_results={n + 1})\n"
                "rows = []\n"
                f"for h in hits[:{n}]:\n"
                "    row = {'path': h['file'], 'line': h['line'], 'text': h['text']}\n"
                "    if 'in' in h:\n"
                "        row['in'] = h['in']\n"
                "    rows.append(row)\n"
                f"return {{'matches': rows, 'truncated': len(hits) > {n}}}")
        return self._run_helper("grep", body)

    def search(self, call: Call) -> dict[str, Any]:
        """The ``search`` tool: ``search`` of the REPL in the session's worker, with previews.

        Raises:
            UsageError: the block failed or timed out.
        """
        k = int(call.args.get("k") or 10)
        body = (f"hits = search({str(call.args['query'])!r}, k={k}, path_glob={call.args.get('path_glob')!r})\n"
                "rows = []\n"
                "for h in hits:\n"
                "    lines = chunk_text(h['chunk']).splitlines()\n"
                f"    preview = '\\n'.join(lines[:8])[:{PREVIEW_CHARS}]\n"
                "    rows.append({'ref': h['file'] + ':' + str(h['start_line']) + ('-' + str(h['end_line']) "
                "if h['end_line'] != h['start_line'] else ''), 'path': h['file'], 'start_line': h['start_line'], "
                "'end_line': h['end_line'], 'score': h['score'], 'preview': preview})\n"
                "return {'results': rows}")
        return self._run_helper("search", body)

    def _run_helper(self, tool: str, body: str) -> dict[str, Any]:
        """Run a helper's block in the session's worker (started when the session is in direct
        mode and has none yet) and return the document it printed.

        Raises:
            UsageError: the helper raised (its error), or the block timed out or the worker crashed.
        """
        lane = self.session.worker_lane()
        result = lane.sandbox.execute(_helper_code(body), cell=0, map_output=False)
        if result.lost:
            raise UsageError(f"{tool} stopped: {result.lost}", hint="narrow the pattern or raise --cell-timeout")
        head, mark, text = result.output.partition(_MARK)
        if not mark:
            last = (head.strip().splitlines() or ["no output"])[-1]
            raise UsageError(f"{tool} failed: {last}")
        return dict(json.loads(text.splitlines()[0]))

    def corpus_info(self, call: Call) -> dict[str, Any]:
        """The ``corpus_info`` tool (no model call, no worker)."""
        import os

        from rlm_cli.corpus.stats import corpus_stats

        session = self.session
        corpus = session.corpus
        doc = corpus_stats(corpus, top=10)
        s = self.base or self.settings
        return {"paths": [os.path.abspath(p) for p in self.paths], "files": doc["files"], "bytes": doc["bytes"],
                "chars": corpus.chars, "tokens": doc["tokens"], "chunks": doc["chunks"], "by_type": doc["by_type"],
                "largest": doc["largest"], "kinds": doc["kinds"], "skipped": doc["skipped"],
                "summary": corpus.summary(), "mode": session.mode, "model": s.model,
                "sub_model": s.effective_sub_model, "sandbox": session.level, "asks": self.asks}


# -- the protocol thread ------------------------------------------------------------------------------

def _tool_list() -> Any:
    import mcp_types as types

    return types.ListToolsResult(tools=[
        types.Tool(name=t["name"], title=t["title"], description=t["description"], input_schema=t["input_schema"],
                   output_schema=t["output_schema"], annotations=types.ToolAnnotations(**t["annotations"]))
        for t in TOOLS])


def _call_result(result: Result) -> Any:
    import mcp_types as types

    if result.error is not None or result.payload is None:
        return types.CallToolResult(content=[types.TextContent(type="text", text=result.error or "error")],
                                    is_error=True)
    text = json.dumps(result.payload, ensure_ascii=False, default=str)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content=result.payload)


def instructions(paths: list[str]) -> str:
    """The server's ``instructions`` (shown to the client's model)."""
    return (f"rlm answers questions about a local corpus ({', '.join(paths)}), however large, without putting it "
            "in your context. ask runs a Recursive Language Model over it (model calls: seconds to minutes) and "
            "returns the answer with the lines it rests on (path:start-end); grep and search find lines and "
            "chunks at once, without a model; corpus_info says what the corpus holds. Calls run one at a time, "
            "in order; files edited between calls are read again.")


async def _serve_protocol(calls: Calls, paths: list[str]) -> None:
    import asyncio

    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    async def on_list_tools(ctx: Any, params: Any) -> Any:
        return _tool_list()

    async def on_call_tool(ctx: Any, params: Any) -> Any:
        args = dict(params.arguments or {})
        problem = check_arguments(params.name, args)
        if problem is not None:
            return _call_result(Result(error=problem))
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

        def post(item: tuple[str, Any]) -> None:
            try:
                loop.call_soon_threadsafe(inbox.put_nowait, item)
            except RuntimeError:  # the protocol loop is gone (the client left)
                pass

        call = Call(ctx.request_id, params.name, args, post)
        ahead = calls.put(call)
        sent, done, started = 0, False, loop.time()
        last = f"queued behind {ahead} call(s)" if ahead else ""

        async def note(message: str) -> None:
            nonlocal sent
            sent += 1
            try:
                await ctx.session.report_progress(sent, None, message)
            except Exception:  # noqa: BLE001 - a progress note that cannot go is no reason to fail
                pass

        try:
            if ahead:
                await note(last)
            while True:
                try:
                    kind, value = await asyncio.wait_for(inbox.get(), HEARTBEAT_S)
                except TimeoutError:  # quiet for a while (a long model call, a long queue): say so
                    await note(f"{last or 'working'} ({loop.time() - started:.0f} s so far)")
                    continue
                if kind == "result":
                    done = True
                    return _call_result(value)
                last = str(value)
                await note(last)
        finally:
            if not done:
                calls.cancel(call)

    server = Server("rlm", version=__version__, instructions=instructions(paths), on_list_tools=on_list_tools,
                    on_call_tool=on_call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def _protocol_thread(calls: Calls, paths: list[str], ui: Any) -> None:
    import anyio

    try:
        anyio.run(_serve_protocol, calls, paths)
    except BaseException as exc:  # noqa: BLE001 - the protocol failed: say so, end the server
        ui.error(f"the MCP protocol stopped: {type(exc).__name__}: {exc}")
    finally:
        calls.stop()


def serve(settings: Settings, paths: list[str], *, host: Any, ui: Any, debug: bool = False) -> int:
    """Serve ``rlm mcp`` on stdin/stdout until the client closes it; returns the exit code (0, or
    the code of the error that kept the session from opening). ``host`` is the started model host,
    ``ui`` the stderr renderer; ``debug`` shows internal errors' tracebacks on stderr.

    Raises:
        UsageError: no path, ``-`` among them, or the SDK is missing.
        KeyboardInterrupt / SystemExit: Ctrl-C or SIGTERM (the session is closed first).
    """
    require_sdk()
    if not paths:
        raise UsageError("give at least one PATH", hint="e.g. rlm mcp ./repo")
    if "-" in paths:
        raise UsageError("rlm mcp speaks the protocol on standard input, so the corpus cannot come from it",
                         hint="give files or folders")
    calls = Calls()
    service = Service(settings, paths, host=host, ui=ui, debug=debug)
    previous = signal.signal(signal.SIGINT, calls.on_sigint)
    thread = threading.Thread(target=_protocol_thread, args=(calls, paths, ui), name="mcp-protocol", daemon=True)
    try:
        thread.start()  # initialize and tools/list are answered while the session opens
        service.open()
        service.serve(calls)
    finally:
        service.close()
        signal.signal(signal.SIGINT, previous)
    thread.join(timeout=2.0)
    return int(service.failure.exit_code) if service.failure is not None else 0
