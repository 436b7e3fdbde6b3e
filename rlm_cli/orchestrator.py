"""The RLM loop: root model turns, code blocks run in the REPL worker, FINAL ends it.

The orchestrator never prints; it reports everything through ``emit`` (trajectory events, see
``rlm_cli.trace``), which the runner sends to the renderer and the trajectory file.

Finishing rules (each has a test in ``tests/test_orchestrator.py``):

* ``FINAL(value)`` / ``FINAL_VAR(name)`` called in a code block end the run; the first one wins,
  and code after it in the same block cannot change the answer (the worker freezes the text).
* A line ``FINAL(...)`` or ``FINAL_VAR(...)`` in the reply's text, outside code blocks, also
  ends it. ``FINAL_VAR`` of an undefined name, or FINAL only mentioned in prose, does not: the
  model is told what went wrong and continues. A literal ``FINAL(...)`` line written next to code
  whose output the model has not seen is refused (it was written before the evidence).
* The first turn cannot finish without having run code: a text FINAL on turn 1, or a turn-1 block
  that does nothing but call FINAL with literal values, is refused.
* A reply with neither code nor FINAL gets one format reminder; a second one in a row (once code
  has run) is taken as the final answer (small local models answer in plain text).
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

from rlm_cli import prompts
from rlm_cli.config import Settings
from rlm_cli.corpus import Corpus
from rlm_cli.errors import BudgetExceededError, MaxIterationsError
from rlm_cli.history import History, Turn, input_budget, output_limit, request_tokens
from rlm_cli.lm_handler import LMHandler, ModelClient
from rlm_cli.models import DEFAULT_WINDOW
from rlm_cli.sandbox.launcher import Limits, Sandbox, WorkerSpec
from rlm_cli.trace import event, request_key

Emit = Callable[[dict[str, Any]], None]


_CODE_BLOCK = re.compile(r"```(?:repl|python|py|python3)[ \t]*\n(.*?)```", re.DOTALL)
_ANY_FENCE = re.compile(r"```.*?```", re.DOTALL)
_FINAL_START = re.compile(r"^[ \t]*(FINAL_VAR|FINAL)\(", re.MULTILINE)
_IDENT = re.compile(r"^[ \t]*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?[ \t]*$")
_PROSE_FINAL = re.compile(r"\bFINAL(?:_VAR)?\s*\(")
_FINISHERS = ("FINAL", "FINAL_VAR")


def find_code_blocks(text: str) -> list[str]:
    """The code of every ```repl / ```python block in ``text``, in order."""
    return [m.group(1) for m in _CODE_BLOCK.finditer(text)]


def _outside_code(text: str) -> str:
    return _ANY_FENCE.sub("", text)


def find_text_final(text: str) -> tuple[str, str] | None:
    """A FINAL written as a line of the model's text outside code blocks.

    Returns ``("value", answer)`` for ``FINAL(answer)``, ``("var", name)`` for ``FINAL_VAR(name)``
    (name quoted or bare), or ``None``. Mentions inside prose ("I will call FINAL() later") do not
    count: the call must start its own line. A one-line call ends at its last ``)``; a call whose
    first line does not close runs to the last ``)`` of the reply (a multi-line answer).
    """
    outside = _outside_code(text)
    m = _FINAL_START.search(outside)
    if m is None:
        return None
    rest = outside[m.end():]
    first_line = rest.split("\n", 1)[0].rstrip()
    if first_line.endswith(")"):
        inner = first_line[:-1]
    else:
        whole = rest.rstrip()
        if not whole.endswith(")"):
            return None
        inner = whole[:-1]
    if m.group(1) == "FINAL_VAR":
        ident = _IDENT.match(inner)
        return ("var", ident.group(1)) if ident else None
    value = inner.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return ("value", value) if value else None


def mentions_final(text: str) -> bool:
    """Whether the text outside code blocks mentions a FINAL call (e.g. "I will call FINAL() once done")."""
    return bool(_PROSE_FINAL.search(_outside_code(text)))


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
    return {"chars": corpus.chars, "tokens": corpus.total_tokens, "files": len(corpus.files),
            "chunks": len(corpus.chunks), "top_dirs": top.most_common(12), "types": types.most_common(12),
            "sample_paths": [f.path for f in corpus.files[::step][:8]], "prefix": corpus.head(300)}


def text_meta(text: str) -> dict[str, Any]:
    """Metadata for an ``rlm_query`` context passed as a string (no files, no chunks)."""
    return {"chars": len(text), "tokens": max(1, len(text) // 4) if text else 0, "files": 1, "chunks": 0,
            "prefix": text[:300]}


def first_messages(settings: Settings, question: str, meta: dict[str, Any], depth: int = 0) -> list[dict[str, str]]:
    """The system prompt and first user message of a loop at ``depth`` (what the root model
    reads first); the windows come from ``settings`` (or :data:`DEFAULT_WINDOW`)."""
    root_window = settings.root_model_window or DEFAULT_WINDOW
    out_limit = output_limit(input_budget(root_window), settings.max_output_chars)
    system = prompts.system_prompt(sub_window_tokens=settings.sub_model_window or DEFAULT_WINDOW,
                                   max_output_chars=out_limit, root_window_tokens=root_window,
                                   recursion=depth + 1 < settings.max_depth)
    return [{"role": "system", "content": system},
            {"role": "user", "content": prompts.first_user_prompt(question, prompts.corpus_metadata(meta))}]


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

    def run(self, question: str, spec: WorkerSpec, meta: dict[str, Any]) -> RunResult:
        """Answer ``question`` over the corpus described by ``spec``/``meta``.

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
        system, first = first_messages(s, question, meta, self.depth)
        history = History(system["content"], first["content"], budget_tokens=budget)
        sub_calls_before = self.client.usage.sub_calls
        loop = _LoopState()
        token = self.handler.register(self.depth)
        sandbox = Sandbox(self.sandbox_level, spec, socket_path=self.handler.socket_path, token=token,
                          limits=Limits(memory_bytes=s.memory_limit), cell_timeout=s.cell_timeout)
        sandbox.hide_paths = self.hide_paths
        # The token is served only to this sandbox's worker process (and its descendants).
        self.handler.bind(token, lambda: getattr(sandbox.proc, "pid", None))
        try:
            sandbox.start()
            for note in sandbox.notes:
                self.emit(event("notice", self.depth, message=note))
            for iteration in range(1, s.max_iterations + 1):
                self.emit(event("iteration", self.depth, iteration=iteration))
                text = self._root_call(history, root_model, loop.last_text)
                loop.last_text = text or loop.last_text
                answer = self._turn(iteration, text, history, sandbox, loop, out_limit)
                if answer is not None:
                    return self._done(answer, "final", iteration, sub_calls_before, started)
            return self._best_answer(history, sandbox, root_model, loop, sub_calls_before, started)
        finally:
            sandbox.close()
            self.handler.unregister(token)

    # -- one turn --------------------------------------------------------------------------------
    def _turn(self, iteration: int, text: str, history: History, sandbox: Sandbox, loop: _LoopState,
              out_limit: int) -> str | None:
        """Act on one reply: run its code, apply the finishing rules, and record the turn.

        Returns the final answer, or ``None`` to go on.
        """
        blocks = find_code_blocks(text)
        text_final = find_text_final(text)
        if not blocks:
            return self._turn_without_code(iteration, text, text_final, history, sandbox, loop)
        loop.no_code_streak = 0
        outputs: list[tuple[str, str]] = []
        notes: list[str] = []
        final: str | None = None
        for n, code in enumerate(blocks, 1):
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
                            sub_calls=self.client.usage.sub_calls - calls0, lost=result.lost))
            outputs.append((code, shown))
            if self.client.fatal is not None:  # e.g. a 401 on a sub-call: stop now, exit 4
                raise self.client.fatal
            if self.client.budget.exceeded is not None:
                raise self._with_partial(self.client.budget.exceeded, loop.last_text, [o for _, o in outputs])
            if result.final is not None:
                if not loop.ran_code and only_finishes(code):
                    # A literal answer on the first turn is a guess: nothing it saw came from the corpus.
                    if n > 1:
                        notes.append(prompts.FINAL_WITH_UNSEEN_CODE)
                        self._notice("FINAL with a literal answer next to code whose output was not seen; refused")
                    else:
                        notes.append(prompts.FIRST_TURN_FINAL)
                        self._notice("FINAL before any exploration; refused")
                else:
                    final = result.final
                break  # the first FINAL wins; later blocks do not run
        loop.ran_code = True
        if final is None and text_final is not None and not notes:
            kind, value = text_final
            if kind == "var":
                final = self._resolve_var(sandbox, value, notes)
            else:
                notes.append(prompts.FINAL_WITH_UNSEEN_CODE)
                self._notice("FINAL(...) line next to unseen code output; refused")
        if final is not None:
            return final
        history.add(Turn(iteration, text, prompts.output_message(outputs, notes=notes),
                         codes=[c for c, _ in outputs], outputs=[o for _, o in outputs]))
        return None

    def _turn_without_code(self, iteration: int, text: str, text_final: tuple[str, str] | None,
                           history: History, sandbox: Sandbox, loop: _LoopState) -> str | None:
        feedback: str
        if text_final is not None:
            loop.no_code_streak = 0
            if not loop.ran_code:
                self._notice("FINAL before any code; refused")
                feedback = prompts.FIRST_TURN_FINAL
            else:
                kind, value = text_final
                if kind == "value":
                    return value
                notes: list[str] = []
                answer = self._resolve_var(sandbox, value, notes)
                if answer is not None:
                    return answer
                feedback = f"{notes[0]} Continue."
        elif mentions_final(text):
            loop.no_code_streak = 0
            self._notice("FINAL mentioned in prose only; the model was told")
            feedback = prompts.PROSE_FINAL
        else:
            loop.no_code_streak += 1
            # Small models often answer in prose; after one reminder, the second such reply in a row
            # is the answer (issue #6). The first turn alone can never finish this way.
            if loop.no_code_streak >= 2 and text.strip():
                self._notice("two replies without code in a row: taking the reply as the final answer")
                return text.strip()
            self._notice("reply had no code block; reminded the model of the format")
            feedback = prompts.FORMAT_REMINDER
        history.add(Turn(iteration, text, feedback))
        return None

    def _resolve_var(self, sandbox: Sandbox, name: str, notes: list[str]) -> str | None:
        """The value of REPL variable ``name`` as answer text, or ``None`` with the reason in ``notes``."""
        result = sandbox.execute(f"FINAL_VAR({name!r})", cell=0)
        if result.final is not None:
            return result.final
        problem = result.final_error or result.lost or f"FINAL_VAR({name!r}) failed: {result.output.strip()[:300]}"
        notes.append(problem)
        self._notice(problem)
        return None

    # -- calls and endings ---------------------------------------------------------------------------
    def _root_call(self, history: History, model: str, last_text: str) -> str:
        messages = history.messages()
        fit = history.last_fit
        try:
            completion = self.client.complete(messages, model=model, role="root", depth=self.depth)
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
        found = find_text_final(best)
        answer = _outside_code(best).strip() or best.strip()
        if found is not None:
            kind, value = found
            answer = value if kind == "value" else (self._resolve_var(sandbox, value, []) or answer)
        result = self._done(answer, "max_iterations", s.max_iterations, sub_calls_before, started)
        err = MaxIterationsError(f"no final answer after {s.max_iterations} iterations",
                                 partial=result.answer, hint="raise --max-iterations or narrow the question")
        err.result = result  # type: ignore[attr-defined]
        raise err

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


#: Characters of each output, and of the model's words, kept in a partial answer.
PARTIAL_OUTPUT_CHARS = 1_000
PARTIAL_WORDS_CHARS = 2_000


def partial_answer(reply: str, outputs: list[str]) -> str:
    """The best answer of a run stopped early (a budget), from the root model's last ``reply``
    and the shown ``outputs`` of its last code blocks. Never code:

    * a ``FINAL(answer)`` line in the reply's text: that answer;
    * otherwise ``No final answer yet`` followed by the reply's text outside code blocks (what
      the model said it was doing or had found; up to :data:`PARTIAL_WORDS_CHARS` characters)
      and the head of each output (:data:`PARTIAL_OUTPUT_CHARS` characters each).
    """
    found = find_text_final(reply)
    if found is not None and found[0] == "value":
        return found[1]
    words = _outside_code(reply)
    words = words[:words.index("```")] if "```" in words else words  # an unclosed block: code to the end
    parts = ["No final answer yet: the run stopped before the model gave one."]
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
    completion = client.complete(messages, model=model, role="root", depth=0)
    r = completion.record
    emit(event("root_call", 0, model=model, response=completion.text, request_key=request_key(model, messages),
               request_tokens=request_tokens(messages), direct=True, input_tokens=r.input_tokens,
               output_tokens=r.output_tokens, cost_usd=r.cost_usd, latency_s=round(r.latency_s, 3)))
    found = find_text_final(completion.text)
    answer = found[1] if found is not None and found[0] == "value" else completion.text.strip()
    emit(event("final", 0, status="final", iterations=1, answer=answer, answer_chars=len(answer)))
    return RunResult(answer=answer, status="final", iterations=1, sub_calls=0,
                     elapsed_s=round(time.monotonic() - started, 3), mode="direct")
