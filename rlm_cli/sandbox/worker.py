"""The REPL worker: a separate process holding the persistent namespace the root model codes in.

It speaks the control protocol (``rlm_cli.protocol``) on two inherited pipe descriptors given
on the command line, and reaches the parent's LMHandler over a Unix socket for ``llm_query``,
``llm_query_batched``, ``llm_map`` and ``rlm_query`` (``subcalls``). It uses only the standard library, ``protocol`` and
the modules of ``rlm_cli.sandbox`` that do the same (the helpers: ``corpus_helpers``,
``data_helpers``, ``leads``, ``mapping``, ``observe``; its own parts: ``calls``, ``subcalls``, ``execution``,
``hardening``, ``integrity``), so it runs the same under bubblewrap, sandbox-exec or as a plain
process.

Namespace given to model code: ``context`` (str), ``files``, ``chunks`` (lists of dicts),
``grep``, ``read_file``, ``chunk_text``, ``search``, ``leads``, ``data``, ``records``, ``frame``
(structured files: ``data_helpers``), ``llm_query``, ``llm_query_batched``, ``llm_map``
(``mapping``), ``rlm_query``, ``FINAL``, ``FINAL_VAR``, ``SHOW_VARS``. Helper names are restored before every
code block, so rebinding them cannot break the loop.
"""

from __future__ import annotations

import ast
import builtins
import io
import linecache
import os
import signal
import sys
import threading
import time
from typing import Any

from rlm_cli import protocol
from rlm_cli.sandbox.calls import relay, to_text
from rlm_cli.sandbox.corpus_helpers import CorpusView
from rlm_cli.sandbox.data_helpers import DataView
from rlm_cli.sandbox.execution import (
    BY_CHAR_NOTE,
    ECHO_NAME,
    CappedWriter,
    echo_expressions,
    format_error,
    iterates_context,
    result_frame,
)
from rlm_cli.sandbox.hardening import confine
from rlm_cli.sandbox.hooks import Hooks, refuse_audit_hooks
from rlm_cli.sandbox.integrity import Integrity
from rlm_cli.sandbox.leads import LeadsHelper, leads
from rlm_cli.sandbox.observe import Observer, WatchedList, watched
from rlm_cli.sandbox.subcalls import SubCalls
from rlm_cli.sandbox.texts import Context, Lines

_BUILTINS = builtins
#: The builtins as the worker started; restored before every block (``builtins.print = None``
#: in one block must not break the next).
_BUILTINS_SNAPSHOT = dict(vars(builtins))
RESERVED = ("context", "files", "chunks", "grep", "read_file", "chunk_text", "search", "leads", "data", "records", "frame",
            "llm_query", "llm_query_batched", "llm_map", "rlm_query", "FINAL", "FINAL_VAR", "SHOW_VARS")


class _FinalSignal:
    __slots__ = ("value", "error")

    def __init__(self) -> None:
        self.value: str | None = None
        self.error: str | None = None


class Worker(SubCalls):
    """State of one REPL: the namespace, the corpus, and the LMHandler connection details."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.socket_path: str = config["socket"]
        self._request = relay(config["socket"], config["token"])
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
                "leads": LeadsHelper(watched("leads", self._leads, obs)),
                "data": self.data.data, "records": self.data.records, "frame": self.data.frame,
                "llm_query": self.llm_query, "llm_query_batched": self.llm_query_batched, "llm_map": self.llm_map,
                "rlm_query": self.rlm_query, "FINAL": self.FINAL, "FINAL_VAR": self.FINAL_VAR,
                "SHOW_VARS": self.SHOW_VARS}

    def _example_path(self) -> str:
        """A corpus path for a hint's example code: the first file the run's ``question`` names,
        else the largest file (``a.py`` in an empty corpus)."""
        question = self.namespace.get("question")
        files = self.corpus.files
        if isinstance(question, str):
            named = next((f["path"] for f in files if f["path"] in question), None)
            if named:
                return str(named)
        return str(max(files, key=lambda f: f.get("chars") or 0)["path"]) if files else "a.py"

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
        """Show the value of a top-level expression statement (see :func:`echo_expressions`)."""
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
        for alias in protocol.FINAL_ALIASES:
            self.namespace.setdefault(alias, self.FINAL)
        self.namespace["__builtins__"] = _BUILTINS
        self.final = _FinalSignal()
        self.observer.begin_block(None)
        self.corpus.grep_capped, self.corpus.grep_capped_default = 0, False
        self.corpus.grep_empty = []
        self.data.unmatched = []
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
            by_char = iterates_context(tree)
            self.observer.begin_block(tree)
            last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            if last is not None:
                tree.body.pop()
            tree = echo_expressions(tree)
            self.namespace[ECHO_NAME] = self._echo
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
            out.write(format_error(sys.exc_info(), isinstance(self.context, Context), self._example_path()))
        finally:
            self.running = False
            sys.stdout, sys.stderr = old
            vars(_BUILTINS).update(_BUILTINS_SNAPSHOT)  # the worker's own code below needs them
        notes = self._block_notes(by_char)
        for note in notes:
            out.write(note)
        text, total = out.getvalue()
        total -= sum(len(n) for n in notes)  # what the code printed, not rlm's notes
        seen = self.observer.end_block(text if map_output else "")
        return {"type": "result", "ok": ok, "output": text, "output_chars": total,
                "final": self.final.value, "final_error": self.final.error,
                "elapsed_s": round(time.monotonic() - started, 4), "helpers": seen["helpers"],
                "sources": seen["sources"], "default_caps": ["grep"] if self.corpus.grep_capped_default else []}

    def _block_notes(self, by_char: bool) -> list[str]:
        """rlm's notes after a block's output: ``context`` or a helper reassigned, ``context``
        iterated character by character (``by_char``), grep results capped, empty greps and
        unmatched data keys explained."""
        notes = []
        if self.namespace.get("context") is not self._helpers["context"]:
            notes.append("[note: this block reassigned `context`; the real corpus is restored before the next block. "
                         "Never replace it with text of your own: the answer must come from the corpus.]\n")
        if by_char:
            notes.append(BY_CHAR_NOTE)
        if self.corpus.grep_capped:
            which = " (its default)" if self.corpus.grep_capped_default else ""
            notes.append(f"{protocol.GREP_CAPPED_NOTE}{self.corpus.grep_capped:,}{which}: there may be more "
                         "matches. To count or add up every match, pass max_results=None.]\n")
        if self.corpus.grep_empty:
            notes.append(self.corpus.explain_empty_greps())
        if self.data.unmatched:
            notes.append(self.data.explain_unmatched())
        rebound = [k for k in RESERVED if callable(self._helpers.get(k)) and self.namespace.get(k) is not self._helpers[k]]
        if rebound:
            notes.append(f"[note: this block reassigned {', '.join(f'`{k}`' for k in rebound)}; the helper is "
                         "restored before the next block.]\n")
        return notes


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


class _Shown(Lines):
    """Text a helper has already printed: an expression statement does not show it again. A loop
    over it gives its lines (``for x in leads(question)`` printed one character a line)."""


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
    notes, scratch, refusal = confine(config, len(worker.context), parent_pid)
    if refusal is not None:
        protocol.write_message_fd(wfd, refusal)
        return
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

    own_threads: list[threading.Thread] = []  # the worker's own (Hooks: any other was left by model code)

    def build_indexes() -> None:
        try:
            worker.observer.build_index(busy)
        except Exception:  # noqa: BLE001, S110 - note_text builds again or gives up quietly
            pass
        builder = worker.corpus.start_index_build(busy)
        own_threads.append(builder)
        builder.join()

    own_threads.append(threading.Thread(target=build_indexes, name="indexes", daemon=True))
    own_threads[0].start()

    def on_interrupt(signum: int, frame: Any) -> None:
        """SIGINT from the parent stops the running block (it reports a KeyboardInterrupt);
        between blocks it is ignored, so the control loop never dies of it."""
        if worker.running:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_interrupt)
    sys.addaudithook(refuse_audit_hooks)
    integrity = Integrity(worker, lambda: worker._helpers)  # before any model code: what "unchanged" means
    hooks = Hooks(lambda: list(own_threads))
    changed, hooked = integrity.changed, hooks.changed  # the loop holds its own references
    read, write = protocol.read_message_fd, protocol.write_message_fd
    while True:
        try:
            msg = read(rfd)
        except protocol.ProtocolError:
            return
        if msg.get("type") == "check":
            write(wfd, {"type": "checked", "id": msg.get("id"), "changed": changed(), "hooks": hooked()})
        elif msg.get("type") == "exec":
            result = worker.execute(str(msg.get("code", "")), int(msg.get("cell", 0)), msg.get("map") is not False)
            result["id"] = msg.get("id")
            protocol.write_message_fd(wfd, result_frame(result))
        elif msg.get("type") == "shutdown":
            return


if __name__ == "__main__":
    main()
