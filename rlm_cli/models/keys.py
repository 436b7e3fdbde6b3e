"""Where a key may go, and whether the models of a run have the keys litellm needs.

A key or an API base the invoker gave (``--api-key``, ``--api-base``, ``RLM_API_KEY``,
``RLM_API_BASE``, the config file) is meant for the models the invoker named: the root and the
sub-model. :func:`key_travels` is the one rule a request follows (``models.sending``): the key
and the base go with a model only when it is one of those, or has the same explicit provider
(``openai/...``, ``anthropic/...``: the part before the first ``/``). Any other model (one an
``rlm audit`` checklist chose under ``--allow-checklist-models``) gets neither: litellm then
sends it to its own provider's endpoint with that provider's own key from the environment, if
any, so ``--api-key sk-...`` never reaches whoever listens on Ollama's 127.0.0.1:11434 because a
checklist said ``model = "ollama_chat/x"``.

:func:`missing_credentials` asks, before a run loads anything, whether each of its models has
a key: one given that travels with it, an API base (a local server needs none), the provider's
variable of :data:`~rlm_cli.models.detect.PROVIDER_DEFAULTS` in the environment, and else
litellm's own ``validate_environment`` in the model host (``HostBackend.missing_keys``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from rlm_cli.models.detect import PROVIDER_DEFAULTS


def provider_of(model: str) -> str | None:
    """The explicit provider of a litellm model string (``"openai"`` of ``"openai/gpt-5"``,
    lower-cased), ``None`` for a bare name (``"gpt-5"``: litellm guesses its provider)."""
    head, sep, _ = model.partition("/")
    return (head.strip().lower() or None) if sep else None


def key_travels(model: str, named: Iterable[str | None]) -> bool:
    """Whether the invoker's key and API base go with a request for ``model``: it is one of the
    ``named`` models (root, sub-model), or has the explicit provider of one of them. A bare name
    matches only itself (its provider is litellm's guess, which may be any)."""
    names = [m for m in named if m]
    if model in names:
        return True
    provider = provider_of(model)
    return provider is not None and any(provider_of(m) == provider for m in names)


#: The environment variable of each provider rlm detects (``openai`` -> ``OPENAI_API_KEY``).
PROVIDER_KEYS: dict[str, str] = {root.split("/", 1)[0]: var for var, _, root, _ in PROVIDER_DEFAULTS}


def missing_credentials(models: Iterable[str], *, named: Iterable[str | None], api_key: str | None,
                        api_base: str | None, backend: Any, router_groups: Iterable[str] = (),
                        environ: Mapping[str, str] | None = None) -> list[tuple[str, list[str]]]:
    """``[(model, variables it lacks)]`` for each of ``models`` that has no key litellm could
    send: not a Router group (its deployments carry their own), not going to an API base the
    invoker gave, no ``api_key`` that travels with it (:func:`key_travels`), not its provider's
    variable in ``environ`` (:data:`PROVIDER_KEYS`), and litellm's ``validate_environment``
    (asked through ``backend.missing_keys``, when the backend has it) lists a missing
    ``*_API_KEY`` variable. Other missing settings (``OLLAMA_API_BASE``, cloud credentials that
    a file may hold) are not counted: litellm has defaults or other sources for them.

    Raises:
        HostUnavailable: the model host could not use litellm (only when it had to be asked).
    """
    env = os.environ if environ is None else environ
    groups, named = set(router_groups), list(named)
    ask = getattr(backend, "missing_keys", None)
    out: list[tuple[str, list[str]]] = []
    for model in dict.fromkeys(models):
        travels = key_travels(model, named)
        if model in groups or (travels and (api_key or api_base)):
            continue
        var = PROVIDER_KEYS.get(provider_of(model) or "")
        if var and env.get(var) or not callable(ask):
            continue
        lacking = [name for name in ask(model) if name.endswith("_API_KEY")]
        if lacking:
            out.append((model, lacking))
    return out
