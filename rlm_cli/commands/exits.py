"""The one place that turns exceptions and signals into exit codes (see ``errors.ExitCode`` and
the README's table), with the error line on stderr and, under ``--json``, the error document."""

from __future__ import annotations

import os
import re
import shlex
import signal
import sys
from collections.abc import Callable
from functools import cache
from types import FrameType
from typing import Any

import typer

from rlm_cli import interrupts
from rlm_cli.commands import streams
from rlm_cli.commands.invocation import INVOCATION, command_word
from rlm_cli.errors import ExitCode, PartialAnswerError, RLMError, UsageError

#: The ``schema`` of the ``rlm ask --json`` document: ``rlm_cli/schemas/ask-result.v1.json``.
ASK_SCHEMA = "ask-result.v1"  # the same as documents.ASK_SCHEMA (that module is imported lazily)
#: The ``schema`` of the ``rlm audit --json`` document (``audit.run.AUDIT_SCHEMA``).
AUDIT_SCHEMA = "audit-result.v1"


def install() -> None:
    """SIGTERM unwinds like Ctrl-C (so the worker, socket and scratch folders are cleaned up),
    and the interpreter's exit is made fast (:func:`fast_exit`)."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    interrupts.install()  # a Ctrl-C with the final answer in hand is dropped (rlm_cli.interrupts)
    fast_exit()


def run(app: Callable[[], object], closed: set[str] | frozenset[str] = frozenset()) -> None:
    """Run ``app()`` (typer, not standalone) and exit with the code of what it returned or raised:
    never returns (``SystemExit``). ``closed``: the standard streams that were closed when rlm
    started (``streams.reopen_closed``; see ``rlm_cli.commands.streams`` for what each means)."""
    watch = streams.ReaderWatch()
    try:
        if streams.reader_gone(1) or streams.reader_gone(2):
            _quiet_exit(ExitCode.BROKEN_PIPE)  # nobody reads: not one model call
        sys.stderr = streams.TolerantStderr(sys.stderr)  # type: ignore[assignment]
        try:
            os.getcwd()
        except OSError:
            raise UsageError("the current folder no longer exists (deleted or unmounted)",
                             hint="cd to an existing folder and run the command again") from None
        _check_stdout(closed)
        watch.start()
        if INVOCATION.early_host is None:  # not started yet by commands.launch
            INVOCATION.start_host_early(sys.argv[1:])
        rv = app()
        # Non-standalone typer turns Ctrl-C into a returned 130 (and typer.Exit into its code).
        if rv == ExitCode.INTERRUPTED:
            raise KeyboardInterrupt
        if isinstance(rv, int) and not isinstance(rv, bool) and rv:
            sys.exit(rv)
    except PartialAnswerError as exc:
        note = "; the answer on stdout is PARTIAL" if exc.partial else "; no answer was produced"
        _fail(exc, exc.exit_code, exc.message + note + (f" ({exc.hint})" if exc.hint else ""))
    except RLMError as exc:
        _json_error(str(exc), exc.exit_code)
        _fail(exc, exc.exit_code, str(exc))
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        if watch.fired.is_set():
            _quiet_exit(ExitCode.BROKEN_PIPE)

        _json_error("interrupted (Ctrl-C)", ExitCode.INTERRUPTED, status="interrupted")
        _fail(None, ExitCode.INTERRUPTED, "interrupted")
    except typer.TyperException as exc:  # click's usage errors (typer vendors click)
        message = _usage_message(exc) + _usage_hint(exc)
        if "--json" in message:  # a command without --json: no JSON promised
            INVOCATION.json_errors = False
        _json_error(message, ExitCode.USAGE)
        _fail(exc, ExitCode.USAGE, message)
    except KeyboardInterrupt:
        if watch.fired.is_set():  # the reader of stdout or stderr went away: as a closed pipe stops a command
            _quiet_exit(ExitCode.BROKEN_PIPE)

        _json_error("interrupted (Ctrl-C)", ExitCode.INTERRUPTED, status="interrupted")
        _fail(None, ExitCode.INTERRUPTED, "interrupted")
    except SystemExit as exc:  # raised by the SIGTERM handler, which said "terminated" on stderr
        if exc.code == ExitCode.TERMINATED:
            _json_error("terminated (SIGTERM)", ExitCode.TERMINATED, status="interrupted")
        # typer's and rich's own answer to a closed pipe is exit 1, a "bug" in rlm's table
        if exc.code == 1 and (_pipe_closed() or isinstance(exc.__context__, BrokenPipeError)):
            _quiet_exit(ExitCode.BROKEN_PIPE)
        raise
    except BrokenPipeError:
        _quiet_exit(ExitCode.BROKEN_PIPE)
    except Exception as exc:  # noqa: BLE001 - a bug: one line, traceback only with --debug
        _json_error(f"internal error: {type(exc).__name__}: {exc}", ExitCode.INTERNAL)
        _fail(exc, ExitCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc} (rerun with --debug and "
                                      "report it)")
    _finish()


def _finish() -> None:
    """Exit 0. What is left is the interpreter's teardown: a Ctrl-C now would only print a
    traceback from an exit handler, so SIGINT is ignored for it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(ExitCode.OK)


def _check_stdout(closed: set[str] | frozenset[str]) -> None:
    """A closed stdout is a usage error unless ``--output``/``-o`` takes the answer.

    Raises:
        UsageError: stdout was closed (``>&-``) and no ``--output`` is given.
    """
    args = sys.argv[1:]
    args = args[:args.index("--")] if "--" in args else args
    if "stdout" in closed and not any(a in ("-o", "--output") or a.startswith("--output=") for a in args):
        raise UsageError("standard output is closed (>&-): there is nowhere to write the answer",
                         hint="redirect it to a file or /dev/null, or give --output FILE")


def _pipe_closed() -> bool:
    """Whether typer met a closed stdout or stderr pipe (it wraps both streams when it does)."""
    wrapper = type(sys.stdout).__name__, type(sys.stderr).__name__
    return any(name.lstrip("_") == "PacifyFlushWrapper" for name in wrapper)


def _quiet_exit(code: int) -> None:
    """Exit with ``code`` (141: the reader of stdout or stderr went away, as in ``rlm ask ... |
    head``; 128 + SIGPIPE, what a shell reports for a command a closed pipe stopped) without a
    word: nobody reads the streams, and flushing them at exit must not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):
            pass
    sys.exit(code)


def _json_error(message: str, code: int, *, status: str = "error") -> None:
    """Under ``--json``: the error as a JSON document, on stdout or in ``ask --output``'s file.
    ``ask`` and ``replay`` documents name their schema (``ask-result.v1``) like a success does."""
    if not INVOCATION.json_errors:
        return
    from rlm_cli.output.answer import json_text, write_text

    doc: dict[str, Any] = {"status": status, "error": message, "exit_code": int(code), "answer": None}
    if command_word() in ("ask", "replay", "chat"):
        doc = {"schema": ASK_SCHEMA, **doc}
    elif command_word() == "audit":
        doc = {"schema": AUDIT_SCHEMA, **doc}
    text = json_text(doc, line=INVOCATION.json_lines)
    if INVOCATION.output_path is not None:
        from rlm_cli.output.outfile import write_atomic

        try:
            write_atomic(INVOCATION.output_path, text)
            return
        except RLMError:
            pass  # the file cannot take it: stdout then
    try:
        write_text(text)
    except OSError:  # nobody reads stdout any more (a closed pipe)
        pass


@cache
def fast_exit() -> None:
    """At interpreter exit, move every object out of the garbage collector's reach
    (``gc.freeze()``) once the atexit handlers have run: the collections Python runs while it
    tears down its modules walk litellm's millions of objects, which took 1.4 s of every exit
    (Ctrl-C included) on a loaded 2-core machine; frozen, teardown takes about 0.05 s. Memory is
    returned to the system either way. Registered once per process (cached)."""
    import atexit
    import gc

    atexit.register(gc.freeze)  # the first registered runs last, after everyone's cleanup


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sys.stderr.write("\nrlm: terminated\n")
    raise SystemExit(int(ExitCode.TERMINATED))


def _usage_message(exc: typer.TyperException) -> str:
    """Click's message for usage error ``exc``; for an unknown option, the suggestions are only
    options it begins (``--max-iter``: ``--max-iterations``), else those whose names, without
    their dashes, are close to it (``difflib`` ratio 0.6, click's own cutoff, which with the dashes
    counted offered ``--jobs`` for ``--bogus``)."""
    name = getattr(exc, "option_name", None)
    if type(exc).__name__ == "BadParameter":
        return _bad_value_message(exc)
    if type(exc).__name__ != "NoSuchOption" or not name:
        return str(exc.format_message())
    import difflib

    bare = name.lstrip("-")
    known = [str(p) for p in getattr(exc, "possibilities", None) or []]
    close = [p for p in known if len(bare) >= 3 and p.lstrip("-").startswith(bare)] or [
        p for p in known if difflib.SequenceMatcher(None, bare, p.lstrip("-")).ratio() >= 0.6]
    if not close:
        return f"No such option: {name}"
    if len(close) == 1:
        return f"No such option: {name} (did you mean {close[0]}?)"
    return f"No such option: {name} (possible options: {', '.join(sorted(close))})"


#: pydantic's words for a value out of an option's range or of the wrong type (typer checks values
#: with pydantic), and rlm's: ``(pattern, words)`` where the words take the pattern's groups.
_VALUE_WORDS = (
    (re.compile(r"Input should be greater than or equal to (\S+)"), "must be at least {0}"),
    (re.compile(r"Input should be greater than (\S+)"), "must be more than {0}"),
    (re.compile(r"Input should be less than or equal to (\S+)"), "must be at most {0}"),
    (re.compile(r"Input should be less than (\S+)"), "must be less than {0}"),
    (re.compile(r"Input should be a valid integer"), "must be a whole number"),
    (re.compile(r"Input should be a valid number"), "must be a number"),
)


def _bad_value_message(exc: typer.TyperException) -> str:
    """Click's ``BadParameter`` ``exc`` in rlm's words: ``--max-iterations must be at least 1, not
    0`` for pydantic's "Invalid value for '--max-iterations': Input should be greater than or
    equal to 1"; click's own message when it is not one of :data:`_VALUE_WORDS`."""
    text = str(exc.format_message())
    param = getattr(exc, "param", None)
    opts = getattr(param, "opts", None) or []
    name = max(opts, key=len) if opts else getattr(exc, "param_hint", None)
    cause = exc.__cause__
    listed = getattr(cause, "errors", None)
    errors = listed() if callable(listed) else []
    given = errors[0].get("input") if errors and isinstance(errors[0], dict) else None
    for pattern, words in _VALUE_WORDS:
        found = pattern.search(text)
        if found and isinstance(name, str):
            return f"{name} {words.format(*found.groups())}" + (f", not {_shown(given)}" if given is not None else "")
    return text


def _shown(value: object) -> str:
    """``value`` as an error line shows it: a number as is, anything else quoted."""
    try:
        float(str(value))
    except ValueError:
        return repr(str(value))
    return str(value)


def _usage_hint(exc: typer.TyperException) -> str:
    """What to do after click's usage error ``exc``: see the command's help, or, when the "option"
    click did not know is the start of an argument with a space in it (a question such as
    ``"-how many files?"``), put ``--`` before it, as for any Unix command."""
    ctx = getattr(exc, "ctx", None)
    name = getattr(exc, "option_name", None)
    if type(exc).__name__ == "NoSuchOption" and name:
        arg = next((a for a in sys.argv[1:] if a.startswith(name) and any(c.isspace() for c in a)), None)
        if arg is not None:
            command = ctx.command_path if ctx is not None else "rlm ask"
            return f" (a question that starts with '-' goes after `--`: {command} PATH -- {shlex.quote(arg)})"
    return f" (see `{ctx.command_path} --help`)" if ctx is not None else " (see `rlm --help`)"


def _fail(exc: BaseException | None, code: int, message: str) -> None:
    if INVOCATION.debug and exc is not None:
        import traceback

        traceback.print_exception(exc)
    if code == ExitCode.INTERRUPTED:
        sys.stderr.write("\nrlm: interrupted\n")
    else:
        from rlm_cli.output.render import Renderer

        Renderer().error(message)
    sys.stderr.flush()
    sys.exit(int(code))
