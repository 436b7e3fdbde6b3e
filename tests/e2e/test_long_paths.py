"""Unix sockets fit whatever the temporary and runtime folders are (issue 36): with a TMPDIR of 200
characters (CI runners, nix shells, macOS's /var/folders/...) and the runtime folder inside it,
``rlm ask`` answers in rlm mode with a sub-call through the relay, a second command leases the
shared model host, and nothing of the run is left in either folder afterwards."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.support.cli import model_flags, run_rlm
from tests.support.fake_llm import FakeLLM, repl


def long_folder(tmp_path: Path, length: int = 200) -> Path:
    """A folder under ``tmp_path`` whose path is ``length`` characters long (longer when
    ``tmp_path`` already is: the suite itself may run under a long TMPDIR)."""
    room = max(length - len(str(tmp_path)) - 1, 8)
    folder = tmp_path / ("t" * room)
    folder.mkdir()
    assert len(str(folder)) >= length
    return folder


def rlm_entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("rlm"))


def test_ask_and_the_shared_host_work_with_a_200_character_tmpdir(tmp_path: Path, llm: FakeLLM) -> None:
    tmp = long_folder(tmp_path)
    runtime = tmp / "runtime-0" / "rlm"  # where platformdirs puts it when XDG_RUNTIME_DIR is unset
    env = {"TMPDIR": str(tmp), "RLM_RUNTIME_DIR": str(runtime), "RLM_HOST_IDLE": "60"}
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "a.txt").write_text("alpha\nbeta\n")
    try:
        for question in ("first?", "second?"):
            llm.script("root", repl("print(llm_query('say ok'))"), repl("FINAL('found ' + ('beta' if 'beta' in context else 'nothing'))"))
            llm.script("sub", "ok")
            res = run_rlm("ask", str(corpus), question, *model_flags(llm), "--mode", "rlm", "--no-leads", env=env)
            assert res.code == 0, res.stderr
            assert res.stdout == "found beta\n"
            assert "internal error" not in res.stderr
        status = run_rlm("host", "status", "--json", env=env)
        (host,) = json.loads(status.stdout)["hosts"]
        assert host["requests"] >= 4  # both commands' calls went through the one shared host
        assert rlm_entries(tmp) == []  # no relay, scratch or host folder left in TMPDIR
    finally:
        stop = run_rlm("host", "stop", env=env)
    assert stop.code == 0, stop.stderr
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and list(runtime.iterdir()):
        time.sleep(0.1)
    assert list(runtime.iterdir()) == []  # token, lock and log gone; no empty workers/ folder
    from rlm_cli.sockets import shared_socket_dir

    sockets = shared_socket_dir(runtime)
    assert sockets != runtime and len(str(sockets)) < 40  # the host's socket was in a short folder of its own
    assert not sockets.exists()  # and it went with its last socket


def test_a_private_model_host_and_relay_fit_too(tmp_path: Path, llm: FakeLLM) -> None:
    tmp = long_folder(tmp_path)
    env = {"TMPDIR": str(tmp), "RLM_HOST_IDLE": "0"}  # a model host of this command only
    (tmp_path / "a.txt").write_text("gamma\n")
    llm.script("root", repl("print(llm_query('x'))"), repl("FINAL('done')"))
    llm.script("sub", "fine")
    res = run_rlm("ask", str(tmp_path / "a.txt"), "q?", *model_flags(llm), "--mode", "rlm", "--no-leads", env=env)
    assert res.code == 0 and res.stdout == "done\n", res.stderr
    assert rlm_entries(tmp) == []


def test_socket_folders_follow_the_platform_limit() -> None:
    from rlm_cli import sockets

    assert sockets.fits("/tmp/" + "x" * (sockets.SUN_PATH_MAX - 6))
    assert not sockets.fits("/tmp/" + "x" * (sockets.SUN_PATH_MAX - 5))
    long_runtime = Path("/" + "r" * 150)
    folder = sockets.shared_socket_dir(long_runtime)
    assert folder != long_runtime and sockets.fits(folder / ("x" * sockets.LONGEST_SOCKET_NAME))
    assert sockets.shared_socket_dir(long_runtime) == folder  # the same folder for every command
    assert sockets.shared_socket_dir(Path("/" + "s" * 150)) != folder
    assert sockets.shared_socket_dir(Path("/run/user/1000/rlm")) == Path("/run/user/1000/rlm")
