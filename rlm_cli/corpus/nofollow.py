"""Opening the files and folders of a corpus without following a symlink anywhere on the way.

A corpus is input the user did not write, and a process may change it while rlm loads it: a file
checked by path and then opened by path may be a symlink to ``~/.ssh/id_rsa`` by the time it is
opened (issue 47: ``docs/x.txt`` renamed back and forth between a hard link and such a symlink).
So nothing of a corpus is opened by a path the kernel would resolve through a link:

* every path handed to :func:`open_file` and :func:`open_folder` is an absolute *real* path (the
  walk resolved it once, ``os.path.realpath``, and checked that it lies inside the corpus,
  ``links.Bounds``); it is opened one component at a time from ``/``, each folder with
  ``O_DIRECTORY | O_NOFOLLOW`` relative to the descriptor of the one before (``openat``), the file
  with ``O_NOFOLLOW | O_NONBLOCK``: a component swapped for a symlink since is refused
  (``ELOOP``/``ENOTDIR``), never followed, so what is opened lies at that path inside the corpus;
* what the walk and the reader judge (a regular file, its size, device and inode) is the
  ``fstat`` of that descriptor, and the bytes are read from the same descriptor;
* a folder is listed through its descriptor (``os.scandir(fd)``), and its entries are ``stat``'ed
  relative to it without following links (``fstatat``).

The descriptors of the folders on the way to the last one opened are kept (one chain, like
``fts``): a walk, and the reads that follow it in path order, open each folder about once.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
#: How a folder to list is opened.
DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC
#: How a folder on the way is opened: ``O_PATH`` where there is one (Linux), which needs only the
#: search permission a path lookup needs, not the read permission listing needs.
WAY_FLAGS = DIR_FLAGS | getattr(os, "O_PATH", 0)
#: How a file is opened (non-blocking: a FIFO put in its place never blocks the load).
FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | _NOFOLLOW | _CLOEXEC
#: The longest path opened, in bytes (Linux's ``PATH_MAX``, 4,096 with its NUL): the rule of the
#: system for a path opened whole, kept although a path opened a component at a time could be longer.
PATH_MAX = 4096
#: Folder descriptors kept open on the way to the last one opened (deeper ones are closed at once).
MAX_KEPT = 64


class Replaced(OSError):
    """A component of the path was swapped for a symlink, or for something that is not a folder,
    since the walk resolved it (``errno`` ``ESTALE``)."""

    def __init__(self) -> None:
        super().__init__(errno.ESTALE, "replaced while loading")


class _Chain(threading.local):
    """The open descriptors of ``/`` (``fds[0]``) and of the folders ``parts`` on the way to the
    last folder opened (``fds[i + 1]`` is ``parts[i]``), kept inside :func:`kept`."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.fds: list[int] = []
        self.depth = 0  # nested :func:`kept` scopes; the chain is closed when the last one ends


_chain = _Chain()


@contextmanager
def kept() -> Iterator[None]:
    """Keep the folder descriptors on the way to the last folder opened while inside (a walk, a
    build: the next path opened shares most of them); outside, each open starts from ``/``. Closes
    them at the end of the outermost scope (per thread)."""
    _chain.depth += 1
    try:
        yield
    finally:
        _chain.depth -= 1
        if _chain.depth == 0:
            _drop(-1)


def _drop(keep: int) -> None:
    """Close the chain past its first ``keep`` folders (-1: ``/`` too)."""
    while len(_chain.fds) > keep + 1:
        os.close(_chain.fds.pop())
        if _chain.parts and len(_chain.parts) >= len(_chain.fds):
            _chain.parts.pop()


def _split(path: str) -> list[str]:
    """The components of the absolute path ``path``.

    Raises:
        OSError: ``ENAMETOOLONG`` for a path over :data:`PATH_MAX`; ``EINVAL`` for one that is
            relative or has a ``.`` or ``..`` part (a real path has none: it was not resolved).
    """
    if not path.startswith(os.sep):
        raise OSError(errno.EINVAL, "not an absolute path", path)
    if len(os.fsencode(path)) >= PATH_MAX:
        raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), path)
    parts = [p for p in path.split(os.sep) if p]
    if any(p in (".", "..") for p in parts):
        raise OSError(errno.EINVAL, "not a resolved path", path)
    return parts


def _step(name: str, fd: int, flags: int = 0) -> int:
    """Open folder ``name`` in the folder ``fd`` without following a link (``flags``: how;
    default :data:`WAY_FLAGS`).

    Raises:
        Replaced: ``name`` is a symlink or not a folder.
        OSError: it cannot be opened.
    """
    try:
        return os.open(name, flags or WAY_FLAGS, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Replaced() from None
        raise


def _way(parts: list[str]) -> tuple[int, bool]:
    """A descriptor of the folder ``/`` + ``parts`` (:data:`WAY_FLAGS`), opened a component at a
    time without following a link (inside :func:`kept`, from the kept chain's longest common
    part); and whether the caller must close it (else the chain owns it).

    Raises:
        Replaced: a component is a symlink or not a folder.
        OSError: one cannot be opened (``ENOENT``, ``EACCES``...).
    """
    if _chain.depth == 0:  # nothing kept: from "/" each time
        fd = os.open(os.sep, WAY_FLAGS)
        try:
            for name in parts:
                nxt = _step(name, fd)
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd, True
    if not _chain.fds:
        _chain.fds.append(os.open(os.sep, WAY_FLAGS))
    same = 0
    for mine, want in zip(_chain.parts, parts, strict=False):
        if mine != want:
            break
        same += 1
    _drop(same)
    fd, own = _chain.fds[-1], -1  # own: a descriptor past MAX_KEPT, not in the chain
    try:
        for name in parts[same:]:
            nxt = _step(name, fd)
            if own < 0 and len(_chain.fds) < MAX_KEPT:
                _chain.parts.append(name)
                _chain.fds.append(nxt)
            else:
                if own >= 0:
                    os.close(own)
                own = nxt
            fd = nxt
    except BaseException:
        if own >= 0:
            os.close(own)
        raise
    return (own, True) if own >= 0 else (fd, False)


def _open_in(parts: list[str], flags: int, opener: Callable[[str, int, int], int]) -> int:
    """``opener(last part, flags, folder fd)`` in the folder of ``/`` + ``parts[:-1]`` (:func:`_way`)."""
    fd, mine = _way(parts[:-1])
    try:
        return opener(parts[-1], flags, fd)
    finally:
        if mine:
            os.close(fd)


def open_folder(path: str) -> int:
    """A descriptor (the caller closes it) of the folder at the real path ``path``, opened for
    listing without following a symlink anywhere on the way.

    Raises:
        Replaced: a component of ``path`` is now a symlink or not a folder.
        OSError: it cannot be opened.
    """
    parts = _split(path)
    if not parts:
        return os.open(os.sep, DIR_FLAGS)
    return _open_in(parts, DIR_FLAGS, lambda name, flags, fd: _step(name, fd, flags))


def _file_at(name: str, flags: int, fd: int) -> int:
    try:
        return os.open(name, flags, dir_fd=fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Replaced() from None
        raise


def open_file(path: str) -> int:
    """A descriptor (the caller closes it) of the file at the real path ``path``, opened with
    :data:`FILE_FLAGS` in its folder, reached as :func:`open_folder` reaches one.

    Raises:
        Replaced: a component of ``path`` (the file included) is now a symlink, or a folder on
            the way is not one.
        OSError: it cannot be opened.
    """
    parts = _split(path)
    if not parts:
        raise OSError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    return _open_in(parts, FILE_FLAGS, _file_at)


class FolderEntry:
    """One entry of a folder listed through its descriptor (:func:`list_folder`), with the answers
    of ``os.DirEntry`` (``name``, ``path``, ``is_dir()``, ``is_symlink()``, ``stat()``).

    ``path`` is the entry's path as the walk reached it (through links, for messages and the
    walk's log); ``real`` its real path, the one opened. A plain entry's ``stat`` is taken through
    the folder's descriptor without following a link; a symlink's target is resolved once, when
    first asked (:meth:`resolve`: its real path, and the ``lstat`` of that), and judged by that.
    """

    __slots__ = ("name", "path", "real", "_link", "_dir", "_stat")

    def __init__(self, entry: os.DirEntry[str], path: str, real: str) -> None:
        self.name, self.path, self.real = entry.name, path, real
        self._link = entry.is_symlink()
        self._dir: bool | None = None
        self._stat: os.stat_result | OSError | None = None
        if not self._link:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                self._stat, self._dir = exc, False
            else:
                if stat.S_ISLNK(st.st_mode):  # (swapped for a link since the listing: judged as one)
                    self._link = True
                else:
                    self._stat, self._dir = st, stat.S_ISDIR(st.st_mode)

    def is_symlink(self) -> bool:
        """Whether the entry is a symlink."""
        return self._link

    def resolve(self) -> None:
        """A symlink's target: ``real`` becomes its real path and its ``stat`` is the ``lstat`` of
        that (``ELOOP`` where resolving stopped at a link: a loop, or a link swapped in meanwhile).
        Once; nothing for a plain entry."""
        if self._stat is not None or not self._link:
            return
        try:
            self.real = os.path.realpath(self.real)
            st = os.lstat(self.real)
            if stat.S_ISLNK(st.st_mode):
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), self.path)
            self._stat, self._dir = st, stat.S_ISDIR(st.st_mode)
        except OSError as exc:  # (realpath itself fails when the link changes under it)
            self._stat, self._dir = exc, False

    def broken(self) -> bool:
        """Whether the entry is a symlink that leads nowhere (its target does not exist)."""
        self.resolve()
        return isinstance(self._stat, OSError) and self._stat.errno == errno.ENOENT

    def is_dir(self) -> bool:
        """Whether the entry is a folder (a link: whether it leads to one); False when it cannot be
        stat'ed."""
        self.resolve()
        return bool(self._dir)

    def stat(self) -> os.stat_result:
        """The entry's ``stat`` (a link: its target's, taken at its real path without following).

        Raises:
            OSError: it cannot be stat'ed (a broken or looping link, a file gone).
        """
        self.resolve()
        if isinstance(self._stat, OSError):
            raise self._stat
        assert self._stat is not None
        return self._stat


def list_folder(path: str, real: str, st: os.stat_result) -> list[Any]:
    """The entries (:class:`FolderEntry`) of the folder at real path ``real``, reached by the walk
    as ``path``, sorted by name: listed through a descriptor opened as :func:`open_folder` does and
    checked (``fstat``) to be the folder ``st`` describes.

    Raises:
        OSError: it cannot be listed; ``ESTALE``: it is not that folder any more (a component
            swapped for a link, or another folder, since ``st`` was taken).
    """
    fd = open_folder(real)
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            raise Replaced()
        head, rhead = os.path.join(path, ""), os.path.join(real, "")
        with os.scandir(fd) as it:
            entries = [FolderEntry(e, head + e.name, rhead + e.name) for e in it]
    finally:
        os.close(fd)
    return sorted(entries, key=lambda e: e.name)


def read_small(path: str) -> tuple[bytes | None, str]:
    """The bytes of the small file at real path ``path`` (an ignore file), opened as
    :func:`open_file` does; ``(None, why)`` when it cannot be read or is not a regular file."""
    try:
        fd = open_file(path)
    except Replaced:
        return None, "it is a symlink (not followed)"
    except OSError as exc:
        return None, exc.strerror or str(exc)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, "not a regular file"
        with os.fdopen(fd, "rb") as fh:
            fd = -1
            return fh.read(), ""
    except OSError as exc:
        return None, exc.strerror or str(exc)
    finally:
        if fd >= 0:
            os.close(fd)
