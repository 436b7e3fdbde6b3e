"""One question, start to end: ``ask(settings, paths, question, emit=...)`` loads the corpus at
``paths``, answers and returns an :class:`~rlm_cli.app.outcome.AskOutcome` or raises an
``RLMError`` (a one-question :class:`~rlm_cli.app.session.Session`). The commands stay thin and
the core can be driven from tests or other programs (``rlm eval``, ``rlm replay``). Every run
writes a trajectory (``rlm_cli.output.trace``) unless ``record=False``.
"""

from __future__ import annotations

from rlm_cli.app.outcome import AskOutcome
from rlm_cli.app.session import Session
from rlm_cli.config import Settings
from rlm_cli.corpus import Corpus
from rlm_cli.events import Emit
from rlm_cli.models.backend import Backend
from rlm_cli.models.client import ModelClient


def ask(settings: Settings, paths: list[str], question: str, *, emit: Emit, stdin_bytes: bytes | None = None,
        client: ModelClient | None = None, record: bool = True, corpus: Corpus | None = None,
        backend: Backend | None = None, hold_final: bool = False, answer_type: str = "text") -> AskOutcome:
    """Load the corpus at ``paths`` and answer ``question`` (RLM loop or direct, per ``settings.mode``):
    a one-question ``session.Session``.

    ``client`` replaces the litellm client (replay passes one that answers from a trajectory);
    ``backend`` is where litellm runs (``models.host.HostBackend``; default: this process);
    ``record`` writes the trajectory to ``settings.trace`` or a new file under ``traces_dir()``;
    ``corpus`` is an already loaded corpus for ``paths`` (``rlm eval`` passes derived ones), which
    the caller keeps and deletes. ``hold_final``: a final answer keeps Ctrl-C dropped after this
    returns (``rlm_cli.interrupts``), for a caller that only delivers it and exits. ``answer_type``:
    the type the answer must have (``rlm_cli.loop.typed``).

    Raises:
        UsageError / EmptyCorpusError: bad paths or nothing to read.
        NoModelError: no model configured.
        PartialAnswerError / BudgetExceededError: stopped without a final answer (partial inside;
            ``trace_path`` attached).
        ProviderError: the provider failed.
    """
    with Session(settings, paths, emit=emit, stdin_bytes=stdin_bytes, backend=backend, client=client,
                 corpus=corpus, record=record) as session:
        session.hold_final = hold_final
        session.open(question)
        return session.ask(question, emit=emit, answer_type=answer_type)
