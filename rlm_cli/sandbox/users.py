"""The user a worker runs as: when rlm is root, ``nobody`` with a group of this rlm's own
(:func:`plan_drop`, :func:`private_gid`), and the relay socket shared with that group
(:func:`share_relay`)."""

from __future__ import annotations

import os
import pwd
import secrets
from dataclasses import dataclass

from rlm_cli.sandbox.level import Level
from rlm_cli.sandbox.paths import PKG_DIR, mode_allows_others, python_roots, world_readable
from rlm_cli.sandbox.probes import CAP_CHOWN, CAP_DAC_READ_SEARCH, CAP_SETGID, CAP_SETUID, confinement, effective_caps


@dataclass
class Drop:
    """The user the worker becomes when started as root, and the capabilities it keeps."""

    uid: int
    gid: int
    keep_caps: tuple[str, ...] = ()


def plan_drop(level: Level | str) -> tuple[Drop | None, str | None]:
    """The user a worker at ``level`` becomes (``None``: it keeps rlm's user) and a note to show
    once per run.

    Only a root parent drops, at the ``process`` and ``bwrap`` levels: to ``nobody``, with a group
    of its own (:func:`private_gid`: the relay's folder is shared with that group only); when
    ``nobody`` cannot read the interpreter or the package, the worker keeps CAP_DAC_READ_SEARCH.
    When rlm itself lacks what that takes (a hardened container: root without CAP_SETUID,
    CAP_SETGID or CAP_CHOWN, or without CAP_DAC_READ_SEARCH to lend), the worker stays root with
    every capability dropped (``Drop(0, 0)``); the process limit then does not apply to it.
    """
    level = Level(level)
    if not level.drops_root or os.geteuid() != 0:
        return None, None
    try:
        uid = pwd.getpwnam("nobody").pw_uid
    except KeyError:
        uid = 65534
    gid = private_gid()
    caps = effective_caps()
    confined = ("; Landlock still confines what it can read and write" if level.confined_on_host
                and confinement().landlock_abi >= 1 else "")
    needed_caps = (CAP_SETUID, CAP_SETGID) + ((CAP_CHOWN,) if level.confined_on_host else ())
    if not all(caps & (1 << c) for c in needed_caps):
        return Drop(0, 0), ("rlm runs as root without the capabilities to switch users (CAP_SETUID, CAP_SETGID, "
                            "CAP_CHOWN), so the worker stays root with every capability dropped: the process limit "
                            "does not apply to it" + confined)
    needed = [*python_roots(), str(PKG_DIR)]
    readable = (all(mode_allows_others(p) for p in needed) if level.namespaced
                else all(world_readable(p) for p in needed))
    if readable:
        return Drop(uid, gid), None
    if not caps & (1 << CAP_DAC_READ_SEARCH):
        return Drop(0, 0), ("the Python installation is not readable by other users and rlm lacks CAP_DAC_READ_SEARCH "
                            "to lend the worker, so it stays root with every capability dropped: the process limit "
                            "does not apply to it" + confined + "; install Python in a world-readable place to run it "
                            "as nobody")
    return Drop(uid, gid, ("CAP_DAC_READ_SEARCH",)), (
        "the Python installation is not readable by other users, so the worker (running as nobody) keeps the "
        "capability to read every file (CAP_DAC_READ_SEARCH)" + confined + "; install Python in a world-readable "
        "place to remove it")


_private_gid: int | None = None


def private_gid() -> int:
    """A group id no one else uses, chosen once per rlm process: the group of its workers when
    they run as ``nobody`` (every worker of this rlm, sub-RLMs' included). Other runs' workers,
    also ``nobody``, have other groups, so they cannot enter this run's relay folder."""
    global _private_gid
    if _private_gid is None:
        import grp

        while True:
            gid = 0x40000000 + secrets.randbelow(0x3FFF0000)
            try:
                grp.getgrgid(gid)
            except KeyError:
                _private_gid = gid
                break
    return _private_gid


def share_relay(socket_path: str, gid: int) -> str | None:
    """Let a worker of group ``gid`` (another user) reach the relay socket: the folder becomes
    0710 and the socket 0660, both of that group (rlm keeps owning them). Returns a note when
    that is impossible (rlm cannot change their group: no CAP_CHOWN): the folder and socket are
    then opened to every local user (0711 and 0666), the relay still reading nothing from a
    process that is not a worker of this run."""
    folder = os.path.dirname(socket_path)
    try:
        os.chown(folder, -1, gid)
        os.chown(socket_path, -1, gid)
        os.chmod(folder, 0o710)
        os.chmod(socket_path, 0o660)
        return None
    except OSError as exc:
        try:
            os.chmod(folder, 0o711)
            os.chmod(socket_path, 0o666)
        except OSError:
            pass
        return (f"the model relay's socket cannot be given the worker's own group ({exc.strerror or exc}), so other "
                "local users can connect to it; the relay reads nothing from a process that is not this run's worker")


def run_notes(level: Level | str) -> list[str]:
    """Notes about the worker's user to show once per run (not once per sub-RLM worker)."""
    note = plan_drop(level)[1]
    return [f"sandbox: {note}"] if note else []
