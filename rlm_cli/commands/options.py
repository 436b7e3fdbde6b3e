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

from rlm_cli.commands.complete import ANSWER_TYPES, COLORS, choice, models, trace_ids, words
from rlm_cli.commands.invocation import INVOCATION
from rlm_cli.config_keys import parse_size
from rlm_cli.errors import UsageError

Opt = typer.Option
F = TypeVar("F", bound=Callable[..., Any])

#: The sections of ``--help`` (``commands.helptext``), in the order a command lists them.
QUESTIONS, MODELS, LOOP, BUDGETS, SANDBOX, CORPUS, OUTPUT = (
    "Questions", "Models", "Loop", "Budgets", "Sandbox", "Corpus", "Output")


def opt(*names: str, section: str, help: str, metavar: str | None = None,
        complete: Callable[..., Any] | None = None, **kw: Any) -> Any:
    """A ``typer.Option`` in ``--help`` section ``section``, with a one-line ``help`` (the long
    explanation of every option is in docs/usage.md), no ``[default: ...]`` tag (a default worth
    knowing is in the help text), and ``complete``: the shell completer of its values
    (``commands.complete``)."""
    return Opt(*names, help=help, metavar=metavar, rich_help_panel=section, autocompletion=complete,
               show_default=False, **kw)


PathsArg = Annotated[list[str], typer.Argument(metavar="PATH...", help="Files, folders or globs.")]
#: A recorded run: ``rlm trace show/export``, ``rlm replay`` (the shell completes the newest ids).
TraceRefArg = Annotated[str, typer.Argument(metavar="ID", autocompletion=trace_ids,
                                            help="Run id, unique prefix, 'last' or a .jsonl path.")]
IncludeOpt = Annotated[list[str] | None, opt("--include", section=CORPUS, metavar="GLOB",
                                             help="Only files matching GLOB (repeatable).")]
ExcludeOpt = Annotated[list[str] | None, opt("--exclude", section=CORPUS, metavar="GLOB",
                                             help="Skip files matching GLOB (repeatable).")]
HiddenOpt = Annotated[bool, opt("--hidden", section=CORPUS, help="Include dotfiles and dot-folders.")]
NoIgnoreOpt = Annotated[bool, opt("--no-ignore", section=CORPUS, help="Read what .gitignore/.rlmignore leave out.")]
FollowOpt = Annotated[bool, opt("--follow", "-L", section=CORPUS, help="Follow symlinks out of the PATHs.")]
MaxSizeOpt = Annotated[str | None, opt("--max-file-size", section=CORPUS, metavar="SIZE",
                                       help="Skip larger files (default 10M).")]
TruncateOpt = Annotated[bool, opt("--truncate-large", section=CORPUS, help="Keep the head of larger files instead.")]
NoCacheOpt = Annotated[bool, opt("--no-cache", section=CORPUS, help="Neither read nor write the index cache.")]
DecodeTimeoutOpt = Annotated[float | None, opt("--decode-timeout", section=CORPUS, min=0.1, metavar="SECONDS",
                                               help="Time to decode a document (60).")]
DecodeMemoryOpt = Annotated[str | None, opt("--decode-memory", section=CORPUS, metavar="SIZE",
                                            help="Memory of the document decoder (2G).")]
ChunkOpt = Annotated[int | None, opt("--chunk-tokens", section=CORPUS, min=50, metavar="N",
                                     help="Chunk size in tokens (2000).")]
JsonOpt = Annotated[bool, opt("--json", section=OUTPUT, help="One JSON document on stdout.")]
AnswerTypeOpt = Annotated[str, opt("--answer-type", section=QUESTIONS, metavar="TYPE", complete=words(ANSWER_TYPES),
                                   help="text|bool|int|number|list|locations|json")]


def _set_debug(value: bool) -> bool:
    INVOCATION.debug = bool(value) or INVOCATION.debug
    return value


#: ``--debug`` after the command name too (``rlm ask --debug ...``), as the error messages suggest.
DebugOpt = Annotated[bool, opt("--debug", section=OUTPUT, callback=_set_debug, help="Show the traceback of an error.")]
QuietOpt = Annotated[bool, opt("--quiet", "-q", section=OUTPUT, help="Only errors on stderr.")]
ColorOpt = Annotated[str, opt("--color", section=OUTPUT, metavar="WHEN", complete=words(COLORS),
                              help="Colours and live progress: auto|always|never.")]
VerboseOpt = Annotated[bool, opt("--verbose", "-v", section=OUTPUT, help="More detail on stderr.")]

#: Options of the model, the loop, budgets and the sandbox (the run flags).
ModelOpt = Annotated[str | None, opt("--model", "-m", section=MODELS, metavar="MODEL", complete=models,
                                     help="Root model (litellm name; env RLM_MODEL).")]
SubModelOpt = Annotated[str | None, opt("--sub-model", section=MODELS, metavar="MODEL", complete=models,
                                        help="Model of sub-calls (default: --model).")]
ApiBaseOpt = Annotated[str | None, opt("--api-base", section=MODELS, metavar="URL",
                                       help="Provider base URL (env RLM_API_BASE).")]
ApiKeyOpt = Annotated[str | None, opt("--api-key", section=MODELS, metavar="KEY",
                                      help="Provider API key (env RLM_API_KEY).")]
RootWindowOpt = Annotated[int | None, opt("--root-model-window", section=MODELS, min=256, metavar="N",
                                          help="Root model's input window in tokens.")]
SubWindowOpt = Annotated[int | None, opt("--sub-model-window", section=MODELS, min=256, metavar="N",
                                         help="Sub-model's input window in tokens.")]
RouterOpt = Annotated[Path | None, opt("--router-config", section=MODELS, exists=True, dir_okay=False,
                                       metavar="FILE", help="litellm Router file of deployments.")]
TemperatureOpt = Annotated[float | None, opt("--temperature", section=MODELS, min=0, metavar="T",
                                             help="Sampling temperature of every call.")]
ModeOpt = Annotated[str | None, opt("--mode", section=LOOP, metavar="MODE", complete=choice("mode"),
                                    help="auto|rlm|direct (env RLM_MODE).")]
DirectMaxOpt = Annotated[int | None, opt("--direct-max-tokens", section=LOOP, min=0, metavar="N",
                                         help="auto goes direct below N tokens.")]
PolicyOpt = Annotated[str | None, opt("--policy", section=LOOP, metavar="POLICY", complete=choice("policy"),
                                      help="auto|paper|standard|guided.")]
LeadsOpt = Annotated[bool | None, opt("--leads/--no-leads", section=LOOP,
                                      help="Search the question's words first.")]
MaxIterOpt = Annotated[int | None, opt("--max-iterations", section=LOOP, min=1, metavar="N",
                                       help="Root-model turns (default 20).")]
MaxDepthOpt = Annotated[int | None, opt("--max-depth", section=LOOP, min=1, metavar="N",
                                        help="Recursion depth (default 1).")]
RequireSupportOpt = Annotated[bool | None, opt("--require-support/--no-require-support", section=LOOP,
                                               help="Exit 7 when an answer is a guess.")]
MaxCostOpt = Annotated[float | None, opt("--max-cost", section=BUDGETS, min=0, metavar="USD",
                                         help="Stop (exit 6) past this cost.")]
MaxTokensOpt = Annotated[int | None, opt("--max-tokens", section=BUDGETS, min=1, metavar="N",
                                         help="Stop (exit 6) past N tokens.")]
MaxSubCallsOpt = Annotated[int | None, opt("--max-sub-calls", section=BUDGETS, min=0, metavar="N",
                                           help="Stop (exit 6) past N sub-calls.")]
TimeoutOpt = Annotated[float | None, opt("--timeout", section=BUDGETS, min=0.1, metavar="SECONDS",
                                         help="Stop (exit 6) after this long.")]
ConcurrencyOpt = Annotated[int | None, opt("--max-concurrency", section=BUDGETS, min=1, metavar="N",
                                           help="Sub-calls at once (default 16).")]
RetriesOpt = Annotated[int | None, opt("--retries", section=BUDGETS, min=0, metavar="N",
                                       help="Retries of a failed call (3).")]
RequestTimeoutOpt = Annotated[float | None, opt("--request-timeout", section=BUDGETS, min=0.1, metavar="SECONDS",
                                                help="Time per model call (300).")]
NoLlmCacheOpt = Annotated[bool, opt("--no-llm-cache", section=BUDGETS, help="Neither read nor write cached replies.")]
NoPromptCacheOpt = Annotated[bool, opt("--no-prompt-cache", section=BUDGETS,
                                       help="Mark no prompt-cache breakpoints (Claude).")]
SandboxOpt = Annotated[str | None, opt("--sandbox", section=SANDBOX, metavar="LEVEL", complete=choice("sandbox"),
                                       help="auto|bwrap|sandbox-exec|process|none")]
CellTimeoutOpt = Annotated[float | None, opt("--cell-timeout", section=SANDBOX, min=1, metavar="SECONDS",
                                             help="Time per code block (120).")]
MemoryOpt = Annotated[str | None, opt("--memory-limit", section=SANDBOX, metavar="SIZE",
                                      help="The worker's memory (default 4G).")]
TraceOpt = Annotated[Path | None, opt("--trace", section=OUTPUT, metavar="FILE",
                                      help="Write the trajectory to FILE.")]

#: The corpus flags in ``--help`` order: parameter name -> (annotation, default).
CORPUS_FLAGS: dict[str, tuple[Any, Any]] = {
    "include": (IncludeOpt, None), "exclude": (ExcludeOpt, None), "hidden": (HiddenOpt, False),
    "no_ignore": (NoIgnoreOpt, False), "follow": (FollowOpt, False), "max_file_size": (MaxSizeOpt, None),
    "truncate_large": (TruncateOpt, False), "decode_timeout": (DecodeTimeoutOpt, None),
    "decode_memory": (DecodeMemoryOpt, None), "no_cache": (NoCacheOpt, False), "chunk_tokens": (ChunkOpt, None),
}
#: The run flags in ``--help`` order (by section), the corpus flags among them; every default is "not given".
RUN_FLAGS: dict[str, tuple[Any, Any]] = {
    "model": (ModelOpt, None), "sub_model": (SubModelOpt, None), "api_base": (ApiBaseOpt, None),
    "api_key": (ApiKeyOpt, None), "root_model_window": (RootWindowOpt, None),
    "sub_model_window": (SubWindowOpt, None), "router_config": (RouterOpt, None),
    "temperature": (TemperatureOpt, None),
    "mode": (ModeOpt, None), "direct_max_tokens": (DirectMaxOpt, None), "policy": (PolicyOpt, None),
    "leads": (LeadsOpt, None), "max_iterations": (MaxIterOpt, None), "max_depth": (MaxDepthOpt, None),
    "require_support": (RequireSupportOpt, None),
    "max_cost": (MaxCostOpt, None), "max_tokens": (MaxTokensOpt, None), "max_sub_calls": (MaxSubCallsOpt, None),
    "timeout": (TimeoutOpt, None), "max_concurrency": (ConcurrencyOpt, None), "retries": (RetriesOpt, None),
    "request_timeout": (RequestTimeoutOpt, None), "no_llm_cache": (NoLlmCacheOpt, False),
    "no_prompt_cache": (NoPromptCacheOpt, False),
    "sandbox": (SandboxOpt, None), "cell_timeout": (CellTimeoutOpt, None), "memory_limit": (MemoryOpt, None),
    **CORPUS_FLAGS,
    "trace": (TraceOpt, None),
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
        flags["prompt_cache"] = False if flags.pop("no_prompt_cache") else None
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
        UsageError: not one of ``rlm_cli.answer_types.NAMES``.
    """
    from rlm_cli.loop.typed import check_type

    try:
        return check_type(value).value
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
