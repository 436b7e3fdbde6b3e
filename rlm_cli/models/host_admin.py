"""The shared model hosts of this user as ``rlm host status`` and ``rlm host stop`` see them:
each one asked over its socket (``rlm_cli.models.shared``), a hung one killed after its command
line is checked. Imports ``shared``; nothing there imports this module.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

from rlm_cli import protocol
from rlm_cli.models.shared import (
    LEASE_TIMEOUT_S,
    HostFiles,
    NoHost,
    ask,
    host_dir,
    host_pid,
    locked,
    remove,
    socket_folder,
)


def _each_host(message: dict[str, Any]) -> list[dict[str, Any]]:
    """Send ``message`` to every shared host of this user: each reply (with ``key`` and
    ``answering: true``), or for a host whose socket is there but that did not answer in time,
    ``{"key", "pid" (recorded), "answering": false}``. Stale sockets (nothing listening) are
    left out. The wait is generous: on a loaded machine a host may take seconds to be scheduled."""
    folder = host_dir(create=False)
    if folder is None:
        return []
    replies: list[dict[str, Any]] = []
    try:
        sockets = sorted(socket_folder(folder).glob("host-*.sock"))
    except OSError:
        return []
    for sock in sockets:
        key = sock.name[len("host-"):-len(".sock")]
        files = HostFiles.of(folder, key)
        pid = host_pid(files)  # read first: a host told to stop may be gone, files and all, before we look
        try:
            conn, reply = ask(files, message, timeout=LEASE_TIMEOUT_S)
        except NoHost:
            continue
        except (OSError, protocol.ProtocolError):
            replies.append({"key": key, "pid": host_pid(files) or pid, "answering": False})
            continue
        conn.close()
        if reply.get("ok"):
            replies.append({"key": key, "answering": True, **{k: v for k, v in reply.items() if k != "ok"}})
    return replies


def running() -> list[dict[str, Any]]:
    """Every shared host of this user: its status (``key``, ``answering``, ``pid``, ``age_s``,
    ``idle_s``, ``idle_limit_s``, ``leases``, ``requests``, ``cwd``, ``stopping``), oldest first;
    a host that does not answer has only ``key``, ``pid`` and ``answering: false``."""
    return sorted(_each_host({"op": "status"}), key=lambda h: -float(h.get("age_s") or 0))


def _is_host(pid: int, files: HostFiles) -> bool:
    """Whether ``pid`` is the host process serving ``files`` (its command line says so), so a
    pid reused by another process is never signalled."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(b"host_process" in part for part in cmdline) and os.fsencode(files.socket) in cmdline


def stop_all() -> list[int]:
    """Ask every shared host of this user to exit as soon as no command uses it; a host that
    does not answer (hung) is killed and its files removed. The pids."""
    folder = host_dir(create=False)
    stopped = []
    for host in _each_host({"op": "stop"}):
        pid = int(host.get("pid") or 0)
        if not host.get("answering") and not pid:
            continue  # no pid was ever recorded: nothing to stop or to report
        if not host.get("answering") and folder is not None:
            files = HostFiles.of(folder, str(host["key"]))
            if pid and _is_host(pid, files):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                with locked(files):
                    remove(files, token=None)
        stopped.append(pid)
    return stopped
