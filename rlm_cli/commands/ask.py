"""``rlm ask``: one question, or a list of them (``-q``, ``--questions``) over one loaded corpus."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rlm_cli.commands.delivery import answer_report, batch_writer, deliver_answer, emit_partial
from rlm_cli.commands.invocation import INVOCATION
from rlm_cli.commands.options import (
    OUTPUT,
    QUESTIONS,
    AnswerTypeOpt,
    ColorOpt,
    DebugOpt,
    JsonOpt,
    QuietOpt,
    RunFlags,
    VerboseOpt,
    answer_type,
    opt,
    run_options,
    use_color,
)
from rlm_cli.errors import PartialAnswerError, UsageError, worst_exit_code
from rlm_cli.events import Emit, EventDict, is_type

if TYPE_CHECKING:
    from rlm_cli.app.batch import Question, Result
    from rlm_cli.app.question import QuestionId
    from rlm_cli.config import Settings
    from rlm_cli.models.host import HostBackend
    from rlm_cli.output.formats import Report
    from rlm_cli.output.ui import UI


@run_options()
def ask(
    args: Annotated[list[str], typer.Argument(metavar="PATH... QUESTION",
                                              help="Files, folders, globs or '-' (stdin), then the question.")],
    question: Annotated[list[str] | None, opt("--question", section=QUESTIONS, metavar="Q",
                                              help="A question (repeatable); then all are PATHs.")] = None,
    questions: Annotated[str | None, opt("--questions", section=QUESTIONS, metavar="FILE",
                                         help="Questions from FILE: lines or JSON Lines.")] = None,
    jobs: Annotated[int, opt("--jobs", "-j", section=QUESTIONS, min=1, metavar="N",
                             help="Questions at once (default 1).")] = 1,
    max_questions: Annotated[int, opt("--max-questions", section=QUESTIONS, min=1, metavar="N",
                                      help="The most questions a run asks (1000).")] = 1000,
    question_file: Annotated[str | None, opt("--question-file", section=QUESTIONS, metavar="FILE",
                                             help="Read the question from FILE.")] = None,
    *,
    run: RunFlags,
    answer_kind: AnswerTypeOpt = "text",
    json_out: JsonOpt = False,
    cite: Annotated[bool, opt("--cite", section=OUTPUT, help="Then list the lines the answer cites.")] = False,
    output: Annotated[Path | None, opt("--output", "-o", section=OUTPUT, metavar="FILE",
                                       help="Write the answer to FILE, atomically.")] = None,
    estimate: Annotated[bool, opt("--estimate", section=QUESTIONS,
                                  help="Print what it would cost; call no model.")] = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    color: ColorOpt = "auto",
    debug: DebugOpt = False,
) -> None:
    """Answer a question about the corpus at PATH...

    The last argument is the question, unless --question, --questions or --question-file give it.
    Every option in full: docs/usage.md."""
    from rlm_cli.output import render

    started = time.monotonic()  # elapsed_s is what the user waits: litellm's import included
    host = INVOCATION.take_host()  # first: litellm is imported there while the corpus loads
    try:
        use_color(color)
        out = answer_report(json_out, output)  # where the answer goes, carried to each delivery
        multi = bool(question) or questions is not None
        if multi and question_file is not None:
            raise UsageError("--question-file gives one question; --question/--questions give a list: use one of them",
                             hint="a long question can be one line of a --questions JSON Lines file")
        paths, the_question = (args, "") if multi else _paths_and_question(args, question_file)
        kind = answer_type(answer_kind)
        settings = run.settings()
        ui = render.Renderer(quiet=quiet, verbose=verbose)
        if multi:
            from rlm_cli.app.batch import read_questions

            if not paths:
                raise UsageError("give at least one PATH", hint='e.g. rlm ask ./repo --question "Where is X?"')
            listed = read_questions(question or [], questions, stdin_is_corpus="-" in paths, answer_type=kind,
                                    max_questions=max_questions)
            if estimate:
                _estimate(settings, paths, [(q.id, q.text, q.answer_type, None) for q in listed], host, ui, out)
                return
            code = _ask_many(settings, paths, listed, jobs=jobs, host=host, ui=ui, out=out, cite=cite,
                             started=started, verbose=verbose)
            if code:
                raise typer.Exit(code)
            return
        if estimate:
            _estimate(settings, paths, [(1, the_question, kind, None)], host, ui, out)
            return
        _ask_one(settings, paths, the_question, host=host, ui=ui, out=out, cite=cite, started=started,
                 verbose=verbose, kind=kind)
    finally:
        host.close()




def _estimate(settings: Settings, paths: list[str], questions: list[tuple[QuestionId, str, str, str | None]], host: HostBackend,
              ui: UI, out: Report) -> None:
    """``--estimate``: what the questions would cost, calling no model (``rlm_cli.app.estimate``)."""
    from rlm_cli.app.estimate import estimate
    from rlm_cli.commands.delivery import deliver_estimate

    doc = estimate(settings, paths, questions, backend=host, emit=ui.on_event, stdin_bytes=_stdin_corpus(paths))
    deliver_estimate(doc, out, ui)


def say_setup(ui: UI, settings: Settings, host: HostBackend) -> None:
    """The ``-v`` lines of ``ask`` and ``chat``: the sandbox level and how the model host was got."""
    from rlm_cli.app.doctor import sandbox_line

    ui.info(sandbox_line(settings.sandbox))
    ui.info(f"model host: {getattr(host, 'sharing', 'in this process')}")


def _stdin_corpus(paths: list[str]) -> bytes | None:
    """The corpus piped in when a PATH is ``-``.

    Raises:
        UsageError: ``-`` is given but nothing is piped in.
    """
    if "-" not in paths:
        return None
    if sys.stdin.isatty():
        raise UsageError("'-' reads the corpus from standard input, but nothing is piped in",
                         hint='e.g. cat big.txt | rlm ask - "question"')
    return sys.stdin.buffer.read()


def _ask_one(settings: Settings, paths: list[str], question: str, *, host: HostBackend, ui: UI, out: Report, cite: bool,
             started: float, verbose: bool, kind: str = "text") -> None:
    """One question, answered as ``rlm ask`` always has (one document or the answer)."""
    from rlm_cli.app import runner
    from rlm_cli.app.batch import outcome_code
    from rlm_cli.output.documents import outcome_document

    stdin_bytes = _stdin_corpus(paths)
    if verbose:
        say_setup(ui, settings, host)
    try:
        outcome = runner.ask(settings, paths, question, emit=ui.on_event, stdin_bytes=stdin_bytes, backend=host,
                             hold_final=True, answer_type=kind)  # a Ctrl-C after the final answer: it is still printed
    except PartialAnswerError as exc:
        emit_partial(exc, ui, out, settings, round(time.monotonic() - started, 3), cite=cite)
        raise
    finally:
        ui.close()
    doc = outcome_document(outcome, round(time.monotonic() - started, 3))
    ui.summary(doc)
    deliver_answer(doc, out, cite, ui)
    code = outcome_code(outcome, settings.require_support)
    if code:
        raise typer.Exit(code)  # the answer (or, not of its type, nothing) and the verdict's line are out


def _ask_many(settings: Settings, paths: list[str], listed: list[Question], *, host: HostBackend, ui: UI, out: Report,
              cite: bool, jobs: int, started: float, verbose: bool) -> int:
    """Several questions over one loaded corpus (``rlm_cli.app.batch``); returns the worst exit code."""
    from rlm_cli.app import batch
    from rlm_cli.app.session import Session
    from rlm_cli.output.text import plural

    stdin_bytes = _stdin_corpus(paths)
    if verbose:
        say_setup(ui, settings, host)
    write, finish = batch_writer(out, cite, ui, len(listed))
    with Session(settings, paths, emit=ui.on_event, stdin_bytes=stdin_bytes, backend=host, numbered=True) as session:
        session.open()
        results = batch.run_all(session, listed, jobs=jobs, emit_for=lambda q: _question_events(q, ui, jobs),
                                on_result=lambda r: write(batch.result_document(r, session.level), r))
        ui.close()
    finish()
    code = worst_exit_code([r.exit_code for r in results])
    partial = sum(1 for r in results if isinstance(r.error, PartialAnswerError))
    failed = sum(1 for r in results if r.error is not None) - partial
    ui.summary({"iterations": sum(_iterations(r) for r in results), "usage": session.usage.summary(),
                "sub_calls": session.usage.sub_calls, "elapsed_s": round(time.monotonic() - started, 3)})
    ui.info(f"{plural(len(results), 'question')}: {len(results) - partial - failed} answered, {partial} partial, "
            f"{failed} failed" + (f"; exit code {code} (the worst)" if code else ""))
    return code


def _iterations(result: Result) -> int:
    r = (result.outcome.result if result.outcome is not None
         else result.error.report.result if result.error is not None else None)
    return int(getattr(r, "iterations", 0) or 0)


def _question_events(question: Question, ui: UI, jobs: int) -> Emit:
    """The event callback of one question of a list: everything on stderr when they run one at a
    time (after a header line), only warnings when several run at once."""
    if jobs <= 1:
        ui.info(f"━━ question [{question.id}] ━━")
        return ui.on_event

    def warnings_only(ev: EventDict) -> None:
        warning = is_type(ev, "notice") and ev.get("level") == "warning"
        if warning:
            ui.on_event(ev)
    return warnings_only




def as_text(arg: str) -> str:
    """A command-line argument as text: bytes that are not UTF-8 (which Python keeps as lone
    surrogates) become U+FFFD, so the question can be written to the trajectory and sent."""
    return arg.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _looks_like_question(arg: str) -> bool:
    """Whether ``arg`` reads as a question rather than a path: words with spaces, or a final ``?``."""
    return any(c.isspace() for c in arg.strip()) or arg.rstrip().endswith("?")


def _check_order(paths: list[str], question: str) -> None:
    """A question given before the paths, or forgotten (the last argument is a path of the corpus),
    is a usage error with the order to use, before anything loads.

    Raises:
        UsageError: a PATH that is no file and reads as a question, or a question that names an
            existing file or folder and does not read as one.
    """
    import os
    import shlex

    for p in paths:
        if p != "-" and _looks_like_question(p) and not os.path.exists(p):
            rest = [x for x in paths if x is not p] + [question]
            raise UsageError(f"{p!r} is no file or folder: the question goes last",
                             hint=f"rlm ask {' '.join(shlex.quote(x) for x in rest)} {shlex.quote(p)}")
    if os.path.exists(question) and not _looks_like_question(question):
        raise UsageError(f"the last argument, {question}, is a file or folder, not a question: give the question "
                         "after the paths", hint=f"rlm ask {' '.join(shlex.quote(x) for x in [*paths, question])} "
                                                 "\"Where is X?\" (or --question to ask that very text)")


def _paths_and_question(args: list[str], question_file: str | None) -> tuple[list[str], str]:
    """``(paths, question)`` from ``rlm ask``'s arguments: the last one is the question, or, with
    ``--question-file FILE``, all are paths and the question is FILE's text (UTF-8; ``-``: stdin).

    Raises:
        UsageError: no path or question, an empty question, an unreadable or non-UTF-8 file, or
            both the corpus and the question on stdin.
    """
    if question_file is None:
        if len(args) < 2:
            raise UsageError("give at least one PATH and a QUESTION", hint='e.g. rlm ask ./repo "Where is X?"')
        paths, question = args[:-1], as_text(args[-1])
        _check_order(paths, question)
    else:
        paths = args
        if not paths:
            raise UsageError("give at least one PATH", hint="rlm ask ./repo --question-file question.txt")
        from rlm_cli.app.batch import read_text_file

        question = read_text_file(question_file, "--question-file", "the question",
                                  stdin_is_corpus="-" in paths)[0].strip()
    if not question.strip():
        raise UsageError("the question is empty")
    return paths, question

