"""Helpers for the sandbox tests: which levels can run here, a sandbox factory, host process scans."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rlm_cli.sandbox.corpus_helpers import CorpusView
from rlm_cli.sandbox.launcher import Limits, Sandbox, WorkerSpec
from rlm_cli.sandbox.levels import protections
from rlm_cli.sandbox.probes import bwrap_status

BWRAP_OK, BWRAP_DETAIL = bwrap_status()
IS_ROOT = os.geteuid() == 0
LINUX = sys.platform.startswith("linux")
#: The levels whose isolation these tests exercise on this machine.
LEVELS = (["bwrap"] if BWRAP_OK else []) + ["process"]
#: A secret set in the parent's environment during the security tests.
SECRET = "sk-test-secret-9f8e7d6c5b4a39281706"


def need_bwrap() -> None:
    """Skip (never pass) a network or filesystem test where bubblewrap cannot run."""
    if not BWRAP_OK:
        pytest.skip(f"bubblewrap unavailable ({BWRAP_DETAIL}): network and filesystem isolation not tested here")


def all_levels() -> list[object]:
    """``bwrap`` and ``process`` as parameters; ``bwrap`` is skipped with the reason where missing."""
    marks = [] if BWRAP_OK else [pytest.mark.skip(reason=f"bubblewrap unavailable ({BWRAP_DETAIL})")]
    return [pytest.param("bwrap", marks=marks), "process"]


def expect_protected(level: str, name: str) -> None:
    """Skip (never pass) an attack on ``name`` (a ``levels.protections`` name: ``network``,
    ``files``, ``signals``, ``abstract_unix_sockets``, ``unix_socket_paths``) where ``level`` does
    not protect it on this machine, as the table in docs/sandbox.md says; otherwise the attack must fail."""
    for p in protections(level):
        if p.name == name and not p.present:
            pytest.skip(f"{level} does not protect {name.replace('_', ' ')} here: {p.detail} (the table in docs/sandbox.md)")


@contextmanager
def sandbox(level: str, *, context: str = "hello sandbox", socket_path: str | None = None, token: str = "t0",
            cell_timeout: float = 20.0, limits: Limits | None = None,
            hide: tuple[str, ...] = ()) -> Iterator[Sandbox]:
    """A started sandbox over ``context``; without ``socket_path`` a dummy socket folder is made."""
    sock_dir = None
    if socket_path is None:
        sock_dir = tempfile.mkdtemp(prefix="rlm-test-sock-")
        os.chmod(sock_dir, 0o711)
        socket_path = os.path.join(sock_dir, "lm.sock")
    sb = Sandbox(level, WorkerSpec(context_text=context), socket_path=socket_path, token=token,
                 limits=limits, cell_timeout=cell_timeout)
    sb.hide_paths = hide
    try:
        sb.start()
        yield sb
    finally:
        sb.close()
        if sock_dir:
            os.rmdir(sock_dir)


def procs_named(marker: str) -> list[int]:
    """Host pids whose command name (``/proc/PID/comm``) starts with ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/comm") as fh:
                    if fh.read().startswith(marker):
                        with open(f"/proc/{name}/stat") as st:
                            if st.read().rsplit(")", 1)[1].split()[0] != "Z":  # zombies are dead
                                found.append(int(name))
            except OSError:
                continue
    return found


def descendants(root: int) -> set[int]:
    """Live (non-zombie) host processes below ``root``."""
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                if fields[0] != "Z":
                    parent[int(name)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier and p not in found}
        found |= frontier
    return found


def wait_until(check: object, timeout: float = 10.0, step: float = 0.05) -> bool:
    """Poll ``check()`` until true or ``timeout`` seconds pass."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():  # type: ignore[operator]
            return True
        time.sleep(step)
    return bool(check())  # type: ignore[operator]


def set_comm(marker: str) -> str:
    """Code that renames the current process (so the host can find it and its forks)."""
    return f"import ctypes\nctypes.CDLL(None).prctl(15, {marker.encode()!r}, 0, 0, 0)\n"


def empty(path: Path) -> bool:
    return not path.exists() or not any(path.iterdir())


def corpus_view(files: dict[str, str]) -> CorpusView:
    """A CorpusView laid out like a bundle: each file after its ``==> path <==`` line (no chunks)."""
    parts, rows, pos = [], [], 0
    for path, text in files.items():
        head = f"==> {path} <==\n"
        parts.append(head + text)
        start = pos + len(head)
        rows.append({"path": path, "size": len(text), "chars": len(text), "lines": text.count("\n"),
                     "tokens": 0, "start": start, "end": start + len(text), "first_chunk": 0, "n_chunks": 0,
                     "kind": ""})
        pos = start + len(text)
    return CorpusView("".join(parts), rows, [])
