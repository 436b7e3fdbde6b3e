"""The sandbox levels as a type: :class:`Level`, and what each one means for the launcher.

A level is chosen once per session (``levels.resolve_level`` maps ``auto`` to the strongest one
available) and carried as a :class:`Level` from then on: the launcher (``sandbox.launcher``), the
commands per level (``sandbox.argv``), the user a worker runs as (``sandbox.users``) and the
document decoder (``corpus.decode``) ask it what they need to know instead of comparing names.
What each level protects is described in ``sandbox.levels``.
"""

from __future__ import annotations

import enum


class Level(enum.StrEnum):
    """A resolved sandbox level (never ``auto``). A ``str``: it prints, compares and goes into
    JSON as its name (``bwrap``, ``sandbox-exec``, ``process``, ``none``)."""

    BWRAP = "bwrap"
    SANDBOX_EXEC = "sandbox-exec"
    PROCESS = "process"
    NONE = "none"

    @property
    def confined(self) -> bool:
        """Resource limits and the worker's own hardening apply (every level but ``none``)."""
        return self is not Level.NONE

    @property
    def namespaced(self) -> bool:
        """The worker runs in namespaces of its own (bubblewrap): its scratch folder is a tmpfs of
        its own, host paths are bound under ``/tmp/rlm``, its pid is another in its PID namespace."""
        return self is Level.BWRAP

    @property
    def seccomp(self) -> bool:
        """The worker installs the seccomp filter (``hardening.install_seccomp``), and where the
        kernel has seccomp one that cannot be installed stops the start: ``process`` and ``bwrap``."""
        return self in (Level.PROCESS, Level.BWRAP)

    @property
    def drops_root(self) -> bool:
        """A worker started by root becomes another user (``users.plan_drop``): ``process`` and ``bwrap``."""
        return self in (Level.PROCESS, Level.BWRAP)

    @property
    def reaped(self) -> bool:
        """rlm finds and kills what the worker started itself (child subreaper, the reaper's
        records, strays, its session, its SysV IPC objects): ``process`` and ``none``. Under
        bwrap the namespaces take everything with the worker; sandbox-exec (macOS) has none of it."""
        return self in (Level.PROCESS, Level.NONE)

    @property
    def runs_plain(self) -> bool:
        """The worker is a plain Python process on the host (no wrapper command): ``process`` and ``none``."""
        return self in (Level.PROCESS, Level.NONE)

    @property
    def confined_on_host(self) -> bool:
        """Confined, and a plain process on the host's file system (``process``): the worker
        confines its own files with Landlock (``argv.landlock_policy``), mounts a tmpfs over its
        scratch folder and takes an IPC namespace of its own where rlm may mount (else the
        scratch folder's size is watched), and a worker that drops from root is given its scratch
        folder (``CAP_CHOWN``: ``users.plan_drop``)."""
        return self.confined and self.runs_plain
