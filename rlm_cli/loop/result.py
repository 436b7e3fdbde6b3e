"""The outcome of a run of the loop or of direct mode (:class:`RunResult`), and the policy a
run uses (:func:`policy_of`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlm_cli.config import Settings
from rlm_cli.loop.policy import PRESETS, Policy, resolve_policy
from rlm_cli.loop.support import Support
from rlm_cli.loop.typed import TypedValue


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
    #: The loop policy the run used (``paper``, ``standard`` or ``guided``).
    policy: str = ""
    #: What the answer rests on (``loop.support``); ``None`` where no loop judged it.
    support: Support | None = None
    #: The typed value of the answer (``--answer-type`` other than ``text``; ``None`` for text).
    typed: TypedValue | None = None


def policy_of(settings: Settings) -> Policy:
    """The policy a loop runs under: ``settings.policy`` when it names a preset (the session
    resolved ``auto`` already), else ``auto``'s choice for ``settings.root_model_window``."""
    if settings.policy in PRESETS:
        return PRESETS[settings.policy]
    window = settings.root_model_window
    return resolve_policy(settings.policy, window, "flag" if window else "default")[0]
