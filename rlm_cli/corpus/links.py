"""Where a corpus ends: symlinks that lead out of the paths given, and file names as text.

A cloned repository is input the user did not write: ``key_file -> ~/.ssh/id_rsa`` is one
``git clone`` away. The walk (``walk.discover``) therefore asks :class:`Bounds` about every
symlink it meets, the ripgrep convention:

* a **root** is a path the user named (a file, a folder, or the literal folder a glob starts
  from: ``src`` for ``src/**/*.py``). A root that is itself a symlink is followed: the user named
  it. Its real path (``os.path.realpath``) is where the corpus may go;
* a symlink met inside a root is followed when its real target lies inside some root (read once:
  the walk keeps the device and inode of every file and folder it took), and skipped otherwise,
  counted under :data:`OUTSIDE` and named in the report; ``--follow`` (``-L``) follows every link.
  The walk resolves each link once and asks :meth:`Bounds.contains` about that real path, the one
  it then opens (``rlm_cli.corpus.nofollow``: no link is followed on the way);
* the check happens after the ignore rules, so a ``.gitignore``'d link stays ignored.

File names are kept as the OS gives them (``str`` with ``surrogateescape`` for bytes that are not
UTF-8), so they can always be opened; :func:`display_text` is the form shown wherever text is
needed (``context``'s headers, stderr, ``--json``, ``--cite``, the model's prompts).
"""

from __future__ import annotations

import os
import re

#: The skip reason of a symlink whose target is outside every root.
OUTSIDE = "symlink outside"
#: Characters that glob treats as magic (as ``glob.has_magic`` does).
_MAGIC = re.compile(r"[*?\[]")
#: C0 controls and DEL: a newline in a file name would forge a ``==> path <==`` header line.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def display_text(name: str) -> str:
    """``name`` (an OS path as Python gives it) as printable UTF-8 text.

    Bytes that are not UTF-8 (a Latin-1 ``r\\xe9sum\\xe9.txt``, kept by Python as lone surrogates)
    and control characters become U+FFFD; any other name is returned unchanged. Never raises.
    """
    if name.isascii() and not _CONTROL.search(name):
        return name
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        name = os.fsencode(name).decode("utf-8", "replace")
    return _CONTROL.sub("\ufffd", name)


def escaped_text(name: str) -> str:
    """A second text form of ``name``, distinct for different bytes where :func:`display_text`
    may not be: each byte that is not UTF-8 as ``\\xNN``. Used when two names display alike."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}",
                        os.fsencode(name).decode("utf-8", "backslashreplace"))


def glob_base(pattern: str) -> str:
    """The literal folder a glob starts from (``src`` for ``src/**/*.py``; ``.`` for ``*.md``)."""
    parts = pattern.split(os.sep)
    literal = []
    for part in parts[:-1]:
        if _MAGIC.search(part):
            break
        literal.append(part)
    base = os.sep.join(literal)
    if not base:
        return os.sep if pattern.startswith(os.sep) else "."
    return base


class Bounds:
    """The real paths of a corpus's roots; answers whether a resolved path is inside one.

    ``follow`` (``--follow``): every path is inside.
    """

    def __init__(self, roots: list[str], *, follow: bool = False) -> None:
        self.follow = follow
        self.roots: list[str] = []
        for root in roots:
            self.add(root)

    def add(self, root: str) -> None:
        """Add a root (resolved through any symlinks: a root the user named is followed)."""
        real = os.path.realpath(root)
        if real not in self.roots:
            self.roots.append(real)

    def contains(self, real: str) -> bool:
        """Whether ``real`` (a resolved absolute path) is a root or lies under one."""
        if self.follow:
            return True
        for root in self.roots:
            if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
                return True
        return False
