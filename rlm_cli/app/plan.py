"""A session's run plan: what ``Session.open`` decided, made once and carried frozen.

The :class:`~rlm_cli.config.Settings` a session is given say what the user asked for (flags >
environment > config file); they are never written after that. What the session decides from
them when it opens (the model and sub-model, found by autodetection when none is set; their
input windows and where each came from; the loop's policy; the mode rule, and the mode it gives
over the corpus, with its reason; the sandbox level) is a :class:`RunPlan`. A question's model client is given the plan's windows as resolved
(:meth:`RunPlan.windows`: a window from litellm's map stays ``"model info"``, not a flag). The
loop takes a ``Settings`` (its one parameter object, which it also hands to the sub-RLMs it
starts): each question gets :meth:`RunPlan.settings_for`, a new copy with the plan's decisions
in it, made with ``dataclasses.replace`` and read only; the session's own settings stay as they
were given (``tests/app/test_plan.py``). The rules for the model's name (:func:`require_model`)
and an input window (:func:`model_window`) are here too: ``rlm ask --estimate`` and an audit check
with a model of its own follow them without a plan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from rlm_cli.config import EXAMPLE_MODEL, Settings
from rlm_cli.errors import NoModelError, RLMError
from rlm_cli.loop.fitting import choose_mode
from rlm_cli.loop.policy import Policy, resolve_policy
from rlm_cli.models.client import ModelClient
from rlm_cli.models.detect import DEFAULT_WINDOW, ensure_model
from rlm_cli.sandbox.level import Level

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


@dataclass(frozen=True)
class Window:
    """A model's input window: ``tokens``, and where that number came from: ``"flag"``
    (``--root-model-window`` / ``--sub-model-window``), ``"model info"`` (litellm's map) or
    ``"default"`` (a model litellm does not know: ``models.detect.DEFAULT_WINDOW``)."""

    tokens: int
    source: str


@dataclass(frozen=True)
class ModelChoice:
    """The models a run uses: ``model`` (root), ``sub_model`` (``None``: the root model answers
    sub-calls too) and ``api_base``, each as configured or else as autodetected
    (``models.detect.ensure_model``)."""

    model: str
    sub_model: str | None
    api_base: str | None

    @property
    def effective_sub_model(self) -> str:
        """The model that answers sub-calls."""
        return self.sub_model or self.model

    def settings_for(self, settings: Settings) -> Settings:
        """A copy of ``settings`` with these models (``settings`` itself is not changed)."""
        return dataclasses.replace(settings, model=self.model, sub_model=self.sub_model, api_base=self.api_base)


@dataclass(frozen=True)
class Opening:
    """What ``Session.open`` decides before the corpus loads and the plan can be made: the
    ``models`` and the sandbox ``level`` (``level_warning``: what is said when ``auto`` could
    not get the strongest one). The plan repeats both; the worker, which may start before the
    plan exists, reads them here."""

    models: ModelChoice
    level: Level
    level_warning: str | None = None


@dataclass(frozen=True)
class RunPlan:
    """Everything ``Session.open`` decided (see the module docstring).

    ``models``: root and sub-model; ``root_window`` / ``sub_window``: their input windows;
    ``policy``: the loop's rules (``requested``: the ``--policy`` value it came from, ``auto``
    by default; ``policy_reason``: why); ``mode_rule``: ``--mode`` (``auto``, ``rlm`` or
    ``direct``: each question's mode follows from it and the corpus); ``mode`` and
    ``mode_reason``: the session's mode over its corpus (``rlm`` or ``direct``, from the mode
    rule, the corpus and the first question: :func:`session_mode`) and why; ``level``: the sandbox
    level (``level_warning``: what was said when ``auto`` could not get the strongest one). A new
    corpus (``rlm mcp`` after files changed) is a new plan (:meth:`over_corpus`).
    """

    models: ModelChoice
    root_window: Window
    sub_window: Window
    policy: Policy
    policy_requested: str
    policy_reason: str
    mode_rule: str
    level: Level
    level_warning: str | None = None
    mode: str = "rlm"
    mode_reason: str = ""

    def settings_for(self, settings: Settings) -> Settings:
        """A copy of ``settings`` with the plan's decisions (models, windows, the policy's name)
        for code that reads them from settings. A window ``settings`` already sets (``rlm
        audit``: a check's own model) is kept. ``settings`` itself is not changed."""
        return dataclasses.replace(
            settings, model=settings.model or self.models.model,
            sub_model=settings.sub_model or self.models.sub_model,
            api_base=settings.api_base or self.models.api_base,
            root_model_window=settings.root_model_window or self.root_window.tokens,
            sub_model_window=settings.sub_model_window or self.sub_window.tokens, policy=self.policy.name)

    def question_mode(self, needed: int) -> tuple[str, str]:
        """``(mode, reason)`` of a question whose direct request would need ``needed`` tokens (the
        corpus, the question and its note): the plan's (:func:`stays_in_repl`)."""
        return stays_in_repl(self.mode, self.mode_reason, self.mode_rule, needed, self.root_window.tokens)

    def over_corpus(self, settings: Settings, corpus_tokens: int) -> RunPlan:
        """This plan over a new corpus of ``corpus_tokens`` tokens: its mode chosen again
        (``loop.fitting.choose_mode``); every other decision kept."""
        mode, reason = choose_mode(settings, corpus_tokens, self.root_window.tokens)
        return dataclasses.replace(self, mode=mode, mode_reason=reason)

    def windows(self) -> dict[str, tuple[int, str]]:
        """``{model: (tokens, source)}`` of the root and sub-model, for a model client
        (``ModelClient(windows=...)``) that must report them as resolved, not as flags. The
        sub-model's entry wins when both are one model (the client's own order)."""
        return {self.models.model: (self.root_window.tokens, self.root_window.source),
                self.models.effective_sub_model: (self.sub_window.tokens, self.sub_window.source)}

    def mode_fields(self) -> dict[str, object]:
        """The fields of the ``mode`` event that come from the plan (windows and policy)."""
        return {"root_window": self.root_window.tokens, "root_window_source": self.root_window.source,
                "sub_window": self.sub_window.tokens, "sub_window_source": self.sub_window.source,
                "policy": self.policy.name, "policy_requested": self.policy_requested,
                "policy_reason": self.policy_reason}


def choose_models(settings: Settings, notify: Callable[[str], None]) -> ModelChoice:
    """The models of a run over ``settings``: as configured, or autodetected (``notify`` gets the
    line that says which and why; ``models.detect.ensure_model``).

    Raises:
        NoModelError: none configured and none detected.
    """
    chosen = ensure_model(settings, notify)
    return ModelChoice(require_model(chosen), chosen.sub_model, chosen.api_base)


def stays_in_repl(mode: str, reason: str, mode_rule: str, needed: int, window: int) -> tuple[str, str]:
    """``(mode, reason)``: ``mode`` and its ``reason``, except that under ``--mode auto`` a
    question whose direct request needs ``needed`` tokens, over half the root model's input
    ``window``, stays in the REPL (``rlm``)."""
    if mode == "direct" and mode_rule == "auto" and needed > window // 2:
        return "rlm", (f"the corpus is small, but with the question it needs {needed:,} tokens, over half "
                       f"the root model's window of {window:,}, so it stays in the REPL")
    return mode, reason


def session_mode(settings: Settings, corpus_tokens: int, window: int, needed: int) -> tuple[str, str]:
    """``(mode, reason)`` of a session over a corpus of ``corpus_tokens`` tokens whose first
    question's direct request would need ``needed`` tokens (``loop.fitting.choose_mode``, then
    :func:`stays_in_repl`), for a root model of input ``window`` tokens.

    Raises:
        UsageError: ``settings.mode`` is not a mode.
    """
    mode, reason = choose_mode(settings, corpus_tokens, window)
    return stays_in_repl(mode, reason, settings.mode, needed, window)


def make_plan(settings: Settings, client: ModelClient, models: ModelChoice, level: Level,
              level_warning: str | None = None, *, corpus_tokens: int, needed: int) -> RunPlan:
    """The run plan of ``settings``: ``models`` with their input windows (``--root-model-window``
    / ``--sub-model-window``, or ``client``'s lookup: :func:`model_window`), the policy they
    lead to (``loop.policy.resolve_policy``), the mode rule and the mode it gives over a corpus of
    ``corpus_tokens`` tokens whose first question needs ``needed`` tokens sent directly
    (:func:`session_mode`), and the sandbox ``level``.

    Raises:
        UsageError: a bad ``--mode`` or ``--policy``.
    """
    root_window = Window(*model_window(client, models.model, settings.root_model_window))
    sub_window = Window(*model_window(client, models.effective_sub_model, settings.sub_model_window))
    policy, policy_reason = resolve_policy(settings.policy, root_window.tokens, root_window.source)
    mode, mode_reason = session_mode(settings, corpus_tokens, root_window.tokens, needed)
    return RunPlan(models, root_window, sub_window, policy, settings.policy, policy_reason, settings.mode, level,
                   level_warning, mode, mode_reason)
