"""Which model to use: autodetection when none is configured, and what litellm knows about a
model (input window, whether its price is known).

Order of :func:`ensure_model` (after flags > environment > config file, see ``config.resolve``):

1. an ``--api-base`` / ``RLM_API_BASE`` without a model: the first model its ``GET /models`` lists;
2. a provider key in the environment, first of ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``,
   ``GEMINI_API_KEY``, ``OPENROUTER_API_KEY`` (see :data:`PROVIDER_DEFAULTS`);
3. a local Ollama server (``GET /api/tags`` on 127.0.0.1:11434);
4. a local OpenAI-compatible server (``GET /v1/models``) on 127.0.0.1, ports 8080 (llama.cpp),
   1234 (LM Studio), 8000 (vLLM), 8765.

Probes only ever reach loopback addresses, with short timeouts, in parallel. For tests and odd
setups, ``RLM_PROBE_OLLAMA`` (``host:port``, a URL, or ``off``) and ``RLM_PROBE_PORTS``
(comma-separated ports, or ``off``) replace the probed addresses.

Nothing here imports litellm at module level; the model-info helpers take the module.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import socket
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rlm_cli.config import EXAMPLE_MODEL, Settings
from rlm_cli.errors import NoModelError

#: ``(environment variable, provider name, root model, cheaper sub-model)`` in detection order.
#: Names are current models of litellm's bundled price map (checked by ``tests/models/test_models.py``),
#: except OpenRouter's, which that map does not price (their cost shows as unknown).
PROVIDER_DEFAULTS: tuple[tuple[str, str, str, str], ...] = (
    ("OPENAI_API_KEY", "OpenAI", "openai/gpt-5.4", "openai/gpt-5.4-mini"),
    ("ANTHROPIC_API_KEY", "Anthropic", "anthropic/claude-sonnet-4-6", "anthropic/claude-haiku-4-5"),
    ("GEMINI_API_KEY", "Gemini", "gemini/gemini-3.5-flash", "gemini/gemini-3.5-flash-lite"),
    ("OPENROUTER_API_KEY", "OpenRouter", "openrouter/anthropic/claude-sonnet-4.6",
     "openrouter/anthropic/claude-haiku-4.5"),
)

#: Default Ollama address probed.
OLLAMA_DEFAULT = "127.0.0.1:11434"
#: Default ports probed for an OpenAI-compatible server: llama.cpp, LM Studio, vLLM, and 8765.
OPENAI_COMPATIBLE_PORTS: tuple[int, ...] = (8080, 1234, 8000, 8765)
#: Seconds one probe may take (connection refused answers at once on loopback).
PROBE_TIMEOUT_S = 0.5

#: Input window (tokens) assumed for a model litellm does not know and no flag declares. Local
#: servers are often run with 8-32k contexts; pass ``--sub-model-window`` for larger ones.
DEFAULT_WINDOW = 32_768

Notify = Callable[[str], None]


@dataclass
class Detection:
    """An autodetected model: litellm strings for root and sub-model, the base URL, and a
    human sentence saying why (shown on stderr)."""

    model: str
    sub_model: str | None
    api_base: str | None
    reason: str


def ensure_model(settings: Settings, notify: Notify | None = None, *,
                 env: Mapping[str, str] | None = None) -> Settings:
    """``settings`` with a model (and sub-model / api base) found by autodetection when none is
    set: a new copy (``dataclasses.replace``); ``settings`` itself is not changed. ``settings``
    as they are when they name a model.

    ``notify`` receives one line saying what was picked and why.

    Raises:
        NoModelError: nothing configured and nothing detected; the message lists the ways.
    """
    if settings.model:
        return settings
    if settings.api_base:  # the user named a server: its list, or a message naming it
        ids, why = openai_models(settings.api_base, timeout=2.0, api_key=settings.api_key)
        if not ids:
            raise NoModelError(f"no model configured, and {settings.api_base.rstrip('/')}/models (the API base "
                               f"given) did not list one: {why}",
                               hint=f"pass --model openai/NAME with the name that server serves (e.g. --model "
                                    f"{EXAMPLE_MODEL}), or check --api-base")
        found: Detection | None = Detection(f"openai/{ids[0]}", None, None,
                                            f"first model listed by {settings.api_base}")
    else:
        found = detect(settings, env=env)
    if found is None:
        raise NoModelError("no model configured and none detected", hint=no_model_hint(env))
    new_sub = not settings.sub_model and found.sub_model and found.sub_model != found.model
    settings = dataclasses.replace(settings, model=found.model,
                                   sub_model=found.sub_model if new_sub else settings.sub_model,
                                   api_base=found.api_base if found.api_base and not settings.api_base
                                   else settings.api_base)
    if notify:
        sub = f", sub-calls {settings.sub_model}" if settings.sub_model else ""
        notify(f"model: {settings.model}{sub} ({found.reason}; set --model or `rlm config set model` to choose)")
    return settings


def no_model_hint(env: Mapping[str, str] | None = None) -> str:
    """The ways to configure a model, for the exit-3 message."""
    ollama, ports = probe_targets(env)
    where = []
    if ollama:
        where.append(f"Ollama on {ollama}")
    if ports:
        where.append("an OpenAI-compatible server on 127.0.0.1 port " + "/".join(str(p) for p in ports))
    local = f", or start {' or '.join(where)}" if where else ""
    keys = ", ".join(var for var, *_ in PROVIDER_DEFAULTS)
    return (f"pass --model (e.g. --model {EXAMPLE_MODEL}), set RLM_MODEL, run `rlm config set model MODEL`, "
            f"export a provider key ({keys}){local}")


def detect(settings: Settings, *, env: Mapping[str, str] | None = None,
           timeout: float = PROBE_TIMEOUT_S) -> Detection | None:
    """The first model found in the order of the module docstring, or ``None``."""
    env = os.environ if env is None else env
    if settings.api_base:
        ids = openai_models(settings.api_base, timeout=max(timeout, 2.0), api_key=settings.api_key)[0]
        if ids:
            return Detection(f"openai/{ids[0]}", None, None, f"first model listed by {settings.api_base}")
        return None  # the user named a server: do not silently pick another provider
    for var, provider, root, sub in PROVIDER_DEFAULTS:
        if env.get(var):
            return Detection(root, sub, None, f"{var} is set: {provider} defaults")
    ollama, ports = probe_targets(env)
    jobs: list[Callable[[], Detection | None]] = []
    if ollama:
        jobs.append(lambda: _detect_ollama(ollama, timeout))
    for port in ports:
        jobs.append(lambda port=port: _detect_openai_compatible(port, timeout))  # type: ignore[misc]
    if not jobs:
        return None
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        results = list(pool.map(lambda job: job(), jobs))
    return next((r for r in results if r is not None), None)


def busy_servers(env: Mapping[str, str] | None = None, timeout: float = PROBE_TIMEOUT_S) -> list[str]:
    """The probe targets (``host:port``, :func:`probe_targets`) where something accepts a
    connection: after :func:`detect` found nothing, such a server is there but did not answer its
    model list within the probe's timeout (a local server that serves one request at a time and is
    busy with a long one), which ``rlm doctor`` must not report as no server at all."""
    ollama, ports = probe_targets(env)
    targets = ([ollama] if ollama else []) + [f"127.0.0.1:{port}" for port in ports]

    def accepts(target: str) -> bool:
        host, _, port = target.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout):
                return True
        except (OSError, ValueError):
            return False

    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=len(targets)) as pool:
        found = list(pool.map(accepts, targets))
    return [t for t, ok in zip(targets, found, strict=True) if ok]


def probe_targets(env: Mapping[str, str] | None = None) -> tuple[str | None, list[int]]:
    """``(ollama "host:port" or None, [ports for OpenAI-compatible servers])`` from
    ``RLM_PROBE_OLLAMA`` / ``RLM_PROBE_PORTS`` or the defaults. Non-loopback hosts are dropped."""
    env = os.environ if env is None else env
    raw = env.get("RLM_PROBE_OLLAMA", OLLAMA_DEFAULT).strip()
    ollama: str | None = None
    if raw and raw.lower() not in ("off", "none", "0", "no"):
        parsed = urllib.parse.urlsplit(raw if "://" in raw else f"http://{raw}")
        if parsed.hostname and _is_loopback(parsed.hostname):
            ollama = f"{parsed.hostname}:{parsed.port or 11434}"
    raw_ports = env.get("RLM_PROBE_PORTS")
    ports: list[int] = list(OPENAI_COMPATIBLE_PORTS)
    if raw_ports is not None:
        ports = []
        if raw_ports.strip().lower() not in ("off", "none", "no", ""):
            for part in raw_ports.split(","):
                if part.strip().isdigit() and 0 < int(part) < 65536:
                    ports.append(int(part))
    return ollama, ports


def _detect_ollama(hostport: str, timeout: float) -> Detection | None:
    data = _get_json(f"http://{hostport}/api/tags", timeout)
    if not isinstance(data, dict) or not isinstance(data.get("models"), list):
        return None
    names = [str(m.get("name") or m.get("model")) for m in data["models"] if isinstance(m, dict)
             and (m.get("name") or m.get("model"))]
    chat = [n for n in names if "embed" not in n.lower()]
    if not chat:
        return None
    return Detection(f"ollama_chat/{chat[0]}", None, f"http://{hostport}", f"Ollama at {hostport}")


def _detect_openai_compatible(port: int, timeout: float) -> Detection | None:
    base = f"http://127.0.0.1:{port}/v1"
    ids = list_openai_models(base, timeout=timeout)
    if not ids:
        return None
    return Detection(f"openai/{ids[0]}", None, base, f"OpenAI-compatible server at 127.0.0.1:{port}")


def list_openai_models(api_base: str, *, timeout: float = PROBE_TIMEOUT_S, api_key: str | None = None,
                       loopback_only: bool = True) -> list[str]:
    """Model ids from ``GET {api_base}/models`` (OpenAI shape), ``[]`` on any failure.

    With ``loopback_only`` a base URL whose host is not a loopback address is not contacted.
    """
    parsed = urllib.parse.urlsplit(api_base)
    if not parsed.hostname or (loopback_only and not _is_loopback(parsed.hostname)):
        return []
    return openai_models(api_base, timeout=timeout, api_key=api_key)[0]


def openai_models(api_base: str, *, timeout: float, api_key: str | None = None) -> tuple[list[str], str]:
    """``(model ids, why there are none)`` from ``GET {api_base}/models`` (OpenAI shape); ``why``
    is ``""`` when ids were listed, else what came back (``HTTP 404``, ``not JSON``, ``an empty
    list``, ``unreachable: ...``)."""
    data, why = _get_json_why(api_base.rstrip("/") + "/models", timeout, api_key=api_key)
    if data is None:
        return [], why
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        return [], "the reply is not an OpenAI model list (no \"data\" array)"
    ids = [str(m["id"]) for m in data["data"] if isinstance(m, dict) and m.get("id")]
    return ids, "" if ids else "it listed no model"


def _get_json(url: str, timeout: float, api_key: str | None = None) -> Any:
    """GET ``url`` without any proxy; the decoded JSON body or ``None``."""
    return _get_json_why(url, timeout, api_key)[0]


def _get_json_why(url: str, timeout: float, api_key: str | None = None) -> tuple[Any, str]:
    """GET ``url`` without any proxy: ``(decoded JSON body, "")``, or ``(None, what went wrong)``."""
    import urllib.error

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with opener.open(request, timeout=timeout) as resp:
            if resp.status != 200:
                return None, f"HTTP {resp.status}"
            return json.loads(resp.read(1_000_000)), ""
    except urllib.error.HTTPError as exc:
        return None, f"HTTP {exc.code}"
    except ValueError:
        return None, "the reply is not JSON"
    except OSError as exc:
        reason = getattr(exc, "reason", None) or exc
        return None, f"unreachable ({getattr(reason, 'strerror', None) or reason})"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(ipaddress.ip_address(info[4][0]).is_loopback
                       for info in socket.getaddrinfo(host, None))
        except (OSError, ValueError):
            return False


# -- what litellm knows about a model --------------------------------------------------------------

def model_info(litellm: Any, model: str) -> dict[str, Any] | None:
    """litellm's bundled info for ``model`` (window, prices), or ``None`` if it does not know it."""
    try:
        info = litellm.get_model_info(model)
    except Exception:  # noqa: BLE001 - litellm raises plain Exception for unmapped models
        return None
    return dict(info) if info else None


def input_window(litellm: Any, model: str) -> int | None:
    """The model's input window in tokens per litellm's map, or ``None`` when unknown."""
    info = model_info(litellm, model)
    if not info:
        return None
    window = info.get("max_input_tokens") or info.get("max_tokens")
    return int(window) if window else None


def prices(litellm: Any, model: str) -> tuple[float, float] | None:
    """``(USD per input token, USD per output token)`` of ``model`` per litellm's price map, the
    dearest of its tiers (``..._above_128k_tokens``: a worst case for a budget), or ``None`` when
    the price is not known (:func:`price_known`)."""
    if not price_known(litellm, model):
        return None
    info = model_info(litellm, model) or {}

    def dearest(kind: str) -> float:
        values = [info.get(f"{kind}_cost_per_token")]
        values += [v for k, v in info.items() if k.startswith(f"{kind}_cost_per_token_above_")]
        return max((float(v) for v in values if isinstance(v, (int, float))), default=0.0)

    return dearest("input"), dearest("output")


#: The keys of litellm's price map as bundled, before anything registered models into it
#: (:func:`remember_bundled_prices`).
_bundled_keys: frozenset[str] | None = None


def remember_bundled_prices(litellm: Any) -> None:
    """Note the keys of litellm's price map as imported: a ``litellm.Router`` registers each of
    its deployments' models there with a zero price, which must not read as a known price."""
    global _bundled_keys
    if _bundled_keys is None:
        _bundled_keys = frozenset(litellm.model_cost)


def price_known(litellm: Any, model: str) -> bool:
    """Whether litellm's bundled price map prices ``model``. litellm answers some families it
    does not price (OpenRouter) with a zero cost, and a Router's deployments are registered with
    one; those count as unknown, not free."""
    info = model_info(litellm, model)
    if not info or info.get("input_cost_per_token") is None:
        return False
    return str(info.get("key")) in (litellm.model_cost if _bundled_keys is None else _bundled_keys)


def missing_keys(litellm: Any, model: str) -> list[str]:
    """The environment variables litellm's ``validate_environment`` says ``model`` lacks
    (``["OPENAI_API_KEY"]``; ``[]`` when it has what it needs or litellm cannot tell)."""
    try:
        found = litellm.validate_environment(model=model)
    except Exception:  # noqa: BLE001 - a model litellm cannot place: its call says why
        return []
    return [str(name) for name in (found or {}).get("missing_keys") or []]
