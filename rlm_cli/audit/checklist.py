"""The audit checklist: a TOML file of ``[[check]]`` tables, read and checked before anything loads.

Each check has an ``id`` (letters, digits, ``.``, ``_``, ``-``; unique), a ``question``, a
``type`` (an answer type of ``rlm_cli.loop.typed``: ``text`` by default), at most one
expectation, a ``severity`` (``error`` by default, ``warning`` or ``note``) and optionally
``include``/``exclude`` globs (gitignore syntax: the files the check is about), a ``model`` (the
root model for this check) and ``max_cost`` (USD for this check). The expectations:

========== ================================ ======================================================
field      types                            passes when
========== ================================ ======================================================
``expect`` every type but ``text``           the value equals it (``expect = false``)
``equals`` every type                        the same as ``expect`` (one of the two)
``max``    int, number; list, locations      the value (or, for a list, its length) is at most it
``min``    int, number; list, locations      ... at least it (``min`` and ``max`` may go together)
``empty``  list, locations                   ``true``: no item; ``false``: some
========== ================================ ======================================================

A check without an expectation passes once it is answered with a well-typed value (it informs).
Every mistake is a :class:`~rlm_cli.errors.UsageError` (exit 2) naming the file, the check and
the field.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlm_cli.answer_types import NAMES, AnswerType
from rlm_cli.errors import UsageError

if TYPE_CHECKING:
    from rlm_cli.config import Settings
    from rlm_cli.models.backend import Backend

#: The checklist read when ``--checklist`` is not given: at the root of the first PATH.
DEFAULT_NAME = "rlm-audit.toml"
SEVERITIES = ("error", "warning", "note")
FIELDS = ("id", "question", "type", "expect", "equals", "max", "min", "empty", "severity", "include", "exclude",
          "model", "max_cost", "description")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}\Z")  # \Z: "$" would let an id end in a newline
#: Which expectations each type takes.
_EXPECTS: dict[AnswerType, tuple[str, ...]] = {
    AnswerType.TEXT: ("equals",), AnswerType.BOOL: ("expect", "equals"),
    AnswerType.INT: ("expect", "equals", "max", "min"), AnswerType.NUMBER: ("expect", "equals", "max", "min"),
    AnswerType.LIST: ("expect", "equals", "max", "min", "empty"),
    AnswerType.LOCATIONS: ("expect", "equals", "max", "min", "empty"), AnswerType.JSON: ("expect", "equals"),
}


@dataclass(frozen=True)
class Check:
    """One check of a checklist (see the module docstring); ``expect`` holds ``expect``/``equals``
    (``has_expect`` says whether one was given: ``false`` and ``0`` are values), ``line`` is
    where its ``id`` is in the file (1-based; 0 when unknown)."""

    id: str
    question: str
    type: AnswerType = AnswerType.TEXT
    severity: str = "error"
    expect: Any = None
    has_expect: bool = False
    max: float | None = None
    min: float | None = None
    empty: bool | None = None
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    model: str | None = None
    max_cost: float | None = None
    description: str = ""
    line: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", AnswerType(self.type))  # a type given by its name

    def expectation(self) -> str:
        """The expectation in words, as the reports show it (``""``: none)."""
        parts = []
        if self.has_expect:
            parts.append(f"equals {_shown(self.expect)}")
        what = "count" if self.type.counted else "value"
        if self.min is not None:
            parts.append(f"{what} >= {_shown(self.min)}")
        if self.max is not None:
            parts.append(f"{what} <= {_shown(self.max)}")
        if self.empty is not None:
            parts.append("empty" if self.empty else "not empty")
        return ", ".join(parts)


def _shown(value: object) -> str:
    import json

    return json.dumps(value, ensure_ascii=False) if not isinstance(value, float) or not value.is_integer() \
        else str(int(value))


@dataclass(frozen=True)
class Checklist:
    """The checks of one checklist file (``path``), in file order."""

    path: Path
    checks: tuple[Check, ...] = field(default_factory=tuple)


def default_path(paths: list[str]) -> Path:
    """Where the checklist is when ``--checklist`` is not given: ``rlm-audit.toml`` at the root of
    the first PATH (its folder when it is a file or a glob)."""
    first = paths[0] if paths else "."
    root = Path(first)
    if not root.is_dir():
        root = root.parent if root.exists() else Path(re.split(r"[*?\[]", first)[0] or ".").parent
    return root / DEFAULT_NAME


def read_checklist(path: Path) -> Checklist:
    """The checklist in ``path``.

    Raises:
        UsageError: the file is missing, unreadable, not TOML, or a check is wrong (the message
            names the check and the field).
    """
    import tomllib

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read the checklist {path}: {exc.strerror or exc}",
                         hint="give --checklist FILE, or write rlm-audit.toml at the root of the first PATH "
                              "(docs/audit.md has an example)") from None
    try:
        text = data.decode("utf-8-sig")
        table = tomllib.loads(text)
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text", hint="save the checklist as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML ({exc})") from None
    unknown = sorted(set(table) - {"check"})
    if unknown:
        raise UsageError(f"{path}: unknown table or key {unknown[0]!r}", hint="a checklist is [[check]] tables")
    rows = table.get("check")
    if not isinstance(rows, list) or not rows:
        raise UsageError(f"{path}: no [[check]] table", hint="each check is a [[check]] table with id and question")
    lines = _id_lines(text)
    checks: list[Check] = []
    for n, row in enumerate(rows, 1):
        check = parse_check(row, n, str(path))
        if any(c.id == check.id for c in checks):
            raise UsageError(f"{path}: two checks have the id {check.id!r}", hint="give each check its own id")
        checks.append(Check(**{**check.__dict__, "line": lines.get(check.id, 0)}))
    return Checklist(path, tuple(checks))


def admit(checklist: Checklist, settings: Settings, *, allow_models: bool, max_checks: int) -> None:
    """Refuse, before anything loads, a checklist the invoker did not allow: more than
    ``max_checks`` checks (``--max-checks``), or a check whose ``model`` is not one the invoker
    named (``settings.model``/``sub_model``: ``--model``, ``--sub-model``, ``RLM_MODEL``, the
    config file; or a model group of ``--router-config``) unless ``allow_models``
    (``--allow-checklist-models``), and even then one that holds a URL (``://``, as
    ``huggingface/https://host`` would make litellm send that provider's key there) or a
    control character. The checklist comes with the code audited, which may be a
    pull request's: it chooses questions, never where the code and the key go.

    Raises:
        UsageError: too many checks, or the first check with a model not named (exit 2).
    """
    n = len(checklist.checks)
    if n > max_checks:
        raise UsageError(f"{checklist.path}: {n:,} checks, over --max-checks {max_checks:,}",
                         hint="raise --max-checks N if the checklist is meant to be that long")
    named = {settings.model, settings.sub_model} | set(router_groups(settings))
    for check in checklist.checks:
        model = check.model
        if model is None or model in named:
            continue
        if "://" in model or not model.isprintable():
            raise UsageError(f"{checklist.path}: check {check.id!r}: field 'model' holds a URL or a control "
                             f"character ({model[:100]!r}): a checklist may name a model, never where it is served")
        if not allow_models:
            raise UsageError(f"{checklist.path}: check {check.id!r} names the model {model[:100]!r}, which this run "
                             "was not given: name it with --model or --sub-model (or the config file, RLM_MODEL, "
                             "a group of --router-config), or pass --allow-checklist-models")


def router_groups(settings: Settings) -> list[str]:
    """The model groups of ``settings.router_config`` (``[]`` without one; read without litellm).

    Raises:
        UsageError: the file is unreadable or invalid.
    """
    if not settings.router_config:
        return []
    from rlm_cli.models.router_file import read_router_file

    return [str(d["model_name"]) for d in read_router_file(settings.router_config)[0]]


def check_credentials(checklist: Checklist, settings: Settings, backend: Backend | None) -> None:
    """Check, once and before anything loads, that every model the audit will call (the root and
    sub-model as given, each check's ``model``) has a key (``models.keys.missing_credentials``).

    Raises:
        NoModelError: the first model without one (exit 3), naming the variables it lacks.
        UsageError: an invalid ``--router-config`` file.
    """
    from rlm_cli.errors import NoModelError
    from rlm_cli.models.keys import missing_credentials

    users: dict[str, list[str]] = {}
    for model, who in [(settings.model, "the root model"), (settings.sub_model, "the sub-model"),
                       *((c.model, f"check {c.id}") for c in checklist.checks)]:
        if model:
            users.setdefault(model, []).append(who)
    missing = missing_credentials(users, named=(settings.model, settings.effective_sub_model),
                                  api_key=settings.api_key, api_base=settings.api_base, backend=backend,
                                  router_groups=router_groups(settings))
    if missing:
        model, names = missing[0]
        uses = users[model]
        shown = ", ".join(uses[:3]) + (f" and {len(uses) - 3} more" if len(uses) > 3 else "")
        more = f" ({len(missing) - 1} more model(s) lack one too)" if len(missing) > 1 else ""
        name = model[:100] if model.isprintable() else repr(model[:100])  # a checklist's: no control characters
        raise NoModelError(f"no API key for {name} ({shown}): {' or '.join(names)} is not set{more}; no check ran",
                           hint=f"export {names[0]} or give --api-key; a fork's pull request gets no secrets")


def _id_lines(text: str) -> dict[str, int]:
    """``id -> line`` of each ``id = "..."`` line of the file (1-based)."""
    out: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"""\s*id\s*=\s*(["'])(.*?)\1""", line)
        if m:
            out.setdefault(m.group(2), n)
    return out


def parse_check(row: object, n: int, where: str) -> Check:
    """Check ``n`` (1-based) of the file ``where``, from its TOML table ``row``.

    Raises:
        UsageError: a missing, unknown or badly typed field, or an expectation its type does not
            take (the message names the check and the field).
    """
    if not isinstance(row, dict):
        raise UsageError(f"{where}: check {n} is not a table")
    cid = row.get("id")
    if not isinstance(cid, str) or not _ID.match(cid):
        raise UsageError(f"{where}: check {n}: field 'id' must be a name of letters, digits, '.', '_' or '-'"
                         + ("" if cid is None else f" (not {cid!r})"))

    def bad(name: str, why: str) -> UsageError:
        return UsageError(f"{where}: check {cid!r}: field {name!r} {why}")

    for name in row:
        if name not in FIELDS:
            return_hint = f"the fields are {', '.join(FIELDS)}"
            raise UsageError(f"{where}: check {cid!r}: unknown field {name!r}", hint=return_hint)
    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        raise bad("question", "must be the question (a non-empty string)")
    if row.get("type", AnswerType.TEXT) not in NAMES:
        raise bad("type", f"must be one of {', '.join(NAMES)} (not {row.get('type')!r})")
    kind = AnswerType(row.get("type", AnswerType.TEXT))
    severity = row.get("severity", "error")
    if severity not in SEVERITIES:
        raise bad("severity", f"must be one of {', '.join(SEVERITIES)} (not {severity!r})")
    for name in ("expect", "equals", "max", "min", "empty"):
        if name in row and name not in _EXPECTS[kind]:
            raise bad(name, f"does not apply to type {kind} (it takes {', '.join(_EXPECTS[kind])})")
    if "expect" in row and "equals" in row:
        raise bad("equals", "and 'expect' say the same: give one")
    has_expect = "expect" in row or "equals" in row
    expect = row.get("expect", row.get("equals"))
    if has_expect and not kind.fits(expect):
        raise bad("expect" if "expect" in row else "equals", f"must be a {kind.value_words} for type {kind} "
                                                             f"(not {expect!r})")
    odd = _not_json(expect) if has_expect else None
    if odd:
        raise bad("expect" if "expect" in row else "equals", f"holds {odd}, which no answer can be "
                                                             "(answers are JSON): write it as a string")
    bounds = {}
    for name in ("max", "min"):
        value = row.get(name)
        if value is None:
            continue
        counted = kind.counted
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or (
                counted and (not isinstance(value, int) or value < 0)):
            raise bad(name, "must be a count (a whole number, 0 or more)" if counted else "must be a finite number")
        bounds[name] = value
    if "min" in bounds and "max" in bounds and bounds["min"] > bounds["max"]:
        raise bad("min", f"is over 'max' ({bounds['min']} > {bounds['max']}): no value could pass")
    empty = row.get("empty")
    if empty is not None and not isinstance(empty, bool):
        raise bad("empty", "must be true or false")
    include, exclude = _globs(row, "include", bad), _globs(row, "exclude", bad)
    model = row.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise bad("model", "must be a litellm model string")
    max_cost = row.get("max_cost")
    if max_cost is not None and (isinstance(max_cost, bool) or not isinstance(max_cost, (int, float))
                                 or not math.isfinite(max_cost) or max_cost < 0):
        raise bad("max_cost", "must be a number of USD, 0 or more")
    description = row.get("description", "")
    if not isinstance(description, str):
        raise bad("description", "must be a string")
    return Check(cid, question.strip(), kind, severity, expect, has_expect, bounds.get("max"), bounds.get("min"),
                 empty, include, exclude, model, None if max_cost is None else float(max_cost), description)


def _not_json(value: object) -> str | None:
    """What in the TOML value ``value`` (an expectation) JSON cannot hold, in words, or ``None``:
    a date or time (``tomllib`` reads them as ``datetime`` objects), or ``nan``/``inf``."""
    if isinstance(value, (datetime.date, datetime.time)):  # datetime.datetime is a date
        return "a TOML date or time"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan or inf"
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return next((odd for odd in map(_not_json, items) if odd), None)


def _globs(row: dict[str, Any], name: str, bad: Callable[[str, str], Exception]) -> tuple[str, ...]:
    value = row.get(name)
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise bad(name, "must be a glob or a list of globs")
    from rlm_cli.corpus.ignore import compile_rules

    try:
        compile_rules(value, name)  # read before anything loads, not once the check runs
    except UsageError as exc:
        raise bad(name, f"holds a pattern that is not a gitignore glob ({exc})") from None
    return tuple(value)
