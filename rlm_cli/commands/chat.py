"""``rlm chat``: questions one after another over one loaded corpus and one REPL."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlm_cli.commands.ask import say_setup
from rlm_cli.commands.invocation import INVOCATION
from rlm_cli.commands.options import (
    BUDGETS,
    OUTPUT,
    ColorOpt,
    PathsArg,
    QuietOpt,
    RunFlags,
    VerboseOpt,
    opt,
    run_options,
    use_color,
)
from rlm_cli.errors import UsageError

#: ``rlm chat``'s own help of the run flags whose meaning differs in a session.
CHAT_FLAGS = dict(
    trace=Annotated[Path | None, opt("--trace", section=OUTPUT, metavar="FILE",
                                     help="Write question N's trajectory to FILE-N.")],
    max_cost=Annotated[float | None, opt("--max-cost", section=BUDGETS, min=0, metavar="USD",
                                         help="Stop once the session has cost this.")],
    max_tokens=Annotated[int | None, opt("--max-tokens", section=BUDGETS, min=1, metavar="N",
                                         help="Stop once the session used N tokens.")],
    max_sub_calls=Annotated[int | None, opt("--max-sub-calls", section=BUDGETS, min=0, metavar="N",
                                            help="Sub-calls in the whole session.")],
    timeout=Annotated[float | None, opt("--timeout", section=BUDGETS, min=0.1, metavar="SECONDS",
                                        help="Time answering (the prompt is free).")],
)


@run_options(without=("direct_max_tokens",), **CHAT_FLAGS)
def chat(
    paths: PathsArg,
    *,
    run: RunFlags,
    json_out: Annotated[bool, opt("--json", section=OUTPUT, help="One JSON document per answer and line.")] = False,
    cite: Annotated[bool, opt("--cite", section=OUTPUT, help="Then list the lines each answer cites.")] = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    color: ColorOpt = "auto",
) -> None:
    """Ask questions one after another about the corpus at PATH...

    One loaded corpus, one REPL whose variables are kept, follow-up questions understood. /help
    lists the commands; Ctrl-D ends it."""
    from rlm_cli.app.chat import Chat, cost_text
    from rlm_cli.app.session import INTERRUPT_GRACE_S, Session
    from rlm_cli.output import render

    host = INVOCATION.take_host()
    try:
        use_color(color)
        if "-" in paths:
            raise UsageError("rlm chat reads questions from standard input, so the corpus cannot come from it",
                             hint="give files or folders")
        settings = run.settings()
        ui = render.Renderer(quiet=quiet, verbose=verbose)
        if verbose:
            say_setup(ui, settings, host)
        with Session(settings, paths, emit=ui.on_event, backend=host, conversation=True, numbered=True,
                     interrupt_grace_s=INTERRUPT_GRACE_S) as session:
            session.open()
            code = Chat(session, ui, json_out=json_out, cite=cite).run()
            ui.info(cost_text(session))
    finally:
        host.close()
    if code:
        raise typer.Exit(code)
