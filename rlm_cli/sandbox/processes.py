"""The worker's processes seen from the parent: the live workers of this process (:data:`LIVE`),
becoming the child subreaper, start times and ancestry from ``/proc``, killing what a worker
left behind (:func:`kill_strays`) and measuring a scratch folder on the disk
(:func:`scratch_usage`)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

from rlm_cli.sandbox import reaper

_PR_SET_CHILD_SUBREAPER = 36
#: pids of running workers of every Sandbox in this process (never reaped as strays).
LIVE: set[int] = set()
LIVE_LOCK = threading.Lock()
_subreaper: bool | None = None
#: The most entries a scratch folder on the disk may hold.
MAX_SCRATCH_ENTRIES = 100_000


def count_processes(uid: int) -> int:
    """Threads owned by ``uid`` now (RLIMIT_NPROC counts threads per real user, machine-wide)."""
    total = 0
    try:
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    if os.stat(f"/proc/{pid}").st_uid == uid:
                        total += max(1, len(os.listdir(f"/proc/{pid}/task")))
                except OSError:
                    continue
    except OSError:
        return 512
    return total


def descends(pid: int, ancestor: int) -> bool:
    """Whether process ``pid`` is ``ancestor`` or below it (parent pids from ``/proc/PID/stat``)."""
    for _ in range(64):
        if pid == ancestor:
            return True
        stat = proc_stat(pid)
        if stat is None or stat[0] <= 1:
            return False
        pid = stat[0]
    return False


def scratch_usage(scratch: Path, session: int) -> tuple[int, int]:
    """``(bytes, entries)`` a worker's scratch folder on the disk takes: the blocks of what is in
    it (symlinks not followed; at most :data:`MAX_SCRATCH_ENTRIES` + 1 entries are looked at),
    plus those of files under it that were deleted but are still open in a process of the
    worker's ``session``."""
    used = entries = 0
    seen: set[tuple[int, int]] = set()
    stack = [str(scratch)]
    while stack and entries <= MAX_SCRATCH_ENTRIES:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    entries += 1
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if (st.st_dev, st.st_ino) not in seen:
                        seen.add((st.st_dev, st.st_ino))
                        used += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    root = str(scratch).rstrip("/") + "/"
    for pid in reaper.session_members(session, 0, None):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith(root) and target.endswith(" (deleted)"):
                    st = os.stat(f"/proc/{pid}/fd/{fd}")
                    if (st.st_dev, st.st_ino) not in seen:
                        seen.add((st.st_dev, st.st_ino))
                        used += st.st_blocks * 512
            except OSError:
                continue
    return used, entries


def become_subreaper() -> bool:
    """Make this process the child subreaper (Linux), so processes a worker detaches are
    re-parented here instead of to init and can be found and killed. Idempotent."""
    global _subreaper
    if _subreaper is None:
        _subreaper = False
        if sys.platform.startswith("linux"):
            try:
                import ctypes

                libc = ctypes.CDLL(None, use_errno=True)
                _subreaper = libc.prctl(_PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), ctypes.c_ulong(0),
                                        ctypes.c_ulong(0), ctypes.c_ulong(0)) == 0
            except (OSError, AttributeError):
                _subreaper = False
    return _subreaper


def proc_stat(pid: int | str) -> tuple[int, int] | None:
    """``(ppid, start time in clock ticks)`` of a process, or ``None`` if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def start_ticks(pid: int) -> int:
    """The start time of process ``pid`` in clock ticks since boot (0 if it is gone)."""
    st = proc_stat(pid)
    return st[1] if st else 0


def kill_strays(worker: int, since: int, uid: int | None) -> None:
    """Kill the worker's descendants and every process re-parented to us (as subreaper) since the
    worker started that is not another live worker (and, when the worker dropped to ``uid``, that
    belongs to ``uid``); reap the ones that are our children. Loops until none is left (a fork
    bomb stops growing at its process limit, so this converges)."""
    if not sys.platform.startswith("linux") or not os.path.isdir("/proc"):
        return
    me = os.getpid()
    for _ in range(100):
        table: dict[int, int] = {}
        strays: set[int] = set()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            st = proc_stat(name)
            if st is None:
                continue
            pid = int(name)
            table[pid] = st[0]
            if st[0] == me and pid not in LIVE and st[1] >= since:
                try:
                    if uid is None or os.stat(f"/proc/{pid}").st_uid == uid:
                        strays.add(pid)
                except OSError:
                    continue
        victims = set(strays)
        frontier = {worker, *strays}
        while frontier:
            frontier = {p for p, pp in table.items() if pp in frontier and p not in victims}
            victims |= frontier
        if not victims:
            return
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in strays:
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass


def left_running(root: int, worker: int, since: int) -> list[int]:
    """Processes a worker's code left running: those below ``root`` (the process rlm started) or
    in its session (``setsid`` is refused to model code) started at or after ``since`` (clock
    ticks), less ``root``, ``worker`` (the worker's Python process as this process sees it) and
    the processes between them (bwrap's). ``[]`` where ``/proc`` is missing."""
    table: dict[int, tuple[int, int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
                table[int(name)] = (int(fields[1]), int(fields[3]), int(fields[19]))  # ppid, session, start
            except (OSError, IndexError, ValueError):
                continue
    chain, pid = {root}, worker
    for _ in range(64):
        if pid in chain or pid not in table:
            break
        chain.add(pid)
        pid = table[pid][0]
    below = {root}
    grew = True
    while grew:
        more = {p for p, (ppid, _, _) in table.items() if ppid in below and p not in below}
        below |= more
        grew = bool(more)
    found = {p for p, (_, sid, start) in table.items() if sid == root and start >= since} | below
    return sorted(found - chain)


def ns_descendant(ancestor: int, ns_pid: int) -> int | None:
    """The pid, as this process sees it, of the process below ``ancestor`` whose innermost
    PID-namespace pid is ``ns_pid`` (``NSpid`` in ``/proc/PID/status``; a worker under bwrap
    reports its own), or ``None``."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as fh:
                ns = next((line.split()[1:] for line in fh if line.startswith("NSpid:")), [])
        except OSError:
            continue
        if len(ns) > 1 and ns[-1] == str(ns_pid) and descends(int(entry), ancestor):
            return int(entry)
    return None


def exit_reason(code: int) -> str:
    """How a worker ended, from its exit code: ``killed by SIGKILL`` or ``exit status 1`` (bwrap
    reports the child's status as its own exit code: 128 + the signal for a signal)."""
    if code < 0 or code > 128:
        sig = -code if code < 0 else code - 128
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by {name}"
    return f"exit status {code}"


def format_bytes(n: int) -> str:
    """``n`` bytes as ``512 MiB``, ``3.2 GiB``..."""
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:,.3g} {unit}"
    return f"{n:,} bytes"
