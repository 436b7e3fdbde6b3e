"""The REPL's model calls, as the worker's helpers: ``llm_query``, ``llm_query_batched``,
``llm_map`` and ``rlm_query``, each one or more requests to the parent's model relay
(``rlm_cli.sandbox.calls.relay``). Runs inside the sandbox: the standard library,
``rlm_cli.protocol`` and the worker's own modules only."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlm_cli.sandbox.calls import MODEL_NAME, as_list, payload_text, prompt_payload, to_text
from rlm_cli.sandbox.mapping import MAP_SIGNATURE, map_items
from rlm_cli.sandbox.observe import Observer


class SubCalls:
    """The model-call helpers of :class:`rlm_cli.sandbox.worker.Worker` (a base class): they
    use its relay (``_request``), its :class:`Observer` and its batch threads."""

    _request: Callable[[dict[str, Any]], str]
    observer: Observer
    _batches: int
    _batch_threads: int

    # -- model calls ---------------------------------------------------------------------------
    def llm_query(self, prompt: Any, *context: Any, model: str | None = None) -> str:
        """One sub-call: send ``prompt`` to the sub-model and return its text (or ``'Error: ...'``).

        Extra positional arguments are text to read, appended to the prompt
        (``llm_query("Summarise:", chunk)``); a short one without spaces that looks like a model
        name (``provider/model``) names the model instead, as in earlier releases.
        """
        parts = []
        for extra in context:
            if model is None and isinstance(extra, str) and MODEL_NAME.fullmatch(extra):
                model = extra
            else:
                parts.append(to_text(extra))
        if parts:
            prompt = "\n\n".join([to_text(prompt), *parts])
        return self._sub_call(prompt, model, None)

    def _sub_call(self, prompt: Any, model: str | None, batch: dict[str, int] | None) -> str:
        self.observer.count("llm_query")
        payload = prompt_payload(prompt)
        message: dict[str, Any] = {"type": "completion", "prompt": payload, "model": model}
        if batch is not None:
            message["batch"] = batch
        text = self._request(message)
        if not text.startswith("Error: "):  # the sub-model saw the prompt: its corpus slices are sources
            self.observer.note_text(payload_text(payload), "sub_call")
        return text

    def llm_query_batched(self, prompts: Any, *texts: Any, model: str | None = None) -> list[str]:
        """Many sub-calls at once (the parent caps concurrency); answers in input order.

        A failed prompt yields an ``'Error: ...'`` string at its position. ``prompts`` is a list;
        ``llm_query_batched(instruction, pieces)`` sends the instruction with each piece, and
        ``llm_query_batched(prompts, pieces)`` pairs them one to one.

        Raises:
            TypeError: a list of prompts and a list of pieces of different lengths.
        """
        if isinstance(prompts, str):
            prompts = [prompts] if not texts else [f"{prompts}\n\n{to_text(t)}" for t in as_list(texts[0])]
        else:
            prompts = list(prompts)
            if texts:
                pieces = as_list(texts[0])
                if len(pieces) != len(prompts):
                    raise TypeError(f"llm_query_batched(prompts, pieces): {len(prompts)} prompts but {len(pieces)} "
                                    "pieces; give one list of prompts, or an instruction and a list of pieces")
                prompts = [f"{to_text(p)}\n\n{to_text(t)}" for p, t in zip(prompts, pieces, strict=True)]
        if not prompts:
            return []
        self.observer.count("llm_query_batched")
        return self._send_batch(prompts, model)

    def _send_batch(self, prompts: list[Any], model: str | None) -> list[str]:
        """Sub-calls of ``prompts`` from at most ``--max-concurrency`` threads; answers in order."""
        self._batches += 1
        batch = {"id": self._batches, "size": len(prompts)}  # for the parent's progress line
        with ThreadPoolExecutor(max_workers=min(self._batch_threads, len(prompts))) as pool:
            return list(pool.map(lambda p: self._sub_call(p, model, batch), prompts))

    def llm_map(self, items: Any, instruction: Any = None, choices: Any = None, *, model: str | None = None,
                per_call: int | None = None, **unknown: Any) -> list[str | None]:
        """One answer to ``instruction`` per item of ``items``, from as few sub-calls as fit the
        sub-model's window (``rlm_cli.sandbox.mapping.map_items``: ``None`` where none came, said);
        with ``choices`` (labels, also the third argument) each answer is exactly one of them.

        Raises:
            TypeError: the instruction is missing or not a str, ``per_call`` no positive int,
                ``choices`` not at least two different strs, ``items`` not a list-like of items,
                or a keyword ``llm_map`` does not take (the message shows the call).
        """
        if unknown:
            raise TypeError(f"llm_map() takes no argument {next(iter(unknown))}=; it is called as {MAP_SIGNATURE}")
        self.observer.count("llm_map")
        return map_items(items, instruction, lambda: self._request({"type": "window", "model": model}),
                         lambda prompts: self._send_batch(prompts, model), per_call, model, choices)

    def rlm_query(self, prompt: str, context: Any = None) -> str:
        """A recursive sub-RLM over ``context`` (default: this REPL's ``context``) at depth + 1.

        At the depth limit the parent answers with a plain sub-call instead.
        """
        self.observer.count("rlm_query")
        payload = None if context is None else to_text(context)
        text = self._request({"type": "rlm_query", "prompt": str(prompt), "context": payload})
        if payload is not None and not text.startswith("Error: "):
            self.observer.note_text(payload, "rlm_query")
        return text
