"""The REPL worker and its launcher: levels, cells, state, timeouts, crashes, the control channel,
output capping and cleanup. (Attacks with a secret in the environment: ``test_security.py``.)"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlm_cli.errors import UsageError
from rlm_cli.sandbox import levels, probes, results, users
from rlm_cli.sandbox.execution import KEEP_HEAD, KEEP_TAIL, CappedWriter
from rlm_cli.sandbox.launcher import Limits
from rlm_cli.sandbox.levels import resolve_level
from tests.support.cli import model_flags, rlm_argv, run_rlm
from tests.support.fake_llm import FakeLLM, last_user, repl
from tests.support.sandbox_kit import BWRAP_OK, IS_ROOT, LINUX, all_levels, need_bwrap, procs_named, sandbox, set_comm

# -- level resolution --------------------------------------------------------------------------


def test_auto_picks_the_strongest_level_and_warns_only_on_fallback() -> None:
    level, warning = resolve_level("auto")
    if BWRAP_OK:
        assert (level, warning) == ("bwrap", None)
    else:
        assert level in ("process", "sandbox-exec")
        if level == "process":
            assert warning is not None and "bubblewrap is not available" in warning


def _missing_words(warning: str) -> dict[str, bool]:
    return {name: phrase in warning for name, phrase in levels.MISSING.items()}


@pytest.mark.skipif(not LINUX, reason="the process level's confinement is Linux-only")
def test_the_fallback_warning_names_only_what_this_kernel_leaves_open(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without bubblewrap, `auto` falls back to the confined process level; its warning names each
    missing protection and nothing that is present (with Landlock and seccomp: no "CAN reach the
    network", no "CAN read your files")."""
    monkeypatch.setattr(probes, "_bwrap_probe", (False, "hidden for this test"))
    level, warning = resolve_level("auto")
    assert level == "process" and warning is not None
    present = {p.name: p.present for p in levels.protections("process")}
    assert _missing_words(warning) == {name: not ok for name, ok in present.items()}, warning
    assert f"a confined process ({levels.process_summary()})" in warning


@pytest.mark.skipif(not LINUX, reason="the process level's confinement is Linux-only")
def test_a_kernel_without_landlock_or_seccomp_runs_as_before_with_the_warning(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where the kernel lacks both, the worker still starts (no Landlock asked for, the filter not
    required) and the warning says it CAN reach the network and read your files."""
    monkeypatch.setattr(probes, "_bwrap_probe", (False, "hidden for this test"))
    monkeypatch.setattr(probes, "_confinement", probes.Confinement(0, "not in this kernel", False, "no seccomp"))
    level, warning = resolve_level("auto")
    assert level == "process" and warning is not None
    words = _missing_words(warning)
    assert words.pop("signals") == (users.plan_drop("process")[0] is None)  # as root: runs as nobody
    assert all(words.values()) and "a plain process with resource limits" in warning, warning
    assert "CAN read your files" in levels.level_exposes("process")
    (tmp_path / "readable.txt").write_text("plain file")
    (tmp_path / "readable.txt").chmod(0o644)
    tmp_path.chmod(0o755)
    with sandbox("process") as sb:  # (this kernel still loads the seccomp filter: it cannot be faked away)
        r = sb.execute(f"print(open({str(tmp_path / 'readable.txt')!r}).read())")
        assert r.output == "plain file\n", r.output


def test_unknown_or_unavailable_levels_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="unknown sandbox 'jail'"):
        resolve_level("jail")
    if sys.platform != "darwin":
        with pytest.raises(UsageError, match="only available on macOS"):
            resolve_level("sandbox-exec")
    level, warning = resolve_level("none")
    assert level == "none" and warning is not None and "unconfined" in warning
    assert resolve_level("process") == ("process", None)


def test_describe_says_what_each_level_protects() -> None:
    assert "no network" in levels.describe("bwrap")
    assert "untested" in levels.describe("sandbox-exec")
    present = {p.name for p in levels.protections("process") if p.present}
    assert ("no network" in levels.describe("process")) == ("network" in present)
    assert ("CAN reach the network" in levels.level_exposes("process")) == ("network" not in present)
    assert ("CAN read your files" in levels.level_exposes("process")) == ("files" not in present)
    assert all(p.present for p in levels.protections("bwrap"))
    assert not any(p.present for p in levels.protections("none"))


# -- cells -------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", [*all_levels(), "none"])
def test_cells_share_state_and_show_the_last_expression(level: str) -> None:
    with sandbox(level, context="abc\ndef\n") as sb:
        assert sb.execute("x = 41\nprint('set')").output == "set\n"
        r = sb.execute("x + 1")
        assert (r.output, r.ok, r.final) == ("42\n", True, None)
        assert sb.execute("len(context), context.splitlines()").output == "(8, ['abc', 'def'])\n"
        r = sb.execute("1/0")
        assert not r.ok and "ZeroDivisionError" in r.output and r.lost is None
        assert "File \"<cell" in r.output and "worker.py" not in r.output  # only the block's own frames
        r = sb.execute("answer = {'n': x}\nFINAL_VAR('answer')")
        assert r.final == '{\n  "n": 41\n}'
        r = sb.execute("FINAL_VAR('missing')")
        assert r.final is None and r.final_error is not None and "no variable named 'missing'" in r.final_error
        r = sb.execute("import sys\nsys.exit(3)")
        assert not r.ok and "exit() is disabled" in r.output and r.lost is None


def test_a_function_from_an_earlier_block_of_the_same_number_keeps_its_own_source_lines() -> None:
    with sandbox("none") as sb:
        sb.execute("def f():\n    return 1/0", cell=1)
        r = sb.execute("x = 2\nf()", cell=1)  # a later question of a session starts at cell 1 again
        assert "    return 1/0" in r.output and "    f()" in r.output


def test_every_top_level_expression_shows_its_value_like_the_interactive_console() -> None:
    with sandbox("none", context="abc\ndef\n") as sb:
        r = sb.execute("'a comment'\nlen(context)\n[].append(1)\ny = 2\ny * 10\ncontext.upper()[:3]")
        assert r.output == "8\n20\nABC\n"  # None and bare strings show nothing; the rest in order
        assert sb.execute("SHOW_VARS()\nz = 1").output == "y: int\n"  # printed once, not echoed again
        r = sb.execute("FINAL('done')\nlen(context)")
        assert r.final == "done" and r.output == ""


@pytest.mark.parametrize("level", all_levels())
def test_threads_subprocesses_and_multiprocessing_work(level: str) -> None:
    """Threads, fork and subprocess work everywhere; multiprocessing's locks need /dev/shm, which
    Landlock keeps out of reach at the process level (bwrap gives a private one)."""
    landlocked = level == "process" and any(p.name == "files" and p.present for p in levels.protections(level))
    with sandbox(level) as sb:
        r = sb.execute("import multiprocessing as mp, os, subprocess\nfrom concurrent.futures import ThreadPoolExecutor\n"
                       "try:\n    with mp.Pool(2) as pool:\n        print(pool.map(abs, [-1, -2]))\n"
                       "except OSError as e:\n    print('pool', type(e).__name__)\n"
                       "print(list(ThreadPoolExecutor(8).map(lambda x: x * 2, range(4))))\n"
                       "pid = os.fork()\nif pid == 0:\n    os._exit(7)\nprint('fork', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
                       "print(subprocess.run(['sh', '-c', 'echo $HOME'], capture_output=True, text=True).stdout.strip()"
                       " == str(__import__('os').getcwd()))")
        pool = "pool PermissionError\n" if landlocked else "[1, 2]\n"
        assert r.output == pool + "[0, 2, 4, 6]\nfork 7\nTrue\n", r.output


def test_rebound_helpers_and_builtins_are_restored_for_the_next_cell() -> None:
    with sandbox("process") as sb:
        r = sb.execute("import builtins\nFINAL = None\nllm_query = 'gone'\ndel context\n"
                       "builtins.print = None\nbuiltins.len = lambda x: -1\n__builtins__ = {}")
        assert r.ok and r.lost is None
        r = sb.execute("print(len(context), callable(llm_query))\nFINAL('done')")
        assert (r.output, r.final, r.lost) == ("13 True\n", "done", None)


def test_a_failing_exception_str_does_not_take_the_worker_down() -> None:
    with sandbox("process") as sb:
        r = sb.execute("class E(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\nraise E()")
        assert not r.ok and r.lost is None and "E" in r.output
        assert sb.execute("print('still here')").output == "still here\n"


def test_final_answer_over_the_control_frame_limit_is_refused_with_a_reason() -> None:
    with sandbox("process", limits=Limits(memory_bytes=2 * 1024**3)) as sb:
        r = sb.execute("FINAL('x' * (70 * 1024 * 1024))")
        assert r.final is None and r.lost is None
        assert r.final_error is not None and "limited to 64 MiB" in r.final_error
        assert sb.execute("FINAL('short')").final == "short"


def test_seccomp_program_is_well_formed_and_only_for_known_architectures() -> None:
    from rlm_cli.sandbox.hardening import seccomp_program

    assert seccomp_program("riscv64") is None
    for machine in ("x86_64", "aarch64"):
        prog = seccomp_program(machine)
        assert prog is not None
        for i, (code, jt, jf, _) in enumerate(prog):
            if code & 0x07 == 0x05:  # a jump: both targets inside the program
                assert i + 1 + jt < len(prog) and i + 1 + jf < len(prog)
        assert prog[-1] == (0x06, 0, 0, 0x00050000 | 38) and prog[-2] == (0x06, 0, 0, 0x00050000 | 1)


# -- output cap --------------------------------------------------------------------------------


def test_capped_writer_keeps_head_and_tail_and_counts_everything() -> None:
    w = CappedWriter()
    for i in range(100_000):
        w.write(f"line {i:06d}\n")
    text, total = w.getvalue()
    assert total == 100_000 * 12
    assert text.startswith("line 000000\n") and text.endswith("line 099999\n")
    assert f"[... {total - KEEP_HEAD - KEEP_TAIL:,} characters omitted ...]" in text
    assert len(text) < KEEP_HEAD + KEEP_TAIL + 100
    small = CappedWriter()
    small.write("a" * 10)
    small.write("b" * 5)
    assert small.getvalue() == ("a" * 10 + "b" * 5, 15)
    one = CappedWriter()
    one.write("h" * KEEP_HEAD + "m" * 1000 + "t" * KEEP_TAIL)
    kept, n = one.getvalue()
    assert n == KEEP_HEAD + 1000 + KEEP_TAIL and "1,000 characters omitted" in kept and kept.endswith("t" * KEEP_TAIL)
    with pytest.raises(TypeError):
        one.write(b"bytes")  # type: ignore[arg-type]


def test_stderr_flood_through_the_raw_descriptor_keeps_the_parent_tail_small() -> None:
    with sandbox("process") as sb:
        r = sb.execute("import os\nfor _ in range(40):\n    os.write(2, b'e' * 1_000_000)\n"
                       "os.write(1, b'o' * 10_000_000)\nprint('done')")
        assert r.output == "done\n"
        time.sleep(0.3)
        assert len(sb.stderr_tail) <= 8192


# -- timeouts, crashes, the control channel ----------------------------------------------------


@pytest.mark.parametrize("level", all_levels())
def test_timeout_kills_the_cell_and_the_next_one_has_context_but_no_variables(level: str) -> None:
    with sandbox(level, cell_timeout=2) as sb:
        sb.execute("kept = 1")
        started = time.monotonic()
        r = sb.execute("while True:\n    pass")
        assert r.lost == "the cell timed out after 2 s and was killed"  # an endless loop: no upper bound needed
        assert time.monotonic() - started > 1.9
        assert sb.restarts == 1
        r = sb.execute("print(context, 'kept' in globals())")
        assert r.output == "hello sandbox False\n" and r.lost is None


@pytest.mark.parametrize("level", all_levels())
@pytest.mark.parametrize("code, reason", [("import ctypes\nctypes.string_at(0)", "killed by SIGSEGV"),
                                          ("import os\nos._exit(7)", "exit status 7"),
                                          ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "SIGKILL")])
def test_a_crash_is_reported_as_lost_and_the_worker_restarts(level: str, code: str, reason: str) -> None:
    with sandbox(level) as sb:
        r = sb.execute(code)
        assert r.lost is not None and r.lost.startswith("the REPL worker crashed") and reason in r.lost
        assert sb.execute("print(context)").output == "hello sandbox\n"


_FIND_CONTROL = ("import sys, os, json, struct\nf = sys._getframe()\nwhile 'msg' not in f.f_locals:\n"
                 "    f = f.f_back\nrid, wfd = f.f_locals['msg']['id'], int(f.f_locals['wfd'])\n"
                 "def send(obj):\n    body = json.dumps(obj).encode()\n"
                 "    os.write(wfd, struct.pack('>I', len(body)) + body)\n")


def test_forged_result_frames_are_dropped_or_treated_as_a_broken_worker() -> None:
    with sandbox("process", cell_timeout=3) as sb:
        # A well-formed frame for another request is dropped; the real result still arrives.
        r = sb.execute(_FIND_CONTROL + "send({'type': 'result', 'ok': True, 'output': 'FORGED', "
                                       "'output_chars': 6, 'id': 'other'})\nprint('real')")
        assert r.output == "real\n"
        # A frame for this request with a wrong type kills the worker; the model is told.
        r = sb.execute(_FIND_CONTROL + "send({'type': 'result', 'ok': True, 'output': 'x', "
                                       "'output_chars': 'NaN', 'id': rid})\nimport time\ntime.sleep(5)")
        assert r.lost is not None and "broke the control protocol (malformed result frame)" in r.lost
        # A header announcing 2 GiB is refused before anything is allocated.
        r = sb.execute(_FIND_CONTROL + "os.write(wfd, struct.pack('>I', 2**31))\nimport time\ntime.sleep(5)")
        assert r.lost is not None and "exceeds the 67108864-byte limit" in r.lost
        # Half a frame, then silence: the cell deadline still applies to the whole frame (the block
        # would sleep an hour: that execute returns at all is the check, the cell's 3 s the reason)
        r = sb.execute(_FIND_CONTROL + "os.write(wfd, struct.pack('>I', 100) + b'{')\nimport time\ntime.sleep(3600)")
        assert r.lost is not None and r.lost.startswith("the cell timed out after 3 s"), r.lost
        assert sb.execute("print('alive')").output == "alive\n"


def test_oversized_output_in_a_forged_frame_is_clipped_by_the_parent() -> None:
    with sandbox("process") as sb:
        r = sb.execute(_FIND_CONTROL + "send({'type': 'result', 'ok': True, 'output': 'z' * 5_000_000, "
                                       "'output_chars': 1, 'id': rid, 'final': None})\nos._exit(0)")
        assert len(r.output) == results.MAX_OUTPUT_CHARS and r.output_chars == 5_000_000


@pytest.mark.parametrize("level", all_levels())
def test_the_worker_holds_no_descriptor_of_the_parent_besides_its_pipes(level: str) -> None:
    with sandbox(level) as sb:
        r = sb.execute("import os\nfds = sorted(int(f) for f in os.listdir('/proc/self/fd'))\n"
                       "print(sorted({os.readlink(f'/proc/self/fd/{f}').split('[')[0] for f in fds "
                       "if os.path.exists(f'/proc/self/fd/{f}')}), len(fds))")
        kinds, _, count = r.output.strip().rpartition(" ")
        assert kinds == "['/dev/null', 'pipe:']"  # stdin/stdout to /dev/null, control + stderr pipes
        assert int(count) <= 7


# -- scratch folder, cleanup -------------------------------------------------------------------


@pytest.mark.parametrize("level", all_levels())
def test_scratch_is_home_and_cwd_and_is_deleted_on_close(level: str) -> None:
    with sandbox(level) as sb:
        scratch = sb.scratch
        assert scratch is not None and scratch.is_dir()
        r = sb.execute("import os\nopen('note.txt', 'w').write('hi')\n"
                       "print(os.getcwd() == os.environ['HOME'] == os.environ['TMPDIR'], sorted(os.listdir('.')))")
        assert r.output == "True ['note.txt']\n"
        assert os.path.basename(str(scratch)).startswith("rlm-scratch-")
    assert not scratch.exists()


def test_bwrap_scratch_is_a_size_limited_tmpfs_that_never_touches_the_host_disk() -> None:
    need_bwrap()
    with sandbox("bwrap", limits=Limits(file_bytes=4 * 1024**2)) as sb:
        assert sb.scratch is not None
        r = sb.execute("open('a.bin', 'wb').write(b'x' * 3_000_000)\nprint('small ok')\n"
                       "try:\n    open('b.bin', 'wb').write(b'y' * 3_000_000)\nexcept OSError as e:\n"
                       "    print('full:', e.strerror)")
        assert r.output == "small ok\nfull: No space left on device\n"
        assert list(sb.scratch.iterdir()) == []


@pytest.mark.parametrize("level", all_levels())
def test_close_kills_processes_the_worker_detached(level: str) -> None:
    marker = f"rlmdet{os.getpid() % 10000}"
    with sandbox(level) as sb:
        # setsid is refused (the session is how rlm finds them all); they leave the process group.
        r = sb.execute("import os, time\nr, w = os.pipe()\nfor i in range(3):\n    if os.fork() == 0:\n"
                       "        try:\n            os.setsid()\n            os.write(w, b'SETSID|')\n"
                       "        except OSError as e:\n            os.write(w, e.strerror.encode() + b'|')\n"
                       "            os.setpgid(0, 0)\n"
                       "        if os.fork() == 0:\n" + "\n".join("            " + line for line in
                                                                 set_comm(marker).splitlines()) +
                       "\n            time.sleep(600)\n        os._exit(0)\ntime.sleep(0.3)\nos.close(w)\n"
                       "print(os.read(r, 1000).decode())")
        assert r.output == "Operation not permitted|" * 3 + "\n", r.output
        assert len(procs_named(marker)) == 3  # detached from the worker and its process group
    deadline = time.monotonic() + 5
    while procs_named(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert procs_named(marker) == []


@pytest.mark.skipif(not (IS_ROOT and LINUX), reason="needs root to start processes as nobody")
def test_process_limit_counts_what_the_user_already_runs() -> None:
    nobody = pwd.getpwnam("nobody")
    others = [subprocess.Popen(["sleep", "60"], user=nobody.pw_uid, group=nobody.pw_gid) for _ in range(25)]
    try:
        with sandbox("process", limits=Limits(extra_processes=20)) as sb:
            r = sb.execute("import os\nkids = []\nfor _ in range(10):\n    pid = os.fork()\n"
                           "    if pid == 0:\n        os._exit(0)\n    kids.append(pid)\n"
                           "for k in kids:\n    os.waitpid(k, 0)\n"
                           "print([l.split()[2] for l in open('/proc/self/limits') if l.startswith('Max processes')])")
            assert r.ok, r.output  # 25 other processes of nobody did not eat the worker's 20
            assert int(r.output.strip()[2:-2]) >= 25 + 20
    finally:
        for p in others:
            p.kill()
            p.wait()


@pytest.mark.skipif(not LINUX, reason="the worker reads its address space from /proc")
def test_memory_limit_is_checked_against_the_loaded_corpus_then_enforced() -> None:
    big = "x" * (40 * 1024**2)  # the worker holds at least these 40 MiB once loaded
    with pytest.raises(UsageError, match=r"--memory-limit 96M is too small: the REPL worker already uses (\d+) MiB"):
        with sandbox("process", context=big, limits=Limits(memory_bytes=96 * 1024**2)):
            pass
    with sandbox("process", context=big, limits=Limits(memory_bytes=512 * 1024**2)) as sb:
        assert "MemoryError" in sb.execute("y = 'y' * (600 * 1024**2)").output  # the limit is in force
        assert sb.execute("print(len(context))").output == f"{len(big)}\n"


@pytest.mark.parametrize("level", all_levels())
def test_worker_threads_share_one_malloc_arena(level: str) -> None:
    """Per-thread glibc arenas reserve 64 MiB of address space each: under a tight RLIMIT_AS the
    background search index then crawled (108 s instead of 2 s on the stdlib at 256M)."""
    with sandbox(level) as sb:
        assert sb.execute("import os\nprint(os.environ.get('MALLOC_ARENA_MAX'))").output == "1\n"


def test_worker_that_cannot_start_is_a_sandbox_error(tmp_path: Path) -> None:
    from rlm_cli.errors import SandboxError
    from rlm_cli.sandbox.launcher import Sandbox, WorkerSpec

    sb = Sandbox("process", WorkerSpec(index_file=tmp_path / "missing.json", context_file=tmp_path / "missing.txt"),
                 socket_path=str(tmp_path / "s.sock"), token="t")
    with pytest.raises(SandboxError, match="failed to start: FileNotFoundError"):
        sb.start()
    sb.close()
    assert sb.scratch is None


# -- root without the capabilities to read other users' files (a hardened container) ------------


def _without_dac(argv: list[str]) -> list[str]:
    """``argv`` run as root without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (util-linux setpriv,
    else libcap's capsh): root that may not read other users' files."""
    if shutil.which("setpriv"):
        return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--", *argv]
    if shutil.which("capsh"):
        return ["capsh", "--drop=cap_dac_override,cap_dac_read_search", "--", "-c", shlex.join(argv)]
    pytest.skip("neither setpriv nor capsh is installed: cannot drop capabilities for the test")


@pytest.mark.skipif(not (IS_ROOT and LINUX), reason="needs root to drop its own capabilities")
@pytest.mark.parametrize("level", all_levels())
def test_root_without_dac_capabilities_runs_and_leaves_nothing_behind(level: str, tmp_path: Path, run_tmp: Path,
                                                                      llm: FakeLLM) -> None:
    """It failed with `cannot start the REPL worker: Permission denied: .../rlm-scratch-...` and
    left the scratch folder behind each time."""
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("alpha\n")
    tmp = run_tmp
    llm.script("root", repl("import os, re\nopen('note.txt', 'w').write('scratch works')\n"
                            "caps = re.search(r'CapEff:\\s+(\\w+)', open('/proc/self/status').read())[1]\n"
                            "print(open('note.txt').read(), int(caps, 16))"),
               repl("FINAL('done: ' + open('note.txt').read())"))
    argv = [*rlm_argv(), "ask", str(tmp_path / "corpus"), "q?", *model_flags(llm),
            "--mode", "rlm", "--sandbox", level]
    proc = subprocess.run(_without_dac(argv), capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, TMPDIR=str(tmp)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "done: scratch works"
    assert "scratch works 0\n" in last_user(llm.chat_requests("root")[1])  # the worker holds no capability
    assert sorted(os.listdir(tmp)) == []  # no rlm-scratch-*, rlm-lm-*, rlm-corpus-*
    # Its notes, each once: the worker user's note as rlm without those capabilities gives it (asked of
    # rlm under the same capabilities: it differs where Python is not world-readable) and no other
    # (the notes about what an earlier, killed rlm left running aside).
    probe = subprocess.run(_without_dac([sys.executable, "-c", "from rlm_cli.sandbox.users import run_notes; "
                                         f"print(*run_notes({level!r}), sep='\\n')"]),
                           capture_output=True, text=True, timeout=60)
    shown = [line[line.index("sandbox: "):] for line in proc.stderr.splitlines()
             if "sandbox: " in line and "left running by an earlier" not in line]
    assert shown == [line for line in probe.stdout.splitlines() if line], proc.stderr


@pytest.mark.skipif(not (IS_ROOT and LINUX), reason="needs root to make files as nobody")
def test_a_scratch_folder_filled_by_nobody_is_removed_by_root_without_dac() -> None:
    """Where Python is world-readable the worker runs as nobody in a scratch folder it owns; rlm,
    root without CAP_DAC_OVERRIDE, cannot list or delete what it left: it takes it back first."""
    import tempfile

    scratch = Path(tempfile.mkdtemp(prefix="rlm-scratch-test-"))
    try:
        nobody = pwd.getpwnam("nobody")
        os.chown(scratch, nobody.pw_uid, nobody.pw_gid)
        subprocess.run(["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups", "sh",
                        "-c", "mkdir -p a/b && echo x > a/b/f && echo y > g && ln -s /etc/passwd l && "
                        "chmod 700 a/b a . && chmod 600 g"], cwd=scratch, check=True, timeout=30)
        code = ("import shutil, sys\nfrom pathlib import Path\nfrom rlm_cli.sandbox.paths import remove_tree\n"
                "p = Path(sys.argv[2])\nif sys.argv[1] == 'plain':\n    shutil.rmtree(p, ignore_errors=True)\n"
                "else:\n    remove_tree(p)\nprint(p.exists())")
        plain = subprocess.run(_without_dac([sys.executable, "-c", code, "plain", str(scratch)]),
                               capture_output=True, text=True, timeout=60)
        assert plain.stdout == "True\n", plain.stderr  # what rlm did before: the folder stayed
        ours = subprocess.run(_without_dac([sys.executable, "-c", code, "ours", str(scratch)]),
                              capture_output=True, text=True, timeout=60)
        assert ours.stdout == "False\n", ours.stderr
        assert Path("/etc/passwd").exists()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.skipif(not (IS_ROOT and LINUX), reason="the note is about the user a root rlm gives the worker")
def test_the_worker_user_note_is_printed_once_per_run_not_per_child(tmp_path: Path, llm: FakeLLM) -> None:
    note = users.plan_drop("process")[1]
    if note is None:
        pytest.skip("Python is world-readable here: the worker runs as nobody with no note to print")
    (tmp_path / "a.txt").write_text("alpha\n")
    children = [r for i in range(2) for r in (repl("print(context)"), repl(f"FINAL('child {i}')"))]
    llm.script("root", repl("answers = [rlm_query(f'part {i}', context='x') for i in range(2)]\nprint(answers)"),
               *children, repl("FINAL(' '.join(answers))"))
    res = run_rlm("ask", str(tmp_path / "a.txt"), "q?", *model_flags(llm), "--mode", "rlm", "--sandbox", "process",
                  "--max-depth", "2")
    assert res.code == 0, res.stderr
    assert res.stdout.strip() == "child 0 child 1"  # two children, one note
    assert res.stderr.count(note) == 1, res.stderr
