"""Loop policies: which answer checks and weak-model aids a run uses (``--policy``).

* ``paper``: the loop of the RLM paper (Zhang, Kraska and Khattab): every block of a reply runs,
  ``FINAL``/``FINAL_VAR`` in a block or on a line of the text ends the run, and at the
  iteration limit one last call asks for the answer. Nothing else.
* ``standard``: ``paper`` plus general verifiers, each at most once per run (the checks
  ``evidence``, ``empty``, ``ungrounded`` and ``default_cap``; see ``rlm_cli.loop.checks``),
  blocks stop at the first that fails, and a repeated error is pointed out.
* ``guided``: for small or local models: ``standard`` plus the weak-model aids: ``leads`` before
  the first turn, text that claims a block's output cut from the history, prose replies and
  ``Final answer:`` lines taken as answers, notes on repeated code (and a resampled call, and a
  plain ask for the answer when the model is stuck), the checks ``nothing_found`` and
  ``listed_items``, ``ungrounded`` strict (any specific token or number of a written-out answer
  that was never shown), and ``evidence`` sending back up to three times.
* ``auto`` (default): ``standard`` when the root model's input window is known (litellm's model
  info or ``--root-model-window``) and at least :data:`AUTO_STANDARD_WINDOW` tokens, else
  ``guided``: a model litellm does not know is most often a small local one.

A strong model that answers right in the fewest calls pays no extra root call under
``standard``: every check stays silent on a grounded answer (``tests/loop/test_strong_model.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlm_cli.loop.checks import CHECKS, Check, DefaultCap, Empty, Evidence, ListedItems, NothingFound, Ungrounded

POLICIES = ("auto", "paper", "standard", "guided")
#: ``auto`` picks ``standard`` from this input window up (tokens): a window that size belongs to
#: a hosted or large model; local models served with 4k-16k windows are the ones that need aids.
AUTO_STANDARD_WINDOW = 32_768


@dataclass(frozen=True)
class Policy:
    """A preset of the loop's rules.

    ``checks``: the answer checks in order (names of ``checks.CHECKS``). ``leads``: run
    ``leads(question)`` before the first root call (``--leads/--no-leads`` overrides).
    ``stop_at_error``: a reply's blocks stop at the first that fails. ``error_notes``: an error
    repeated from the previous turn is pointed out. ``claimed_output``: text after a block that
    claims its output is cut (later blocks do not run). ``prose_answers``: a prose reply may be
    the answer (the second in a row, the same one again, one quoting the leads on turn 1), and a
    ``Final answer: ...`` line is a FINAL. ``repeats``: code run before is pointed out, the next
    call resampled, and a model stuck on it asked for its answer. ``support_retry``: an answer a
    check objected to, given again though nothing the model read supports it (``unsupported``),
    earns one last request to show it with code before the run ends on it (at most one root
    call: a reply without an answer ends the run on the answer held).
    """

    name: str
    checks: tuple[str, ...] = ()
    leads: bool = False
    stop_at_error: bool = False
    error_notes: bool = False
    claimed_output: bool = False
    prose_answers: bool = False
    repeats: bool = False
    support_retry: bool = False

    @property
    def number_floor(self) -> float:
        """The smallest number that counts as a specific token of an answer (``ungrounded`` and
        the support verdict): 0 under ``guided`` (small models invent small counts), else 10 (a
        strong model reads a small count off a few lines by eye)."""
        return 0 if self.name == "guided" else 10

    def make_checks(self) -> list[Check]:
        """Fresh check instances for one run, with this policy's limits."""
        out: list[Check] = []
        for name in self.checks:
            if name == "evidence":
                out.append(Evidence(limit=3 if self.name == "guided" else 1))
            elif name == "ungrounded":
                guided = self.name == "guided"
                out.append(Ungrounded(limit=2 if guided else 1, min_number=self.number_floor, strict=guided,
                                      prune=guided))
            elif name == "listed_items":
                out.append(ListedItems())
            else:
                out.append(CHECKS[name]())
        return out


PAPER = Policy("paper")
STANDARD = Policy("standard", checks=(Evidence.name, Empty.name, Ungrounded.name, DefaultCap.name),
                  stop_at_error=True, error_notes=True)
GUIDED = Policy("guided", checks=(*STANDARD.checks, NothingFound.name, ListedItems.name), leads=True,
                stop_at_error=True, error_notes=True, claimed_output=True, prose_answers=True, repeats=True,
                support_retry=True)
PRESETS = {p.name: p for p in (PAPER, STANDARD, GUIDED)}


def resolve_policy(requested: str, window: int | None, window_source: str = "flag") -> tuple[Policy, str]:
    """``(policy, reason)`` for ``--policy requested`` with a root model whose input window is
    ``window`` tokens, known from ``window_source`` (``flag``, ``model info``, or ``default``
    when litellm does not know the model).

    Raises:
        ValueError: ``requested`` is not one of :data:`POLICIES`.
    """
    if requested in PRESETS:
        return PRESETS[requested], f"--policy {requested}"
    if requested != "auto":
        raise ValueError(f"unknown policy {requested!r}; choose from {', '.join(POLICIES)}")
    if window is None or window_source == "default":
        return GUIDED, ("auto: the root model's input window is unknown (no model info for it; --root-model-window gives it), "
                        "so the aids for small and local models are on")
    if window >= AUTO_STANDARD_WINDOW:
        return STANDARD, f"auto: the root model's input window ({window:,} tokens) is at least {AUTO_STANDARD_WINDOW:,}"
    return GUIDED, f"auto: the root model's input window ({window:,} tokens) is under {AUTO_STANDARD_WINDOW:,}"
