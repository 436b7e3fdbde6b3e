"""The ignore rules of a walk: ``.gitignore``, ``.ignore`` and ``.rlmignore`` files and the
``--include``/``--exclude`` globs (gitignore syntax through pathspec), and the time limits that
keep a pathological pattern or an expired ``--timeout`` from hanging a walk.

A deeper ignore file overrides a shallower one (:func:`ignored`); one whose patterns take over
:data:`IGNORE_FILE_SECONDS` to match stops the load with an error naming it.
"""

from __future__ import annotations

import contextlib
import re
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pathspec

from rlm_cli.errors import BudgetExceededError, UsageError

#: The ignore files honoured in every folder (unless ``--no-ignore``), in the order they are read.
IGNORE_FILES = (".gitignore", ".ignore", ".rlmignore")
#: Seconds the patterns of one ignore file may spend matching paths in one walk: a pathological
#: pattern (``*a*a*a*a*a*a*a*a*a*a*a*a*b``: its regex backtracks exponentially) stops the load
#: with an error naming the file, rather than hanging it or dropping its rules.
IGNORE_FILE_SECONDS = 5.0


class Clock:
    """The time limits of one ``walk.discover``: the ``--timeout`` deadline (checked at each entry
    of a walk) and each ignore file's matching time. In the main thread an interval timer
    (``SIGALRM``, every 0.25 s, only while a walk runs) interrupts a single runaway regex match;
    elsewhere a match is judged once it returns."""

    def __init__(self) -> None:
        self._local = threading.local()  # per thread: ``deadline``, and ``current`` (spec, since)

    def over(self) -> None:
        """Raise when this thread's walk is past its deadline.

        Raises:
            BudgetExceededError: ``--timeout`` ran out while the corpus was loading.
        """
        deadline = getattr(self._local, "deadline", None)
        if deadline is not None and time.monotonic() > deadline:
            raise BudgetExceededError("time budget reached while loading the corpus", budget="timeout",
                                      hint="raise --timeout, or name fewer files")

    def matching(self, spec: Spec | None) -> None:
        """Say which spec this thread is matching with now (``None``: none)."""
        self._local.current = None if spec is None else (spec, time.monotonic())

    def _tick(self, signum: int, frame: Any) -> None:
        current = getattr(self._local, "current", None)  # the handler runs in the main thread
        if current is not None:
            spec, since = current
            if spec.used + time.monotonic() - since > IGNORE_FILE_SECONDS:
                self._local.current = None
                raise spec.too_slow()
            self.over()

    @contextlib.contextmanager
    def running(self, deadline: float | None) -> Iterator[None]:
        """Arm the limits for one walk in this thread (and the interval timer where it can run)."""
        self._local.deadline, self._local.current = deadline, None
        armed = (threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
                 and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN, None))
        if armed:
            signal.signal(signal.SIGALRM, self._tick)
            signal.setitimer(signal.ITIMER_REAL, 0.25, 0.25)
        try:
            yield
        finally:
            if armed:
                signal.setitimer(signal.ITIMER_REAL, 0, 0)
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
            self._local.deadline, self._local.current = None, None


clock = Clock()


_EVERY_FOLDER, _PREFIX, _WHOLE, _FOLDERS_UNDER = 0, 1, 2, 3


class Spec:
    """Gitignore patterns compiled by pathspec's ``GitIgnoreSpec``, with a fast negative answer:
    one combined regex says when no pattern can match (the usual case on a big tree); otherwise
    git's rule decides (:meth:`_itself`), or pathspec's own check where ``walked`` is false.
    Paths are relative, ``/``-separated, with ``/`` after a folder.
    ``source`` names the ignore file(s) the lines come from; ``used`` is the seconds spent matching."""

    def __init__(self, lines: list[str], source: str = "", *, walked: bool = True) -> None:
        self.source = source
        #: Judged as a walk that only enters the folders it keeps needs (:meth:`_itself`: ignore
        #: files, ``--exclude``); else by pathspec, where a folder's pattern matches what is in
        #: it (``--include src/`` keeps the files under ``src``).
        self.walked = walked
        self.used = 0.0
        self.spec = pathspec.GitIgnoreSpec.from_lines(lines)
        self.any: re.Pattern[str] | None = None
        try:
            regexes = [getattr(p, "regex", None) for p in self.spec.patterns if p.include is not None]
            if any(rx is None for rx in regexes):
                raise TypeError("a pattern without a regex")
            parts = [re.sub(r"\(\?P<\w+>", "(?:", rx.pattern) for rx in regexes if rx is not None]
            self.any = re.compile("|".join(f"(?:{x})" for x in parts)) if parts else None
        except (re.error, AttributeError, TypeError):
            self.any = None
        #: ``(include, kind, regex)`` of the patterns, the last first (:meth:`_itself`): "*/" is
        #: every folder and no file; a regex without a folder mark ("*", "**", "x/**") matches the
        #: path and what is under it; the others match the path itself when the folder mark, if
        #: any, is at its end.
        #: "x/**/" is every folder under x (pathspec 1.1.1 compiles it as x/ itself): x/**'s regex,
        #: for folders only.
        self._last_first: list[tuple[bool, int, re.Pattern[str]]] = []
        for p in reversed(self.spec.patterns):
            rx = getattr(p, "regex", None)
            if p.include is None or rx is None:
                continue
            source = str(getattr(p, "pattern", "")).rstrip()
            if source.endswith("/**/") and source.lstrip("!") != "/**/":
                under = pathspec.GitIgnoreSpec.from_lines([source.lstrip("!")[:-1]]).patterns[0]
                rx, kind = getattr(under, "regex", None) or rx, _FOLDERS_UNDER
            else:
                kind = (_EVERY_FOLDER if rx.pattern == "(?P<ps_d>/)" else _PREFIX if "ps_d" not in rx.groupindex
                        else _WHOLE)
            self._last_first.append((bool(p.include), kind, rx))
        #: :attr:`any` for folders; none when a ``*/`` pattern is there (pathspec writes it as a
        #: search for "/", which a match from the start never finds).
        every_folder = any(getattr(getattr(p, "regex", None), "pattern", None) == "(?P<ps_d>/)" for p in self.spec.patterns)
        self.any_folder: re.Pattern[str] | None = None if every_folder else self.any

    def check(self, path: str) -> bool | None:
        """True: matched by an ignore pattern; False: re-included by a ``!`` pattern; None: no match.

        Raises:
            UsageError: the patterns took over :data:`IGNORE_FILE_SECONDS` in this walk.
        """
        since = time.monotonic()
        clock.matching(self)
        try:
            folder = path.endswith("/")
            quick = self.any_folder if folder else self.any
            if quick is not None and quick.match(path) is None and (not folder or quick.match(path[:-1]) is None):
                verdict = None  # no pattern can match it
            elif self.walked:
                verdict = self._itself(path)
            else:
                verdict = self.spec.check_file(path).include
        finally:
            clock.matching(None)
            self.used += time.monotonic() - since
        if self.used > IGNORE_FILE_SECONDS:
            raise self.too_slow()
        return verdict

    def _itself(self, path: str) -> bool | None:
        """The ``include`` of the last pattern that matches ``path`` itself (``a/b/``, a folder,
        or ``a/b.py``), not through a folder above it; ``None`` when none does. That is git's
        rule once a walk only enters folders it kept: a folder above is judged when the walk
        meets it (git cannot re-include what is in an ignored folder, and a ``!`` pattern for a
        folder does not re-include what is in it). pathspec 1.1.1's own answer differs twice:
        a folder that ``*`` or ``**`` matched stays ignored whatever re-includes it (its
        shortcut regex for those cannot mark a folder match: python-pathspec PR #133, merged
        after 1.1.1), and a file counts as matched by a pattern that matched a folder above it."""
        folder = path.endswith("/")
        for include, kind, rx in self._last_first:
            if kind == _EVERY_FOLDER:
                itself = folder
            elif kind == _FOLDERS_UNDER:
                itself = folder and rx.match(path[:-1]) is not None
            elif kind == _PREFIX:
                itself = rx.match(path[:-1] if folder else path) is not None  # (x/** is in x, not x)
            else:
                itself = rx.fullmatch(path) is not None
            if itself:
                return include
        return None

    def too_slow(self) -> UsageError:
        """The error for patterns that took too long."""
        return UsageError(f"the ignore rules of {self.source} took over {IGNORE_FILE_SECONDS:g} s to match the "
                          "corpus's paths (a pattern whose regex backtracks, such as *a*a*a*a*a*a*a*b)",
                          hint="simplify that pattern, or pass --no-ignore")

    def match_file(self, path: str) -> bool:
        """True if the last matching pattern includes ``path`` (pathspec's ``match_file``)."""
        return bool(self.check(path))


def compile_rules(lines: list[str], source: str = "", *, walked: bool = True, lenient: bool = False) -> Spec | None:
    """A :class:`Spec` of the gitignore ``lines`` (blank lines and comments dropped), or ``None``
    when none is left; ``source`` names where they come from (for the too-slow error);
    ``walked``: see :attr:`Spec.walked`. A pattern pathspec cannot compile (``!`` alone, a
    trailing backslash, a range such as ``[z-a]``) is left out when ``lenient`` (an ignore file: git
    matches nothing with it either).

    Raises:
        UsageError: not ``lenient``, such a pattern (a flag's or a checklist's: the message names
            ``source`` and the pattern).
    """
    lines = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    try:
        return Spec(lines, source, walked=walked) if lines else None
    except (ValueError, re.error):  # pathspec's GitIgnorePatternError is a ValueError
        bad = [ln for ln in lines if not _compiles(ln)]
        if not lenient:
            raise UsageError(f"{source}: {bad[0]!r} is not a gitignore pattern",
                             hint="see `man gitignore` for the syntax") from None
        lines = [ln for ln in lines if ln not in bad]
        return Spec(lines, source, walked=walked) if lines else None


def _compiles(line: str) -> bool:
    try:
        Spec([line])
    except (ValueError, re.error):
        return False
    return True


def ignored(specs: list[tuple[str, Spec]], rel: str, is_dir: bool) -> bool:
    """Gitignore verdict for ``rel`` (relative to the walked root): the deepest matching file wins."""
    for base, spec in reversed(specs):  # deepest ignore file first
        verdict = spec.check(rel[len(base):] + ("/" if is_dir else ""))
        if verdict is not None:
            return verdict
    return False
