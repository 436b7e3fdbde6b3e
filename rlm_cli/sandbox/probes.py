"""What this machine offers the sandbox, probed once per process: whether bubblewrap can create
its namespaces (:func:`bwrap_status`), the Landlock ABI and seccomp (:func:`confinement`), and
this process's capabilities (:func:`effective_caps`, :func:`can_mount`)."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass

_bwrap_probe: tuple[bool, str] | None = None


def bwrap_status() -> tuple[bool, str]:
    """``(usable, detail)``: whether ``bwrap`` exists and can create the namespaces and mounts we
    use, and why not (or its path). Probed once per process."""
    global _bwrap_probe
    if _bwrap_probe is None:
        exe = shutil.which("bwrap")
        if not sys.platform.startswith("linux"):
            _bwrap_probe = (False, "bubblewrap is Linux-only")
        elif not exe:
            _bwrap_probe = (False, "bwrap is not installed (apt-get install bubblewrap)")
        else:
            probe = [exe, *bwrap_ns_flags(), "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev",
                     "--proc", "/proc", "--perms", "0777", "--size", "1048576", "--tmpfs", "/tmp", "true"]
            try:
                res = subprocess.run(probe, capture_output=True, timeout=10)
                err = res.stderr.decode("utf-8", "replace").strip().splitlines()
                _bwrap_probe = (res.returncode == 0, exe if res.returncode == 0 else
                                f"{exe} cannot create the sandbox here: {err[-1] if err else res.returncode}")
            except (OSError, subprocess.TimeoutExpired) as exc:
                _bwrap_probe = (False, f"{exe} failed: {exc}")
    return _bwrap_probe


def bwrap_available() -> bool:
    """True if ``bwrap`` exists and can create the namespaces we use (probed once per process)."""
    return bwrap_status()[0]


def bwrap_ns_flags() -> list[str]:
    """The namespaces bwrap creates: IPC, PID, network, UTS and cgroup, and a user namespace when
    rlm is not root."""
    flags = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    if os.geteuid() != 0:
        flags.insert(0, "--unshare-user")
    return flags


@dataclass(frozen=True)
class Confinement:
    """What this kernel gives the ``process`` level: the Landlock ABI version (0: none) and
    whether the seccomp filter can be loaded, each with a one-line explanation."""

    landlock_abi: int
    landlock_detail: str
    seccomp: bool
    seccomp_detail: str


_confinement: Confinement | None = None


def confinement() -> Confinement:
    """Probe Landlock (``landlock_create_ruleset`` with the VERSION flag returns the ABI, through
    ``landlockpy``) and seccomp (``prctl(PR_GET_SECCOMP)``, and a filter table for this CPU) once
    per process: two system calls, no subprocess."""
    global _confinement
    if _confinement is not None:
        return _confinement
    if not sys.platform.startswith("linux"):
        _confinement = Confinement(0, "Landlock is Linux-only", False, "seccomp is Linux-only")
        return _confinement
    abi = 0
    try:
        import landlockpy

        abi = landlockpy.abi_version()
        ll_detail = f"ABI {abi}" if abi else ("not available in this kernel (needs Linux 5.13+ with landlock "
                                              "in the lsm= boot list)")
    except ImportError:
        ll_detail = "the landlockpy package is not installed (pip install landlockpy)"
    except OSError as exc:
        ll_detail = f"refused here ({exc.strerror or exc}): a container's seccomp profile may block it"
    import ctypes

    from rlm_cli.sandbox.hardening import seccomp_program

    machine = platform.machine()
    if seccomp_program(machine) is None:
        sc, sc_detail = False, f"no filter table for {machine}"
    elif ctypes.CDLL(None, use_errno=True).prctl(21, 0, 0, 0, 0) < 0:  # PR_GET_SECCOMP
        sc, sc_detail = False, "this kernel has no seccomp"
    else:
        sc, sc_detail = True, f"filter for {machine}"
    _confinement = Confinement(abi, ll_detail, sc, sc_detail)
    return _confinement


#: Capability numbers (linux/capability.h) rlm needs to lend the worker another user.
CAP_CHOWN, CAP_DAC_READ_SEARCH, CAP_SETGID, CAP_SETUID, CAP_SETPCAP, CAP_SYS_ADMIN = 0, 2, 6, 7, 8, 21


def effective_caps() -> int:
    """This process's effective capability mask (``CapEff`` in ``/proc/self/status``); every bit
    set where that cannot be read (not Linux)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        pass
    return (1 << 64) - 1


def can_mount() -> bool:
    """Whether this process may mount a tmpfs for a worker's scratch folder (Linux, root with
    ``CAP_SYS_ADMIN``); the worker tries, and says when it could not."""
    return sys.platform.startswith("linux") and os.geteuid() == 0 and bool(effective_caps() & (1 << CAP_SYS_ADMIN))
