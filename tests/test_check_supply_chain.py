"""``scripts/check_supply_chain.py``: CI fails when a known-compromised release is installed, and
rlm's own requirement never resolves to one."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.support.supply_chain import ROOT, SCRIPT, check, fake_dist

sys.path.insert(0, str(SCRIPT.parent))
from check_supply_chain import KNOWN_BAD  # noqa: E402


def test_this_environment_holds_no_known_bad_release() -> None:
    res = check()
    assert res.returncode == 0, res.stderr
    assert "no known-bad release" in res.stderr


@pytest.mark.parametrize("name", ["litellm", "LiteLLM"])
@pytest.mark.parametrize("version", ["1.82.7", "1.82.8"])
def test_a_compromised_litellm_fails_the_check(tmp_path: Path, name: str, version: str) -> None:
    fake_dist(tmp_path, name, version)
    fake_dist(tmp_path, "rich", "13.0.0")
    res = check("--path", str(tmp_path))
    assert res.returncode == 1
    assert f"known-bad release installed: litellm {version}: published with a credential-stealing" in res.stderr


def test_neighbouring_releases_pass(tmp_path: Path) -> None:
    fake_dist(tmp_path, "litellm", "1.82.6")
    fake_dist(tmp_path / "other", "litellm", "1.82.9")
    res = check("--path", str(tmp_path), "--path", str(tmp_path / "other"))
    assert "known-bad release installed" not in res.stderr  # (both are below the floor: see test_untrusted_deps)


def test_rlm_requires_no_known_bad_release() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    reqs = {Requirement(d).name: Requirement(d) for d in deps}
    for name, versions in KNOWN_BAD.items():
        assert name in reqs
        for version in versions:
            assert not reqs[name].specifier.contains(version), f"{name} {version} is admitted"
    assert not reqs["litellm"].specifier.contains("1.82.6")  # below the floor (tests/test_untrusted_deps.py)
