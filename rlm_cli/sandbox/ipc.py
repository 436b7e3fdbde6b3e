"""System V IPC objects (shared memory segments, message queues, semaphore sets) a worker left
behind, found and removed when it is stopped (:func:`sweep_worker_ipc`).

Model code cannot make any at the ``bwrap`` level (a private IPC namespace, gone with the worker),
nor at the ``process`` level where the kernel has seccomp (``shmget``, ``msgget``, ``semget`` and
the other SysV IPC calls are refused: ``hardening.seccomp_program``); a root rlm also gives a
``process`` worker an IPC namespace of its own. An object made anyway (no seccomp, or the ``none``
level) is not counted by ``RLIMIT_AS`` and outlives every process, so the parent removes, once the
worker and everything it started are killed, exactly these:

* when the worker ran as a user of its own (``nobody``, as a root rlm runs it): every object that
  user created since the worker started, except a shared memory segment still attached (an
  unrelated ``nobody`` process's);
* when it ran as rlm's own user: every shared memory segment created since the worker started by
  one of the worker's processes (its creator pid among them when it was stopped). Message queues
  and semaphore sets record no creator, so they are left: rlm never removes an object that might
  be one of the user's own.

Linux only (``/proc/sysvipc``); elsewhere nothing is done.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: ``/proc/sysvipc`` files and the id column of each.
_TABLES = {"shm": "shmid", "msg": "msqid", "sem": "semid"}
_IPC_RMID = 0


@dataclass(frozen=True)
class IpcObject:
    """One SysV IPC object as ``/proc/sysvipc`` lists it."""

    kind: str
    ident: int
    cuid: int
    #: Seconds since the epoch of its creation (or last ``IPC_SET``).
    ctime: int
    #: The creating process (shared memory only; -1 otherwise).
    cpid: int = -1
    #: Processes attached (shared memory only; 0 otherwise).
    nattch: int = 0
    size: int = 0


def ipc_objects(root: str = "/proc/sysvipc") -> list[IpcObject]:
    """The SysV IPC objects of this process's IPC namespace (``[]`` where ``/proc/sysvipc`` is
    missing or unreadable)."""
    found: list[IpcObject] = []
    for kind, id_column in _TABLES.items():
        try:
            with open(os.path.join(root, kind), encoding="ascii", errors="replace") as fh:
                lines = fh.read().splitlines()
        except OSError:
            continue
        if not lines:
            continue
        head = lines[0].split()
        for line in lines[1:]:
            row = dict(zip(head, line.split(), strict=False))
            try:
                found.append(IpcObject(kind, int(row[id_column]), int(row["cuid"]), int(row["ctime"]),
                                       int(row.get("cpid", -1)), int(row.get("nattch", 0)), int(row.get("size", 0))))
            except (KeyError, ValueError):
                continue
    return found


def made_by_worker(obj: IpcObject, *, uid: int, since: float, own_user: bool, pids: set[int]) -> bool:
    """Whether ``obj`` is one a worker running as ``uid`` since ``since`` (epoch seconds) left (the
    rule of the module docstring): ``own_user`` when ``uid`` is a user of the worker's own, else
    ``pids`` are the worker's processes."""
    if obj.cuid != uid or obj.ctime < int(since):
        return False
    if own_user:
        return obj.kind != "shm" or obj.nattch == 0
    return obj.kind == "shm" and obj.cpid in pids


def remove(obj: IpcObject) -> bool:
    """``IPC_RMID`` on ``obj`` (a segment goes once nothing is attached); whether it was done."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if obj.kind == "shm":
            rc = libc.shmctl(obj.ident, _IPC_RMID, None)
        elif obj.kind == "msg":
            rc = libc.msgctl(obj.ident, _IPC_RMID, None)
        else:
            rc = libc.semctl(obj.ident, 0, _IPC_RMID)
    except (OSError, AttributeError):
        return False
    return bool(rc == 0)


def sweep_worker_ipc(*, uid: int, since: float, own_user: bool, pids: set[int]) -> list[IpcObject]:
    """Remove the SysV IPC objects a stopped worker left (:func:`made_by_worker`); returns those
    removed. Never raises."""
    removed = []
    for obj in ipc_objects():
        if made_by_worker(obj, uid=uid, since=since, own_user=own_user, pids=pids) and remove(obj):
            removed.append(obj)
    return removed
