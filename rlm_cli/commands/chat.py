"""``rlm chat``: questions one after another over one loaded corpus and one REPL."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rlm_cli.commands.ask import say_setup
from rlm_cli.commands.invocation import INVOCATION
from rlm_cli.commands.options import (
    ColorOpt,
    LongQuietOpt,
    Opt,
    PathsArg,
    RunFlags,
    VerboseOpt,
    run_options,
    use_color,
)
from rlm_cli.errors import UsageError

#: ``rlm chat``'s own help of the run flags whose meaning differs in a session.
CHAT_FLAGS = dict(
    mode=Annotated[str | None, Opt("--mode", help="auto|rlm|direct (see rlm ask --help). Env: RLM_MODE.")],
    trace=Annotated[Path | None, Opt("--trace", help="Write question N's trajectory to FILE with -N before its "
                                     "suffix instead of the user data dir.")],
    max_cost=Annotated[float | None, Opt("--max-cost", min=0, help="Stop once the session has cost this many USD "
                                         "(priced models only).")],
    max_tokens=Annotated[int | None, Opt("--max-tokens", min=1, help="Stop once the session has used this many "
                                         "tokens.")],
    max_sub_calls=Annotated[int | None, Opt("--max-sub-calls", min=0, help="Sub-calls allowed in the whole "
                                            "session.")],
    timeout=Annotated[float | None, Opt("--timeout", min=0.1, help="Seconds the session may spend answering "
                                        "(time at the prompt does not count).")],
)


@run_options(without=("direct_max_tokens",), **CHAT_FLAGS)
def chat(
    paths: PathsArg,
    *,
    run: RunFlags,
    json_out: Annotated[bool, Opt("--json", help="One JSON document per answer, one per line.")] = False,
    cite: Annotated[bool, Opt("--cite", help="After each answer, list the corpus lines it rests on.")] = False,
    quiet: LongQuietOpt = False,
    verbose: VerboseOpt = False,
    color: ColorOpt = "auto",
) -> None:
    """Ask questions one after another about the corpus at PATH...: one loaded corpus, one REPL whose
    variables are kept, follow-up questions understood. /help lists the commands; Ctrl-D ends it."""
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
