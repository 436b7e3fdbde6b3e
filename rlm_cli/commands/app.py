"""The ``rlm`` Typer app, its commands in ``--help`` order, and the console-script entry point.

Each command module parses flags, builds settings, calls the application layer (``rlm_cli.app``)
and renders; :func:`main` is the only place that turns exceptions into exit codes (through
``rlm_cli.commands.exits``).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from rlm_cli import __version__
from rlm_cli.commands import ask, audit, chat, config, corpus, evaluate, exits, hosts, mcp, streams, traces
from rlm_cli.commands.helptext import short_help_flag, use_plain_help
from rlm_cli.commands.invocation import INVOCATION
from rlm_cli.output import workflow_guard

app = typer.Typer(name="rlm", no_args_is_help=True, add_completion=True, pretty_exceptions_enable=False,
                  help="Answer questions about huge local corpora with Recursive Language Models.")


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
    INVOCATION.debug = debug or INVOCATION.debug


# The one-line summaries of `rlm --help` (each command's own text is its docstring).
app.command(context_settings={"allow_interspersed_args": True},
            short_help="Answer a question about a corpus.")(ask.ask)
app.command(short_help="Run a checklist of typed checks (CI audits).")(audit.audit)
app.command(short_help="Ask one question after another in one session.")(chat.chat)
app.command(short_help="Serve a corpus to coding agents over MCP.")(mcp.mcp)
app.command(name="eval", short_help="Measure answer quality on your own corpus.")(evaluate.eval_cmd)
app.add_typer(traces.trace_app, name="trace", short_help="List, show, export or remove recorded runs.")
app.command(short_help="Re-run a recorded run without calling a provider.")(traces.replay)
app.add_typer(config.config_app, name="config", short_help="Show or change settings.")
app.command(short_help="Say what this machine gives: sandbox, Python, paths.")(config.doctor)
app.command(short_help="Build or refresh the index cache of a corpus.")(corpus.index)
app.command(short_help="Show a corpus's files, chunks and tokens.")(corpus.stats)
app.add_typer(corpus.cache_app, name="cache", short_help="Show or clear the caches.")
app.add_typer(hosts.host_app, name="host", short_help="Show or stop the shared model hosts.")
use_plain_help(app)


def main(closed: set[str] | None = None, early_host: Any = None) -> None:
    """Run the app and map every error to its exit code (never returns). ``closed``: the standard
    streams ``streams.reopen_closed`` reopened, when the caller did (``commands.launch``), and
    ``early_host`` the model host it started (``Invocation.start_host_early``)."""
    if closed is None:
        closed = streams.reopen_closed()  # first: no file rlm opens may take the number of a closed stream
    exits.install()
    workflow_guard.install()  # under GitHub Actions no line rlm writes is a runner command (issue 47)
    # With --json, an error is a JSON document on stdout too (so `| jq` never reads nothing),
    # even one met before the command runs (a flag the parser rejects).
    args, warning = INVOCATION.short_question_flag(short_help_flag(sys.argv[1:]))
    sys.argv[1:] = args
    if warning:
        sys.stderr.write(f"warning: {warning}\n")
    INVOCATION.begin(sys.argv[1:])
    INVOCATION.early_host = early_host
    exits.run(lambda: app(prog_name="rlm", standalone_mode=False), closed=closed)
