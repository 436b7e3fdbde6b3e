"""The shared model host (issue 14): a later ``rlm ask`` with the same user, folder and
environment leases the running host instead of starting one; it exits once idle or stopped,
leaves nothing behind after a command that failed on its arguments, replaces a stale socket,
and keeps its token out of the REPL worker's reach. Every test runs real ``rlm`` commands
against the scripted model server, in a runtime folder of its own."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.cli import model_flags, rlm_argv, run_rlm
from tests.support.fake_llm import FakeLLM, repl


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short runtime folder (socket paths hold at most ~100 bytes) with sharing on; every host
    still running at the end is stopped and killed."""
    folder = Path(tempfile.mkdtemp(prefix="rh", dir="/tmp")) / "rlm"
    monkeypatch.setenv("RLM_RUNTIME_DIR", str(folder))
    monkeypatch.setenv("RLM_HOST_IDLE", "60")
    yield folder
    for host in hosts():
        with pytest.MonkeyPatch.context():
            try:
                os.kill(int(host["pid"]), signal.SIGKILL)
            except OSError:
                pass
    shutil.rmtree(folder.parent, ignore_errors=True)


def hosts() -> list[dict]:
    res = run_rlm("host", "status", "--json")
    assert res.code == 0, res.stderr
    return list(json.loads(res.stdout)["hosts"])


def until(check: Callable[[], bool], seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


def corpus(tmp_path: Path) -> Path:
    (tmp_path / "c").mkdir(exist_ok=True)
    (tmp_path / "c" / "a.txt").write_text("first\nsecond\n")
    return tmp_path / "c"


def ask(tmp_path: Path, llm: FakeLLM, question: str, env: dict[str, str] | None = None) -> None:
    llm.script("root", repl("FINAL('second' if 'second' in context else 'missing')"))
    res = run_rlm("ask", str(corpus(tmp_path)), question, *model_flags(llm), "--no-leads", env=env, cwd=tmp_path)
    assert res.code == 0 and res.stdout == "second\n", res.stderr


def host_files(folder: Path, suffixes: tuple[str, ...] = (".sock", ".token")) -> list[str]:
    return sorted(p.suffix for p in folder.glob("host-*") if p.suffix in suffixes)


def test_a_later_command_leases_the_running_host_and_stop_ends_it(runtime: Path, tmp_path: Path,
                                                                  llm: FakeLLM) -> None:
    """One host, started by the first command, serves the second (whose model code cannot read the
    host's token), answers no request without that token, and ends at ``rlm host stop``."""
    import socket

    from rlm_cli import protocol

    ask(tmp_path, llm, "first question?")
    (first,) = hosts()
    (token,) = runtime.glob("host-*.token")
    code = (f"try:\n    got = open({str(token)!r}).read()\nexcept Exception as exc:\n"
            "    got = 'refused: ' + type(exc).__name__\nFINAL(got)")
    llm.script("root", repl(code))
    res = run_rlm("ask", str(corpus(tmp_path)), "read it?", *model_flags(llm), "--no-leads", cwd=tmp_path)
    assert res.code == 0 and res.stdout.startswith("refused: "), res.stdout + res.stderr
    assert token.read_text() not in res.stdout + res.stderr
    (again,) = hosts()
    assert again["pid"] == first["pid"] and again["requests"] == 2  # both root calls went through one host
    (sock,) = runtime.glob("host-*.sock")
    for wrong in ("0" * 32, "", None):  # while with the token (read from its 0600 file) it answers
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(sock))
            protocol.send_message(conn, {"token": wrong, "op": "status"})
            with pytest.raises(protocol.ProtocolError):
                protocol.recv_message(conn)
    assert again["leases"] == 0 and again["cwd"] == "/"  # it keeps no folder busy
    assert host_files(runtime) == [".sock", ".token"]
    assert oct(runtime.stat().st_mode & 0o777) == "0o700"
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in runtime.glob("host-*") if p.is_file())
    stop = run_rlm("host", "stop")
    assert stop.code == 0 and str(first["pid"]) in stop.stderr
    assert until(lambda: not alive(int(first["pid"])))
    assert list(runtime.iterdir()) == [] and hosts() == []  # socket, token, lock and log all gone


def test_the_latest_commands_idle_period_applies_and_an_idle_host_exits_and_removes_its_files(
        runtime: Path, tmp_path: Path, llm: FakeLLM) -> None:
    ask(tmp_path, llm, "q1?")  # RLM_HOST_IDLE=60
    (first,) = hosts()
    assert first["idle_limit_s"] == 60
    ask(tmp_path, llm, "q2?", env={"RLM_HOST_IDLE": "1"})
    assert until(lambda: not alive(int(first["pid"])), 30)
    assert until(lambda: list(runtime.iterdir()) == [], 30) and not hosts()


def test_another_environment_gets_a_host_of_its_own_another_folder_does_not(runtime: Path, tmp_path: Path,
                                                                            llm: FakeLLM) -> None:
    ask(tmp_path, llm, "q1?", env={"SOME_PROVIDER_KEY": "one"})  # questions differ: no cached reply
    ask(tmp_path, llm, "q2?", env={"SOME_PROVIDER_KEY": "two"})
    other = tmp_path / "elsewhere"
    other.mkdir()
    ask(other, llm, "q3?", env={"SOME_PROVIDER_KEY": "one"})
    by_key = {h["pid"]: h for h in hosts()}
    assert len(by_key) == 2 and sorted(h["requests"] for h in by_key.values()) == [1, 2]
    assert {h["cwd"] for h in by_key.values()} == {"/"}  # no folder kept busy
    # A file named by a relative path in the environment: the host runs in that folder, for it only.
    for folder in (tmp_path, other):
        (folder / "creds.json").write_text("{}")
    ask(tmp_path, llm, "q4?", env={"SOME_CREDENTIALS": "creds.json"})
    ask(other, llm, "q5?", env={"SOME_CREDENTIALS": "creds.json"})
    assert {h["cwd"] for h in hosts()} == {"/", str(tmp_path), str(other)}


def test_a_command_that_fails_on_its_arguments_leaves_no_host(runtime: Path, tmp_path: Path, llm: FakeLLM) -> None:
    res = run_rlm("ask", str(tmp_path / "missing"), "q?", *model_flags(llm), cwd=tmp_path)
    assert res.code == 2 and "missing" in res.stderr
    assert until(lambda: host_files(runtime) == [], 10) and hosts() == []
    assert not any(alive(int(p)) for p in _host_pids(runtime))


def test_a_cached_run_keeps_its_host_for_the_next_and_verbose_says_how_each_got_one(
        runtime: Path, tmp_path: Path, llm: FakeLLM) -> None:
    """Issue 40: a run that makes no model request (every call a cache hit) used to leave its host
    to exit at once, so each cached run paid litellm's import again. ``-v`` says how each command
    got its host: started, leased, or one of its own where the runtime folder is not safe."""
    ask(tmp_path, llm, "q1?")  # fills the response cache
    run_rlm("host", "stop")
    assert until(lambda: hosts() == [], 10)
    flags = [*model_flags(llm), "--no-leads", "-v"]
    first = run_rlm("ask", str(corpus(tmp_path)), "q1?", *flags, cwd=tmp_path)
    assert first.code == 0 and first.stdout == "second\n", first.stderr
    (host,) = hosts()  # still there: the command asked it for the model's window
    # -v says how the command got its host
    assert "1 cached" in first.stderr
    assert f"model host: shared, started (pid {host['pid']}; stays 60 s once unused)" in first.stderr
    again = run_rlm("ask", str(corpus(tmp_path)), "q1?", *flags, cwd=tmp_path)
    assert again.code == 0 and f"model host: shared, leased (pid {host['pid']})" in again.stderr
    runtime.chmod(0o755)  # open to others: not shared, and -v and `rlm host status` say why
    llm.script("root", repl("FINAL('second' if 'second' in context else 'missing')"))
    third = run_rlm("ask", str(corpus(tmp_path)), "q3?", *flags, cwd=tmp_path)
    assert third.code == 0 and "model host: a host of this command only (no safe runtime folder:" in third.stderr
    assert "it must be 0700" in third.stderr
    status = json.loads(run_rlm("host", "status", "--json").stdout)
    assert status["sharing"].startswith("off: ") and "0700" in status["sharing"]
    runtime.chmod(0o700)


def _host_pids(runtime: Path) -> list[str]:
    out = subprocess.run(["pgrep", "-f", f"host_process import main; main() {runtime}"], capture_output=True, text=True)
    return out.stdout.split()


def test_a_hung_host_costs_a_few_seconds_and_stop_kills_it(runtime: Path, tmp_path: Path, llm: FakeLLM) -> None:
    ask(tmp_path, llm, "q1?")
    (first,) = hosts()
    pid = int(first["pid"])
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        llm.script("root", repl("FINAL('second' if 'second' in context else 'missing')"))
        # The command and `rlm host status` each wait out the hung host's lease timeout: at once.
        proc = subprocess.Popen([*rlm_argv(), "ask", str(corpus(tmp_path)), "q2?", *model_flags(llm), "--no-leads",
                                 "-v"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        (hung,) = hosts()
        assert hung == {"key": first["key"], "pid": pid, "answering": False}
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and out == "second\n", err
        assert "model host: a host of its own" in err and time.monotonic() - started < 60
        stop = run_rlm("host", "stop")
        assert stop.code == 0 and str(pid) in stop.stderr
        assert until(lambda: not alive(pid)) and list(runtime.iterdir()) == []
    finally:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def test_a_killed_hosts_stale_socket_is_replaced_and_a_terminated_host_removes_its_files(
        runtime: Path, tmp_path: Path, llm: FakeLLM) -> None:
    """A host killed (SIGKILL) leaves its socket and token, which the next command replaces. ``kill
    PID`` (SIGTERM, as a service manager stops it) ends a shared host as an idle exit does: socket,
    token, lock and log gone (they stayed until the next command replaced them)."""
    ask(tmp_path, llm, "q1?")
    (first,) = hosts()
    os.kill(int(first["pid"]), signal.SIGKILL)
    assert until(lambda: not alive(int(first["pid"])))
    assert host_files(runtime) == [".sock", ".token"]  # left behind by the killed host
    ask(tmp_path, llm, "q2?")
    (second,) = hosts()
    assert second["pid"] != first["pid"]
    os.kill(int(second["pid"]), signal.SIGTERM)
    assert until(lambda: not alive(int(second["pid"])))
    assert until(lambda: list(runtime.iterdir()) == []), list(runtime.iterdir())


def test_commands_started_together_share_one_host(runtime: Path, tmp_path: Path, llm: FakeLLM) -> None:
    llm.defaults["root"] = repl("FINAL('second' if 'second' in context else 'missing')")
    base = [*rlm_argv(), "ask", str(corpus(tmp_path))]
    procs = [subprocess.Popen([*base, f"question {i}?", *model_flags(llm), "--no-leads"], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [o[1][-500:] for o in outs]
    assert [o[0] for o in outs] == ["second\n"] * 3
    (host,) = hosts()
    assert host["requests"] == 3


def test_a_bad_idle_value_is_one_clear_error(tmp_path: Path, llm: FakeLLM) -> None:
    res = run_rlm("ask", str(corpus(tmp_path)), "q?", *model_flags(llm), env={"RLM_HOST_IDLE": "soon"})
    assert res.code == 2 and "RLM_HOST_IDLE" in res.stderr and "Traceback" not in res.stderr
    assert not llm.requests


def test_a_deleted_working_folder_is_one_clear_error(runtime: Path, tmp_path: Path, llm: FakeLLM) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    script = f'cd "{gone}" && rmdir "{gone}" && exec "$0" -m rlm_cli ask "$1" "q?" --model openai/root --api-base "$2"'
    res = subprocess.run(["sh", "-c", script, sys.executable, str(corpus(tmp_path)), llm.url], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2 and "current folder no longer exists" in res.stderr and "Traceback" not in res.stderr
    assert hosts() == [] and not llm.requests


def test_a_host_killed_mid_request_is_one_clear_line(runtime: Path, tmp_path: Path, llm: FakeLLM) -> None:
    from tests.support.fake_llm import Reply

    ask(tmp_path, llm, "q1?")
    (host,) = hosts()
    llm.script("root", Reply(text=repl("FINAL('late')"), delay_s=8))
    proc = subprocess.Popen([*rlm_argv(), "ask", str(corpus(tmp_path)), "q2?", *model_flags(llm),
                             "--no-leads"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert until(lambda: len(llm.requests) >= 2, 60)  # the slow request reached the model
    os.kill(int(host["pid"]), signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and out == "" and "Traceback" not in err
    assert f"the shared model host (pid {host['pid']}) exited" in err and "run the command again" in err


def test_a_command_in_another_network_namespace_gets_a_host_of_its_own() -> None:
    """A host sends requests from the namespace it started in: a command under ``unshare -n``
    (its own loopback) must not lease one started outside, so the key differs."""
    from rlm_cli.models.shared import fingerprint

    unshare = shutil.which("unshare")
    code = "from rlm_cli.models.shared import fingerprint; print(fingerprint())"
    if unshare is None or subprocess.run([unshare, "-n", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -n is not allowed here")
    same = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    other = subprocess.run([unshare, "-n", sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert same.stdout.strip() == fingerprint()
    assert other.stdout.strip() != fingerprint()


def test_a_self_hosted_model_is_served_before_litellm_is_imported(tmp_path: Path, llm: FakeLLM, runtime: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 49: the first command of a session to a model litellm does not know (``openai/root``
    on a local server) is answered by the host's direct lane, without importing litellm; a
    command naming a model litellm knows has it imported, and its reply priced by it. The
    environment is a user's: no ``LITELLM_LOCAL_MODEL_COST_MAP`` (rlm sets it for litellm)."""
    monkeypatch.delenv("LITELLM_LOCAL_MODEL_COST_MAP")
    ask(tmp_path, llm, "Which line?")
    [host] = hosts()
    assert host["litellm"] == "not needed yet" and host["requests"] >= 1
    llm.script("gpt-4o-mini", repl("FINAL('second' if 'second' in context else 'missing')"))
    res = run_rlm("ask", str(corpus(tmp_path)), "Which line?", "--model", "openai/gpt-4o-mini", "--api-base",
                  llm.url, "--api-key", "sk-test", "--no-leads", "--json", cwd=tmp_path)
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["answer"] == "second" and doc["usage"]["cost_usd"] > 0  # priced by litellm's map
    [again] = hosts()
    assert again["pid"] == host["pid"] and again["litellm"] == "imported"


def test_a_run_that_asks_its_host_nothing_keeps_it_for_the_next(runtime: Path, tmp_path: Path, llm: FakeLLM) -> None:
    """A command with both windows given asks the host for no facts: answered wholly from the
    response cache it asks nothing at all, and one on the direct lane may end as soon as it read
    its only reply. Either way it named its models, so its shared host stays (found by a new
    user's trial: 4 of 10 first commands with ``--root-model-window`` left no host)."""
    windows = ["--root-model-window", "16384", "--sub-model-window", "16384"]
    llm.script("root", repl("FINAL('second' if 'second' in context else 'missing')"))
    flags = [*model_flags(llm), "--no-leads", *windows]
    first = run_rlm("ask", str(corpus(tmp_path)), "q?", *flags, cwd=tmp_path)
    assert first.code == 0 and first.stdout == "second\n", first.stderr
    assert len(hosts()) == 1
    run_rlm("host", "stop")
    assert until(lambda: hosts() == [], 10)
    cached = run_rlm("ask", str(corpus(tmp_path)), "q?", *flags, cwd=tmp_path)
    assert cached.code == 0 and "1 cached" in cached.stderr, cached.stderr
    time.sleep(1.0)  # a host that would leave at once has left by now (its idle period is 60 s)
    assert len(hosts()) == 1
