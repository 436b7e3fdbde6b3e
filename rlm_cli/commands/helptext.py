"""How ``--help`` looks: plain text in sections, one line per option where it fits.

rlm's commands have many options (``rlm ask`` about fifty). Typer's rich panels gave each option a
row of a boxed table whose help column was a quarter of the screen wide: 320 lines at 80 columns,
names and value lists cut with an ellipsis, a ``<bool>`` after every flag. The plain layout that
git, ripgrep and most Unix tools use reads better and copies cleanly: a usage line, the command's
text, then the options grouped under a heading each (the ``rich_help_panel`` an option is given
in its definition), each option one line of name, value and a short help. The long explanation of
every option is in docs/usage.md (``tests/commands/test_help.py`` checks both).

Every command takes ``-h`` too (:func:`short_help_flag`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from typer.core import TyperCommand

if TYPE_CHECKING:
    import typer

#: The help option of every command (click passes it down to subcommands). ``-h`` is read as
#: ``--help`` only as a whole argument (:func:`short_help_flag`): click would take a question such as
#: ``-how many files?`` for ``-h`` followed by other flags and print the help.
HELP_OPTION_NAMES = ["--help"]
#: The section of an option that names none.
DEFAULT_SECTION = "Options"


class SectionedCommand(TyperCommand):
    """A command whose ``--help`` lists its arguments, then its options by section (see the
    module docstring): sections in the order their first option appears, ``-h/--help`` last."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """Write the arguments and the option sections to ``formatter`` (click's ``Context`` and
        ``HelpFormatter``, as typer vendors them: in a private module, ``typer._click``, so they
        are not named here)."""
        args: list[tuple[str, str]] = []
        sections: dict[str, list[tuple[str, str]]] = {}
        params: list[Any] = self.get_params(ctx)
        for param in params:
            if param.param_type_name == "argument":
                text = getattr(param, "help", None)
                if text:
                    args.append((param.display_name_raw, text))
                continue
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if "--help" in param.opts:
                record = ("-h, --help", record[1])  # -h is read as --help whole (short_help_flag)
            name = DEFAULT_SECTION if "--help" in param.opts else (getattr(param, "rich_help_panel", None)
                                                                     or DEFAULT_SECTION)
            sections.setdefault(name, []).append(record)
        if args:
            with formatter.section("Arguments"):
                formatter.write_dl(args)
        order = [n for n in sections if n != DEFAULT_SECTION] + ([DEFAULT_SECTION] if DEFAULT_SECTION in sections
                                                                  else [])
        for name in order:
            with formatter.section(name):
                formatter.write_dl(sections[name])


def short_help_flag(argv: list[str]) -> list[str]:
    """``argv`` with each argument that is exactly ``-h`` (before any ``--``) made ``--help``."""
    end = argv.index("--") if "--" in argv else len(argv)
    return [("--help" if a == "-h" and i < end else a) for i, a in enumerate(argv)]


def use_plain_help(app: typer.Typer) -> None:
    """Give the Typer ``app`` and every sub-app under it the plain sectioned help: rich help off,
    :class:`SectionedCommand` for each command that names no class of its own, ``-h``. One place,
    so a command added later gets it without a word."""
    app.rich_markup_mode = None
    app.info.context_settings = {**(app.info.context_settings or {}), "help_option_names": HELP_OPTION_NAMES}
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand):  # typer's default: a class of the command's own stays
            info.cls = SectionedCommand
    for group in app.registered_groups:
        if group.typer_instance is not None:
            use_plain_help(group.typer_instance)
