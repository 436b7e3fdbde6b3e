"""Settings: flags > environment > config file > defaults, plus the tool's platformdirs paths.

Nothing here prints or prompts, and importing it creates no directory. The config file is TOML
at ``config_path()`` (``~/.config/rlm/config.toml`` on Linux) with flat keys named like the
flags (``model = "openai/gpt-5-mini"``, ``max_iterations = 30``).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm_cli.errors import UsageError

APP_NAME = "rlm"

#: Environment variables read for each setting (flags win over them).
ENV_VARS: dict[str, str] = {
    "model": "RLM_MODEL",
    "sub_model": "RLM_SUB_MODEL",
    "api_base": "RLM_API_BASE",
    "api_key": "RLM_API_KEY",
    "sandbox": "RLM_SANDBOX",
    "mode": "RLM_MODE",
}

#: Sent as the API key when an api base is set without a key: local OpenAI-compatible servers
#: (llama.cpp, vLLM, LM Studio) ignore it, but the OpenAI client refuses to send no key at all.
PLACEHOLDER_API_KEY = "sk-no-key-required"


def config_dir() -> Path:
    """The user config directory (not created here)."""
    from platformdirs import user_config_path

    return Path(os.environ.get("RLM_CONFIG_DIR") or user_config_path(APP_NAME))


def cache_dir() -> Path:
    """The user cache directory: chunk index and response cache (not created here)."""
    from platformdirs import user_cache_path

    return Path(os.environ.get("RLM_CACHE_DIR") or user_cache_path(APP_NAME))


def data_dir() -> Path:
    """The user data directory: trajectories (not created here)."""
    from platformdirs import user_data_path

    return Path(os.environ.get("RLM_DATA_DIR") or user_data_path(APP_NAME))


def config_path() -> Path:
    """Path of the TOML config file."""
    return config_dir() / "config.toml"


def read_config_file(path: Path | None = None) -> dict[str, Any]:
    """Read the config file; a missing file is ``{}``.

    Raises:
        UsageError: the file exists but is not valid TOML.
    """
    path = path or config_path()
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except (tomllib.TOMLDecodeError, OSError) as exc:
        raise UsageError(f"cannot read config file {path}: {exc}", hint="fix or delete it") from None


def prepare_offline_env() -> None:
    """Make litellm and tiktoken work without internet; call before importing either.

    litellm fetches a price map at import unless ``LITELLM_LOCAL_MODEL_COST_MAP`` is set, and
    tiktoken downloads encodings unless ``TIKTOKEN_CACHE_DIR`` holds them; litellm's wheel ships
    the cl100k_base and o200k_base files, so we point tiktoken there when the user has not.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        import importlib.util

        spec = importlib.util.find_spec("litellm")
        if spec and spec.submodule_search_locations:
            tok = Path(list(spec.submodule_search_locations)[0]) / "litellm_core_utils" / "tokenizers"
            if tok.is_dir():
                os.environ["TIKTOKEN_CACHE_DIR"] = str(tok)


@dataclass
class CorpusOptions:
    """How paths become a corpus (see ``rlm_cli.corpus``)."""

    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    hidden: bool = False
    no_ignore: bool = False
    #: Files larger than this many bytes are skipped (or truncated with ``truncate_large``).
    max_file_size: int = 10 * 1024 * 1024
    truncate_large: bool = False
    #: Target chunk size in tokens.
    chunk_tokens: int = 2000
    use_cache: bool = True


@dataclass
class Settings:
    """Everything one ``rlm ask`` run needs; built by the CLI, read by the core."""

    model: str | None = None
    sub_model: str | None = None
    api_base: str | None = None
    api_key: str | None = None
    max_iterations: int = 20
    max_depth: int = 1
    #: Characters of a code block's output shown to the root model.
    max_output_chars: int = 10_000
    #: Seconds one code block may run before the worker is killed and restarted.
    cell_timeout: float = 120.0
    #: Address-space limit of the worker in bytes.
    memory_limit: int = 4 * 1024**3
    sandbox: str = "auto"
    max_concurrency: int = 16
    retries: int = 3
    #: Seconds for one provider request.
    request_timeout: float = 300.0
    max_cost: float | None = None
    max_tokens: int | None = None
    max_sub_calls: int | None = None
    #: Wall-clock seconds for the whole run.
    timeout: float | None = None
    llm_cache: bool = True
    #: ``auto`` (direct when the corpus fits comfortably, else rlm), ``rlm`` or ``direct``.
    mode: str = "auto"
    #: Auto mode goes direct only under this many corpus tokens...
    direct_max_tokens: int = 30_000
    #: ...and under this fraction of the root model's input window.
    direct_max_fraction: float = 0.25
    #: Trajectory file (default: a new file under ``data_dir()/traces``).
    trace: Path | None = None
    sub_model_window: int | None = None
    root_model_window: int | None = None
    router_config: Path | None = None
    corpus: CorpusOptions = field(default_factory=CorpusOptions)

    @property
    def effective_sub_model(self) -> str | None:
        """The model for ``llm_query`` sub-calls: ``sub_model`` or else the root ``model``."""
        return self.sub_model or self.model

    @property
    def effective_api_key(self) -> str | None:
        """The key to send: the configured one, else a placeholder when an api base is set."""
        if self.api_key:
            return self.api_key
        return PLACEHOLDER_API_KEY if self.api_base else None

    def redacted(self) -> dict[str, Any]:
        """A JSON-able copy with secrets removed, for trajectories and ``config show``."""
        data = dataclasses.asdict(self)
        data["api_key"] = redact_secret(self.api_key)
        return json_safe(data)


def redact_secret(value: str | None) -> str | None:
    """Show at most the last 4 characters of a secret: ``'sk-...abcd'``; ``None`` stays ``None``."""
    if not value:
        return value
    return "***" if len(value) < 12 else f"{value[:3]}...{value[-4:]}"


def json_safe(value: Any) -> Any:
    """Convert Paths and nested containers to JSON-serialisable values."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def resolve(flags: dict[str, Any], *, env: dict[str, str] | None = None,
            file_values: dict[str, Any] | None = None) -> Settings:
    """Build :class:`Settings` from flag values (``None`` = not given), env and the config file.

    Precedence: flags > environment (``ENV_VARS``) > config file > dataclass defaults.

    Raises:
        UsageError: an unknown or mistyped key in the config file.
    """
    env_map: Mapping[str, str] = os.environ if env is None else env
    file_values = read_config_file() if file_values is None else file_values
    settings = Settings()
    known = {f.name: f for f in dataclasses.fields(Settings)}
    for key, value in file_values.items():
        if key not in known or key == "corpus":
            raise UsageError(f"unknown key {key!r} in config file {config_path()}",
                             hint="see `rlm config show`")
        setattr(settings, key, _coerce(key, value, known[key].type))
    for key, var in ENV_VARS.items():
        if env_map.get(var):
            setattr(settings, key, env_map[var])
    for key, value in flags.items():
        if value is not None:
            setattr(settings, key, value)
    return settings


def _coerce(key: str, value: Any, annotation: Any) -> Any:
    text = str(annotation)
    try:
        if "int" in text and "float" not in text:
            return int(value)
        if "float" in text:
            return float(value)
        if "bool" in text:
            if isinstance(value, str):
                return value.lower() in ("1", "true", "yes", "on")
            return bool(value)
        if "Path" in text:
            return Path(value)
    except (TypeError, ValueError):
        raise UsageError(f"config key {key!r} has a bad value {value!r}") from None
    return value
