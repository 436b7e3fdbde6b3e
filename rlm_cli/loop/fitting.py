"""What the loop decides about one question before it runs: the mode (the corpus in the REPL or
in one direct call) and the question as sent (shortened to leave room for the turns). Pure
decisions over settings, the corpus description and token counts; ``rlm_cli.app.session`` and
``rlm_cli.loop.recursion`` call them."""

from __future__ import annotations

from rlm_cli.config import Settings
from rlm_cli.config_keys import CHOICES
from rlm_cli.corpus import Corpus
from rlm_cli.corpus.tokens import encoding
from rlm_cli.errors import UsageError
from rlm_cli.loop.meta import CorpusMeta, first_messages
from rlm_cli.loop.prompts import direct_prompt
from rlm_cli.models.detect import DEFAULT_WINDOW
from rlm_cli.models.window import input_budget, request_tokens

MODES = CHOICES["mode"]


def choose_mode(settings: Settings, corpus_tokens: int, root_window: int) -> tuple[str, str]:
    """``(mode, reason)``: ``rlm`` or ``direct``. ``auto`` goes direct when the corpus is under
    ``direct_max_tokens`` and under ``direct_max_fraction`` of the root model's input window.

    Raises:
        UsageError: ``settings.mode`` is not one of :data:`MODES`.
    """
    if settings.mode not in MODES:
        raise UsageError(f"unknown mode {settings.mode!r}", hint="use auto, rlm or direct")
    if settings.mode != "auto":
        return settings.mode, f"--mode {settings.mode}"
    limit = min(settings.direct_max_tokens, int(root_window * settings.direct_max_fraction))
    if corpus_tokens < limit:
        return "direct", (f"the corpus ({corpus_tokens:,} tokens) is under {limit:,} tokens, so it goes to the "
                          f"root model in one call")
    return "rlm", f"the corpus ({corpus_tokens:,} tokens) is over {limit:,} tokens, so it stays in the REPL"


def direct_tokens(corpus: Corpus, question: str) -> int:
    """Tokens a direct-mode request for ``question`` over ``corpus`` needs: the corpus, the
    prompt around it and about 12 tokens per file for its ``==> path <==`` header."""
    return corpus.total_tokens + request_tokens(direct_prompt(question, "")) + len(corpus.files) * 12


#: Share of the root model's input budget, after the system prompt and the corpus description,
#: that a question may take; the other half is left for the turns of the loop.
QUESTION_SHARE = 0.5
#: A question that must be cut to fewer tokens than this cannot be asked (exit 2).
MIN_QUESTION_TOKENS = 256


def fit_question(settings: Settings, question: str, meta: CorpusMeta, depth: int = 0,
                 session_note: str = "") -> tuple[str, str | None]:
    """``(question, note)``: the question as the loop at ``depth`` will send it, and a note for
    stderr when it had to be shortened (``None`` when it is sent whole). ``session_note`` (what a
    session tells the question of earlier ones) counts as part of the fixed prompt.

    Rule: a question may take at most :data:`QUESTION_SHARE` of the tokens the root model's input
    budget (``history.input_budget`` of ``settings.root_model_window``) leaves after the system
    prompt and the corpus description, so that a few turns still fit. A longer one keeps its
    head (two thirds) and its end (a third: the instruction after a pasted text usually comes
    last) around a marker that tells the model how much was cut; without it, ``History`` would
    cut the first message's end silently. Tokens are counted with ``o200k_base``.

    Raises:
        UsageError: the question is too long and less than :data:`MIN_QUESTION_TOKENS` tokens
            are left for it (a window too small for the loop at all).
    """
    window = settings.root_model_window or DEFAULT_WINDOW
    fixed = request_tokens(first_messages(settings, "", meta, depth, session_note))
    room = int((input_budget(window) - fixed) * QUESTION_SHARE)
    enc = encoding()
    ids = enc.encode_ordinary(question)
    if len(ids) <= room:
        return question, None
    if room < MIN_QUESTION_TOKENS:
        raise UsageError(f"the question ({len(ids):,} tokens) does not fit: the root model's input window of "
                         f"{window:,} tokens leaves {max(room, 0):,} tokens for it after the system prompt and the "
                         "corpus description, and half of the window for the turns",
                         hint="put long material in a file passed as a PATH and keep the question short, or use "
                              "a model with a larger window (--root-model-window)")
    marker = "\n\n[... {cut:,} characters of the question were cut here to fit the model's input window ...]\n\n"
    keep = room - len(enc.encode_ordinary(marker.format(cut=len(question))))
    head, tail = enc.decode(ids[:keep * 2 // 3]), enc.decode(ids[len(ids) - (keep - keep * 2 // 3):])
    cut = len(question) - len(head) - len(tail)
    note = (f"the question ({len(question):,} characters, {len(ids):,} tokens) was shortened to about {room:,} "
            f"tokens to fit the root model's input window of {window:,} tokens: its middle ({cut:,} characters) "
            "was cut, its beginning and end were kept (put long material in a file passed as a PATH instead)")
    return head + marker.format(cut=cut) + tail, note
