"""``rlm mcp``: the corpus served to coding agents over the Model Context Protocol (stdio)."""

from __future__ import annotations

from typing import Annotated

import typer

from rlm_cli.commands.invocation import INVOCATION
from rlm_cli.commands.options import (
    ColorOpt,
    DebugOpt,
    Opt,
    PathsArg,
    QuietOpt,
    RunFlags,
    run_options,
    use_color,
)

#: ``rlm mcp``'s own help of the run flags that apply to each ``ask`` tool call.
MCP_FLAGS = dict(
    max_iterations=Annotated[int | None, Opt("--max-iterations", min=1, help="Root-model turns of each ask "
                                             "(default 20; a call's max_iterations can lower it).")],
    mode=Annotated[str | None, Opt("--mode", help="auto|rlm|direct (see rlm ask --help). Env: RLM_MODE.")],
    direct_max_tokens=Annotated[int | None, Opt("--direct-max-tokens", min=0, help="Auto mode goes direct only "
                                                "under this many corpus tokens (default 30000).")],
    max_cost=Annotated[float | None, Opt("--max-cost", min=0, help="Stop each ask once it has cost this many USD "
                                         "(priced models only; a call's max_cost can lower it).")],
    max_tokens=Annotated[int | None, Opt("--max-tokens", min=1, help="Stop each ask once it has used this many "
                                         "tokens.")],
    max_sub_calls=Annotated[int | None, Opt("--max-sub-calls", min=0, help="Sub-calls allowed in each ask.")],
    timeout=Annotated[float | None, Opt("--timeout", min=0.1, help="Seconds each ask may take.")],
)


@run_options(without=("trace", "require_support"), **MCP_FLAGS)
def mcp(
    paths: PathsArg,
    *,
    run: RunFlags,
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

    host = INVOCATION.take_host()
    try:
        use_color(color)
        protocol.require_sdk()
        settings = run.settings()
        code = server.serve(settings, paths, host=host, ui=render.Renderer(quiet=quiet, verbose=verbose),
                            debug=INVOCATION.debug)
    finally:
        host.close()
    if code:
        raise typer.Exit(code)
