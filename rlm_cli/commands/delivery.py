"""Where answers and documents go: stdout, or ``--output`` FILE atomically (``ask``, ``replay``)."""

from __future__ import annotations

import json
from typing import Any

from rlm_cli.commands.invocation import INVOCATION
from rlm_cli.errors import PartialAnswerError


def batch_writer(json_out: bool, cite: bool, ui: Any, total: int) -> tuple[Any, Any]:
    """``(write(doc, result), finish())``: each question's document (a JSON line) or answer under
    a header goes to stdout as it completes, or, with ``--output``, into FILE at the end."""
    from rlm_cli.app.batch import header
    from rlm_cli.output import answer
    from rlm_cli.output.documents import answer_text

    kept: list[str] = []
    count = [0]

    def write(doc: dict[str, Any], result: Any) -> None:
        count[0] += 1
        if result.error is not None and not isinstance(result.error, PartialAnswerError):
            ui.error(f"question [{result.question.id}]: {result.error}")
        else:
            ui.summary(doc)
            if result.error is not None:
                ui.warning(f"question [{result.question.id}]: {result.error.message}; the answer is PARTIAL")
        if json_out:
            text = json.dumps(doc, ensure_ascii=False, default=str) + "\n"
        else:
            why = doc.get("error") or (result.error.message if result.error is not None else "")
            body = answer_text(doc, cite) if doc.get("answer") else f"(no answer: {why})\n"
            text = ("\n" if count[0] > 1 else "") + header(result.question) + "\n" + body
        if INVOCATION.output_path is None:
            answer.write_text(text)
        else:
            kept.append(text)

    def finish() -> None:
        if INVOCATION.output_path is not None:
            from rlm_cli.output.outfile import write_atomic

            write_atomic(INVOCATION.output_path, "".join(kept))
            ui.info(f"wrote {INVOCATION.output_path}")
    return write, finish



def deliver(doc: dict[str, Any], json_out: bool, cite: bool, ui: Any) -> None:
    """The document (``--json``) or the answer (with its sources under ``--cite``) to stdout, or
    to ``--output`` atomically."""
    from rlm_cli.output import answer
    from rlm_cli.output.documents import answer_text

    text = answer.json_text(doc) if json_out else answer_text(doc, cite)
    if INVOCATION.output_path is None:
        answer.write_text(text)
        return
    from rlm_cli.output.outfile import write_atomic

    write_atomic(INVOCATION.output_path, text)
    ui.info(f"wrote {INVOCATION.output_path}")


def emit_partial(exc: PartialAnswerError, ui: Any, json_out: bool, settings: Any, elapsed: float, *,
                  cite: bool = False) -> None:
    from rlm_cli.output.documents import partial_document

    doc = partial_document(exc, settings.sandbox, elapsed)
    ui.summary(doc)
    if json_out:
        deliver(doc, True, False, ui)
    elif exc.partial:
        deliver(doc, False, cite, ui)

