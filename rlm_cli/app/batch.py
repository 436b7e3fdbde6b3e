"""Several questions in one run: ``rlm ask PATH --question "first" --question "second"`` and ``--questions FILE``.

The corpus is loaded once (a ``session.Session``). With ``--jobs 1`` (the default) the questions
run one after another on one REPL worker, whose variables carry over (each question is told which
exist); with ``--jobs N`` up to N run at once, each in its own worker, independently. Each
question has its own trajectory, usage and exit code; its result reaches ``on_result`` as soon as
it is done (in completion order), so a failed question never costs the others their answers.

The run's exit code is the *worst* of its questions' (``errors.worst_exit_code``, ranked by
``errors.EXIT_SEVERITY``): answered (0) < answered but unsupported under ``--require-support``
(7) < answered, but not a value of the question's ``--answer-type`` (9) < iteration limit (5,
partial answer) < budget (6, partial answer) < usage error (2, not
answered) < no model (3) < provider failure (4) < internal error (1).
Ctrl-C or SIGTERM stops the whole run (130 / 143); answers already written stay. A question the
run's budget leaves no room to start is not started (:func:`ask_one`): it writes no trajectory.
"""

from __future__ import annotations

import json
import math
import queue
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

from rlm_cli.answer_types import NAMES
from rlm_cli.errors import ExitCode, RLMError, UsageError

if TYPE_CHECKING:
    from rlm_cli.app.lane import Lane
    from rlm_cli.app.outcome import AskOutcome
    from rlm_cli.app.question import QuestionId
    from rlm_cli.app.session import Session
    from rlm_cli.config import Settings
    from rlm_cli.events import Emit

#: Characters of a question kept in a plain-text header line.
HEADER_CHARS = 100


@dataclass
class Question:
    """One question of a list: its ``id`` (from a JSONL file, else its 1-based position), text,
    answer type (``rlm_cli.answer_types.NAMES``) and settings of its own (``None``: the session's;
    ``rlm audit``: a check's model or ``max_cost``)."""

    id: QuestionId
    text: str
    answer_type: str = "text"
    settings: Settings | None = None


@dataclass
class Result:
    """One finished question: its ``outcome`` (``runner.AskOutcome``) or the ``error`` it raised,
    and the wall seconds it took."""

    question: Question
    outcome: AskOutcome | None = None
    error: RLMError | None = None
    elapsed_s: float = 0.0

    #: ``--require-support``: an answer whose support verdict is ``unsupported`` exits 7.
    require_support: bool = False

    @property
    def exit_code(self) -> int:
        """0 when answered (7 when the answer is unsupported and support was required), else the
        error's exit code."""
        if self.error is not None:
            return int(self.error.exit_code)
        return outcome_code(self.outcome, self.require_support)


def outcome_code(outcome: AskOutcome | None, require_support: bool) -> int:
    """The exit code of a run that ended on a final answer (a ``runner.AskOutcome``): 9 when the
    question has a type and the answer is not a value of it (``ExitCode.NOT_OF_TYPE``), 7 when
    ``require_support`` and the answer is unsupported, else 0."""
    typed = getattr(getattr(outcome, "result", None), "typed", None)
    if typed is not None and not typed.ok:
        return int(ExitCode.NOT_OF_TYPE)
    return int(ExitCode.UNSUPPORTED) if require_support and unsupported(outcome) else 0


def unsupported(outcome: AskOutcome | None) -> bool:
    """Whether a run's outcome (``runner.AskOutcome``) has an answer whose support verdict is
    ``unsupported``."""
    support = getattr(getattr(outcome, "result", None), "support", None)
    return getattr(support, "verdict", None) == "unsupported"


#: The longest question, in UTF-8 bytes: one ``--question``, one line of ``--questions`` or a
#: ``--question-file`` (a question that big already fills a root model's window; the file is read
#: no further than this, so a huge line cannot exhaust memory).
MAX_QUESTION_BYTES = 1024**2
#: The most questions one run asks by default (each writes a trajectory; ``--max-questions``).
MAX_QUESTIONS = 1000


def read_questions(flags: list[str], file: str | None, *, stdin_is_corpus: bool, answer_type: str = "text",
                   max_questions: int = MAX_QUESTIONS) -> list[Question]:
    """The questions of ``--question`` (in order) then of ``--questions FILE`` (``-``: stdin).

    A file is JSON Lines when its first non-blank line starts with ``{``: each non-blank line an
    object with a ``question`` (text) and optionally an ``id`` (a string or number, unique) and a
    ``type`` (an answer type; default ``answer_type``, the ``--answer-type``); otherwise each
    non-blank line is a question. Questions without an ``id`` are numbered by their position in
    the whole list (1-based). The file is read a line at a time, each at most
    :data:`MAX_QUESTION_BYTES`, and no further than ``max_questions`` questions.

    Raises:
        UsageError: an empty or too long question, more than ``max_questions``, an unreadable or
            non-UTF-8 file, a bad or too deeply nested JSON line or a bad ``type``, a duplicate id,
            no question at all, or the file on stdin when the corpus is there too.
    """
    items: list[tuple[Any, str, str]] = [
        (None, q.encode("utf-8", "surrogateescape").decode("utf-8", "replace"), answer_type) for q in flags]
    for n, (_, text, _kind) in enumerate(items, 1):
        if len(text.encode("utf-8")) > MAX_QUESTION_BYTES:
            raise UsageError(f"question {n} is over {MAX_QUESTION_BYTES // 1024**2} MiB",
                             hint="ask about the corpus in fewer words: the corpus is where long text goes")
    if file is not None:
        items += _file_questions(file, stdin_is_corpus=stdin_is_corpus, answer_type=answer_type,
                                 room=max_questions - len(items))
    if not items:
        if file is not None:
            raise UsageError(f"--questions {file}: no questions in it (every line is blank)",
                             hint="write one question per line, or JSON Lines with \"id\" and \"question\"")
        raise UsageError("no question given", hint='use --question "question" (repeatable) or --questions FILE')
    if len(items) > max_questions:
        raise UsageError(too_many(max_questions), hint="split the list, or raise --max-questions")
    out: list[Question] = []
    seen: set[str] = set()
    for n, (qid, text, kind) in enumerate(items, 1):
        if not text.strip():
            raise UsageError(f"question {qid if qid is not None else n} is empty",
                             hint="give each --question (or line of --questions) some text")
        qid = n if qid is None else qid
        key = json.dumps(qid)
        if key in seen:
            raise UsageError(f"two questions have the id {qid!r}", hint="give each question its own id")
        seen.add(key)
        out.append(Question(qid, text.strip(), kind))
    return out


def too_many(limit: int) -> str:
    """The error of a list of more than ``limit`` questions."""
    noun = "question" if limit == 1 else "questions"
    return f"more than {limit:,} {noun}: one run asks at most {limit:,} (each writes a trajectory)"


def read_text_file(file: str, flag: str, what: str, *, stdin_is_corpus: bool,
                   max_bytes: int = MAX_QUESTION_BYTES) -> tuple[str, str]:
    """The UTF-8 text of ``file`` (``-``: standard input) given to option ``flag`` (e.g.
    ``--question-file``), at most ``max_bytes``, and where it came from (the path or ``"standard
    input"``); ``what`` names the content in messages ("the question").

    Raises:
        UsageError: stdin is the corpus too, nothing is piped in, the file cannot be read, is over
            ``max_bytes`` (read no further), or is not UTF-8 (a byte-order mark is dropped).
    """
    fh, where = _open_text_source(file, flag, what, stdin_is_corpus=stdin_is_corpus)
    try:
        data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {flag} {where}: {exc.strerror or exc}", hint="check the path") from None
    finally:
        if fh is not sys.stdin.buffer:
            fh.close()
    if len(data) > max_bytes:
        raise UsageError(f"{flag}: {where} is over {max_bytes // 1024**2} MiB", hint=f"shorten {what}")
    try:
        return data.decode("utf-8-sig"), where
    except UnicodeDecodeError:
        raise UsageError(f"{flag}: {where} is not UTF-8 text", hint="save the file as UTF-8") from None


def _open_text_source(file: str, flag: str, what: str, *, stdin_is_corpus: bool) -> tuple[BinaryIO, str]:
    """``(binary stream, where)`` of ``file`` (``-``: standard input) for option ``flag``.

    Raises:
        UsageError: stdin is the corpus too, nothing is piped in, or the file cannot be opened.
    """
    if file == "-":
        if stdin_is_corpus:
            raise UsageError(f"the corpus ('-') and {flag} - cannot both come from standard input",
                             hint=f"give {what} or the corpus as a file")
        if sys.stdin.isatty():
            raise UsageError(f"{flag} - reads {what} from standard input, but nothing is piped in",
                             hint=f"e.g. rlm ask ./repo {flag} - < {flag.strip('-').replace('-', '_')}.txt")
        return sys.stdin.buffer, "standard input"
    try:
        return open(file, "rb"), file  # noqa: SIM115 - closed by the caller
    except OSError as exc:
        raise UsageError(f"cannot read {flag} {file}: {exc.strerror or exc}", hint="check the path") from None


def _lines(file: str, *, stdin_is_corpus: bool, room: int) -> tuple[list[tuple[int, str]], str]:
    """The non-blank lines of ``--questions`` ``file`` with their numbers, and where it came from:
    read a line at a time, each at most :data:`MAX_QUESTION_BYTES`, and at most ``room`` + 1 of
    them (enough to tell there are too many).

    Raises:
        UsageError: a line too long, a line not UTF-8, or the file unreadable.
    """
    fh, where = _open_text_source(file, "--questions", "the questions", stdin_is_corpus=stdin_is_corpus)
    lines: list[tuple[int, str]] = []
    try:
        n = 0
        while len(lines) <= room:
            raw = fh.readline(MAX_QUESTION_BYTES + 1)
            if not raw:
                break
            n += 1
            if len(raw) > MAX_QUESTION_BYTES:
                raise UsageError(f"--questions: {where} line {n} is over {MAX_QUESTION_BYTES // 1024**2} MiB (read "
                                 "no further)", hint="one question a line; the corpus is where long text goes")
            try:
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError:
                raise UsageError(f"--questions: {where} line {n} is not UTF-8 text",
                                 hint="save the file as UTF-8") from None
            if line.strip():
                lines.append((n, line.rstrip("\r\n")))
    except OSError as exc:
        raise UsageError(f"cannot read --questions {where}: {exc.strerror or exc}", hint="check the path") from None
    finally:
        if fh is not sys.stdin.buffer:
            fh.close()
    return lines, where


def _file_questions(file: str, *, stdin_is_corpus: bool, answer_type: str,
                    room: int) -> list[tuple[Any, str, str]]:
    lines, where = _lines(file, stdin_is_corpus=stdin_is_corpus, room=max(0, room))
    if not lines or not lines[0][1].lstrip().startswith("{"):
        return [(None, line, answer_type) for _, line in lines]
    items: list[tuple[Any, str, str]] = []
    for n, line in lines:
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:  # RecursionError: nested too deep to parse
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise UsageError(f"{where} line {n}: not JSON ({why})",
                             hint='each line: {"id": "q1", "question": "..."}') from None
        if not isinstance(row, dict) or not isinstance(row.get("question"), str):
            raise UsageError(f"{where} line {n}: needs a \"question\" string", hint='{"id": "q1", "question": "..."}')
        qid = row.get("id")
        if qid is not None and (isinstance(qid, bool) or not isinstance(qid, (str, int, float))
                                or isinstance(qid, float) and not math.isfinite(qid)):  # NaN, Infinity, 1e999
            raise UsageError(f"{where} line {n}: \"id\" must be a string or a finite number")
        kind = row.get("type", answer_type)
        if kind not in NAMES:
            raise UsageError(f"{where} line {n}: \"type\" must be one of {', '.join(NAMES)} (not {kind!r})")
        items.append((qid, row["question"], kind))
    return items


def header(question: Question) -> str:
    """The plain-text header line written above an answer: ``## [ID] first line of the question``."""
    first = question.text.splitlines()[0] if question.text else ""
    if len(first) > HEADER_CHARS:
        first = first[:HEADER_CHARS].rstrip() + "..."
    return f"## [{question.id}] {first}\n"


def run_all(session: Session, questions: list[Question], *, jobs: int, emit_for: Callable[[Question], Emit],
            on_result: Callable[[Result], None]) -> list[Result]:
    """Ask every question of ``questions`` in ``session`` (opened) and hand each :class:`Result`
    to ``on_result`` as it completes; returns them all in completion order.

    ``emit_for(question)`` gives the event callback of one question. With ``jobs`` > 1 the
    questions run in that many threads, each with its own worker (``session.Lane``), and every
    question starts with an empty REPL namespace (``Lane.clear``), so the answers do not depend
    on which worker ran what before; results are still handed over in this thread.

    Raises:
        KeyboardInterrupt / SystemExit: Ctrl-C or SIGTERM; the other questions are stopped first.
        UsageError: ``jobs`` workers would not fit in memory (``sandbox.memory``); none is started.
    """
    results: list[Result] = []
    if jobs <= 1 or len(questions) <= 1:
        for q in questions:
            result = ask_one(session, q, emit_for)
            results.append(result)
            on_result(result)
        return results
    session.independent = True
    if session.mode == "rlm":  # the workers start at once: their peaks add up
        from rlm_cli.sandbox.memory import check_workers_fit

        check_workers_fit(session.corpus, min(jobs, len(questions)), session.settings.memory_limit)
    return _run_parallel(session, questions, min(jobs, len(questions)), emit_for, on_result, results)


def ask_one(session: Session, q: Question, emit_for: Callable[[Question], Emit], lane: Lane | None = None) -> Result:
    """Ask ``q`` in ``session`` (on ``lane``; ``None``: the session's worker) as a :class:`Result`.
    A question after the run's budget is spent is not started: its result is the budget's error,
    and it writes no trajectory (3,000 questions under ``--timeout 10`` wrote 3,000 files)."""
    import time

    started = time.monotonic()
    try:
        try:
            session.budget.check()
        except RLMError as exc:  # not started: it used nothing (every group of its usage at 0)
            from rlm_cli.models.usage import Usage

            exc.report.usage = Usage().summary()
            raise
        outcome = session.ask(q.text, emit=emit_for(q), qid=q.id, lane=lane, answer_type=q.answer_type,
                              settings=q.settings)
        return Result(q, outcome=outcome, elapsed_s=time.monotonic() - started,
                      require_support=session.settings.require_support)
    except RLMError as exc:
        return Result(q, error=exc, elapsed_s=time.monotonic() - started)


def _run_parallel(session: Session, questions: list[Question], jobs: int, emit_for: Callable[[Question], Emit],
                  on_result: Callable[[Result], None], results: list[Result]) -> list[Result]:
    from rlm_cli.app.lane import Lane

    todo: queue.Queue[Question] = queue.Queue()
    for q in questions:
        todo.put(q)
    done: queue.Queue[Result | BaseException] = queue.Queue()
    lanes: list[Lane] = []
    lanes_lock = threading.Lock()
    stop = threading.Event()

    def work(first: bool) -> None:
        lane = session.lane if first else None
        try:
            if lane is None and session.mode == "rlm":
                lane = Lane(session)
                with lanes_lock:
                    lanes.append(lane)
            while not stop.is_set():
                try:
                    q = todo.get_nowait()
                except queue.Empty:
                    return
                done.put(ask_one(session, q, emit_for, lane))
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which re-raises it
            done.put(exc)
        finally:
            if lane is not None and not first:
                lane.close()

    threads = [threading.Thread(target=work, args=(i == 0,), name=f"rlm-job-{i + 1}", daemon=True)
               for i in range(jobs)]
    for t in threads:
        t.start()
    try:
        while len(results) < len(questions):
            try:
                item = done.get(timeout=0.2)
            except queue.Empty:
                if not any(t.is_alive() for t in threads) and done.empty():
                    break
                continue
            if isinstance(item, BaseException):
                raise item
            results.append(item)
            on_result(item)
    except BaseException:
        stop.set()
        session.abort()
        with lanes_lock:
            for lane in lanes:
                lane.sandbox.close()
        raise
    finally:
        for t in threads:
            t.join(timeout=10)
    return results


def result_document(result: Result, sandbox: str) -> dict[str, Any]:
    """The ``--json`` line of one question: ``id`` and ``question``, then the same document as a
    single ``rlm ask --json`` (an answer, a partial answer, or an error with ``exit_code``)."""
    from rlm_cli.errors import PartialAnswerError
    from rlm_cli.output.documents import AskDocument, ErrorDocument, error_document, outcome_document, partial_document

    elapsed = round(result.elapsed_s, 3)
    doc: AskDocument | ErrorDocument
    if result.error is None:
        assert result.outcome is not None  # a question either has an outcome or an error
        doc = outcome_document(result.outcome, elapsed)
    elif isinstance(result.error, PartialAnswerError):
        doc = partial_document(result.error, sandbox, elapsed)
    else:
        doc = error_document(result.error.message, result.error.exit_code)
        trace_path = result.error.report.trace_path
        doc["trace"] = str(trace_path) if trace_path else None
    return {"id": result.question.id, "question": result.question.text, **doc}
