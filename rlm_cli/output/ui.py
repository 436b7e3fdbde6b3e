"""What a command hands the layers below it to show things on stderr: the ``UI`` protocol (issue 50).

:class:`~rlm_cli.output.render.Renderer` is the one implementation; ``app``, ``audit``, ``mcp`` and
``evaluation`` take a ``ui: UI`` so that the type checker sees each call they make on it (a
misspelt ``ui.infos(...)`` or an event handed where a message goes fails ``mypy``, not a run).
Importing this module imports no rich.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

    from rlm_cli.events import EventDict


class UI(Protocol):
    """The terminal view a run writes to (stderr only: stdout is the answer's). Thread-safe in
    :class:`~rlm_cli.output.render.Renderer`; ``quiet`` hides all but errors and the support warning."""

    quiet: bool

    def on_event(self, ev: EventDict) -> None:
        """Draw one trajectory event (``rlm_cli.events``); an ``Emit``."""
        ...

    def close(self) -> None:
        """End the live region and any streamed line: the run's events are over."""
        ...

    def error(self, message: str) -> None:
        """One ``error:`` line."""
        ...

    def warning(self, message: str) -> None:
        """One ``warning:`` line (hidden with ``--quiet``)."""
        ...

    def info(self, message: str) -> None:
        """One progress line (hidden with ``--quiet``)."""
        ...

    def summary(self, data: Mapping[str, object]) -> None:
        """The run's closing line from its ``--json`` document (``usage``, ``iterations``, ``support``...)."""
        ...

    def eval_progress(self, total: int) -> AbstractContextManager[Callable[[str], None]]:
        """``rlm eval``'s progress over ``total`` questions: yields ``step(line)``, once per question."""
        ...

    def stderr_table(self, title: str, columns: list[str], rows: Sequence[Sequence[object]]) -> None:
        """A table on stderr (hidden with ``--quiet``)."""
        ...

    def table(self, title: str, columns: list[str], rows: Sequence[Sequence[object]]) -> None:
        """A table on stdout (stats-like commands)."""
        ...
