"""Values the shell completes (``rlm --install-completion``): the words an option takes, the models
named in the config file and the environment, and the ids of recorded runs.

Each function is a typer ``autocompletion`` callback: ``(incomplete) -> [(value, help)]``. They run
in the shell's completion request, so they stay light: no litellm, no corpus, nothing written.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from rlm_cli.answer_types import NAMES
from rlm_cli.config_keys import CHOICES

#: ``--color``'s words.
COLORS = ("auto", "always", "never")
#: ``--answer-type``'s words (``rlm_cli.answer_types``, which imports nothing: completion stays light).
ANSWER_TYPES = NAMES
#: ``rlm audit --fail-on``'s words.
SEVERITIES = ("error", "warning", "note")
#: Trajectories offered, newest first.
MAX_TRACES = 50


def words(choices: tuple[str, ...]) -> Callable[[str], list[str]]:
    """A completer of the words ``choices`` that start with what was typed."""
    def complete(incomplete: str) -> list[str]:
        return [w for w in choices if w.startswith(incomplete)]
    return complete


def choice(key: str) -> Callable[[str], list[str]]:
    """A completer of the words the setting ``key`` takes (``config_keys.CHOICES``)."""
    return words(CHOICES[key])


def models(incomplete: str) -> list[tuple[str, str]]:
    """Model names to offer: the config file's ``model`` and ``sub_model``, ``RLM_MODEL`` and
    ``RLM_SUB_MODEL`` (a broken config file offers nothing)."""
    from rlm_cli.config import read_config_file

    found: dict[str, str] = {}
    try:
        values = read_config_file()
    except Exception:  # noqa: BLE001 - completion never fails the shell
        values = {}
    for key, where in (("model", "config"), ("sub_model", "config")):
        if isinstance(values.get(key), str):
            found.setdefault(values[key], f"{where}: {key}")
    for var in ("RLM_MODEL", "RLM_SUB_MODEL"):
        if os.environ.get(var):
            found.setdefault(os.environ[var], f"env {var}")
    return [(m, why) for m, why in found.items() if m.startswith(incomplete)]


def trace_ids(incomplete: str) -> list[tuple[str, str]]:
    """``last`` and the run ids of the newest recorded trajectories."""
    from rlm_cli.output.trace import traces_dir

    out = [("last", "the newest run")] if "last".startswith(incomplete) else []
    try:
        paths = sorted(traces_dir().glob("*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return out
    for path in paths[:MAX_TRACES]:
        if path.stem.startswith(incomplete):
            out.append((path.stem, "a recorded run"))
    return out
