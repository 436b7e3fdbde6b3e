"""The model host process: litellm in its own process, driven through ``ModelClient`` against the
scripted model server (streaming, retries, fatal errors, the Router), its channel's checks, and
its lifetime (it never outlives the parent)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlm_cli import protocol
from rlm_cli.config import Settings
from rlm_cli.errors import UsageError
from rlm_cli.models.client import ModelClient
from rlm_cli.models.failures import CallFailed
from rlm_cli.models.host import HostBackend
from tests.support.cli import model_flags, run_rlm
from tests.support.fake_llm import FakeLLM, Reply, repl


@pytest.fixture(scope="module")
def host() -> Iterator[HostBackend]:
    """One model host for this module's tests (it keeps no state of a request)."""
    backend = HostBackend(warm=["openai/root"], shared=False)  # module scope: before conftest sets RLM_HOST_IDLE
    yield backend
    backend.close()


def test_requests_through_the_host_keep_the_client_policy(host: HostBackend, llm: FakeLLM, tmp_path: Path) -> None:
    llm.script("root", "streamed " * 30, Reply(status=429, headers={"Retry-After": "0"}), "after a 429",
               Reply(status=400), Reply(status=401))
    client = ModelClient(Settings(model="openai/root", api_base=llm.url, llm_cache=False, retries=2,
                                  temperature=0.3), backend=host)
    pieces: list[str | None] = []
    done = client.complete([{"role": "user", "content": "hi"}], model="openai/root", role="root",
                           on_delta=pieces.append)
    assert done.text == "streamed " * 30 and "".join(p for p in pieces if p) == done.text and len(pieces) > 1
    assert done.record.input_tokens > 0 and done.record.output_tokens > 0 and done.record.cost_usd is None
    sent = llm.requests[0]  # the sampling parameters travel with the request
    assert sent["temperature"] == 0.3 and sent["max_tokens"] == client.reply_cap("openai/root") and sent["stream"]
    again = client.complete([{"role": "user", "content": "again"}], model="openai/root", role="root")
    assert again.text == "after a 429" and client.usage.counters["retries"] == 1
    assert client.usage.counters["rate_limited"] == 1
    with pytest.raises(CallFailed) as bad:
        client.complete([{"role": "user", "content": "bad"}], model="openai/root", role="root")
    assert not bad.value.fatal and bad.value.status == 400
    with pytest.raises(CallFailed) as auth:
        client.complete([{"role": "user", "content": "auth"}], model="openai/root", role="root")
    assert auth.value.fatal and client.fatal is auth.value
    assert client.input_window("openai/gpt-4o-mini") == 128000 and client.price_known("openai/gpt-4o-mini")
    assert client.input_window("openai/root") == 32768 and not client.price_known("openai/root")


def test_router_config_is_built_in_the_host(host: HostBackend, llm: FakeLLM, tmp_path: Path) -> None:
    config = tmp_path / "router.yaml"
    config.write_text(f"model_list:\n  - model_name: fast\n    litellm_params:\n      model: openai/root\n"
                      f"      api_base: {llm.url}\n      api_key: sk-test\n")
    llm.script("root", "from the router")
    client = ModelClient(Settings(model="fast", llm_cache=False, router_config=config), backend=host)
    assert client.allowed_models() >= {"fast"}
    assert client.complete([{"role": "user", "content": "x"}], model="fast", role="root").text == "from the router"
    other = tmp_path / "other.yaml"
    other.write_text("model_list: nope\n")
    with pytest.raises(UsageError, match="model_list"):
        ModelClient(Settings(model="fast", router_config=other), backend=host).allowed_models()


def test_the_host_serves_only_its_parent_with_the_token(host: HostBackend) -> None:
    host.facts("openai/root")  # up and serving
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:  # no token
        conn.connect(host.socket_path)
        protocol.send_message(conn, {"token": "0" * 32, "op": "facts", "model": "openai/root"})
        with pytest.raises(protocol.ProtocolError):
            protocol.recv_message(conn)
    assert oct(os.stat(host.dir).st_mode & 0o777) == "0o700"
    # Another process with the right token is refused too (the peer must be the parent).
    code = ("import socket, sys; from rlm_cli import protocol\n"
            "c = socket.socket(socket.AF_UNIX); c.connect(sys.argv[1])\n"
            "protocol.send_message(c, {'token': sys.argv[2], 'op': 'facts', 'model': 'openai/root'})\n"
            "try:\n    print(protocol.recv_message(c))\nexcept protocol.ProtocolError:\n    print('refused')\n")
    out = subprocess.run([sys.executable, "-c", code, host.socket_path, host._token], capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "refused", out.stderr


def test_the_host_ends_with_its_parent(tmp_path: Path) -> None:
    code = ("import sys, time; from rlm_cli.models.host import HostBackend\n"
            "h = HostBackend(); print(h.proc.pid, h.dir, flush=True); time.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "RLM_HOST_IDLE": "0"})  # a host of one command
    assert parent.stdout is not None
    pid, folder = parent.stdout.readline().split()
    deadline = time.monotonic() + 60
    while not Path(folder, "host.sock").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert Path(folder, "host.sock").exists()
    parent.send_signal(signal.SIGKILL)  # no cleanup in the parent at all
    parent.wait()
    def state() -> str:  # "gone", or the state letter: "Z" once exited (an init that never reaps keeps it)
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return "gone"

    deadline = time.monotonic() + 30
    while state() not in ("gone", "Z") and time.monotonic() < deadline:
        time.sleep(0.05)
    status = state()
    assert status in ("gone", "Z")  # exited (a zombie until init reaps it)
    assert not Path(folder).exists()  # and removed its socket's folder


def test_rlm_ask_never_imports_litellm_in_its_own_process(tmp_path: Path, llm: FakeLLM) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    llm.script("root", repl("print(context[:40])"), repl("FINAL(context.splitlines()[1])"))
    code = ("import atexit, sys\n"
            "atexit.register(lambda: sys.stderr.write(f'litellm imported: {\"litellm\" in sys.modules}\\n'))\n"
            "from rlm_cli.commands.app import main\nsys.argv = ['rlm', *sys.argv[1:]]\nmain()\n")
    res = subprocess.run([sys.executable, "-c", code, "ask", str(tmp_path), "q?", *model_flags(llm)],
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 0 and res.stdout == "hello\n", res.stderr
    assert "litellm imported: False" in res.stderr


def test_a_broken_litellm_is_one_clear_error(tmp_path: Path, llm: FakeLLM) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    import importlib.util

    real = importlib.util.find_spec("litellm")
    assert real is not None and real.submodule_search_locations
    broken = tmp_path / "shadow" / "litellm"  # a litellm whose import fails (its tokenizer files kept)
    (broken / "litellm_core_utils").mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('litellm is broken here')\n")
    (broken / "litellm_core_utils" / "tokenizers").symlink_to(
        Path(list(real.submodule_search_locations)[0]) / "litellm_core_utils" / "tokenizers")
    shadow = broken.parent
    res = run_rlm("ask", str(tmp_path / "a.txt"), "q?", *model_flags(llm),
                  env={"PYTHONPATH": str(shadow)})
    assert res.code == 1 and "litellm is broken here" in res.stderr and "Traceback" not in res.stderr
    assert not llm.requests


def test_the_lane_answers_without_litellm_and_a_broken_litellm_is_one_line_when_needed(
        llm: FakeLLM, tmp_path: Path) -> None:
    """A host whose litellm cannot be imported (a broken install: here a ``litellm`` package that
    raises, beside a copy of the price map) still answers a self-hosted model through the direct
    lane, which never needs litellm for a whole reply; a failure the lane maps with litellm's own
    mapping (an HTTP 500) is then exit 1, one line naming the broken import."""
    fake = tmp_path / "site" / "litellm"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('this litellm is broken on purpose')\n")
    (fake / "model_prices_and_context_window_backup.json").write_text('{"gpt-4o-mini": {}}')
    import importlib.util

    real = Path(list(importlib.util.find_spec("litellm").submodule_search_locations)[0])  # type: ignore[union-attr]
    env = {"PYTHONPATH": str(tmp_path / "site"), "RLM_HOST_IDLE": "0",
           "TIKTOKEN_CACHE_DIR": str(real / "litellm_core_utils" / "tokenizers")}  # rlm finds them beside litellm
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "a.txt").write_text("first\nsecond\n")
    llm.script("root", repl("FINAL('second' if 'second' in context else 'missing')"))
    ok = run_rlm("ask", str(tmp_path / "c"), "Which line?", *model_flags(llm), "--no-leads", env=env)
    assert ok.code == 0 and ok.stdout == "second\n", ok.stderr
    llm.script("root", Reply(status=500))
    broken = run_rlm("ask", str(tmp_path / "c"), "Which line?", *model_flags(llm), "--no-leads", "--retries", "0",
                     "--no-llm-cache",
                     env=env)
    assert broken.code == 1, broken.stderr
    assert "cannot use litellm: ImportError: this litellm is broken on purpose" in broken.stderr
    assert "Traceback" not in broken.stderr
