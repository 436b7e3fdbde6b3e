"""Dependency floors (issue 23): ``pyproject.toml`` admits no release below the floors that
``scripts/check_supply_chain.py`` knows, and the script fails on an environment below them."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.support.supply_chain import ROOT, SCRIPT, check, fake_dist

sys.path.insert(0, str(SCRIPT.parent))
from check_supply_chain import FLOORS, KNOWN_BAD, release  # noqa: E402


def _requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        deps.extend(extra)
    return [Requirement(d) for d in deps]


def test_the_floors_are_at_least_those_the_issue_asks_for() -> None:
    assert Version(FLOORS["litellm"][0]) >= Version("1.83.10")
    assert Version(FLOORS["pypdf"][0]) >= Version("7")
    assert Version(FLOORS["pyarrow"][0]) >= Version("26")


def test_every_requirement_of_a_floored_package_starts_at_its_floor() -> None:
    seen = set()
    for req in _requirements():
        if req.name not in FLOORS:
            continue
        seen.add(req.name)
        floor = Version(FLOORS[req.name][0])
        assert req.specifier.contains(str(floor)), f"{req} refuses its floor {floor}"
        below = Version(f"{floor.major}.{floor.minor}.{floor.micro - 1}") if floor.micro else Version(
            f"{floor.major}.{floor.minor - 1}.99") if floor.minor else Version(f"{floor.major - 1}.99")
        assert not req.specifier.contains(str(below)), f"{req} admits {below}, below the floor {floor}"
    assert seen == set(FLOORS)
    for name, versions in KNOWN_BAD.items():  # the compromised releases stay excluded by name too
        for req in _requirements():
            if req.name == name:
                assert all(f"!={v}" in str(req.specifier) for v in versions)


def test_this_environment_is_at_or_above_the_floors() -> None:
    res = check()
    assert res.returncode == 0, res.stderr
    assert "none below rlm's floors" in res.stderr


@pytest.mark.parametrize(("name", "version"), [("litellm", "1.83.9"), ("LiteLLM", "1.50.0"), ("pypdf", "6.10.2"),
                                               ("pyarrow", "25.0.1"), ("openpyxl", "3.1.2")])
def test_a_release_below_its_floor_fails_the_check(tmp_path: Path, name: str, version: str) -> None:
    fake_dist(tmp_path, name, version)
    res = check("--path", str(tmp_path))
    assert res.returncode == 1, res.stderr
    assert f"release below rlm's floor installed: {name.lower()} {version}: below" in res.stderr


def test_releases_at_or_above_the_floors_pass(tmp_path: Path) -> None:
    for i, (name, (floor, _)) in enumerate(FLOORS.items()):
        fake_dist(tmp_path / str(i), name, floor)
        fake_dist(tmp_path / f"{i}-new", name, floor + ".post1" if i % 2 else "99.0")
    paths = [str(p) for p in sorted(tmp_path.iterdir())]
    res = check(*[a for p in paths for a in ("--path", p)])
    assert res.returncode == 0, res.stderr


def test_release_parses_versions_as_numbers() -> None:
    assert release("1.84.0") == release("1.84") < release("1.110.2")
    assert release("7.1.1rc1") == (7, 1, 1) and release("garbage") == ()
