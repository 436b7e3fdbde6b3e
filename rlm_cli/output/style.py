"""How the terminal view looks: plain or styled, live or not (``--color``), and text made safe
for rich markup.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import IO

from rich.markup import escape as _markup_escape

from rlm_cli.output.text import encodable, safe_text

#: Lines of code and output shown per block on the terminal (the trajectory keeps everything).
SHOW_LINES = 12
COLOR_CHOICES = ("auto", "always", "never")


def escape(text: str) -> str:
    """``text`` for rich markup: control characters replaced (:func:`safe_text`), ``[`` escaped."""
    return _markup_escape(safe_text(text))


def escape_read(value: object) -> str:
    """``str(value)`` read from a file anyone may edit (a trajectory, a corpus path), for rich
    markup: :func:`escape`, and each lone surrogate (a JSON escape in the file) as U+FFFD
    (:func:`~rlm_cli.output.text.encodable`: stdout would refuse it)."""
    return escape(encodable(str(value)))


def display_style(color: str = "auto", stream: IO[str] | None = None,
                  environ: Mapping[str, str] | None = None) -> tuple[bool, bool]:
    """``(styled, live)`` for ``--color`` ``auto``, ``always`` or ``never``: ``never`` is plain
    text; ``always`` is colours and the live display even in a pipe; ``auto`` is plain under
    ``NO_COLOR`` (any value, https://no-color.org), ``TERM=dumb`` or when ``stream`` (stderr) is
    not a terminal, and styled and live otherwise.

    Raises:
        ValueError: ``color`` is not one of :data:`COLOR_CHOICES`.
    """
    if color not in COLOR_CHOICES:
        raise ValueError(f"--color must be one of {', '.join(COLOR_CHOICES)}, not {color!r}")
    if color == "never":
        return False, False
    if color == "always":
        return True, True
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False, False
    stream = stream if stream is not None else sys.stderr
    tty = bool(getattr(stream, "isatty", lambda: False)())
    return tty, tty
