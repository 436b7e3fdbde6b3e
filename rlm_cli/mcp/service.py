"""The main thread of ``rlm mcp``: the warm session (:class:`Service`) and the tools run over it,
one call at a time (see ``rlm_cli.mcp``). ``search`` and ``grep`` run as code blocks in the
session's REPL worker; ``ask`` is a session question whose events become progress messages.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlm_cli.app.session import Session
from rlm_cli.config import Settings
from rlm_cli.errors import PartialAnswerError, RLMError, UsageError
from rlm_cli.events import EventDict, depth_of, is_type
from rlm_cli.mcp.calls import Call, Calls, Result
from rlm_cli.mcp.tools import TOOL_NAMES, ref
from rlm_cli.models.budget import Budget
from rlm_cli.models.usage import Usage

if TYPE_CHECKING:
    from rlm_cli.models.backend import Backend
    from rlm_cli.output.documents import AskDocument
    from rlm_cli.output.ui import UI

#: Characters of a grep or search result document: longer ones drop their last rows (the
#: worker keeps the first 200,000 characters a block prints).
MAX_RESULT_CHARS = 150_000
#: Characters of a search result's ``preview`` (its chunk's first lines).
PREVIEW_CHARS = 400
#: Seconds between two progress messages of one sub-call batch (its start and end always go).
PROGRESS_INTERVAL_S = 0.5
#: The line the worker prints a helper's result document after.
_MARK = "\x1erlm-mcp\x1e"


class _ProgressNotes:
    """An ``emit`` target turning a run's events into progress messages: each root iteration
    (``iteration 2 of at most 20``) and each batch of sub-calls or sub-RLMs as it starts, every
    :data:`PROGRESS_INTERVAL_S` and when it ends (``iteration 2: sub-calls 4/8 done, 4 in flight``)."""

    def __init__(self, send: Callable[[str], None], max_iterations: int) -> None:
        self.send = send
        self.max_iterations = max_iterations
        self.iteration = 0
        self._last: dict[Any, float] = {}

    def __call__(self, ev: EventDict) -> None:
        depth = depth_of(ev)
        if is_type(ev, "iteration") and depth == 0:
            self.iteration = int(ev.get("iteration", 0))
            self.send(f"iteration {self.iteration} of at most {self.max_iterations}")
        elif is_type(ev, "progress") and ev.get("kind") in ("sub_calls", "sub_rlms"):
            group, now = ev.get("group"), time.monotonic()
            first = group not in self._last
            if not (first or ev.get("finished") or now - self._last[group] >= PROGRESS_INTERVAL_S):
                return
            self._last[group] = now
            what = "sub-calls" if ev["kind"] == "sub_calls" else "sub-RLMs"
            done, failed, flying = int(ev.get("done", 0)), int(ev.get("failed", 0)), int(ev.get("in_flight", 0))
            text = f"iteration {self.iteration}: {what} {done + failed}/{ev.get('total', 0)} done"
            text += f", {failed} failed" if failed else ""
            text += f", {flying} in flight" if flying else ""
            self.send(text + (f" (depth {depth})" if depth else ""))


def _helper_code(body: str) -> str:
    """A block running ``body`` (the inside of a function returning a JSON-able document) in the
    worker without leaving a variable behind, printing the document after :data:`_MARK` and
    dropping the last rows of its list while it is over :data:`MAX_RESULT_CHARS` characters."""
    inner = "\n".join("    " + line for line in body.strip().splitlines())
    return (f"def _rlm_mcp():\n    import json\n{inner}\n"
            "def _rlm_mcp_show():\n"
            "    import json\n"
            "    doc = _rlm_mcp()\n"
            "    rows = next((k for k in ('matches', 'results') if k in doc), None)\n"
            "    text = json.dumps(doc, ensure_ascii=False)\n"
            f"    while rows and len(text) > {MAX_RESULT_CHARS} and doc[rows]:\n"
            "        doc[rows] = doc[rows][:len(doc[rows]) * 3 // 4]\n"
            "        doc['truncated'] = True\n"
            "        text = json.dumps(doc, ensure_ascii=False)\n"
            f"    print({_MARK!r} + text)\n"
            "try:\n    _rlm_mcp_show()\nfinally:\n    del _rlm_mcp, _rlm_mcp_show\n")


def own_budget(session_budget: Budget, usage: Usage, settings: Settings, own: bool) -> Budget:
    """The budget of one served question (``app.session.QuestionBudget``): a fresh one over
    ``usage`` (the question's), started now, checked against the settings of the ask being served
    (``Service.ask`` gives them to ``Session.ask``)."""
    return Budget(settings, usage)


class Service:
    """The warm session and the tools over it, run by the main thread (see ``rlm_cli.mcp``).

    ``settings`` are the run flags (what the session decides when it opens is its ``plan``); ``ui`` is the ``render.Renderer`` of stderr; ``debug`` prints the traceback of an
    internal error there.
    """

    def __init__(self, settings: Settings, paths: list[str], *, host: Backend, ui: UI, debug: bool = False) -> None:
        self.settings = settings
        self.paths = paths
        self.host = host
        self.ui = ui
        self.debug = debug
        self.session: Any = None
        self.base: Settings | None = None
        self.stamp: Any = None
        #: Why the session could not open: every call answers it, and it is the exit code.
        self.failure: RLMError | None = None
        self.asks = 0

    # -- life ------------------------------------------------------------------------------------------
    def open(self) -> None:
        """Open the session: model, corpus, mode, windows, worker. An ``RLMError`` is kept in
        :attr:`failure` (and shown on stderr) instead of raised: the server still answers, with it."""
        from rlm_cli.app.session import INTERRUPT_GRACE_S
        from rlm_cli.corpus import watch

        try:
            self.stamp = watch.stamp(self.paths, self.settings.corpus)
            self.session = Session(self.settings, self.paths, emit=self.ui.on_event, backend=self.host,
                                   numbered=True, interrupt_grace_s=INTERRUPT_GRACE_S, question_budget=own_budget)
            self.session.independent = True
            self.session.open()
        except RLMError as exc:
            self.failure = exc
            self.ui.error(str(exc))
            return
        self.base = self.session.settings
        self.ui.info(f"rlm mcp: serving {len(self.session.corpus.files):,} files over stdio (tools: "
                     f"{', '.join(TOOL_NAMES)}); mode {self.session.mode}, model {self.session.plan.models.model}")

    def close(self) -> None:
        """Stop the worker and delete what the session made (idempotent)."""
        if self.session is not None:
            self.session.close()

    def serve(self, calls: Calls) -> None:
        """Serve calls until the protocol ends.

        Raises:
            KeyboardInterrupt: a real Ctrl-C (not a client's cancellation).
        """
        while True:
            try:
                call = calls.next()
                if call is None:
                    return
                self._serve_one(calls, call)
            except KeyboardInterrupt:
                if calls.shutdown:
                    raise
                # a cancellation that landed between two calls: nothing to stop

    def _serve_one(self, calls: Calls, call: Call) -> None:
        started = time.monotonic()
        result = Result(error="error: internal error: the call ended without a result")
        try:
            result = self.answer(call)
        except KeyboardInterrupt:
            if not call.interrupted:
                raise
            result = Result(error="error: interrupted (the client cancelled the call)")
            self.ui.info(f"[{call.id}] {call.tool}: cancelled by the client after {time.monotonic() - started:.2f} s")
        finally:
            calls.finish(call, result)
        if not call.interrupted:
            what = result.error or (f"status {result.payload.get('status')}" if result.payload and "status" in
                                    result.payload else "done")
            self.ui.info(f"[{call.id}] {call.tool}: {what} in {time.monotonic() - started:.2f} s")

    def answer(self, call: Call) -> Result:
        """Run one call: the corpus checked (and loaded again if files changed), then the tool.

        Raises:
            KeyboardInterrupt: the call was cancelled (or Ctrl-C).
        """
        if self.failure is not None:
            return Result(error=f"error: {self.failure}")
        tools = {"ask": self.ask, "search": self.search, "grep": self.grep, "corpus_info": self.corpus_info}
        try:
            self.refresh(call)
            return Result(payload=tools[call.tool](call))
        except RLMError as exc:
            return Result(error=f"error: {exc}")
        except Exception as exc:  # noqa: BLE001 - a bug: one line for the client, the server goes on
            if self.debug:
                import traceback

                traceback.print_exception(exc)
            return Result(error=f"error: internal error: {type(exc).__name__}: {exc} (rerun the server with "
                                "--debug for the traceback on its stderr, and report it)")

    def refresh(self, call: Call) -> None:
        """Load the corpus again when its files changed since the last check (``corpus.watch``).

        Raises:
            UsageError: a path is gone, or nothing readable is left (the corpus kept is the old one).
            SandboxError: the worker failed to restart on the new corpus.
        """
        from rlm_cli.corpus import load_corpus, watch
        from rlm_cli.events import event
        from rlm_cli.output.progress import index_callback

        now = watch.stamp(self.paths, self.settings.corpus)
        before, self.stamp = self.stamp, now
        if not watch.changed(before, now):
            return
        session = self.session
        started = time.monotonic()
        warn = lambda w: self.ui.on_event(event("notice", 0, message=w, level="warning"))  # noqa: E731
        try:
            corpus = load_corpus(self.paths, self.settings.corpus, on_warning=warn,
                                 on_progress=index_callback(self.ui.on_event))
        except BaseException:
            self.stamp = None  # check again next time
            raise
        old = session.corpus
        if corpus.digest == old.digest and corpus.data_digest == old.data_digest:
            corpus.release()  # the same text (a file touched, or re-hashed after a racy check)
            return
        session.use_corpus(corpus, time.monotonic() - started).release()
        note = f"the corpus changed: {corpus.summary()}"
        self.ui.info(note)
        call.progress(note)

    # -- tools -----------------------------------------------------------------------------------------
    def ask(self, call: Call) -> dict[str, Any]:
        """The ``ask`` tool (see ``tools.TOOLS``).

        Raises:
            UsageError, ProviderError, SandboxError...: the run failed (the CLI's errors).
            KeyboardInterrupt: cancelled.
        """
        from rlm_cli.output.documents import partial_document

        question = str(call.args["question"]).strip()
        if not question:
            raise UsageError("the question is empty")
        base, session = self.base, self.session
        assert base is not None
        limits: dict[str, Any] = {}
        if call.args.get("max_iterations") is not None:
            limits["max_iterations"] = min(int(call.args["max_iterations"]), base.max_iterations)
        if call.args.get("max_cost") is not None:
            cost = float(call.args["max_cost"])
            limits["max_cost"] = cost if base.max_cost is None else min(cost, base.max_cost)
        notes = _ProgressNotes(call.progress, limits.get("max_iterations", base.max_iterations))
        verbose = bool(getattr(self.ui, "verbose", False))

        def emit(ev: EventDict) -> None:
            notes(ev)
            if verbose or (is_type(ev, "notice") and ev.get("level") == "warning"):
                self.ui.on_event(ev)

        self.asks += 1
        started = time.monotonic()
        try:
            outcome = session.ask(question, emit=emit, qid=call.id, answer_type=str(call.args.get("answer_type") or "text"),
                                  settings=dataclasses.replace(base, **limits))
        except PartialAnswerError as exc:
            doc = partial_document(exc, session.level, round(time.monotonic() - started, 3))
            self.ui.close()
            self.ui.summary(doc)
            trace = doc.get("trace")
            return {**self._ask_fields(doc), "partial": True, "budget": doc.get("budget"),
                    "reason": str(exc), "trace_id": Path(trace).stem if trace else "", "trace": trace}
        finally:
            self.ui.close()
        from rlm_cli.output.documents import outcome_document

        doc = outcome_document(outcome, round(time.monotonic() - started, 3))
        self.ui.summary(doc)
        typed: dict[str, Any] = {k: doc[k] for k in ("answer_type", "value", "value_problem", "dropped") if k in doc}
        return {**self._ask_fields(doc), "partial": False, "trace_id": outcome.run_id, "trace": doc.get("trace"),
                **typed}

    @staticmethod
    def _ask_fields(doc: AskDocument) -> dict[str, Any]:
        """The fields of an ``ask`` result taken from an ``rlm ask --json`` document."""
        sources = doc.get("sources") or []
        return {"answer": doc.get("answer") or "", "status": doc["status"], "support": doc.get("support") or {},
                "sources": [ref(s["path"], s["start_line"], s["end_line"]) for s in sources],
                "cited": [ref(s["path"], s["start_line"], s["end_line"]) for s in sources if s.get("cited")],
                "sources_omitted": int(doc.get("sources_omitted") or 0), "iterations": int(doc.get("iterations") or 0),
                "sub_calls": int(doc.get("sub_calls") or 0), "usage": doc.get("usage") or {},
                "elapsed_s": doc.get("elapsed_s", 0.0), "mode": doc.get("mode") or "rlm"}

    def grep(self, call: Call) -> dict[str, Any]:
        """The ``grep`` tool: ``grep`` of the REPL in the session's worker.

        Raises:
            UsageError: a bad regular expression, or the block timed out.
        """
        pattern = str(call.args["pattern"])
        try:
            re.compile(pattern, re.MULTILINE)
        except (re.error, RecursionError, OverflowError) as exc:  # RecursionError: '(' x 10,000
            why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            shown = repr(pattern) if len(pattern) <= 80 else f"{pattern[:80]!r}... ({len(pattern):,} characters)"
            raise UsageError(f"bad regular expression {shown}: {why}") from None
        n = int(call.args.get("max_results") or 100)
        body = (f"hits = grep({pattern!r}, path_glob={call.args.get('path_glob')!r}, "
                f"ignore_case={bool(call.args.get('ignore_case'))!r}, max_results={n + 1})\n"
                "rows = []\n"
                f"for h in hits[:{n}]:\n"
                "    row = {'path': h['file'], 'line': h['line'], 'text': h['text']}\n"
                "    if 'in' in h:\n"
                "        row['in'] = h['in']\n"
                "    rows.append(row)\n"
                f"return {{'matches': rows, 'truncated': len(hits) > {n}}}")
        return self._run_helper("grep", body)

    def search(self, call: Call) -> dict[str, Any]:
        """The ``search`` tool: ``search`` of the REPL in the session's worker, with previews.

        Raises:
            UsageError: the block failed or timed out.
        """
        k = int(call.args.get("k") or 10)
        body = (f"hits = search({str(call.args['query'])!r}, k={k}, path_glob={call.args.get('path_glob')!r})\n"
                "rows = []\n"
                "for h in hits:\n"
                "    lines = chunk_text(h['chunk']).splitlines()\n"
                f"    preview = '\\n'.join(lines[:8])[:{PREVIEW_CHARS}]\n"
                "    rows.append({'ref': h['file'] + ':' + str(h['start_line']) + ('-' + str(h['end_line']) "
                "if h['end_line'] != h['start_line'] else ''), 'path': h['file'], 'start_line': h['start_line'], "
                "'end_line': h['end_line'], 'score': h['score'], 'preview': preview})\n"
                "return {'results': rows}")
        return self._run_helper("search", body)

    def _run_helper(self, tool: str, body: str) -> dict[str, Any]:
        """Run a helper's block in the session's worker (started when the session is in direct
        mode and has none yet) and return the document it printed.

        Raises:
            UsageError: the helper raised (its error), or the block timed out or the worker crashed.
        """
        lane = self.session.worker_lane()
        lane.fresh_if_hooked(self.ui.on_event)  # an earlier ask's code must not rewrite this result
        result = lane.sandbox.execute(_helper_code(body), cell=0, map_output=False)
        if result.lost:
            raise UsageError(f"{tool} stopped: {result.lost}", hint="narrow the pattern or raise --cell-timeout")
        head, mark, text = result.output.partition(_MARK)
        if not mark:
            last = (head.strip().splitlines() or ["no output"])[-1]
            raise UsageError(f"{tool} failed: {last}")
        return dict(json.loads(text.splitlines()[0]))

    def corpus_info(self, call: Call) -> dict[str, Any]:
        """The ``corpus_info`` tool (no model call, no worker)."""
        import os

        from rlm_cli.corpus.stats import corpus_stats

        session = self.session
        corpus = session.corpus
        doc = corpus_stats(corpus, top=10)
        plan = session.plan if self.base is not None else None
        model = plan.models.model if plan is not None else self.settings.model
        sub_model = plan.models.effective_sub_model if plan is not None else self.settings.effective_sub_model
        return {"paths": [os.path.abspath(p) for p in self.paths], "files": doc["files"], "bytes": doc["bytes"],
                "chars": corpus.chars, "tokens": doc["tokens"], "chunks": doc["chunks"], "by_type": doc["by_type"],
                "largest": doc["largest"], "kinds": doc["kinds"], "skipped": doc["skipped"],
                "summary": corpus.summary(), "mode": session.mode, "model": model,
                "sub_model": sub_model, "sandbox": session.level, "asks": self.asks}
