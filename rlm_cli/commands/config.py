"""``rlm config show/set/unset/path`` and ``rlm doctor``: settings and what this machine offers."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from rlm_cli.commands.options import DebugOpt, JsonOpt
from rlm_cli.errors import ExitCode

config_app = typer.Typer(no_args_is_help=True, help="Show or change settings (config.toml in the user config dir).")



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
        ui.info("`rlm config set KEY VALUE` fixes a known key, `rlm config unset KEY` removes one; `rlm config path` "
                "shows the file")
        raise typer.Exit(int(ExitCode.USAGE))


def _show_value(value: object, key: str = "") -> str:
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


@config_app.command("unset")
def config_unset(key: Annotated[str, typer.Argument(help="Setting name, like the flag: model, sandbox, max-cost...")]
                 ) -> None:
    """Remove a setting from the config file (its default, or the environment's, applies again)."""
    from rlm_cli import config
    from rlm_cli.output import render

    present = set(config.read_config_file())
    if key.strip() not in present and config.normalize_key(key) not in present:
        render.Renderer().info(f"{config.normalize_key(key)} is not set in {config.config_path()}: nothing to do")
        return
    name, _, path = config.set_config_value(key, "", remove=True)
    render.Renderer().info(f"{name} removed from {path}")


@config_app.command("path")
def config_path_cmd() -> None:
    """Print the config file's path."""
    from rlm_cli import config
    from rlm_cli.output import answer

    answer.write_answer(str(config.config_path()))



def doctor(json_out: JsonOpt = False, debug: DebugOpt = False) -> None:
    """Report the sandbox level a run would use and what it protects, bwrap, Python, litellm, paths."""
    from rlm_cli.app import doctor as checkup
    from rlm_cli.output import answer

    report = checkup.collect()
    answer.write_json(report) if json_out else answer.write_answer("\n".join(checkup.lines(report)))
