"""Regenerate the shell completion scripts in ``completions/`` (``--check``: fail if stale).

The scripts come from typer's own completion machinery; never edit them by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path

from typer.completion import get_completion_script

OUT = Path(__file__).resolve().parent.parent / "completions"
SHELLS = {"bash": "rlm.bash", "zsh": "_rlm", "fish": "rlm.fish"}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for shell, name in SHELLS.items():
        script = get_completion_script(prog_name="rlm", complete_var="_RLM_COMPLETE", shell=shell)
        path = OUT / name
        if check:
            if not path.exists() or path.read_text() != script:
                stale.append(str(path))
        else:
            OUT.mkdir(exist_ok=True)
            path.write_text(script)
    if stale:
        print(f"stale completion scripts: {', '.join(stale)}; run python scripts/gen_completions.py",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
