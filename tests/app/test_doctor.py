"""``rlm doctor`` and the sandbox line that ``rlm ask -v`` prints first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlm_cli.app import doctor
from rlm_cli.sandbox.levels import level_exposes, level_protects, protections
from rlm_cli.sandbox.probes import bwrap_status
from tests.support.cli import model_flags, run_rlm
from tests.support.fake_llm import FakeLLM, repl


def test_collect_reports_level_paths_and_litellm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLM_SANDBOX", "process")
    report = doctor.collect()
    assert report["sandbox"]["level"] == "process" and report["sandbox"]["requested"] == "process"
    assert report["sandbox"]["protects"] == level_protects("process")
    assert report["sandbox"]["exposes"] == level_exposes("process")
    assert report["sandbox"]["protections"] == [vars(p) for p in protections("process")]
    assert report["bwrap"]["usable"] is bwrap_status()[0]
    assert report["paths"]["config_dir"] == os.environ["RLM_CONFIG_DIR"]
    assert report["paths"]["cache_dir"] == os.environ["RLM_CACHE_DIR"]
    assert report["paths"]["data_dir"] == os.environ["RLM_DATA_DIR"]
    assert report["paths"]["config_file_exists"] is False
    assert report["litellm"] and report["problems"] == []
    assert report["worker_user"].startswith("nobody" if os.geteuid() == 0 else "your user")
    text = "\n".join(doctor.lines(report))
    assert "sandbox:        process (requested: process)" in text and "not protected:" in text


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Landlock and seccomp are Linux-only")
def test_doctor_reports_each_process_level_protection_as_present_or_missing() -> None:
    """Landlock's ABI comes from the kernel (probed here independently through /proc and the
    landlockpy package), seccomp from prctl; each protection is present or missing accordingly."""
    import landlockpy

    abi = landlockpy.abi_version()
    report = doctor.collect()
    kernel = report["kernel"]
    assert kernel["landlock_abi"] == abi
    seccomp = "Seccomp:" in Path("/proc/self/status").read_text()
    assert kernel["seccomp"] == seccomp
    present = {p["name"]: p["present"] for p in kernel["process_level"]}
    assert present["files"] == (abi >= 1) and present["network"] == seccomp
    assert present["abstract_unix_sockets"] == (abi >= 6) and present["unix_socket_paths"] == (abi >= 9)
    assert present["signals"] == (abi >= 6 or os.geteuid() == 0)
    text = "\n".join(doctor.lines(report))
    assert f"landlock:       {'ABI ' + str(abi) if abi else ''}" in text
    for p in kernel["process_level"]:
        assert f"  {p['name'].replace('_', ' ')}: {'present' if p['present'] else 'MISSING'} ({p['detail']})" in text


def test_unavailable_or_unknown_level_is_a_reported_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLM_SANDBOX", "jail")
    report = doctor.collect()
    assert report["sandbox"]["level"] is None
    assert any("unknown sandbox 'jail'" in p for p in report["problems"])
    assert "unavailable (requested: jail)" in "\n".join(doctor.lines(report))


def test_a_broken_config_file_is_reported_not_raised() -> None:
    cfg = Path(os.environ["RLM_CONFIG_DIR"])
    cfg.mkdir(parents=True)
    (cfg / "config.toml").write_text("this is = = not toml")
    report = doctor.collect()
    assert any("cannot read config file" in p for p in report["problems"])
    assert report["paths"]["config_file_exists"] is True


def test_doctor_command_prints_json_and_never_imports_litellm() -> None:
    code = ("import sys, json\nsys.argv = ['rlm', 'doctor', '--json']\nfrom rlm_cli.commands import app as cli\n"
            "try:\n    cli.main()\nexcept SystemExit as e:\n    rc = e.code\n"
            "sys.stderr.write(f'rc={rc} litellm={\"litellm\" in sys.modules}')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stderr.endswith("rc=0 litellm=False"), proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["sandbox"]["level"] in ("bwrap", "process", "sandbox-exec")
    assert doc["python"]["executable"] == sys.executable


def test_ask_verbose_prints_the_sandbox_level_first(tmp_path: Path, llm: FakeLLM) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    llm.script("root", repl("print(context)"), repl("FINAL('ok')"))
    res = run_rlm("ask", str(tmp_path / "a.txt"), "q?", *model_flags(llm), "--mode", "rlm", "-v")
    assert res.code == 0, res.stderr
    level = "bwrap" if bwrap_status()[0] else "process"
    assert res.stderr.splitlines()[0].startswith(f"sandbox: {level} (")
    assert "not protected:" in res.stderr.splitlines()[0]
    assert res.stderr.count(f"sandbox: {level} (") == 1  # once (other notes, e.g. the worker's user, may follow)


def test_a_server_busy_with_a_long_request_is_not_reported_as_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """A local server that serves one request at a time accepts the probe's connection but sends
    no model list while it is busy: doctor says a server is there and busy, not that none runs
    (issue 48); with nothing listening it still says nothing was detected."""
    import socket

    from rlm_cli.app.doctor import model_report

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)  # connections are accepted by the kernel and never answered
    port = listener.getsockname()[1]
    try:
        monkeypatch.setenv("RLM_PROBE_PORTS", str(port))
        report = model_report()
        assert report["model"] is None
        assert f"127.0.0.1:{port}" in report["source"] and "busy" in report["source"], report
    finally:
        listener.close()
    report = model_report()  # the port is closed now: nothing there
    assert report["source"].startswith("not set and nothing detected"), report
