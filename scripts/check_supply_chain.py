"""Fail when the Python environment holds a release known to be compromised.

Reads the installed distributions with ``importlib.metadata`` (no network, no pip) and compares
each name and version with :data:`KNOWN_BAD`. CI runs it after installing rlm (``.ci/run``); run
it yourself with ``python scripts/check_supply_chain.py`` in rlm's environment. Exit status 0:
clean; 1: a known-bad release is installed (each is named on stderr, with why).

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
    if not bad:
        print("supply chain: no known-bad release installed", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
