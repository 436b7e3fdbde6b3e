"""What a session decides about its model before a loop runs: the model, its input window, and
a question's answer type. The mode and the question as sent are the loop's
(``rlm_cli.loop.fitting``).
"""

from __future__ import annotations

from rlm_cli.answer_types import AnswerType
from rlm_cli.config import EXAMPLE_MODEL, Settings
from rlm_cli.corpus import Corpus
from rlm_cli.errors import NoModelError, RLMError
from rlm_cli.loop.typed import AnswerSpec
from rlm_cli.models.client import ModelClient
from rlm_cli.models.detect import DEFAULT_WINDOW

NO_MODEL_HINT = (f"set one with --model (e.g. --model {EXAMPLE_MODEL}), the RLM_MODEL environment variable, "
                 "or `rlm config set model MODEL`")


def require_model(settings: Settings) -> str:
    """The root model name.

    Raises:
        NoModelError: none configured.
    """
    if not settings.model:
        raise NoModelError("no model configured", hint=NO_MODEL_HINT)
    return settings.model


def model_window(client: ModelClient, model: str, override: int | None) -> tuple[int, str]:
    """The input window of ``model`` in tokens and where it came from: ``(override, "flag")``,
    the client's lookup (``ModelClient.input_window_source``: ``"flag"`` when a window flag names
    this model, ``"model info"`` from litellm's map, even when it equals the default), or
    ``(DEFAULT_WINDOW, "default")`` for a model litellm does not know (most local models)."""
    if override:
        return int(override), "flag"
    try:
        return client.input_window_source(model)
    except RLMError:
        return DEFAULT_WINDOW, "default"


def answer_spec(kind: str, corpus: Corpus | None) -> AnswerSpec:
    """The :class:`~rlm_cli.loop.typed.AnswerSpec` of a question whose answer has type ``kind``
    (its name) over ``corpus``: a ``locations`` answer is checked against its files and their line
    counts.

    Raises:
        ValueError: ``kind`` names no answer type.
    """
    answer_type = AnswerType(kind)
    if not answer_type.placed or corpus is None:
        return AnswerSpec(answer_type)
    return AnswerSpec(answer_type, {f.path: f.lines for f in corpus.files})
