"""The REPL worker: a separate process holding the persistent namespace the root model codes in.

It speaks the control protocol (``rlm_cli.protocol``) on two inherited pipe descriptors given
on the command line, and reaches the parent's LMHandler over a Unix socket for ``llm_query``,
``llm_query_batched`` and ``rlm_query``. It uses only the standard library and ``protocol``,
so it runs the same under bubblewrap, sandbox-exec or as a plain process.

Namespace given to model code: ``context`` (str), ``files``, ``chunks`` (lists of dicts),
``grep``, ``read_file``, ``chunk_text``, ``search``, ``llm_query``, ``llm_query_batched``,
``rlm_query``, ``FINAL``, ``FINAL_VAR``, ``SHOW_VARS``. Helper names are restored before every
code block, so rebinding them cannot break the loop.
"""

from __future__ import annotations

import ast
import bisect
import fnmatch
import io
import json
import math
import os
import re
import socket
import sys
import threading
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlm_cli import protocol

#: Characters of a block's stdout kept in memory: head and tail (the middle is counted only).
KEEP_HEAD = 200_000
KEEP_TAIL = 20_000
RESERVED = ("context", "files", "chunks", "grep", "read_file", "chunk_text", "search",
            "llm_query", "llm_query_batched", "rlm_query", "FINAL", "FINAL_VAR", "SHOW_VARS")


class CappedWriter(io.TextIOBase):
    """A text stream keeping the first ``KEEP_HEAD`` and last ``KEEP_TAIL`` characters written,
    and counting all of them, so ``print(context)`` of any size costs bounded memory."""

    def __init__(self) -> None:
        self.head: list[str] = []
        self.head_len = 0
        self.tail = ""
        self.total = 0

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        n = len(s)
        self.total += n
        room = KEEP_HEAD - self.head_len
        if room > 0:
            self.head.append(s[:room])
            self.head_len += min(room, n)
            s = s[room:]
        if s:
            self.tail = (self.tail + s)[-KEEP_TAIL:]
        return n

    def getvalue(self) -> tuple[str, int]:
        """``(kept text, total characters written)``; an omission marker separates head and tail."""
        head = "".join(self.head)
        if self.total <= KEEP_HEAD + len(self.tail) and self.total == self.head_len + len(self.tail):
            return head + self.tail, self.total
        omitted = self.total - self.head_len - len(self.tail)
        return f"{head}\n[... {omitted:,} characters omitted ...]\n{self.tail}", self.total


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
        self.token: str = config["token"]
        self.context: str = ""
        self.files: list[dict[str, Any]] = []
        self.chunks: list[dict[str, Any]] = []
        self._file_by_path: dict[str, dict[str, Any]] = {}
        self._bm25: _BM25 | None = None
        self.final = _FinalSignal()
        self.namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
        if config.get("index_file"):
            self._load_corpus(config["index_file"], config["context_file"])
        elif config.get("context_text") is not None:
            self.context = config["context_text"]
        self._helpers = self._make_helpers()

    # -- corpus --------------------------------------------------------------------------------
    def _load_corpus(self, index_file: str, context_file: str) -> None:
        with open(index_file, "rb") as fh:
            index = json.loads(fh.read())
        with open(context_file, "rb") as fh:
            self.context = fh.read().decode("utf-8", "surrogatepass")
        self.files = index["files"]
        self.chunks = index["chunks"]
        self._file_by_path = {f["path"]: f for f in self.files}

    def _file_text(self, f: dict[str, Any]) -> str:
        return self.context[f["start"]:f["end"]]

    def grep(self, pattern: str, *, path_glob: str | None = None, ignore_case: bool = False,
             max_results: int = 200) -> list[dict[str, Any]]:
        """Regex search over every file; returns ``[{"file", "line", "text"}]`` (line 1-based)."""
        rx = re.compile(pattern, re.MULTILINE | (re.IGNORECASE if ignore_case else 0))
        out: list[dict[str, Any]] = []
        targets = self.files or [{"path": "<context>", "start": 0, "end": len(self.context)}]
        for f in targets:
            if path_glob and not fnmatch.fnmatch(f["path"], path_glob):
                continue
            text = self._file_text(f)
            line_starts: list[int] | None = None
            for m in rx.finditer(text):
                if line_starts is None:
                    line_starts = _line_starts(text)
                ln = bisect.bisect_right(line_starts, m.start())
                ls = line_starts[ln - 1]
                le = text.find("\n", m.start())
                out.append({"file": f["path"], "line": ln, "text": text[ls:le if le >= 0 else len(text)][:500]})
                if len(out) >= max_results:
                    return out
        return out

    def read_file(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        """Lines ``start_line..end_line`` (1-based, inclusive) of ``path``, each prefixed with its number."""
        f = self._file_by_path.get(path)
        if f is None:
            matches = [p for p in self._file_by_path if p.endswith("/" + path) or p.endswith(path)]
            if len(matches) != 1:
                hint = f"; did you mean one of {matches[:5]}" if matches else ""
                raise KeyError(f"no file {path!r} in the corpus{hint}")
            f = self._file_by_path[matches[0]]
        lines = self._file_text(f).splitlines()
        a = max(1, start_line or 1)
        b = min(len(lines), end_line or len(lines))
        width = len(str(b))
        return "\n".join(f"{i:>{width}}: {lines[i - 1]}" for i in range(a, b + 1))

    def chunk_text(self, i: int) -> str:
        """The text of chunk ``i`` (see ``chunks[i]`` for its file and lines)."""
        c = self.chunks[i]
        return self.context[c["start"]:c["end"]]

    def search(self, query: str, k: int = 10) -> list[dict[str, Any]]:
        """Top ``k`` chunks by BM25 relevance to ``query``: ``[{"chunk", "file", "start_line",
        "end_line", "score"}]``, best first."""
        if self._bm25 is None:
            self._bm25 = _BM25([self.chunk_text(c["id"]) for c in self.chunks])
        out = []
        for i, score in self._bm25.top(query, k):
            c = self.chunks[i]
            out.append({"chunk": i, "file": c["path"], "start_line": c["start_line"],
                        "end_line": c["end_line"], "score": round(score, 3)})
        return out

    # -- model calls ---------------------------------------------------------------------------
    def _request(self, message: dict[str, Any]) -> str:
        message = dict(message, token=self.token)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.connect(self.socket_path)
                protocol.send_message(sock, message)
                reply = protocol.recv_message(sock)
        except (OSError, protocol.ProtocolError) as exc:
            return f"Error: the model relay could not be reached ({exc})"
        if reply.get("ok"):
            return str(reply.get("text", ""))
        return f"Error: {reply.get('error', 'unknown error')}"

    def llm_query(self, prompt: Any, model: str | None = None) -> str:
        """One sub-call: send ``prompt`` to the sub-model and return its text (or ``'Error: ...'``)."""
        return self._request({"type": "completion", "prompt": _prompt_payload(prompt), "model": model})

    def llm_query_batched(self, prompts: list[Any], model: str | None = None) -> list[str]:
        """Many sub-calls at once (the parent caps concurrency); answers in input order.

        A failed prompt yields an ``'Error: ...'`` string at its position.
        """
        prompts = list(prompts)
        if not prompts:
            return []
        with ThreadPoolExecutor(max_workers=min(32, len(prompts))) as pool:
            return list(pool.map(lambda p: self.llm_query(p, model), prompts))

    def rlm_query(self, prompt: str, context: Any = None) -> str:
        """A recursive sub-RLM over ``context`` (default: this REPL's ``context``) at depth + 1.

        At the depth limit the parent answers with a plain sub-call instead.
        """
        payload = None if context is None else to_text(context)
        return self._request({"type": "rlm_query", "prompt": str(prompt), "context": payload})

    # -- finishing -----------------------------------------------------------------------------
    def FINAL(self, value: Any) -> None:
        """End the run with ``value`` as the answer (the first FINAL of a run wins)."""
        if self.final.value is None:
            self.final.value = to_text(value)

    def FINAL_VAR(self, name: Any) -> None:
        """End the run with the variable called ``name`` (a string, or the variable itself)."""
        if isinstance(name, str) and name.isidentifier():
            if name in self.namespace:
                return self.FINAL(self.namespace[name])
            if len(name) < 80:
                self.final.error = (f"FINAL_VAR({name!r}): no variable named {name!r} exists; "
                                    "assign it first, then call FINAL_VAR again")
                return None
        return self.FINAL(name)

    def SHOW_VARS(self) -> str:
        """A listing of the variables you defined: name, type, and size."""
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
        return text

    def _make_helpers(self) -> dict[str, Any]:
        return {"context": self.context, "files": self.files, "chunks": self.chunks, "grep": self.grep,
                "read_file": self.read_file, "chunk_text": self.chunk_text, "search": self.search,
                "llm_query": self.llm_query, "llm_query_batched": self.llm_query_batched,
                "rlm_query": self.rlm_query, "FINAL": self.FINAL, "FINAL_VAR": self.FINAL_VAR,
                "SHOW_VARS": self.SHOW_VARS}

    # -- running code ----------------------------------------------------------------------------
    def execute(self, code: str, cell: int) -> dict[str, Any]:
        """Run one code block; returns the ``result`` control message."""
        self.namespace.update(self._helpers)
        self.final = _FinalSignal()
        out = CappedWriter()
        old = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = out
        started = time.monotonic()
        ok = True
        try:
            tree = ast.parse(code, filename=f"<cell {cell}>", mode="exec")
            last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            if last is not None:
                tree.body.pop()
            exec(compile(tree, f"<cell {cell}>", "exec"), self.namespace)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), f"<cell {cell}>", "eval"), self.namespace)
                if value is not None and self.final.value is None:
                    print(repr(value) if not isinstance(value, str) else value)
        except SystemExit:
            ok = False
            print("SystemExit: exit() is disabled in the REPL; call FINAL(answer) to finish")
        except BaseException:  # noqa: BLE001 - model code may raise anything; it reads the traceback
            ok = False
            etype, evalue, tb = sys.exc_info()
            frames = [f for f in traceback.extract_tb(tb) if f.filename.startswith("<cell")]
            text = "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames))
            text += "".join(traceback.format_exception_only(etype, evalue))
            print(text, end="")
        finally:
            sys.stdout, sys.stderr = old
        text, total = out.getvalue()
        return {"type": "result", "ok": ok, "output": text, "output_chars": total,
                "final": self.final.value, "final_error": self.final.error,
                "elapsed_s": round(time.monotonic() - started, 4)}


def _line_starts(text: str) -> list[int]:
    starts = [0]
    find = text.find
    i = find("\n")
    while i >= 0:
        starts.append(i + 1)
        i = find("\n", i + 1)
    return starts


def _prompt_payload(prompt: Any) -> Any:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(m, dict) for m in prompt):
        return prompt  # a chat message list
    return to_text(prompt)


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+")


def _terms(text: str) -> list[str]:
    out: list[str] = []
    for w in _WORD.findall(text):
        lw = w.lower()
        out.append(lw)
        if "_" in w:
            out.extend(p for p in lw.split("_") if p)
    return out


class _BM25:
    """Okapi BM25 (Robertson et al., k1=1.5, b=0.75) over chunk texts; built on first use."""

    def __init__(self, docs: list[str], k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.tfs: list[Counter[str]] = [Counter(_terms(d)) for d in docs]
        self.lens = [sum(tf.values()) for tf in self.tfs]
        self.avg = (sum(self.lens) / len(self.lens)) if self.lens else 0.0
        df: Counter[str] = Counter()
        for tf in self.tfs:
            df.update(tf.keys())
        n = len(docs)
        self.idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}
        self.postings: dict[str, list[int]] = {}
        for i, tf in enumerate(self.tfs):
            for t in tf:
                self.postings.setdefault(t, []).append(i)

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        scores: dict[int, float] = {}
        for t in set(_terms(query)):
            idf = self.idf.get(t)
            if idf is None:
                continue
            for i in self.postings[t]:
                f = self.tfs[i][t]
                norm = f * (self.k1 + 1) / (f + self.k1 * (1 - self.b + self.b * self.lens[i] / (self.avg or 1)))
                scores[i] = scores.get(i, 0.0) + idf * norm
        return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]


# -- process entry -------------------------------------------------------------------------------

def apply_limits(limits: dict[str, int]) -> list[str]:
    """Apply ``resource`` limits named like ``RLIMIT_AS`` (values in bytes/seconds/counts).

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


def drop_privileges(uid: int, gid: int) -> None:
    """If running as root, become ``uid``/``gid`` (so per-user process limits apply)."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``worker.py READ_FD WRITE_FD``; serves control messages until shutdown/EOF."""
    argv = sys.argv[1:] if argv is None else argv
    rfd, wfd = int(argv[0]), int(argv[1])
    os.set_inheritable(rfd, False)
    os.set_inheritable(wfd, False)
    sys.stdin = open(os.devnull)  # model code reading stdin must not eat control frames
    config = protocol.read_message_fd(rfd)
    if config.get("drop_to") is not None:
        try:
            drop_privileges(*config["drop_to"])
        except OSError as exc:
            protocol.write_message_fd(wfd, {"type": "error", "error": f"cannot drop privileges: {exc}"})
            return
    notes = apply_limits(config.get("limits", {}))
    try:
        worker = Worker(config)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which decides
        protocol.write_message_fd(wfd, {"type": "error", "error": f"{type(exc).__name__}: {exc}"})
        return
    protocol.write_message_fd(wfd, {"type": "ready", "notes": notes, "pid": os.getpid(),
                                    "context_chars": len(worker.context)})
    del config
    lock = threading.Lock()
    while True:
        try:
            msg = protocol.read_message_fd(rfd)
        except protocol.ProtocolError:
            return
        if msg.get("type") == "exec":
            result = worker.execute(str(msg.get("code", "")), int(msg.get("cell", 0)))
            with lock:
                protocol.write_message_fd(wfd, result)
        elif msg.get("type") == "shutdown":
            return


if __name__ == "__main__":
    main()
