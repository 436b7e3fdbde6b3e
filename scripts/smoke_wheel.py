"""Smoke-test an installed ``rlm`` (CI: the built wheel in a fresh virtual environment, on each
Python version the machine has): it is the installed package, not this source tree; ``--version``
works; one ``rlm ask`` answers in rlm mode with a sub-call against a scripted OpenAI-compatible
server; ``rlm mcp`` lists its tools to the MCP SDK's client.

Usage::

    python scripts/smoke_wheel.py /path/to/venv/bin/rlm

Run it with an interpreter that has this repository's test extra (``mcp`` for the client); the
``rlm`` under test needs the ``mcp`` extra. Exit status: 0 all good, 1 a check failed (each
failure is one line on stderr), 2 bad arguments.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.fake_llm import FakeLLM, repl  # noqa: E402 - the scripted server of the tests


def _env(home: Path) -> dict[str, str]:
    """An environment with rlm's folders in ``home``, no provider keys and no autodetection."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and not k.startswith("RLM_")}
    env.update(RLM_CONFIG_DIR=str(home / "config"), RLM_CACHE_DIR=str(home / "cache"),
               RLM_DATA_DIR=str(home / "data"), RLM_RUNTIME_DIR=str(home / "run"), RLM_HOST_IDLE="0",
               RLM_PROBE_OLLAMA="off", RLM_PROBE_PORTS="off", LITELLM_LOCAL_MODEL_COST_MAP="True")
    return env


def check_installed(rlm: Path, env: dict[str, str]) -> list[str]:
    """The package the ``rlm`` script imports lies beside it, not in this source tree."""
    python = rlm.parent / "python"
    proc = subprocess.run([str(python), "-c", "import rlm_cli, sys; print(rlm_cli.__file__); print(sys.version_info[:2])"],
                          capture_output=True, text=True, cwd="/", env=env, timeout=60)
    if proc.returncode != 0:
        return [f"import rlm_cli failed: {proc.stderr.strip().splitlines()[-1:]}"]
    where = Path(proc.stdout.splitlines()[0]).resolve()
    if ROOT in where.parents:
        return [f"rlm_cli is imported from the source tree ({where}), not from the installed package"]
    print(f"installed: {where.parent} (Python {proc.stdout.splitlines()[1]})", file=sys.stderr)
    return []


def check_version(rlm: Path, env: dict[str, str]) -> list[str]:
    """``rlm --version`` prints this tree's version."""
    from rlm_cli import __version__

    proc = subprocess.run([str(rlm), "--version"], capture_output=True, text=True, env=env, timeout=60)
    if proc.returncode != 0 or __version__ not in proc.stdout:
        return [f"rlm --version: exit {proc.returncode}, {proc.stdout.strip()!r} {proc.stderr.strip()[-300:]!r}"]
    return []


def check_ask(rlm: Path, env: dict[str, str], tmp: Path) -> list[str]:
    """One ``rlm ask`` in rlm mode, with a sub-call, against the scripted server."""
    corpus = tmp / "corpus"
    corpus.mkdir()
    (corpus / "notes.txt").write_text("the retry limit is 7\n")
    llm = FakeLLM()
    try:
        llm.script("root", repl("print(llm_query('say ok'))"),
                   repl("import re\nFINAL(re.search(r'limit is (\\d+)', context).group(1))"))
        llm.script("sub", "ok")
        proc = subprocess.run([str(rlm), "ask", str(corpus), "What is the retry limit?", "--model", "openai/root",
                               "--sub-model", "openai/sub", "--api-base", llm.url, "--mode", "rlm", "--json"],
                              capture_output=True, text=True, env=env, cwd=tmp, timeout=240)
        subs = len(llm.chat_requests("sub"))
    finally:
        llm.close()
    if proc.returncode != 0:
        return [f"rlm ask: exit {proc.returncode}: {proc.stderr.strip()[-500:]}"]
    doc = json.loads(proc.stdout)
    if doc.get("answer") != "7" or doc.get("mode") != "rlm" or subs != 1:
        return [f"rlm ask: answer {doc.get('answer')!r}, mode {doc.get('mode')!r}, {subs} sub-call(s)"]
    return []


def check_mcp(rlm: Path, env: dict[str, str], tmp: Path) -> list[str]:
    """``rlm mcp`` starts and lists its tools to the MCP SDK's client."""
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    (tmp / "mcp").mkdir()
    (tmp / "mcp" / "a.py").write_text("x = 1\n")
    names: list[str] = []

    async def scenario() -> None:
        params = StdioServerParameters(command=str(rlm), args=["mcp", str(tmp / "mcp")], env=env, cwd=str(tmp))
        with open(tmp / "mcp.err", "w") as err:
            async with stdio_client(params, errlog=err) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    names.extend(t.name for t in (await session.list_tools()).tools)

    try:
        anyio.run(scenario)
    except Exception as exc:  # noqa: BLE001 - reported as a failed check
        return [f"rlm mcp: {type(exc).__name__}: {exc}; {(tmp / 'mcp.err').read_text()[-500:]}"]
    if "ask" not in names:
        return [f"rlm mcp lists {names}, without ask"]
    return []


def main(argv: list[str]) -> int:
    """Run every check on the ``rlm`` of ``argv[0]``; the exit status of the module docstring."""
    if len(argv) != 1 or not os.access(argv[0], os.X_OK):
        print("usage: python scripts/smoke_wheel.py PATH/TO/bin/rlm", file=sys.stderr)
        return 2
    rlm = Path(argv[0]).absolute()
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as raw:
        tmp = Path(raw)
        env = _env(tmp / "home")
        for check in (check_installed, check_version):
            failures += check(rlm, env)
        failures += check_ask(rlm, env, tmp)
        failures += check_mcp(rlm, env, tmp)
    for failure in failures:
        print(f"smoke: {failure}", file=sys.stderr)
    print(f"smoke: {rlm}: {'ok' if not failures else f'{len(failures)} failure(s)'}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
