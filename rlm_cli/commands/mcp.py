"""``rlm mcp``: the corpus served to coding agents over the Model Context Protocol (stdio)."""

from __future__ import annotations

from typing import Annotated

import typer

from rlm_cli.commands.invocation import INVOCATION
from rlm_cli.commands.options import (
    BUDGETS,
    LOOP,
    OUTPUT,
    ColorOpt,
    DebugOpt,
    PathsArg,
    QuietOpt,
    RunFlags,
    opt,
    run_options,
    use_color,
)

#: ``rlm mcp``'s own help of the run flags that apply to each ``ask`` tool call.
MCP_FLAGS = dict(
    max_iterations=Annotated[int | None, opt("--max-iterations", section=LOOP, min=1, metavar="N",
                                             help="Root-model turns of each ask (20).")],
    max_cost=Annotated[float | None, opt("--max-cost", section=BUDGETS, min=0, metavar="USD",
                                         help="Stop an ask past this cost.")],
    max_tokens=Annotated[int | None, opt("--max-tokens", section=BUDGETS, min=1, metavar="N",
                                         help="Stop an ask past N tokens.")],
    max_sub_calls=Annotated[int | None, opt("--max-sub-calls", section=BUDGETS, min=0, metavar="N",
                                            help="Sub-calls allowed in each ask.")],
    timeout=Annotated[float | None, opt("--timeout", section=BUDGETS, min=0.1, metavar="SECONDS",
                                        help="Time each ask may take.")],
)


@run_options(without=("trace", "require_support"), **MCP_FLAGS)
def mcp(
    paths: PathsArg,
    *,
    run: RunFlags,
    quiet: QuietOpt = False,
    verbose: Annotated[bool, opt("--verbose", "-v", section=OUTPUT, help="Show every run on stderr.")] = False,
    color: ColorOpt = "auto",
    debug: DebugOpt = False,
) -> None:
    """Serve the corpus at PATH... to coding agents over MCP (stdio).

    The tools ask, search, grep and corpus_info over one warm session. Needs the mcp extra:
    pip install '/path/to/rlm[mcp]' (or the wheel with [mcp])."""
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
