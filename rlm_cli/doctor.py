"""``rlm doctor``: what this machine gives rlm. The sandbox level a run would use (and what it
protects), bubblewrap, Python, litellm and the user folders.

It never imports litellm (the version comes from the package metadata), starts no model call
and creates no folder. ``collect()`` returns a plain dict; ``lines()`` renders it as text.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
from importlib import metadata
from typing import Any

from rlm_cli import __version__
from rlm_cli.errors import UsageError


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _worker_user(level: str | None) -> str:
    from rlm_cli.sandbox.launcher import plan_drop

    if level is None:
        return "-"
    drop, _ = plan_drop(level)
    if drop is None:
        return "your user (rlm's own)" if os.geteuid() != 0 else "root (this level does not drop privileges)"
    keep = f", keeping {', '.join(drop.keep_caps)} (Python is not world-readable)" if drop.keep_caps else ""
    return f"nobody (uid {drop.uid}){keep}"


def sandbox_report(requested: str) -> dict[str, Any]:
    """``{"requested", "level", "warning", "protects", "exposes", "error"}`` for a level name.

    ``level`` is ``None`` (and ``error`` set) when ``requested`` is unknown or not available here.
    """
    from rlm_cli.sandbox import launcher

    try:
        level, warning = launcher.resolve_level(requested)
    except UsageError as exc:
        return {"requested": requested, "level": None, "warning": None, "protects": None, "exposes": None,
                "error": str(exc)}
    return {"requested": requested, "level": level, "warning": warning,
            "protects": launcher.LEVEL_PROTECTS.get(level), "exposes": launcher.LEVEL_EXPOSES.get(level),
            "error": None}


def sandbox_line(requested: str) -> str:
    """The one-line sandbox report printed first by ``rlm ask -v``.

    Raises:
        UsageError: ``requested`` is unknown or not available here (the same error the run gives).
    """
    from rlm_cli.sandbox import launcher

    level, _ = launcher.resolve_level(requested)
    return f"sandbox: {launcher.describe(level)}; not protected: {launcher.LEVEL_EXPOSES.get(level, '?')}"


def collect() -> dict[str, Any]:
    """Everything ``rlm doctor`` reports, as a JSON-able dict (never raises for a bad config)."""
    from rlm_cli import config
    from rlm_cli.sandbox import launcher

    problems: list[str] = []
    try:
        requested = config.resolve({}).sandbox
    except UsageError as exc:
        problems.append(str(exc))
        requested = os.environ.get("RLM_SANDBOX") or "auto"
    sandbox = sandbox_report(requested)
    if sandbox["error"]:
        problems.append(sandbox["error"])
    bwrap_ok, bwrap_detail = launcher.bwrap_status()
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
        "sandbox": sandbox,
        "bwrap": {"usable": bwrap_ok, "detail": bwrap_detail, "path": shutil.which("bwrap")},
        "sandbox_exec": shutil.which("sandbox-exec") if sys.platform == "darwin" else None,
        "worker_user": _worker_user(sandbox["level"]),
        "litellm": litellm,
        "paths": paths,
        "problems": problems,
    }


def lines(report: dict[str, Any]) -> list[str]:
    """``collect()``'s report as ``name: value`` lines for a terminal."""
    sb, bw, paths = report["sandbox"], report["bwrap"], report["paths"]
    if sb["level"]:
        level = f"{sb['level']} (requested: {sb['requested']})"
    else:
        level = f"unavailable (requested: {sb['requested']}): {sb['error']}"
    out = [
        f"rlm:            {report['rlm']}",
        f"platform:       {report['platform']}",
        f"python:         {report['python']['version']} ({report['python']['executable']})",
        f"sandbox:        {level}",
    ]
    if sb["level"]:
        out += [f"  protects:     {sb['protects']}", f"  not protected: {sb['exposes']}"]
    if sb["warning"]:
        out.append(f"  warning:      {sb['warning']}")
    out += [
        f"bwrap:          {'usable' if bw['usable'] else 'not usable'}: {bw['detail']}",
        f"worker user:    {report['worker_user']}",
        f"litellm:        {report['litellm'] or 'not installed'}",
        f"config file:    {paths['config_file']}{'' if paths['config_file_exists'] else ' (not created yet)'}",
        f"cache dir:      {paths['cache_dir']}",
        f"data dir:       {paths['data_dir']}",
    ]
    if sys.platform == "darwin":
        out.insert(5, f"sandbox-exec:   {report['sandbox_exec'] or 'not found'}")
    out += [f"problem:        {p}" for p in report["problems"]]
    return out
