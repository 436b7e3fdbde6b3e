"""Workflow commands that did not come from rlm never reach a CI runner (issue 47).

The GitHub Actions runner reads every line a step writes to stdout or stderr: a line that
starts with ``::`` (after leading white space: ``ActionCommand.TryParseV2`` trims it) is a
workflow command (``::error::``, ``::add-mask::``, ``::stop-commands::``), and ``##[``
*anywhere* in a line is one of the old form (``ActionCommand.TryParse``: ``##[add-mask]x``). Its
lines end at ``\\n``, ``\\r`` or ``\\r\\n`` (.NET's ``ReadLine``). An answer, a file name or a REPL
output that holds such text would let a pull request mask values, forge annotations or stop the
runner reading rlm's own (``::stop-commands::TOKEN``).

Under ``GITHUB_ACTIONS=true`` :func:`install` puts a :class:`GuardedStream` around
``sys.stdout`` and ``sys.stderr``: the one place every line rlm writes passes through (rich's
consoles, ``print``, the answer writer ``output.answer.write_text``, which asks
:func:`for_stream`). It inserts a ZERO WIDTH SPACE (U+200B; the runner's ``TrimStart`` does not
remove it: it is not white space to .NET) inside each match: ``##\\u200b[`` and ``:\\u200b:`` at a
line start. The text reads the same in the log; the runner sees no command. A stream that is a
regular file (``rlm ask ... > answer.txt``) is left byte for byte: the runner never reads it.

``--github``'s own annotations are written with :func:`own_commands` held: their ``::`` stays,
and only ``##[`` is broken (its data is escaped as ``@actions/core`` escapes it, so it is one line
whose command the runner takes first). Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import sys
import threading
from collections.abc import Iterator
from typing import IO, Any

#: Inserted inside a command's marker: invisible in the log, not white space to the runner.
BREAK = "\u200b"
#: ``::`` at a line start (after white space); lines end at \n or \r for the runner. (The text is
#: always matched behind a line end or a character of the line: see ``Neutraliser.feed``.)
_NEW = re.compile(r"([\r\n][^\S\r\n]*):(?=:)")


def active(environ: Any = None) -> bool:
    """Whether rlm runs under GitHub Actions (``GITHUB_ACTIONS`` is ``true``, as the runner sets
    it), where its stdout and stderr are read for workflow commands."""
    env = os.environ if environ is None else environ
    return str(env.get("GITHUB_ACTIONS", "")).strip().lower() == "true"


class Neutraliser:
    """Breaks workflow commands in text written piece by piece to one stream (a reply streamed a
    token at a time may split ``##[`` or a line-start ``::`` across writes). Keeps the last two
    characters written and whether the current line is white space so far (``"ws"``), that and
    one ``:`` (``"ws:"``), or anything else (``""``). Thread-safe."""

    def __init__(self) -> None:
        self._tail = ""
        self._line = "ws"
        self._lock = threading.Lock()

    def feed(self, text: str, *, own: bool = False) -> str:
        """``text`` with its commands broken (``own``: only ``##[``, for ``--github``'s lines).
        Only :data:`BREAK` is ever inserted, so what was written stays as it was."""
        if not text:
            return text
        with self._lock:
            # what the runner saw of this line: a line start, one ':' after it, or the last two
            # characters behind something that is not white space (no line-start match there)
            context = {"ws": "\n", "ws:": "\n:"}.get(self._line, "x" + self._tail)
            out = context + text
            if "##[" in out:  # the old form, read anywhere in a line
                out = out.replace("##[", "##" + BREAK + "[")
            if not own and "::" in out:
                out = _NEW.sub(r"\1:" + BREAK, out)
            out = out[len(context):]
            self._remember(out)
            return out

    def _remember(self, out: str) -> None:
        self._tail = (self._tail + out)[-2:]
        cut = max(out.rfind("\n"), out.rfind("\r"))
        state, rest = (self._line, out) if cut < 0 else ("ws", out[cut + 1:])
        if state == "ws":
            stripped = rest.lstrip()
            self._line = "ws" if not stripped else "ws:" if stripped == ":" else ""
        elif state == "ws:" and rest:
            self._line = ""


def json_for_runner(text: str) -> str:
    """A JSON text as rlm writes it: under GitHub Actions each ``##[`` (only ever inside a string:
    JSON has no ``#`` elsewhere) written ``#\\u0023[``, the same value with no runner command in
    it, so the guard has nothing to break; elsewhere as it is."""
    return text.replace("##[", "#\\u0023[") if "##[" in text and active() else text


def neutralise(text: str) -> str:
    """``text`` (starting at a line start) with every workflow command broken (see the module
    docstring): ``##[`` anywhere, ``::`` at a line start."""
    return Neutraliser().feed(text)


def reaches_runner(stream: Any) -> bool:
    """Whether what ``stream`` gets can reach the runner: anything but a regular file (a pipe, a
    terminal, a socket; a stream without a descriptor, to be safe)."""
    try:
        return not stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (AttributeError, OSError, ValueError):
        return True


_OWN = threading.local()


@contextlib.contextmanager
def own_commands() -> Iterator[None]:
    """While held (in this thread), guarded streams pass line-start ``::``: for ``--github``'s
    own workflow commands only."""
    _OWN.on = True
    try:
        yield
    finally:
        _OWN.on = False


class GuardedStream:
    """A text stream (``sys.stdout``, ``sys.stderr``) whose writes pass through a
    :class:`Neutraliser`; everything else is the wrapped stream's. :meth:`break_commands` serves
    writers that go to the binary buffer (``output.answer.write_text``) with the same state."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._guard = Neutraliser()

    def break_commands(self, text: str) -> str:
        """``text`` as it may be written to this stream now (``own_commands`` respected)."""
        return self._guard.feed(text, own=bool(getattr(_OWN, "on", False)))

    def write(self, text: str) -> int:
        """Write ``text`` with its commands broken; returns ``len(text)`` as given."""
        self._stream.write(self.break_commands(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        """Write each of ``lines``."""
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def for_stream(text: str, stream: Any) -> str:
    """``text`` as it may go to ``stream`` by a path around its ``write`` (the binary buffer):
    neutralised when ``stream`` is guarded, else as is."""
    guard = getattr(stream, "break_commands", None)
    return guard(text) if callable(guard) else text


def install() -> None:
    """Under GitHub Actions (:func:`active`), guard ``sys.stdout`` and ``sys.stderr`` where they
    can reach the runner (:func:`reaches_runner`). Call once, before any console is made."""
    if not active():
        return
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, GuardedStream) and reaches_runner(stream):
            setattr(sys, name, GuardedStream(stream))


#: ASCII punctuation: each may be backslash-escaped in CommonMark, and then is only itself.
_PUNCT = re.compile(r"([!-/:-@\[-`{-~])")
#: Control characters left after white space is folded (ESC, NUL, DEL, C1).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def summary_text(text: str, limit: int = 200) -> str:
    """``text`` (from an answer, a file name, a reason) as plain text in one cell of a job
    summary's Markdown table: white space folded to single spaces (no newline ends the row),
    cut at ``limit`` characters, control characters as U+FFFD, and every ASCII punctuation
    character backslash-escaped (CommonMark 2.4), so nothing in it is HTML (``<img>``), a link
    (``[x](javascript:...)``), an autolink (``https://``, ``www.``: their ``:`` and ``.`` are
    escaped), emphasis, code or a cell border (``|``). It renders as the text it was."""
    folded = " ".join(str(text).split())
    if len(folded) > limit:
        folded = folded[:limit - 1] + "…"
    return _PUNCT.sub(r"\\\1", _CONTROL.sub("\ufffd", folded))
