"""``rlm doctor``: what this machine gives rlm. The model a run would use and where that comes
from, the sandbox level a run would use (and what it protects), bubblewrap, Python, litellm and
the user folders.

It never imports litellm (the version comes from the package metadata), starts no model call
(autodetection asks a local server for its list of models, as a run would) and creates no folder. ``collect()`` returns a plain dict; ``lines()`` renders it as text.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
from importlib import metadata
from typing import Any

from rlm_cli import __version__
from rlm_cli.errors import RLMError, UsageError


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _worker_user(level: str | None) -> str:
    from rlm_cli.sandbox.users import plan_drop

    if level is None:
        return "-"
    drop, _ = plan_drop(level)
    if drop is None:
        return "your user (rlm's own)" if os.geteuid() != 0 else "root (this level does not drop privileges)"
    if drop.uid == 0:
        return "root with every capability dropped (rlm cannot switch it to nobody here)"
    keep = f", keeping {', '.join(drop.keep_caps)} (Python is not world-readable)" if drop.keep_caps else ""
    return f"nobody (uid {drop.uid}){keep}"


def sandbox_report(requested: str) -> dict[str, Any]:
    """``{"requested", "level", "warning", "protects", "exposes", "protections", "error"}`` for a
    level name; ``protections`` lists ``{"name", "present", "detail"}`` per protection of that
    level on this machine (``levels.protections``).

    ``level`` is ``None`` (and ``error`` set) when ``requested`` is unknown or not available here.
    """
    from rlm_cli.sandbox import levels

    try:
        level, warning = levels.resolve_level(requested)
    except UsageError as exc:
        return {"requested": requested, "level": None, "warning": None, "protects": None, "exposes": None,
                "protections": [], "error": str(exc)}
    return {"requested": requested, "level": level, "warning": warning,
            "protects": levels.level_protects(level), "exposes": levels.level_exposes(level),
            "protections": [vars(p) for p in levels.protections(level)], "error": None}


def kernel_report() -> dict[str, Any]:
    """What the kernel gives the ``process`` level: ``{"landlock_abi", "landlock", "seccomp",
    "seccomp_detail", "process_level": [protections]}`` (reported whatever level a run uses)."""
    from rlm_cli.sandbox import levels, probes

    c = probes.confinement()
    return {"landlock_abi": c.landlock_abi, "landlock": c.landlock_detail, "seccomp": c.seccomp,
            "seccomp_detail": c.seccomp_detail,
            "process_level": [vars(p) for p in levels.protections(levels.Level.PROCESS)]}


def sandbox_line(requested: str) -> str:
    """The one-line sandbox report printed first by ``rlm ask -v``.

    Raises:
        UsageError: ``requested`` is unknown or not available here (the same error the run gives).
    """
    from rlm_cli.sandbox import levels

    level, _ = levels.resolve_level(requested)
    return f"sandbox: {levels.describe(level)}; not protected: {levels.level_exposes(level)}"


def model_report() -> dict[str, Any]:
    """The model a plain ``rlm ask`` here would use: ``{"model", "sub_model", "api_base",
    "source"}`` (``source``: ``flag``-less settings' origin, ``env RLM_MODEL``, ``config file``, or
    what autodetection found; ``model`` is ``None`` when nothing is configured or detected, and
    ``source`` then says why)."""
    from rlm_cli import config
    from rlm_cli.models import detect

    try:
        settings, sources = config.resolve_with_sources({}, problems=[])
    except UsageError as exc:
        return {"model": None, "sub_model": None, "api_base": None, "source": str(exc)}
    if settings.model:
        return {"model": settings.model, "sub_model": settings.effective_sub_model, "api_base": settings.api_base,
                "source": sources.get("model", "default")}
    if settings.api_base:  # that server's list, as a run asks it
        try:
            settings = detect.ensure_model(settings)
        except RLMError as exc:
            return {"model": None, "sub_model": None, "api_base": settings.api_base, "source": exc.message}
        return {"model": settings.model, "sub_model": settings.model, "api_base": settings.api_base,
                "source": f"autodetected: the first model listed by {settings.api_base}"}
    found = detect.detect(settings)
    if found is None:
        busy = detect.busy_servers()
        why = (f"not set, and the server at {', '.join(busy)} accepted a connection but did not list its models "
               f"within {detect.PROBE_TIMEOUT_S:g} s (busy with a long request?): run `rlm doctor` again when it is "
               f"idle, or pass --model openai/NAME --api-base http://{busy[0]}/v1") if busy else \
            "not set and nothing detected: " + detect.no_model_hint()
        return {"model": None, "sub_model": None, "api_base": None, "source": why}
    return {"model": found.model, "sub_model": found.sub_model or found.model, "api_base": found.api_base,
            "source": f"autodetected: {found.reason}"}


def collect() -> dict[str, Any]:
    """Everything ``rlm doctor`` reports, as a JSON-able dict (never raises for a bad config)."""
    from rlm_cli import config
    from rlm_cli.sandbox import probes

    problems: list[str] = []
    try:
        requested = config.resolve({}).sandbox
    except UsageError as exc:
        problems.append(str(exc))
        requested = os.environ.get("RLM_SANDBOX") or "auto"
    sandbox = sandbox_report(requested)
    if sandbox["error"]:
        problems.append(sandbox["error"])
    bwrap_ok, bwrap_detail = probes.bwrap_status()
    litellm = _package_version("litellm")
    if litellm is None:
        problems.append("litellm is not installed: no model can be called (pip install litellm)")
    paths = {"config_dir": str(config.config_dir()), "config_file": str(config.config_path()),
             "config_file_exists": config.config_path().is_file(), "cache_dir": str(config.cache_dir()),
             "data_dir": str(config.data_dir())}
    return {
        "rlm": __version__,
        "platform": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "model": model_report(),
        "sandbox": sandbox,
        "bwrap": {"usable": bwrap_ok, "detail": bwrap_detail, "path": shutil.which("bwrap")},
        "sandbox_exec": shutil.which("sandbox-exec") if sys.platform == "darwin" else None,
        "kernel": kernel_report(),
        "worker_user": _worker_user(sandbox["level"]),
        "litellm": litellm,
        "paths": paths,
        "problems": problems,
    }


def lines(report: dict[str, Any]) -> list[str]:
    """``collect()``'s report as ``name: value`` lines for a terminal."""
    sb, bw, paths, kernel = report["sandbox"], report["bwrap"], report["paths"], report["kernel"]
    if sb["level"]:
        level = f"{sb['level']} (requested: {sb['requested']})"
    else:
        level = f"unavailable (requested: {sb['requested']}): {sb['error']}"
    m = report["model"]
    sub = f", sub-calls {m['sub_model']}" if m["model"] and m["sub_model"] != m["model"] else ""
    base = f" at {m['api_base']}" if m["model"] and m["api_base"] else ""
    out = [
        f"rlm:            {report['rlm']}",
        f"platform:       {report['platform']}",
        f"python:         {report['python']['version']} ({report['python']['executable']})",
        f"model:          {m['model']}{sub}{base} ({m['source']})" if m["model"] else f"model:          none ({m['source']})",
        f"sandbox:        {level}",
    ]
    if sb["level"]:
        out += [f"  protects:     {sb['protects']}", f"  not protected: {sb['exposes']}"]
    if sb["warning"]:
        out.append(f"  warning:      {sb['warning']}")
    out += [
        f"bwrap:          {'usable' if bw['usable'] else 'not usable'}: {bw['detail']}",
        f"landlock:       {kernel['landlock']}",
        f"seccomp:        {'yes' if kernel['seccomp'] else 'no'}: {kernel['seccomp_detail']}",
        "process level:  what --sandbox process (auto without bwrap) confines on this kernel",
        *[f"  {p['name'].replace('_', ' ')}: {'present' if p['present'] else 'MISSING'} ({p['detail']})"
          for p in kernel["process_level"]],
        f"worker user:    {report['worker_user']}",
        f"litellm:        {report['litellm'] or 'not installed'}",
        f"config file:    {paths['config_file']}{'' if paths['config_file_exists'] else ' (not created yet)'}",
        f"cache dir:      {paths['cache_dir']}",
        f"data dir:       {paths['data_dir']}",
    ]
    if sys.platform == "darwin":
        out.insert(6, f"sandbox-exec:   {report['sandbox_exec'] or 'not found'}")
    out += [f"problem:        {p}" for p in report["problems"]]
    return out
