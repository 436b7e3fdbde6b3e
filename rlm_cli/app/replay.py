"""``rlm replay``: re-run a recorded trajectory's loop with the recorded model responses.

No provider is contacted: a :class:`ReplayClient` stands in for the litellm client and answers
each request with the recorded response of the same request (matched by ``request_key``: model
and messages), or else with the next unused recorded response of the same role and depth, in
recorded order. The code runs again in a fresh REPL, so a replay reproduces the answer as long as
the corpus has not changed (a run that read stdin needs the same stdin again).

A trajectory is input from whoever made it (a colleague's bug report): the replay takes from it
only the question, the responses and how the loop ran (:data:`LOOP_KEYS`). The sandbox level, its
limits and the models are the user's (flags, environment, config file; level ``none`` only from
the command line); the corpus is the PATHs of the command line, or, for a trajectory this user's
rlm wrote (:func:`provenance`: signed with their key, their file), its recorded paths and corpus
options. Each difference from the recording is said (:attr:`ReplayPlan.notices`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm_cli.config import CorpusOptions, Settings, resolve
from rlm_cli.config_keys import coerce
from rlm_cli.errors import ProviderError, UsageError
from rlm_cli.events import Emit, EventDict, ModeEvent, depth_of, event, is_type, of_type, whole
from rlm_cli.models.client import Completion, ModelClient, OnDelta
from rlm_cli.models.usage import CallRecord
from rlm_cli.output.trace import read_trace, request_key, signed_by_me
from rlm_cli.sandbox.level import Level


@dataclass
class Recorded:
    """One recorded model response."""

    role: str
    depth: int
    key: str
    text: str
    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    used: bool = False


def recorded_responses(events: list[EventDict]) -> list[Recorded]:
    """The model responses of a trajectory, in order: root calls (role ``root``) and sub-calls,
    including plain ``rlm_query`` fallbacks (role ``sub``). Tokens and cost are read as numbers
    only when they are finite ones (0 tokens and an unknown cost otherwise: the file is input)."""
    out = []
    for ev in events:
        if not (is_type(ev, "root_call") or is_type(ev, "sub_call")) or "response" not in ev:
            continue
        cost = ev.get("cost_usd")
        out.append(Recorded("root" if is_type(ev, "root_call") else "sub", depth_of(ev),
                            str(ev.get("request_key", "")), str(ev["response"]), str(ev.get("model", "")),
                            max(0, whole(ev.get("input_tokens"))), max(0, whole(ev.get("output_tokens"))),
                            float(cost) if isinstance(cost, (int, float)) and math.isfinite(cost) else None))
    return out


class ReplayClient(ModelClient):
    """A :class:`ModelClient` that answers from recorded responses and never imports litellm.

    Usage and budgets are counted as in the recorded run (its token and cost numbers).
    """

    def __init__(self, settings: Settings, responses: list[Recorded]) -> None:
        super().__init__(settings)
        self.responses = responses
        self._lock = threading.Lock()
        self.misses = 0

    def litellm(self) -> Any:  # noqa: D401 - never needed on replay
        raise ProviderError("replay does not call the provider")

    def complete(self, messages: list[dict[str, Any]], *, model: str, role: str, depth: int = 0,
                 on_delta: OnDelta | None = None, temperature: float | None = None) -> Completion:
        """The recorded response for this request (handed whole to ``on_delta`` when given;
        ``temperature`` changes nothing here).

        Raises:
            BudgetExceededError: a budget of the recorded settings is spent.
            ProviderError: no recorded response is left for this role and depth.
        """
        self.budget.check(sub_call=role == "sub")
        # The recorded model names are only part of the recorded keys: the replay's models are the user's.
        keys = {request_key(m, messages) for m in {model, *(r.model for r in self.responses if r.role == role)}}
        with self._lock:
            hit = next((r for r in self.responses if not r.used and r.role == role and r.key in keys), None)
            if hit is None:
                hit = next((r for r in self.responses if not r.used and r.role == role and r.depth == depth), None)
                self.misses += 1
            if hit is None:
                raise ProviderError(f"replay: the recording has no further {role} response at depth {depth}",
                                    hint="the corpus or the code's results changed since the recording")
            hit.used = True
        record = CallRecord(model, role, depth, hit.input_tokens, hit.output_tokens, hit.cost_usd, 0.0)
        self.usage.add(record)
        if on_delta is not None:
            on_delta(hit.text)
        return Completion(hit.text, record)


#: Recorded settings a replay takes from the trajectory: how the loop ran (turns, depth, mode,
#: policy, windows, budgets counted in the recorded tokens). Everything else (the sandbox level and
#: its limits, the models, the corpus, where anything is sent) is the user's: flags, environment,
#: config file. A trajectory is input from whoever made it.
LOOP_KEYS = ("max_iterations", "max_depth", "max_output_chars", "mode", "policy", "leads", "direct_max_tokens",
             "direct_max_fraction", "temperature", "root_model_window", "sub_model_window", "max_cost",
             "max_tokens", "max_sub_calls", "max_concurrency")
#: Corpus options compared with the recording (flag spelling for the notice).
CORPUS_FLAGS = {"hidden": "--hidden", "follow": "--follow", "no_ignore": "--no-ignore", "include": "--include",
                "exclude": "--exclude", "max_file_size": "--max-file-size", "truncate_large": "--truncate-large",
                "chunk_tokens": "--chunk-tokens"}
#: The model label of a replay when the user configured none: no provider is contacted.
REPLAY_MODEL = "replay"


def settings_from_header(header: dict[str, Any], mode_event: ModeEvent | None,
                         base: Settings | None = None) -> Settings:
    """The replay's :class:`Settings`: ``base`` (the user's: flags, environment, config file;
    default: the environment and config file) with the recorded run's loop settings
    (:data:`LOOP_KEYS`, the recorded mode and windows). No API key, api base, Router file or
    trajectory file: nothing is contacted or written."""
    settings = dataclasses.replace(base) if base is not None else resolve({})
    config = _dict(header.get("config"))
    types = {f.name: f.type for f in dataclasses.fields(Settings)}
    for key in LOOP_KEYS:
        if key in config:
            try:
                setattr(settings, key, None if config[key] is None else coerce(key, config[key], types[key],
                                                                                  "the trajectory"))
            except UsageError:
                continue  # a value this version would refuse: the user's own stays
    settings.api_key = settings.api_base = None
    settings.trace = settings.router_config = None
    settings.model = settings.model or REPLAY_MODEL
    if isinstance(mode_event, dict):
        if mode_event.get("mode") in ("rlm", "direct"):
            settings.mode = str(mode_event["mode"])
        settings.root_model_window = _window(mode_event.get("root_window")) or settings.root_model_window
        settings.sub_model_window = _window(mode_event.get("sub_window")) or settings.sub_model_window
    return settings


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _window(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 256 else None


@dataclass(frozen=True)
class Provenance:
    """Who wrote a trajectory: ``own`` when this user's rlm did (its header carries a valid
    signature of this user's key, ``trace.signed_by_me``, and the file is this user's);
    ``whose`` says otherwise whose it is, in words."""

    own: bool
    whose: str


def provenance(path: Path, header: dict[str, Any]) -> Provenance:
    """The :class:`Provenance` of the trajectory at ``path`` whose header is ``header``."""
    try:
        st = path.stat()
    except OSError:
        return Provenance(False, f"{path} cannot be examined")
    owner = _user_name(st.st_uid)
    if st.st_uid != os.geteuid():
        return Provenance(False, f"{path} belongs to {owner}, not to you ({_user_name(os.geteuid())})")
    if st.st_mode & 0o022:
        return Provenance(False, f"{path} is writable by other users (mode {st.st_mode & 0o777:o})")
    if not signed_by_me(header):
        return Provenance(False, f"{path} was not written by your rlm (no signature of yours: made elsewhere, "
                                 "by an older rlm, or edited)")
    return Provenance(True, "")


def _user_name(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


@dataclass
class ReplayPlan:
    """Everything needed to replay one trajectory."""

    path: Path
    settings: Settings
    paths: list[str]
    question: str
    recorded_answer: str | None
    responses: list[Recorded]
    #: The folder the run started in: file and glob paths are shown in ``context`` relative to it
    #: (only for a trajectory of the user's own; another's paths come from the command line).
    cwd: str | None = None
    #: Where the replay differs from the recording, and whose the file is: one warning each.
    notices: list[str] = dataclasses.field(default_factory=list)
    own: bool = True


def plan(path: Path, *, sandbox: str | None = None, base: Settings | None = None,
         paths: list[str] | None = None) -> ReplayPlan:
    """Read a trajectory and prepare its replay with the user's settings.

    ``base``: the user's settings (flags, environment, config file, corpus options from the
    flags; default: environment and config file); ``sandbox``: the level given on the command line
    (only there may it be ``none``); ``paths``: the PATHs given on the command line. Without them
    a trajectory of the user's own (:func:`provenance`) is replayed over its recorded paths and
    corpus options; another's needs them.

    Raises:
        UsageError: not a trajectory, no model response recorded, the sandbox level ``none`` from
            the environment or config file, or another's trajectory without PATHs.
    """
    events = read_trace(path)
    header = events[0]
    mode_event = next(of_type(events, "mode"), None)
    settings = settings_from_header(header, mode_event, base)
    if sandbox:
        settings.sandbox = sandbox
    elif _unconfined(settings.sandbox):
        raise UsageError(f"rlm replay runs the recorded code: sandbox level {settings.sandbox} is taken only from "
                         "its command line, not from RLM_SANDBOX or the config file",
                         hint=f"give --sandbox {settings.sandbox} to run it unconfined, or --sandbox auto")
    summary = next(of_type(reversed(events), "summary"), None)
    responses = recorded_responses(events)
    if not responses:
        raise UsageError(f"{path} recorded no model response; nothing to replay")
    who = provenance(path, header)
    given = header.get("paths")
    recorded_paths = [p for p in given if isinstance(p, str)] if isinstance(given, list) else []
    recorded_corpus = _dict(_dict(header.get("config")).get("corpus"))
    notices = [] if who.own else [f"{who.whose}: it is replayed as input from elsewhere, with your sandbox, "
                                  "corpus and models, never its own"]
    cwd = None
    if who.own and not paths:  # the user's own run: the paths and corpus options they gave it
        paths, cwd = recorded_paths, str(header["cwd"]) if header.get("cwd") else None
        settings.corpus = _recorded_corpus(settings.corpus, recorded_corpus)
    elif not paths:
        shown = " ".join(shlex.quote(p) for p in recorded_paths) or "PATH..."
        raise UsageError(f"{who.whose}; rlm replay reads such a trajectory's corpus only from paths given on its "
                         f"command line (it recorded: {shown})",
                         hint=f"check them, then: rlm replay {shlex.quote(str(path))} {shown}")
    notices += _differences(header, settings, recorded_paths, paths, recorded_corpus)
    return ReplayPlan(path, settings, list(paths), str(header.get("question", "")),
                      None if summary is None else str(summary.get("answer", "")), responses, cwd, notices, who.own)


def _recorded_corpus(current: CorpusOptions, recorded: dict[str, Any]) -> CorpusOptions:
    """``current`` with the recorded corpus options of the user's own run (known fields only)."""
    known = {f.name for f in dataclasses.fields(CorpusOptions)} - {"use_cache", "decode_timeout", "decode_memory"}
    values = {k: v for k, v in recorded.items() if k in known and isinstance(v, type(getattr(current, k)))}
    return dataclasses.replace(current, **values)


def _differences(header: dict[str, Any], settings: Settings, recorded_paths: list[str], paths: list[str],
                 recorded_corpus: dict[str, Any]) -> list[str]:
    """One notice per setting of the replay that differs from the recording: sandbox level,
    paths, corpus options (with the flags that would use the recorded ones)."""
    out = []
    level = _dict(header.get("config")).get("sandbox")
    if isinstance(level, str) and level != settings.sandbox:
        out.append(f"the recording ran at sandbox level {level!r}; this replay runs at {settings.sandbox!r} "
                   "(--sandbox LEVEL on the command line chooses)")
    mine = [p if p == "-" else os.path.abspath(p) for p in paths]
    if recorded_paths and sorted(mine) != sorted(recorded_paths):
        out.append(f"the recording read {', '.join(recorded_paths)}; this replay reads {', '.join(mine)}")
    flags = []
    for key, flag in CORPUS_FLAGS.items():
        if key in recorded_corpus and recorded_corpus[key] != getattr(settings.corpus, key):
            value = recorded_corpus[key]
            flags += ([flag] if value is True else [f"{flag} {shlex.quote(str(v))}" for v in value]
                      if isinstance(value, list) else [] if value is False else [f"{flag} {value}"])
    if flags:
        out.append(f"the recording read its corpus with other options; this replay uses yours (to use the "
                   f"recorded ones, give them: {' '.join(flags)})")
    return out


def replay(p: ReplayPlan, *, emit: Emit, stdin_bytes: bytes | None = None) -> Any:
    """Run the loop of plan ``p`` again against its recorded responses; returns the runner's
    ``AskOutcome`` (its trajectory is not written).

    Raises:
        the same errors as ``runner.ask``; ``ProviderError`` when the recording runs out.
    """
    from rlm_cli.app import runner

    if "-" in p.paths and stdin_bytes is None:
        raise UsageError("the recorded run read its corpus from stdin", hint="pipe the same input into rlm replay")
    client = ReplayClient(p.settings, p.responses)
    started = time.monotonic()
    here = os.getcwd()
    for notice in p.notices:
        emit(event("notice", 0, level="warning", message=notice))
    if p.cwd and p.cwd != here:  # the same folder as the recorded run, so context's paths are the same
        try:
            os.chdir(p.cwd)
        except OSError:
            emit(event("notice", 0, level="warning", message=f"the recorded run's folder {p.cwd} is gone: paths "
                                                               "in context may differ, and so may the answer"))
    try:
        outcome = runner.ask(p.settings, p.paths, p.question, emit=emit, stdin_bytes=stdin_bytes, client=client,
                             record=False)
    finally:
        os.chdir(here)
    outcome.usage["replay_s"] = round(time.monotonic() - started, 3)
    return outcome


def _unconfined(name: str) -> bool:
    """Whether the sandbox setting ``name`` is a level that leaves the worker unconfined
    (:attr:`Level.confined` false: ``none``); ``auto`` and unknown names are not."""
    try:
        return not Level(name).confined
    except ValueError:
        return False
