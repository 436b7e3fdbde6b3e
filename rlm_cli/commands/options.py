"""The command-line options, each written once, and the settings built from them.

Options used by one command stay in its signature. The two groups several commands share, the
corpus flags (``ask``, ``chat``, ``mcp``, ``eval``, ``index``, ``stats``) and the run flags of the
model, loop, budgets and sandbox (``ask``, ``chat``, ``mcp``, ``eval``), are tables here: a command
names one parameter ``flags: CorpusFlags`` or ``run: RunFlags`` under :func:`corpus_options` or
:func:`run_options`, which put the group's parameters in its place in the signature typer reads
(so ``--help`` lists them in the same order for every command) and hand the values back as one
object. A command can leave some out or give one its own help text.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from rlm_cli.commands.invocation import INVOCATION
from rlm_cli.config_keys import parse_size
from rlm_cli.errors import UsageError

Opt = typer.Option
F = TypeVar("F", bound=Callable[..., Any])

PathsArg = Annotated[list[str], typer.Argument(metavar="PATH...", help="Files, folders or globs.")]
IncludeOpt = Annotated[list[str] | None, Opt("--include", help="Only files matching this glob (repeatable).")]
ExcludeOpt = Annotated[list[str] | None, Opt("--exclude", help="Skip files matching this glob (repeatable).")]
HiddenOpt = Annotated[bool, Opt("--hidden", help="Include dotfiles and dot-folders.")]
NoIgnoreOpt = Annotated[bool, Opt("--no-ignore", help="Do not honour .gitignore/.ignore/.rlmignore.")]
FollowOpt = Annotated[bool, Opt("--follow", "-L", help="Follow symlinks that lead out of the PATHs given "
                                                      "(default: skip and count them).")]
MaxSizeOpt = Annotated[str | None, Opt("--max-file-size", help="Skip larger files (default 10M).")]
TruncateOpt = Annotated[bool, Opt("--truncate-large", help="Keep the head of files over --max-file-size "
                                                        "instead of skipping them.")]
NoCacheOpt = Annotated[bool, Opt("--no-cache", help="Do not read or write the chunk-index cache.")]
DecodeTimeoutOpt = Annotated[float | None, Opt("--decode-timeout", min=0.1, metavar="SECONDS",
                                               help="Skip a PDF, notebook, table or compressed file whose "
                                                    "decoding takes longer (default 60; config decode_timeout).")]
DecodeMemoryOpt = Annotated[str | None, Opt("--decode-memory", metavar="SIZE", help="Address-space limit of the "
                                            "confined document decoder, e.g. 1G (default 2G; config "
                                            "decode_memory).")]
ChunkOpt = Annotated[int | None, Opt("--chunk-tokens", min=50, help="Target chunk size in tokens (default 2000).")]
JsonOpt = Annotated[bool, Opt("--json", help="Print one JSON document on stdout.")]
AnswerTypeOpt = Annotated[str, Opt("--answer-type", metavar="TYPE", help="text|bool|int|number|list|locations|json: "
                                   "the type the answer must have; the model is told, a wrong-typed answer is sent "
                                   "back once, and --json gains \"value\" (default text).")]


def _set_debug(value: bool) -> bool:
    INVOCATION.debug = bool(value) or INVOCATION.debug
    return value


#: ``--debug`` after the command name too (``rlm ask --debug ...``), as the error messages suggest.
DebugOpt = Annotated[bool, Opt("--debug", callback=_set_debug, help="Show tracebacks for errors "
                                                                       "(same as rlm --debug COMMAND).")]
QuietOpt = Annotated[bool, Opt("--quiet", "-q", help="Print only errors on stderr.")]
#: ``rlm ask`` and ``rlm chat``: ``--quiet`` without a short form (``-q`` is ``ask --question``).
LongQuietOpt = Annotated[bool, Opt("--quiet", help="Print only errors on stderr.")]
ColorOpt = Annotated[str, Opt("--color", metavar="WHEN", help="auto|always|never: colours and live progress "
                              "on stderr (auto: when stderr is a terminal, unless NO_COLOR or TERM=dumb).")]
VerboseOpt = Annotated[bool, Opt("--verbose", "-v", help="More detail on stderr.")]

#: Options of the model, the loop, budgets and the sandbox (the run flags).
ModelOpt = Annotated[str | None, Opt("--model", "-m", help="Root model, a litellm model string "
                                     "(e.g. openai/gpt-5-mini). Env: RLM_MODEL.")]
SubModelOpt = Annotated[str | None, Opt("--sub-model", help="Model for llm_query sub-calls (default: --model). "
                                        "Env: RLM_SUB_MODEL.")]
ApiBaseOpt = Annotated[str | None, Opt("--api-base", help="Provider base URL. Env: RLM_API_BASE.")]
ApiKeyOpt = Annotated[str | None, Opt("--api-key", help="Provider API key. Env: RLM_API_KEY.")]
MaxIterOpt = Annotated[int | None, Opt("--max-iterations", min=1, help="Root-model turns before "
                                       "stopping (default 20).")]
MaxDepthOpt = Annotated[int | None, Opt("--max-depth", min=1, help="Recursion depth; 1 = sub-calls are "
                                        "plain model calls (default 1).")]
ModeOpt = Annotated[str | None, Opt("--mode", help="auto|rlm|direct: direct sends the whole corpus in one call; "
                                    "auto (default) does so when it fits comfortably. Env: RLM_MODE.")]
DirectMaxOpt = Annotated[int | None, Opt("--direct-max-tokens", min=0, help="Auto mode goes direct only "
                                         "under this many corpus tokens (default 30000) and under "
                                         "1/4 of the root model's window.")]
RootWindowOpt = Annotated[int | None, Opt("--root-model-window", min=256, help="Root model's input window "
                                          "in tokens (default: litellm's model info, else 32768).")]
TraceOpt = Annotated[Path | None, Opt("--trace", help="Write the trajectory (JSONL) to FILE instead of the "
                                      "user data dir.")]
SandboxOpt = Annotated[str | None, Opt("--sandbox", help="auto|bwrap|sandbox-exec|process|none "
                                       "(default auto). Env: RLM_SANDBOX.")]
CellTimeoutOpt = Annotated[float | None, Opt("--cell-timeout", min=1, help="Seconds per code block "
                                             "(default 120).")]
MemoryOpt = Annotated[str | None, Opt("--memory-limit", help="Worker address-space limit, "
                                      "e.g. 4G, 512M (default 4G).")]
ConcurrencyOpt = Annotated[int | None, Opt("--max-concurrency", min=1, help="Sub-calls in flight at once "
                                           "(default 16; lowered for the run on HTTP 429).")]
RetriesOpt = Annotated[int | None, Opt("--retries", min=0, help="Retries of a failed request on 429, 5xx, "
                                       "timeouts and dropped connections (default 3).")]
RequestTimeoutOpt = Annotated[float | None, Opt("--request-timeout", min=0.1, help="Seconds per model request "
                                                "(default 300).")]
MaxCostOpt = Annotated[float | None, Opt("--max-cost", min=0, help="Stop (exit 6) once the run has cost this "
                                         "many USD (priced models only).")]
MaxTokensOpt = Annotated[int | None, Opt("--max-tokens", min=1, help="Stop (exit 6) once this many tokens "
                                         "(input + output, all models) are used.")]
MaxSubCallsOpt = Annotated[int | None, Opt("--max-sub-calls", min=0, help="Stop (exit 6) when code asks for "
                                           "more sub-calls than this.")]
TimeoutOpt = Annotated[float | None, Opt("--timeout", min=0.1, help="Stop (exit 6) after this many seconds "
                                         "of wall-clock time.")]
SubWindowOpt = Annotated[int | None, Opt("--sub-model-window", min=256, help="Sub-model's input window "
                                         "in tokens (default: litellm's model info, else 32768).")]
RouterOpt = Annotated[Path | None, Opt("--router-config", exists=True, dir_okay=False, help="litellm "
                                       "Router config (YAML/JSON model_list) to spread calls over "
                                       "several deployments.")]
NoLlmCacheOpt = Annotated[bool, Opt("--no-llm-cache", help="Do not read or write the model-response cache.")]
LeadsOpt = Annotated[bool | None, Opt("--leads/--no-leads", help="Run (or not) leads(question), the keyword "
                                     "search of the question's names and words shown to the root model before its first "
                                     "turn (default: the policy's choice; on under guided).", show_default=False)]
PolicyOpt = Annotated[str | None, Opt("--policy", help="The loop's answer checks and aids: auto (default: standard for "
                                      "a model with a known window of 32k+ tokens, else guided), paper, standard or "
                                      "guided. Env: RLM_POLICY.")]
RequireSupportOpt = Annotated[bool | None, Opt("--require-support/--no-require-support", help="Exit 7 when an "
                                               "answer is unsupported: rlm found nothing it rests on (the answer "
                                               "and its verdict are still printed). Config key: require_support.",
                                               show_default=False)]
TemperatureOpt = Annotated[float | None, Opt("--temperature", min=0, help="Sampling temperature of every model "
                                             "request (default: the provider's; 0 for the most repeatable "
                                             "answers).")]

#: The corpus flags in ``--help`` order: parameter name -> (annotation, default).
CORPUS_FLAGS: dict[str, tuple[Any, Any]] = {
    "include": (IncludeOpt, None), "exclude": (ExcludeOpt, None), "hidden": (HiddenOpt, False),
    "no_ignore": (NoIgnoreOpt, False), "follow": (FollowOpt, False), "max_file_size": (MaxSizeOpt, None),
    "truncate_large": (TruncateOpt, False), "decode_timeout": (DecodeTimeoutOpt, None),
    "decode_memory": (DecodeMemoryOpt, None), "no_cache": (NoCacheOpt, False), "chunk_tokens": (ChunkOpt, None),
}
#: The run flags in ``--help`` order, the corpus flags among them; every default is "not given".
RUN_FLAGS: dict[str, tuple[Any, Any]] = {
    "model": (ModelOpt, None), "sub_model": (SubModelOpt, None), "api_base": (ApiBaseOpt, None),
    "api_key": (ApiKeyOpt, None), "max_iterations": (MaxIterOpt, None), "max_depth": (MaxDepthOpt, None),
    "mode": (ModeOpt, None), "direct_max_tokens": (DirectMaxOpt, None), "root_model_window": (RootWindowOpt, None),
    "trace": (TraceOpt, None), "sandbox": (SandboxOpt, None), "cell_timeout": (CellTimeoutOpt, None),
    "memory_limit": (MemoryOpt, None), **CORPUS_FLAGS,
    "max_concurrency": (ConcurrencyOpt, None), "retries": (RetriesOpt, None),
    "request_timeout": (RequestTimeoutOpt, None), "max_cost": (MaxCostOpt, None), "max_tokens": (MaxTokensOpt, None),
    "max_sub_calls": (MaxSubCallsOpt, None), "timeout": (TimeoutOpt, None),
    "sub_model_window": (SubWindowOpt, None), "router_config": (RouterOpt, None),
    "no_llm_cache": (NoLlmCacheOpt, False), "leads": (LeadsOpt, None), "policy": (PolicyOpt, None),
    "require_support": (RequireSupportOpt, None), "temperature": (TemperatureOpt, None),
}


class CorpusFlags:
    """The corpus flags one command was given (``values``: parameter name -> value)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def options(self) -> Any:
        """A ``config.CorpusOptions`` from the flags, the decoder limits completed from the config
        file (``'-'`` paths are refused by the callers).

        Raises:
            UsageError: a bad ``--max-file-size`` or decoder limit.
        """
        from rlm_cli.config import CorpusOptions, decode_limits

        v = self.values
        options = CorpusOptions(include=v["include"] or [], exclude=v["exclude"] or [], hidden=v["hidden"],
                                no_ignore=v["no_ignore"], truncate_large=v["truncate_large"],
                                use_cache=not v["no_cache"], follow=v["follow"])
        if v["max_file_size"]:
            options.max_file_size = parse_size(v["max_file_size"], "--max-file-size")
        options.chunk_tokens = v["chunk_tokens"] or options.chunk_tokens
        options.decode_timeout, options.decode_memory = decode_limits(v["decode_timeout"], v["decode_memory"])
        return options


class RunFlags(CorpusFlags):
    """The run flags one command was given (``None``: not given; the corpus flags among them)."""

    def settings(self) -> Any:
        """``config.Settings`` from the flags, the environment and the config file, with the
        ``CorpusOptions`` of the corpus flags.

        Raises:
            UsageError: a bad value (a size, a word setting) in the flags, env or config file.
        """
        from rlm_cli import config

        corpus = self.options()
        flags = {k: v for k, v in self.values.items() if k not in CORPUS_FLAGS}
        memory_limit, no_llm_cache = flags.pop("memory_limit"), flags.pop("no_llm_cache")
        flags["memory_limit"] = None if memory_limit is None else parse_size(memory_limit, "--memory-limit")
        flags["llm_cache"] = False if no_llm_cache else None
        settings = config.resolve(flags)
        settings.corpus = corpus
        return settings


def _grouped(table: dict[str, tuple[Any, Any]], param: str, holder: type[CorpusFlags], without: tuple[str, ...],
             override: dict[str, Any]) -> Callable[[F], F]:
    """A decorator: the command's parameter ``param`` becomes ``table``'s parameters (less
    ``without``; ``override`` gives some another annotation) in the signature typer reads, and
    their values reach the command as one ``holder``."""
    names = [n for n in table if n not in without]

    def decorate(func: F) -> F:
        hints = typing.get_type_hints(func, include_extras=True)
        params: list[inspect.Parameter] = []
        keyword = inspect.Parameter.KEYWORD_ONLY  # typer passes every value by name
        for p in inspect.signature(func).parameters.values():
            if p.name != param:
                params.append(p.replace(kind=keyword, annotation=hints.get(p.name, p.annotation)))
                continue
            params += [inspect.Parameter(n, keyword, default=table[n][1], annotation=override.get(n, table[n][0]))
                       for n in names]

        @functools.wraps(func)
        def command(**kwargs: Any) -> Any:
            group = holder({n: kwargs.pop(n) for n in names})
            return func(**kwargs, **{param: group})

        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command  # type: ignore[return-value]

    return decorate


def run_options(*, without: tuple[str, ...] = (), **override: Any) -> Callable[[F], F]:
    """Put the run flags (:data:`RUN_FLAGS`, less ``without``; ``override``: name -> another
    ``Annotated`` option) where the command has its ``run: RunFlags`` parameter."""
    return _grouped(RUN_FLAGS, "run", RunFlags, without, override)


def corpus_options(func: F) -> F:
    """Put the corpus flags (:data:`CORPUS_FLAGS`) where the command has its ``flags: CorpusFlags``
    parameter."""
    return _grouped(CORPUS_FLAGS, "flags", CorpusFlags, (), {})(func)


def answer_type(value: str) -> str:
    """``--answer-type``'s value, checked.

    Raises:
        UsageError: not one of ``rlm_cli.loop.typed.TYPES``.
    """
    from rlm_cli.loop.typed import check_type

    try:
        return check_type(value)
    except ValueError as exc:
        raise UsageError(f"--answer-type: {exc}") from None


def use_color(color: str) -> None:
    """Check ``--color`` and make it the default of every renderer of this command.

    Raises:
        UsageError: not auto, always or never.
    """
    from rlm_cli.output import render, style

    try:
        style.display_style(color)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    render.default_color = color
