"""Where rlm puts its Unix sockets: folders whose socket paths fit the platform's limit, whatever
``TMPDIR``, ``XDG_RUNTIME_DIR`` or ``RLM_RUNTIME_DIR`` are. Decided here and nowhere else.

A Unix socket's path must fit ``sockaddr_un.sun_path`` (:data:`SUN_PATH_MAX` bytes with the
terminating NUL: 108 on Linux, 104 on macOS and the BSDs); ``bind`` and ``connect`` fail with
"AF_UNIX path too long" beyond it. A temporary folder of 76 characters or more (CI runners, nix
shells, build sandboxes, pytest's temporary paths) leaves too little room for rlm's folder and
socket names, so:

* :func:`socket_temp_dir` is the temporary folder when a socket folder made in it fits, else the
  first of :data:`SHORT_TEMP_DIRS` that exists, is writable and fits (``/tmp`` on every Unix);
  private folders made there are ``0700`` with random names (``mkdtemp``), as tmux and ssh-agent
  make theirs in ``/tmp``;
* :func:`private_socket_dir` makes such a folder (the model relay's, a private model host's);
* :func:`shared_socket_dir` is the folder of the shared model hosts' sockets: the runtime folder
  when its socket paths fit, else one folder per user and runtime folder in the short temporary
  folder (``rlm-UID-HASH``), checked like the runtime folder itself (this user's, ``0700``).

Imports nothing of the project, so every package may use it.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

#: Bytes in ``sockaddr_un.sun_path``, the terminating NUL included (Linux 108; macOS, BSD 104).
SUN_PATH_MAX = 108 if sys.platform.startswith("linux") else 104
#: The longest name rlm gives a socket file (``host-`` + 16 hex digits + ``.sock``).
LONGEST_SOCKET_NAME = 26
#: Room for a folder rlm makes in a temporary folder: ``rlm-scratch-`` or ``rlm-lm-``, a pid of up
#: to 7 digits, ``-`` and mkdtemp's 8 random characters.
FOLDER_ROOM = 28
#: Short temporary folders tried, in order, when ``TMPDIR`` is too long to hold a socket path.
SHORT_TEMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")


def fits(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` can name a Unix socket on this platform (its bytes and a NUL fit
    ``sun_path``)."""
    return len(os.fsencode(path)) < SUN_PATH_MAX


def _holds_sockets(folder: str) -> bool:
    """Whether a folder made in ``folder`` (:data:`FOLDER_ROOM`) can hold rlm's longest socket name."""
    return fits(os.path.join(folder, "x" * FOLDER_ROOM, "x" * LONGEST_SOCKET_NAME))


def socket_temp_dir() -> str:
    """The temporary folder in which rlm makes folders that hold sockets: :func:`tempfile.gettempdir`
    when it leaves room (:func:`_holds_sockets`), else the first usable of :data:`SHORT_TEMP_DIRS`.

    Raises:
        OSError: no candidate is a writable folder with a short enough path (the message says to
            set ``TMPDIR`` to a shorter folder).
    """
    first = tempfile.gettempdir()
    if _holds_sockets(first):
        return first
    for folder in SHORT_TEMP_DIRS:
        if os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK) and _holds_sockets(folder):
            return folder
    raise OSError(f"the temporary folder's path is too long for a Unix socket ({len(first)} characters) and none "
                  f"of {', '.join(SHORT_TEMP_DIRS)} is writable: set TMPDIR to a folder of under 50 characters")


def private_socket_dir(prefix: str) -> Path:
    """A new private folder (``0700``, this user's) named ``prefix`` + random characters in
    :func:`socket_temp_dir`, for sockets of one process. The caller removes it.

    Raises:
        OSError: no usable temporary folder (see :func:`socket_temp_dir`), or it cannot be made.
    """
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=socket_temp_dir()))
    os.chmod(folder, 0o700)
    return folder


def shared_socket_dir(runtime: Path) -> Path:
    """The folder of the shared model hosts' sockets for the runtime folder ``runtime``: itself
    when a socket path in it fits, else ``rlm-UID-HASH`` in :func:`socket_temp_dir`, where HASH
    (8 hex digits) names ``runtime``, so commands with different runtime folders never meet. Not
    made here; the caller makes it ``0700`` and checks it as it checks ``runtime``.

    Raises:
        OSError: no usable temporary folder (see :func:`socket_temp_dir`).
    """
    if fits(runtime / ("x" * LONGEST_SOCKET_NAME)):
        return runtime
    tag = hashlib.sha256(os.fsencode(os.path.abspath(runtime))).hexdigest()[:8]
    return Path(socket_temp_dir()) / f"rlm-{os.geteuid()}-{tag}"
