"""Which SysV IPC objects a stopped worker's sweep removes (``rlm_cli.sandbox.ipc``): only the
worker's, never the user's own."""

from __future__ import annotations

from pathlib import Path

from rlm_cli.sandbox.ipc import IpcObject, ipc_objects, made_by_worker

NOBODY, ME, START = 65534, 1000, 1_000_000


def _shm(cuid: int, ctime: int, cpid: int = 7, nattch: int = 0) -> IpcObject:
    return IpcObject("shm", 1, cuid, ctime, cpid, nattch)


def test_a_worker_of_its_own_user_leaves_nothing_of_that_user_made_since_it_started() -> None:
    rule = {"uid": NOBODY, "since": START, "own_user": True, "pids": set()}
    assert made_by_worker(_shm(NOBODY, START + 5), **rule)
    assert made_by_worker(IpcObject("sem", 2, NOBODY, START + 5), **rule)
    assert not made_by_worker(_shm(NOBODY, START - 5), **rule)  # older than the worker
    assert not made_by_worker(_shm(NOBODY, START + 5, nattch=1), **rule)  # a live process still uses it
    assert not made_by_worker(_shm(ME, START + 5), **rule)  # the user's


def test_a_worker_running_as_the_user_leaves_only_segments_its_processes_made() -> None:
    rule = {"uid": ME, "since": START, "own_user": False, "pids": {7, 8}}
    assert made_by_worker(_shm(ME, START + 5, cpid=8), **rule)
    assert not made_by_worker(_shm(ME, START + 5, cpid=9), **rule)  # another process of the user
    assert not made_by_worker(IpcObject("msg", 3, ME, START + 5), **rule)  # no creator recorded: kept


def test_the_proc_tables_are_read_by_their_column_names(tmp_path: Path) -> None:
    (tmp_path / "shm").write_text(
        "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime"
        "      dtime      ctime                   rss                  swap\n"
        "         0         12   600               8388608   321   321      0 65534 65534 65534 65534 1700000000"
        " 1700000000 1700000001               8388608                     0\n")
    (tmp_path / "sem").write_text("       key      semid perms      nsems   uid   gid  cuid  cgid      otime      ctime\n"
                                  "         0          3   600          1  1000  1000  1000  1000          0 1700000002\n")
    found = ipc_objects(str(tmp_path))
    assert found == [IpcObject("shm", 12, 65534, 1700000001, 321, 0, 8388608), IpcObject("sem", 3, 1000, 1700000002)]
