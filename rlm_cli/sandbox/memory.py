"""Will the REPL workers fit in memory? Checked by rlm before it starts them, so that a corpus too
large for the machine (or for ``--memory-limit``) is a usage error (exit 2) that says what it
needs, instead of a worker killed by the kernel's out-of-memory killer halfway through loading.

What a worker needs, from the figures of ``benchmarks/bench_scale.py``:

* ``context`` itself: ``chars * bytes per character`` (1, 2 or 4, see ``Corpus.context_memory``);
* while loading, the same again when ``context`` is a ``Context`` (which answers
  ``context["path"]``): CPython decodes the context file into a ``str`` and copies it into the
  subclass (a str subclass cannot be decoded into directly); a ``context`` above
  ``protocol.CONTEXT_BY_PATH_MAX_BYTES`` stays a plain ``str``, with no copy;
* ``files`` and ``chunks`` as dicts, and the JSON index: about :data:`ROW_BYTES` per file and per chunk;
* the indexes built in the background: the ``search`` index and the line index of
  ``sandbox.observe``, at most :data:`INDEX_BYTES_PER_CHAR` per character while they are built;
* the interpreter and the helpers: :data:`BASE_BYTES`.

The peak is the larger of loading (the string, twice it up to 1 GiB) and indexing (the string plus
the indexes).
Several workers (``--jobs``) start at once, so their peaks add up. The memory rlm may use is the
kernel's ``MemAvailable``, or less in a cgroup with a limit (a container); ``RLM_MEMORY_AVAILABLE``
(a size: ``12G``) replaces it.
"""

from __future__ import annotations

import os
from typing import Any

from rlm_cli.errors import UsageError
from rlm_cli.protocol import MIN_FREE_MEMORY, context_by_path

#: The interpreter, the REPL's helpers and their imports (measured: 20-30 MiB).
BASE_BYTES = 48 * 1024**2
#: Memory of one entry of ``files`` or ``chunks`` in the worker, with its share of the parsed index.
ROW_BYTES = 1536
#: Peak memory of the background indexes per character of ``context`` (measured: 1.1 for the
#: search index and 0.4 for the line index on 100 MB of code and logs).
INDEX_BYTES_PER_CHAR = 2.0


def _loaded(corpus: Any) -> int:
    """Bytes of a worker with ``corpus`` loaded: the interpreter, ``files``/``chunks``, ``context``."""
    return BASE_BYTES + (len(corpus.files) + len(corpus.chunks)) * ROW_BYTES + int(corpus.context_memory)


def worker_need(corpus: Any) -> int:
    """Bytes one REPL worker needs at its peak for ``corpus`` (a ``Corpus``; see the module docstring)."""
    string = int(corpus.context_memory)
    copy = string if context_by_path(corpus.chars, corpus.char_width) else 0  # the load's copy into Context
    return _loaded(corpus) + max(copy, int(INDEX_BYTES_PER_CHAR * corpus.chars))


def working_room(chars: int) -> int:
    """Bytes a loaded worker with ``chars`` characters of ``context`` needs free under
    ``--memory-limit``: its indexes' peak, never less than ``MIN_FREE_MEMORY``. Used by
    :func:`limit_need` and, with the address space it measures, by ``hardening.memory_problem``."""
    return max(MIN_FREE_MEMORY, int(INDEX_BYTES_PER_CHAR * chars))


def limit_need(corpus: Any) -> int:
    """Bytes of address space one REPL worker needs under ``--memory-limit`` for ``corpus``: the
    loaded worker (the limit is applied once the corpus is loaded, so the load's copy does not
    count) plus :func:`working_room`."""
    return _loaded(corpus) + working_room(corpus.chars)


def available_memory() -> int | None:
    """Bytes rlm may use now: ``RLM_MEMORY_AVAILABLE``, else ``MemAvailable`` of ``/proc/meminfo``
    capped by the cgroup's limit less its use; ``None`` where neither is known (macOS).

    Raises:
        UsageError: ``RLM_MEMORY_AVAILABLE`` is not a size.
    """
    given = os.environ.get("RLM_MEMORY_AVAILABLE")
    if given:
        from rlm_cli.config_keys import parse_size

        return parse_size(given, "RLM_MEMORY_AVAILABLE")
    free: int | None = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    free = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        return None
    try:
        with open("/sys/fs/cgroup/memory.max") as fh:
            limit = fh.read().strip()
        with open("/sys/fs/cgroup/memory.current") as fh:
            used = int(fh.read().strip())
        if limit != "max":
            room = max(0, int(limit) - used)
            free = room if free is None else min(free, room)
    except (OSError, ValueError):
        pass
    return free


def check_workers_fit(corpus: Any, workers: int, memory_limit: int) -> None:
    """Refuse to start ``workers`` REPL workers on ``corpus`` that cannot fit.

    Raises:
        UsageError: one worker's ``context`` alone leaves less than the 64 MiB the worker needs
            free under ``memory_limit`` (``--memory-limit``, bytes: the worker would refuse to run
            once loaded), or the workers' peaks add up to more than :func:`available_memory`.
    """
    from rlm_cli.config_keys import format_size, limit_advice

    string = int(corpus.context_memory)
    width = int(corpus.char_width)
    wide = (f"; its files hold characters beyond U+{'FFFF' if width == 4 else '00FF'}, so every character takes "
            f"{width} bytes (`rlm stats` lists the files that do: --exclude them)" if width > 1 else "")
    if string + MIN_FREE_MEMORY > memory_limit:
        advise = limit_advice(limit_need(corpus))
        raise UsageError(f"--memory-limit {format_size(memory_limit)} is too small for this corpus: its context "
                         f"string alone takes {format_size(string)} in the REPL worker ({corpus.chars:,} characters"
                         f"{wide})", hint=f"use --memory-limit {advise} or more, or narrow the corpus")
    free = available_memory()
    need = workers * worker_need(corpus)
    if free is not None and need > free:
        each = f"{workers} REPL workers need {format_size(need)} at their peak" if workers > 1 else \
            f"the REPL worker needs {format_size(need)} at its peak"
        loads = ", twice that while it loads" if context_by_path(corpus.chars, width) else ""
        raise UsageError(f"this corpus does not fit in memory: {each} (its context string takes "
                         f"{format_size(string)}{loads}{wide}), and {format_size(free)} is "
                         "available", hint=("lower --jobs, " if workers > 1 else "") +
                         "narrow the corpus with --include/--exclude, or free memory")
