"""``--output FILE``: write the answer (or the JSON document) to a file atomically.

The text goes to a temporary file in the same folder (so the final rename never crosses file
systems), is flushed and fsync'ed, takes the mode an existing ``FILE`` has (else ``0666`` less
the umask, like a shell redirection), and is renamed over ``FILE`` with ``os.replace``: a reader
sees the old file or the new one, never half of one, and a failure leaves no temporary file.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from rlm_cli.errors import UsageError
from rlm_cli.output.text import encodable


def check_writable(path: Path, flag: str = "--output") -> Path:
    """Check before the run that ``path`` (given to option ``flag``) can be written: its folder
    exists and is writable and ``path`` is not a folder. Returns ``path`` made absolute.

    Raises:
        UsageError: it cannot be written (the message says why).
    """
    path = Path(os.path.abspath(path))
    folder = path.parent
    if path.is_dir():
        raise UsageError(f"{flag} {path} is a folder", hint="give a file name")
    if not folder.is_dir():
        raise UsageError(f"{flag}: the folder {folder} does not exist", hint="create it first")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{flag}: cannot write in {folder} (permission denied)", hint=f"choose another {flag}")
    return path


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically (see the module docstring).

    Raises:
        UsageError: the file could not be written (nothing is left behind).
    """
    folder = path.parent
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(encodable(text))  # a lone surrogate in an answer: U+FFFD, not a crash
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}", hint="choose another --output") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
