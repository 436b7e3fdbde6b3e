"""The RLM loop: root model turns, code blocks run in the REPL worker, FINAL ends it.

The orchestrator never prints; it reports everything through ``emit`` (trajectory events, see
``rlm_cli.trace``), which the CLI sends to the renderer and the trajectory file.
"""

from __future__ import annotations

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
from rlm_cli.lm_handler import LMHandler, ModelClient
from rlm_cli.sandbox.launcher import Limits, Sandbox, WorkerSpec
from rlm_cli.trace import event

Emit = Callable[[dict[str, Any]], None]

_CODE_BLOCK = re.compile(r"```(?:repl|python|py|python3)[ \t]*\n(.*?)```", re.DOTALL)
_FINAL_LINE = re.compile(r"^[ \t]*FINAL\((.*)\)[ \t]*$", re.DOTALL | re.MULTILINE)
_FINAL_VAR_LINE = re.compile(r"^[ \t]*FINAL_VAR\([ \t]*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?[ \t]*\)[ \t]*$", re.MULTILINE)


def find_code_blocks(text: str) -> list[str]:
    """The code of every ```repl / ```python block in ``text``, in order."""
    return [m.group(1) for m in _CODE_BLOCK.finditer(text)]


def find_text_final(text: str) -> tuple[str, str] | None:
    """A FINAL written as a line of the model's text outside code blocks.

    Returns ``("value", answer)`` for ``FINAL(answer)``, ``("var", name)`` for ``FINAL_VAR(name)``,
    or ``None``. Mentions inside prose ("I will call FINAL() later") do not count: the call must
    start its own line.
    """
    outside = _CODE_BLOCK.sub("", text)
    m = _FINAL_VAR_LINE.search(outside)
    if m:
        return ("var", m.group(1))
    m = _FINAL_LINE.search(outside)
    if m:
        value = m.group(1).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        return ("value", value) if value else None
    return None


@dataclass
class RunResult:
    """The outcome of a run. ``status`` is ``final`` or ``max_iterations``."""

    answer: str
    status: str
    iterations: int
    sub_calls: int
    elapsed_s: float
    mode: str = "rlm"
    depth: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def corpus_meta(corpus: Corpus) -> dict[str, Any]:
    """The constant-size metadata dict for ``prompts.corpus_metadata``."""
    top: Counter[str] = Counter()
    types: Counter[str] = Counter()
    for f in corpus.files:
        head, sep, _ = f.path.lstrip("/").partition("/")
        top[head + "/" if sep else "."] += 1
        name = f.path.rsplit("/", 1)[-1]
        types[name[name.rfind("."):] if "." in name[1:] else "(none)"] += 1
    step = max(1, len(corpus.files) // 8)
    return {"chars": len(corpus.context), "tokens": corpus.total_tokens, "files": len(corpus.files),
            "chunks": len(corpus.chunks), "top_dirs": top.most_common(12), "types": types.most_common(12),
            "sample_paths": [f.path for f in corpus.files[::step][:8]], "prefix": corpus.context[:300]}


class Orchestrator:
    """Runs the loop for one question at one depth, with its own REPL worker."""

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
            PartialAnswerError: the iteration limit was reached (``status`` max_iterations); carries
                the best answer the root model could give.
            BudgetExceededError: a budget was hit; carries the best partial answer.
            ProviderError: a root call failed.
            SandboxError: the worker could not start.
        """
        s = self.settings
        started = time.monotonic()
        token = self.handler.register(self.depth)
        root_model = s.model
        assert root_model is not None
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": prompts.system_prompt(
                sub_window_tokens=s.sub_model_window or 32_000, max_output_chars=s.max_output_chars,
                root_window_tokens=s.root_model_window)},
            {"role": "user", "content": prompts.first_user_prompt(question, prompts.corpus_metadata(meta))},
        ]
        sub_calls_before = self.client.usage.sub_calls
        last_text = ""
        no_code_streak = 0
        sandbox = Sandbox(self.sandbox_level, spec, socket_path=self.handler.socket_path, token=token,
                          limits=Limits(memory_bytes=s.memory_limit), cell_timeout=s.cell_timeout)
        sandbox.hide_paths = self.hide_paths
        try:
            sandbox.start()
            for note in sandbox.notes:
                self.emit(event("notice", self.depth, message=note))
            for iteration in range(1, s.max_iterations + 1):
                self.emit(event("iteration", self.depth, iteration=iteration))
                text = self._root_call(messages, root_model, last_text)
                last_text = text or last_text
                messages.append({"role": "assistant", "content": text})
                blocks = find_code_blocks(text)
                if not blocks:
                    text_final = find_text_final(text)
                    if text_final is not None:
                        if iteration == 1:
                            messages.append({"role": "user", "content": prompts.FIRST_TURN_FINAL})
                            self.emit(event("notice", self.depth, message="FINAL before any code; refused"))
                            continue
                        answer = self._resolve_text_final(sandbox, text_final, messages)
                        if answer is not None:
                            return self._done(answer, "final", iteration, sub_calls_before, started)
                        continue
                    no_code_streak += 1
                    if no_code_streak >= 2:
                        self.emit(event("notice", self.depth, message="two replies without code: taking the "
                                                                      "reply as the final answer"))
                        return self._done(text.strip(), "final", iteration, sub_calls_before, started)
                    messages.append({"role": "user", "content": prompts.FORMAT_REMINDER})
                    self.emit(event("notice", self.depth, message="reply had no code block; reminded the model"))
                    continue
                no_code_streak = 0
                outputs: list[tuple[str, str]] = []
                final: str | None = None
                for n, code in enumerate(blocks, 1):
                    self.emit(event("code", self.depth, iteration=iteration, block=n, code=code))
                    calls0 = self.client.usage.sub_calls
                    result = sandbox.execute(code, cell=iteration)
                    if result.lost:
                        shown = (f"[{result.lost}. REPL state was lost: your variables are gone; "
                                 "`context` and the helpers were reloaded.]")
                    else:
                        shown = prompts.truncate_output(result.output, result.output_chars, s.max_output_chars)
                        if result.final_error:
                            shown += f"\n[{result.final_error}]"
                    self.emit(event("output", self.depth, iteration=iteration, block=n, output=shown,
                                    output_chars=result.output_chars, elapsed_s=round(result.elapsed_s, 3),
                                    sub_calls=self.client.usage.sub_calls - calls0, lost=result.lost))
                    outputs.append((code, shown))
                    if self.client.budget.exceeded is not None:
                        raise self._with_partial(self.client.budget.exceeded, last_text)
                    if result.final is not None:
                        final = result.final
                        break  # the first FINAL wins; later blocks do not run
                if final is not None:
                    return self._done(final, "final", iteration, sub_calls_before, started)
                messages.append({"role": "user", "content": prompts.output_message(outputs)})
            # Iteration limit: one last call for the best answer, without the REPL.
            messages.append({"role": "user", "content": prompts.best_answer_prompt()})
            try:
                best = self._root_call(messages, root_model, last_text)
            except BudgetExceededError:
                best = last_text
            result_ = self._done(best.strip(), "max_iterations", s.max_iterations, sub_calls_before, started)
            err = MaxIterationsError(f"no final answer after {s.max_iterations} iterations",
                                     partial=result_.answer, hint="raise --max-iterations or narrow the question")
            err.result = result_  # type: ignore[attr-defined]
            raise err
        finally:
            sandbox.close()
            self.handler.unregister(token)

    def _root_call(self, messages: list[dict[str, Any]], model: str, last_text: str) -> str:
        try:
            completion = self.client.complete(messages, model=model, role="root", depth=self.depth)
        except BudgetExceededError as exc:
            raise self._with_partial(exc, last_text) from None
        r = completion.record
        self.emit(event("root_call", self.depth, model=model, response=completion.text,
                        input_tokens=r.input_tokens, output_tokens=r.output_tokens, cost_usd=r.cost_usd,
                        latency_s=round(r.latency_s, 3)))
        return completion.text

    def _resolve_text_final(self, sandbox: Sandbox, found: tuple[str, str],
                            messages: list[dict[str, Any]]) -> str | None:
        kind, value = found
        if kind == "value":
            return value
        result = sandbox.execute(f"FINAL_VAR({value!r})", cell=0)
        if result.final is not None:
            return result.final
        problem = result.final_error or result.lost or f"FINAL_VAR({value}) failed"
        messages.append({"role": "user", "content": f"{problem}. Continue."})
        self.emit(event("notice", self.depth, message=problem))
        return None

    def _with_partial(self, exc: BudgetExceededError, last_text: str) -> BudgetExceededError:
        if not exc.partial:
            exc.partial = last_text.strip()
        return exc

    def _done(self, answer: str, status: str, iterations: int, sub_calls_before: int, started: float) -> RunResult:
        result = RunResult(answer=answer, status=status, iterations=iterations,
                           sub_calls=self.client.usage.sub_calls - sub_calls_before,
                           elapsed_s=round(time.monotonic() - started, 3), depth=self.depth)
        self.emit(event("final", self.depth, answer_chars=len(answer), status=status, iterations=iterations))
        return result
