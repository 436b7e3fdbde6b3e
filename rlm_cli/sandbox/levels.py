"""The sandbox levels (``bwrap``, ``sandbox-exec``, ``process``, ``none``): choosing one
(:func:`resolve_level`) and saying what it protects on this machine (:func:`protections`,
:func:`level_protects`, :func:`level_exposes`, :func:`describe`; ``rlm doctor`` and ``-v``).

What each level does (docs/sandbox.md has the user-facing table; ``tests/security/test_security.py`` proves it):

* every level: a separate process, a scrubbed environment (no API keys; ``HOME`` and ``TMPDIR``
  point at a fresh scratch folder that is the working directory and is deleted on close), its
  own session (Ctrl-C reaches the parent only), stdout discarded, an 8 KiB stderr tail kept for
  crash reports, a per-cell timeout after which the worker is killed and restarted, and a
  validated control channel (a frame must arrive whole before the deadline, is size-limited,
  and must answer the request it was sent for).
* ``process`` (and ``bwrap``): ``setrlimit`` limits (address space, CPU seconds, processes, file
  size, open files, no core dumps), no-new-privileges and death with the parent. Run as root,
  the worker becomes ``nobody`` (Linux does not apply the process limit to root, and ``nobody``
  cannot signal the parent; its group is one of this rlm's own, ``users.private_gid``, with which
  the relay's folder is shared); if ``nobody`` cannot read the interpreter it keeps only
  ``CAP_DAC_READ_SEARCH``. On Linux the parent becomes a child subreaper, so processes the
  worker detaches (double fork) come back to it and are killed with the worker; ``setsid`` is
  refused by the seccomp filter, so all of them stay in the worker's session, by which a later
  rlm finds and kills what the worker of a SIGKILLed rlm left (``sandbox.reaper``). The scratch
  folder is a tmpfs of ``Limits.file_bytes`` in a mount namespace of the worker's own when rlm
  may mount (root with ``CAP_SYS_ADMIN``), else a host folder whose size a thread watches
  (``processes.scratch_usage``), killing the worker past its quota.
* ``bwrap``: bubblewrap namespaces: no network (``--unshare-net``), private PID/IPC/UTS/cgroup,
  an empty root filesystem with only the system folders (``/usr``, ``/etc``...), the Python
  installation and the worker package bound read-only; the scratch folder is a size-limited
  tmpfs, the LMHandler socket folder is the only host path reachable besides those, and the
  corpus reaches the worker only as the bundle files.
* ``sandbox-exec`` (macOS, untested): a profile that denies network except Unix sockets.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
from dataclasses import dataclass

from rlm_cli.config_keys import CHOICES
from rlm_cli.errors import UsageError
from rlm_cli.sandbox.level import Level
from rlm_cli.sandbox.probes import bwrap_available, bwrap_status, confinement
from rlm_cli.sandbox.users import plan_drop

LEVELS = CHOICES["sandbox"]

__all__ = ["LEVELS", "Level", "describe", "level_exposes", "level_protects", "missing", "protections",
           "resolve_level"]


@dataclass(frozen=True)
class Protection:
    """One protection of a sandbox level on this machine: ``name`` (``network``, ``files``,
    ``signals``, ``abstract_unix_sockets``, ``unix_socket_paths``), whether it is ``present``
    here, and how it is enforced (or what it would need)."""

    name: str
    present: bool
    detail: str


def protections(level: Level | str) -> list[Protection]:
    """The protections of ``level`` on this machine (kernel features probed by :func:`confinement`).

    Landlock ABI versions used at the ``process`` level: 1 files, 4 TCP, 6 signals and abstract
    Unix sockets, 9 connecting to Unix sockets by path, 10 UDP (see ``hardening.apply_landlock``).
    """
    level = Level(level)
    names = ("network", "files", "signals", "abstract_unix_sockets", "unix_socket_paths")
    if level is Level.BWRAP:
        how = ("own network namespace", "own mount namespace: system folders and Python only",
               "own PID namespace", "own network namespace", "own mount namespace")
        return [Protection(n, True, h) for n, h in zip(names, how, strict=True)]
    if level is Level.SANDBOX_EXEC:
        return [Protection("network", True, "sandbox-exec profile (untested)"),
                *[Protection(n, False, "not confined by sandbox-exec") for n in names[1:]]]
    if level is not Level.PROCESS or not sys.platform.startswith("linux"):
        return [Protection(n, False, f"not confined at the {level} level") for n in names]
    c = confinement()
    abi = c.landlock_abi
    have = f"this kernel has {'ABI ' + str(abi) if abi else 'no Landlock'}"
    net = "seccomp: socket() only for AF_UNIX" if c.seccomp else f"needs seccomp ({c.seccomp_detail})"
    if c.seccomp and abi >= 4:
        net += "; Landlock: no TCP" + (" or UDP" if abi >= 10 else "") + " bind/connect"
    dropped = plan_drop(level)[0]
    as_nobody = dropped is not None and dropped.uid != 0
    signals = (Protection("signals", True, f"Landlock ABI {abi}: signals only to its own processes") if abi >= 6
               else Protection("signals", True, "runs as nobody") if as_nobody
               else Protection("signals", False, f"needs Landlock ABI 6 ({have})"))
    return [
        Protection("network", c.seccomp, net),
        Protection("files", abi >= 1, f"Landlock ABI {abi}: reads only Python, rlm and system folders, writes only "
                                      "its scratch folder" if abi >= 1 else f"needs Landlock ({c.landlock_detail})"),
        signals,
        Protection("abstract_unix_sockets", abi >= 6, f"Landlock ABI {abi}: only its own" if abi >= 6
                   else f"needs Landlock ABI 6 ({have})"),
        Protection("unix_socket_paths", abi >= 9, f"Landlock ABI {abi}: only the model relay's" if abi >= 9
                   else f"needs Landlock ABI 9 ({have})"),
    ]


#: What a missing protection leaves open, in the words of the warnings and ``rlm doctor``.
MISSING = {
    "network": "it CAN reach the network",
    "files": "it CAN read your files",
    "signals": "it can signal rlm and your other processes",
    "abstract_unix_sockets": "it can connect to abstract Unix sockets (D-Bus, X11)",
    "unix_socket_paths": "it can connect to Unix sockets its user may open by path (an ssh-agent, D-Bus)",
}


def missing(level: Level | str) -> list[str]:
    """What ``level`` leaves open on this machine, one phrase per missing protection."""
    level = Level(level)
    return [f"{MISSING[p.name]}: {p.detail}" for p in protections(level) if not p.present]


def resolve_level(requested: str) -> tuple[Level, str | None]:
    """Map ``auto`` to the strongest available level; return ``(level, warning or None)``.

    Raises:
        UsageError: an unknown level, or one that is not available here.
    """
    if requested not in LEVELS:
        raise UsageError(f"unknown sandbox {requested!r}", hint=f"use one of {', '.join(LEVELS)}")
    has_sbx = sys.platform == "darwin" and shutil.which("sandbox-exec") is not None
    if requested == "auto":
        if bwrap_available():
            return Level.BWRAP, None
        if has_sbx:
            return Level.SANDBOX_EXEC, None
        gaps, summary = missing(Level.PROCESS), process_summary()
        how = (f"a confined process ({summary})" if summary != "resource limits only" else
               "a plain process with resource limits and no API keys in its environment")
        return Level.PROCESS, (f"sandbox: bubblewrap is not available, so model code runs as {how}; "
                           + ("; ".join(gaps) if gaps else "other processes stay visible")
                           + "; install bubblewrap for full isolation (apt-get install bubblewrap)")
    if requested == "bwrap" and not bwrap_available():
        raise UsageError(f"--sandbox bwrap: {bwrap_status()[1]}",
                         hint="install bubblewrap or use --sandbox process")
    if requested == "sandbox-exec" and not has_sbx:
        raise UsageError("--sandbox sandbox-exec is only available on macOS")
    if requested == "none":
        return Level.NONE, "sandbox: none; model code runs unconfined, without resource limits"
    return Level(requested), None


LEVEL_PROTECTS: dict[Level, str] = {
    Level.BWRAP: ("no API keys in its environment; no network (only the model relay's Unix socket); an empty "
                  "filesystem except the system folders and Python, read-only (home, /work, /srv, /mnt, /opt, "
                  "/var, /run, rlm's folders and the corpus folders are absent); the parent and other processes "
                  "invisible; memory, CPU, process, file-size and open-file limits; a size-limited scratch tmpfs; "
                  "per-cell timeout; every process it starts dies with it"),
    Level.SANDBOX_EXEC: ("no API keys in its environment; no network except Unix sockets; resource limits; "
                         "per-cell timeout (untested: no macOS in CI)"),
    Level.NONE: "no API keys in its environment; per-cell timeout",
}
LEVEL_EXPOSES: dict[Level, str] = {
    Level.BWRAP: "kernel exploits through the syscalls left open; world-readable system files (/usr, /etc); CPU "
                 "time up to the cell timeout; total memory (the limits are per process: each of its processes may use "
                 "--memory-limit)",
    Level.SANDBOX_EXEC: "your files stay readable (and writable where you can write); processes it detaches may survive",
    Level.NONE: "everything: network, files, memory, processes",
}


def process_summary() -> str:
    """The kernel features confining the ``process`` level here, e.g. ``Landlock ABI 7 and seccomp``."""
    c = confinement()
    parts = ([f"Landlock ABI {c.landlock_abi}"] if c.landlock_abi else []) + (["seccomp"] if c.seccomp else [])
    return " and ".join(parts) or "resource limits only"


def level_protects(level: Level | str) -> str:
    """What ``level`` protects on this machine, in one sentence (``rlm doctor``, ``-v``)."""
    level = Level(level)
    if level is not Level.PROCESS:
        return LEVEL_PROTECTS.get(level, "unknown level")
    present = {p.name: p for p in protections(level) if p.present}
    parts = ["no API keys in its environment"]
    if "network" in present:
        parts.append(f"no network ({present['network'].detail})")
    if "files" in present:
        parts.append(f"files: {present['files'].detail} (home, /root, /tmp, rlm's folders and the corpus folders are "
                     "out of reach; the corpus arrives as data)")
    scoped = [n.replace("_", " ") for n in ("signals", "abstract_unix_sockets", "unix_socket_paths") if n in present]
    if scoped:
        parts.append(f"{', '.join(scoped)}: only its own or the relay's")
    parts.append("memory, CPU, process, file-size and open-file limits; a scratch quota; per-cell timeout; processes "
                 "it detaches are killed with it (or by the next rlm, if rlm itself is killed)")
    drop = plan_drop(level)[0]
    if drop is not None:
        parts.append("as root it runs as nobody (the process limit applies)" if drop.uid != 0 else
                     "as root it keeps uid 0 with every capability dropped (the process limit does not apply)")
    return "; ".join(parts)


def level_exposes(level: Level | str) -> str:
    """What ``level`` does not protect on this machine, in one sentence (``rlm doctor``, ``-v``)."""
    level = Level(level)
    if level is not Level.PROCESS:
        return LEVEL_EXPOSES.get(level, "?")
    gaps = missing(level)
    if os.geteuid() != 0 and any(p.name == "files" and not p.present for p in protections(level)):
        gaps.append("other processes' environments, where your exported keys live")
    return "; ".join([*gaps, "world-readable system files (/usr) and the Python installation; the ids of other "
                      "processes; kernel exploits through the syscalls left open; CPU time up to the cell timeout; "
                      "total memory (the limits are per process)"])


def describe(level: Level | str) -> str:
    """One line saying what ``level`` protects, for ``rlm doctor`` and ``-v``."""
    level = Level(level)
    return f"{level} ({platform.system()}): " + level_protects(level)
