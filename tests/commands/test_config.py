"""Settings precedence, the config file and `rlm config`, and keeping API keys secret."""

from __future__ import annotations

import json
import os
import stat
import tomllib
from pathlib import Path

import pytest

from rlm_cli import config
from rlm_cli.config import Settings
from rlm_cli.errors import UsageError
from rlm_cli.sandbox.levels import protections, resolve_level
from tests.support.cli import run_rlm
from tests.support.fake_llm import FakeLLM, last_user, repl


def test_precedence_flags_over_env_over_file_over_defaults() -> None:
    file_values = {"model": "openai/from-file", "sub_model": "openai/sub-file", "max_cost": 3, "retries": 5}
    env = {"RLM_MODEL": "openai/from-env", "RLM_API_BASE": "http://127.0.0.1:1/v1"}
    s, sources = config.resolve_with_sources({"model": "openai/from-flag", "retries": None}, env=env,
                                             file_values=file_values)
    assert s.model == "openai/from-flag" and sources["model"] == "flag"
    assert s.api_base == "http://127.0.0.1:1/v1" and sources["api_base"] == "env RLM_API_BASE"
    assert s.sub_model == "openai/sub-file" and sources["sub_model"] == "config file"
    assert s.max_cost == 3.0 and isinstance(s.max_cost, float)
    assert s.retries == 5  # a flag left at None does not override
    assert s.request_timeout == 300.0 and sources["request_timeout"] == "default"
    assert config.resolve({}, env={"RLM_MODEL": "openai/e"}, file_values={"model": "openai/f"}).model == "openai/e"


@pytest.mark.parametrize(("values", "message"), [
    ({"bogus": 1}, "unknown key 'bogus'"),
    ({"corpus": {}}, "unknown key 'corpus'"),
    ({"max_cost": "lots"}, "bad value"),
    ({"retries": -1}, "zero or more"),
    ({"max_concurrency": 0}, "must be positive"),
    ({"llm_cache": "maybe"}, "bad value"),
    ({"retries": 2.5}, "bad value"),
    ({"sandbox": "weird"}, "bad value 'weird' .from config file"),
    ({"mode": "nope"}, "bad value 'nope' .from config file"),
    # TOML values that reach the operating system out of its range: before, internal errors
    ({"cell_timeout": float("nan")}, "bad value nan .from config file"),
    ({"timeout": float("inf")}, "bad value inf"),
    ({"temperature": float("nan")}, "bad value nan"),
    ({"request_timeout": 1e12}, "must be at most 1,000,000,000"),
    ({"max_concurrency": 1e300}, "must be at most 2,147,483,647"),
    ({"api_base": [1]}, "not an http.s. URL"),
])
def test_bad_config_values_are_usage_errors(values: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        config.resolve({}, env={}, file_values=values)


def test_set_creates_a_private_file_and_keeps_other_lines() -> None:
    path = config.config_path()
    assert config.set_config_value("model", "openai/gpt-5.4-mini") == ("model", "openai/gpt-5.4-mini", path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    path.write_text("# my settings\nmodel = \"openai/x\"  # old\nretries = 2\n")
    os.chmod(path, 0o644)
    config.set_config_value("--max-cost", "2.5")
    config.set_config_value("model", "anthropic/claude-sonnet-4-6")
    config.set_config_value("llm-cache", "off")
    config.set_config_value("retries", "none")  # removes the key
    text = path.read_text()
    assert text.startswith("# my settings\n")
    assert tomllib.loads(text) == {"model": "anthropic/claude-sonnet-4-6", "max_cost": 2.5, "llm_cache": False}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # rewritten private
    assert [p.name for p in path.parent.iterdir()] == ["config.toml"]  # no temporary files left
    assert config.resolve({}, env={}).max_cost == 2.5


def test_set_rejects_unknown_keys_and_bad_values_without_writing() -> None:
    with pytest.raises(UsageError, match="unknown setting"):
        config.set_config_value("colour", "blue")
    with pytest.raises(UsageError, match="bad value"):
        config.set_config_value("max_tokens", "many")
    assert not config.config_path().exists()


def test_set_router_config_stores_an_absolute_path_of_a_file_that_exists(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="no such file"):
        config.set_config_value("router_config", "fleet.yaml")
    (tmp_path / "fleet.yaml").write_text("model_list: []\n")
    config.set_config_value("router_config", "fleet.yaml")
    assert tomllib.loads(config.config_path().read_text()) == {"router_config": str(tmp_path / "fleet.yaml")}
    monkeypatch.chdir("/")  # read back from another directory, it is the same file
    assert config.resolve({}, env={}).router_config == tmp_path / "fleet.yaml"


def test_set_checks_word_settings_and_keeps_sandbox_none() -> None:
    for key, value in (("sandbox", "weird"), ("mode", "nope")):
        with pytest.raises(UsageError, match="use one of"):
            config.set_config_value(key, value)
    assert not config.config_path().exists()
    config.set_config_value("sandbox", "none")  # a real level, not "remove the key"
    assert tomllib.loads(config.config_path().read_text()) == {"sandbox": "none"}
    assert config.resolve({}, env={}).sandbox == "none"


def test_bad_env_mode_fails_before_any_work(tmp_path: Path, isolated_dirs: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    res = run_rlm("ask", str(tmp_path / "a.txt"), "q?", "--model", "openai/root", "--api-base",
                  "http://127.0.0.1:9/v1", env={"RLM_MODE": "nope"})
    assert res.code == 2, res.stderr
    assert "bad value 'nope' (from env RLM_MODE)" in res.stderr
    assert not isolated_dirs.exists() or not any(p.is_file() for p in isolated_dirs.rglob("*"))


def test_bad_input_leaves_no_trajectory_or_cache(tmp_path: Path, isolated_dirs: Path, llm: FakeLLM) -> None:
    (tmp_path / "empty").mkdir()
    for target in (tmp_path / "missing", tmp_path / "empty"):
        res = run_rlm("ask", str(target), "q?", "--model", "openai/root", "--api-base", llm.url)
        assert res.code == 2, res.stderr
    assert llm.requests == []
    assert not isolated_dirs.exists() or not any(p.is_file() for p in isolated_dirs.rglob("*"))
    (tmp_path / "small").mkdir()
    (tmp_path / "small" / "a.txt").write_text("hello\n")
    res = run_rlm("ask", str(tmp_path / "small"), "q?", "--model", "openai/root", "--api-base", llm.url,
                  "--memory-limit", "70M")  # the worker starts, then refuses the limit
    assert res.code == 2 and "--memory-limit 70M is too small: the REPL worker already uses" in res.stderr, res.stderr
    assert not (isolated_dirs / "data").exists()  # not even an empty traces folder


def test_memory_limit_takes_sizes_everywhere_and_is_checked_before_any_work(tmp_path: Path, isolated_dirs: Path,
                                                                             llm: FakeLLM) -> None:
    assert config.set_config_value("memory-limit", "1.5G")[1] == "1.5G"  # kept as typed
    assert 'memory_limit = "1.5G"' in config.config_path().read_text()
    assert config.resolve({}).memory_limit == 1536 * 1024**2
    (config.config_path()).write_text('memory_limit = "2g"\n')
    assert config.resolve({}).memory_limit == 2 * 1024**3
    with pytest.raises(UsageError, match=r"setting 'memory_limit' 10M is too small: .* needs 64 MiB free"):
        config.set_config_value("memory_limit", "10M")
    (tmp_path / "a.txt").write_text("hello\n")
    for value, message in (("40M", "--memory-limit 40M is too small"), ("512K", "--memory-limit 512K is too small"),
                           ("", "'' is not a size"), ("10X", "'10X' is not a size"),
                           ("9" * 22, "is too large")):
        res = run_rlm("ask", str(tmp_path / "a.txt"), "q?", "--model", "openai/root", "--api-base", llm.url,
                      "--memory-limit", value, "--json")
        assert res.code == 2 and message in res.stderr, (value, res.stderr)
        assert json.loads(res.stdout)["exit_code"] == 2 and "Traceback" not in res.stderr
    assert llm.requests == []


def test_strings_with_quotes_and_unicode_round_trip() -> None:
    config.set_config_value("api_base", 'http://h/"odd"\\path\tü')
    assert config.read_config_file()["api_base"] == 'http://h/"odd"\\path\tü'


def test_redacted_settings_hide_secrets() -> None:
    secret = "sk-proj-VERYSECRETKEY-1234567890abcd"
    s = Settings(api_key=secret, api_base="https://user:hunter2@proxy.example/v1")
    red = s.redacted()
    dumped = json.dumps(red)
    assert secret not in dumped and "VERYSECRET" not in dumped and "hunter2" not in dumped
    assert red["api_key"] == "sk-...abcd"
    assert red["api_base"] == "https://***@proxy.example/v1"
    assert config.redact_secret("short-key") == "***"


def test_cli_config_set_show_path(tmp_path: Path) -> None:
    secret = "sk-ant-TOPSECRET-abcdefghijklmnop"
    res = run_rlm("config", "set", "api-key", secret)
    assert res.code == 0, res.stderr
    assert secret not in res.stdout + res.stderr and "sk-...mnop" in res.stderr
    res = run_rlm("config", "set", "max-sub-calls", "50")
    assert res.code == 0
    res = run_rlm("config", "show", env={"RLM_MODEL": "openai/from-env"})
    assert res.code == 0, res.stderr
    assert secret not in res.stdout and "TOPSECRET" not in res.stdout
    assert 'api_key = "sk-...mnop"  # config file' in res.stdout
    assert 'model = "openai/from-env"  # env RLM_MODEL' in res.stdout
    assert "max_sub_calls = 50  # config file" in res.stdout
    doc = json.loads(run_rlm("config", "show", "--json").stdout)
    assert doc["exists"] is True and {"key": "retries", "value": 3, "source": "default"} in doc["settings"]
    res = run_rlm("config", "path")
    assert res.stdout.strip() == str(config.config_path())
    res = run_rlm("config", "set", "nope", "1")
    assert res.code == 2 and "unknown setting 'nope'" in res.stderr and "Traceback" not in res.stderr


def test_config_show_shows_everything_then_names_each_bad_entry(tmp_path: Path) -> None:
    config.config_path().parent.mkdir(parents=True, exist_ok=True)
    config.config_path().write_text('memory_limit = "2X"\nmax_cost = 1.5\nbogus = 1\n')
    res = run_rlm("config", "show", env={"RLM_MODE": "sideways"})
    assert res.code == 2 and "Traceback" not in res.stderr
    assert "max_cost = 1.5  # config file" in res.stdout  # the good entries are still shown
    assert 'memory_limit = "4G"  # default (config file has a bad value)' in res.stdout
    assert 'mode = "auto"  # default (env RLM_MODE has a bad value)' in res.stdout
    for piece in ("'2X' is not a size", "unknown key 'bogus'", "bad value 'sideways' (from env RLM_MODE)"):
        assert piece in res.stderr, piece
    doc = json.loads(run_rlm("config", "show", "--json").stdout)
    assert len(doc["problems"]) == 2 and {"key": "max_cost", "value": 1.5, "source": "config file"} in doc["settings"]
    res = run_rlm("ask", str(tmp_path), "q?", "--model", "openai/x")  # a run still refuses the bad file
    assert res.code == 2 and "'2X' is not a size" in res.stderr


def test_keys_never_reach_the_worker_the_model_the_trajectory_or_the_output(tmp_path: Path, llm: FakeLLM,
                                                                            isolated_dirs: Path) -> None:
    env_key = "sk-rlmenv-SECRETENVKEY-0123456789"
    file_key = "sk-file-SECRETFILEKEY-0123456789"
    provider_key = "sk-openai-SECRETPROVIDER-0123456789"
    config.set_config_value("api_key", file_key)
    (tmp_path / "a.txt").write_text("hello\n")
    # Under bwrap, and at the process level confined by Landlock, the parent's /proc entries are out
    # of reach too; a process level without Landlock can read them (docs/sandbox.md says so), so only the
    # worker's own environment is checked there.
    level = resolve_level("auto")[0]
    confined = level == "bwrap" or any(p.name == "files" and p.present for p in protections(level))
    procs = "'/proc/self/environ'" + (", f'/proc/{os.getppid()}/environ', '/proc/1/environ'" if confined else "")
    probe = ("import os\n"
             "print(sorted(os.environ.items()))\n"
             f"for p in ({procs},):\n"
             "    try:\n"
             "        print(p, open(p, 'rb').read())\n"
             "    except OSError as e:\n"
             "        print(p, 'unreadable', e)\n")
    llm.script("root", repl(probe), repl("FINAL('done')"))
    res = run_rlm("ask", str(tmp_path / "a.txt"), "q?", "--model", "openai/root", "--api-base", llm.url,
                  env={"RLM_API_KEY": env_key, "OPENAI_API_KEY": provider_key})
    assert res.code == 0, res.stderr
    shown_to_model = last_user(llm.chat_requests("root")[1])
    assert "/proc/self/environ" in shown_to_model  # the probe ran and its output reached the model
    checked = [shown_to_model, res.stdout, res.stderr]
    for path in isolated_dirs.rglob("*"):  # trajectories, caches and the config file itself
        if path.is_file() and path.name != "config.toml":
            checked.append(path.read_text(errors="replace"))
    assert len(checked) > 3  # a trajectory was written
    for text in checked:
        for marker in ("SECRETENVKEY", "SECRETFILEKEY", "SECRETPROVIDER"):
            assert marker not in text


def test_cli_config_show_names_the_autodetected_model() -> None:
    res = run_rlm("config", "show", env={"OPENAI_API_KEY": "sk-openai-SECRETPROVIDER-0123456789"})
    assert res.code == 0, res.stderr
    assert 'model = "openai/gpt-5.4"  # autodetected: OPENAI_API_KEY is set' in res.stdout
    assert 'sub_model = "openai/gpt-5.4-mini"  # autodetected' in res.stdout
    assert "SECRETPROVIDER" not in res.stdout + res.stderr


def test_config_values_out_of_range_are_named_not_internal_errors(tmp_path: Path) -> None:
    """A config file holds TOML, whose numbers include ``nan``, ``inf`` and ``1e300``, and whose
    values may be lists: each such value of a setting is a bad value (before: ``config show``
    stopped with "internal error: ValueError: unknown url type" on ``api_base = [1]``, ``ask`` with
    "internal error: ValueError: Invalid value NaN" on ``cell_timeout = nan``)."""
    config.config_path().parent.mkdir(parents=True, exist_ok=True)
    config.config_path().write_text("cell_timeout = nan\napi_base = [1]\ntimeout = inf\nmax_concurrency = 1e300\n")
    res = run_rlm("config", "show")
    assert res.code == 2 and "internal error" not in res.stderr, res.stderr
    for key in ("cell_timeout", "api_base", "timeout", "max_concurrency"):
        assert f"setting {key!r}" in res.stderr, key
    res = run_rlm("ask", str(tmp_path), "q?", "--model", "openai/x")
    assert res.code == 2 and "setting 'cell_timeout' has a bad value nan" in res.stderr, res.stderr


@pytest.mark.parametrize("flag, value, said", [
    ("--timeout", "inf", "--timeout must be a finite number of at most 1,000,000,000, not inf"),
    ("--cell-timeout", "1e12", "--cell-timeout must be a finite number of at most 1,000,000,000"),
    ("--max-concurrency", str(10**20), "--max-concurrency must be a finite number of at most 2,147,483,647"),
    ("--request-timeout", "nan", "--request-timeout must be"),
])
def test_flag_numbers_no_setting_can_take_are_named_before_anything_loads(tmp_path: Path, flag: str, value: str,
                                                                          said: str) -> None:
    """A flag's number that is not finite or over what the operating system takes is exit 2 on one
    line (before: ``--timeout inf`` stopped the run at its first iteration with "internal error:
    OverflowError"; ``--cell-timeout 1e12`` and ``--max-concurrency 1e20`` likewise)."""
    res = run_rlm("ask", str(tmp_path), "q?", "--model", "openai/x", "--api-base", "http://127.0.0.1:9/v1",
                  flag, value)
    assert res.code == 2 and said in res.stderr and "internal error" not in res.stderr, res.stderr
    assert "corpus loaded" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
