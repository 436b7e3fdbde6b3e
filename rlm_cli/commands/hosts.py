"""``rlm host start/status/stop``: the shared model hosts (litellm kept warm between commands)."""

from __future__ import annotations

import typer

from rlm_cli.commands.options import JsonOpt

host_app = typer.Typer(no_args_is_help=True, help="Start, show or stop the shared model hosts (litellm kept "
                       "warm between commands; RLM_HOST_IDLE).")


@host_app.command("start")
def host_start(json_out: JsonOpt = False) -> None:
    """Start this environment's shared model host and return at once (a script's or CI job's first
    line): it imports litellm in the background, and the next rlm command leases it. Exit 2 when
    hosts are not shared (RLM_HOST_IDLE=0, no safe runtime folder)."""
    from rlm_cli.errors import UsageError
    from rlm_cli.models import shared
    from rlm_cli.models.host import HostBackend
    from rlm_cli.output import answer, render

    plan = shared.for_this_command()
    if plan.files is None:
        raise UsageError(f"no shared model host to start: {plan.why}",
                         hint=f"set {shared.IDLE_ENV} to the seconds a host should wait (default 300)")
    host = HostBackend()
    host.keep()
    host.close()  # the host stays, unused, for RLM_HOST_IDLE seconds
    if json_out:
        answer.write_json({"pid": host.pid, "started": not host.reused, "idle_limit_s": shared.idle_seconds()})
        return
    render.Renderer().info(f"model host {host.sharing}")


#: The ``litellm`` state of a host (``--json``'s words) as the table shows it, short enough for 80 columns.
_LITELLM_SHORT = {"not needed yet": "no", "importing": "loading", "imported": "yes", "failed": "failed"}


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
             ["pid", "key", "age s", "idle s", "idle limit s", "in use by", "requests", "litellm", "runs in"],
             [[str(h.get("pid")), str(h["key"]), f"{h.get('age_s', 0):g}", f"{h.get('idle_s', 0):g}",
               f"{h.get('idle_limit_s') or 0:g}", str(h.get("leases", 0)), str(h.get("requests", 0)),
               _LITELLM_SHORT.get(str(h.get("litellm")), "-"), str(h.get("cwd", ""))] if h.get("answering") else
              [str(h.get("pid")), str(h["key"]), "-", "-", "-", "-", "-", "-", "not answering (rlm host stop kills it)"]
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
