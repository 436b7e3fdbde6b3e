"""A ``--router-config`` file: read and checked without litellm (``Session.open`` does it before
the corpus loads), its keyless deployments given the placeholder key, and the litellm Router
built from it (in the model host, by ``models.backend``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlm_cli.errors import UsageError
from rlm_cli.models.failures import short_error


def read_router_file(path: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The ``model_list`` and ``router_settings`` of a ``--router-config`` file (YAML or JSON),
    checked for shape without importing litellm (cheap: ``Session.open`` calls it before the
    corpus loads, so a bad file fails in well under a second).

    Returns:
        ``(model_list, router_settings)``: litellm's deployment dicts and the Router keyword
        arguments (``{}`` when the file has none).

    Raises:
        UsageError: unreadable file, over :data:`MAX_ROUTER_FILE_BYTES`, bad YAML/JSON (with its
            line and column; aliases are refused), or no ``model_list``.
    """
    import yaml

    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_ROUTER_FILE_BYTES + 1)
        if len(raw) > MAX_ROUTER_FILE_BYTES:
            raise UsageError(f"--router-config: {path} is over {MAX_ROUTER_FILE_BYTES // 1024**2} MiB; a Router file "
                             "lists deployments", hint="give the path of a litellm Router/proxy YAML file")
        data = yaml.load(raw.decode("utf-8", "replace"), Loader=_no_alias_loader())  # noqa: S506 - a SafeLoader
    except OSError as exc:
        raise UsageError(f"--router-config: cannot read {path}: {short_error(exc)}",
                         hint="give the path of a litellm Router/proxy YAML file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or short_error(exc)
        raise UsageError(f"--router-config: {path} is not valid YAML: {problem}{where}",
                         hint="fix the file; README, \"A cluster of model servers\", shows one") from None
    if isinstance(data, list):
        data = {"model_list": data}
    model_list = data.get("model_list") if isinstance(data, dict) else None
    if not isinstance(model_list, list) or not model_list or not all(
            isinstance(d, dict) and d.get("model_name") and isinstance(d.get("litellm_params"), dict)
            and d["litellm_params"].get("model") for d in model_list):
        raise UsageError(f"--router-config: {path} needs a model_list of "
                         "{model_name, litellm_params: {model, ...}} entries")
    settings = data.get("router_settings") if isinstance(data, dict) else None
    if settings is not None and not isinstance(settings, dict):
        raise UsageError(f"--router-config: router_settings in {path} must be a mapping of Router arguments")
    return model_list, dict(settings or {})


#: The largest ``--router-config`` file read (a Router file lists deployments: kilobytes).
MAX_ROUTER_FILE_BYTES = 4 * 1024**2


def _no_alias_loader() -> Any:
    """PyYAML's ``SafeLoader`` refusing aliases (``*name``): a file of nested aliases (a "billion
    laughs") is a few hundred bytes that anything walking the result (litellm's Router copies its
    deployments) expands without end; a Router file needs none."""
    import yaml

    class NoAliasLoader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.events.AliasEvent):
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted in a Router file",
                                                  mark)
            return super().compose_node(parent, index)

    return NoAliasLoader


def keyless_deployments(model_list: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``model_list`` with :data:`~rlm_cli.config.PLACEHOLDER_API_KEY` as the ``api_key`` of every
    deployment that names a server (``api_base``/``base_url``) but no key: litellm would otherwise
    send that server the key of the provider's own endpoint from the environment
    (``OPENAI_API_KEY``...), as ``--api-base`` without ``--api-key`` never does. A deployment with
    no server of its own goes to its provider, which the environment's key is meant for."""
    from rlm_cli.config import PLACEHOLDER_API_KEY

    out = []
    for d in model_list:
        params = dict(d["litellm_params"])
        if (params.get("api_base") or params.get("base_url")) and not params.get("api_key"):
            params["api_key"] = PLACEHOLDER_API_KEY
        out.append({**d, "litellm_params": params})
    return out


def check_router_file(path: str | Path, models: list[str | None]) -> list[str]:
    """Read the ``--router-config`` file (:func:`read_router_file`) and check ``models``
    (``--model``, ``--sub-model``) against its model groups: a name that is not a group goes to
    the provider as is, so a mistyped group (``flet``, or ``openai/fleet`` for the group
    ``fleet``) would fail there, after the corpus has loaded, or reach another server. Checked
    only when no model names a group (else the other is meant to go to its provider). Near:
    ``difflib`` ratio of at least 0.75, or the group after a provider prefix.

    Returns:
        Warnings for the user: the file is not used when no model names one of its groups.

    Raises:
        UsageError: the file is invalid, or a model is a near miss of a group.
    """
    import difflib

    groups = sorted({str(d["model_name"]) for d in read_router_file(path)[0]})
    named = [m for m in dict.fromkeys(models) if m]
    if any(m in groups for m in named):
        return []  # the other model, if any, is meant to go to its provider directly
    for model in named:
        bare = model.split("/", 1)[-1]
        close = [bare] if bare in groups else difflib.get_close_matches(model, groups, n=1, cutoff=0.75)
        if close:
            raise UsageError(f"--router-config: {model!r} is not a model group of {path}; did you mean {close[0]!r}?",
                             hint=f"its groups: {', '.join(groups)}")
    return [f"--router-config {path} is not used: none of its model groups ({', '.join(groups)}) is --model or "
            f"--sub-model (name one, e.g. --sub-model {groups[0]})"]


def build_router(litellm: Any, path: Path) -> tuple[Any, dict[str, str]]:
    """A ``litellm.Router`` from a YAML or JSON file and ``{model group: first deployment's model}``.

    The file holds ``model_list`` (litellm's format: ``[{"model_name": ..., "litellm_params":
    {"model": ..., "api_base": ..., "api_key": ...}}]``) and optionally ``router_settings``
    (Router keyword arguments such as ``routing_strategy`` or ``fallbacks``); a litellm proxy
    ``config.yaml`` works as is. Retries stay with rlm (the Router's own are turned off). A
    deployment with a server and no key gets a placeholder key (:func:`keyless_deployments`).

    Raises:
        UsageError: unreadable file, bad YAML/JSON, no ``model_list``, or litellm refused it.
    """
    model_list, settings = read_router_file(path)
    model_list = keyless_deployments(model_list)
    settings.update(num_retries=0)
    try:
        router = litellm.Router(model_list=model_list, **settings)
    except Exception as exc:  # noqa: BLE001 - litellm validates the configuration its own way
        lines = [line.strip() for line in str(exc).strip().splitlines()[:3] if line.strip()]  # pydantic: field, why
        raise UsageError(f"--router-config: litellm refused {path}: {'; '.join(lines)[:500] or short_error(exc)}"
                         ) from None
    groups: dict[str, str] = {}
    for d in model_list:
        groups.setdefault(str(d["model_name"]), str(d["litellm_params"]["model"]))
    return router, groups
