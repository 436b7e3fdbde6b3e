"""The command that starts the worker at each level, and what it is confined to: the bwrap argv
(an empty root with only the system folders, Python and the package), the ``sandbox-exec``
profile, the paths the worker sees inside (:func:`inside_paths`) and the Landlock policy of
the ``process`` level (:func:`landlock_policy`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlm_cli.sandbox.level import Level
from rlm_cli.sandbox.paths import (
    BWRAP_ALWAYS_HIDDEN,
    BWRAP_SYSTEM_DIRS,
    LANDLOCK_DEVICES,
    PKG_DIR,
    landlock_read_paths,
    outside_libs,
    python_roots,
    under,
)
from rlm_cli.sandbox.probes import CAP_SETPCAP, bwrap_ns_flags, confinement, effective_caps
from rlm_cli.sandbox.users import Drop

#: Size of the sandbox's own /dev/shm (multiprocessing needs it for its locks).
SHM_BYTES = 64 * 1024**2
#: Where the package, the relay's socket folder and the corpus bundle appear inside bwrap.
INSIDE_PKG = "/tmp/rlm/pkg"
INSIDE_SOCKETS = "/tmp/rlm/sock"
INSIDE_CORPUS = {"index": "/tmp/rlm/corpus/index.json", "context": "/tmp/rlm/corpus/context.txt",
                 "data": "/tmp/rlm/corpus/data.bin"}


def python_argv(module: str, pkg_parent: str, fds: tuple[int, ...]) -> list[str]:
    """``python -I -c ...`` running ``module``'s ``main()`` with rlm's package found in
    ``pkg_parent`` and the descriptor numbers ``fds`` as its arguments."""
    boot = (f"import sys; sys.path.insert(0, {pkg_parent!r}); "
            f"from {module} import main; main()")
    return [sys.executable, "-I", "-c", boot, *(str(fd) for fd in fds)]


def inside_paths(level: Level, socket_path: str, corpus: dict[str, str]) -> dict[str, str]:
    """The paths the worker is given, as it sees them: ``socket`` and the ``corpus`` files
    (``index``, ``context``, ``data``: host paths), moved under ``/tmp/rlm`` at the bwrap level."""
    paths = {"socket": socket_path, **corpus}
    if level.namespaced:
        paths["socket"] = INSIDE_SOCKETS + "/" + os.path.basename(socket_path)
        paths.update({k: INSIDE_CORPUS[k] for k in corpus})
    return paths


def landlock_policy(level: Level, *, scratch: Path | None, socket_path: str,
                    hide_paths: tuple[str, ...]) -> dict[str, Any] | None:
    """The Landlock policy for ``hardening.apply_landlock`` (``None``: none is applied). At the
    ``process`` level: read-only the system folders, Python and rlm (``paths.landlock_read_paths``)
    and the worker's own ``/proc`` entry; read-write only the scratch folder and a few device
    files; Unix sockets (ABI 9+) only in the relay's folder. Under bwrap (its mounts already
    confine the files): only the network rules and scopes, as defence in depth."""
    abi = confinement().landlock_abi
    if level.confined_on_host and abi >= 1:
        return {"files": True, "read": [*landlock_read_paths(hide_paths), "/proc/self"],
                "write": [str(scratch)], "devices": [d for d in LANDLOCK_DEVICES if os.path.exists(d)],
                "unix": [os.path.dirname(socket_path)]}
    if level is Level.BWRAP and abi >= 4:
        return {"files": False}
    return None


def level_argv(level: Level, python: Callable[[str], list[str]], **bwrap: Any) -> list[str]:
    """The argv starting the worker at ``level``; ``python(pkg_parent)`` gives the interpreter's
    own argv (:func:`python_argv`), ``bwrap`` the keyword arguments of :func:`bwrap_argv`."""
    if level.runs_plain:
        return python(str(PKG_DIR.parent))
    if level is Level.SANDBOX_EXEC:
        profile = ("(version 1)(allow default)(deny network*)"
                   "(allow network* (remote unix-socket))")
        return ["sandbox-exec", "-p", profile, *python(str(PKG_DIR.parent))]
    return bwrap_argv(python(INSIDE_PKG), **bwrap)


def bwrap_argv(python: list[str], *, scratch: Path, socket_path: str, corpus: dict[str, str], file_bytes: int,
               drop: Drop | None, hide_paths: tuple[str, ...]) -> list[str]:
    """The bwrap argv running ``python``: an empty root with only system folders, Python and the
    package; ``scratch`` a tmpfs of ``file_bytes``, the relay's folder and the ``corpus`` files
    (host paths by :data:`INSIDE_CORPUS` key) bound read-only; ``hide_paths`` hidden besides
    home and rlm's folders; the capabilities to become ``drop``'s user kept."""
    from rlm_cli.config import cache_dir, config_dir, data_dir, runtime_path

    args = ["bwrap", *bwrap_ns_flags(), "--die-with-parent", "--new-session"]
    bound: list[str] = []
    for d in BWRAP_SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
            bound.append(os.path.realpath(d))
    args += ["--dev", "/dev", "--perms", "1777", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
             "--proc", "/proc", "--tmpfs", "/tmp"]
    roots = python_roots()
    # Hide what lies inside the bound folders but must stay private: the corpus roots, the rlm
    # folders, home (when any of them is under /usr, /etc...). Python itself is never hidden.
    hidden = {str(Path.home()), str(config_dir()), str(cache_dir()), str(data_dir()), str(runtime_path()),
              *BWRAP_ALWAYS_HIDDEN, *hide_paths}
    for path in sorted({os.path.realpath(p) for p in hidden if os.path.exists(p)}, key=len):
        if (any(under(path, b) for b in bound) and path not in bound
                and not any(under(r, path) or under(path, r) for r in roots)):
            args += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]
    made: set[str] = set()
    for keep in [*roots, *outside_libs(bound + roots)]:
        if any(under(keep, b) for b in bound):
            continue
        for anc in reversed(Path(keep).parents):  # folders bwrap makes must be traversable by nobody
            a = str(anc)
            if a != "/" and a not in made and not any(under(a, b) for b in bound):
                args += ["--perms", "0755", "--dir", a]
                made.add(a)
        args += ["--ro-bind", keep, keep]
        bound.append(keep)
    for inner in ("/tmp/rlm", INSIDE_PKG, INSIDE_SOCKETS, "/tmp/rlm/corpus"):
        args += ["--perms", "0755", "--dir", inner]
    args += ["--ro-bind", str(PKG_DIR), INSIDE_PKG + "/rlm_cli",
             "--perms", "0777", "--size", str(file_bytes), "--tmpfs", str(scratch),
             "--ro-bind", os.path.dirname(socket_path), INSIDE_SOCKETS,
             "--chdir", str(scratch)]
    for key in ("index", "context", "data"):
        if key in corpus:
            args += ["--ro-bind", corpus[key], INSIDE_CORPUS[key]]
    if os.geteuid() == 0 and drop and drop.uid != 0:
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        if effective_caps() & (1 << CAP_SETPCAP):
            args += ["--cap-add", "CAP_SETPCAP"]
        if drop.keep_caps:
            args += ["--cap-add", "CAP_DAC_READ_SEARCH"]
    return [*args, *python]
