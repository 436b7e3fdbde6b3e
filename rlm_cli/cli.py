"""The ``rlm`` command line: parse flags, build settings, call the core, render, map errors.

Business logic lives in the core modules; each command here stays short. ``main()`` is the only
place that turns exceptions into exit codes (see ``errors.ExitCode`` and the README's table).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from rlm_cli import __version__
from rlm_cli.config_keys import parse_size
from rlm_cli.errors import ExitCode, PartialAnswerError, RLMError, UsageError

app = typer.Typer(name="rlm", no_args_is_help=True, add_completion=True, pretty_exceptions_enable=False,
                  help="Answer questions about huge local corpora with Recursive Language Models.")

_debug = False
#: Set by ``ask --json``: errors then also print a JSON document on stdout, so ``| jq`` never
#: gets empty input.
_json_errors = False
#: ... and it is one line: ``rlm ask -q/--questions --json`` writes JSON Lines.
_json_lines = False


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"rlm {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
) -> None:
    """rlm: the corpus lives in a sandboxed REPL; the model writes code to read it."""
    global _debug
    _debug = debug or _debug


Opt = typer.Option

#: Options shared by several commands (the corpus flags are the same for ask, index and stats).
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


def _set_debug(value: bool) -> bool:
    global _debug
    _debug = bool(value) or _debug
    return value


#: ``--debug`` after the command name too (``rlm ask --debug ...``), as the error messages suggest.
DebugOpt = Annotated[bool, Opt("--debug", callback=_set_debug, help="Show tracebacks for errors "
                                                                       "(same as rlm --debug COMMAND).")]
QuietOpt = Annotated[bool, Opt("--quiet", "-q", help="Print only errors on stderr.")]
#: ``rlm ask`` and ``rlm chat``: ``--quiet`` without a short form (``-q`` is ``ask --question``).
LongQuietOpt = Annotated[bool, Opt("--quiet", help="Print only errors on stderr.")]
ColorOpt = Annotated[str, Opt("--color", metavar="WHEN", help="auto|always|never: colours and live progress "
                              "on stderr (auto: when stderr is a terminal, unless NO_COLOR or TERM=dumb).")]

#: The ``schema`` of the ``rlm ask --json`` document: ``rlm_cli/schemas/ask-result.v1.json``.
ASK_SCHEMA = "ask-result.v1"  # the same as documents.ASK_SCHEMA (that module is imported lazily)
#: Where ``--output`` sends the answer or document (set by ``ask`` once checked), else stdout.
_output_path: Path | None = None


def _use_color(color: str) -> None:
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


#: Options of the model, the loop, budgets and the sandbox, shared by ``ask`` and ``eval``.
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
RootWindowOpt = Annotated[int | None, Opt("--root-model-window", min=256, help="Root model's input window "
                                          "in tokens (default: litellm's model info, else 32768).")]
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
TemperatureOpt = Annotated[float | None, Opt("--temperature", min=0, help="Sampling temperature of every model "
                                             "request (default: the provider's; 0 for the most repeatable "
                                             "answers).")]
VerboseOpt = Annotated[bool, Opt("--verbose", "-v", help="More detail on stderr.")]


def _run_settings(*, memory_limit: str | None, no_llm_cache: bool, corpus: Any, leads: bool | None = None,
                  **flags: Any) -> Any:
    """Settings from the run flags shared by ``ask`` and ``eval`` (``None`` = not given), the
    environment and the config file; ``corpus`` is the ``CorpusOptions`` to use.

    Raises:
        UsageError: a bad value (a size, a word setting) in the flags, env or config file.
    """
    from rlm_cli import config

    flags["memory_limit"] = None if memory_limit is None else parse_size(memory_limit, "--memory-limit")
    flags["llm_cache"] = False if no_llm_cache else None
    flags["leads"] = leads
    settings = config.resolve(flags)
    settings.corpus = corpus
    return settings


@app.command(context_settings={"allow_interspersed_args": True})
def ask(
    args: Annotated[list[str], typer.Argument(metavar="PATH... [QUESTION]",
                                              help="Files, folders, globs or '-' (stdin), then the question "
                                                   "(with -q, --questions or --question-file: only PATHs).")],
    question: Annotated[list[str] | None, Opt("--question", "-q", help="A question (repeatable); every argument "
                                              "is then a PATH, and each answer is written as it completes, under "
                                              "a header (--json: one JSON document per line).")] = None,
    questions: Annotated[str | None, Opt("--questions", metavar="FILE", help="Questions from FILE: one per line, or "
                                         "JSON Lines with \"id\" and \"question\" ('-': stdin).")] = None,
    jobs: Annotated[int, Opt("--jobs", min=1, help="With several questions: how many run at once, each in its own "
                             "worker (default 1: one after another in one worker, whose variables carry over).")] = 1,
    question_file: Annotated[str | None, Opt("--question-file", metavar="FILE", help="Read the (one) question from "
                                             "FILE ('-': stdin, when the corpus is not on stdin); every argument "
                                             "is then a PATH.")] = None,
    model: ModelOpt = None,
    sub_model: SubModelOpt = None,
    api_base: ApiBaseOpt = None,
    api_key: ApiKeyOpt = None,
    max_iterations: MaxIterOpt = None,
    max_depth: MaxDepthOpt = None,
    mode: Annotated[str | None, Opt("--mode", help="auto|rlm|direct: direct sends the whole corpus in one call; "
                                    "auto (default) does so when it fits comfortably. Env: RLM_MODE.")] = None,
    direct_max_tokens: Annotated[int | None, Opt("--direct-max-tokens", min=0, help="Auto mode goes direct only "
                                                 "under this many corpus tokens (default 30000) and under "
                                                 "1/4 of the root model's window.")] = None,
    root_model_window: RootWindowOpt = None,
    trace: Annotated[Path | None, Opt("--trace", help="Write the trajectory (JSONL) to FILE instead of the "
                                      "user data dir.")] = None,
    sandbox: SandboxOpt = None,
    cell_timeout: CellTimeoutOpt = None,
    memory_limit: MemoryOpt = None,
    include: IncludeOpt = None,
    exclude: ExcludeOpt = None,
    hidden: HiddenOpt = False,
    no_ignore: NoIgnoreOpt = False,
    follow: FollowOpt = False,
    max_file_size: MaxSizeOpt = None,
    truncate_large: TruncateOpt = False,
    decode_timeout: DecodeTimeoutOpt = None,
    decode_memory: DecodeMemoryOpt = None,
    no_cache: NoCacheOpt = False,
    chunk_tokens: ChunkOpt = None,
    max_concurrency: ConcurrencyOpt = None,
    retries: RetriesOpt = None,
    request_timeout: RequestTimeoutOpt = None,
    max_cost: MaxCostOpt = None,
    max_tokens: MaxTokensOpt = None,
    max_sub_calls: MaxSubCallsOpt = None,
    timeout: TimeoutOpt = None,
    sub_model_window: SubWindowOpt = None,
    router_config: RouterOpt = None,
    no_llm_cache: NoLlmCacheOpt = False,
    leads: LeadsOpt = None,
    policy: PolicyOpt = None,
    temperature: TemperatureOpt = None,
    json_out: JsonOpt = False,
    cite: Annotated[bool, Opt("--cite", help="After the answer, list the corpus lines it rests on "
                                             "(Sources: path:start-end).")] = False,
    output: Annotated[Path | None, Opt("--output", "-o", help="Write the answer (or the --json document) to "
                                       "FILE, atomically, instead of stdout.")] = None,
    quiet: LongQuietOpt = False,
    verbose: VerboseOpt = False,
    color: ColorOpt = "auto",
    debug: DebugOpt = False,
) -> None:
    """Answer QUESTION about the corpus at PATH... (the last argument is the question, unless -q,
    --questions or --question-file give it)."""
    from rlm_cli.output import render

    global _output_path
    started = time.monotonic()  # elapsed_s is what the user waits: litellm's import included
    host = _start_host()  # first: litellm is imported there while the corpus loads
    try:
        _use_color(color)
        if output is not None:
            from rlm_cli.output.outfile import check_writable

            _output_path = check_writable(output)
        multi = bool(question) or questions is not None
        if multi and question_file is not None:
            raise UsageError("--question-file gives one question; -q/--questions give a list: use one of them",
                             hint="a long question can be one line of a --questions JSON Lines file")
        paths, the_question = (args, "") if multi else _paths_and_question(args, question_file)
        settings = _run_settings(
            model=model, sub_model=sub_model, api_base=api_base, api_key=api_key, max_iterations=max_iterations,
            max_depth=max_depth, sandbox=sandbox, mode=mode, direct_max_tokens=direct_max_tokens,
            root_model_window=root_model_window, trace=trace, cell_timeout=cell_timeout, memory_limit=memory_limit,
            max_concurrency=max_concurrency, retries=retries, request_timeout=request_timeout, max_cost=max_cost,
            max_tokens=max_tokens, max_sub_calls=max_sub_calls, timeout=timeout, sub_model_window=sub_model_window,
            router_config=router_config, no_llm_cache=no_llm_cache, leads=leads, policy=policy, temperature=temperature,
            corpus=_corpus_options(include, exclude, hidden, no_ignore, max_file_size, truncate_large, no_cache,
                                   chunk_tokens, decode=(decode_timeout, decode_memory), follow=follow))
        ui = render.Renderer(quiet=quiet, verbose=verbose)
        if multi:
            from rlm_cli.batch import read_questions

            if not paths:
                raise UsageError("give at least one PATH", hint='e.g. rlm ask ./repo -q "Where is X?"')
            listed = read_questions(question or [], questions, stdin_is_corpus="-" in paths)
            code = _ask_many(settings, paths, listed, jobs=jobs, host=host, ui=ui, json_out=json_out, cite=cite,
                             started=started, verbose=verbose)
            if code:
                raise typer.Exit(code)
            return
        _ask_one(settings, paths, the_question, host=host, ui=ui, json_out=json_out, cite=cite, started=started,
                 verbose=verbose)
    finally:
        host.close()


#: The model host ``main()`` started before parsing the command line (``rlm ask``/``rlm chat``).
_early_host: Any = None


def _start_host() -> Any:
    """The model host process (``models.host.HostBackend``): the one ``main()`` started, else a new one."""
    global _early_host
    host, _early_host = _early_host, None
    if host is not None:
        return host
    from rlm_cli.models.host import HostBackend

    return HostBackend()


def _host_first(argv: list[str]) -> None:
    """Start the model host before anything else when the command is ``ask``, ``chat`` or ``mcp`` (not
    ``--help``): its litellm import then overlaps even the parsing of the command line."""
    global _early_host
    words = [a for a in argv if not a.startswith("-")]
    if words[:1] in (["ask"], ["chat"], ["mcp"]) and not {"--help", "-h", "--version"} & set(argv):
        import atexit

        from rlm_cli.models.host import HostBackend

        try:
            _early_host = HostBackend()
        except UsageError:
            return  # a bad RLM_HOST_IDLE: the command reports it, with its exit code
        atexit.register(_close_early_host)  # the command failed before it took the host


def _close_early_host() -> None:
    global _early_host
    host, _early_host = _early_host, None
    if host is not None:
        host.close()


def _say_setup(ui: Any, settings: Any, host: Any) -> None:
    """The ``-v`` lines of ``ask`` and ``chat``: the sandbox level and how the model host was got."""
    from rlm_cli.doctor import sandbox_line

    ui.info(sandbox_line(settings.sandbox))
    ui.info(f"model host: {getattr(host, 'sharing', 'in this process')}")


def _stdin_corpus(paths: list[str]) -> bytes | None:
    """The corpus piped in when a PATH is ``-``.

    Raises:
        UsageError: ``-`` is given but nothing is piped in.
    """
    if "-" not in paths:
        return None
    if sys.stdin.isatty():
        raise UsageError("'-' reads the corpus from standard input, but nothing is piped in",
                         hint='e.g. cat big.txt | rlm ask - "question"')
    return sys.stdin.buffer.read()


def _ask_one(settings: Any, paths: list[str], question: str, *, host: Any, ui: Any, json_out: bool, cite: bool,
             started: float, verbose: bool) -> None:
    """One question, answered as ``rlm ask`` always has (one document or the answer)."""
    from rlm_cli import runner
    from rlm_cli.output.documents import outcome_document

    stdin_bytes = _stdin_corpus(paths)
    if verbose:
        _say_setup(ui, settings, host)
    try:
        outcome = runner.ask(settings, paths, question, emit=ui.on_event, stdin_bytes=stdin_bytes, backend=host)
    except PartialAnswerError as exc:
        _emit_partial(exc, ui, json_out, settings, round(time.monotonic() - started, 3), cite=cite)
        raise
    finally:
        ui.close()
    doc = outcome_document(outcome, round(time.monotonic() - started, 3))
    ui.summary(doc)
    _deliver(doc, json_out, cite, ui)


def _ask_many(settings: Any, paths: list[str], listed: list[Any], *, host: Any, ui: Any, json_out: bool,
              cite: bool, jobs: int, started: float, verbose: bool) -> int:
    """Several questions over one loaded corpus (``rlm_cli.batch``); returns the worst exit code."""
    from rlm_cli import batch
    from rlm_cli.session import Session

    stdin_bytes = _stdin_corpus(paths)
    if verbose:
        _say_setup(ui, settings, host)
    write, finish = _batch_writer(json_out, cite, ui, len(listed))
    with Session(settings, paths, emit=ui.on_event, stdin_bytes=stdin_bytes, backend=host, numbered=True) as session:
        session.open()
        results = batch.run_all(session, listed, jobs=jobs, emit_for=lambda q: _question_events(q, ui, jobs),
                                on_result=lambda r: write(batch.result_document(r, session.level), r))
        ui.close()
    finish()
    code = batch.worst_exit_code([r.exit_code for r in results])
    partial = sum(1 for r in results if isinstance(r.error, PartialAnswerError))
    failed = sum(1 for r in results if r.error is not None) - partial
    ui.summary({"iterations": sum(_iterations(r) for r in results), "usage": session.usage.summary(),
                "sub_calls": session.usage.sub_calls, "elapsed_s": round(time.monotonic() - started, 3)})
    ui.info(f"{len(results)} questions: {len(results) - partial - failed} answered, {partial} partial, {failed} "
            "failed" + (f"; exit code {code} (the worst)" if code else ""))
    return code


def _iterations(result: Any) -> int:
    r = result.outcome.result if result.outcome is not None else getattr(result.error, "result", None)
    return int(getattr(r, "iterations", 0) or 0)


def _question_events(question: Any, ui: Any, jobs: int) -> Any:
    """The event callback of one question of a list: everything on stderr when they run one at a
    time (after a header line), only warnings when several run at once."""
    if jobs <= 1:
        ui.info(f"━━ question [{question.id}] ━━")
        return ui.on_event

    def warnings_only(ev: dict[str, Any]) -> None:
        if ev.get("type") == "notice" and ev.get("level") == "warning":
            ui.on_event(ev)
    return warnings_only


def _batch_writer(json_out: bool, cite: bool, ui: Any, total: int) -> tuple[Any, Any]:
    """``(write(doc, result), finish())``: each question's document (a JSON line) or answer under
    a header goes to stdout as it completes, or, with ``--output``, into FILE at the end."""
    from rlm_cli.batch import header
    from rlm_cli.output import answer
    from rlm_cli.output.documents import answer_text

    kept: list[str] = []
    count = [0]

    def write(doc: dict[str, Any], result: Any) -> None:
        count[0] += 1
        if result.error is not None and not isinstance(result.error, PartialAnswerError):
            ui.error(f"question [{result.question.id}]: {result.error}")
        else:
            ui.summary(doc)
            if result.error is not None:
                ui.warning(f"question [{result.question.id}]: {result.error.message}; the answer is PARTIAL")
        if json_out:
            text = json.dumps(doc, ensure_ascii=False, default=str) + "\n"
        else:
            why = doc.get("error") or (result.error.message if result.error is not None else "")
            body = answer_text(doc, cite) if doc.get("answer") else f"(no answer: {why})\n"
            text = ("\n" if count[0] > 1 else "") + header(result.question) + "\n" + body
        if _output_path is None:
            answer.write_text(text)
        else:
            kept.append(text)

    def finish() -> None:
        if _output_path is not None:
            from rlm_cli.output.outfile import write_atomic

            write_atomic(_output_path, "".join(kept))
            ui.info(f"wrote {_output_path}")
    return write, finish


@app.command()
def chat(
    paths: PathsArg,
    model: ModelOpt = None,
    sub_model: SubModelOpt = None,
    api_base: ApiBaseOpt = None,
    api_key: ApiKeyOpt = None,
    max_iterations: MaxIterOpt = None,
    max_depth: MaxDepthOpt = None,
    mode: Annotated[str | None, Opt("--mode", help="auto|rlm|direct (see rlm ask --help). Env: RLM_MODE.")] = None,
    root_model_window: RootWindowOpt = None,
    trace: Annotated[Path | None, Opt("--trace", help="Write question N's trajectory to FILE with -N before its "
                                      "suffix instead of the user data dir.")] = None,
    sandbox: SandboxOpt = None,
    cell_timeout: CellTimeoutOpt = None,
    memory_limit: MemoryOpt = None,
    include: IncludeOpt = None,
    exclude: ExcludeOpt = None,
    hidden: HiddenOpt = False,
    no_ignore: NoIgnoreOpt = False,
    follow: FollowOpt = False,
    max_file_size: MaxSizeOpt = None,
    truncate_large: TruncateOpt = False,
    decode_timeout: DecodeTimeoutOpt = None,
    decode_memory: DecodeMemoryOpt = None,
    no_cache: NoCacheOpt = False,
    chunk_tokens: ChunkOpt = None,
    max_concurrency: ConcurrencyOpt = None,
    retries: RetriesOpt = None,
    request_timeout: RequestTimeoutOpt = None,
    max_cost: Annotated[float | None, Opt("--max-cost", min=0, help="Stop once the session has cost this many USD "
                                          "(priced models only).")] = None,
    max_tokens: Annotated[int | None, Opt("--max-tokens", min=1, help="Stop once the session has used this many "
                                          "tokens.")] = None,
    max_sub_calls: Annotated[int | None, Opt("--max-sub-calls", min=0, help="Sub-calls allowed in the whole "
                                             "session.")] = None,
    timeout: Annotated[float | None, Opt("--timeout", min=0.1, help="Seconds the session may spend answering "
                                         "(time at the prompt does not count).")] = None,
    sub_model_window: SubWindowOpt = None,
    router_config: RouterOpt = None,
    no_llm_cache: NoLlmCacheOpt = False,
    leads: LeadsOpt = None,
    policy: PolicyOpt = None,
    temperature: TemperatureOpt = None,
    json_out: Annotated[bool, Opt("--json", help="One JSON document per answer, one per line.")] = False,
    cite: Annotated[bool, Opt("--cite", help="After each answer, list the corpus lines it rests on.")] = False,
    quiet: LongQuietOpt = False,
    verbose: VerboseOpt = False,
    color: ColorOpt = "auto",
) -> None:
    """Ask questions one after another about the corpus at PATH...: one loaded corpus, one REPL whose
    variables are kept, follow-up questions understood. /help lists the commands; Ctrl-D ends it."""
    from rlm_cli.chat import Chat, cost_text
    from rlm_cli.output import render
    from rlm_cli.session import INTERRUPT_GRACE_S, Session

    host = _start_host()
    try:
        _use_color(color)
        if "-" in paths:
            raise UsageError("rlm chat reads questions from standard input, so the corpus cannot come from it",
                             hint="give files or folders")
        settings = _run_settings(
            model=model, sub_model=sub_model, api_base=api_base, api_key=api_key, max_iterations=max_iterations,
            max_depth=max_depth, sandbox=sandbox, mode=mode, root_model_window=root_model_window, trace=trace,
            cell_timeout=cell_timeout, memory_limit=memory_limit, max_concurrency=max_concurrency, retries=retries,
            request_timeout=request_timeout, max_cost=max_cost, max_tokens=max_tokens, max_sub_calls=max_sub_calls,
            timeout=timeout, sub_model_window=sub_model_window, router_config=router_config,
            no_llm_cache=no_llm_cache, leads=leads, policy=policy, temperature=temperature,
            corpus=_corpus_options(include, exclude, hidden, no_ignore, max_file_size, truncate_large, no_cache,
                                   chunk_tokens, decode=(decode_timeout, decode_memory), follow=follow))
        ui = render.Renderer(quiet=quiet, verbose=verbose)
        if verbose:
            _say_setup(ui, settings, host)
        with Session(settings, paths, emit=ui.on_event, backend=host, conversation=True, numbered=True,
                     interrupt_grace_s=INTERRUPT_GRACE_S) as session:
            session.open()
            code = Chat(session, ui, json_out=json_out, cite=cite).run()
            ui.info(cost_text(session))
    finally:
        host.close()
    if code:
        raise typer.Exit(code)


@app.command()
def mcp(
    paths: PathsArg,
    model: ModelOpt = None,
    sub_model: SubModelOpt = None,
    api_base: ApiBaseOpt = None,
    api_key: ApiKeyOpt = None,
    max_iterations: Annotated[int | None, Opt("--max-iterations", min=1, help="Root-model turns of each ask "
                                              "(default 20; a call's max_iterations can lower it).")] = None,
    max_depth: MaxDepthOpt = None,
    mode: Annotated[str | None, Opt("--mode", help="auto|rlm|direct (see rlm ask --help). Env: RLM_MODE.")] = None,
    direct_max_tokens: Annotated[int | None, Opt("--direct-max-tokens", min=0, help="Auto mode goes direct only "
                                                 "under this many corpus tokens (default 30000).")] = None,
    root_model_window: RootWindowOpt = None,
    sandbox: SandboxOpt = None,
    cell_timeout: CellTimeoutOpt = None,
    memory_limit: MemoryOpt = None,
    include: IncludeOpt = None,
    exclude: ExcludeOpt = None,
    hidden: HiddenOpt = False,
    no_ignore: NoIgnoreOpt = False,
    follow: FollowOpt = False,
    max_file_size: MaxSizeOpt = None,
    truncate_large: TruncateOpt = False,
    decode_timeout: DecodeTimeoutOpt = None,
    decode_memory: DecodeMemoryOpt = None,
    no_cache: NoCacheOpt = False,
    chunk_tokens: ChunkOpt = None,
    max_concurrency: ConcurrencyOpt = None,
    retries: RetriesOpt = None,
    request_timeout: RequestTimeoutOpt = None,
    max_cost: Annotated[float | None, Opt("--max-cost", min=0, help="Stop each ask once it has cost this many USD "
                                          "(priced models only; a call's max_cost can lower it).")] = None,
    max_tokens: Annotated[int | None, Opt("--max-tokens", min=1, help="Stop each ask once it has used this many "
                                          "tokens.")] = None,
    max_sub_calls: Annotated[int | None, Opt("--max-sub-calls", min=0, help="Sub-calls allowed in each ask.")] = None,
    timeout: Annotated[float | None, Opt("--timeout", min=0.1, help="Seconds each ask may take.")] = None,
    sub_model_window: SubWindowOpt = None,
    router_config: RouterOpt = None,
    no_llm_cache: NoLlmCacheOpt = False,
    leads: LeadsOpt = None,
    policy: PolicyOpt = None,
    temperature: TemperatureOpt = None,
    quiet: QuietOpt = False,
    verbose: Annotated[bool, Opt("--verbose", "-v", help="Show every run on stderr as rlm ask does.")] = False,
    color: ColorOpt = "auto",
    debug: DebugOpt = False,
) -> None:
    """Serve the corpus at PATH... to coding agents and editors over the Model Context Protocol (stdio):
    tools ask, search, grep and corpus_info over one warm session. Needs the mcp extra:
    pip install 'rlm-cli\\[mcp]'."""
    from rlm_cli.mcp import protocol, server
    from rlm_cli.output import render

    host = _start_host()
    try:
        _use_color(color)
        protocol.require_sdk()
        settings = _run_settings(
            model=model, sub_model=sub_model, api_base=api_base, api_key=api_key, max_iterations=max_iterations,
            max_depth=max_depth, sandbox=sandbox, mode=mode, direct_max_tokens=direct_max_tokens,
            root_model_window=root_model_window, cell_timeout=cell_timeout, memory_limit=memory_limit,
            max_concurrency=max_concurrency, retries=retries, request_timeout=request_timeout, max_cost=max_cost,
            max_tokens=max_tokens, max_sub_calls=max_sub_calls, timeout=timeout, sub_model_window=sub_model_window,
            router_config=router_config, no_llm_cache=no_llm_cache, leads=leads, policy=policy, temperature=temperature,
            corpus=_corpus_options(include, exclude, hidden, no_ignore, max_file_size, truncate_large, no_cache,
                                   chunk_tokens, decode=(decode_timeout, decode_memory), follow=follow))
        code = server.serve(settings, paths, host=host, ui=render.Renderer(quiet=quiet, verbose=verbose),
                            debug=_debug)
    finally:
        host.close()
    if code:
        raise typer.Exit(code)


@app.command(name="eval")
def eval_cmd(
    paths: PathsArg,
    families: Annotated[str, Opt("--families", help="Comma-separated task families: needle, code, aggregate, "
                                 "pairs.")] = "needle,code,aggregate,pairs",
    limit: Annotated[int, Opt("--limit", min=1, help="Questions per family.")] = 10,
    seed: Annotated[int, Opt("--seed", help="Same seed and corpus, same questions.")] = 0,
    split: Annotated[str, Opt("--split", help="dev: the families' own wording (tune on it); test: other wordings "
                              "and seeds (report it, never tune on it).")] = "dev",
    modes: Annotated[str, Opt("--modes", help="Comma-separated: rlm, direct (direct only where the corpus fits "
                              "the root model's window).")] = "rlm",
    jobs: Annotated[int, Opt("--jobs", min=1, help="Questions run at once.")] = 1,
    records: Annotated[int, Opt("--records", min=20, help="Lines of the generated log (aggregate) and, a "
                                "quarter of it, of each ticket list (pairs).")] = 1000,
    report: Annotated[Path | None, Opt("--report", help="Also write a Markdown report to FILE.")] = None,
    model: ModelOpt = None,
    sub_model: SubModelOpt = None,
    api_base: ApiBaseOpt = None,
    api_key: ApiKeyOpt = None,
    max_iterations: MaxIterOpt = None,
    max_depth: MaxDepthOpt = None,
    root_model_window: RootWindowOpt = None,
    sandbox: SandboxOpt = None,
    cell_timeout: CellTimeoutOpt = None,
    memory_limit: MemoryOpt = None,
    include: IncludeOpt = None,
    exclude: ExcludeOpt = None,
    hidden: HiddenOpt = False,
    no_ignore: NoIgnoreOpt = False,
    follow: FollowOpt = False,
    max_file_size: MaxSizeOpt = None,
    truncate_large: TruncateOpt = False,
    decode_timeout: DecodeTimeoutOpt = None,
    decode_memory: DecodeMemoryOpt = None,
    no_cache: NoCacheOpt = False,
    chunk_tokens: ChunkOpt = None,
    max_concurrency: ConcurrencyOpt = None,
    retries: RetriesOpt = None,
    request_timeout: RequestTimeoutOpt = None,
    max_cost: MaxCostOpt = None,
    max_tokens: MaxTokensOpt = None,
    max_sub_calls: MaxSubCallsOpt = None,
    timeout: TimeoutOpt = None,
    sub_model_window: SubWindowOpt = None,
    router_config: RouterOpt = None,
    no_llm_cache: NoLlmCacheOpt = False,
    leads: LeadsOpt = None,
    policy: PolicyOpt = None,
    temperature: TemperatureOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    color: ColorOpt = "auto",
    debug: DebugOpt = False,
) -> None:
    """Measure answer quality on your own corpus: generated questions with exact answers, run like
    `rlm ask` and scored. Budgets (--timeout, --max-cost...) apply to each question."""
    from rlm_cli.evaluation import cli_run
    from rlm_cli.output import answer, render

    _use_color(color)
    settings = _run_settings(
        model=model, sub_model=sub_model, api_base=api_base, api_key=api_key, max_iterations=max_iterations,
        max_depth=max_depth, sandbox=sandbox, root_model_window=root_model_window, cell_timeout=cell_timeout,
        memory_limit=memory_limit, max_concurrency=max_concurrency, retries=retries,
        request_timeout=request_timeout, max_cost=max_cost, max_tokens=max_tokens, max_sub_calls=max_sub_calls,
        timeout=timeout, sub_model_window=sub_model_window, router_config=router_config, no_llm_cache=no_llm_cache, leads=leads, policy=policy,
        temperature=temperature,
        corpus=_corpus_options(include, exclude, hidden, no_ignore, max_file_size, truncate_large, no_cache,
                               chunk_tokens, decode=(decode_timeout, decode_memory), follow=follow))
    ui = render.Renderer(quiet=quiet, verbose=verbose)
    doc, markdown = cli_run.evaluate(settings, paths, families=_words(families, "--families"),
                                     modes=_words(modes, "--modes"), limit=limit, seed=seed, jobs=jobs,
                                     records=records, ui=ui, command=_command_line(), split=split)
    if report is not None:
        cli_run.write_atomic(report, markdown)
        ui.info(f"report written to {report}")
    answer.write_json(doc) if json_out else answer.write_answer(cli_run.summary_text(doc))


def _words(value: str, flag: str) -> list[str]:
    words = [w.strip() for w in value.split(",") if w.strip()]
    if not words:
        raise UsageError(f"{flag} is empty")
    return list(dict.fromkeys(words))


def _command_line() -> str:
    import shlex

    args = [a if not a.startswith("sk-") else "***" for a in sys.argv[1:]]
    if "--api-key" in args and args.index("--api-key") + 1 < len(args):
        args[args.index("--api-key") + 1] = "***"
    return "rlm " + " ".join(shlex.quote(a) for a in args)


def as_text(arg: str) -> str:
    """A command-line argument as text: bytes that are not UTF-8 (which Python keeps as lone
    surrogates) become U+FFFD, so the question can be written to the trajectory and sent."""
    return arg.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _paths_and_question(args: list[str], question_file: str | None) -> tuple[list[str], str]:
    """``(paths, question)`` from ``rlm ask``'s arguments: the last one is the question, or, with
    ``--question-file FILE``, all are paths and the question is FILE's text (UTF-8; ``-``: stdin).

    Raises:
        UsageError: no path or question, an empty question, an unreadable or non-UTF-8 file, or
            both the corpus and the question on stdin.
    """
    if question_file is None:
        if len(args) < 2:
            raise UsageError("give at least one PATH and a QUESTION", hint='e.g. rlm ask ./repo "Where is X?"')
        paths, question = args[:-1], as_text(args[-1])
    else:
        paths = args
        if not paths:
            raise UsageError("give at least one PATH", hint="rlm ask ./repo --question-file question.txt")
        from rlm_cli.batch import read_text_file

        question = read_text_file(question_file, "--question-file", "the question",
                                  stdin_is_corpus="-" in paths)[0].strip()
    if not question.strip():
        raise UsageError("the question is empty")
    return paths, question


def _deliver(doc: dict[str, Any], json_out: bool, cite: bool, ui: Any) -> None:
    """The document (``--json``) or the answer (with its sources under ``--cite``) to stdout, or
    to ``--output`` atomically."""
    from rlm_cli.output import answer
    from rlm_cli.output.documents import answer_text

    text = answer.json_text(doc) if json_out else answer_text(doc, cite)
    if _output_path is None:
        answer.write_text(text)
        return
    from rlm_cli.output.outfile import write_atomic

    write_atomic(_output_path, text)
    ui.info(f"wrote {_output_path}")


def _emit_partial(exc: PartialAnswerError, ui: Any, json_out: bool, settings: Any, elapsed: float, *,
                  cite: bool = False) -> None:
    from rlm_cli.output.documents import partial_document

    doc = partial_document(exc, settings.sandbox, elapsed)
    ui.summary(doc)
    if json_out:
        _deliver(doc, True, False, ui)
    elif exc.partial:
        _deliver(doc, False, cite, ui)


trace_app = typer.Typer(no_args_is_help=True, help="Inspect recorded trajectories (JSONL, one per run).")
app.add_typer(trace_app, name="trace")


@trace_app.command("list")
def trace_list(json_out: JsonOpt = False) -> None:
    """List the recorded trajectories, newest first."""
    from rlm_cli.output import answer, render, tables, trace

    infos = trace.list_traces()
    if json_out:
        answer.write_json({"traces_dir": str(trace.traces_dir()), "traces": [trace.info_dict(i) for i in infos]})
        return
    if not infos:
        render.Renderer().info(f"no trajectories in {trace.traces_dir()}")
        return
    tables.print_trace_list(infos)


@trace_app.command("show")
def trace_show(ref: Annotated[str, typer.Argument(metavar="ID", help="Run id, unique prefix, 'last' or a "
                                                  ".jsonl path.")]) -> None:
    """Show one trajectory as a tree: iterations, code, outputs, sub-calls, recursion."""
    from rlm_cli.output import trace, trace_view

    events = trace.read_trace(trace.find_trace(ref))
    trace_view.print_trace_tree(events[0], trace.build_tree(events))


@trace_app.command("export")
def trace_export(
    ref: Annotated[str, typer.Argument(metavar="ID", help="Run id, unique prefix, 'last' or a .jsonl path.")],
    html: Annotated[bool, Opt("--html", help="Export as one self-contained HTML file.")] = False,
    output: Annotated[Path | None, Opt("--output", "-o", help="Where to write (default: ID.html here).")] = None,
) -> None:
    """Export one trajectory to share it (HTML)."""
    from rlm_cli.output import render, trace, trace_view

    if not html:
        raise UsageError("choose an export format", hint="--html")
    path = trace.find_trace(ref)
    events = trace.read_trace(path)
    out = output or Path(f"{path.stem}.html")
    page = trace_view.trace_html(events[0], trace.build_tree(events))
    try:  # private like the trajectory it comes from (it holds the corpus excerpts the model saw)
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(page)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}", hint="choose another --output") from None
    render.Renderer().info(f"wrote {out}")


@app.command()
def replay(
    ref: Annotated[str, typer.Argument(metavar="ID", help="Run id, unique prefix, 'last' or a .jsonl path.")],
    sandbox: Annotated[str | None, Opt("--sandbox", help="Override the recorded sandbox level.")] = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    color: ColorOpt = "auto",
    debug: DebugOpt = False,
) -> None:
    """Re-run a recorded run from its recorded model responses, without calling any provider."""
    from rlm_cli import replay as replay_mod
    from rlm_cli.output import answer, render, trace

    started = time.monotonic()
    _use_color(color)
    p = replay_mod.plan(trace.find_trace(ref), sandbox=sandbox)
    ui = render.Renderer(quiet=quiet)
    stdin_bytes = sys.stdin.buffer.read() if "-" in p.paths else None
    try:
        outcome = replay_mod.replay(p, emit=ui.on_event, stdin_bytes=stdin_bytes)
    except PartialAnswerError as exc:
        _emit_partial(exc, ui, json_out, p.settings, round(time.monotonic() - started, 3))
        raise
    finally:
        ui.close()
    from rlm_cli.output.documents import outcome_document

    r = outcome.result
    doc = outcome_document(outcome, round(time.monotonic() - started, 3))
    doc["trace"] = str(p.path)
    doc["same_answer"] = r.answer == p.recorded_answer
    if not doc["same_answer"]:
        ui.warning("the replayed answer differs from the recorded one")
    ui.summary(doc)
    answer.write_json(doc) if json_out else answer.write_answer(r.answer)


config_app = typer.Typer(no_args_is_help=True, help="Show or change settings (config.toml in the user config dir).")
app.add_typer(config_app, name="config")


@config_app.command("show")
def config_show(json_out: JsonOpt = False) -> None:
    """Show every setting: its value (secrets redacted) and where it comes from."""
    from rlm_cli import config
    from rlm_cli.models import detect as models
    from rlm_cli.output import answer, render

    problems: list[str] = []  # shown after the settings, so a bad entry can be seen in context
    entries = config.config_entries(problems=problems)
    settings = config.resolve_with_sources({}, problems=[])[0]
    if not settings.model:
        found = models.detect(settings)
        model = next(e for e in entries if e["key"] == "model")
        if found is not None:
            model.update(value=found.model, source=f"autodetected: {found.reason}")
            for e in entries:
                if e["key"] == "sub_model" and found.sub_model and not settings.sub_model:
                    e.update(value=found.sub_model, source="autodetected")
                if e["key"] == "api_base" and found.api_base and not settings.api_base:
                    e.update(value=found.api_base, source="autodetected")
        else:
            model["source"] = "not set and nothing detected"
    path = config.config_path()
    if json_out:
        answer.write_json({"path": str(path), "exists": path.exists(), "settings": entries,
                           "problems": list(dict.fromkeys(problems))})
    else:
        lines = [f"# {path}" + ("" if path.exists() else " (not created yet)")]
        lines += [f"{e['key']} = {_show_value(e['value'], e['key'])}  # {e['source']}" for e in entries]
        answer.write_answer("\n".join(lines))
    if problems:  # after the document (no second one on stdout), like any error: exit 2
        ui = render.Renderer()
        for problem in dict.fromkeys(problems):
            ui.error(problem)
        ui.info("`rlm config set KEY VALUE` fixes a known key (`none` removes it); `rlm config path` shows the file")
        raise typer.Exit(int(ExitCode.USAGE))


def _show_value(value: Any, key: str = "") -> str:
    """A setting's value as in the TOML file (``(unset)`` for none; sizes as ``"4G"``)."""
    from rlm_cli.config_keys import SIZE_KEYS, format_size

    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if key in SIZE_KEYS and isinstance(value, int):
        return json.dumps(format_size(value))
    return json.dumps(value) if isinstance(value, str) else str(value)


@config_app.command("set")
def config_set(
    key: Annotated[str, typer.Argument(help="Setting name, like the flag: model, sub-model, max-cost...")],
    value: Annotated[str, typer.Argument(help="New value; 'none' removes the setting from the file.")],
) -> None:
    """Store a setting in the config file (created with mode 0600)."""
    from rlm_cli import config
    from rlm_cli.output import render

    name, typed, path = config.set_config_value(key, value)
    shown = config.redact_secret(str(typed)) if name in config.SECRET_KEYS and typed is not None else typed
    render.Renderer().info(f"{name} removed from {path}" if typed is None else f"{name} = {shown} written to {path}")


@config_app.command("path")
def config_path_cmd() -> None:
    """Print the config file's path."""
    from rlm_cli import config
    from rlm_cli.output import answer

    answer.write_answer(str(config.config_path()))


@app.command()
def doctor(json_out: JsonOpt = False, debug: DebugOpt = False) -> None:
    """Report the sandbox level a run would use and what it protects, bwrap, Python, litellm, paths."""
    from rlm_cli import doctor as checkup
    from rlm_cli.output import answer

    report = checkup.collect()
    answer.write_json(report) if json_out else answer.write_answer("\n".join(checkup.lines(report)))


# -- corpus commands: rlm index, rlm stats, rlm cache -----------------------------------------------



def _corpus_options(include: list[str] | None, exclude: list[str] | None, hidden: bool, no_ignore: bool,
                    max_file_size: str | None, truncate_large: bool, no_cache: bool, chunk_tokens: int | None,
                    decode: tuple[float | None, str | None] = (None, None), *, follow: bool = False) -> Any:
    """A ``CorpusOptions`` from the corpus flags (``'-'`` is refused by the callers); ``decode`` is
    ``(--decode-timeout, --decode-memory)``, completed from the config file."""
    from rlm_cli.config import CorpusOptions, decode_limits

    options = CorpusOptions(include=include or [], exclude=exclude or [], hidden=hidden, no_ignore=no_ignore,
                            truncate_large=truncate_large, use_cache=not no_cache, follow=follow)
    if max_file_size:
        options.max_file_size = parse_size(max_file_size, "--max-file-size")
    options.chunk_tokens = chunk_tokens or options.chunk_tokens
    options.decode_timeout, options.decode_memory = decode_limits(*decode)
    return options


def _load(paths: list[str], options: Any, ui: Any) -> tuple[Any, float]:
    import time

    from rlm_cli.corpus import load_corpus
    from rlm_cli.output.progress import index_callback

    if "-" in paths:
        raise UsageError("'-' (stdin) is not cached; give files or folders")
    started = time.monotonic()
    try:
        corpus = load_corpus(paths, options, on_warning=ui.warning, on_progress=index_callback(ui.on_event))
    finally:
        ui.close()
    return corpus, time.monotonic() - started


@app.command()
def index(paths: PathsArg, include: IncludeOpt = None, exclude: ExcludeOpt = None, hidden: HiddenOpt = False,
          no_ignore: NoIgnoreOpt = False, follow: FollowOpt = False, max_file_size: MaxSizeOpt = None,
          truncate_large: TruncateOpt = False,
          decode_timeout: DecodeTimeoutOpt = None, decode_memory: DecodeMemoryOpt = None, no_cache: NoCacheOpt = False, chunk_tokens: ChunkOpt = None, json_out: JsonOpt = False,
          quiet: QuietOpt = False, color: ColorOpt = "auto", debug: DebugOpt = False) -> None:
    """Build or refresh the chunk-index cache of PATH... and print the summary on stderr."""
    from rlm_cli.corpus.stats import index_summary
    from rlm_cli.output import answer, render

    _use_color(color)
    ui = render.Renderer(quiet=quiet)
    options = _corpus_options(include, exclude, hidden, no_ignore, max_file_size, truncate_large, no_cache,
                              chunk_tokens, decode=(decode_timeout, decode_memory), follow=follow)
    corpus, elapsed = _load(paths, options, ui)
    where = "not cached (--no-cache)" if corpus.temporary else f"cache: {corpus.bundle_dir}"
    ui.info(f"{corpus.summary()} in {elapsed:.2f} s; {where}")
    if json_out:
        answer.write_json(index_summary(corpus, elapsed))


@app.command()
def stats(paths: PathsArg, include: IncludeOpt = None, exclude: ExcludeOpt = None, hidden: HiddenOpt = False,
          no_ignore: NoIgnoreOpt = False, follow: FollowOpt = False, max_file_size: MaxSizeOpt = None,
          truncate_large: TruncateOpt = False,
          decode_timeout: DecodeTimeoutOpt = None, decode_memory: DecodeMemoryOpt = None, no_cache: NoCacheOpt = False, chunk_tokens: ChunkOpt = None,
          top: Annotated[int, Opt("--top", min=0, help="How many of the largest files to list.")] = 10,
          json_out: JsonOpt = False, quiet: QuietOpt = False, debug: DebugOpt = False) -> None:
    """Show files, chunks and tokens by file type and the largest files of PATH... (builds the cache)."""
    from rlm_cli.corpus.stats import corpus_stats
    from rlm_cli.output import answer, render

    ui = render.Renderer(quiet=quiet)
    options = _corpus_options(include, exclude, hidden, no_ignore, max_file_size, truncate_large, no_cache,
                              chunk_tokens, decode=(decode_timeout, decode_memory), follow=follow)
    corpus, _ = _load(paths, options, ui)
    doc = corpus_stats(corpus, top=top)
    if json_out:
        answer.write_json(doc)
        return
    ui.info(corpus.summary())
    ui.table(f"{doc['files']:,} files, {doc['chunks']:,} chunks, {doc['tokens']:,} tokens by file type",
             ["type", "files", "bytes", "tokens", "chunks"],
             [[r["type"], f"{r['files']:,}", f"{r['bytes']:,}", f"{r['tokens']:,}", f"{r['chunks']:,}"]
              for r in doc["by_type"]])
    if doc["largest"]:
        ui.table("Largest files", ["path", "lines", "tokens", "chunks"],
                 [[r["path"], f"{r['lines']:,}", f"{r['tokens']:,}", f"{r['chunks']:,}"] for r in doc["largest"]])
    ctx = doc["context"]
    width = ctx["bytes_per_char"]
    memory = ctx["memory_bytes"]
    ui.table("context in the REPL worker", ["characters", "bytes per character", "memory"],
             [[f"{ctx['chars']:,}", str(width),
               f"{memory / 2**20:,.1f} MiB" if memory >= 2**20 else f"{memory / 1024:,.1f} KiB"]])
    if ctx["wide_files_count"]:
        astral = ctx["astral_files_count"]
        beyond = f"{ctx['wide_files_count']:,} file(s) hold characters beyond U+00FF" + (
            f", {astral:,} of them beyond U+FFFF" if astral else "")
        ui.info(f"Python stores a string at the width of its widest character: {beyond}, so all of context takes "
                f"{width} bytes per character (--exclude them to shrink it; a file's name counts too)")
        more = ctx["wide_files_count"] - len(ctx["wide_files"])
        if ctx["wide_files"]:
            ui.table("Files with characters beyond U+00FF" + (f" ({more:,} more: raise --top)" if more else ""),
                     ["path", "bytes per character", "characters"],
                     [[r["path"], str(r["bytes_per_char"]), f"{r['chars']:,}"] for r in ctx["wide_files"]])


cache_app = typer.Typer(no_args_is_help=True, help="Show or clear the cache (corpus indexes, model responses).")
app.add_typer(cache_app, name="cache")


@cache_app.command("info")
def cache_info(json_out: JsonOpt = False) -> None:
    """Show the cache folder, the size of each cache and the cached corpus indexes."""
    from rlm_cli.corpus.cache import cache_info as info
    from rlm_cli.output import answer, render

    doc = info()
    if json_out:
        answer.write_json(doc)
        return
    ui = render.Renderer()
    ui.info(f"cache folder: {doc['path']} ({doc['bytes']:,} bytes)")
    ui.table("Caches", ["cache", "holds", "files", "bytes"],
             [[c["name"], c["holds"], f"{c['files']:,}", f"{c['bytes']:,}"] for c in doc["caches"]])
    if doc["bundles"]:
        ui.table("Corpus indexes (newest first)", ["roots", "files", "tokens", "bytes"],
                 [[", ".join(b["roots"]) or "(broken)", f"{b['files'] or 0:,}", f"{b['tokens'] or 0:,}",
                   f"{b['bytes']:,}"] for b in doc["bundles"]])


@cache_app.command("clear")
def cache_clear(
    which: Annotated[list[str] | None, typer.Argument(metavar="[CACHE]...", help="index and/or llm "
                                                      "(default: all).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Delete the cached corpus indexes (index) and model responses (llm)."""
    from rlm_cli.corpus.cache import cache_clear as clear
    from rlm_cli.output import answer, render

    try:
        doc = clear(which)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if json_out:
        answer.write_json(doc)
    render.Renderer().info("removed " + ", ".join(f"{r['name']}/ ({r['files']:,} files, {r['bytes']:,} bytes)"
                                                   for r in doc["removed"]) + f" from {doc['path']}")


host_app = typer.Typer(no_args_is_help=True, help="Show or stop the shared model hosts (litellm kept warm "
                       "between commands; RLM_HOST_IDLE).")
app.add_typer(host_app, name="host")


@host_app.command("status")
def host_status(json_out: JsonOpt = False) -> None:
    """List this user's shared model hosts: pid, age, idle time, commands using it, requests served."""
    from rlm_cli.models import host_admin, shared
    from rlm_cli.output import answer, render

    hosts = host_admin.running()
    folder = shared.runtime_path()
    unsafe = shared.unsafe_dir(folder) if folder.exists() else None
    idle = shared.idle_seconds()
    sharing = "off: RLM_HOST_IDLE=0" if idle <= 0 else f"off: {unsafe}" if unsafe else "on"
    if json_out:
        answer.write_json({"folder": str(folder), "sharing": sharing, "idle_limit_s": idle, "hosts": hosts})
        return
    ui = render.Renderer()
    ui.info(f"runtime folder {folder}; sharing {sharing}; this shell's {shared.IDLE_ENV}: {idle:g} s")
    if not hosts:
        ui.info("no shared model host is running")
        return
    ui.table("Shared model hosts (one per environment; see rlm ask -v)",
             ["pid", "key", "age s", "idle s", "idle limit s", "in use by", "requests", "runs in"],
             [[str(h.get("pid")), str(h["key"]), f"{h.get('age_s', 0):g}", f"{h.get('idle_s', 0):g}",
               f"{h.get('idle_limit_s') or 0:g}", str(h.get("leases", 0)), str(h.get("requests", 0)),
               str(h.get("cwd", ""))] if h.get("answering") else
              [str(h.get("pid")), str(h["key"]), "-", "-", "-", "-", "-", "not answering (rlm host stop kills it)"]
              for h in hosts])


@host_app.command("stop")
def host_stop(json_out: JsonOpt = False) -> None:
    """Ask every shared model host of this user to exit (each as soon as no command is using it)."""
    from rlm_cli.models import host_admin
    from rlm_cli.output import answer, render

    pids = host_admin.stop_all()
    if json_out:
        answer.write_json({"stopped": pids})
        return
    render.Renderer().info(f"stopping {len(pids)} shared model host(s)" + (f": pid {', '.join(map(str, pids))}"
                                                                           if pids else ""))


def main() -> None:
    """Console-script entry point: run the app and map every error to its exit code."""
    global _json_errors, _json_lines
    from rlm_cli.errors import ExitCode as _EC

    # SIGTERM unwinds like Ctrl-C, so the worker, socket and scratch folders are cleaned up.
    signal.signal(signal.SIGTERM, _on_sigterm)
    _fast_exit()
    # With --json, an error is a JSON document on stdout too (so `| jq` never reads nothing),
    # even one met before the command runs (a flag the parser rejects).
    args = sys.argv[1:sys.argv.index("--") if "--" in sys.argv else None]
    _json_errors = "--json" in args
    _json_lines = _command() == "ask" and any(a in ("-q", "--question", "--questions")
                                              or a.startswith(("--question=", "--questions=")) for a in args)
    try:
        try:
            os.getcwd()
        except OSError:
            raise UsageError("the current folder no longer exists (deleted or unmounted)",
                             hint="cd to an existing folder and run the command again") from None
        _host_first(sys.argv[1:])
        rv = app(standalone_mode=False)
        # Non-standalone typer turns Ctrl-C into a returned 130 (and typer.Exit into its code).
        if rv == _EC.INTERRUPTED:
            raise KeyboardInterrupt
        if isinstance(rv, int) and not isinstance(rv, bool) and rv:
            sys.exit(rv)
    except PartialAnswerError as exc:
        note = "; the answer on stdout is PARTIAL" if exc.partial else "; no answer was produced"
        _fail(exc, exc.exit_code, exc.message + note + (f" ({exc.hint})" if exc.hint else ""))
    except RLMError as exc:
        _json_error(str(exc), exc.exit_code)
        _fail(exc, exc.exit_code, str(exc))
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        _json_error("interrupted (Ctrl-C)", _EC.INTERRUPTED, status="interrupted")
        _fail(None, _EC.INTERRUPTED, "interrupted")
    except typer.TyperException as exc:  # click's usage errors (typer vendors click)
        message = exc.format_message() + _usage_hint(exc)
        if "--json" in message:  # a command without --json: no JSON promised
            _json_errors = False
        _json_error(message, _EC.USAGE)
        _fail(exc, _EC.USAGE, message)
    except KeyboardInterrupt:
        _json_error("interrupted (Ctrl-C)", _EC.INTERRUPTED, status="interrupted")
        _fail(None, _EC.INTERRUPTED, "interrupted")
    except SystemExit as exc:  # raised by the SIGTERM handler, which said "terminated" on stderr
        if exc.code == _EC.TERMINATED:
            _json_error("terminated (SIGTERM)", _EC.TERMINATED, status="interrupted")
        # typer's and rich's own answer to a closed pipe is exit 1, a "bug" in rlm's table
        if exc.code == 1 and (_pipe_closed() or isinstance(exc.__context__, BrokenPipeError)):
            _quiet_exit(_EC.BROKEN_PIPE)
        raise
    except BrokenPipeError:
        _quiet_exit(_EC.BROKEN_PIPE)
    except Exception as exc:  # noqa: BLE001 - a bug: one line, traceback only with --debug
        _json_error(f"internal error: {type(exc).__name__}: {exc}", _EC.INTERNAL)
        _fail(exc, _EC.INTERNAL, f"internal error: {type(exc).__name__}: {exc} (rerun with --debug and "
                                 "report it)")
    sys.exit(_EC.OK)


def _pipe_closed() -> bool:
    """Whether typer met a closed stdout or stderr pipe (it wraps both streams when it does)."""
    wrapper = type(sys.stdout).__name__, type(sys.stderr).__name__
    return any(name.lstrip("_") == "PacifyFlushWrapper" for name in wrapper)


def _quiet_exit(code: int) -> None:
    """Exit with ``code`` (141: the reader of stdout or stderr went away, as in ``rlm ask ... |
    head``; 128 + SIGPIPE, what a shell reports for a command a closed pipe stopped) without a
    word: nobody reads the streams, and flushing them at exit must not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):
            pass
    sys.exit(code)


def _json_error(message: str, code: int, *, status: str = "error") -> None:
    """Under ``--json``: the error as a JSON document, on stdout or in ``ask --output``'s file.
    ``ask`` and ``replay`` documents name their schema (``ask-result.v1``) like a success does."""
    if not _json_errors:
        return
    from rlm_cli.output.answer import json_text, write_text

    doc: dict[str, Any] = {"status": status, "error": message, "exit_code": int(code), "answer": None}
    if _command() in ("ask", "replay", "chat"):
        doc = {"schema": ASK_SCHEMA, **doc}
    text = json.dumps(doc, ensure_ascii=False, default=str) + "\n" if _json_lines else json_text(doc)
    if _output_path is not None:
        from rlm_cli.output.outfile import write_atomic

        try:
            write_atomic(_output_path, text)
            return
        except RLMError:
            pass  # the file cannot take it: stdout then
    try:
        write_text(text)
    except OSError:  # nobody reads stdout any more (a closed pipe)
        pass


def _command() -> str | None:
    """The subcommand named on the command line (the first word that is not an option)."""
    return next((a for a in sys.argv[1:] if not a.startswith("-")), None)


_exit_hook = False


def _fast_exit() -> None:
    """At interpreter exit, move every object out of the garbage collector's reach
    (``gc.freeze()``) once the atexit handlers have run: the collections Python runs while it
    tears down its modules walk litellm's millions of objects, which took 1.4 s of every exit
    (Ctrl-C included) on a loaded 2-core machine; frozen, teardown takes about 0.05 s. Memory is
    returned to the system either way. Registered once per process."""
    global _exit_hook
    if not _exit_hook:
        import atexit
        import gc

        atexit.register(gc.freeze)  # the first registered runs last, after everyone's cleanup
        _exit_hook = True


def _on_sigterm(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sys.stderr.write("\nrlm: terminated\n")
    raise SystemExit(int(ExitCode.TERMINATED))


def _usage_hint(exc: Any) -> str:
    ctx = getattr(exc, "ctx", None)
    return f" (see `{ctx.command_path} --help`)" if ctx is not None else " (see `rlm --help`)"


def _fail(exc: BaseException | None, code: int, message: str) -> None:
    if _debug and exc is not None:
        import traceback

        traceback.print_exception(exc)
    if code == ExitCode.INTERRUPTED:
        sys.stderr.write("\nrlm: interrupted\n")
    else:
        from rlm_cli.output.render import Renderer

        Renderer().error(message)
    sys.stderr.flush()
    sys.exit(int(code))

