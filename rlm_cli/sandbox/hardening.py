"""The worker's process hardening, applied by the worker to itself before any model code runs
(and by the document decoder, ``corpus.decode_child``): resource limits (:func:`apply_limits`,
:func:`memory_problem`), the drop to another user (:func:`drop_privileges`), the seccomp
filter (:func:`seccomp_program`, :func:`install_seccomp`), Landlock (:func:`apply_landlock`),
a scratch tmpfs of its own (:func:`mount_scratch`), an IPC namespace of its own
(:func:`private_ipc`), :func:`harden` (the filters together) and :func:`confine`, the
worker's whole sequence.

Runs inside the sandbox: the standard library and ``rlm_cli.protocol`` only (``landlockpy``
when Landlock is asked for).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from rlm_cli import protocol

#: prctl options and capability numbers used below (linux/prctl.h, linux/capability.h).
_PR_SET_PDEATHSIG, _PR_SET_KEEPCAPS, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT = 1, 8, 24, 38, 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAPS = {"CAP_DAC_READ_SEARCH": 2}
_CAP_VERSION_3 = 0x20080522


def apply_limits(limits: dict[str, int]) -> list[str]:
    """Apply ``resource`` limits named like ``RLIMIT_AS`` (values in bytes/seconds/counts); soft
    and hard limits are both set, so model code cannot raise them again.

    Returns notes for limits that could not be applied (never raises).
    """
    notes = []
    try:
        import resource
    except ImportError:
        return ["resource limits are unavailable on this platform"]
    for name, value in limits.items():
        which = getattr(resource, name, None)
        if which is None:
            continue
        try:
            _, hard = resource.getrlimit(which)
            soft = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (soft, soft))
        except (ValueError, OSError) as exc:
            notes.append(f"{name}: {exc}")
    return notes


#: Address space model code must have free once the corpus is loaded (shared with the CLI's check).
MIN_FREE_MEMORY = protocol.MIN_FREE_MEMORY


def address_space() -> int | None:
    """Bytes of address space this process uses now (``VmSize``, what ``RLIMIT_AS`` limits), or
    None where ``/proc`` is missing (macOS)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def memory_problem(limits: dict[str, int], chars: int) -> str | None:
    """A one-line error when ``RLIMIT_AS`` in ``limits`` would leave the loaded worker less than
    :data:`MIN_FREE_MEMORY` to work in (every allocation of model code would fail), else None.

    Checked after the corpus is loaded and before the limit is applied: the limit cannot be set
    earlier, since the loaded corpus alone may exceed it.
    """
    limit = limits.get("RLIMIT_AS")
    used = address_space()
    if not limit or used is None or limit - used >= MIN_FREE_MEMORY:
        return None
    from rlm_cli.config_keys import format_size, limit_advice
    from rlm_cli.sandbox.memory import working_room

    mib = 1024**2
    advise = limit_advice(used + working_room(chars))  # what it holds now, plus what sandbox.memory.limit_need adds
    return (f"--memory-limit {format_size(limit)} is too small: the REPL worker already uses {used // mib:,} MiB "
            f"of address space after loading the corpus ({chars:,} characters of context); use "
            f"--memory-limit {advise} or more, or narrow the corpus (`rlm stats` shows what takes the room)")


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, arg2: int = 0) -> None:
    """``prctl(option, arg2, 0, 0, 0)``.

    Raises:
        OSError: the call failed.
    """
    import ctypes

    libc = _libc()
    if libc.prctl(option, ctypes.c_ulong(arg2), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def _set_caps(keep: int) -> None:
    """Set this thread's effective and permitted capabilities to the mask ``keep`` and the
    inheritable set to empty (``capset(2)``; lowering is always allowed).

    Raises:
        OSError: the call failed.
    """
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    data = (Data * 2)(Data(keep & 0xFFFFFFFF, keep & 0xFFFFFFFF, 0), Data(keep >> 32, keep >> 32, 0))
    libc = _libc()
    if libc.capset(ctypes.byref(Header(_CAP_VERSION_3, 0)), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")


def _drop_bounding_set(keep: int) -> None:
    """Remove every capability but ``keep`` from the bounding set, so no later ``execve`` can
    regain one (needs CAP_SETPCAP; without it the set stays and no-new-privileges still holds)."""
    for cap in range(64):
        if keep & (1 << cap):
            continue
        try:
            _prctl(_PR_CAPBSET_DROP, cap)
        except OSError as exc:
            if exc.errno == 22:  # EINVAL: past the last capability this kernel knows
                return
            if exc.errno == 1:  # EPERM: no CAP_SETPCAP
                return
            raise


def drop_privileges(uid: int, gid: int, keep_caps: list[str] | tuple[str, ...] = ()) -> None:
    """If running as root, become ``uid``/``gid`` (so per-user process limits apply and the
    parent cannot be signalled), keeping only the capabilities named in ``keep_caps``
    (``CAP_DAC_READ_SEARCH`` when the interpreter is not readable by ``uid``); every other
    capability set, the inheritable, ambient and bounding ones included, ends up empty.
    ``uid``/``gid`` equal to the current ones (0) keep the user and only drop the capabilities
    (rlm lacks what becoming ``nobody`` would need: see ``users.plan_drop``).

    Raises:
        OSError: a step failed (the worker must then refuse to run model code).
    """
    if not (hasattr(os, "geteuid") and os.geteuid() == 0):
        return
    mask = 0
    for name in keep_caps:
        mask |= 1 << _CAPS[name]
    linux = sys.platform.startswith("linux")
    if linux:
        _drop_bounding_set(mask)
        if mask:
            _prctl(_PR_SET_KEEPCAPS, 1)
    if (uid, gid) != (os.getuid(), os.getgid()):  # equal: stay root, with every capability dropped
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    if linux:
        _set_caps(mask)
        _prctl(_PR_SET_KEEPCAPS, 0)
        try:
            _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
        except OSError:
            pass  # kernels before 4.3 have no ambient set
    if os.getuid() != uid or os.geteuid() != uid:
        raise OSError(f"still uid {os.geteuid()} after setuid({uid})")


#: Syscalls the seccomp filter checks, per architecture (the kernel's syscall tables:
#: arch/x86/entry/syscalls/syscall_64.tbl, include/uapi/asm-generic/unistd.h). ``refused`` are
#: refused outright: bpf, userfaultfd, perf_event_open, the key-ring calls and io_uring are kernel
#: attack surface no REPL needs; memfd_create and memfd_secret make memory that ``RLIMIT_AS``
#: does not count (pages of a memfd written with ``write()`` are never mapped); setsid would let a
#: process leave the worker's session, the mark by which what it started is found and killed
#: (``sandbox.reaper``), so it is refused too (``os.setsid``, ``start_new_session=True``). The
#: System V IPC calls (shmget, shmat, shmctl, shmdt, semget, semop, semctl, semtimedop, msgget,
#: msgsnd, msgrcv, msgctl) are refused: a shared memory segment is memory ``RLIMIT_AS`` does not
#: count that outlives every process (4 x 512 MiB under a 1 GiB limit stayed after the run), and
#: an existing one of the same user could be attached; no REPL needs them (multiprocessing uses
#: POSIX semaphores). ``self_only`` act
#: on the process their first argument names and pass only when it is 0 (the caller itself):
#: prlimit64 (a CPU limit of 1 s on rlm would kill it), sched_setaffinity, sched_setparam,
#: sched_setscheduler and sched_setattr.
_SECCOMP_TABLE: dict[str, dict[str, Any]] = {
    "x86_64": {"arch": 0xC000003E, "clone": 56, "unshare": 272, "clone3": 435, "socket": 41, "socketpair": 53,
               "setpriority": 141, "ioprio_set": 251,
               "self_only": (302, 203, 142, 144, 314),
               "refused": (321, 323, 298, 250, 248, 249, 425, 319, 447, 112,
                           29, 30, 31, 67, 64, 65, 66, 220, 68, 69, 70, 71)},
    "aarch64": {"arch": 0xC00000B7, "clone": 220, "unshare": 97, "clone3": 435, "socket": 198, "socketpair": 199,
                "setpriority": 140, "ioprio_set": 30,
                "self_only": (261, 122, 118, 119, 274),
                "refused": (280, 282, 241, 219, 217, 218, 425, 279, 447, 157,
                            194, 196, 195, 197, 190, 193, 191, 192, 186, 189, 188, 187)},
}
_CLONE_NEWUSER = 0x10000000
_AF_UNIX = 1
#: ``setpriority``'s ``which`` for one process, ``ioprio_set``'s (linux/resource.h, linux/ioprio.h).
_PRIO_PROCESS, _IOPRIO_WHO_PROCESS = 0, 1


def seccomp_program(machine: str) -> list[tuple[int, int, int, int]] | None:
    """The classic-BPF seccomp filter for ``machine`` (``platform.machine()``) as
    ``(code, jt, jf, k)`` instructions, or ``None`` for an architecture we have no table for.

    Syscalls of a foreign ABI (i386 ``int 0x80`` and x32 on x86_64) are refused as a whole, so the
    numbers below cannot be bypassed (i386's ``socketcall`` included); ``clone3`` answers ENOSYS so
    the C library falls back to ``clone``, whose flags the filter can read; ``socket`` and
    ``socketpair`` pass only when their first argument (the address family, an ``int``: the low
    32 bits of ``args[0]``) is AF_UNIX, and fail with EPERM otherwise. The ``self_only`` calls
    pass only for pid 0 (the low 32 bits of ``args[0]``: a ``pid_t``); ``setpriority`` only as
    ``(PRIO_PROCESS, 0, ...)`` (``os.nice``) and ``ioprio_set`` only as ``(IOPRIO_WHO_PROCESS,
    0, ...)``: no process but the caller's own priority, CPU set, scheduling or limits can be
    changed, whatever the user ids allow.
    """
    entry = _SECCOMP_TABLE.get(machine)
    if entry is None:
        return None
    ld_w, jeq, jset, jge, ret = 0x20, 0x15, 0x45, 0x35, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    args0, args1 = 16, 24  # offsetof(struct seccomp_data, args[i]); the low word on these little-endian machines
    # Jump targets are labels (str) or 0 (the next instruction); labels are resolved below.
    source: list[str | tuple[int, int | str, int | str, int]] = [
        (ld_w, 0, 0, 4), (jeq, 0, "eperm", entry["arch"]),  # foreign ABI: refused
        (ld_w, 0, 0, 0), (jge, "eperm", 0, 0x40000000),  # x32 numbers: refused
        (jeq, "flags", 0, entry["clone"]), (jeq, "flags", 0, entry["unshare"]), (jeq, "enosys", 0, entry["clone3"]),
        (jeq, "family", 0, entry["socket"]), (jeq, "family", 0, entry["socketpair"]),
        *[(jeq, "self", 0, nr) for nr in entry["self_only"]],
        (jeq, "prio", 0, entry["setpriority"]), (jeq, "ioprio", 0, entry["ioprio_set"]),
        *[(jeq, "eperm", 0, nr) for nr in entry["refused"]],
        (ret, 0, 0, allow),
        "flags", (ld_w, 0, 0, args0), (jset, "eperm", "allow", _CLONE_NEWUSER),
        "family", (ld_w, 0, 0, args0), (jeq, "allow", "eperm", _AF_UNIX),
        "self", (ld_w, 0, 0, args0), (jeq, "allow", "eperm", 0),
        "prio", (ld_w, 0, 0, args0), (jeq, 0, "eperm", _PRIO_PROCESS), (ld_w, 0, 0, args1), (jeq, "allow", "eperm", 0),
        "ioprio", (ld_w, 0, 0, args0), (jeq, 0, "eperm", _IOPRIO_WHO_PROCESS), (ld_w, 0, 0, args1),
        (jeq, "allow", "eperm", 0),
        "allow", (ret, 0, 0, allow),
        "eperm", (ret, 0, 0, eperm),
        "enosys", (ret, 0, 0, enosys),
    ]
    labels: dict[str, int] = {}
    for item in source:
        if isinstance(item, str):
            labels[item] = sum(1 for i in source[:source.index(item)] if not isinstance(i, str))
    prog: list[tuple[int, int, int, int]] = []
    for item in source:
        if isinstance(item, str):
            continue
        code, jt, jf, k = item
        at = len(prog)
        offsets = [labels[j] - at - 1 if isinstance(j, str) else j for j in (jt, jf)]
        assert all(0 <= o < 256 for o in offsets), (item, offsets)
        prog.append((code, offsets[0], offsets[1], k))
    return prog


def install_seccomp() -> str | None:
    """Load :func:`seccomp_program` for this machine (needs no-new-privileges first).

    Returns a note when no filter could be installed (never raises).
    """
    import ctypes
    import platform

    prog = seccomp_program(platform.machine())
    if prog is None:
        return f"no seccomp filter for {platform.machine()}: user namespaces stay available to model code"

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                    ("k", ctypes.c_uint32)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    filters = (SockFilter * len(prog))(*[SockFilter(*ins) for ins in prog])
    fprog = SockFprog(len(prog), filters)
    libc = _libc()
    if libc.prctl(22, ctypes.c_ulong(2), ctypes.byref(fprog), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        return f"seccomp filter not installed: {os.strerror(ctypes.get_errno())}"
    return None


#: Landlock filesystem rights (``LANDLOCK_ACCESS_FS_*`` in linux/landlock.h) and the ABI that
#: introduced each: ABI 1 (Linux 5.13) the basic ones, 2 REFER (5.19), 3 TRUNCATE (6.2),
#: 5 IOCTL_DEV (6.10), 9 RESOLVE_UNIX (connecting to a named Unix socket).
_FS_READ = (1 << 0) | (1 << 2) | (1 << 3)  # EXECUTE, READ_FILE, READ_DIR
_FS_ABI1 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
_FS_BY_ABI = ((1, _FS_ABI1), (2, 1 << 13), (3, 1 << 14), (5, 1 << 15), (9, 1 << 16))
#: Rights that a rule on a file (not a folder) may carry: EXECUTE, WRITE_FILE, READ_FILE,
#: TRUNCATE, IOCTL_DEV, RESOLVE_UNIX.
_FS_FILE = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 14) | (1 << 15) | (1 << 16)
_FS_DEVICE = (1 << 1) | (1 << 2) | (1 << 14) | (1 << 15)  # WRITE_FILE, READ_FILE, TRUNCATE, IOCTL_DEV
_FS_RESOLVE_UNIX = 1 << 16
#: Network rights: ABI 4 (Linux 6.7) TCP bind and connect, ABI 10 UDP bind and connect/send.
_NET_BY_ABI = ((4, (1 << 0) | (1 << 1)), (10, (1 << 2) | (1 << 3)))
#: Scopes: ABI 6 (Linux 6.12) abstract Unix sockets and signals outside the worker's domain.
_SCOPE_BY_ABI = ((6, (1 << 0) | (1 << 1)),)


def _for_abi(table: tuple[tuple[int, int], ...], abi: int) -> int:
    mask = 0
    for since, bits in table:
        if abi >= since:
            mask |= bits
    return mask


def apply_landlock(policy: dict[str, Any]) -> int:
    """Restrict this process (and every process it starts) with Landlock, for good.

    ``policy`` (built by ``argv.landlock_policy``): ``files`` (bool: handle filesystem rights at all;
    bubblewrap's own mount namespace already does that), ``read`` (paths readable and executable,
    nothing else), ``write`` (paths with every right: the scratch folder), ``devices`` (device
    files readable and writable: ``/dev/null``...), ``unix`` (folders holding the Unix sockets the
    worker may connect to, enforced from ABI 9). Whatever the kernel's ABI handles, every path
    not listed is denied, ``CAP_DAC_READ_SEARCH`` or not. From ABI 4, TCP bind and connect are
    denied (UDP too from ABI 10); from ABI 6 signals and abstract Unix sockets are scoped to the
    worker's own processes. A missing path is skipped.

    Returns the ABI version used.

    Raises:
        OSError: Landlock is unavailable (no kernel support, no ``landlockpy``) or a step failed;
            the worker must then refuse to run model code, since the parent reported it present.
    """
    try:
        from landlockpy import AccessFS, AccessNet, Ruleset, Scope, abi_version
    except ImportError as exc:
        raise OSError(f"Landlock: the landlockpy package is missing ({exc})") from None
    abi = abi_version()
    if abi < 1:
        raise OSError("Landlock is not available in this kernel")
    fs = _for_abi(_FS_BY_ABI, abi) if policy.get("files") else 0
    net, scoped = _for_abi(_NET_BY_ABI, abi), _for_abi(_SCOPE_BY_ABI, abi)
    if not (fs or net or scoped):
        return abi
    with Ruleset(handled_fs=AccessFS(fs), handled_net=AccessNet(net), scoped=Scope(scoped),
                 best_effort=False) as ruleset:
        if fs:
            grants = [(p, _FS_READ) for p in policy.get("read", ())]
            grants += [(p, fs) for p in policy.get("write", ())]
            grants += [(p, _FS_DEVICE) for p in policy.get("devices", ())]
            grants += [(p, _FS_RESOLVE_UNIX) for p in policy.get("unix", ())]
            for path, rights in grants:
                try:
                    is_dir = os.path.isdir(path)
                    rights &= fs if is_dir else fs & _FS_FILE
                    if rights:
                        ruleset.allow_path(path, AccessFS(rights))
                except FileNotFoundError:
                    continue
        ruleset.restrict(no_new_privs=True)
    return abi


#: ``unshare`` and ``mount`` flags (linux/sched.h, linux/mount.h).
_CLONE_NEWNS, _MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 0x00020000, 2, 4, 1 << 14, 1 << 18


def mount_scratch(path: str, size: int, uid: int, gid: int) -> None:
    """Make ``path`` (the scratch folder) a tmpfs of at most ``size`` bytes owned by
    ``uid``/``gid``, in a mount namespace of this process's own (inherited by what it starts),
    so that its files cannot fill the host's disk and leave nothing there. Needs
    ``CAP_SYS_ADMIN`` (a root rlm); call it while single-threaded, before the drop and Landlock.

    Raises:
        OSError: a step failed (the scratch folder then stays on the host disk).
    """
    import ctypes

    libc = _libc()
    steps = ((lambda: libc.unshare(_CLONE_NEWNS), "unshare"),
             (lambda: libc.mount(b"none", b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None), "mount --make-rprivate"),
             (lambda: libc.mount(b"tmpfs", path.encode(), b"tmpfs", ctypes.c_ulong(_MS_NOSUID | _MS_NODEV),
                                 f"size={int(size)},mode=0700,uid={int(uid)},gid={int(gid)}".encode()), "mount tmpfs"))
    for call, what in steps:
        if call() != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")


_CLONE_NEWIPC = 0x08000000


def private_ipc() -> list[str]:
    """Give this process (and what it starts) a System V IPC and POSIX message queue namespace of
    its own: whatever model code makes there is freed when its last process ends. Needs
    ``CAP_SYS_ADMIN`` (a root rlm); call it before the drop.

    Returns a note when ``unshare`` failed (the seccomp filter still refuses SysV IPC; never raises).
    """
    import ctypes

    if _libc().unshare(_CLONE_NEWIPC) != 0:
        return [f"no IPC namespace of its own ({os.strerror(ctypes.get_errno())}); seccomp refuses SysV IPC"]
    return []


def harden(parent_pid: int, landlock: dict[str, Any] | None = None, require_seccomp: bool = False,
           seccomp: bool = True) -> list[str]:
    """Linux hardening that needs no privileges: no new privileges through setuid binaries or
    file capabilities (``PR_SET_NO_NEW_PRIVS``), death with the parent (``PR_SET_PDEATHSIG``),
    Landlock with the ``landlock`` policy when given (see :func:`apply_landlock`), and a seccomp
    filter refusing every socket but AF_UNIX, new user namespaces and a few kernel interfaces
    (see :func:`seccomp_program`). Both apply to this thread and what it starts: the worker is
    still single-threaded here (checked).

    Returns notes for what could not be done. Exits at once if the parent is already gone.

    Raises:
        OSError: Landlock (when ``landlock`` is given) or seccomp (when ``require_seccomp``)
            could not be applied, though the parent found them available and reported them.
    """
    notes: list[str] = []
    if not sys.platform.startswith("linux"):
        return notes
    import signal

    for option, arg, what in ((_PR_SET_NO_NEW_PRIVS, 1, "no-new-privileges"),
                              (_PR_SET_PDEATHSIG, int(signal.SIGKILL), "parent-death signal")):
        try:
            _prctl(option, arg)
        except (OSError, AttributeError) as exc:
            notes.append(f"{what} could not be set: {exc}")
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = 1
    if threads > 1 and (landlock is not None or require_seccomp):
        raise OSError(f"the worker runs {threads} threads; Landlock and seccomp would confine only one")
    if landlock is not None:
        apply_landlock(landlock)
    note = install_seccomp() if seccomp or require_seccomp else None
    if note:
        if require_seccomp:
            raise OSError(note)
        notes.append(note)
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        os._exit(1)
    return notes


def confine(config: dict[str, Any], context_chars: int, parent_pid: int) -> tuple[list[str], str, dict[str, Any] | None]:
    """Confine the REPL worker's process (``sandbox.worker``) as its ``load`` message ``config``
    says, in this order: the scratch tmpfs and a private IPC namespace (while it may still
    mount), the user drop, the scratch folder as working directory, Landlock and seccomp
    (:func:`harden`), the memory check for a ``context`` of ``context_chars`` characters, the
    resource limits. Returns the notes for the ``ready`` answer, where the scratch folder is
    (``tmpfs`` or ``disk``) and, when a step failed, the ``error`` frame to answer instead (the
    worker then exits)."""
    notes: list[str] = []
    scratch = "disk"
    if config.get("scratch_tmpfs") and config.get("cwd"):
        owner = config.get("drop_to") or [os.getuid(), os.getgid()]
        try:
            mount_scratch(str(config["cwd"]), int(config["scratch_tmpfs"]), int(owner[0]), int(owner[1]))
            scratch = "tmpfs"
        except OSError as exc:
            notes.append(f"the scratch folder stays on the disk ({exc.strerror or exc}); rlm watches its size")
    if config.get("private_ipc"):
        notes += private_ipc()
    step = "cannot drop privileges"
    try:
        if config.get("drop_to") is not None:
            uid, gid = config["drop_to"]
            drop_privileges(int(uid), int(gid), tuple(config.get("keep_caps") or ()))
        if config.get("cwd"):  # entered as the dropped user: rlm itself may lack the right to
            step = "cannot enter the scratch folder"
            os.chdir(config["cwd"])
        if config.get("harden", True):
            step = "cannot confine the worker"
            notes += harden(parent_pid, config.get("landlock"), bool(config.get("seccomp")),
                            bool(config.get("seccomp_filter", True)))
    except OSError as exc:
        return notes, scratch, {"type": "error", "error": f"{step}: {exc}"}
    problem = memory_problem(config.get("limits", {}), context_chars)
    if problem:
        return notes, scratch, {"type": "error", "kind": "memory_limit", "error": problem}
    notes += apply_limits(config.get("limits", {}))
    return notes, scratch, None
