"""``rlm audit`` on a checklist it cannot trust (a pull request's), through the command: a check's
``model`` the invoker did not name stops the run before loading (exit 2); under
``--allow-checklist-models`` the invoker's key never goes to another provider's default port (a
real listener on 127.0.0.1:11434, :8080, :8000); ``--max-checks``; a missing key is one line and
exit 3 before loading; ``--require-support`` is refused; checks never started write no trajectory."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.audit.scripted import checklist_text, json_repo, script_model
from tests.support.cli import run_rlm
from tests.support.fake_llm import FakeLLM

KEY = "sk-test-CI-SECRET-4242"
#: Planted in a corpus file that is not the first: it must never reach a listener.
PLANTED = "CORPUS-PLANTED-TEXT-7781"


class Listener:
    """A real TCP listener on 127.0.0.1:``port`` that records every byte it is sent and answers
    each request with a 500 (what a hostile server on a provider's default port would see)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past connections' TIME_WAIT; not a live listener
        self.sock.bind(("127.0.0.1", port))  # OSError: the port is taken
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.received: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                data = b""
                try:
                    while b"\r\n\r\n" not in data:
                        data += conn.recv(65536) or b"\0"
                    head, _, body = data.partition(b"\r\n\r\n")
                    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                                   if line.lower().startswith(b"content-length:")), 0)
                    while len(body) < length:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        body += chunk
                    data = head + b"\r\n\r\n" + body
                    conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                except OSError:
                    pass
                self.received.append(data)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.sock.close()


@pytest.fixture
def listeners() -> Iterator[dict[str, Listener]]:
    """Listeners on the default ports of ``ollama_chat/`` (11434), ``llamafile/`` (8080) and
    ``lemonade/`` (8000), those that could be bound."""
    out: dict[str, Listener] = {}
    for provider, port in (("ollama_chat", 11434), ("llamafile", 8080), ("lemonade", 8000)):
        try:
            out[provider] = Listener(port)
        except OSError:
            continue
    yield out
    for listener in out.values():
        listener.close()


def corpus(tmp_path: Path) -> Path:
    repo = json_repo(tmp_path)
    (repo / "zz_planted.py").write_text(f"TOKEN = '{PLANTED}'\n")
    return repo


def written(tmp_path: Path) -> list[Path]:
    """The files rlm wrote in its user folders (the index cache of a load, trajectories)."""
    return [p for p in (tmp_path / "userdirs").rglob("*") if p.is_file()]


def with_model(text: str, check: str, model: str) -> str:
    return text.replace(f'id = "{check}"\n', f'id = "{check}"\nmodel = "{model}"\n')


def test_a_checklist_model_not_named_stops_before_loading(tmp_path: Path, llm: FakeLLM) -> None:
    repo = corpus(tmp_path)
    checklist = tmp_path / "checks.toml"
    checklist.write_text(with_model(checklist_text(["no-pickle", "enough-files"]), "enough-files",
                                    "ollama_chat/evil"))
    base = ["--model", "openai/root", "--api-base", llm.url, "--api-key", KEY, "--checklist", str(checklist)]
    res = run_rlm("audit", str(repo), *base, "--github")
    assert res.code == 2, res.stderr
    (line,) = res.stderr.splitlines()  # one line: nothing was loaded (no corpus progress, no notice)
    assert "check 'enough-files'" in line and "'ollama_chat/evil'" in line and "--allow-checklist-models" in line
    assert "--model" in line and not res.stdout
    res = run_rlm("audit", str(repo), *base, "--estimate")  # an estimate is refused the same way
    assert res.code == 2 and "check 'enough-files'" in res.stderr
    # a model that holds a server is refused even where checklist models are allowed
    checklist.write_text(with_model(checklist_text(["no-pickle"]), "no-pickle", "huggingface/https://evil.example"))
    res = run_rlm("audit", str(repo), *base, "--allow-checklist-models")
    assert res.code == 2 and "check 'no-pickle': field 'model' holds a URL" in res.stderr, res.stderr
    # --max-checks: more checks than it is exit 2 before loading, naming the count and the flag
    checklist.write_text(checklist_text(["no-pickle", "enough-files", "todo-free"]))
    res = run_rlm("audit", str(repo), *base, "--max-checks", "2")
    assert res.code == 2 and "3 checks, over --max-checks 2" in res.stderr, res.stderr
    # --require-support means nothing to audit (an unsupported answer never passes): refused
    res = run_rlm("audit", str(repo), *base, "--require-support")
    assert res.code == 2 and "--require-support" in res.stderr and len(res.stderr.splitlines()) == 1
    assert not llm.requests
    assert not written(tmp_path)


def test_b_allowed_checklist_models_never_get_the_key(tmp_path: Path, llm: FakeLLM,
                                                      listeners: dict[str, Listener]) -> None:
    if "ollama_chat" not in listeners:
        pytest.skip("127.0.0.1:11434 is taken (an Ollama server runs here): cannot listen as one")
    repo = corpus(tmp_path)
    router = tmp_path / "router.yaml"  # the root model goes to the scripted server; no --api-base
    router.write_text(f"model_list:\n  - model_name: fleet\n    litellm_params:\n      model: openai/root\n"
                      f"      api_base: {llm.url}\n")
    script_model(llm)
    ids = ["no-pickle", "enough-files", "todo-free", "regexes"]
    text = checklist_text(ids)
    for check, provider in zip(ids[1:], ("ollama_chat", "llamafile", "lemonade"), strict=True):
        if provider in listeners:
            text = with_model(text, check, f"{provider}/evil")
    checklist = tmp_path / "checks.toml"
    checklist.write_text(text)
    res = run_rlm("audit", str(repo), "--checklist", str(checklist), "--model", "fleet", "--router-config",
                  str(router), "--api-key", KEY, "--allow-checklist-models", "--retries", "0", "--policy",
                  "standard", "--json", "--no-llm-cache")
    doc = json.loads(res.stdout)
    status = {c["id"]: c["status"] for c in doc["checks"]}
    assert status["no-pickle"] == "pass", res.stderr  # the invoker's model answers
    for check, provider in zip(ids[1:], ("ollama_chat", "llamafile", "lemonade"), strict=True):
        if provider not in listeners:
            continue
        got = b"".join(listeners[provider].received)
        assert got, (provider, res.stderr)  # the check's request did go to that provider's default port...
        assert KEY.encode() not in got and b"authorization: bearer sk-test" not in got.lower()  # ...without the key
        assert PLANTED.encode() not in got and status[check] == "error"
    assert KEY not in json.dumps([r for r in llm.request_headers])  # the router's own deployment: no --api-key


def test_c_a_check_model_named_by_the_invoker_runs(tmp_path: Path, llm: FakeLLM) -> None:
    repo = corpus(tmp_path)
    checklist = tmp_path / "checks.toml"
    checklist.write_text(with_model(checklist_text(["no-pickle", "enough-files", "regexes"]), "enough-files",
                                    "openai/sub"))
    script_model(llm)
    script_model(llm, model="sub")
    res = run_rlm("audit", str(repo), "--checklist", str(checklist), "--model", "openai/root", "--sub-model",
                  "openai/sub", "--api-base", llm.url, "--api-key", KEY, "--policy", "standard", "--json",
                  "--max-cost", "5", "--no-llm-cache")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [c["status"] for c in doc["checks"]] == ["pass", "pass", "pass"] and written(tmp_path)
    # two checks of the unpriced root model: its note is said once for the run, not once per check
    assert res.stderr.count("the price of openai/root is unknown") == 1, res.stderr
    assert {r["model"] for r in llm.requests} == {"root", "sub"}
    # the key goes to the base it was given for, with every named model
    assert {h.get("authorization") for h in llm.request_headers} == {f"Bearer {KEY}"}


def test_a_missing_key_is_one_line_and_exit_3_before_loading(tmp_path: Path, llm: FakeLLM) -> None:
    repo = corpus(tmp_path)
    checklist = tmp_path / "checks.toml"
    checklist.write_text(checklist_text(["no-pickle", "enough-files", "todo-free"]))
    res = run_rlm("audit", str(repo), "--checklist", str(checklist), "--model", "anthropic/claude-haiku-4-5",
                  "--github", "--sarif", str(tmp_path / "a.sarif"))
    assert res.code == 3, res.stderr
    (line,) = res.stderr.splitlines()
    assert "no API key for anthropic/claude-haiku-4-5 (the root model)" in line and "ANTHROPIC_API_KEY" in line
    assert "no check ran" in line
    assert res.stdout.count("::error") <= 1 and "Missing credentials" not in res.stdout + res.stderr
    assert not written(tmp_path)  # nothing loaded: no index cache, no trajectory
    # a check's own model, allowed, is checked too (the root here goes to the scripted server)
    checklist.write_text(with_model(checklist_text(["no-pickle"]), "no-pickle", "gemini/gemini-3.5-flash"))
    res = run_rlm("audit", str(repo), "--checklist", str(checklist), "--model", "openai/root", "--api-base", llm.url,
                  "--api-key", KEY, "--allow-checklist-models")
    assert res.code == 3 and "no API key for gemini/gemini-3.5-flash (check no-pickle)" in res.stderr, res.stderr
    assert "GEMINI_API_KEY" in res.stderr and not llm.requests


def test_checks_after_the_budget_is_spent_write_no_trajectory(tmp_path: Path, llm: FakeLLM) -> None:
    """A check that never started (the run's budget was spent: 3,000 checks under ``--timeout 10``
    wrote 3,000 trajectories) gets the budget's error and no trajectory file; the one that ran
    has its own."""
    repo = corpus(tmp_path)
    checklist = tmp_path / "checks.toml"
    checklist.write_text(checklist_text(["no-pickle", "enough-files", "todo-free", "regexes"]))
    script_model(llm)
    res = run_rlm("audit", str(repo), "--checklist", str(checklist), "--model", "openai/root", "--api-base", llm.url,
                  "--max-tokens", "1", "--json", "--no-llm-cache", "--fail-on", "note")
    doc = json.loads(res.stdout)
    assert res.code == 6 and [c["status"] for c in doc["checks"]] == ["error"] * 4, res.stderr
    traces = [c["run"].get("trace") for c in doc["checks"]]
    assert traces[0] and Path(traces[0]).is_file() and traces[1:] == [None] * 3
    assert {c["reason"] for c in doc["checks"]} == {"stopped at the tokens budget without a final answer"}
    assert not llm.requests
