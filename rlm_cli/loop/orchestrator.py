"""The RLM loop: root model turns, code blocks run in the REPL worker, FINAL ends it.

The orchestrator never prints; it reports everything through ``emit`` (trajectory events, see
``rlm_cli.output.trace``). Each turn is: plan the reply (``rlm_cli.loop.reply``: its blocks, and under
``guided`` where text claims their output), run its blocks, ask the policy's checks about any
answer (``rlm_cli.loop.checks``), record the turn. Which rules apply is the run's policy
(``rlm_cli.loop.policy``); these hold under every policy:

* ``FINAL(value)`` / ``FINAL_VAR(name)`` called in a code block end the run; the first one wins,
  and code after it in the same block cannot change the answer (the worker freezes the text).
* A line ``FINAL(...)`` or ``FINAL_VAR(...)`` in the reply's text, outside code blocks, ends the
  run with the value the call gives in a block (``FINAL(x)`` of a variable ``x`` is its value;
  text that is not Python is taken as written), after the reply's blocks ran.
* ``FINAL_VAR`` of an undefined name, or ``FINAL`` of a placeholder name never assigned
  (``answer``), is no answer: the model is told and goes on.
* Every feedback message says how many iterations are left. At ``max_iterations`` one last call
  without the REPL asks for the best answer (:class:`MaxIterationsError`, status ``max_iterations``).

Under ``standard`` and ``guided`` a reply's blocks stop at the first that fails, and an error
repeated from the previous turn is pointed out with its failing line. ``guided`` adds the
weak-model aids: ``leads(question)`` as turn 0, text claiming output cut, prose answers, notes on
repeated code and a plain ask for the answer when the model is stuck on it.
"""

from __future__ import annotations

import re
import time

from rlm_cli import interrupts
from rlm_cli.config import Settings
from rlm_cli.errors import BudgetExceededError, MaxIterationsError
from rlm_cli.events import Emit, event
from rlm_cli.loop import prompts, reply
from rlm_cli.loop.answers import (
    best_text,
    literal_final,
    literal_finals,
    only_finishes,
    quotes_leads,
    text_final_value,
)
from rlm_cli.loop.checks import Candidate, Judge, Judged
from rlm_cli.loop.grounding import quoted_corpus_text
from rlm_cli.loop.history import History, Turn, output_limit
from rlm_cli.loop.meta import CorpusMeta, first_messages
from rlm_cli.loop.partial import NO_ANSWER_PREFIX, model_output, partial_answer
from rlm_cli.loop.policy import Policy
from rlm_cli.loop.result import RunResult, policy_of
from rlm_cli.loop.state import STUCK_ASKS, STUCK_ERRORS, STUCK_REPEATS, LoopState, norm, run_key
from rlm_cli.loop.support import PARTIAL_SUPPORT, UNSUPPORTED, Support, show_with_code, support_of
from rlm_cli.loop.typed import AnswerSpec, asked, typed_checks
from rlm_cli.loop.workers import new_worker, start_worker
from rlm_cli.models.client import ModelClient
from rlm_cli.models.detect import DEFAULT_WINDOW
from rlm_cli.models.relay import LMHandler
from rlm_cli.models.window import input_budget, request_tokens
from rlm_cli.output.progress import stream_callback
from rlm_cli.output.text import plural
from rlm_cli.output.trace import request_key
from rlm_cli.sandbox.launcher import Sandbox, WorkerSpec
from rlm_cli.sandbox.results import ExecResult

#: Seconds ``leads(question)`` may take before the first root call (it takes well under one
#: second on the 31 MB standard library).
LEADS_SECONDS = 20.0
#: Sampling temperature of the root call after a repeated turn (a deterministic server gives the
#: same reply to the same request; a small model shown its own repeat tends to repeat it again).
RESAMPLE_TEMPERATURE = 1.0
#: A corpus line in the output of ``leads``: ``  path:line: text``.
_EVIDENCE = re.compile(r"^  \S[^\n]*:\d+[ :(]", re.MULTILINE)


class Orchestrator:
    """Runs the loop for one question at one depth, with its own REPL worker.

    ``settings.root_model_window`` / ``sub_model_window`` should hold the resolved windows, and
    ``settings.policy`` the resolved policy (the session fills them); :data:`DEFAULT_WINDOW` and
    ``auto``'s choice are used otherwise. ``answer``: the type the answer must have
    (``rlm_cli.loop.typed``; the model is told it, and the ``answer_type`` check holds it).
    """

    def __init__(self, settings: Settings, client: ModelClient, handler: LMHandler, *, sandbox_level: str,
                 emit: Emit, depth: int = 0, hide_paths: tuple[str, ...] = (),
                 answer: AnswerSpec | None = None, policy: Policy | None = None) -> None:
        self.settings = settings
        self.client = client
        self.handler = handler
        self.sandbox_level = sandbox_level
        self.emit = emit
        self.depth = depth
        self.hide_paths = hide_paths
        self.answer = answer
        self.policy = policy if policy is not None else policy_of(settings)
        self._last_output = ""
        self._question = ""
        self._judge = Judge([], emit, depth)
        #: The support verdict of the answer accepted last (``loop.support``).
        self._support: Support = PARTIAL_SUPPORT

    def run(self, question: str, spec: WorkerSpec, meta: CorpusMeta, *, sandbox: Sandbox | None = None,
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
        self._question = asked(question, self.answer)  # the question as the model reads it, with its type
        self._judge = Judge(self.policy.make_checks() + typed_checks(self.answer), self.emit, self.depth)
        self._support = PARTIAL_SUPPORT
        #: ``(answer, support)`` held while the model is asked to show it with code (``support_retry``).
        self._held: tuple[str, Support] | None = None
        self._held_at = s.max_iterations
        sub_calls_before = self.client.usage.sub_calls
        loop = LoopState()
        own = sandbox is None
        if sandbox is None:
            sandbox = new_worker(self.handler, self.sandbox_level, spec, s, depth=self.depth, hide_paths=self.hide_paths)
        try:
            if own:
                start_worker(sandbox, self.emit, self.depth)
            system, *examples, first = first_messages(s, self._question, meta, self.depth, note)
            # the trajectory holds what the root model was told, as sent (the history records the rest)
            self.emit(event("prompt", self.depth, system=system["content"], first=first["content"],
                            examples=[dict(m) for m in examples]))
            history = History(system["content"], first["content"], budget_tokens=budget, examples=examples)
            self._leads(sandbox, question, budget, history, loop)
            for iteration in range(1, s.max_iterations + 1):
                self.emit(event("iteration", self.depth, iteration=iteration))
                resample = self.policy.repeats and loop.repeat_streak > 0
                text = self._root_call(history, root_model, loop.last_text, resample=resample)
                loop.last_text = text or loop.last_text
                answer = self._turn(iteration, text, history, sandbox, loop, out_limit)
                if answer is None and self._held is not None and iteration > self._held_at:
                    answer, self._support = self._held  # the last request brought no answer: end on the one held
                if answer is not None:
                    return self._done(answer, "final", iteration, sub_calls_before, started)
            return self._best_answer(history, sandbox, root_model, loop, sub_calls_before, started)
        finally:
            if own:
                sandbox.close()
                self.handler.unregister(sandbox.token)

    def _leads(self, sandbox: Sandbox, question: str, budget_tokens: int, history: History,
               loop: LoopState) -> None:
        """Set ``question`` in the REPL and, when leads are on (``settings.leads``, else the
        policy's choice), run ``leads(question)`` there before the first root call (at most
        :data:`LEADS_SECONDS` seconds; output of a sixteenth of the root window's input budget,
        at most 2,400 characters). When it found something, the call and its real output become
        turn 0 of ``history`` (``prompts.leads_reply``). Emits a ``leads`` event."""
        chars = max(400, min(2_400, budget_tokens * prompts.CHARS_PER_TOKEN // 16))
        remaining = self.client.budget.remaining_s()
        limit = LEADS_SECONDS if remaining is None else max(0.1, min(LEADS_SECONDS, remaining))
        code = f"leads(question, max_chars={chars})"
        wanted = self.policy.leads if self.settings.leads is None else self.settings.leads
        run_leads = wanted and (remaining is None or remaining > 1.0)
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
        if _EVIDENCE.search(text) is not None:  # corpus lines shown: evidence for an answer
            loop.read_output = True
            loop.leads_text = text
        loop.seen_runs.add(run_key(code, text))
        history.add(Turn(0, prompts.leads_reply(code), prompts.output_message(
            [(code, text)], notes=[prompts.LEADS_NOTE], left=self.settings.max_iterations, question=question),
            codes=[code], outputs=[text]))

    # -- one turn --------------------------------------------------------------------------------
    def _turn(self, iteration: int, text: str, history: History, sandbox: Sandbox, loop: LoopState,
              out_limit: int) -> str | None:
        """Act on one reply: plan it, run its code, ask the checks about any answer, and record
        the turn. Returns the final answer, or ``None`` to go on."""
        pol = self.policy
        plan = reply.plan(text) if pol.claimed_output else reply.plan_all(text)
        text_final = reply.find_text_final(text, answer_lines=pol.prose_answers)
        if not plan.blocks:
            return self._turn_without_code(iteration, text, text_final, history, sandbox, loop)
        loop.no_code_streak = 0
        outputs: list[tuple[str, str]] = []
        runs: list[str] = []
        notes: list[str] = []
        candidate: Candidate | None = None
        unseen = 0  # characters this reply's blocks printed that the model has not read
        ran = 0
        caps = loop.default_caps.setdefault(iteration, [])
        for n, block in enumerate(plan.blocks[:plan.runnable], 1):
            ran = n
            result, shown = self._run_block(sandbox, iteration, n, block.code, out_limit)
            outputs.append((block.code, shown))
            runs.append(run_key(block.code, shown))
            caps += result.default_caps
            if self.client.fatal is not None:  # e.g. a 401 on a sub-call: stop now, exit 4
                raise self.client.fatal
            if self.client.budget.exceeded is not None:
                raise self._with_partial(self.client.budget.exceeded, loop.last_text, [o for _, o in outputs])
            if result.final is not None:
                written = literal_final(block.code)
                extra = literal_finals(plan.blocks[n:plan.runnable]) if only_finishes(block.code) else []
                candidate = self._candidate(result.final, written, "block", iteration, loop, history,
                                            unseen + (result.output_chars if written else 0), tuple(extra))
                break  # the first FINAL wins; later blocks do not run
            if not result.ok or result.lost:
                unseen += max(1, result.output_chars)  # a failure is news the model has not read
                if pol.stop_at_error:
                    break  # later blocks were written assuming this one worked
                continue
            if runs[-1] not in loop.seen_runs:  # a run read before shows nothing new
                unseen += result.output_chars
        if candidate is None and text_final is not None:
            after_claim = plan.claimed and text_final.offset >= plan.cut
            candidate = self._text_candidate(text_final, sandbox, notes, iteration, loop, history,
                                             max(unseen, 1) if after_claim else unseen)
        if candidate is not None:
            text_call = [text_final.call] if candidate.source == "text" and text_final is not None else []
            judged = self._review(candidate, history, [c for c, _ in outputs] + text_call)
            if judged.answer is not None:
                return judged.answer
            notes.append(judged.note)
        kept = text
        if ran < len(plan.blocks) or plan.claimed:
            kept = text[:plan.blocks[ran - 1].end]
            if plan.claimed:
                notes.append(prompts.CLAIMED_OUTPUT)
                self._notice(f"text after block {ran} claimed its output; cut from the history"
                             + (f", {len(plan.blocks) - ran} later block(s) not run" if ran < len(plan.blocks) else ""))
            elif ran < len(plan.blocks):
                notes.append(prompts.later_blocks_skipped(len(plan.blocks) - ran))
        notes += loop.repetition_notes(self.policy, runs, outputs, self._notice)
        again = bool(runs) and runs == loop.last_runs
        loop.last_runs = runs
        loop.seen_runs.update(runs)
        # Output read from now on: a block that printed nothing (a FINAL sent back, an assignment)
        # showed nothing to rest an answer on, so a guess repeated after it is still a guess.
        loop.read_output = loop.read_output or any(o.strip() for _, o in outputs)
        # Under guided, a repeat replaces the turn it repeats (one copy, not a pattern to copy), but
        # from the second repeat in a row on the history grows: an identical request would get the
        # identical reply.
        history.add(Turn(iteration, kept, prompts.output_message(
            outputs, notes=notes, left=self.settings.max_iterations - iteration, question=self._question),
            codes=[c for c, _ in outputs], outputs=[o for _, o in outputs]),
            replace_last=pol.repeats and again and loop.repeat_streak < 2)
        stuck = (loop.repeat_streak and loop.repeat_streak % STUCK_REPEATS == 0) or (
            loop.error_streak and loop.error_streak % STUCK_ERRORS == 0)
        if pol.repeats and stuck and iteration < self.settings.max_iterations:
            return self._answer_when_stuck(iteration, history, sandbox, loop)
        return None

    def _run_block(self, sandbox: Sandbox, iteration: int, n: int, code: str, out_limit: int) -> tuple[ExecResult, str]:
        """Run block ``n`` of this turn; returns the result and what the model is shown of it."""
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
                        helpers=result.helpers, sources=[list(r) for r in result.sources],
                        default_caps=result.default_caps))
        self._last_output = shown
        return result, shown

    def _candidate(self, answer: str, written: bool, source: str, iteration: int, loop: LoopState,
                   history: History, unseen: int = 0, extra: tuple[str, ...] = ()) -> Candidate:
        """The :class:`Candidate` for an answer given on ``iteration``: what the model had read
        then about the corpus (the first message and every output in ``history``; not the
        system prompt, whose numbers and names say nothing of the corpus), whether it
        had read any REPL output, and the default caps of this turn and the one before. The
        outputs are taken without rlm's notes and tracebacks (``partial.model_output``): a
        traceback's ``line 1`` is no figure the corpus showed."""
        outputs = "\n".join(model_output(o) for t in history.turns for o in t.outputs)
        shown = "\n".join([history.first["content"], outputs])
        caps = loop.default_caps.get(iteration, []) + loop.default_caps.get(iteration - 1, [])
        own = [model_output(o) for t in history.turns if t.iteration > 0 for o in t.outputs]
        leads = "\n".join(o for t in history.turns if t.iteration == 0 for o in t.outputs)
        evidence = "\n".join([*own, quoted_corpus_text(leads)])
        return Candidate(self._question, answer, written, source, iteration, unseen, loop.read_output, shown,
                         tuple(dict.fromkeys(caps)), extra, outputs, evidence, any(o.strip() for o in own),
                         tuple(dict.fromkeys(loop.default_caps.get(iteration, []))))

    def _review(self, c: Candidate, history: History, codes_now: list[str] | None = None) -> Judged:
        """The checks' review of ``c``; an accepted answer gets its support verdict
        (``loop.support``) from the candidate as accepted, the checks it overruled and the code the
        model wrote in the run (``codes_now``: this turn's blocks, not yet in ``history``)."""
        judged = self._judge.review(c)
        if judged.answer is None or judged.candidate is None:
            return judged
        # the model's own code (iteration 0 is rlm's leads call, not the model's)
        codes = [code for t in history.turns if t.iteration > 0 for code in t.codes] + list(codes_now or [])
        support = support_of(judged.candidate, list(judged.overruled), codes, self.policy.number_floor)
        if (support.verdict == UNSUPPORTED and support.objections and self.policy.support_retry and self.depth == 0
                and not self._held and c.iteration < self.settings.max_iterations):
            # One last request to show it with code; the run ends on this answer if none comes.
            self._held, self._held_at = (judged.answer, support), c.iteration
            note = show_with_code(support.unsupported)
            self.emit(event("check", self.depth, check="support", verdict="send_back", iteration=c.iteration,
                            source=c.source, written_out=c.written_out, answer=judged.answer[:4_000], fired=1,
                            note=note, objections=list(support.objections)))
            return Judged(None, note)
        self._support = support
        return judged

    def _text_candidate(self, tf: reply.TextFinal, sandbox: Sandbox, notes: list[str], iteration: int,
                        loop: LoopState, history: History, unseen: int) -> Candidate | None:
        """The candidate a FINAL line of the text gives (``None``, with the reason in ``notes``,
        when it gives no answer). A literal is written out; a variable or expression is
        evaluated in the REPL after the reply's blocks ran (computed)."""
        value, written = text_final_value(sandbox, tf, notes, self._notice)
        if value is None:
            return None
        return self._candidate(value, written, "text", iteration, loop, history, unseen if written else 0)

    def _turn_without_code(self, iteration: int, text: str, text_final: reply.TextFinal | None,
                           history: History, sandbox: Sandbox, loop: LoopState) -> str | None:
        feedback: str
        loop.last_runs = []
        if text_final is not None:
            loop.no_code_streak = 0
            notes: list[str] = []
            candidate = self._text_candidate(text_final, sandbox, notes, iteration, loop, history, 0)
            if candidate is not None:
                judged = self._review(candidate, history, [text_final.call])  # the FINAL line's code
                if judged.answer is not None:
                    return judged.answer
                notes.append(judged.note)
            feedback = f"{notes[0]} Continue."
        elif reply.mentions_final(text):
            loop.no_code_streak = 0
            self._notice("FINAL mentioned in prose only; the model was told")
            feedback = prompts.PROSE_FINAL
        elif self.policy.prose_answers:
            answer, note = self._prose_answer(iteration, text, history, loop)
            if answer is not None:
                return answer
            feedback = note
        else:
            self._notice("reply had no code block and no FINAL; reminded the model of the format")
            feedback = prompts.FORMAT_REMINDER
        left = prompts.iterations_left(self.settings.max_iterations - iteration)
        history.add(Turn(iteration, text, f"{feedback}\n\n{left}\n\n{prompts.reminder(self._question)}"))
        return None

    def _prose_answer(self, iteration: int, text: str, history: History,
                      loop: LoopState) -> tuple[str | None, str]:
        """Guided: a reply without code or FINAL as the answer. The second such reply in a row is
        the answer when it reads as one (not a plan, a refusal or a question:
        ``reply.looks_like_answer``), as is the same prose answer given again turns apart, and on
        turn 1 a reply that quotes the leads' corpus lines. Returns ``(answer, "")`` or
        ``(None, note for the model)``."""
        loop.no_code_streak += 1
        answer, reads_as_answer = reply.without_notes(text).strip(), reply.looks_like_answer(text)
        said = norm(answer).lower()
        again = reads_as_answer and said in loop.prose_answers
        if reads_as_answer:
            loop.prose_answers.add(said)
        grounded = iteration == 1 and loop.no_code_streak == 1 and quotes_leads(text, loop.leads_text, self._question)
        if reads_as_answer and (loop.no_code_streak >= 2 or grounded or again):
            judged = self._review(self._candidate(answer, True, "prose", iteration, loop, history), history)
            if judged.answer is not None:
                self._notice("a reply without code that quotes the leads: taking it as the final answer" if grounded
                             else "two replies without code in a row: taking the reply as the final answer"
                             if loop.no_code_streak >= 2 else "the same answer in prose again: taking it as the final answer")
                return judged.answer, ""
            return None, judged.note
        if loop.no_code_streak >= 2:
            self._notice("reply without code does not answer the question; the model was told")
            return None, prompts.NOT_AN_ANSWER
        self._notice("reply had no code block; reminded the model of the format")
        return None, prompts.FORMAT_REMINDER

    def _answer_when_stuck(self, iteration: int, history: History, sandbox: Sandbox, loop: LoopState) -> str | None:
        """Guided: the model ran only code it had run before, with the same output,
        :data:`STUCK_REPEATS` turns in a row, or met the same error :data:`STUCK_ERRORS` turns
        in a row after its first (or a multiple of either; at most :data:`STUCK_ASKS` times a
        run). Ask, without the REPL and resampled, for its answer from the output it
        has seen (:data:`prompts.STUCK_ANSWER`); an answer (a FINAL, or text that reads as one)
        goes through the checks like any other (a computed one as computed; one saying nothing
        was found may be the truth). Otherwise the loop goes on, told to search differently or
        given the check's note. The exchange stays in the history."""
        if loop.stuck_asks >= STUCK_ASKS:
            return None
        loop.stuck_asks += 1
        self._notice(f"the model repeated itself {max(loop.repeat_streak, loop.error_streak + 1)} turns in a row; "
                     "asked for its answer")
        history.extend_last_feedback(prompts.STUCK_ANSWER)
        text = self._root_call(history, self.settings.model or "", loop.last_text, resample=True)
        answer, written = best_text(text, sandbox, self._last_output, self._notice)
        if not answer.startswith(NO_ANSWER_PREFIX):
            judged = self._review(self._candidate(answer, written, "stuck", iteration, loop, history), history)
            if judged.answer is not None:
                return judged.answer
            history.add(Turn(iteration, text, f"{judged.note}\n\n{prompts.reminder(self._question)}"))
            return None
        history.add(Turn(iteration, text, prompts.SEARCH_DIFFERENTLY))
        return None

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
            # The model's own code's output: not the leads rlm ran as turn 0 before any model call.
            outputs = next((t.outputs for t in reversed(history.turns) if t.outputs and t.iteration > 0), [])
            raise self._with_partial(exc, last_text, outputs) from None
        r = completion.record
        self.emit(event("root_call", self.depth, model=model, response=completion.text,
                        request_key=request_key(model, messages), request_tokens=fit.tokens or request_tokens(messages),
                        history={"verbatim": fit.verbatim, "compacted": fit.compacted, "omitted": fit.omitted,
                                 "truncated": fit.truncated},
                        input_tokens=r.input_tokens, output_tokens=r.output_tokens, cost_usd=r.cost_usd,
                        latency_s=round(r.latency_s, 3)))
        return completion.text

    def _best_answer(self, history: History, sandbox: Sandbox, model: str, loop: LoopState,
                     sub_calls_before: int, started: float) -> RunResult:
        """The iteration limit: one last call, without the REPL, for the best answer; raises."""
        s = self.settings
        history.extend_last_feedback(prompts.best_answer_prompt())
        try:
            best = self._root_call(history, model, loop.last_text)
        except BudgetExceededError:
            best = loop.last_text
        answer, _ = best_text(best, sandbox, self._last_output, self._notice)
        result = self._done(answer, "max_iterations", s.max_iterations, sub_calls_before, started)
        err = MaxIterationsError(f"no final answer after {plural(s.max_iterations, 'iteration')}",
                                 partial=result.answer, hint="raise --max-iterations or narrow the question")
        err.report.result = result
        raise err

    def _notice(self, message: str) -> None:
        self.emit(event("notice", self.depth, message=message))

    def _with_partial(self, exc: BudgetExceededError, last_reply: str, outputs: list[str]) -> BudgetExceededError:
        """``exc`` with the root loop's best partial answer (:func:`partial_answer` of its last
        reply and outputs). A sub-RLM leaves it alone: the budget error is one object shared by
        the whole tree, and the root loop, which re-raises it once the child's error reached its
        code, is the one whose answer the user asked for."""
        if self.depth == 0:
            exc.partial = partial_answer(last_reply, outputs)
        return exc

    def _done(self, answer: str, status: str, iterations: int, sub_calls_before: int, started: float) -> RunResult:
        if self.depth == 0 and status == "final":
            interrupts.final_in_hand()  # a Ctrl-C from now on must not lose it
        support = self._support if status == "final" else PARTIAL_SUPPORT
        result = RunResult(answer=answer, status=status, iterations=iterations,
                           sub_calls=self.client.usage.sub_calls - sub_calls_before,
                           elapsed_s=round(time.monotonic() - started, 3), depth=self.depth, policy=self.policy.name,
                           support=support)
        self.emit(event("final", self.depth, status=status, iterations=iterations, answer=answer,
                        answer_chars=len(answer), policy=self.policy.name, support=support.to_dict()))
        return result
