"""The records every eval family builds: a question (:class:`Task`), an in-memory change of the
corpus (:class:`CorpusEdit`), the corpus as the generators read it (:class:`CorpusText`), and
where a generated file goes (:func:`free_path`). Low in ``rlm_cli.evaluation`` so that each
family's generator module and ``evaluation.tasks`` (which dispatches to them) import it alike."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: The eval families, in the order they run (here, with no heavy import, so that `rlm eval -h`
#: and its completion can name them).
FAMILIES = ("needle", "code", "aggregate", "pairs", "semantic")
#: Folder of the generated files appended to the corpus (a suffix is added if the corpus has it).
GENERATED_DIR = "rlm-eval"


@dataclass(frozen=True)
class CorpusEdit:
    """An in-memory change of the corpus: ``replace`` maps paths to new text, ``add`` appends
    ``(path, text)`` files. Tasks with the same ``key`` share one derived corpus."""

    key: str
    replace: dict[str, str] = field(default_factory=dict)
    add: tuple[tuple[str, str], ...] = ()


@dataclass
class Task:
    """One question: ``gold`` is the exact answer, judged by scorer ``scorer`` (see
    ``evaluation.scoring``) with the keyword arguments ``extra``."""

    id: str
    family: str
    kind: str
    question: str
    gold: Any
    scorer: str
    extra: dict[str, Any] = field(default_factory=dict)
    edit: CorpusEdit | None = None


@dataclass
class CorpusText:
    """What the generators read: each file's path and text (``texts`` is a callable so that a
    file is decoded only when a generator asks for it)."""

    paths: list[str]
    text: Callable[[str], str]
    context: Callable[[], str]


def free_path(corpus: CorpusText, name: str) -> str:
    """``rlm-eval/NAME``, or ``rlm-eval-N/NAME`` with the first N whose path the corpus does not have."""
    taken = set(corpus.paths)
    folder = GENERATED_DIR
    n = 1
    while f"{folder}/{name}" in taken:
        n += 1
        folder = f"{GENERATED_DIR}-{n}"
    return f"{folder}/{name}"
