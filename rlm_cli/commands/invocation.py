"""What one run of the ``rlm`` command knows about itself beyond its parsed flags.

:data:`INVOCATION` holds it: ``main()`` fills it from ``sys.argv`` before typer parses the
command line (so an error met while parsing can already answer in JSON), the commands and the
``--debug`` callbacks set the rest, and the error handling of ``rlm_cli.commands.exits`` reads it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rlm_cli.errors import UsageError

if TYPE_CHECKING:
    from rlm_cli.models.host import HostBackend

#: The commands whose model host is started before the command line is parsed.
EARLY_HOST_COMMANDS = ("ask", "audit", "chat", "mcp")


@dataclass
class Invocation:
    """The state of one ``rlm`` command run.

    ``debug``: show tracebacks (``rlm --debug`` or ``COMMAND --debug``). ``json_errors``: set by
    ``--json``; errors then also print a JSON document on stdout, so ``| jq`` never gets empty
    input. ``json_lines``: that document is one line (``rlm ask --question/--questions --json`` writes
    JSON Lines). ``output_path``: where an error's ``--json`` document goes (``ask`` and ``audit``
    set it to ``--output``'s file once checked), else stdout; the answer itself is delivered
    through the ``Report`` the command hands each delivery (``commands.delivery``). ``early_host``: the model host ``main()`` started before parsing
    the command line (``models.host.HostBackend``), until a command takes it.
    """

    debug: bool = False
    json_errors: bool = False
    json_lines: bool = False
    output_path: Path | None = None
    early_host: HostBackend | None = None

    def begin(self, argv: list[str]) -> None:
        """Start a run of ``rlm ARGV``: ``--json`` (before any ``--``) turns on JSON errors,
        JSON Lines when the command is ``ask`` with a list of questions; the rest starts unset."""
        self.debug, self.output_path, self.early_host = False, None, None
        args = argv[:argv.index("--") if "--" in argv else None]
        self.json_errors = "--json" in args
        self.json_lines = command_word(argv) == "ask" and any(
            a in ("--question", "--questions") or a.startswith(("--question=", "--questions=")) for a in args)

    def short_question_flag(self, argv: list[str]) -> tuple[list[str], str | None]:
        """``rlm ask ... -q QUESTION``: ``-q`` meant ``--question`` before 0.2 and means ``--quiet``
        now. For one release, a ``-q`` followed by a question (words with spaces or a final ``?``,
        not an existing path) keeps the old meaning: ``(argv with it as --question, the warning to
        print)``; anything else is returned unchanged with ``None``."""
        import os

        if command_word(argv) != "ask":
            return argv, None
        out, warned = list(argv), None
        end = argv.index("--") if "--" in argv else len(argv)
        for i in range(end - 1):
            nxt = argv[i + 1]
            if argv[i] == "-q" and not nxt.startswith("-") and not os.path.exists(nxt) and (
                    any(c.isspace() for c in nxt.strip()) or nxt.rstrip().endswith("?")):
                out[i] = "--question"
                warned = ("-q QUESTION is deprecated: -q now means --quiet, as in git, grep and pip; write "
                          "--question QUESTION (the old meaning goes away in the next release)")
        return out, warned

    def take_host(self) -> HostBackend:
        """The model host process (``models.host.HostBackend``): the one ``main()`` started, else a new one.

        Raises:
            UsageError: a bad ``RLM_HOST_IDLE``.
        """
        host, self.early_host = self.early_host, None
        if host is not None:
            return host
        from rlm_cli.models.host import HostBackend

        return HostBackend()

    def start_host_early(self, argv: list[str]) -> None:
        """Start the model host before anything else when the command is ``ask``, ``chat`` or
        ``mcp`` (not ``--help``): its litellm import then overlaps even the parsing of the command line."""
        words = [a for a in argv if not a.startswith("-")]
        if words[:1] and words[0] in EARLY_HOST_COMMANDS and not {"--help", "-h", "--version"} & set(argv):
            import atexit

            from rlm_cli.models.host import HostBackend

            try:
                self.early_host = HostBackend()
            except UsageError:
                return  # a bad RLM_HOST_IDLE: the command reports it, with its exit code
            atexit.register(self.close_early_host)  # the command failed before it took the host

    def close_early_host(self) -> None:
        """Close the early model host if no command took it (idempotent)."""
        host, self.early_host = self.early_host, None
        if host is not None:
            host.close()


def command_word(argv: list[str] | None = None) -> str | None:
    """The subcommand named on the command line (the first word of ``argv``, default
    ``sys.argv[1:]``, that is not an option)."""
    return next((a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")), None)


#: The run of this process (one ``rlm`` command per process; tests running several in one
#: process go through ``main()``, which resets it).
INVOCATION = Invocation()
