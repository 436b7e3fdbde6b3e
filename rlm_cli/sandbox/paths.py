"""Host paths the worker is confined to: the system folders bubblewrap binds and Landlock lets it
read, the Python installation and rlm's package (:func:`python_roots`, :func:`landlock_read_paths`,
:func:`outside_libs`), whether another user can reach them, and deleting a scratch folder a
worker of another user left (:func:`remove_tree`)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

#: Folders bound read-only into the bwrap sandbox when they exist; everything else on the host
#: (home folders, /work, /srv, /mnt, /opt, /var, /run, /tmp...) is simply absent.
BWRAP_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
                     "/nix/store", "/gnu/store")
#: Host paths hidden even inside the bound system folders.
BWRAP_ALWAYS_HIDDEN = ("/etc/ssh", "/etc/ssl/private")
#: Folders the ``process`` level lets the worker read and execute under Landlock (when they
#: exist), besides the Python installation and rlm's package: bwrap's system folders without /etc.
LANDLOCK_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/nix/store", "/gnu/store")
#: The only entries of /etc readable under Landlock: what the C library and Python read (the
#: dynamic linker's cache, the time zone, user, group, host and service names, MIME types, locale
#: aliases, the host name). Nothing secret: /etc/shadow, /etc/ssh and /etc/ssl/private stay out of reach.
LANDLOCK_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ld.so.preload", "localtime", "timezone", "passwd",
                "group", "hostname", "nsswitch.conf", "hosts", "host.conf", "gai.conf", "protocols", "services", "mime.types",
                "locale.alias", "os-release")
#: Device files readable and writable under Landlock (``/dev/shm`` is not: multiprocessing's locks
#: fail at the ``process`` level, while threads, fork and subprocess work).
LANDLOCK_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
PKG_DIR = Path(__file__).resolve().parent.parent  # .../rlm_cli


def under(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or lies inside it (both absolute, compared as text)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def python_roots() -> list[str]:
    """Folders the worker's interpreter needs: its prefixes and the real executable's folder."""
    return sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix,
                                                  os.path.dirname(os.path.realpath(sys.executable)))})


def landlock_read_paths(hide: tuple[str, ...] | list[str] = ()) -> list[str]:
    """Paths the ``process`` level's worker may read and execute under Landlock: the system
    folders (:data:`LANDLOCK_SYSTEM_DIRS`), a few files of /etc (:data:`LANDLOCK_ETC`), the
    Python installation (its prefixes, the ``sys.path`` folders a ``python -I`` worker also has,
    shared libraries mapped from elsewhere) and rlm's package. ``sys.path[0]`` (the script's or
    working folder, absent from the worker's path) is left out, and so is any entry that is or
    holds the working folder, the temporary folder, home, rlm's config, cache or data folder or
    a corpus root (``hide``)."""
    from rlm_cli.config import cache_dir, config_dir, data_dir, runtime_path

    private = [os.path.realpath(p) for p in (str(Path.home()), str(config_dir()), str(cache_dir()),
                                             str(data_dir()), str(runtime_path()), os.getcwd(),
                                             tempfile.gettempdir(), *hide)]
    paths = [d for d in LANDLOCK_SYSTEM_DIRS if os.path.isdir(d)]
    paths += [f"/etc/{n}" for n in LANDLOCK_ETC if os.path.exists(f"/etc/{n}")]
    roots = [*python_roots(), str(PKG_DIR)]
    for entry in sys.path[1:]:
        real = os.path.realpath(entry) if entry else ""
        if (real and os.path.exists(real) and real != "/" and not any(under(real, r) for r in roots)
                and not any(under(p, real) for p in private)):
            roots.append(real)
    return paths + roots + outside_libs([os.path.realpath(p) for p in paths] + roots)


def outside_libs(roots: list[str]) -> list[str]:
    """Shared libraries this interpreter has mapped that lie outside ``roots`` (bound one by one,
    so an interpreter linked against libraries elsewhere still starts in the sandbox)."""
    found: set[str] = set()
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                parts = line.split(None, 5)
                path = parts[5].strip() if len(parts) == 6 else ""
                if path.startswith("/") and ".so" in os.path.basename(path) and os.path.isfile(path):
                    real = os.path.realpath(path)
                    if not any(under(real, r) for r in roots):
                        found.add(real)
    except OSError:
        pass
    return sorted(found)


def world_readable(path: str) -> bool:
    """True if every folder from ``/`` down to ``path`` lets other users in (mode o+x)."""
    p = Path(path)
    for part in [*reversed(p.parents), p]:
        try:
            if not os.stat(part).st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


def mode_allows_others(path: str) -> bool:
    """True if ``path`` itself lets other users in (under bwrap its parents are recreated 0755)."""
    try:
        return bool(os.stat(path).st_mode & 0o005 == 0o005)
    except OSError:
        return False


def remove_tree(path: Path) -> None:
    """Delete ``path`` and everything in it. When a worker that ran as another user left entries
    that rlm, root without CAP_DAC_OVERRIDE (a hardened container), can neither list nor delete,
    take them back first (CAP_CHOWN, which rlm had to lend them) and delete again."""
    shutil.rmtree(path, ignore_errors=True)
    if not os.path.lexists(path) or os.geteuid() != 0:
        return
    uid, gid = os.geteuid(), os.getegid()

    def reclaim(p: str) -> None:
        try:
            os.chown(p, uid, gid, follow_symlinks=False)
            os.chmod(p, 0o700)
        except OSError:
            pass

    reclaim(str(path))
    for top, dirs, _files in os.walk(path):
        for d in dirs:
            if not os.path.islink(os.path.join(top, d)):
                reclaim(os.path.join(top, d))
    shutil.rmtree(path, ignore_errors=True)
