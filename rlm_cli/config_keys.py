"""The rules of the settings' values: the words a key takes (:data:`CHOICES`), sizes in bytes
(:func:`parse_size`, :func:`format_size`), the limits of the memory settings and the API base, and
:func:`coerce`, which types a value from a config file, the environment or ``rlm config set``,
and :func:`untrusted_file`, whether a config file's ``stat`` lets someone else write its values.

Nothing here reads a file or the environment; ``rlm_cli.config`` resolves the settings.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from rlm_cli.errors import UsageError

#: The default address-space limit of the REPL worker (``Settings.memory_limit``), in bytes.
DEFAULT_MEMORY_LIMIT = 4 * 1024**3
#: The default address-space limit of the document decoder (``decode_memory``), in bytes.
DEFAULT_DECODE_MEMORY = 2 * 1024**3

#: Settings that take one of a fixed set of words.
CHOICES: dict[str, tuple[str, ...]] = {
    "sandbox": ("auto", "bwrap", "sandbox-exec", "process", "none"),
    "mode": ("auto", "rlm", "direct"),
    "policy": ("auto", "paper", "standard", "guided"),
}


def check_choice(key: str, value: Any, source: str = "") -> str:
    """``value`` as one of the words ``CHOICES[key]`` allows (lower-cased).

    Raises:
        UsageError: another word; the message names ``source`` (a flag, env var or the file).
    """
    word = str(value).strip().lower()
    if word not in CHOICES[key]:
        where = f" (from {source})" if source else ""
        raise UsageError(f"setting {key!r} has a bad value {value!r}{where}",
                         hint=f"use one of {', '.join(CHOICES[key])}")
    return word


SIZE_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1024**2, "MB": 1024**2, "MIB": 1024**2,
               "G": 1024**3, "GB": 1024**3, "GIB": 1024**3, "T": 1024**4, "TB": 1024**4, "TIB": 1024**4}
#: Settings given in bytes, which also take sizes such as ``4G`` (in flags, env and config file).
SIZE_KEYS = frozenset({"memory_limit", "decode_memory"})


def parse_size(text: str, flag: str) -> int:
    """Parse ``4G``, ``512M``, ``10MB``, ``1.5g``, ``123`` (bytes) into bytes (units of 1024).

    Raises:
        UsageError: not a positive size; the message names ``flag``.
    """
    raw = str(text).strip().upper()
    num = raw.rstrip("KMGTIB")
    unit = raw[len(num):]
    try:
        value = float(num)
    except ValueError:
        value = -1
    if not value > 0 or value == float("inf") or unit not in SIZE_UNITS:
        raise UsageError(f"{flag}: {text!r} is not a size", hint="use a number with K, M, G or T, e.g. 4G")
    return int(value * SIZE_UNITS[unit])


def format_size(value: float) -> str:
    """Bytes the way sizes are typed: ``4G``, ``40M``, ``1.5G``, ``512K``, ``100`` (units of 1024)."""
    for unit, size in (("T", 1024**4), ("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if value >= size:
            n = value / size
            return f"{n:.4g}{unit}" if n < 10_000 else f"{n:.0f}{unit}"
    return f"{value:.0f}"


def limit_advice(nbytes: float) -> str:
    """A ``--memory-limit`` value of at least ``nbytes`` bytes, as a flag takes it: rounded up to
    64 MiB, in whole ``G`` when that is exact, else in ``M`` (``2944M``, ``3G``; no separators)."""
    mib = -(-int(nbytes) // (64 * 1024**2)) * 64
    return f"{mib // 1024}G" if mib % 1024 == 0 else f"{mib}M"


def check_memory_limit(value: int, source: str = "--memory-limit") -> int:
    """``value`` (bytes) if it can be a worker's address-space limit.

    Raises:
        UsageError: at most the 64 MiB the worker needs free once loaded
            (``protocol.MIN_FREE_MEMORY``), or beyond what ``setrlimit`` takes (2**62 here).
    """
    from rlm_cli.protocol import MIN_FREE_MEMORY

    shown = format_size(value)
    if value <= MIN_FREE_MEMORY:
        raise UsageError(f"{source} {shown} is too small: the REPL worker needs 64 MiB free beyond what the "
                         "loaded corpus takes", hint=f"the default is {format_size(DEFAULT_MEMORY_LIMIT)}; give "
                                                  "at least 128M plus what context takes, which `rlm stats` shows")
    if value >= 2**62:
        raise UsageError(f"{source} {shown} is too large", hint="give a size such as 16G")
    return value


def check_api_base(value: str, source: str = "") -> str:
    """``value`` when it is an ``http://`` or ``https://`` URL with a host.

    Raises:
        UsageError: anything else (``notaurl``, ``localhost:8000`` without a scheme); the message
            shows the value with any password replaced by ``***``.
    """
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value.strip())
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # e.g. a bad IPv6 literal or port
        ok = False
    if not ok:
        where = f" (from {source})" if source else ""
        raise UsageError(f"setting 'api_base' has a bad value {redact_url(value)!r}{where}: not an http(s) URL",
                         hint="give the server's base URL, e.g. http://127.0.0.1:8000/v1")
    return value.strip()


#: The least ``--decode-memory``: the decoder's interpreter and pypdf take about 60 MiB of address space.
MIN_DECODE_MEMORY = 128 * 1024**2


def check_decode_memory(value: int, source: str = "--decode-memory") -> int:
    """``value`` (bytes) if it can be the document decoder's address-space limit.

    Raises:
        UsageError: under :data:`MIN_DECODE_MEMORY`, or beyond what ``setrlimit`` takes (2**62 here).
    """
    if value < MIN_DECODE_MEMORY:
        raise UsageError(f"{source} {format_size(value)} is too small: the document decoder needs at least "
                         f"{format_size(MIN_DECODE_MEMORY)}", hint="the default is "
                                                                  f"{format_size(DEFAULT_DECODE_MEMORY)}")
    if value >= 2**62:
        raise UsageError(f"{source} {format_size(value)} is too large", hint="give a size such as 4G")
    return value


#: Numeric settings that must be above zero (the others must be zero or more).
POSITIVE = frozenset({"max_iterations", "max_depth", "max_output_chars", "cell_timeout", "memory_limit",
                       "max_concurrency", "request_timeout", "timeout", "sub_model_window",
                       "root_model_window", "direct_max_tokens", "decode_timeout", "decode_memory"})


#: The most a setting may be where the operating system takes it: seconds of a wait (Python's
#: waits take under 2**63 ns, about 292 years; 10**9 s is about 31) and the sub-calls at once (the
#: model relay's listen backlog is a C int).
MAX_VALUES: dict[str, int] = {"cell_timeout": 10**9, "request_timeout": 10**9, "timeout": 10**9,
                              "decode_timeout": 10**9, "max_concurrency": 2**31 - 1}


def check_flag(key: str, value: object) -> object:
    """A flag's ``value`` as the setting ``key`` takes it: a word setting checked against its
    :data:`CHOICES`, ``--memory-limit`` against the floor, ``--api-base`` as a URL, and a number
    that is not finite (``--timeout inf``, ``--max-cost nan``) or over :data:`MAX_VALUES`
    (``--cell-timeout 1e12``) refused; typer has checked each flag's type and minimum.

    Raises:
        UsageError: the value is none the setting can take (one line naming the flag).
    """
    if key in CHOICES:
        return check_choice(key, value, f"--{key}")
    if key == "memory_limit" and isinstance(value, int):
        return check_memory_limit(value)
    if key == "api_base" and str(value).strip():
        return check_api_base(str(value), "--api-base")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        most = MAX_VALUES.get(key)
        if not math.isfinite(value) or (most is not None and value > most):
            bound = f" of at most {most:,}" if most is not None else ""
            raise UsageError(f"--{key.replace('_', '-')} must be a finite number{bound}, not {value!r}")
    return value


def redact_url(url: str | None) -> str | None:
    """``url`` with any ``user:password@`` part replaced by ``***@`` (``None`` stays ``None``)."""
    if not url:
        return url
    return re.sub(r"(?<=://)[^/@\s]+@", "***@", url)


def coerce(key: str, value: Any, annotation: Any, source: str = "") -> Any:
    """``value`` (from a config file, the environment or ``rlm config set``) typed and checked for
    the setting ``key`` whose annotation is ``annotation`` (a ``Settings`` field's type, as text):
    a word of :data:`CHOICES`, an http(s) URL, a size, a bool (``yes``/``off``...), a number, a
    path (``~`` expanded) or a string.

    Raises:
        UsageError: a bad value; the message names ``source``.
    """
    text = str(annotation)
    where = f" (from {source})" if source else ""
    if key in CHOICES:
        return check_choice(key, value, source)
    if key == "api_base" and (not isinstance(value, str) or value.strip()):  # a TOML list is no URL either
        return check_api_base(str(value), source)
    if key in SIZE_KEYS and isinstance(value, str):
        check = check_decode_memory if key == "decode_memory" else check_memory_limit
        return check(parse_size(value, f"setting {key!r}{where}"), f"setting {key!r}{where}")
    try:
        if "bool" in text:
            if isinstance(value, bool):
                return value
            word = str(value).strip().lower()
            if word in ("1", "true", "yes", "on"):
                return True
            if word in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if "int" in text and "float" not in text:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            number: Any = int(value)
        elif "float" in text:
            number = float(value)
        elif "Path" in text:
            return Path(str(value)).expanduser()
        else:
            return str(value)
        if not math.isfinite(number):  # TOML's nan and inf
            raise ValueError(value)
    except (TypeError, ValueError):
        raise UsageError(f"setting {key!r} has a bad value {value!r}{where}") from None
    if number > MAX_VALUES.get(key, math.inf):
        raise UsageError(f"setting {key!r} must be at most {MAX_VALUES[key]:,}, not {value!r}{where}")
    if number < 0 or (number == 0 and key in POSITIVE):
        raise UsageError(f"setting {key!r} must be {'positive' if key in POSITIVE else 'zero or more'}, "
                         f"not {value!r}")
    if key == "memory_limit":
        check_memory_limit(int(number), f"setting {key!r}{where}")
    if key == "decode_memory":
        check_decode_memory(int(number), f"setting {key!r}{where}")
    return number


def untrusted_file(st: os.stat_result) -> str | None:
    """Why a file with ``stat`` result ``st`` may hold someone else's words, or ``None``: owned by a
    user other than this one or root, writable by others, or writable by a group other than the
    owner's own private group (the owner's primary group, with no other members: umask 002)."""
    if not hasattr(os, "geteuid"):
        return None
    if st.st_uid not in (os.geteuid(), 0):
        return f"it belongs to {_user(st.st_uid)}, not to you"
    if st.st_mode & 0o002 or st.st_mode & 0o020 and not _private_group(st.st_uid, st.st_gid):
        return f"other users may write it (mode {st.st_mode & 0o777:o})"
    return None


def _user(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _private_group(uid: int, gid: int) -> bool:
    """Whether ``gid`` is user ``uid``'s primary group and lists no other member."""
    try:
        import grp
        import pwd

        return pwd.getpwuid(uid).pw_gid == gid and not [m for m in grp.getgrgid(gid).gr_mem
                                                        if m != pwd.getpwuid(uid).pw_name]
    except (ImportError, KeyError):
        return False
