"""The REPL worker: a separate process holding the persistent namespace the root model codes in.

It speaks the control protocol (``rlm_cli.protocol``) on two inherited pipe descriptors given
on the command line, and reaches the parent's LMHandler over a Unix socket for ``llm_query``,
``llm_query_batched`` and ``rlm_query``. It uses only the standard library and ``protocol``,
so it runs the same under bubblewrap, sandbox-exec or as a plain process.

Namespace given to model code: ``context`` (str), ``files``, ``chunks`` (lists of dicts),
``grep``, ``read_file``, ``chunk_text``, ``search``, ``leads``, ``data``, ``records``, ``frame``
(structured files: ``data_helpers``), ``llm_query``, ``llm_query_batched``,
``rlm_query``, ``FINAL``, ``FINAL_VAR``, ``SHOW_VARS``. Helper names are restored before every
code block, so rebinding them cannot break the loop.
"""

from __future__ import annotations

import ast
import builtins
import io
import json
import linecache
import os
import re
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlm_cli import protocol
from rlm_cli.sandbox.corpus_helpers import CorpusView
from rlm_cli.sandbox.data_helpers import DataView
from rlm_cli.sandbox.leads import leads
from rlm_cli.sandbox.observe import Observer, WatchedList, watched

#: Characters of a block's stdout kept in memory: head and tail (the middle is counted only).
KEEP_HEAD = 200_000
KEEP_TAIL = 20_000
_BUILTINS = builtins
#: The builtins as the worker started; restored before every block (``builtins.print = None``
#: in one block must not break the next).
_BUILTINS_SNAPSHOT = dict(vars(builtins))
RESERVED = ("context", "files", "chunks", "grep", "read_file", "chunk_text", "search", "leads", "data", "records", "frame",
            "llm_query", "llm_query_batched", "rlm_query", "FINAL", "FINAL_VAR", "SHOW_VARS")


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


class _FinalSignal:
    __slots__ = ("value", "error")

    def __init__(self) -> None:
        self.value: str | None = None
        self.error: str | None = None


def to_text(value: Any) -> str:
    """Answer text for a FINAL value: str as is; lists/dicts as JSON; anything else ``str()``."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, dict, tuple)):
        try:
            return json.dumps(value, ensure_ascii=False, indent=2, default=str)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


class Worker:
    """State of one REPL: the namespace, the corpus, and the LMHandler connection details."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.socket_path: str = config["socket"]
        self._request = _relay(config["socket"], config["token"])
        self.final = _FinalSignal()
        self.namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": _BUILTINS}
        #: A code block is running: SIGINT from the parent (Ctrl-C in ``rlm chat``) interrupts it.
        self.running = False
        if config.get("index_file"):
            self.corpus = CorpusView.from_bundle(config["index_file"], config["context_file"])
        else:
            self.corpus = CorpusView(str(config.get("context_text") or ""))
        self.context = self.corpus.context
        self.data = DataView(self.corpus.structured, config.get("data_file"))  # opens the file, loads nothing
        #: Counts helper calls and records what each block looked at (reported with its result).
        self.observer = Observer(self.context, self.corpus.files)
        self._cell_names: set[str] = set()
        self._batches = 0
        #: Threads a batch sends from, at most (``Limits.sub_call_threads``: ``--max-concurrency``).
        self._batch_threads = max(1, int(config.get("sub_call_threads") or 32))
        self._helpers = self._make_helpers()

    # -- model calls ---------------------------------------------------------------------------
    def llm_query(self, prompt: Any, *context: Any, model: str | None = None) -> str:
        """One sub-call: send ``prompt`` to the sub-model and return its text (or ``'Error: ...'``).

        Extra positional arguments are text to read, appended to the prompt
        (``llm_query("Summarise:", chunk)``); a short one without spaces that looks like a model
        name (``provider/model``) names the model instead, as in earlier releases.
        """
        parts = []
        for extra in context:
            if model is None and isinstance(extra, str) and _MODEL_NAME.fullmatch(extra):
                model = extra
            else:
                parts.append(to_text(extra))
        if parts:
            prompt = "\n\n".join([to_text(prompt), *parts])
        return self._sub_call(prompt, model, None)

    def _sub_call(self, prompt: Any, model: str | None, batch: dict[str, int] | None) -> str:
        self.observer.count("llm_query")
        payload = _prompt_payload(prompt)
        message: dict[str, Any] = {"type": "completion", "prompt": payload, "model": model}
        if batch is not None:
            message["batch"] = batch
        text = self._request(message)
        if not text.startswith("Error: "):  # the sub-model saw the prompt: its corpus slices are sources
            self.observer.note_text(_payload_text(payload), "sub_call")
        return text

    def llm_query_batched(self, prompts: Any, *texts: Any, model: str | None = None) -> list[str]:
        """Many sub-calls at once (the parent caps concurrency); answers in input order.

        A failed prompt yields an ``'Error: ...'`` string at its position. ``prompts`` is a list;
        ``llm_query_batched(instruction, pieces)`` sends the instruction with each piece, and
        ``llm_query_batched(prompts, pieces)`` pairs them one to one.

        Raises:
            TypeError: a list of prompts and a list of pieces of different lengths.
        """
        if isinstance(prompts, str):
            prompts = [prompts] if not texts else [f"{prompts}\n\n{to_text(t)}" for t in _as_list(texts[0])]
        else:
            prompts = list(prompts)
            if texts:
                pieces = _as_list(texts[0])
                if len(pieces) != len(prompts):
                    raise TypeError(f"llm_query_batched(prompts, pieces): {len(prompts)} prompts but {len(pieces)} "
                                    "pieces; give one list of prompts, or an instruction and a list of pieces")
                prompts = [f"{to_text(p)}\n\n{to_text(t)}" for p, t in zip(prompts, pieces, strict=True)]
        if not prompts:
            return []
        self.observer.count("llm_query_batched")
        self._batches += 1
        batch = {"id": self._batches, "size": len(prompts)}  # for the parent's progress line
        with ThreadPoolExecutor(max_workers=min(self._batch_threads, len(prompts))) as pool:
            return list(pool.map(lambda p: self._sub_call(p, model, batch), prompts))

    def rlm_query(self, prompt: str, context: Any = None) -> str:
        """A recursive sub-RLM over ``context`` (default: this REPL's ``context``) at depth + 1.

        At the depth limit the parent answers with a plain sub-call instead.
        """
        self.observer.count("rlm_query")
        payload = None if context is None else to_text(context)
        text = self._request({"type": "rlm_query", "prompt": str(prompt), "context": payload})
        if payload is not None and not text.startswith("Error: "):
            self.observer.note_text(payload, "rlm_query")
        return text

    # -- finishing -----------------------------------------------------------------------------
    def FINAL(self, *values: Any) -> None:
        """End the run with ``value`` as the answer (the first FINAL of a run wins); several
        values are joined with spaces, like ``print``.

        Raises:
            TypeError: no value given.
        """
        self.observer.count("FINAL")
        if not values:
            raise TypeError("FINAL() needs the answer: FINAL(answer), or FINAL_VAR('name') for a variable")
        if self.final.value is None:
            self.final.value = " ".join(to_text(v) for v in values)

    def FINAL_VAR(self, name: Any) -> None:
        """End the run with the variable called ``name`` (a string, or the variable itself)."""
        if isinstance(name, str) and name.isidentifier():
            if name in self.namespace:
                return self.FINAL(self.namespace[name])
            if any(v is name for v in self.namespace.values()):
                return self.FINAL(name)  # FINAL_VAR(answer): the bare variable, whose text looks like a name
            if len(name) < 80:
                self.final.error = (f"FINAL_VAR({name!r}): no variable named {name!r} exists; "
                                    "assign it first, then call FINAL_VAR again")
                return None
        return self.FINAL(name)

    def SHOW_VARS(self) -> _Shown:
        """A listing of the variables you defined: name, type, and size (printed; returned as
        text that a bare ``SHOW_VARS()`` line does not show a second time)."""
        rows = []
        for k, v in self.namespace.items():
            if k.startswith("_") or k in RESERVED or callable(v) and getattr(v, "__module__", "") != "__main__":
                continue
            try:
                size = f"len={len(v):,}"
            except TypeError:
                size = ""
            rows.append(f"{k}: {type(v).__name__} {size}".rstrip())
        text = "\n".join(rows) or "(no variables yet)"
        print(text)
        return _Shown(text)

    def _make_helpers(self) -> dict[str, Any]:
        c, obs = self.corpus, self.observer

        def read_after(text: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            rows = str(text).split("\n") if text else []
            if rows:  # numbered lines "12: text": the first and last numbers are the range shown
                first, last = rows[0].split(":", 1)[0].strip(), rows[-1].split(":", 1)[0].strip()
                try:
                    path = c.resolve(c.path_of(args[0] if args else kwargs.get("path") or kwargs.get("file")))["path"]
                    obs.read(path, int(first), int(last))
                except (FileNotFoundError, TypeError, ValueError):
                    pass

        def corpus_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            """``open`` that reads a corpus file by its corpus path (or a path ending with one),
            since models ``open()`` the paths they see; anything else is the real ``open``."""
            if isinstance(file, str) and isinstance(mode, str) and set(mode) <= set("rbt") \
                    and not os.path.exists(file):
                entry = _corpus_entry(c, file)
                if entry is not None:
                    obs.count("read_file")
                    obs.read(entry["path"], 1, max(1, int(entry.get("lines") or 1)))
                    text = c.file_text(entry["path"])
                    return io.BytesIO(text.encode("utf-8")) if "b" in mode else io.StringIO(text)
            return _BUILTINS.open(file, mode, *args, **kwargs)

        return {"open": corpus_open, "context": c.context, "files": WatchedList(c.files, "files", obs),
                "chunks": WatchedList(c.chunks, "chunks", obs),
                "grep": watched("grep", c.grep, obs, lambda hits, a, k: obs.grep_hits(hits)),
                "read_file": watched("read_file", c.read_file, obs, read_after),
                "chunk_text": watched("chunk_text", c.chunk_text, obs),
                "search": watched("search", c.search, obs),
                "leads": watched("leads", self._leads, obs),
                "data": self.data.data, "records": self.data.records, "frame": self.data.frame,
                "llm_query": self.llm_query, "llm_query_batched": self.llm_query_batched,
                "rlm_query": self.rlm_query, "FINAL": self.FINAL, "FINAL_VAR": self.FINAL_VAR,
                "SHOW_VARS": self.SHOW_VARS}

    def _cell_name(self, cell: int) -> str:
        """The file name of a block's code: ``<cell N>``, or ``<cell N.k>`` when an earlier block
        (of an earlier question of a session, or a FINAL line) had that number, so that a function
        defined there keeps its own source lines in tracebacks."""
        name, k = f"<cell {cell}>", 1
        while name in self._cell_names:
            k += 1
            name = f"<cell {cell}.{k}>"
        self._cell_names.add(name)
        return name

    def _leads(self, text: Any = None, max_chars: Any = 2_400) -> _Shown:
        """``leads(text=question, max_chars=2400)``: see ``rlm_cli.sandbox.leads`` (printed text).

        Raises:
            TypeError: ``text`` is not a str (nor left out, for the run's ``question``), or
                ``max_chars`` not a number.
        """
        if text is None:
            text = self.namespace.get("question")
        if not isinstance(text, str):
            raise TypeError(f"leads() takes the text to look up (a str), got {type(text).__name__}. "
                            f"{LEADS_USAGE}")
        if isinstance(max_chars, bool) or not isinstance(max_chars, (int, float)):
            raise TypeError(f"leads(): max_chars must be a number of characters. {LEADS_USAGE}")
        shown: list[tuple[str, int]] = []
        found = leads(self.corpus, text, max(200, int(max_chars)), shown)
        # Its lines are formatted (path:line: text), never slices of context: recorded as they are,
        # left out of the block's slice mapping (which would wait for the line index for nothing).
        self.observer.formatted(found, [("leads", path, line, line) for path, line in shown])
        print(found or "(no leads: the text names nothing found in the corpus)")
        return _Shown(found)

    def _echo(self, value: Any) -> None:
        """Show the value of a top-level expression statement (see :func:`_echo_expressions`)."""
        if value is not None and self.final.value is None and not isinstance(value, _Shown):
            sys.stdout.write((value if isinstance(value, str) else repr(value)) + "\n")

    # -- running code ----------------------------------------------------------------------------
    def execute(self, code: str, cell: int, map_output: bool = True) -> dict[str, Any]:
        """Run one code block; returns the ``result`` control message. ``map_output=False`` (rlm's
        own blocks: a FINAL line's value, the variable listing) leaves the output out of the
        sources, so such a block never waits for the line index.

        The helper names, ``__builtins__`` and the builtins themselves are restored (before and
        after the block), so a
        block that rebound ``FINAL``, ``llm_query`` or ``print`` (or deleted ``context``) cannot
        break the next one. Output
        goes to a :class:`CappedWriter` written directly (not through ``print``), so model code
        that rebinds ``builtins.print`` cannot break the report either.
        """
        vars(_BUILTINS).update(_BUILTINS_SNAPSHOT)
        self.namespace.update(self._helpers)
        self.namespace["__builtins__"] = _BUILTINS
        self.final = _FinalSignal()
        self.observer.begin_block(None)
        self.corpus.grep_capped, self.corpus.grep_capped_default = 0, False
        out = CappedWriter()
        old = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = out
        started = time.monotonic()
        ok = True
        by_char = False
        try:
            self.running = True
            # The source in linecache: tracebacks then show each failing line, not only its number.
            name = self._cell_name(cell)
            linecache.cache[name] = (len(code), None, code.splitlines(True), name)
            tree = ast.parse(code, filename=name, mode="exec")
            by_char = _iterates_context(tree)
            self.observer.begin_block(tree)
            last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            if last is not None:
                tree.body.pop()
            tree = _echo_expressions(tree)
            self.namespace[_ECHO] = self._echo
            exec(compile(tree, name, "exec"), self.namespace)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), name, "eval"), self.namespace)
                if value is not None and self.final.value is None and not isinstance(value, _Shown):
                    out.write((value if isinstance(value, str) else repr(value)) + "\n")
        except SystemExit:
            ok = False
            out.write("SystemExit: exit() is disabled in the REPL; call FINAL(answer) to finish\n")
        except BaseException:  # noqa: BLE001 - model code may raise anything; it reads the traceback
            ok = False
            out.write(_format_error(sys.exc_info()))
        finally:
            self.running = False
            sys.stdout, sys.stderr = old
            vars(_BUILTINS).update(_BUILTINS_SNAPSHOT)  # the worker's own code below needs them
        notes = []
        if self.namespace.get("context") is not self._helpers["context"]:
            notes.append("[note: this block reassigned `context`; the real corpus is restored before the next block. "
                         "Never replace it with text of your own: the answer must come from the corpus.]\n")
        if by_char:
            notes.append(_BY_CHAR_NOTE)
        if self.corpus.grep_capped:
            which = " (its default)" if self.corpus.grep_capped_default else ""
            notes.append(f"{protocol.GREP_CAPPED_NOTE}{self.corpus.grep_capped:,}{which}: there may be more "
                         "matches. To count or add up every match, pass max_results=None.]\n")
        rebound = [k for k in RESERVED if callable(self._helpers.get(k)) and self.namespace.get(k) is not self._helpers[k]]
        if rebound:
            notes.append(f"[note: this block reassigned {', '.join(f'`{k}`' for k in rebound)}; the helper is "
                         "restored before the next block.]\n")
        for note in notes:
            out.write(note)
        text, total = out.getvalue()
        total -= sum(len(n) for n in notes)  # what the code printed, not rlm's notes
        seen = self.observer.end_block(text if map_output else "")
        return {"type": "result", "ok": ok, "output": text, "output_chars": total,
                "final": self.final.value, "final_error": self.final.error,
                "elapsed_s": round(time.monotonic() - started, 4), "helpers": seen["helpers"],
                "sources": seen["sources"], "default_caps": ["grep"] if self.corpus.grep_capped_default else []}


#: Modules besides rlm's own whose functions the worker's replies pass through (framing, JSON).
_WATCHED_MODULES = ("json", "json.encoder", "json.decoder", "os", "struct", "io", "socket", "select")
_MISSING = object()


class Integrity:
    """The worker's own code as it was before any model code ran, to tell whether a code block
    changed it (``sys.modules['rlm_cli.sandbox.worker'].Worker.FINAL = ...``, a helper in
    ``_helpers``, ``json.dumps``...): such a change would rewrite the answers of later questions
    of a session, so the parent starts a fresh worker then (``launcher.Sandbox.tampered``).

    Recorded: every function and class of the ``rlm_cli`` modules loaded and of
    :data:`_WATCHED_MODULES` (a function with its code, defaults and closure cells, a class with
    every entry of its ``__dict__``), and the worker's callable attributes and helpers; compared by
    identity. Best effort: code that rewrites the interpreter's own structures (``ctypes``, frame
    locals) can hide its changes.
    """

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.items = self._collect()

    def _collect(self) -> dict[str, Any]:
        items: dict[str, Any] = {}
        for name, module in list(sys.modules.items()):
            if not (name == "rlm_cli" or name.startswith("rlm_cli.") or name in _WATCHED_MODULES):
                continue
            for attr, value in list(vars(module).items()):
                key = f"{name}.{attr}"
                if isinstance(value, type):
                    if getattr(value, "__module__", None) == name:
                        items[key] = value
                        for k, v in list(vars(value).items()):
                            items[f"{key}.{k}"] = v
                            self._function(f"{key}.{k}", getattr(v, "__func__", v), items)
                elif callable(value):
                    items[key] = value
                    self._function(key, value, items)
        for k, v in list(vars(self.worker).items()):
            if callable(v):
                items[f"worker.{k}"] = v
                self._function(f"worker.{k}", v, items)
        for k, v in list(self.worker._helpers.items()):
            items[f"helper.{k}"] = v
        return items

    @staticmethod
    def _function(key: str, value: Any, items: dict[str, Any]) -> None:
        code = getattr(value, "__code__", None)
        if code is None:
            return
        items[f"{key}.__code__"] = code
        items[f"{key}.__defaults__"] = getattr(value, "__defaults__", None)
        items[f"{key}.__kwdefaults__"] = getattr(value, "__kwdefaults__", None)
        for n, cell in enumerate(getattr(value, "__closure__", None) or ()):
            try:
                items[f"{key}.<cell {n}>"] = cell.cell_contents
            except ValueError:
                items[f"{key}.<cell {n}>"] = _MISSING

    def changed(self) -> list[str]:
        """The names recorded that now hold something else (or are gone), and entries added to a
        recorded class (at most 20, sorted)."""
        now = self._collect()
        names = [k for k, v in self.items.items() if now.get(k, _MISSING) is not v]
        classes = {k for k, v in self.items.items() if isinstance(v, type)}
        names += [k for k in now if k not in self.items and k.rsplit(".", 1)[0] in classes]
        return sorted(names)[:20]


def _relay(socket_path: str, token: str) -> Callable[[dict[str, Any]], str]:
    """The function that sends one request (a dict) to the parent's model relay and returns the
    answer text, or ``'Error: ...'`` (never raises).

    The token lives only in this closure, not in an attribute of the worker or of the helpers.
    That keeps it out of casual reach; it is no secret from model code, which can read its own
    memory, so the relay does not rely on it alone: it serves a token only to this worker's
    processes (see ``rlm_cli.models.relay``).
    """
    def request(message: dict[str, Any]) -> str:
        body = {k: v for k, v in message.items() if k != "type"}
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.connect(socket_path)
                # The hello first: the relay reads the request only once it knows the caller.
                protocol.send_message(sock, {"token": token, "type": message.get("type")})
                protocol.send_message(sock, body)
                reply = protocol.recv_message(sock)
        except (OSError, protocol.ProtocolError) as exc:
            return f"Error: the model relay could not be reached ({exc})"
        if reply.get("ok"):
            return str(reply.get("text", ""))
        return f"Error: {reply.get('error', 'unknown error')}"

    return request


def _corpus_entry(view: CorpusView, path: str) -> dict[str, Any] | None:
    """The corpus file ``path`` names: a corpus path, a unique suffix of one, or a longer path
    (absolute, ``./``) that ends with one; ``None`` when none matches."""
    parts = path.replace("\\", "/").split("/")
    for i in range(len(parts)):
        tail = "/".join(parts[i:]).lstrip("./") if i else "/".join(parts).removeprefix("./")
        if not tail:
            continue
        try:
            return view.resolve(tail)
        except FileNotFoundError:
            continue
    return None


LEADS_USAGE = ("Usage: leads(text=question, max_chars=2400) prints where the names in text are defined and "
               "called, and the lines holding most of its words")


class _Shown(str):
    """Text a helper has already printed: an expression statement does not show it again."""


#: The name under which a block's top-level expression statements report their values.
_ECHO = "__rlm_echo__"


#: Calls whose result is a count, a position or a status nobody reads (``f.write(...)``,
#: ``os.write``, ``os.waitpid``).
_QUIET_CALLS = frozenset({"write", "writelines", "send", "sendall", "seek", "truncate", "flush", "close",
                          "waitpid", "wait", "join", "kill"})


def _io_call(node: ast.expr) -> bool:
    """Whether ``node`` calls one of :data:`_QUIET_CALLS` (its value is not shown)."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _QUIET_CALLS


def _echo_expressions(tree: ast.Module) -> ast.Module:
    """``tree`` with each top-level expression statement (a bare ``grep(...)`` line, not only the
    last one) writing its value to ``out`` as Python's interactive console does: ``None`` shows
    nothing, a ``str`` is written as it is, anything else as its ``repr`` (``Worker._echo``).
    Models write several such lines in one block and expect to see each; constants (a bare string
    used as a comment) and I/O calls (:data:`_QUIET_CALLS`) stay silent. The echo function is bound in the namespace as :data:`_ECHO`."""
    changed = False
    for i, stmt in enumerate(tree.body):
        if isinstance(stmt, ast.Expr) and not isinstance(stmt.value, ast.Constant) and not _io_call(stmt.value):
            call = ast.Call(func=ast.Name(id=_ECHO, ctx=ast.Load()), args=[stmt.value], keywords=[])
            tree.body[i] = ast.copy_location(ast.Expr(value=ast.copy_location(call, stmt.value)), stmt)
            changed = True
    if changed:
        ast.fix_missing_locations(tree)
    return tree


#: Said after a block that loops over ``context`` itself: a ``str``, so one character at a time (seen
#: with Qwen2.5-Coder-1.5B: ``for line in context: if "golden citadel" in line`` found nothing, and
#: the model answered that the corpus holds no such text).
_BY_CHAR_NOTE = ("[note: `for ... in context` goes over `context` one character at a time; for its lines use "
                 "`context.splitlines()`, or grep(pattern) for the lines that match.]\n")


def _iterates_context(tree: ast.AST) -> bool:
    """Whether a ``for`` loop or a comprehension of ``tree`` iterates the name ``context``."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            it = node.iter
            if isinstance(it, ast.Name) and it.id == "context":
                return True
    return False


def _format_error(info: Any) -> str:
    """The traceback of a failed block, limited to the block's own frames."""
    etype, evalue, tb = info
    try:
        frames = [f for f in traceback.extract_tb(tb) if f.filename.startswith("<cell")]
        text = "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames))
        text += "".join(traceback.format_exception_only(etype, evalue))
        if etype is TypeError and re.search(r"(Row|Hit) found", str(evalue)):  # ", ".join(grep(...)) and the like
            text += ("hint: grep and search return rows (dicts), not strings: join their fields, e.g. "
                     "'\n'.join(f\"{h['file']}:{h['line']}: {h['text']}\" for h in hits)\n")
        if etype is TypeError and str(evalue).startswith("list indices must be") and frames and \
                re.search(r"\bfiles\s*\[\s*[\"'fr]", frames[-1].line or ""):  # files["a.py"]: a list, not a dict
            text += ("hint: `files` is a list of dicts, one per file (f['path'], f['lines'], f['start'], f['end']); "
                     "a file's text is context['a.py'], its numbered lines read_file('a.py', 20, 40)\n")
        if etype is ValueError and str(evalue).startswith(("invalid literal for int()", "could not convert string")):
            text += ("hint: that text is not a number; take the number out of a line with a regex group, e.g. "
                     "int(re.search(r'latency=(\\d+)', h['text']).group(1)), or h['match'] of a grep whose "
                     "pattern has one group: grep(r'latency=(\\d+)')\n")
        return text
    except BaseException:  # noqa: BLE001 - a hostile __str__ must not take the worker down
        return f"{getattr(etype, '__name__', 'Exception')}: (the error could not be formatted)\n"


#: A model name as given to llm_query (``openai/gpt-5-mini``): no spaces, one slash or more.
_MODEL_NAME = re.compile(r"[\w.\-]+/[\w.:\-/]+")


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        return [value]
    return list(value)


def _payload_text(payload: Any) -> str:
    """The text of a sub-call prompt (a string, or the contents of a message list)."""
    if isinstance(payload, str):
        return payload
    return "\n".join(str(m.get("content", "")) for m in payload if isinstance(m, dict))


def _prompt_payload(prompt: Any) -> Any:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(m, dict) for m in prompt):
        return prompt  # a chat message list
    return to_text(prompt)


# -- process entry -------------------------------------------------------------------------------

#: prctl options and capability numbers used below (linux/prctl.h, linux/capability.h).
_PR_SET_PDEATHSIG, _PR_SET_KEEPCAPS, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT = 1, 8, 24, 38, 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAPS = {"CAP_DAC_READ_SEARCH": 2}
_CAP_VERSION_3 = 0x20080522


def apply_limits(limits: dict[str, int]) -> list[str]:
    """Apply ``resource`` limits named like ``RLIMIT_AS`` (values in bytes/seconds/counts); soft
    and hard limits are both set, so model code cannot raise them again.

    Returns notes for limits that could not be applied (never raises).
    """
    notes = []
    try:
        import resource
    except ImportError:
        return ["resource limits are unavailable on this platform"]
    for name, value in limits.items():
        which = getattr(resource, name, None)
        if which is None:
            continue
        try:
            _, hard = resource.getrlimit(which)
            soft = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (soft, soft))
        except (ValueError, OSError) as exc:
            notes.append(f"{name}: {exc}")
    return notes


#: Address space model code must have free once the corpus is loaded (shared with the CLI's check).
MIN_FREE_MEMORY = protocol.MIN_FREE_MEMORY


def address_space() -> int | None:
    """Bytes of address space this process uses now (``VmSize``, what ``RLIMIT_AS`` limits), or
    None where ``/proc`` is missing (macOS)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def memory_problem(limits: dict[str, int], chars: int) -> str | None:
    """A one-line error when ``RLIMIT_AS`` in ``limits`` would leave the loaded worker less than
    :data:`MIN_FREE_MEMORY` to work in (every allocation of model code would fail), else None.

    Checked after the corpus is loaded and before the limit is applied: the limit cannot be set
    earlier, since the loaded corpus alone may exceed it.
    """
    limit = limits.get("RLIMIT_AS")
    used = address_space()
    if not limit or used is None or limit - used >= MIN_FREE_MEMORY:
        return None
    mib = 1024**2
    advise = -(-max(2 * used, used + MIN_FREE_MEMORY) // (64 * mib)) * 64  # rounded up to 64 MiB
    return (f"--memory-limit {limit / mib:,.4g}M is too small: the REPL worker already uses {used // mib:,} MiB "
            f"of address space after loading the corpus ({chars:,} characters of context); use "
            f"--memory-limit {advise:,}M or more, or narrow the corpus (`rlm stats` shows what takes the room)")


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, arg2: int = 0) -> None:
    """``prctl(option, arg2, 0, 0, 0)``.

    Raises:
        OSError: the call failed.
    """
    import ctypes

    libc = _libc()
    if libc.prctl(option, ctypes.c_ulong(arg2), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def _set_caps(keep: int) -> None:
    """Set this thread's effective and permitted capabilities to the mask ``keep`` and the
    inheritable set to empty (``capset(2)``; lowering is always allowed).

    Raises:
        OSError: the call failed.
    """
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    data = (Data * 2)(Data(keep & 0xFFFFFFFF, keep & 0xFFFFFFFF, 0), Data(keep >> 32, keep >> 32, 0))
    libc = _libc()
    if libc.capset(ctypes.byref(Header(_CAP_VERSION_3, 0)), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")


def _drop_bounding_set(keep: int) -> None:
    """Remove every capability but ``keep`` from the bounding set, so no later ``execve`` can
    regain one (needs CAP_SETPCAP; without it the set stays and no-new-privileges still holds)."""
    for cap in range(64):
        if keep & (1 << cap):
            continue
        try:
            _prctl(_PR_CAPBSET_DROP, cap)
        except OSError as exc:
            if exc.errno == 22:  # EINVAL: past the last capability this kernel knows
                return
            if exc.errno == 1:  # EPERM: no CAP_SETPCAP
                return
            raise


def drop_privileges(uid: int, gid: int, keep_caps: list[str] | tuple[str, ...] = ()) -> None:
    """If running as root, become ``uid``/``gid`` (so per-user process limits apply and the
    parent cannot be signalled), keeping only the capabilities named in ``keep_caps``
    (``CAP_DAC_READ_SEARCH`` when the interpreter is not readable by ``uid``); every other
    capability set, the inheritable, ambient and bounding ones included, ends up empty.
    ``uid``/``gid`` equal to the current ones (0) keep the user and only drop the capabilities
    (rlm lacks what becoming ``nobody`` would need: see ``launcher.plan_drop``).

    Raises:
        OSError: a step failed (the worker must then refuse to run model code).
    """
    if not (hasattr(os, "geteuid") and os.geteuid() == 0):
        return
    mask = 0
    for name in keep_caps:
        mask |= 1 << _CAPS[name]
    linux = sys.platform.startswith("linux")
    if linux:
        _drop_bounding_set(mask)
        if mask:
            _prctl(_PR_SET_KEEPCAPS, 1)
    if (uid, gid) != (os.getuid(), os.getgid()):  # equal: stay root, with every capability dropped
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    if linux:
        _set_caps(mask)
        _prctl(_PR_SET_KEEPCAPS, 0)
        try:
            _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
        except OSError:
            pass  # kernels before 4.3 have no ambient set
    if os.getuid() != uid or os.geteuid() != uid:
        raise OSError(f"still uid {os.geteuid()} after setuid({uid})")


#: Syscalls the seccomp filter checks, per architecture (the kernel's syscall tables:
#: arch/x86/entry/syscalls/syscall_64.tbl, include/uapi/asm-generic/unistd.h). ``refused`` are
#: refused outright: bpf, userfaultfd, perf_event_open, the key-ring calls and io_uring are kernel
#: attack surface no REPL needs; memfd_create and memfd_secret make memory that ``RLIMIT_AS``
#: does not count (pages of a memfd written with ``write()`` are never mapped); setsid would let a
#: process leave the worker's session, the mark by which what it started is found and killed
#: (``sandbox.reaper``), so it is refused too (``os.setsid``, ``start_new_session=True``). ``self_only`` act
#: on the process their first argument names and pass only when it is 0 (the caller itself):
#: prlimit64 (a CPU limit of 1 s on rlm would kill it), sched_setaffinity, sched_setparam,
#: sched_setscheduler and sched_setattr.
_SECCOMP_TABLE: dict[str, dict[str, Any]] = {
    "x86_64": {"arch": 0xC000003E, "clone": 56, "unshare": 272, "clone3": 435, "socket": 41, "socketpair": 53,
               "setpriority": 141, "ioprio_set": 251,
               "self_only": (302, 203, 142, 144, 314),
               "refused": (321, 323, 298, 250, 248, 249, 425, 319, 447, 112)},
    "aarch64": {"arch": 0xC00000B7, "clone": 220, "unshare": 97, "clone3": 435, "socket": 198, "socketpair": 199,
                "setpriority": 140, "ioprio_set": 30,
                "self_only": (261, 122, 118, 119, 274),
                "refused": (280, 282, 241, 219, 217, 218, 425, 279, 447, 157)},
}
_CLONE_NEWUSER = 0x10000000
_AF_UNIX = 1
#: ``setpriority``'s ``which`` for one process, ``ioprio_set``'s (linux/resource.h, linux/ioprio.h).
_PRIO_PROCESS, _IOPRIO_WHO_PROCESS = 0, 1


def seccomp_program(machine: str) -> list[tuple[int, int, int, int]] | None:
    """The classic-BPF seccomp filter for ``machine`` (``platform.machine()``) as
    ``(code, jt, jf, k)`` instructions, or ``None`` for an architecture we have no table for.

    Syscalls of a foreign ABI (i386 ``int 0x80`` and x32 on x86_64) are refused as a whole, so the
    numbers below cannot be bypassed (i386's ``socketcall`` included); ``clone3`` answers ENOSYS so
    the C library falls back to ``clone``, whose flags the filter can read; ``socket`` and
    ``socketpair`` pass only when their first argument (the address family, an ``int``: the low
    32 bits of ``args[0]``) is AF_UNIX, and fail with EPERM otherwise. The ``self_only`` calls
    pass only for pid 0 (the low 32 bits of ``args[0]``: a ``pid_t``); ``setpriority`` only as
    ``(PRIO_PROCESS, 0, ...)`` (``os.nice``) and ``ioprio_set`` only as ``(IOPRIO_WHO_PROCESS,
    0, ...)``: no process but the caller's own priority, CPU set, scheduling or limits can be
    changed, whatever the user ids allow.
    """
    entry = _SECCOMP_TABLE.get(machine)
    if entry is None:
        return None
    ld_w, jeq, jset, jge, ret = 0x20, 0x15, 0x45, 0x35, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    args0, args1 = 16, 24  # offsetof(struct seccomp_data, args[i]); the low word on these little-endian machines
    # Jump targets are labels (str) or 0 (the next instruction); labels are resolved below.
    source: list[str | tuple[int, int | str, int | str, int]] = [
        (ld_w, 0, 0, 4), (jeq, 0, "eperm", entry["arch"]),  # foreign ABI: refused
        (ld_w, 0, 0, 0), (jge, "eperm", 0, 0x40000000),  # x32 numbers: refused
        (jeq, "flags", 0, entry["clone"]), (jeq, "flags", 0, entry["unshare"]), (jeq, "enosys", 0, entry["clone3"]),
        (jeq, "family", 0, entry["socket"]), (jeq, "family", 0, entry["socketpair"]),
        *[(jeq, "self", 0, nr) for nr in entry["self_only"]],
        (jeq, "prio", 0, entry["setpriority"]), (jeq, "ioprio", 0, entry["ioprio_set"]),
        *[(jeq, "eperm", 0, nr) for nr in entry["refused"]],
        (ret, 0, 0, allow),
        "flags", (ld_w, 0, 0, args0), (jset, "eperm", "allow", _CLONE_NEWUSER),
        "family", (ld_w, 0, 0, args0), (jeq, "allow", "eperm", _AF_UNIX),
        "self", (ld_w, 0, 0, args0), (jeq, "allow", "eperm", 0),
        "prio", (ld_w, 0, 0, args0), (jeq, 0, "eperm", _PRIO_PROCESS), (ld_w, 0, 0, args1), (jeq, "allow", "eperm", 0),
        "ioprio", (ld_w, 0, 0, args0), (jeq, 0, "eperm", _IOPRIO_WHO_PROCESS), (ld_w, 0, 0, args1),
        (jeq, "allow", "eperm", 0),
        "allow", (ret, 0, 0, allow),
        "eperm", (ret, 0, 0, eperm),
        "enosys", (ret, 0, 0, enosys),
    ]
    labels: dict[str, int] = {}
    for item in source:
        if isinstance(item, str):
            labels[item] = sum(1 for i in source[:source.index(item)] if not isinstance(i, str))
    prog: list[tuple[int, int, int, int]] = []
    for item in source:
        if isinstance(item, str):
            continue
        code, jt, jf, k = item
        at = len(prog)
        offsets = [labels[j] - at - 1 if isinstance(j, str) else j for j in (jt, jf)]
        assert all(0 <= o < 256 for o in offsets), (item, offsets)
        prog.append((code, offsets[0], offsets[1], k))
    return prog


def install_seccomp() -> str | None:
    """Load :func:`seccomp_program` for this machine (needs no-new-privileges first).

    Returns a note when no filter could be installed (never raises).
    """
    import ctypes
    import platform

    prog = seccomp_program(platform.machine())
    if prog is None:
        return f"no seccomp filter for {platform.machine()}: user namespaces stay available to model code"

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                    ("k", ctypes.c_uint32)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    filters = (SockFilter * len(prog))(*[SockFilter(*ins) for ins in prog])
    fprog = SockFprog(len(prog), filters)
    libc = _libc()
    if libc.prctl(22, ctypes.c_ulong(2), ctypes.byref(fprog), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        return f"seccomp filter not installed: {os.strerror(ctypes.get_errno())}"
    return None


#: Landlock filesystem rights (``LANDLOCK_ACCESS_FS_*`` in linux/landlock.h) and the ABI that
#: introduced each: ABI 1 (Linux 5.13) the basic ones, 2 REFER (5.19), 3 TRUNCATE (6.2),
#: 5 IOCTL_DEV (6.10), 9 RESOLVE_UNIX (connecting to a named Unix socket).
_FS_READ = (1 << 0) | (1 << 2) | (1 << 3)  # EXECUTE, READ_FILE, READ_DIR
_FS_ABI1 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
_FS_BY_ABI = ((1, _FS_ABI1), (2, 1 << 13), (3, 1 << 14), (5, 1 << 15), (9, 1 << 16))
#: Rights that a rule on a file (not a folder) may carry: EXECUTE, WRITE_FILE, READ_FILE,
#: TRUNCATE, IOCTL_DEV, RESOLVE_UNIX.
_FS_FILE = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 14) | (1 << 15) | (1 << 16)
_FS_DEVICE = (1 << 1) | (1 << 2) | (1 << 14) | (1 << 15)  # WRITE_FILE, READ_FILE, TRUNCATE, IOCTL_DEV
_FS_RESOLVE_UNIX = 1 << 16
#: Network rights: ABI 4 (Linux 6.7) TCP bind and connect, ABI 10 UDP bind and connect/send.
_NET_BY_ABI = ((4, (1 << 0) | (1 << 1)), (10, (1 << 2) | (1 << 3)))
#: Scopes: ABI 6 (Linux 6.12) abstract Unix sockets and signals outside the worker's domain.
_SCOPE_BY_ABI = ((6, (1 << 0) | (1 << 1)),)


def _for_abi(table: tuple[tuple[int, int], ...], abi: int) -> int:
    mask = 0
    for since, bits in table:
        if abi >= since:
            mask |= bits
    return mask


def apply_landlock(policy: dict[str, Any]) -> int:
    """Restrict this process (and every process it starts) with Landlock, for good.

    ``policy`` (built by ``launcher.Sandbox``): ``files`` (bool: handle filesystem rights at all;
    bubblewrap's own mount namespace already does that), ``read`` (paths readable and executable,
    nothing else), ``write`` (paths with every right: the scratch folder), ``devices`` (device
    files readable and writable: ``/dev/null``...), ``unix`` (folders holding the Unix sockets the
    worker may connect to, enforced from ABI 9). Whatever the kernel's ABI handles, every path
    not listed is denied, ``CAP_DAC_READ_SEARCH`` or not. From ABI 4, TCP bind and connect are
    denied (UDP too from ABI 10); from ABI 6 signals and abstract Unix sockets are scoped to the
    worker's own processes. A missing path is skipped.

    Returns the ABI version used.

    Raises:
        OSError: Landlock is unavailable (no kernel support, no ``landlockpy``) or a step failed;
            the worker must then refuse to run model code, since the parent reported it present.
    """
    try:
        from landlockpy import AccessFS, AccessNet, Ruleset, Scope, abi_version
    except ImportError as exc:
        raise OSError(f"Landlock: the landlockpy package is missing ({exc})") from None
    abi = abi_version()
    if abi < 1:
        raise OSError("Landlock is not available in this kernel")
    fs = _for_abi(_FS_BY_ABI, abi) if policy.get("files") else 0
    net, scoped = _for_abi(_NET_BY_ABI, abi), _for_abi(_SCOPE_BY_ABI, abi)
    if not (fs or net or scoped):
        return abi
    with Ruleset(handled_fs=AccessFS(fs), handled_net=AccessNet(net), scoped=Scope(scoped),
                 best_effort=False) as ruleset:
        if fs:
            grants = [(p, _FS_READ) for p in policy.get("read", ())]
            grants += [(p, fs) for p in policy.get("write", ())]
            grants += [(p, _FS_DEVICE) for p in policy.get("devices", ())]
            grants += [(p, _FS_RESOLVE_UNIX) for p in policy.get("unix", ())]
            for path, rights in grants:
                try:
                    is_dir = os.path.isdir(path)
                    rights &= fs if is_dir else fs & _FS_FILE
                    if rights:
                        ruleset.allow_path(path, AccessFS(rights))
                except FileNotFoundError:
                    continue
        ruleset.restrict(no_new_privs=True)
    return abi


#: ``unshare`` and ``mount`` flags (linux/sched.h, linux/mount.h).
_CLONE_NEWNS, _MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 0x00020000, 2, 4, 1 << 14, 1 << 18


def mount_scratch(path: str, size: int, uid: int, gid: int) -> None:
    """Make ``path`` (the scratch folder) a tmpfs of at most ``size`` bytes owned by
    ``uid``/``gid``, in a mount namespace of this process's own (inherited by what it starts),
    so that its files cannot fill the host's disk and leave nothing there. Needs
    ``CAP_SYS_ADMIN`` (a root rlm); call it while single-threaded, before the drop and Landlock.

    Raises:
        OSError: a step failed (the scratch folder then stays on the host disk).
    """
    import ctypes

    libc = _libc()
    steps = ((lambda: libc.unshare(_CLONE_NEWNS), "unshare"),
             (lambda: libc.mount(b"none", b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None), "mount --make-rprivate"),
             (lambda: libc.mount(b"tmpfs", path.encode(), b"tmpfs", ctypes.c_ulong(_MS_NOSUID | _MS_NODEV),
                                 f"size={int(size)},mode=0700,uid={int(uid)},gid={int(gid)}".encode()), "mount tmpfs"))
    for call, what in steps:
        if call() != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")


def harden(parent_pid: int, landlock: dict[str, Any] | None = None, require_seccomp: bool = False) -> list[str]:
    """Linux hardening that needs no privileges: no new privileges through setuid binaries or
    file capabilities (``PR_SET_NO_NEW_PRIVS``), death with the parent (``PR_SET_PDEATHSIG``),
    Landlock with the ``landlock`` policy when given (see :func:`apply_landlock`), and a seccomp
    filter refusing every socket but AF_UNIX, new user namespaces and a few kernel interfaces
    (see :func:`seccomp_program`). Both apply to this thread and what it starts: the worker is
    still single-threaded here (checked).

    Returns notes for what could not be done. Exits at once if the parent is already gone.

    Raises:
        OSError: Landlock (when ``landlock`` is given) or seccomp (when ``require_seccomp``)
            could not be applied, though the parent found them available and reported them.
    """
    notes: list[str] = []
    if not sys.platform.startswith("linux"):
        return notes
    import signal

    for option, arg, what in ((_PR_SET_NO_NEW_PRIVS, 1, "no-new-privileges"),
                              (_PR_SET_PDEATHSIG, int(signal.SIGKILL), "parent-death signal")):
        try:
            _prctl(option, arg)
        except (OSError, AttributeError) as exc:
            notes.append(f"{what} could not be set: {exc}")
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = 1
    if threads > 1 and (landlock is not None or require_seccomp):
        raise OSError(f"the worker runs {threads} threads; Landlock and seccomp would confine only one")
    if landlock is not None:
        apply_landlock(landlock)
    note = install_seccomp()
    if note:
        if require_seccomp:
            raise OSError(note)
        notes.append(note)
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        os._exit(1)
    return notes


def _result_frame(result: dict[str, Any]) -> dict[str, Any]:
    """``result``, with a FINAL answer too large for one control frame replaced by an error."""
    if result.get("final") is not None and len(result["final"]) * 4 > protocol.MAX_CONTROL_BYTES // 2:
        size = len(protocol.encode_frame(result))
        if size > protocol.MAX_CONTROL_BYTES - 4096:
            result = dict(result, final=None, final_error=(
                f"the FINAL answer is {size:,} bytes; answers are limited to "
                f"{protocol.MAX_CONTROL_BYTES // 2**20} MiB. Give a shorter answer"))
    return result


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``worker.py READ_FD WRITE_FD``; serves control messages until shutdown/EOF.

    The first message (``load``) carries the LMHandler socket and token, the limits, the user
    to drop to and the corpus to load; the worker answers ``ready`` (or ``error``), then runs
    each ``exec`` and answers with a ``result`` echoing the request's ``id``.
    """
    argv = sys.argv[1:] if argv is None else argv
    rfd, wfd = int(argv[0]), int(argv[1])
    parent_pid = os.getppid()
    os.set_inheritable(rfd, False)
    os.set_inheritable(wfd, False)
    sys.stdin = open(os.devnull)  # model code reading stdin must not eat control frames
    config = protocol.read_message_fd(rfd)
    # The corpus is loaded before the drop (no model code has run yet), so a bundle in a folder
    # only rlm's user can read (root's cache) still loads at the process level.
    try:
        worker = Worker(config)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which decides
        protocol.write_message_fd(wfd, {"type": "error", "error": f"{type(exc).__name__}: {exc}"})
        return
    notes: list[str] = []
    scratch = "disk"
    if config.get("scratch_tmpfs") and config.get("cwd"):
        owner = config.get("drop_to") or [os.getuid(), os.getgid()]
        try:
            mount_scratch(str(config["cwd"]), int(config["scratch_tmpfs"]), int(owner[0]), int(owner[1]))
            scratch = "tmpfs"
        except OSError as exc:
            notes.append(f"the scratch folder stays on the disk ({exc.strerror or exc}); rlm watches its size")
    step = "cannot drop privileges"
    try:
        if config.get("drop_to") is not None:
            uid, gid = config["drop_to"]
            drop_privileges(int(uid), int(gid), tuple(config.get("keep_caps") or ()))
        if config.get("cwd"):  # entered as the dropped user: rlm itself may lack the right to
            step = "cannot enter the scratch folder"
            os.chdir(config["cwd"])
        if config.get("harden", True):
            step = "cannot confine the worker"
            notes += harden(parent_pid, config.get("landlock"), bool(config.get("seccomp")))
    except OSError as exc:
        protocol.write_message_fd(wfd, {"type": "error", "error": f"{step}: {exc}"})
        return
    problem = memory_problem(config.get("limits", {}), len(worker.context))
    if problem:
        protocol.write_message_fd(wfd, {"type": "error", "kind": "memory_limit", "error": problem})
        return
    notes += apply_limits(config.get("limits", {}))
    protocol.write_message_fd(wfd, {"type": "ready", "notes": notes, "pid": os.getpid(),
                                    "context_chars": len(worker.context), "scratch": scratch})
    del config
    # Limited and hardened now: the threads inherit all of it. The line index first (0.8 s for
    # 31 MB; the output of the first code block is mapped with it), then the search index (2 s;
    # search() is rarer): one build at a time, both usually done during the first root call.
    # While a code block runs they wait (leads(question) on 31 MB took 0.5 s instead of 0.06 s
    # beside them), unless that block needs the index itself.
    def busy() -> bool:
        return worker.running

    def build_indexes() -> None:
        try:
            worker.observer.build_index(busy)
        except Exception:  # noqa: BLE001, S110 - note_text builds again or gives up quietly
            pass
        worker.corpus.start_index_build(busy).join()

    threading.Thread(target=build_indexes, name="indexes", daemon=True).start()

    def on_interrupt(signum: int, frame: Any) -> None:
        """SIGINT from the parent stops the running block (it reports a KeyboardInterrupt);
        between blocks it is ignored, so the control loop never dies of it."""
        if worker.running:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_interrupt)
    integrity = Integrity(worker)  # before any model code: what "unchanged" means
    changed = integrity.changed  # the loop holds its own references
    read, write = protocol.read_message_fd, protocol.write_message_fd
    while True:
        try:
            msg = read(rfd)
        except protocol.ProtocolError:
            return
        if msg.get("type") == "check":
            write(wfd, {"type": "checked", "id": msg.get("id"), "changed": changed()})
        elif msg.get("type") == "exec":
            result = worker.execute(str(msg.get("code", "")), int(msg.get("cell", 0)), msg.get("map") is not False)
            result["id"] = msg.get("id")
            protocol.write_message_fd(wfd, _result_frame(result))
        elif msg.get("type") == "shutdown":
            return


if __name__ == "__main__":
    main()
