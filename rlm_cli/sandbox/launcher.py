"""Start and drive the REPL worker at an isolation level: ``bwrap``, ``sandbox-exec``, ``process``
or ``none``. The worker module and protocol are the same at every level; only the command that
starts it differs.

What each level does (the README has the user-facing table; ``tests/test_security.py`` proves it):

* every level: a separate process, a scrubbed environment (no API keys; ``HOME`` and ``TMPDIR``
  point at a fresh scratch folder that is the working directory and is deleted on close), its
  own session (Ctrl-C reaches the parent only), stdout discarded, an 8 KiB stderr tail kept for
  crash reports, a per-cell timeout after which the worker is killed and restarted, and a
  validated control channel (a frame must arrive whole before the deadline, is size-limited,
  and must answer the request it was sent for).
* ``process`` (and ``bwrap``): ``setrlimit`` limits (address space, CPU seconds, processes, file
  size, open files, no core dumps), no-new-privileges and death with the parent. Run as root,
  the worker becomes ``nobody`` (Linux does not apply the process limit to root, and ``nobody``
  cannot signal the parent; its group is one of this rlm's own, :func:`private_gid`, with which
  the relay's folder is shared); if ``nobody`` cannot read the interpreter it keeps only
  ``CAP_DAC_READ_SEARCH``. On Linux the parent becomes a child subreaper, so processes the
  worker detaches (double fork) come back to it and are killed with the worker; ``setsid`` is
  refused by the seccomp filter, so all of them stay in the worker's session, by which a later
  rlm finds and kills what the worker of a SIGKILLed rlm left (``sandbox.reaper``). The scratch
  folder is a tmpfs of ``Limits.file_bytes`` in a mount namespace of the worker's own when rlm
  may mount (root with ``CAP_SYS_ADMIN``), else a host folder whose size a thread watches
  (:func:`scratch_usage`), killing the worker past its quota.
* ``bwrap``: bubblewrap namespaces: no network (``--unshare-net``), private PID/IPC/UTS/cgroup,
  an empty root filesystem with only the system folders (``/usr``, ``/etc``...), the Python
  installation and the worker package bound read-only; the scratch folder is a size-limited
  tmpfs, the LMHandler socket folder is the only host path reachable besides those, and the
  corpus reaches the worker only as the bundle files.
* ``sandbox-exec`` (macOS, untested): a profile that denies network except Unix sockets.
"""

from __future__ import annotations

import os
import platform
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm_cli import protocol
from rlm_cli.config_keys import CHOICES
from rlm_cli.errors import SandboxError, UsageError
from rlm_cli.sandbox import reaper

LEVELS = CHOICES["sandbox"]
#: Environment variables passed to the worker (everything else, keys included, is dropped).
ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
#: Seconds the worker gets to start and load the corpus.
START_TIMEOUT = 60.0
#: Characters of one block's output the parent accepts (the worker keeps 220,000).
MAX_OUTPUT_CHARS = 256_000
#: Seconds a block out of time gets, after SIGINT, to hand over what it printed before it is killed.
TIMEOUT_GRACE_S = 1.0
#: Folders bound read-only into the bwrap sandbox when they exist; everything else on the host
#: (home folders, /work, /srv, /mnt, /opt, /var, /run, /tmp...) is simply absent.
BWRAP_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
                     "/nix/store", "/gnu/store")
#: Size of the sandbox's own /dev/shm (multiprocessing needs it for its locks).
SHM_BYTES = 64 * 1024**2
#: Seconds between two looks at the size of a scratch folder on the disk (no tmpfs could be
#: mounted), and the most entries it may hold.
SCRATCH_POLL_S = 0.1
MAX_SCRATCH_ENTRIES = 100_000
#: Host paths hidden even inside the bound system folders.
BWRAP_ALWAYS_HIDDEN = ("/etc/ssh", "/etc/ssl/private")
#: Folders the ``process`` level lets the worker read and execute under Landlock (when they
#: exist), besides the Python installation and rlm's package: bwrap's system folders without /etc.
LANDLOCK_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/nix/store", "/gnu/store")
#: The only entries of /etc readable under Landlock: what the C library and Python read (the
#: dynamic linker's cache, the time zone, user, group, host and service names, MIME types, locale
#: aliases, the host name). Nothing secret: /etc/shadow, /etc/ssh and /etc/ssl/private stay out of reach.
LANDLOCK_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ld.so.preload", "localtime", "timezone", "passwd",
                "group", "hostname", "nsswitch.conf", "hosts", "host.conf", "gai.conf", "protocols", "services", "mime.types",
                "locale.alias", "os-release")
#: Device files readable and writable under Landlock (``/dev/shm`` is not: multiprocessing's locks
#: fail at the ``process`` level, while threads, fork and subprocess work).
LANDLOCK_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
_PKG_DIR = Path(__file__).resolve().parent.parent  # .../rlm_cli
_PR_SET_CHILD_SUBREAPER = 36
_bwrap_probe: tuple[bool, str] | None = None
#: pids of running workers of every Sandbox in this process (never reaped as strays).
_LIVE: set[int] = set()
_LIVE_LOCK = threading.Lock()
_subreaper: bool | None = None


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
            probe = [exe, *_bwrap_ns_flags(), "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev",
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

    from rlm_cli.sandbox.worker import seccomp_program

    machine = platform.machine()
    if seccomp_program(machine) is None:
        sc, sc_detail = False, f"no filter table for {machine}"
    elif ctypes.CDLL(None, use_errno=True).prctl(21, 0, 0, 0, 0) < 0:  # PR_GET_SECCOMP
        sc, sc_detail = False, "this kernel has no seccomp"
    else:
        sc, sc_detail = True, f"filter for {machine}"
    _confinement = Confinement(abi, ll_detail, sc, sc_detail)
    return _confinement


@dataclass(frozen=True)
class Protection:
    """One protection of a sandbox level on this machine: ``name`` (``network``, ``files``,
    ``signals``, ``abstract_unix_sockets``, ``unix_socket_paths``), whether it is ``present``
    here, and how it is enforced (or what it would need)."""

    name: str
    present: bool
    detail: str


def protections(level: str) -> list[Protection]:
    """The protections of ``level`` on this machine (kernel features probed by :func:`confinement`).

    Landlock ABI versions used at the ``process`` level: 1 files, 4 TCP, 6 signals and abstract
    Unix sockets, 9 connecting to Unix sockets by path, 10 UDP (see ``worker.apply_landlock``).
    """
    names = ("network", "files", "signals", "abstract_unix_sockets", "unix_socket_paths")
    if level == "bwrap":
        how = ("own network namespace", "own mount namespace: system folders and Python only",
               "own PID namespace", "own network namespace", "own mount namespace")
        return [Protection(n, True, h) for n, h in zip(names, how, strict=True)]
    if level == "sandbox-exec":
        return [Protection("network", True, "sandbox-exec profile (untested)"),
                *[Protection(n, False, "not confined by sandbox-exec") for n in names[1:]]]
    if level != "process" or not sys.platform.startswith("linux"):
        return [Protection(n, False, f"not confined at the {level} level") for n in names]
    c = confinement()
    abi = c.landlock_abi
    have = f"this kernel has {'ABI ' + str(abi) if abi else 'no Landlock'}"
    net = "seccomp: socket() only for AF_UNIX" if c.seccomp else f"needs seccomp ({c.seccomp_detail})"
    if c.seccomp and abi >= 4:
        net += "; Landlock: no TCP" + (" or UDP" if abi >= 10 else "") + " bind/connect"
    dropped = plan_drop(level)[0]
    as_nobody = dropped is not None and dropped.uid != 0
    signals = (Protection("signals", True, f"Landlock ABI {abi}: signals only to its own processes") if abi >= 6
               else Protection("signals", True, "runs as nobody") if as_nobody
               else Protection("signals", False, f"needs Landlock ABI 6 ({have})"))
    return [
        Protection("network", c.seccomp, net),
        Protection("files", abi >= 1, f"Landlock ABI {abi}: reads only Python, rlm and system folders, writes only "
                                      "its scratch folder" if abi >= 1 else f"needs Landlock ({c.landlock_detail})"),
        signals,
        Protection("abstract_unix_sockets", abi >= 6, f"Landlock ABI {abi}: only its own" if abi >= 6
                   else f"needs Landlock ABI 6 ({have})"),
        Protection("unix_socket_paths", abi >= 9, f"Landlock ABI {abi}: only the model relay's" if abi >= 9
                   else f"needs Landlock ABI 9 ({have})"),
    ]


#: What a missing protection leaves open, in the words of the warnings and ``rlm doctor``.
_MISSING = {
    "network": "it CAN reach the network",
    "files": "it CAN read your files",
    "signals": "it can signal rlm and your other processes",
    "abstract_unix_sockets": "it can connect to abstract Unix sockets (D-Bus, X11)",
    "unix_socket_paths": "it can connect to Unix sockets its user may open by path (an ssh-agent, D-Bus)",
}


def missing(level: str) -> list[str]:
    """What ``level`` leaves open on this machine, one phrase per missing protection."""
    return [f"{_MISSING[p.name]}: {p.detail}" for p in protections(level) if not p.present]


def _bwrap_ns_flags() -> list[str]:
    flags = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    if os.geteuid() != 0:
        flags.insert(0, "--unshare-user")
    return flags


def resolve_level(requested: str) -> tuple[str, str | None]:
    """Map ``auto`` to the strongest available level; return ``(level, warning or None)``.

    Raises:
        UsageError: an unknown level, or one that is not available here.
    """
    if requested not in LEVELS:
        raise UsageError(f"unknown sandbox {requested!r}", hint=f"use one of {', '.join(LEVELS)}")
    has_sbx = sys.platform == "darwin" and shutil.which("sandbox-exec") is not None
    if requested == "auto":
        if bwrap_available():
            return "bwrap", None
        if has_sbx:
            return "sandbox-exec", None
        gaps, summary = missing("process"), process_summary()
        how = (f"a confined process ({summary})" if summary != "resource limits only" else
               "a plain process with resource limits and no API keys in its environment")
        return "process", (f"sandbox: bubblewrap is not available, so model code runs as {how}; "
                           + ("; ".join(gaps) if gaps else "other processes stay visible")
                           + "; install bubblewrap for full isolation (apt-get install bubblewrap)")
    if requested == "bwrap" and not bwrap_available():
        raise UsageError(f"--sandbox bwrap: {bwrap_status()[1]}",
                         hint="install bubblewrap or use --sandbox process")
    if requested == "sandbox-exec" and not has_sbx:
        raise UsageError("--sandbox sandbox-exec is only available on macOS")
    if requested == "none":
        return "none", "sandbox: none; model code runs unconfined, without resource limits"
    return requested, None


@dataclass
class Limits:
    """Resource limits for the worker: bytes, seconds and counts."""

    memory_bytes: int = 4 * 1024**3
    cpu_seconds: int = 3600
    #: Largest file the worker may write, and the size of its scratch tmpfs under bwrap.
    file_bytes: int = 512 * 1024**2
    open_files: int = 256
    #: Processes (threads count) beyond those the worker's user already has.
    extra_processes: int = 128
    #: Threads ``llm_query_batched`` sends its prompts from, at most (the parent lets
    #: ``--max-concurrency`` of them be in flight; a thread more than that only waits). Those over
    #: 32 are added to the process and open-file limits (each holds a socket while it waits).
    sub_call_threads: int = 32

    def rlimits(self, uid: int) -> dict[str, int]:
        """``setrlimit`` names and values for a worker running as ``uid``."""
        more = max(0, self.sub_call_threads - 32)
        processes = self.extra_processes + more
        return {"RLIMIT_AS": self.memory_bytes, "RLIMIT_CPU": self.cpu_seconds,
                "RLIMIT_FSIZE": self.file_bytes, "RLIMIT_NOFILE": self.open_files + more,
                "RLIMIT_CORE": 0, "RLIMIT_NPROC": _count_processes(uid) + processes}


def _count_processes(uid: int) -> int:
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


@dataclass
class ExecResult:
    """What one code block produced. ``lost`` says why the REPL state was lost (timeout, crash or
    a broken control frame), in which case the worker was restarted with ``context`` reloaded."""

    output: str
    output_chars: int
    ok: bool
    final: str | None = None
    final_error: str | None = None
    elapsed_s: float = 0.0
    lost: str | None = None
    #: Helper calls the block made (``{"grep": 2, "llm_query": 8, ...}``; see ``sandbox.observe``).
    helpers: dict[str, int] = field(default_factory=dict)
    #: Corpus lines the block looked at: ``(how, path, start_line, end_line)``.
    sources: list[tuple[str, str, int, int]] = field(default_factory=list)
    #: Helpers that stopped at their default cap in the block (``["grep"]``; see ``loop.checks.DefaultCap``).
    default_caps: list[str] = field(default_factory=list)


@dataclass
class WorkerSpec:
    """What the worker loads: a saved corpus bundle, or raw context text (``rlm_query``)."""

    index_file: Path | None = None
    context_file: Path | None = None
    context_text: str | None = None
    #: The bundle's parsed structured files (``data``, ``records()``), when it has any.
    data_file: Path | None = None


@dataclass
class Drop:
    """The user the worker becomes when started as root, and the capabilities it keeps."""

    uid: int
    gid: int
    keep_caps: tuple[str, ...] = ()


#: Capability numbers (linux/capability.h) rlm needs to lend the worker another user.
_CAP_CHOWN, _CAP_DAC_READ_SEARCH, _CAP_SETGID, _CAP_SETUID, _CAP_SETPCAP, _CAP_SYS_ADMIN = 0, 2, 6, 7, 8, 21


def _effective_caps() -> int:
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


def plan_drop(level: str) -> tuple[Drop | None, str | None]:
    """The user a worker at ``level`` becomes (``None``: it keeps rlm's user) and a note to show
    once per run.

    Only a root parent drops, at the ``process`` and ``bwrap`` levels: to ``nobody``, with a group
    of its own (:func:`private_gid`: the relay's folder is shared with that group only); when
    ``nobody`` cannot read the interpreter or the package, the worker keeps CAP_DAC_READ_SEARCH.
    When rlm itself lacks what that takes (a hardened container: root without CAP_SETUID,
    CAP_SETGID or CAP_CHOWN, or without CAP_DAC_READ_SEARCH to lend), the worker stays root with
    every capability dropped (``Drop(0, 0)``); the process limit then does not apply to it.
    """
    if level not in ("process", "bwrap") or os.geteuid() != 0:
        return None, None
    try:
        uid = pwd.getpwnam("nobody").pw_uid
    except KeyError:
        uid = 65534
    gid = private_gid()
    caps = _effective_caps()
    confined = ("; Landlock still confines what it can read and write" if level == "process"
                and confinement().landlock_abi >= 1 else "")
    needed_caps = (_CAP_SETUID, _CAP_SETGID) + ((_CAP_CHOWN,) if level == "process" else ())
    if not all(caps & (1 << c) for c in needed_caps):
        return Drop(0, 0), ("rlm runs as root without the capabilities to switch users (CAP_SETUID, CAP_SETGID, "
                            "CAP_CHOWN), so the worker stays root with every capability dropped: the process limit "
                            "does not apply to it" + confined)
    needed = [*_python_roots(), str(_PKG_DIR)]
    readable = (all(_mode_allows_others(p) for p in needed) if level == "bwrap"
                else all(_world_readable(p) for p in needed))
    if readable:
        return Drop(uid, gid), None
    if not caps & (1 << _CAP_DAC_READ_SEARCH):
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


def run_notes(level: str) -> list[str]:
    """Notes about the worker's user to show once per run (not once per sub-RLM worker)."""
    note = plan_drop(level)[1]
    return [f"sandbox: {note}"] if note else []


class Sandbox:
    """One REPL worker process and its scratch folder.

    Use as a context manager; ``close()`` kills the worker with everything it started and
    deletes the scratch folder. Not thread-safe: one ``execute`` at a time. The worker dies with
    the *thread* that started (or, after a timeout or crash, restarted) it (Linux parent-death
    signal, also bwrap's ``--die-with-parent``): drive a sandbox from a thread that outlives it.
    """

    def __init__(self, level: str, spec: WorkerSpec, *, socket_path: str, token: str,
                 limits: Limits | None = None, cell_timeout: float = 120.0) -> None:
        if level not in LEVELS or level == "auto":
            raise ValueError(f"resolve the sandbox level first, got {level!r}")
        self.level = level
        self.spec = spec
        self.socket_path = socket_path
        self.token = token
        self.limits = limits or Limits()
        self.cell_timeout = cell_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.scratch: Path | None = None
        self._wfd = self._rfd = -1
        self._stderr_tail = b""
        self._drain: threading.Thread | None = None
        self._drain_stop = threading.Event()
        self._started_ticks = 0
        #: A code block is running (or was, when Ctrl-C cut ``execute`` short): close() kills at once.
        self._busy = False
        self.restarts = 0
        self.notes: list[str] = []
        #: The user the worker runs as after start (``None``: the parent's).
        self.drop: Drop | None = None
        #: Host paths the bwrap level hides besides home and the rlm folders (the corpus roots).
        self.hide_paths: tuple[str, ...] = ()
        #: Ctrl-C during ``execute``: with a grace above 0 (``rlm chat``), the block is interrupted in
        #: the worker and the worker kept when it answers within that many seconds (else restarted);
        #: with 0 (``rlm ask``) the KeyboardInterrupt simply propagates and the run ends.
        self.interrupt_grace_s = 0.0
        #: Why the REPL state was lost at the last Ctrl-C (``None``: kept, or none happened).
        self.interrupt_lost: str | None = None
        self._worker_ns_pid: int | None = None
        self._closed = False
        #: The scratch folder is on the host disk (no tmpfs), its size watched by a thread.
        self.scratch_on_disk = False
        self._watch: threading.Thread | None = None
        self._quota_hit: str | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the worker and wait until it has loaded the corpus.

        Raises:
            SandboxError: the worker failed to start or load within ``START_TIMEOUT`` seconds.
        """
        self.notes = []
        self._closed = False
        self._busy = False
        try:
            self._start()
        except BaseException:
            self.close()  # a failed start leaves no worker and no scratch folder
            raise

    def _start(self) -> None:
        self.notes += reaper.sweep()  # what a killed rlm left (once per process)
        if self.scratch is None:
            self.scratch = Path(tempfile.mkdtemp(prefix=reaper.folder_prefix(reaper.SCRATCH_PREFIX)))
        self.drop = drop = plan_drop(self.level)[0]
        if drop and drop.uid != os.geteuid() and self.level != "bwrap":  # bwrap's scratch is its own tmpfs
            os.chown(self.scratch, drop.uid, drop.gid)
        if drop and drop.uid != os.geteuid() and os.path.exists(self.socket_path):
            note = share_relay(self.socket_path, drop.gid)
            if note:
                self.notes.append(f"sandbox: {note}")
        if self.level in ("process", "none"):
            _become_subreaper()
        p_read, c_write = os.pipe()
        c_read, p_write = os.pipe()
        argv = self._command(c_read, c_write)
        env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
        # MALLOC_ARENA_MAX=1: glibc gives each new thread its own malloc arena, reserving 64 MiB of
        # address space each; under a tight RLIMIT_AS those reservations fail and every allocation
        # of the thread takes a slow path (the background search index took 108 s instead of 2 s
        # under --memory-limit 256M on the stdlib). One arena: the GIL serialises Python anyway.
        env.update(HOME=str(self.scratch), TMPDIR=str(self.scratch), PYTHONDONTWRITEBYTECODE="1",
                   PYTHONIOENCODING="utf-8", MALLOC_ARENA_MAX="1")
        try:
            with _LIVE_LOCK:
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                             stderr=subprocess.PIPE, pass_fds=(c_read, c_write),
                                             cwd="/", env=env, start_new_session=True)
                _LIVE.add(self.proc.pid)
        except OSError as exc:
            for fd in (p_read, c_write, c_read, p_write):
                os.close(fd)
            raise SandboxError(f"cannot start the REPL worker: {exc}") from None
        self._started_ticks = _start_ticks(self.proc.pid)
        if self.level in ("process", "none"):  # found and killed by the next rlm if this one is killed
            reaper.record(self.proc.pid, self._started_ticks, drop.uid if drop else os.geteuid())
        os.close(c_read)
        os.close(c_write)
        self._rfd, self._wfd = p_read, p_write
        os.set_blocking(self._wfd, False)
        self._stderr_tail = b""
        self._drain_stop = threading.Event()
        self._drain = threading.Thread(target=self._drain_stderr, args=(self.proc, self._drain_stop),
                                       name="sandbox-stderr", daemon=True)
        self._drain.start()
        inside = self._inside_paths()
        config: dict[str, Any] = {
            "type": "load", "socket": inside["socket"], "token": self.token,
            "limits": self.limits.rlimits(drop.uid if drop else os.geteuid()) if self.level != "none" else {},
            "drop_to": [drop.uid, drop.gid] if drop else None, "keep_caps": list(drop.keep_caps) if drop else [],
            "harden": self.level != "none", "cwd": None if self.level == "bwrap" else str(self.scratch),
            "seccomp": self.level in ("process", "bwrap") and confinement().seccomp,
            "landlock": self._landlock_policy(),
            "index_file": inside.get("index"), "context_file": inside.get("context"), "data_file": inside.get("data"),
            "context_text": self.spec.context_text, "sub_call_threads": self.limits.sub_call_threads,
            "scratch_tmpfs": self.limits.file_bytes if self.level == "process" and _can_mount() else None,
        }
        deadline = time.monotonic() + START_TIMEOUT
        try:
            protocol.write_message_fd(self._wfd, config, deadline)
            reply = protocol.read_message_fd(self._rfd, protocol.MAX_CONTROL_BYTES, deadline)
        except (OSError, protocol.ProtocolError) as exc:
            self._kill()
            detail = self._stderr_tail.decode("utf-8", "replace").strip().splitlines()[-3:]
            raise SandboxError(f"the REPL worker ({self.level}) failed to start: {exc}"
                               + (f": {' / '.join(detail)}" if detail else "")) from None
        if reply.get("type") != "ready":
            self._kill()
            if reply.get("kind") == "memory_limit":
                raise UsageError(str(reply.get("error")))
            raise SandboxError(f"the REPL worker ({self.level}) failed to start: {reply.get('error', reply)}")
        self.notes += [str(n) for n in reply.get("notes", [])]
        pid = reply.get("pid")
        self._worker_ns_pid = pid if isinstance(pid, int) and not isinstance(pid, bool) else None
        self.scratch_on_disk = self.level == "process" and reply.get("scratch") != "tmpfs"
        if self.scratch_on_disk:  # no tmpfs to bound it: its size is watched
            self._watch = threading.Thread(target=self._watch_scratch, args=(self.proc, self._drain_stop),
                                           name="sandbox-scratch", daemon=True)
            self._watch.start()

    def close(self) -> None:
        """Kill the worker (and every process it started) and delete the scratch folder. A block
        running in another thread then fails (``SandboxError``) instead of restarting the worker.

        An idle worker is asked to shut down first (0.5 s); one still running a block is not.
        """
        self._closed = True
        if self.proc is not None and self.proc.poll() is None and not self._busy:
            try:
                protocol.write_message_fd(self._wfd, {"type": "shutdown"}, time.monotonic() + 0.5)
                self.proc.wait(timeout=0.5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()
        if self.scratch is not None:
            _remove_tree(self.scratch)
            self.scratch = None

    def _kill(self) -> None:
        if self.proc is not None:
            pid = self.proc.pid
            for kill in (os.killpg, os.kill):  # its session first, then the worker itself
                try:
                    kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            if self.level in ("process", "none"):
                _kill_strays(pid, self._started_ticks, self.drop.uid if self.drop else None)
                # Everything it started is still in its session (setsid is refused to model code).
                reaper.kill_session(pid, self._started_ticks, self.drop.uid if self.drop else None)
                reaper.forget(pid)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            with _LIVE_LOCK:
                _LIVE.discard(pid)
            self._drain_stop.set()
            self.proc = None
        for fd in (self._rfd, self._wfd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._rfd = self._wfd = -1

    def restart(self) -> None:
        """Kill and start a fresh worker (REPL variables are lost; ``context`` is reloaded).

        Raises:
            SandboxError: the new worker failed to start, or the sandbox was closed.
        """
        if self._closed:
            raise SandboxError("the REPL worker was stopped")
        self._kill()
        if self.scratch is not None:
            _remove_tree(self.scratch)
            self.scratch = None
        self.restarts += 1
        self.start()

    # -- running code ----------------------------------------------------------------------------
    def execute(self, code: str, cell: int = 0, *, timeout: float | None = None,
                map_output: bool = True) -> ExecResult:
        """Run ``code`` in the REPL and wait at most ``timeout`` seconds (default ``cell_timeout``)
        for its whole result. ``map_output=False``: rlm's own block, whose output is no source (it
        does not wait for the worker's line index).

        A timeout, a crash or a malformed control frame kills and restarts the worker and returns
        ``lost`` set (the model is told; the run goes on).

        Raises:
            SandboxError: the worker could not be restarted.
        """
        started = time.monotonic()
        limit = self.cell_timeout if timeout is None else max(0.1, min(timeout, self.cell_timeout))
        deadline = started + limit
        req_id = secrets.token_hex(8)
        self._busy = True
        try:
            if self.proc is None:
                raise protocol.ProtocolError("no worker")
            msg: dict[str, Any] = {"type": "exec", "code": code, "cell": cell, "id": req_id}
            if not map_output:
                msg["map"] = False
            protocol.write_message_fd(self._wfd, msg, deadline)
            while True:  # frames answering another request (stale or forged by model code) are dropped
                reply = protocol.read_message_fd(self._rfd, protocol.MAX_CONTROL_BYTES, deadline)
                if reply.get("id") == req_id:
                    break
            result = _parse_result(reply)
            self._busy = False
        except KeyboardInterrupt:
            if self.interrupt_grace_s > 0:
                self._interrupt_block(req_id)
            raise
        except TimeoutError:
            lost = f"the cell timed out after {limit:g} s and was killed"
            printed = self._printed_before_kill(req_id)
            if printed is not None:
                self.restart()
                lost += printed_note(printed.output, printed.output_chars)
                return ExecResult(printed.output, printed.output_chars, False, elapsed_s=time.monotonic() - started,
                                  lost=lost, helpers=printed.helpers, sources=printed.sources)
        except (OSError, protocol.ProtocolError) as exc:
            lost = self._failure(exc)
        else:
            return result
        self.restart()
        return ExecResult("", 0, False, elapsed_s=time.monotonic() - started, lost=lost)

    def _printed_before_kill(self, req_id: str) -> ExecResult | None:
        """What block ``req_id``, out of time, printed: the worker is sent SIGINT (the block ends
        with a KeyboardInterrupt and its result frame carries its output) and given
        :data:`TIMEOUT_GRACE_S` to answer; ``None`` when it does not (a block that catches the
        interrupt, or stuck in C code). The worker is restarted by the caller either way."""
        pid = self._worker_pid()
        if pid is None or self.proc is None or self.proc.poll() is not None:
            return None
        try:
            os.kill(pid, signal.SIGINT)
            deadline = time.monotonic() + TIMEOUT_GRACE_S
            while True:
                reply = protocol.read_message_fd(self._rfd, protocol.MAX_CONTROL_BYTES, deadline)
                if reply.get("id") == req_id:
                    result = _parse_result(reply)
                    break
        except (TimeoutError, OSError, protocol.ProtocolError):
            return None
        output = result.output
        cut = output.rfind("Traceback (most recent call last):")
        if cut >= 0 and output.rstrip().endswith("KeyboardInterrupt"):  # the interrupt's own traceback
            result.output_chars -= len(output) - cut
            result.output = output[:cut]
        return result if result.output.strip() else None

    def tampered(self) -> list[str]:
        """What of the worker's own code earlier blocks changed (``worker.Integrity``): names such
        as ``rlm_cli.sandbox.worker.Worker.FINAL``; ``["(no valid answer)"]`` when the worker
        does not answer the check properly within 10 s. ``[]``: nothing (as far as it can tell).

        A changed worker would rewrite the answers of later questions: call this between the
        questions of a session and restart the worker when it returns anything.
        """
        if self.proc is None or self.proc.poll() is not None:
            return []  # a worker that is not running is started fresh anyway
        req_id = secrets.token_hex(8)
        deadline = time.monotonic() + 10.0
        try:
            protocol.write_message_fd(self._wfd, {"type": "check", "id": req_id}, deadline)
            while True:
                reply = protocol.read_message_fd(self._rfd, protocol.MAX_CONTROL_BYTES, deadline)
                if reply.get("id") == req_id:
                    break
        except (OSError, protocol.ProtocolError):
            return ["(no valid answer)"]
        changed = reply.get("changed")
        if reply.get("type") != "checked" or not isinstance(changed, list):
            return ["(no valid answer)"]
        return [str(c)[:120] for c in changed[:20]]

    def _interrupt_block(self, req_id: str) -> None:
        """Ctrl-C while block ``req_id`` runs: send the worker SIGINT (its block ends with a
        KeyboardInterrupt) and read up to that block's answer, so the control channel is in step
        again and the REPL keeps its variables. When no answer comes within
        ``interrupt_grace_s`` (or Ctrl-C is pressed again) the worker is restarted instead, and
        ``interrupt_lost`` says so."""
        self.interrupt_lost = None
        pid = self._worker_pid()
        try:
            if pid is None:
                raise ProcessLookupError
            os.kill(pid, signal.SIGINT)
            deadline = time.monotonic() + self.interrupt_grace_s
            while True:
                reply = protocol.read_message_fd(self._rfd, protocol.MAX_CONTROL_BYTES, deadline)
                if reply.get("id") == req_id:
                    self._busy = False
                    return
        except (KeyboardInterrupt, TimeoutError, OSError, protocol.ProtocolError):
            pass
        self.interrupt_lost = "the REPL worker did not stop at Ctrl-C and was restarted"
        try:
            self.restart()
        except SandboxError as exc:
            self.interrupt_lost = f"the REPL worker did not stop at Ctrl-C and could not be restarted: {exc}"

    def _worker_pid(self) -> int | None:
        """The pid of the worker's Python process as this process sees it: the started process
        itself, or under bwrap the descendant whose innermost PID-namespace pid is the one the
        worker reported (``NSpid`` in ``/proc/PID/status``)."""
        if self.proc is None:
            return None
        if self.level != "bwrap":
            return self.proc.pid
        want = self._worker_ns_pid
        if want is None:
            return None
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/status") as fh:
                    ns = next((line.split()[1:] for line in fh if line.startswith("NSpid:")), [])
            except OSError:
                continue
            if len(ns) > 1 and ns[-1] == str(want) and _descends(int(entry), self.proc.pid):
                return int(entry)
        return None

    def _watch_scratch(self, proc: subprocess.Popen[bytes], stop: threading.Event) -> None:
        """Kill the worker when its scratch folder on the disk (no tmpfs could be mounted) holds
        more than ``limits.file_bytes`` (or :data:`MAX_SCRATCH_ENTRIES` entries), counting the
        deleted files its processes still hold open; checked every :data:`SCRATCH_POLL_S` s (or
        four times as long as a look takes), so a fast disk may take a little more first."""
        scratch, quota = self.scratch, self.limits.file_bytes
        pause = SCRATCH_POLL_S
        while scratch is not None and not stop.wait(pause):
            began = time.monotonic()
            used, entries = scratch_usage(scratch, proc.pid)
            pause = max(SCRATCH_POLL_S, 4 * (time.monotonic() - began))  # a big tree is walked less often
            if used > quota or entries > MAX_SCRATCH_ENTRIES:
                self._quota_hit = (f"the scratch folder grew past its limit of {format_bytes(quota)} "
                                   f"({format_bytes(used)}, {entries:,} entries) and the worker was killed")
                for kill in (os.killpg, os.kill):
                    try:
                        kill(proc.pid, signal.SIGKILL)
                    except OSError:
                        pass
                return

    def _failure(self, exc: BaseException) -> str:
        """Why the control channel failed: the worker died (how), or it broke the protocol."""
        if self.proc is None:
            return "the REPL worker was not running"
        if self._quota_hit:
            hit, self._quota_hit = self._quota_hit, None
            return hit
        try:
            code = self.proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            return f"the REPL worker broke the control protocol ({exc}) and was killed"
        if self._drain is not None:
            self._drain.join(timeout=1.0)
        tail = self._stderr_tail.decode("utf-8", "replace").strip().splitlines()
        # bwrap reports the child's status as its own exit code (128 + signal for signals).
        if code < 0 or code > 128:
            sig = -code if code < 0 else code - 128
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = f"signal {sig}"
            reason = f"killed by {name}"
        else:
            reason = f"exit status {code}"
        return f"the REPL worker crashed ({reason}" + (f"; last stderr: {tail[-1][:200]}" if tail else "") + ")"

    def _drain_stderr(self, proc: subprocess.Popen[bytes], stop: threading.Event) -> None:
        """Keep the last 8 KiB of the worker's stderr; ends at EOF or when ``stop`` is set."""
        assert proc.stderr is not None
        fd = proc.stderr.fileno()
        try:
            import select

            while not stop.is_set():
                ready, _, _ = select.select([fd], [], [], 0.25)
                if not ready:
                    continue
                data = os.read(fd, 65536)
                if not data:
                    break
                self._stderr_tail = (self._stderr_tail + data)[-8192:]
        except (OSError, ValueError):
            pass
        finally:
            proc.stderr.close()

    # -- commands per level ----------------------------------------------------------------------
    def _inside_paths(self) -> dict[str, str]:
        paths = {"socket": self.socket_path}
        if self.spec.index_file and self.spec.context_file:
            paths["index"] = str(self.spec.index_file)
            paths["context"] = str(self.spec.context_file)
            if self.spec.data_file:
                paths["data"] = str(self.spec.data_file)
        if self.level == "bwrap":
            paths["socket"] = "/tmp/rlm/sock/" + os.path.basename(self.socket_path)
            if "index" in paths:
                paths["index"] = "/tmp/rlm/corpus/index.json"
                paths["context"] = "/tmp/rlm/corpus/context.txt"
                if "data" in paths:
                    paths["data"] = "/tmp/rlm/corpus/data.bin"
        return paths

    def _landlock_policy(self) -> dict[str, Any] | None:
        """The Landlock policy for ``worker.apply_landlock`` (``None``: none is applied). At the
        ``process`` level: read-only the system folders, Python and rlm (:func:`landlock_read_paths`)
        and the worker's own ``/proc`` entry; read-write only the scratch folder and a few device
        files; Unix sockets (ABI 9+) only in the relay's folder. Under bwrap (its mounts already
        confine the files): only the network rules and scopes, as defence in depth."""
        abi = confinement().landlock_abi
        if self.level == "process" and abi >= 1:
            return {"files": True, "read": [*landlock_read_paths(self.hide_paths), "/proc/self"],
                    "write": [str(self.scratch)], "devices": [d for d in LANDLOCK_DEVICES if os.path.exists(d)],
                    "unix": [os.path.dirname(self.socket_path)]}
        if self.level == "bwrap" and abi >= 4:
            return {"files": False}
        return None

    def _python_argv(self, pkg_parent: str, rfd: int, wfd: int) -> list[str]:
        boot = (f"import sys; sys.path.insert(0, {pkg_parent!r}); "
                "from rlm_cli.sandbox.worker import main; main()")
        return [sys.executable, "-I", "-c", boot, str(rfd), str(wfd)]

    def _command(self, rfd: int, wfd: int) -> list[str]:
        if self.level in ("process", "none"):
            return self._python_argv(str(_PKG_DIR.parent), rfd, wfd)
        if self.level == "sandbox-exec":
            profile = ("(version 1)(allow default)(deny network*)"
                       "(allow network* (remote unix-socket))")
            return ["sandbox-exec", "-p", profile, *self._python_argv(str(_PKG_DIR.parent), rfd, wfd)]
        return self._bwrap_command(rfd, wfd)

    def _bwrap_command(self, rfd: int, wfd: int) -> list[str]:
        """The bwrap argv: an empty root with only system folders, Python and the package."""
        assert self.scratch is not None
        from rlm_cli.config import cache_dir, config_dir, data_dir
        from rlm_cli.models.shared import runtime_path

        args = ["bwrap", *_bwrap_ns_flags(), "--die-with-parent", "--new-session"]
        bound: list[str] = []
        for d in BWRAP_SYSTEM_DIRS:
            if os.path.islink(d):
                args += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                args += ["--ro-bind", d, d]
                bound.append(os.path.realpath(d))
        args += ["--dev", "/dev", "--perms", "1777", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
                 "--proc", "/proc", "--tmpfs", "/tmp"]
        roots = _python_roots()
        # Hide what lies inside the bound folders but must stay private: the corpus roots, the rlm
        # folders, home (when any of them is under /usr, /etc...). Python itself is never hidden.
        hidden = {str(Path.home()), str(config_dir()), str(cache_dir()), str(data_dir()), str(runtime_path()),
                  *BWRAP_ALWAYS_HIDDEN, *self.hide_paths}
        for path in sorted({os.path.realpath(p) for p in hidden if os.path.exists(p)}, key=len):
            if (any(_under(path, b) for b in bound) and path not in bound
                    and not any(_under(r, path) or _under(path, r) for r in roots)):
                args += ["--tmpfs", path] if os.path.isdir(path) else ["--ro-bind", "/dev/null", path]
        made: set[str] = set()
        for keep in [*roots, *_outside_libs(bound + roots)]:
            if any(_under(keep, b) for b in bound):
                continue
            for anc in reversed(Path(keep).parents):  # folders bwrap makes must be traversable by nobody
                a = str(anc)
                if a != "/" and a not in made and not any(_under(a, b) for b in bound):
                    args += ["--perms", "0755", "--dir", a]
                    made.add(a)
            args += ["--ro-bind", keep, keep]
            bound.append(keep)
        for inner in ("/tmp/rlm", "/tmp/rlm/pkg", "/tmp/rlm/sock", "/tmp/rlm/corpus"):
            args += ["--perms", "0755", "--dir", inner]
        args += ["--ro-bind", str(_PKG_DIR), "/tmp/rlm/pkg/rlm_cli",
                 "--perms", "0777", "--size", str(self.limits.file_bytes), "--tmpfs", str(self.scratch),
                 "--ro-bind", os.path.dirname(self.socket_path), "/tmp/rlm/sock",
                 "--chdir", str(self.scratch)]
        if self.spec.index_file and self.spec.context_file:
            args += ["--ro-bind", str(self.spec.index_file), "/tmp/rlm/corpus/index.json",
                     "--ro-bind", str(self.spec.context_file), "/tmp/rlm/corpus/context.txt"]
            if self.spec.data_file:
                args += ["--ro-bind", str(self.spec.data_file), "/tmp/rlm/corpus/data.bin"]
        if os.geteuid() == 0 and self.drop and self.drop.uid != 0:
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
            if _effective_caps() & (1 << _CAP_SETPCAP):
                args += ["--cap-add", "CAP_SETPCAP"]
            if self.drop.keep_caps:
                args += ["--cap-add", "CAP_DAC_READ_SEARCH"]
        return [*args, *self._python_argv("/tmp/rlm/pkg", rfd, wfd)]


#: Characters of a timed-out block's output kept in the note about its timeout (head and tail).
PRINTED_NOTE_CHARS = 4_000


def printed_note(output: str, chars: int) -> str:
    """The end of a timeout's ``lost`` text: what the block printed before it was killed, at
    most :data:`PRINTED_NOTE_CHARS` characters of it (its head and tail)."""
    text = output.rstrip("\n")
    if len(text) > PRINTED_NOTE_CHARS:
        half = PRINTED_NOTE_CHARS // 2
        text = f"{text[:half]}\n[... {len(text) - 2 * half:,} characters omitted ...]\n{text[-half:]}"
    return f". Before that it printed ({max(chars, len(output)):,} characters):\n{text}\n[end of what it printed]"


def _parse_result(msg: dict[str, Any]) -> ExecResult:
    """Check a ``result`` frame field by field (model code can forge frames).

    Raises:
        ProtocolError: a field is missing or has the wrong type.
    """
    def opt_str(key: str) -> str | None:
        value = msg.get(key)
        if value is not None and not isinstance(value, str):
            raise protocol.ProtocolError(f"result field {key!r} is not a string")
        return value

    output, chars, ok, elapsed = msg.get("output"), msg.get("output_chars"), msg.get("ok"), msg.get("elapsed_s", 0.0)
    if (msg.get("type") != "result" or not isinstance(output, str) or not isinstance(ok, bool)
            or not isinstance(chars, int) or isinstance(chars, bool) or chars < 0
            or not isinstance(elapsed, (int, float)) or isinstance(elapsed, bool)):
        raise protocol.ProtocolError("malformed result frame")
    chars = max(chars, len(output))
    if len(output) > MAX_OUTPUT_CHARS:
        output = output[:MAX_OUTPUT_CHARS]
    return ExecResult(output=output, output_chars=chars, ok=ok, final=opt_str("final"),
                      final_error=opt_str("final_error"), elapsed_s=float(elapsed),
                      helpers=_helper_counts(msg.get("helpers")), sources=_source_rows(msg.get("sources")),
                      default_caps=_cap_names(msg.get("default_caps")))


#: The helpers whose default cap a result may report (anything else from the worker is dropped).
CAPPED_HELPERS = frozenset({"grep"})


def _cap_names(value: Any) -> list[str]:
    """The ``default_caps`` of a result frame: known helper names only (model code controls the
    worker, so nothing it sends is trusted as is)."""
    if not isinstance(value, list):
        return []
    return [v for v in dict.fromkeys(value) if isinstance(v, str) and v in CAPPED_HELPERS]


#: How a block may have looked at a source (``sandbox.observe``); other rows are dropped.
SOURCE_KINDS = frozenset({"read_file", "grep", "leads", "printed", "sub_call", "rlm_query"})


def _helper_counts(value: Any) -> dict[str, int]:
    """The ``helpers`` field of a result frame, keeping only ``{str: non-negative int}`` entries."""
    if not isinstance(value, dict):
        return {}
    return {str(k)[:40]: v for k, v in list(value.items())[:64]
            if isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0}


def _source_rows(value: Any) -> list[tuple[str, str, int, int]]:
    """The ``sources`` field of a result frame: well-formed ``[how, path, a, b]`` rows only."""
    rows: list[tuple[str, str, int, int]] = []
    if not isinstance(value, list):
        return rows
    for row in value[:5000]:
        if (isinstance(row, list) and len(row) == 4 and row[0] in SOURCE_KINDS and isinstance(row[1], str)
                and all(isinstance(x, int) and not isinstance(x, bool) for x in row[2:]) and 1 <= row[2] <= row[3]):
            rows.append((row[0], row[1], row[2], row[3]))
    return rows


# -- processes -------------------------------------------------------------------------------------

def _descends(pid: int, ancestor: int) -> bool:
    """Whether process ``pid`` is ``ancestor`` or below it (parent pids from ``/proc/PID/stat``)."""
    for _ in range(64):
        if pid == ancestor:
            return True
        stat = _stat(pid)
        if stat is None or stat[0] <= 1:
            return False
        pid = stat[0]
    return False


def _can_mount() -> bool:
    """Whether this process may mount a tmpfs for a worker's scratch folder (Linux, root with
    ``CAP_SYS_ADMIN``); the worker tries, and says when it could not."""
    return sys.platform.startswith("linux") and os.geteuid() == 0 and bool(_effective_caps() & (1 << _CAP_SYS_ADMIN))


def format_bytes(n: int) -> str:
    """``n`` bytes as ``512 MiB``, ``3.2 GiB``..."""
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:,.3g} {unit}"
    return f"{n:,} bytes"


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


def _become_subreaper() -> bool:
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


def _stat(pid: int | str) -> tuple[int, int] | None:
    """``(ppid, start time in clock ticks)`` of a process, or ``None`` if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _start_ticks(pid: int) -> int:
    st = _stat(pid)
    return st[1] if st else 0


def _kill_strays(worker: int, since: int, uid: int | None) -> None:
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
            st = _stat(name)
            if st is None:
                continue
            pid = int(name)
            table[pid] = st[0]
            if st[0] == me and pid not in _LIVE and st[1] >= since:
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


# -- paths -----------------------------------------------------------------------------------------

def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _python_roots() -> list[str]:
    """Folders the worker's interpreter needs: its prefixes and the real executable's folder."""
    return sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix,
                                                  os.path.dirname(os.path.realpath(sys.executable)))})


def landlock_read_paths(hide: tuple[str, ...] | list[str] = ()) -> list[str]:
    """Paths the ``process`` level's worker may read and execute under Landlock: the system
    folders (:data:`LANDLOCK_SYSTEM_DIRS`), a few files of /etc (:data:`LANDLOCK_ETC`), the
    Python installation (its prefixes, the ``sys.path`` folders a ``python -I`` worker also has,
    shared libraries mapped from elsewhere) and rlm's package. ``sys.path[0]`` (the script's or
    working folder, absent from the worker's path) is left out, and so is any entry that is or
    holds the working folder, the temporary folder, home, rlm's config, cache or data folder or
    a corpus root (``hide``)."""
    from rlm_cli.config import cache_dir, config_dir, data_dir
    from rlm_cli.models.shared import runtime_path

    private = [os.path.realpath(p) for p in (str(Path.home()), str(config_dir()), str(cache_dir()),
                                             str(data_dir()), str(runtime_path()), os.getcwd(),
                                             tempfile.gettempdir(), *hide)]
    paths = [d for d in LANDLOCK_SYSTEM_DIRS if os.path.isdir(d)]
    paths += [f"/etc/{n}" for n in LANDLOCK_ETC if os.path.exists(f"/etc/{n}")]
    roots = [*_python_roots(), str(_PKG_DIR)]
    for entry in sys.path[1:]:
        real = os.path.realpath(entry) if entry else ""
        if (real and os.path.exists(real) and real != "/" and not any(_under(real, r) for r in roots)
                and not any(_under(p, real) for p in private)):
            roots.append(real)
    return paths + roots + _outside_libs([os.path.realpath(p) for p in paths] + roots)


def _outside_libs(roots: list[str]) -> list[str]:
    """Shared libraries this interpreter has mapped that lie outside ``roots`` (bound one by one,
    so an interpreter linked against libraries elsewhere still starts in the sandbox)."""
    found: set[str] = set()
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                parts = line.split(None, 5)
                path = parts[5].strip() if len(parts) == 6 else ""
                if path.startswith("/") and ".so" in os.path.basename(path) and os.path.isfile(path):
                    real = os.path.realpath(path)
                    if not any(_under(real, r) for r in roots):
                        found.add(real)
    except OSError:
        pass
    return sorted(found)


def _world_readable(path: str) -> bool:
    """True if every folder from ``/`` down to ``path`` lets other users in (mode o+x)."""
    p = Path(path)
    for part in [*reversed(p.parents), p]:
        try:
            if not os.stat(part).st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


def _mode_allows_others(path: str) -> bool:
    """True if ``path`` itself lets other users in (under bwrap its parents are recreated 0755)."""
    try:
        return bool(os.stat(path).st_mode & 0o005 == 0o005)
    except OSError:
        return False


def _remove_tree(path: Path) -> None:
    """Delete ``path`` and everything in it. When a worker that ran as another user left entries
    that rlm, root without CAP_DAC_OVERRIDE (a hardened container), can neither list nor delete,
    take them back first (CAP_CHOWN, which rlm had to lend them) and delete again."""
    shutil.rmtree(path, ignore_errors=True)
    if not os.path.lexists(path) or os.geteuid() != 0:
        return
    uid, gid = os.geteuid(), os.getegid()

    def reclaim(p: str) -> None:
        try:
            os.chown(p, uid, gid, follow_symlinks=False)
            os.chmod(p, 0o700)
        except OSError:
            pass

    reclaim(str(path))
    for top, dirs, _files in os.walk(path):
        for d in dirs:
            if not os.path.islink(os.path.join(top, d)):
                reclaim(os.path.join(top, d))
    shutil.rmtree(path, ignore_errors=True)


LEVEL_PROTECTS = {
    "bwrap": ("no API keys in its environment; no network (only the model relay's Unix socket); an empty "
              "filesystem except the system folders and Python, read-only (home, /work, /srv, /mnt, /opt, "
              "/var, /run, rlm's folders and the corpus folders are absent); the parent and other processes "
              "invisible; memory, CPU, process, file-size and open-file limits; a size-limited scratch tmpfs; "
              "per-cell timeout; every process it starts dies with it"),
    "sandbox-exec": ("no API keys in its environment; no network except Unix sockets; resource limits; "
                     "per-cell timeout (untested: no macOS in CI)"),
    "none": "no API keys in its environment; per-cell timeout",
}
LEVEL_EXPOSES = {
    "bwrap": "kernel exploits through the syscalls left open; world-readable system files (/usr, /etc); CPU "
             "time up to the cell timeout; total memory (the limits are per process: each of its processes may use "
             "--memory-limit)",
    "sandbox-exec": "your files stay readable (and writable where you can write); processes it detaches may survive",
    "none": "everything: network, files, memory, processes",
}


def process_summary() -> str:
    """The kernel features confining the ``process`` level here, e.g. ``Landlock ABI 7 and seccomp``."""
    c = confinement()
    parts = ([f"Landlock ABI {c.landlock_abi}"] if c.landlock_abi else []) + (["seccomp"] if c.seccomp else [])
    return " and ".join(parts) or "resource limits only"


def level_protects(level: str) -> str:
    """What ``level`` protects on this machine, in one sentence (``rlm doctor``, ``-v``)."""
    if level != "process":
        return LEVEL_PROTECTS.get(level, "unknown level")
    present = {p.name: p for p in protections(level) if p.present}
    parts = ["no API keys in its environment"]
    if "network" in present:
        parts.append(f"no network ({present['network'].detail})")
    if "files" in present:
        parts.append(f"files: {present['files'].detail} (home, /root, /tmp, rlm's folders and the corpus folders are "
                     "out of reach; the corpus arrives as data)")
    scoped = [n.replace("_", " ") for n in ("signals", "abstract_unix_sockets", "unix_socket_paths") if n in present]
    if scoped:
        parts.append(f"{', '.join(scoped)}: only its own or the relay's")
    parts.append("memory, CPU, process, file-size and open-file limits; a scratch quota; per-cell timeout; processes "
                 "it detaches are killed with it (or by the next rlm, if rlm itself is killed)")
    drop = plan_drop(level)[0]
    if drop is not None:
        parts.append("as root it runs as nobody (the process limit applies)" if drop.uid != 0 else
                     "as root it keeps uid 0 with every capability dropped (the process limit does not apply)")
    return "; ".join(parts)


def level_exposes(level: str) -> str:
    """What ``level`` does not protect on this machine, in one sentence (``rlm doctor``, ``-v``)."""
    if level != "process":
        return LEVEL_EXPOSES.get(level, "?")
    gaps = missing(level)
    if os.geteuid() != 0 and any(p.name == "files" and not p.present for p in protections(level)):
        gaps.append("other processes' environments, where your exported keys live")
    return "; ".join([*gaps, "world-readable system files (/usr) and the Python installation; the ids of other "
                      "processes; kernel exploits through the syscalls left open; CPU time up to the cell timeout; "
                      "total memory (the limits are per process)"])


def describe(level: str) -> str:
    """One line saying what ``level`` protects, for ``rlm doctor`` and ``-v``."""
    return f"{level} ({platform.system()}): " + level_protects(level)
