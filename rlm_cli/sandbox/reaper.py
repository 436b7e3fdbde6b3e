"""What a killed rlm leaves behind, found and removed by the next one.

An rlm that is SIGKILLed (or dies of the OOM killer) cannot clean up. Its REPL worker dies with it
(the parent-death signal; under bubblewrap the whole PID namespace goes), but at the ``process``
and ``none`` levels processes the worker started are re-parented to init and live on, and its
scratch and relay folders stay in the temporary folder. So:

* every worker rlm starts at those levels is recorded, with rlm's own pid and start time, in a
  state file of the user's runtime folder (``RLM_RUNTIME_DIR``/``workers``, which the worker
  cannot reach), and forgotten once rlm has killed it;
* the worker leads its own session (``setsid`` when it starts) and the seccomp filter refuses
  ``setsid`` to model code, so every process it ever starts stays in that session, however it
  forks, detaches or changes process group: the session id is a mark model code cannot shed;
* the folders carry their rlm's pid in their names (``rlm-scratch-PID-...``, ``rlm-lm-PID-...``).

:func:`sweep` (run once per rlm process, when it starts its first worker) kills the sessions of
the workers recorded by rlms that are gone and deletes their state files, and deletes the
scratch and relay folders in the temporary folder whose rlm is gone. A process is killed only
when it is in such a session, started no earlier than the recorded worker, and belongs to the
worker's user; a session whose leader's pid now names another process (reused) is left alone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

#: Prefixes of the folders rlm makes in the temporary folder, followed by its pid and ``-``.
SCRATCH_PREFIX, RELAY_PREFIX = "rlm-scratch-", "rlm-lm-"
_STALE = re.compile(rf"^(?:{SCRATCH_PREFIX}|{RELAY_PREFIX})(\d+)-")
_lock = threading.Lock()
_swept = False


def stat_of(pid: int | str) -> tuple[int, int, int] | None:
    """``(ppid, session id, start time in clock ticks)`` of a live (not zombie) process, or ``None``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        if fields[0] == b"Z":
            return None
        return int(fields[1]), int(fields[3]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int, ticks: int) -> bool:
    st = stat_of(pid)
    return st is not None and st[2] == ticks


def folder_prefix(prefix: str) -> str:
    """``prefix`` with this process's pid: the start of a folder name :func:`sweep` can judge."""
    return f"{prefix}{os.getpid()}-"


def _state_dir() -> Path:
    from rlm_cli.config import runtime_path

    return runtime_path() / "workers"


def _me() -> tuple[int, int]:
    pid = os.getpid()
    st = stat_of(pid)
    return pid, st[2] if st else 0


def _state_file() -> Path:
    pid, ticks = _me()
    return _state_dir() / f"{pid}-{ticks}.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(f".{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def record(pid: int, ticks: int, uid: int) -> None:
    """Remember worker ``pid`` (started at ``ticks``, running as ``uid``) until :func:`forget`.
    Best effort: without a usable runtime folder nothing is recorded."""
    for _ in range(3):  # another rlm may remove the emptied folder between mkdir and write
        try:
            folder = _state_dir()
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            with _lock:
                path = _state_file()
                data = _read(path)
                workers = [w for w in data.get("workers", []) if w[0] != pid]
                _write(path, {"workers": [*workers, [pid, ticks, uid]]})
            return
        except FileNotFoundError:
            continue
        except OSError:
            return


def forget(pid: int) -> None:
    """Forget worker ``pid`` (rlm killed it and what it started); the state file goes with the last."""
    try:
        with _lock:
            path = _state_file()
            data = _read(path)
            workers = [w for w in data.get("workers", []) if w[0] != pid]
            if workers:
                _write(path, {"workers": workers})
            else:
                path.unlink(missing_ok=True)
                _remove_if_empty(path.parent)
    except OSError:
        pass


def _remove_if_empty(folder: Path) -> None:
    """Remove the state folder once no rlm records a worker in it: a run leaves the runtime folder
    as it found it (``rmdir`` fails, harmlessly, while another rlm's file is there)."""
    try:
        folder.rmdir()
    except OSError:
        pass


def session_members(sid: int, since: int, uid: int | None) -> list[int]:
    """Live processes in session ``sid`` started at or after ``since`` (clock ticks), of ``uid``
    when given."""
    found: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        st = stat_of(name)
        if st is None or st[1] != sid or st[2] < since:
            continue
        try:
            if uid is not None and os.stat(f"/proc/{name}").st_uid != uid:
                continue
        except OSError:
            continue
        found.append(int(name))
    return found


def kill_session(sid: int, since: int, uid: int | None) -> int:
    """SIGKILL every process of :func:`session_members` until none is left; how many were killed."""
    killed: set[int] = set()
    for _ in range(50):  # a fork loop stops growing once its members die
        members = session_members(sid, since, uid)
        if not members:
            break
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        time.sleep(0.01)  # SIGKILL takes a moment to land
    return len(killed)


def sweep() -> list[str]:
    """Remove what rlms that are gone left (see the module docstring), once per process; returns
    notes for the user (one line each; none when there was nothing to do). Never raises."""
    global _swept
    with _lock:
        if _swept:
            return []
        _swept = True
    notes: list[str] = []
    try:
        killed = _sweep_workers()
        if killed:
            notes.append(f"sandbox: killed {killed} process{'es' if killed > 1 else ''} left running by an earlier "
                         "rlm that was killed")
    except OSError:
        pass
    _sweep_folders()
    return notes


def _sweep_workers() -> int:
    folder = _state_dir()
    try:
        files = sorted(folder.glob("*.json"))
    except OSError:
        return 0
    killed = 0
    for path in files:
        m = re.fullmatch(r"(\d+)-(\d+)\.json", path.name)
        if m is None or _alive(int(m[1]), int(m[2])):
            continue
        for worker in _read(path).get("workers", []):
            try:
                pid, ticks, uid = (int(x) for x in worker)
            except (TypeError, ValueError):
                continue
            leader = stat_of(pid)
            if leader is not None and leader[2] != ticks:
                continue  # the pid names another process now: its session is not ours to judge
            killed += kill_session(pid, ticks, uid)
        path.unlink(missing_ok=True)
    _remove_if_empty(folder)
    return killed


def _sweep_folders() -> None:
    """Delete the scratch and relay folders in the temporary folder whose rlm is gone: this
    user's (root's sweep takes any user's, its workers' scratch folders belonging to ``nobody``)."""
    from rlm_cli.sandbox.paths import remove_tree
    from rlm_cli.sockets import socket_temp_dir

    folders = {tempfile.gettempdir()}
    try:
        folders.add(socket_temp_dir())  # the relay's folder, when TMPDIR is too long for a socket
    except OSError:
        pass
    entries: list[os.DirEntry[str]] = []
    for tmp in sorted(folders):
        try:
            entries += [e for e in os.scandir(tmp) if e.name.startswith(("rlm-scratch-", "rlm-lm-"))]
        except OSError:
            continue
    me = os.geteuid()
    for entry in entries:
        m = _STALE.match(entry.name)
        if m is None:
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not entry.is_dir(follow_symlinks=False) or (info.st_uid != me and me != 0):
            continue
        if stat_of(int(m[1])) is not None:
            continue  # its rlm (or a process that took its pid) is alive: keep it
        if entry.name.startswith(RELAY_PREFIX):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            remove_tree(Path(entry.path))
