"""Fail when the Python environment holds a release known to be compromised, or one older than
rlm's floors.

Reads the installed distributions with ``importlib.metadata`` (no network, no pip) and compares
each name and version with :data:`KNOWN_BAD` and :data:`FLOORS` (the lowest release without the
2026 advisories of each dependency; ``pyproject.toml`` requires the same floors, and a test
keeps the two in step). CI runs it after installing rlm (``.ci/run``); run it yourself with
``python scripts/check_supply_chain.py`` in rlm's environment. Exit status 0: clean; 1: a
known-bad release, or one below its floor, is installed (each is named on stderr, with why).

``--path DIR`` (repeatable) searches those folders instead of ``sys.path`` (the tests use it).
"""

from __future__ import annotations

import argparse
import re
import sys
from importlib import metadata

#: name (normalised as in PEP 503) -> {version: why}. Sources: the maintainers' advisories.
KNOWN_BAD: dict[str, dict[str, str]] = {
    "litellm": {
        "1.82.7": "published with a credential-stealing .pth payload that runs at every Python start (March 2026)",
        "1.82.8": "published with a credential-stealing .pth payload that runs at every Python start (March 2026)",
    },
}


#: name -> (lowest admitted release, why). Sources: the projects' security advisories (GHSA).
FLOORS: dict[str, tuple[str, str]] = {
    "litellm": ("1.84.0", "releases before 1.84.0 have 2026 advisories (GHSA-r75f-5x8p-qvmc, GHSA-qrc4-49gv-mv9m, "
                          "GHSA-4xpc-pv4p-pm3w)"),
    "pypdf": ("7.1.1", "releases before 7.x loop forever or exhaust memory on crafted PDFs (2026 advisories, "
                       "e.g. GHSA-87mj-5ggw-8qc3, GHSA-3crg-w4f6-42mx; XFA memory use fixed in 7.0.0)"),
    "pyarrow": ("26.0.0", "rlm requires pyarrow 26 or later (2026 advisories of earlier releases)"),
    "openpyxl": ("3.1.5", "rlm requires openpyxl 3.1.5 or later"),
}


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string (``"1.84.0rc1"`` -> ``(1, 84, 0)``; ``()`` when none).

    A pre-release counts as its release: the check is a floor on known advisories, not a resolver.
    """
    match = re.match(r"\d+(?:\.\d+)*", version.strip())
    if match is None:
        return ()
    parts = [int(p) for p in match.group().split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def find_below(paths: list[str] | None = None) -> list[str]:
    """One line per installed distribution older than its :data:`FLOORS` entry
    (``name version: below FLOOR; why``), searching ``paths`` (default: ``sys.path``)."""
    found = []
    dists = metadata.distributions(path=paths) if paths is not None else metadata.distributions()
    for dist in dists:
        name = normalise(dist.metadata["Name"] or "")
        if name in FLOORS:
            floor, why = FLOORS[name]
            if release(dist.version) < release(floor):
                found.append(f"{name} {dist.version}: below {floor}; {why}")
    return sorted(set(found))


def normalise(name: str) -> str:
    """A distribution name as PEP 503 compares them: lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def find_bad(paths: list[str] | None = None) -> list[str]:
    """One line per installed distribution listed in :data:`KNOWN_BAD` (``name version: why``),
    searching ``paths`` (default: ``sys.path``)."""
    found = []
    dists = metadata.distributions(path=paths) if paths is not None else metadata.distributions()
    for dist in dists:
        name = normalise(dist.metadata["Name"] or "")
        why = KNOWN_BAD.get(name, {}).get(dist.version)
        if why:
            found.append(f"{name} {dist.version}: {why}")
    return sorted(set(found))


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", action="append", help="search this folder instead of sys.path (repeatable)")
    args = parser.parse_args(argv)
    bad = find_bad(args.path)
    for line in bad:
        print(f"supply chain: known-bad release installed: {line}; uninstall it and rotate every credential "
              "this environment could read", file=sys.stderr)
    old = find_below(args.path)
    for line in old:
        print(f"supply chain: release below rlm's floor installed: {line}; upgrade it "
              "(pip install -U -e '.[all]')", file=sys.stderr)
    if not bad and not old:
        print("supply chain: no known-bad release installed, none below rlm's floors", file=sys.stderr)
    return 1 if bad or old else 0


if __name__ == "__main__":
    sys.exit(main())
