"""The RLM loop: root model turns, code blocks run in the REPL worker, FINAL ends it.

The orchestrator never prints; it reports everything through ``emit`` (trajectory events, see
``rlm_cli.trace``), which the runner sends to the renderer and the trajectory file. Reading a
reply (its blocks, text that claims their output, a FINAL written as text) is ``rlm_cli.loop.reply``.

Finishing rules (each has a test in ``tests/test_orchestrator.py``):

* ``FINAL(value)`` / ``FINAL_VAR(name)`` called in a code block end the run; the first one wins,
  and code after it in the same block cannot change the answer (the worker freezes the text).
* Evidence first: a reply's blocks run in order until one fails, or until the text after a block
  claims that block's output ("Output: ...", a result written out): later blocks were written on
  imagined output and do not run, and that text is cut from the history (the model is told).
  A FINAL in a later block of a reply, after an earlier block printed output the model has not
  seen, is refused (the output of code it already ran in an earlier turn counts as seen).
* A line ``FINAL(...)`` or ``FINAL_VAR(...)`` in the reply's text, outside code blocks, ends the
  run with the same value the call gives in a block (``FINAL(x)`` of a variable ``x`` is its value;
  text that is not Python is taken as written). A FINAL written after claimed output never ends
  the run; an answer written out by the model (a literal) next to code whose output it has not
  seen is refused. ``FINAL_VAR`` of an undefined name, or FINAL only mentioned in prose, does not
  end it either: the model is told what went wrong and continues.
* Before the first root call ``leads(question)`` runs in the REPL (``settings.leads``); when it
  finds something, the call and its output are turn 0 of the history (``rlm_cli.sandbox.leads``).
* The first turn cannot finish without having run code: a text FINAL on turn 1, or a turn-1 block
  that does nothing but call FINAL with literal values, is refused, unless leads were shown.
* A reply with neither code nor FINAL gets one format reminder; a second one in a row is taken as
  the final answer when it reads as an answer (not a plan, a refusal or a question: see
  ``reply.looks_like_answer``); otherwise the model is told it has not answered.
* Every feedback message says how many iterations are left; an error repeated from the previous
  turn (with its failing line), or code run before, is pointed out with what to change. After
  :data:`STUCK_REPEATS` turns in a row of code already run, the model is asked once, without the
  REPL, for its answer (``_answer_when_stuck``).
* At ``max_iterations`` one last call without the REPL asks for the best answer
  (:class:`MaxIterationsError`, status ``max_iterations``).
"""

from __future__ import annotations

import ast
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlm_cli import protocol
from rlm_cli.config import Settings
from rlm_cli.corpus import Corpus, FileEntry
from rlm_cli.errors import BudgetExceededError, MaxIterationsError
from rlm_cli.history import History, Turn, input_budget, output_limit, request_tokens
from rlm_cli.loop import prompts, reply
from rlm_cli.models.client import ModelClient
from rlm_cli.models.detect import DEFAULT_WINDOW
from rlm_cli.models.relay import LMHandler
from rlm_cli.progress import stream_callback
from rlm_cli.sandbox.launcher import Limits, Sandbox, WorkerSpec
from rlm_cli.trace import event, request_key

Emit = Callable[[dict[str, Any]], None]

_FINISHERS = ("FINAL", "FINAL_VAR")
#: Seconds ``leads(question)`` may take before the first root call (it takes well under one
#: second on the 31 MB standard library).
LEADS_SECONDS = 20.0
#: Names that stand for an answer rather than being one: ``FINAL(answer)`` of such a name never
#: assigned is refused, where ``FINAL(gone)`` is taken as the word written.
PLACEHOLDER_NAMES = frozenset({"answer", "final_answer", "result", "results", "res", "ans", "output", "out",
                               "response", "value", "x"})
#: Most times an answer that leaves out items the question lists is sent back (each time only
#: when it leaves out fewer than the last one).
ITEM_ASKS = 2
#: Turns in a row of code already run after which the model is asked for its answer (again after
#: as many more, at most :data:`STUCK_ASKS` times a run).
STUCK_REPEATS = 2
STUCK_ASKS = 3
#: Sampling temperature of the root call after a repeated turn (a deterministic server gives the
#: same reply to the same request; a small model shown its own repeat tends to repeat it again).
RESAMPLE_TEMPERATURE = 1.0
_SPACE = re.compile(r"\s+")
#: A corpus line in the output of ``leads``: ``  path:line: text``.
_EVIDENCE = re.compile(r"^  \S[^\n]*:\d+[ :(]", re.MULTILINE)


def only_finishes(code: str) -> bool:
    """Whether ``code`` does nothing but call FINAL/FINAL_VAR with literal arguments (a guess
    written before any exploration, refused on the first turn)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    calls = 0
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
            return False
        call = stmt.value
        if not (isinstance(call.func, ast.Name) and call.func.id in _FINISHERS):
            return False
        if not all(isinstance(a, ast.Constant) for a in call.args) or call.keywords:
            return False
        calls += 1
    return calls > 0


def _more_literal_finals(blocks: list[reply.Block]) -> list[str]:
    """The answers of the blocks after a FINAL block that, like it, do nothing but call FINAL
    with one literal (seen: a 1.5B model wrote one such block per part of a three-part answer,
    the first of which would end the run with one part); stops at the first other block. The
    caller joins them only when they answer more of the items the question lists."""
    out: list[str] = []
    for block in blocks:
        if not only_finishes(block.code):
            break
        for stmt in ast.parse(block.code).body:
            call = stmt.value  # type: ignore[attr-defined]  # only_finishes: FINAL(...) expressions
            if call.func.id == "FINAL" and len(call.args) == 1 and isinstance(call.args[0].value, (str, int, float)):
                out.append(str(call.args[0].value))
    return out


#: A specific token of an answer: with a digit, ``_``, ``.`` or ``-`` inside, or a capital after
#: its first letter (``XKWR-7354``, ``heapq.py``, ``parse_config``, ``HTTPServer``).
_SPECIFIC = re.compile(r"[A-Za-z0-9_](?:[\w.-]*[\d_.-][\w.-]*|[a-z]*[A-Z][\w]*)[A-Za-z0-9_]")


def _quotes(answer: str, leads: str, question: str) -> bool:
    """Whether ``answer`` quotes a specific token (:data:`_SPECIFIC`) of the ``leads`` output
    that the ``question`` does not have: a fact taken from the corpus lines it was shown."""
    if not leads:
        return False
    asked = question.lower()
    return any(tok in leads and tok.lower() not in asked for tok in _SPECIFIC.findall(answer[:2_000]))


#: A count the leads computed over every line they scanned (not a sample): ``is called by 3
#: functions``, ``is on 12 lines``, ``(5 definitions``.
_LEADS_COUNT = re.compile(r"is called by (\d[\d,]*)|is on (\d[\d,]*) lines?|\((\d[\d,]*) definitions")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?(?!\w|\.\d)")


#: A count of nothing written in words: "No lines have ...", "none of the records", "zero".
_NONE_COUNTED = re.compile(r"\b(?:no|zero)\s+(?:\w+\s+)?(?:lines?|rows?|records?|entries|matches|results|hits|"
                           r"occurrences?|items?|such)\b|\bnone\b|\bzero\b", re.IGNORECASE)


def _numbers(text: str) -> set[float]:
    """The numbers written in ``text`` (``1,234`` is 1234; ``10750`` and ``10750.0`` are one)."""
    return {float(n.replace(",", "")) for n in _NUMBER.findall(text)}


#: What REPL output holds besides figures code computed: a traceback's frame lines, the hints and
#: notes rlm adds (``group(1)`` of a hint's example), and the corpus data it shows (a row's line
#: number, quoted text, ``key=value`` fields, ``path:line``, read_file's numbered lines).
_NOT_FIGURES = (re.compile(r"""^[ \t]*File "[^"\n]*", line \d+.*$|^hint: .*$|^\[note: .*$""", re.MULTILINE),
                re.compile(r"""['"](?:line|start_line|end_line|chunk|score)['"]: \d+"""),
                re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\""),
                re.compile(r"\S+=\S+|\S+:\d+\b|^[ \t]*\d+: ", re.MULTILINE))


def _figures_only(output: str) -> str:
    """``output`` without the corpus data it shows (:data:`_NOT_FIGURES`): what is left are the
    values code printed (``6``, ``[(', 94), ...]`` of a tally). Printed rows hold numbers of
    all sizes (seen: "150" answered for a count of 2, after printing 150 rows)."""
    for rx in _NOT_FIGURES:
        output = rx.sub(" ", output)
    return output


def _counted_by_leads(answer: str, leads: str) -> bool:
    """Whether a number of ``answer`` is one of the counts the ``leads`` computed over every line
    they scanned (:data:`_LEADS_COUNT`), so that the answer does not rest on example lines."""
    counts = {float(g.replace(",", "")) for m in _LEADS_COUNT.finditer(leads) for g in m.groups() if g}
    return bool(counts & _numbers(answer[:2_000]))


def _shown(history: History, current: list[str] | None = None, *, leads: bool = True) -> str:
    """Every output the REPL showed the model so far (the leads unless ``leads`` is false, each
    turn's blocks), then ``current`` (this turn's, not in the history yet), one after another."""
    return "\n".join([o for t in history.turns if leads or t.iteration > 0 for o in t.outputs] + list(current or []))


def _norm(code: str) -> str:
    """``code`` with runs of whitespace made one space: what makes two blocks "the same code"."""
    return _SPACE.sub(" ", code).strip()


def literal_final(code: str) -> bool:
    """Whether ``code`` calls FINAL with an answer written out as a literal (a string or number
    constant, or an f-string without fields), as opposed to a value the code computed, or
    ``FINAL_VAR`` of a text that is not a variable name."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FINISHERS \
                and node.args and not node.keywords:
            args = node.args
            if node.func.id == "FINAL_VAR":
                if isinstance(args[0], ast.Constant) and isinstance(args[0].value, str) \
                        and not args[0].value.isidentifier():
                    return True
            elif all(isinstance(a, ast.Constant) or (isinstance(a, ast.JoinedStr) and all(
                    isinstance(v, ast.Constant) for v in a.values)) for a in args):
                return True
    return False


@dataclass
class RunResult:
    """The outcome of a run. ``status`` is ``final`` or ``max_iterations``; ``mode`` ``rlm`` or ``direct``."""

    answer: str
    status: str
    iterations: int
    sub_calls: int
    elapsed_s: float
    mode: str = "rlm"
    depth: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def corpus_meta(corpus: Corpus) -> dict[str, Any]:
    """The constant-size metadata dict for ``prompts.corpus_metadata`` (never decodes the whole corpus)."""
    top: Counter[str] = Counter()
    types: Counter[str] = Counter()
    for f in corpus.files:
        head, sep, _ = f.path.lstrip("/").partition("/")
        top[head + "/" if sep else "."] += 1
        name = f.path.rsplit("/", 1)[-1]
        types[name[name.rfind("."):] if "." in name[1:] else "(none)"] += 1
    step = max(1, len(corpus.files) // 8)
    meta = {"chars": corpus.chars, "tokens": corpus.total_tokens, "files": len(corpus.files),
            "chunks": len(corpus.chunks), "top_dirs": top.most_common(12), "types": types.most_common(12),
            "sample_paths": [f.path for f in corpus.files[::step][:8]], "prefix": corpus.head(300)}
    structured = structured_meta(corpus)
    if structured:
        meta["structured"] = structured
    return meta


#: Structured files described one by one in the root model's metadata (the largest first).
STRUCTURED_SHOWN = 6


def structured_meta(corpus: Corpus) -> dict[str, Any] | None:
    """The structured files of ``corpus`` for ``prompts.corpus_metadata``, in constant size:
    ``files``, ``rows`` (records), ``by_kind`` (``[(kind, files, rows)]``, at most 8 kinds),
    ``shown`` (the summaries of :data:`STRUCTURED_SHOWN` files, each with its ``path``: the
    largest of each kind, then the largest others) and ``pdf`` (PDF files, whose pages start with a marker line). ``None`` when the
    corpus has neither structured files nor PDFs."""
    data = [f for f in corpus.files if f.dmeta]
    pdfs = sum(1 for f in corpus.files if f.kind.split(",")[0] == "pdf")
    if not data and not pdfs:
        return None
    kinds: dict[str, list[int]] = {}
    for f in data:
        assert f.dmeta is not None
        row = kinds.setdefault(str(f.dmeta.get("kind")), [0, 0])
        row[0] += 1
        row[1] += int(f.dmeta.get("rows", 0) or 0)
    by_size = sorted(data, key=lambda f: (-f.size, f.path))
    firsts: dict[str, FileEntry] = {}
    for f in by_size:  # the largest file of each kind, then the largest others
        firsts.setdefault(str((f.dmeta or {}).get("kind")), f)
    chosen = list(firsts.values())[:STRUCTURED_SHOWN]
    largest = chosen + [f for f in by_size if f not in chosen][:STRUCTURED_SHOWN - len(chosen)]
    return {"files": len(data), "rows": sum(r for _, r in kinds.values()),
            "by_kind": [(k, n, r) for k, (n, r) in sorted(kinds.items(), key=lambda kv: -kv[1][0])[:8]],
            "shown": [{"path": f.path, **(f.dmeta or {})} for f in largest], "pdf": pdfs}


def text_meta(text: str) -> dict[str, Any]:
    """Metadata for an ``rlm_query`` context passed as a string (no files, no chunks)."""
    return {"chars": len(text), "tokens": max(1, len(text) // 4) if text else 0, "files": 1, "chunks": 0,
            "prefix": text[:300]}


def first_messages(settings: Settings, question: str, meta: dict[str, Any], depth: int = 0,
                   note: str = "") -> list[dict[str, str]]:
    """What the root model of a loop at ``depth`` reads first: the system prompt, the worked
    example's turns (:func:`prompts.example_messages`) and the first user message (metadata and
    question); the windows come from ``settings`` (or :data:`DEFAULT_WINDOW`). ``note`` (a
    session's earlier questions and kept variables, ``prompts.session_note``) goes between the
    corpus description and the question."""
    root_window = settings.root_model_window or DEFAULT_WINDOW
    out_limit = output_limit(input_budget(root_window), settings.max_output_chars)
    system = prompts.system_prompt(sub_window_tokens=settings.sub_model_window or DEFAULT_WINDOW,
                                   max_output_chars=out_limit, root_window_tokens=root_window,
                                   recursion=depth + 1 < settings.max_depth)
    return [{"role": "system", "content": system}, *prompts.example_messages(),
            {"role": "user", "content": prompts.first_user_prompt(
                question, prompts.corpus_metadata(meta) + (f"\n\n{note}" if note else ""))}]


class Orchestrator:
    """Runs the loop for one question at one depth, with its own REPL worker.

    ``settings.root_model_window`` / ``sub_model_window`` should hold the resolved windows (the
    runner fills them); :data:`DEFAULT_WINDOW` is used when they are ``None``.
    """

    def __init__(self, settings: Settings, client: ModelClient, handler: LMHandler, *, sandbox_level: str,
                 emit: Emit, depth: int = 0, hide_paths: tuple[str, ...] = ()) -> None:
        self.settings = settings
        self.client = client
        self.handler = handler
        self.sandbox_level = sandbox_level
        self.emit = emit
        self.depth = depth
        self.hide_paths = hide_paths
        self._last_output = ""
        self._question = ""

    def run(self, question: str, spec: WorkerSpec, meta: dict[str, Any], *, sandbox: Sandbox | None = None,
            note: str = "") -> RunResult:
        """Answer ``question`` over the corpus described by ``spec``/``meta``.

        With ``sandbox`` (a started worker registered with the handler, kept by a session) the
        loop runs there and leaves it running, variables and all; otherwise it starts its own
        worker from ``spec`` and closes it at the end. ``note`` is passed to :func:`first_messages`.

        Raises:
            MaxIterationsError: the iteration limit was reached (status ``max_iterations``); carries
                the best answer the root model could give and the :class:`RunResult` as ``result``.
            BudgetExceededError: a budget was hit; carries the best partial answer.
            ProviderError: a root call failed.
            SandboxError: the worker could not start.
        """
        s = self.settings
        started = time.monotonic()
        root_model = s.model
        assert root_model is not None
        budget = input_budget(s.root_model_window or DEFAULT_WINDOW)
        out_limit = output_limit(budget, s.max_output_chars)
        self._question = question
        sub_calls_before = self.client.usage.sub_calls
        loop = _LoopState()
        own = sandbox is None
        token = self.handler.register(self.depth) if own else ""
        if sandbox is None:
            sandbox = Sandbox(self.sandbox_level, spec, socket_path=self.handler.socket_path, token=token,
                              limits=Limits(memory_bytes=s.memory_limit), cell_timeout=s.cell_timeout)
            sandbox.hide_paths = self.hide_paths
            # The token is served only to this sandbox's worker process (and its descendants).
            own_sandbox = sandbox
            self.handler.bind(token, lambda: getattr(own_sandbox.proc, "pid", None))
        try:
            if own:
                sandbox.start()
                for line in sandbox.notes:
                    self.emit(event("notice", self.depth, message=line))
            system, *examples, first = first_messages(s, question, meta, self.depth, note)
            history = History(system["content"], first["content"], budget_tokens=budget, examples=examples)
            self._leads(sandbox, question, budget, history, loop)
            for iteration in range(1, s.max_iterations + 1):
                self.emit(event("iteration", self.depth, iteration=iteration))
                text = self._root_call(history, root_model, loop.last_text, resample=loop.repeat_streak > 0)
                loop.last_text = text or loop.last_text
                answer = self._turn(iteration, text, history, sandbox, loop, out_limit)
                if answer is not None:
                    return self._done(answer, "final", iteration, sub_calls_before, started)
            return self._best_answer(history, sandbox, root_model, loop, sub_calls_before, started)
        finally:
            if own:
                sandbox.close()
                self.handler.unregister(token)

    def _leads(self, sandbox: Sandbox, question: str, budget_tokens: int, history: History,
               loop: _LoopState) -> None:
        """Set ``question`` in the REPL and, with ``settings.leads``, run ``leads(question)`` there
        before the first root call (at most :data:`LEADS_SECONDS` seconds; output of a sixteenth
        of the root window's input budget, at most 2,400 characters). When it found something,
        the call and its real output become turn 0 of ``history`` (``prompts.leads_reply``); when
        that output shows corpus lines (``path:line``), a FINAL on turn 1 may rest on it. Emits a
        ``leads`` event."""
        chars = max(400, min(2_400, budget_tokens * prompts.CHARS_PER_TOKEN // 16))
        remaining = self.client.budget.remaining_s()
        limit = LEADS_SECONDS if remaining is None else max(0.1, min(LEADS_SECONDS, remaining))
        code = f"leads(question, max_chars={chars})"
        run_leads = self.settings.leads and (remaining is None or remaining > 1.0)
        result = sandbox.execute(f"question = {question!r}" + (f"\n{code}" if run_leads else ""), cell=0,
                                 timeout=limit)
        if not run_leads:
            return
        text = result.output.strip() if result.ok and not result.lost else ""
        if result.lost or not result.ok:
            self._notice(f"leads(question) did not finish ({(result.lost or result.output.strip())[:160]}); "
                         "the first turn starts without leads")
        if text.startswith("(no leads"):
            text = ""
        self.emit(event("leads", self.depth, code=code, output=text, elapsed_s=round(result.elapsed_s, 3),
                        sources=[list(r) for r in result.sources]))
        if not text:
            return
        loop.ran_code = _EVIDENCE.search(text) is not None  # corpus lines shown: evidence for a FINAL
        if loop.ran_code:
            loop.leads_text = text
        loop.seen_code.add(_norm(code))
        history.add(Turn(0, prompts.leads_reply(code), prompts.output_message(
            [(code, text)], notes=[prompts.LEADS_NOTE], left=self.settings.max_iterations, question=question),
            codes=[code], outputs=[text]))

    # -- one turn --------------------------------------------------------------------------------
    def _turn(self, iteration: int, text: str, history: History, sandbox: Sandbox, loop: _LoopState,
              out_limit: int) -> str | None:
        """Act on one reply: run its code, apply the finishing rules, and record the turn.

        Returns the final answer, or ``None`` to go on.
        """
        plan = reply.plan(text)
        text_final = reply.find_text_final(text)
        if not plan.blocks:
            return self._turn_without_code(iteration, text, text_final, history, sandbox, loop)
        loop.no_code_streak = 0
        outputs: list[tuple[str, str]] = []
        notes: list[str] = []
        final: str | None = None
        written = False  # the final answer was written out (a literal), not computed by code
        unseen = 0  # characters earlier blocks of this reply printed that the model has not seen yet
        ran = 0
        for n, block in enumerate(plan.blocks[:plan.runnable], 1):
            code = block.code
            ran = n
            self.emit(event("code", self.depth, iteration=iteration, block=n, code=code))
            calls0 = self.client.usage.sub_calls
            # A cell never outlives the run's --timeout: the wall-clock budget bounds it too.
            remaining = self.client.budget.remaining_s()
            result = sandbox.execute(code, cell=iteration, timeout=None if remaining is None else remaining)
            if result.lost:
                shown = (f"[{result.lost}. REPL state was lost: your variables are gone; "
                         "`context` and the helpers were reloaded.]")
            else:
                shown = prompts.truncate_output(result.output, result.output_chars, out_limit)
                if result.final_error:
                    shown += f"\n[{result.final_error}]"
            self.emit(event("output", self.depth, iteration=iteration, block=n, output=shown,
                            output_chars=result.output_chars, elapsed_s=round(result.elapsed_s, 3),
                            sub_calls=self.client.usage.sub_calls - calls0, lost=result.lost,
                            helpers=result.helpers, sources=[list(r) for r in result.sources]))
            outputs.append((code, shown))
            self._last_output = shown
            if self.client.fatal is not None:  # e.g. a 401 on a sub-call: stop now, exit 4
                raise self.client.fatal
            if self.client.budget.exceeded is not None:
                raise self._with_partial(self.client.budget.exceeded, loop.last_text, [o for _, o in outputs])
            if result.final is not None:
                if not loop.ran_code and only_finishes(code) and n == 1:
                    # A literal answer on the first turn is a guess: nothing it saw came from the corpus.
                    notes.append(prompts.FIRST_TURN_FINAL)
                    self._notice("FINAL before any exploration; refused")
                elif unseen:
                    notes.append(prompts.final_after_unseen(n))
                    self._notice(f"FINAL in block {n}, after output the model had not seen; refused")
                elif protocol.GREP_CAPPED_NOTE in result.output and reply.asks_quantity(self._question):
                    # A figure computed over a grep that stopped at its cap counts part of the matches.
                    notes.append(prompts.FINAL_ON_CAPPED_GREP)
                    self._notice("FINAL computed in a block whose grep stopped at max_results; refused")
                elif result.output_chars and literal_final(code):
                    # The answer was written out before the output of this very block was seen.
                    notes.append(prompts.FINAL_WITH_UNSEEN_CODE)
                    self._notice("written-out FINAL in a block that printed output not seen yet; refused")
                else:
                    final = result.final
                    written = literal_final(code)  # FINAL_VAR("n") hands over what code computed
                    more = _more_literal_finals(plan.blocks[n:plan.runnable]) if only_finishes(code) else []
                    joined = "\n".join(dict.fromkeys([final, *more]))
                    # Joined only when the parts answer more of the items the question lists.
                    if more and len(reply.missing_items(self._question, joined)) < len(
                            reply.missing_items(self._question, final)):
                        final = joined
                        self._notice(f"the reply split its answer over {len(more) + 1} FINAL blocks; joined")
                break  # the first FINAL wins; later blocks do not run (but see _more_literal_finals)
            if not result.ok or result.lost:
                unseen += max(1, result.output_chars)  # a failure is news: nothing may be finished on it
                break  # later blocks were written assuming this one worked
            if _norm(code) not in loop.seen_code:  # code it ran before printed what it saw then
                unseen += result.output_chars
        loop.ran_code = True
        if final is None and text_final is not None and not notes:
            final, written = self._text_final_next_to_code(text_final, plan, unseen, sandbox, notes)
        if final is not None:
            taken = self._second_look(final, loop, notes, history, [o for _, o in outputs], written=written)
            if taken is not None:
                return taken
        loop.own_code = loop.own_code or any(not only_finishes(c) for c, _ in outputs)
        kept = text
        if ran < len(plan.blocks) or plan.claimed:
            kept = text[:plan.blocks[ran - 1].end]
            if plan.claimed:
                notes.append(prompts.CLAIMED_OUTPUT)
                self._notice(f"text after block {ran} claimed its output; cut from the history"
                             + (f", {len(plan.blocks) - ran} later block(s) not run" if ran < len(plan.blocks) else ""))
            elif ran < len(plan.blocks):
                notes.append(prompts.later_blocks_skipped(len(plan.blocks) - ran))
        codes = [c for c, _ in outputs]
        again = bool(codes) and [_norm(c) for c in codes] == loop.last_codes
        notes += self._repetition_notes(loop, codes, [o for _, o in outputs])
        loop.last_codes = [_norm(c) for c in codes]
        # A repeat replaces the turn it repeats (one copy, not a pattern to copy), but from the second
        # repeat in a row on the history grows: an identical request would get the identical reply.
        history.add(Turn(iteration, kept, prompts.output_message(
            outputs, notes=notes, left=self.settings.max_iterations - iteration, question=self._question), codes=codes,
            outputs=[o for _, o in outputs]), replace_last=again and loop.repeat_streak < 2)
        if loop.repeat_streak >= STUCK_REPEATS and iteration < self.settings.max_iterations:
            return self._answer_when_stuck(iteration, history, sandbox, loop)
        return None

    def _answer_when_stuck(self, iteration: int, history: History, sandbox: Sandbox, loop: _LoopState) -> str | None:
        """The model ran only code it had run before :data:`STUCK_REPEATS` turns in a row (or a
        multiple of it; at most :data:`STUCK_ASKS` times a run): nothing new can come of it. Ask,
        without the REPL and resampled, for its answer from the output it has seen
        (:data:`prompts.STUCK_ANSWER`); an answer (a FINAL, or text that reads as one and
        does not say nothing was found) that passes :meth:`_second_look` ends the run; otherwise
        the loop goes on, told to search differently or given the second look's note. The
        exchange stays in the history."""
        if loop.stuck_asks >= STUCK_ASKS or loop.repeat_streak % STUCK_REPEATS:
            return None
        loop.stuck_asks += 1
        self._notice(f"the model repeated itself {loop.repeat_streak} turns in a row; asked for its answer")
        history.extend_last_feedback(prompts.STUCK_ANSWER)
        text = self._root_call(history, self.settings.model or "", loop.last_text, resample=True)
        answer = self._best_text(text, sandbox)
        if not answer.startswith(NO_ANSWER_PREFIX) and not reply.negative_answer(answer):
            notes: list[str] = []  # the same second look as any answer (seen: one of three listed items)
            taken = self._second_look(answer, loop, notes, history)
            if taken is not None:
                return taken
            history.add(Turn(iteration, text, f"{notes[0]}\n\n{prompts.reminder(self._question)}"))
            return None
        history.add(Turn(iteration, text, prompts.SEARCH_DIFFERENTLY))
        return None

    def _second_look(self, answer: str, loop: _LoopState, notes: list[str], history: History,
                     current: list[str] | None = None, *, written: bool = True) -> str | None:
        """The answer that ends the run, or ``None`` when ``answer`` is sent back (the note goes to
        ``notes``). Sent back once per run each (the next such answer is accepted, whatever it
        says; an empty one, ``""`` or ``None``, first), except for missing items (at most :data:`ITEM_ASKS` times, each time only when it
        leaves out fewer items than the last):

        * a figure (``reply.asks_quantity``: a count, total or extreme) ``written`` out by the
          model that no code of its own printed (:meth:`_unsupported_figure`):
          :func:`prompts.count_with_code`;
        * an answer that reports finding nothing (:data:`prompts.CHECK_NEGATIVE`), or a figure of
          none (:meth:`_zero_figure`: :data:`prompts.CHECK_ZERO`), once between them;
        * one that leaves out items the question lists (``reply.missing_items``;
          :func:`prompts.check_missing`, which quotes the lines naming them from what the REPL
          showed: ``history``'s outputs and this turn's ``current`` ones). An answer after such a
          note is joined with the earlier ones that answer other items (:meth:`_with_earlier_parts`).
        """
        if not loop.checked_empty and answer.strip() in ("", "None"):
            loop.checked_empty = True
            notes.append(prompts.EMPTY_FINAL)
            self._notice("an empty answer; refused once")
            return None
        asked = loop.quantity_asks[loop.own_code]
        if written and asked < (1 if loop.own_code else 2) and self._unsupported_figure(answer, loop, history, current):
            loop.quantity_asks[loop.own_code] = asked + 1
            notes.append(prompts.count_with_code(self._question))
            self._notice("a figure that no code of the model printed; asked to compute it with code")
            return None
        zero = self._zero_figure(answer)
        if not loop.checked_negative and (zero or reply.negative_answer(answer)):
            loop.checked_negative = True
            notes.append(prompts.CHECK_ZERO if zero else prompts.CHECK_NEGATIVE)
            self._notice("the answer says nothing was found; asked for a second look")
            return None
        items = reply.listed_items(self._question)
        if not items:
            return answer
        answer = self._with_earlier_parts(answer, loop)
        missing = reply.missing_items(self._question, answer)
        if missing and len(loop.parts) < ITEM_ASKS and len(missing) < loop.items_missing:
            loop.items_missing = len(missing)
            loop.parts.append(answer)
            notes.append(prompts.check_missing(missing, items, reply.lines_naming(_shown(history, current), missing)))
            self._notice(f"the answer leaves out {', '.join(missing)}, listed in the question; asked for each")
            return None
        return answer

    def _with_earlier_parts(self, answer: str, loop: _LoopState) -> str:
        """``answer`` after earlier ones sent back for leaving out listed items, joined with those
        that answer only items it leaves out (seen with a 1.5B model on a three-part question:
        one part per answer; each part is the model's own, from lines it was shown). An earlier
        answer about an item this one also answers is dropped: the later one corrects it."""
        if not loop.parts:
            return answer
        q = self._question
        items = set(reply.listed_items(q))
        covered = items - set(reply.missing_items(q, answer))
        keep: list[str] = []
        for part in reversed(loop.parts):  # the latest first: it holds the earlier parts it kept
            theirs = items - set(reply.missing_items(q, part))
            if theirs and not theirs & covered:
                keep.insert(0, part)
                covered |= theirs
        if not keep:
            return answer
        self._notice("joined with the earlier answers about other items of the question")
        return "\n".join(dict.fromkeys([*keep, answer]))

    def _zero_figure(self, answer: str) -> bool:
        """Whether ``answer`` to a question asking for a figure gives 0 as its only number, or no
        number and "no lines", "none" (:data:`_NONE_COUNTED`): what code that matched nothing
        gives (seen with a 1.5B model: a total of 0 after its filter dropped every line; "No lines
        have service=mailer and level=WARN" after grepping for the words "... and ..."), which
        deserves the same second look as "not found"."""
        if not reply.asks_quantity(self._question):
            return False
        numbers = _numbers(answer[:2_000])
        return numbers == {0.0} or (not numbers and _NONE_COUNTED.search(answer[:400]) is not None)

    def _unsupported_figure(self, answer: str, loop: _LoopState, history: History, current: list[str] | None) -> bool:
        """Whether ``answer`` to a question that asks for a figure (``reply.asks_quantity``) rests
        on nothing computed: written before any code of the model's own ran (the leads' six
        example lines are no count), or holding numbers none of which that code printed (seen
        with a 1.5B model: 150 rows printed, "150" answered for a count of 2). A count the leads
        computed over every line (``is called by 3 functions``) is supported."""
        if not reply.asks_quantity(self._question) or _counted_by_leads(answer, loop.leads_text):
            return False
        if not loop.own_code:
            return bool(loop.leads_text)  # without leads, a first-turn literal FINAL is refused anyway
        numbers = _numbers(answer[:2_000])
        if not numbers:
            return False  # a label (the most frequent one): code ran; nothing to check it against
        return not numbers & _numbers(_figures_only(_shown(history, current, leads=False)))

    def _text_final_next_to_code(self, tf: reply.TextFinal, plan: reply.Plan, unseen: int, sandbox: Sandbox,
                                 notes: list[str]) -> tuple[str | None, bool]:
        """A FINAL line written in the text of a reply that also ran code: refused after claimed
        output, or when it is a written-out answer (literal) while the code printed output the
        model has not seen (``unseen`` characters); a variable or expression is taken from the
        REPL. Returns ``(answer or None, written out)``."""
        if plan.claimed and tf.offset >= plan.cut:
            self._notice("FINAL written after text that claimed output; refused")
            notes.append(prompts.FINAL_AFTER_CLAIM)
            return None, False
        if tf.literal() is not None and not unseen:
            return tf.literal(), True
        if tf.literal() is not None:
            notes.append(prompts.FINAL_WITH_UNSEEN_CODE)
            self._notice("FINAL(...) line next to unseen code output; refused")
            return None, False
        value, literal = self._text_final_value(sandbox, tf, notes)
        if literal and unseen:  # not Python after all (e.g. a path): a written-out answer
            notes.append(prompts.FINAL_WITH_UNSEEN_CODE)
            self._notice("FINAL(...) line next to unseen code output; refused")
            return None, False
        return value, literal

    def _turn_without_code(self, iteration: int, text: str, text_final: reply.TextFinal | None,
                           history: History, sandbox: Sandbox, loop: _LoopState) -> str | None:
        feedback: str
        loop.last_codes = []
        if text_final is not None:
            loop.no_code_streak = 0
            if not loop.ran_code:
                self._notice("FINAL before any code; refused")
                feedback = prompts.FIRST_TURN_FINAL
            else:
                notes: list[str] = []
                answer, written = self._text_final_value(sandbox, text_final, notes)
                taken = None if answer is None else self._second_look(answer, loop, notes, history, written=written)
                if taken is not None:
                    return taken
                feedback = f"{notes[0]} Continue."
        elif reply.mentions_final(text):
            loop.no_code_streak = 0
            self._notice("FINAL mentioned in prose only; the model was told")
            feedback = prompts.PROSE_FINAL
        else:
            loop.no_code_streak += 1
            # Small models often answer in prose; after one reminder, the second such reply in a row
            # is the answer (issue #6), unless it plans or declines instead of answering (issue #10).
            # On the first turn, a prose answer that quotes the leads' corpus lines is one at once.
            second_look: list[str] = []
            grounded = iteration == 1 and loop.no_code_streak == 1 and _quotes(text, loop.leads_text, self._question)
            # The same prose answer again, turns apart (seen: prose answers alternating with code
            # blocks, so never two in a row, until the iteration limit), is an answer too.
            answer, reads_as_answer = reply.without_notes(text).strip(), reply.looks_like_answer(text)
            said = _norm(answer).lower()
            again = reads_as_answer and said in loop.prose_answers
            if reads_as_answer:
                loop.prose_answers.add(said)
            taken = (self._second_look(answer, loop, second_look, history)
                     if (loop.no_code_streak >= 2 or grounded or again) and reads_as_answer else None)
            if taken is not None:
                self._notice("a reply without code that quotes the leads: taking it as the final answer" if grounded
                             else "two replies without code in a row: taking the reply as the final answer"
                             if loop.no_code_streak >= 2 else "the same answer in prose again: taking it as the final answer")
                return taken
            if second_look:
                feedback = second_look[0]
            elif loop.no_code_streak >= 2:
                self._notice("reply without code does not answer the question; the model was told")
                feedback = prompts.NOT_AN_ANSWER
            else:
                self._notice("reply had no code block; reminded the model of the format")
                feedback = prompts.FORMAT_REMINDER
        left = prompts.iterations_left(self.settings.max_iterations - iteration)
        history.add(Turn(iteration, text, f"{feedback}\n\n{left}\n\n{prompts.reminder(self._question)}"))
        return None

    def _text_final_value(self, sandbox: Sandbox, tf: reply.TextFinal, notes: list[str]) -> tuple[str | None, bool]:
        """The answer a FINAL line of the text gives, as the same call in a code block would:
        ``(answer, written_out)``. A literal is taken as written; a variable or expression is
        evaluated in the REPL (``FINAL(x)`` gives the value of ``x``); a ``FINAL(...)`` whose
        argument is not valid, defined Python is taken as the text written (``written_out``).
        ``(None, False)`` with the reason in ``notes`` when ``FINAL_VAR`` names no variable or
        the expression fails."""
        literal = tf.literal()
        if literal is not None:
            return literal, True
        result = sandbox.execute(tf.call, cell=0, map_output=False)
        if result.final is not None:
            return result.final, False
        if tf.func == "FINAL" and not result.final_error and not result.lost:
            err = reply.error_signature(result.output) or ""
            if err.startswith(("NameError", "SyntaxError", "AttributeError")) and \
                    tf.source.strip().lower() not in PLACEHOLDER_NAMES:
                return tf.source, True  # e.g. FINAL(urllib/parse.py), FINAL(gone): prose that parses as Python
            # FINAL(answer) of a placeholder never assigned: the model meant a variable it did not make.
        problem = (result.final_error or result.lost
                   or f"{tf.call[:80]} failed: {(reply.error_signature(result.output) or result.output.strip())[:300]}")
        notes.append(problem)
        self._notice(problem)
        return None, False

    def _repetition_notes(self, loop: _LoopState, codes: list[str], outputs: list[str]) -> list[str]:
        """Notes when this turn repeats code that already ran, or the error of the previous turn."""
        notes = []
        norm = [_norm(c) for c in codes]
        if norm and all(c in loop.seen_code for c in norm):
            loop.repeat_streak += 1
            notes.append(prompts.REPEATED_CODE if loop.repeat_streak == 1 else prompts.answer_now(loop.repeat_streak))
            self._notice(f"the model repeated code it had already run ({loop.repeat_streak} turn(s) in a row); told")
        else:
            loop.repeat_streak = 0
        loop.seen_code.update(norm)
        errors = [e for e in (reply.error_signature(o) for o in outputs) if e]
        repeated = [e for e in errors if e in loop.last_errors]
        if repeated:
            line = next((reply.failing_line(o) for o in outputs if reply.error_signature(o) == repeated[0]), None)
            notes.append(prompts.repeated_error(repeated[0], loop.error_streak + 1, line))
            self._notice(f"the same error as the previous turn: {repeated[0][:120]}")
            loop.error_streak += 1
        else:
            loop.error_streak = 0
        loop.last_errors = set(errors)
        return notes

    # -- calls and endings ---------------------------------------------------------------------------
    def _root_call(self, history: History, model: str, last_text: str, *, resample: bool = False) -> str:
        """One root call with the request ``history`` gives now; ``resample``: at
        :data:`RESAMPLE_TEMPERATURE` (or ``--temperature`` when higher), for a model that repeated
        itself, whose next reply from a deterministic server would otherwise be the same one."""
        messages = history.messages()
        fit = history.last_fit
        temperature = max(RESAMPLE_TEMPERATURE, self.settings.temperature or 0.0) if resample else None
        try:
            completion = self.client.complete(messages, model=model, role="root", depth=self.depth,
                                              on_delta=stream_callback(self.emit, self.depth, model),
                                              temperature=temperature)
        except BudgetExceededError as exc:
            outputs = next((t.outputs for t in reversed(history.turns) if t.outputs), [])
            raise self._with_partial(exc, last_text, outputs) from None
        r = completion.record
        self.emit(event("root_call", self.depth, model=model, response=completion.text,
                        request_key=request_key(model, messages), request_tokens=fit.tokens or request_tokens(messages),
                        history={"verbatim": fit.verbatim, "compacted": fit.compacted, "omitted": fit.omitted,
                                 "truncated": fit.truncated},
                        input_tokens=r.input_tokens, output_tokens=r.output_tokens, cost_usd=r.cost_usd,
                        latency_s=round(r.latency_s, 3)))
        return completion.text

    def _best_answer(self, history: History, sandbox: Sandbox, model: str, loop: _LoopState,
                     sub_calls_before: int, started: float) -> RunResult:
        """The iteration limit: one last call, without the REPL, for the best answer; raises."""
        s = self.settings
        history.extend_last_feedback(prompts.best_answer_prompt())
        try:
            best = self._root_call(history, model, loop.last_text)
        except BudgetExceededError:
            best = loop.last_text
        answer = self._best_text(best, sandbox)
        result = self._done(answer, "max_iterations", s.max_iterations, sub_calls_before, started)
        err = MaxIterationsError(f"no final answer after {s.max_iterations} iterations",
                                 partial=result.answer, hint="raise --max-iterations or narrow the question")
        err.result = result  # type: ignore[attr-defined]
        raise err

    def _best_text(self, best: str, sandbox: Sandbox) -> str:
        """The answer in the reply to the last request at the iteration limit: a FINAL in it (its
        value), else its text without code when it reads as an answer, else "no answer" with the
        head of the last output; never raw code. A FINAL called in a code block of the reply
        counts: that block runs in the REPL (only it; a block without FINAL does not run)."""
        found = reply.find_text_final(best)
        if found is not None:
            value, _ = self._text_final_value(sandbox, found, [])
            if value is not None:
                return value
        for block in reply.plan(best).blocks:
            if "FINAL" in block.code:
                result = sandbox.execute(block.code, cell=0)
                if result.final is not None:
                    return result.final
                break
        prose = reply.without_notes(reply.outside_code(best)).strip()
        if prose and reply.looks_like_answer(prose):
            return prose
        return partial_answer(best, [self._last_output])

    def _notice(self, message: str) -> None:
        self.emit(event("notice", self.depth, message=message))

    def _with_partial(self, exc: BudgetExceededError, reply: str, outputs: list[str]) -> BudgetExceededError:
        """``exc`` with the root loop's best partial answer (:func:`partial_answer` of its last
        reply and outputs). A sub-RLM leaves it alone: the budget error is one object shared by
        the whole tree, and the root loop, which re-raises it once the child's error reached its
        code, is the one whose answer the user asked for."""
        if self.depth == 0:
            exc.partial = partial_answer(reply, outputs)
        return exc

    def _done(self, answer: str, status: str, iterations: int, sub_calls_before: int, started: float) -> RunResult:
        result = RunResult(answer=answer, status=status, iterations=iterations,
                           sub_calls=self.client.usage.sub_calls - sub_calls_before,
                           elapsed_s=round(time.monotonic() - started, 3), depth=self.depth)
        self.emit(event("final", self.depth, status=status, iterations=iterations, answer=answer,
                        answer_chars=len(answer)))
        return result


#: How a partial answer without any answer of the model's begins.
NO_ANSWER_PREFIX = "No final answer yet:"
#: Characters of each output, and of the model's words, kept in a partial answer.
PARTIAL_OUTPUT_CHARS = 1_000
PARTIAL_WORDS_CHARS = 2_000


def partial_answer(last_reply: str, outputs: list[str]) -> str:
    """The best answer of a run stopped early (a budget), from the root model's ``last_reply``
    and the shown ``outputs`` of its last code blocks. Never code:

    * a ``FINAL(answer)`` line in the reply's text with a written-out answer: that answer;
    * otherwise ``No final answer yet`` followed by the reply's text outside code blocks (what
      the model said it was doing or had found; up to :data:`PARTIAL_WORDS_CHARS` characters)
      and the head of each output (:data:`PARTIAL_OUTPUT_CHARS` characters each).
    """
    found = reply.find_text_final(last_reply)
    literal = found.literal() if found is not None else None
    if literal is not None:
        return literal
    words = reply.outside_code(last_reply)
    words = words[:words.index("```")] if "```" in words else words  # an unclosed block: code to the end
    parts = [NO_ANSWER_PREFIX + " the run stopped before the model gave one."]
    if words.strip():
        parts.append("The model's last words (its code left out):\n" + _clipped(words.strip(), PARTIAL_WORDS_CHARS))
    heads = [_clipped(o.strip(), PARTIAL_OUTPUT_CHARS) for o in outputs if o.strip()]
    if heads:
        parts.append("What its last code printed:\n" + "\n---\n".join(heads))
    return "\n\n".join(parts)


def _clipped(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars] + f" [... {len(text) - chars:,} more characters]"


@dataclass
class _LoopState:
    last_text: str = ""
    no_code_streak: int = 0
    ran_code: bool = False
    seen_code: set[str] = field(default_factory=set)
    last_errors: set[str] = field(default_factory=set)
    error_streak: int = 0
    checked_negative: bool = False
    #: The leads' output when it showed corpus lines (a first-turn answer may rest on it).
    leads_text: str = ""
    #: Replies without code that read as answers (normalized, lowercased): one said again is taken.
    prose_answers: set[str] = field(default_factory=set)
    #: An empty answer (``FINAL("")``, ``FINAL(None)``) was sent back once.
    checked_empty: bool = False
    #: Answers sent back for leaving out items the question lists (see ``_with_earlier_parts``; one
    #: per note), and how many items the last of them left out.
    parts: list[str] = field(default_factory=list)
    items_missing: int = 1_000
    #: The model ran code of its own (a block that is not only FINAL of a literal) in an earlier turn.
    own_code: bool = False
    #: How often a written-out figure was sent back for resting on no code of the model's, before
    #: and after code of its own first ran (at most twice before, once after).
    quantity_asks: list[int] = field(default_factory=lambda: [0, 0])
    #: Turns in a row whose code had all run before (see ``Orchestrator._answer_when_stuck``).
    repeat_streak: int = 0
    #: How often the model was asked for its answer because it was stuck.
    stuck_asks: int = 0
    #: The code of the last turn (normalized): the same code again replaces that turn in the history.
    last_codes: list[str] = field(default_factory=list)


def run_direct(settings: Settings, client: ModelClient, question: str, context: str, *, emit: Emit) -> RunResult:
    """Direct mode: the question and the whole corpus in one root call (no REPL).

    Raises:
        BudgetExceededError / ProviderError: from the model call.
    """
    model = settings.model
    assert model is not None
    started = time.monotonic()
    messages: list[dict[str, Any]] = list(prompts.direct_prompt(question, context))
    emit(event("iteration", 0, iteration=1))
    completion = client.complete(messages, model=model, role="root", depth=0,
                                 on_delta=stream_callback(emit, 0, model))
    r = completion.record
    emit(event("root_call", 0, model=model, response=completion.text, request_key=request_key(model, messages),
               request_tokens=request_tokens(messages), direct=True, input_tokens=r.input_tokens,
               output_tokens=r.output_tokens, cost_usd=r.cost_usd, latency_s=round(r.latency_s, 3)))
    found = reply.find_text_final(completion.text)
    literal = found.literal() if found is not None else None
    answer = literal if literal is not None else completion.text.strip()
    emit(event("final", 0, status="final", iterations=1, answer=answer, answer_chars=len(answer)))
    return RunResult(answer=answer, status="final", iterations=1, sub_calls=0,
                     elapsed_s=round(time.monotonic() - started, 3), mode="direct")
