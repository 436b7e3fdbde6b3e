"""Settings: flags > environment > config file > defaults, plus the tool's platformdirs paths.

How each key's value is checked and typed (its words, sizes, limits) is ``rlm_cli.config_keys``.

Nothing here prints or prompts, and importing it creates no directory. The config file is TOML
at ``config_path()`` (``~/.config/rlm/config.toml`` on Linux) with flat keys named like the
flags (``model = "openai/gpt-5.4-mini"``, ``max_iterations = 30``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm_cli.config_keys import (
    CHOICES,
    DEFAULT_DECODE_MEMORY,
    DEFAULT_MEMORY_LIMIT,
    SIZE_KEYS,
    check_decode_memory,
    check_flag,
    coerce,
    parse_size,
    redact_url,
    untrusted_file,
)
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
    "policy": "RLM_POLICY",
}

#: The one example model name of the help, the errors and the docs: a current model of litellm's
#: price map (the OpenAI sub-model autodetection picks; ``tests/models/test_models.py`` checks it).
EXAMPLE_MODEL = "openai/gpt-5.4-mini"

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


def runtime_path() -> Path:
    """Where the shared model hosts' folder is (``RLM_RUNTIME_DIR``, else the user's runtime folder
    plus ``rlm``), as an absolute path, without making it. The sandbox hides it from the REPL worker."""
    raw = os.environ.get("RLM_RUNTIME_DIR")
    if not raw:
        import warnings

        from platformdirs import user_runtime_dir

        with warnings.catch_warnings():  # "XDG_RUNTIME_DIR is not set, falling back to ..." is not news
            warnings.simplefilter("ignore")
            raw = user_runtime_dir(APP_NAME)
    return Path(os.path.abspath(raw))


def config_path() -> Path:
    """Path of the TOML config file."""
    return config_dir() / "config.toml"


def read_config_file(path: Path | None = None) -> dict[str, Any]:
    """Read the config file; a missing file is ``{}``.

    As ssh does with its own files, a config file that another user could have written is refused
    (it may set ``sandbox = "none"`` or an ``api_base`` for your key): one owned by a user other
    than you or root, or writable by group or others (:func:`untrusted_file`).

    Raises:
        UsageError: the file exists but is not valid TOML, or is refused.
    """
    path = path or config_path()
    try:
        with open(path, "rb") as fh:
            problem = untrusted_file(os.fstat(fh.fileno()))
            if problem:
                raise UsageError(f"refusing config file {path}: {problem}",
                                 hint=f"make it yours and private (chown {os.geteuid()} FILE; chmod 600 FILE), or "
                                      "delete it")
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
    #: Follow symlinks that lead out of the paths given (``--follow``; otherwise they are skipped).
    follow: bool = False
    #: Files larger than this many bytes are skipped (or truncated with ``truncate_large``).
    max_file_size: int = 10 * 1024 * 1024
    truncate_large: bool = False
    chunk_tokens: int = 2000  #: target chunk size in tokens
    use_cache: bool = True
    #: Wall-clock seconds one document may take in the confined decoder (``rlm_cli.corpus.decode``).
    decode_timeout: float = 60.0
    #: Address-space limit of the confined decoder in bytes.
    decode_memory: int = DEFAULT_DECODE_MEMORY


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
    memory_limit: int = DEFAULT_MEMORY_LIMIT
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
    prompt_cache: bool = True  # cache_control breakpoints where a provider needs them (models.caching)
    #: Sampling temperature of every model request (``None``: the provider's default).
    temperature: float | None = None
    #: Run ``leads(question)`` (a keyword search of the question's names and words) in the REPL
    #: before the root model's first turn and show its output there (``--leads``/``--no-leads``;
    #: ``None``: the policy's choice, on under ``guided`` only).
    leads: bool | None = None
    #: Exit 7 when an answer's support verdict is ``unsupported`` (``--require-support``; the
    #: answer is still printed).
    require_support: bool = False
    #: The loop's rules (``rlm_cli.loop.policy``): ``auto``, ``paper``, ``standard`` or ``guided``.
    #: A session replaces ``auto`` by the preset it resolved to.
    policy: str = "auto"
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
    #: Config-file values of the corpus options ``decode_timeout`` (seconds) and ``decode_memory``
    #: (bytes): the CLI copies them into ``corpus`` when no flag gives them (:func:`decode_limits`).
    decode_timeout: float = 60.0
    decode_memory: int = DEFAULT_DECODE_MEMORY
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
        """A JSON-able copy with secrets removed, for trajectories and ``config show``.

        ``api_key`` keeps at most its first 3 and last 4 characters; a password or token in
        ``api_base`` (``https://user:secret@host``) is replaced by ``***``.
        """
        data = dataclasses.asdict(self)
        data["api_key"] = redact_secret(self.api_key)
        data["api_base"] = redact_url(self.api_base)
        return json_safe(data)


def redact_secret(value: str | None) -> str | None:
    """A secret shortened for display: ``'sk-...abcd'`` (first 3 and last 4 characters) for
    secrets of 16+ characters, ``'***'`` for shorter ones; ``None``/empty stays as is."""
    if not value:
        return value
    return "***" if len(value) < 16 else f"{value[:3]}...{value[-4:]}"


def json_safe(value: Any) -> Any:
    """Convert Paths and nested containers to JSON-serialisable values."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def resolve(flags: dict[str, Any], *, env: Mapping[str, str] | None = None,
            file_values: dict[str, Any] | None = None) -> Settings:
    """Build :class:`Settings` from flag values (``None`` = not given), env and the config file.

    Precedence: flags > environment (``ENV_VARS``) > config file > dataclass defaults. The model
    may still be ``None`` afterwards: ``rlm_cli.models.detect.ensure_model`` autodetects one.

    Raises:
        UsageError: an unknown or mistyped key in the config file.
    """
    return resolve_with_sources(flags, env=env, file_values=file_values)[0]


def resolve_with_sources(flags: dict[str, Any], *, env: Mapping[str, str] | None = None,
                         file_values: dict[str, Any] | None = None,
                         problems: list[str] | None = None) -> tuple[Settings, dict[str, str]]:
    """Like :func:`resolve`, plus where each setting came from: ``{key: source}`` with source
    ``"flag"``, ``"env RLM_..."``, ``"config file"`` or ``"default"``.

    With a ``problems`` list, a bad key or value in the config file or the environment is
    appended there (and left out, its source marked) instead of raised: for ``rlm config show``.

    Raises:
        UsageError: an unknown or mistyped key in the config file (without ``problems``).
    """
    env_map: Mapping[str, str] = os.environ if env is None else env
    file_values = read_config_file() if file_values is None else file_values
    settings = Settings()
    fields_ = settable_fields()
    sources = {name: "default" for name in fields_}

    def take(key: str, value: Any, source: str, label: str) -> None:
        try:
            if key not in fields_:
                raise UsageError(f"unknown key {key!r} in config file {config_path()}",
                                 hint="see `rlm config show` for the known keys")
            setattr(settings, key, coerce(key, value, fields_[key].type, source))
            sources[key] = label
        except UsageError as exc:
            if problems is None:
                raise
            problems.append(str(exc))
            if key in sources:
                sources[key] += f" ({label} has a bad value)"

    for key, value in file_values.items():
        take(key, value, f"config file {config_path()}", "config file")
    for key, var in ENV_VARS.items():
        if env_map.get(var):
            take(key, env_map[var], f"env {var}", f"env {var}")
    for key, value in flags.items():
        if value is not None:
            setattr(settings, key, check_flag(key, value))
            sources[key] = "flag"
    if settings.router_config is not None:
        # absolute here: the shared model host that reads it runs in another directory
        settings.router_config = Path(os.path.abspath(os.path.expanduser(str(settings.router_config))))
    return settings, sources


def settable_fields() -> dict[str, dataclasses.Field[Any]]:
    """The :class:`Settings` fields a config file, ``rlm config set`` or the environment may set
    (every field except the nested ``corpus`` options)."""
    return {f.name: f for f in dataclasses.fields(Settings) if f.name != "corpus"}


def normalize_key(key: str) -> str:
    """``max-cost`` / ``--max-cost`` / ``max_cost`` -> ``max_cost``.

    Raises:
        UsageError: not a known setting.
    """
    name = key.strip().lstrip("-").replace("-", "_").lower()
    if name not in settable_fields():
        known = ", ".join(sorted(settable_fields()))
        raise UsageError(f"unknown setting {key!r}", hint=f"known settings: {known}")
    return name


#: Settings whose values are secrets: redacted by ``config show``.
SECRET_KEYS = frozenset({"api_key"})


def config_entries(*, env: Mapping[str, str] | None = None, file_values: dict[str, Any] | None = None,
                   problems: list[str] | None = None) -> list[dict[str, Any]]:
    """The effective configuration for ``rlm config show``: one ``{"key", "value", "source"}``
    per setting, secrets redacted (see :meth:`Settings.redacted`). With ``problems``, bad keys
    and values are collected there instead of raised (see :func:`resolve_with_sources`).

    Raises:
        UsageError: the config file is unreadable (or, without ``problems``, has a bad entry).
    """
    settings, sources = resolve_with_sources({}, env=env, file_values=file_values, problems=problems)
    values = settings.redacted()
    return [{"key": key, "value": values[key], "source": sources[key]} for key in settable_fields()]


def set_config_value(key: str, value: str, path: Path | None = None, *, remove: bool = False) -> tuple[str, Any, Path]:
    """Store ``key = value`` in the config file and return ``(key, typed value, path)``.

    The value is checked and typed like a config-file value (``"2.5"`` -> 2.5 for ``max_cost``,
    ``"false"`` -> false for ``llm_cache``); ``none``/``null``/an empty string removes the key
    (except ``sandbox none``, a real level), as does ``remove`` (``rlm config unset``: also a key
    rlm does not know that the file holds, a typo ``rlm config show`` complains about).
    Other lines and comments of the file are kept. The file is written atomically (temporary
    file + rename) with mode 0600, its folder with 0700, since it may hold an API key.

    Raises:
        UsageError: unknown key, bad value, or an unreadable/unwritable config file.
    """
    path = path or config_path()
    current = read_config_file(path)
    name = key.strip() if remove and key.strip() in current else normalize_key(key)
    word = value.strip().lower()
    # "none"/"null" remove a key, except where "none" is one of the key's own words (--sandbox none).
    remove = remove or word == "" or (word in ("none", "null") and word not in CHOICES.get(name, ()))
    typed = None if remove else coerce(name, value, settable_fields()[name].type)
    if isinstance(typed, Path):
        typed = os.path.abspath(os.path.expanduser(str(typed)))  # read later from any directory
        if name == "router_config" and not os.path.isfile(typed):
            raise UsageError(f"router_config: no such file {typed}", hint="give the path of a litellm Router YAML file")
    if typed is not None and name in SIZE_KEYS:
        typed = value.strip()  # checked above; kept as typed ("4G"), not as a byte count
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    except OSError as exc:
        raise UsageError(f"cannot read config file {path}: {exc}") from None
    new_text = _edit_toml_line(text, name, None if remove else _toml_value(typed))
    expected = {k: v for k, v in current.items() if k != name}
    if not remove:
        expected[name] = typed
    try:
        if tomllib.loads(new_text) != expected:
            raise ValueError
    except (tomllib.TOMLDecodeError, ValueError):  # an odd file layout: rewrite it whole
        new_text = "".join(f"{k} = {_toml_value(v)}\n" for k, v in expected.items())
    atomic_write_private(path, new_text)
    return name, typed, path


def atomic_write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and rename, mode 0600 (folder 0700).

    Raises:
        UsageError: the file or its folder cannot be written.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=".config-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise UsageError(f"cannot write config file {path}: {exc}") from None


def _toml_value(value: Any) -> str:
    """A scalar as TOML: strings as basic strings, booleans, integers, floats."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return text if any(c in text for c in ".en") else text + ".0"
    return json.dumps(str(value), ensure_ascii=False)


def _edit_toml_line(text: str, key: str, toml_value: str | None) -> str:
    """Replace (or with ``None`` delete) the top-level ``key = ...`` line, or append it."""
    lines = text.splitlines(keepends=True)
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
    for i, line in enumerate(lines):
        if line.lstrip().startswith("["):
            break  # only top-level keys are ours
        if pattern.match(line):
            if toml_value is None:
                del lines[i]
            else:
                lines[i] = f"{key} = {toml_value}\n"
            return "".join(lines)
    if toml_value is None:
        return text
    head = "".join(lines)
    if head and not head.endswith("\n"):
        head += "\n"
    return head + f"{key} = {toml_value}\n"


def decode_limits(timeout: float | None, memory: str | None,
                  file_values: dict[str, Any] | None = None) -> tuple[float, int]:
    """``(seconds, bytes)`` for the document decoder: ``--decode-timeout`` and ``--decode-memory``
    when given, else the config file's ``decode_timeout`` and ``decode_memory``, else the defaults
    (:class:`CorpusOptions`).

    Raises:
        UsageError: a bad flag or config-file value, or an unreadable config file.
    """
    values = read_config_file() if file_values is None else file_values
    fields_ = settable_fields()
    source = f"config file {config_path()}"
    seconds = (float(timeout) if timeout is not None else
               coerce("decode_timeout", values["decode_timeout"], fields_["decode_timeout"].type, source)
               if "decode_timeout" in values else CorpusOptions.decode_timeout)
    if memory is not None:
        size = check_decode_memory(parse_size(memory, "--decode-memory"))
    elif "decode_memory" in values:
        size = coerce("decode_memory", values["decode_memory"], fields_["decode_memory"].type, source)
    else:
        size = CorpusOptions.decode_memory
    if not seconds > 0:
        raise UsageError(f"--decode-timeout must be positive, not {seconds:g}")
    return float(seconds), int(size)
