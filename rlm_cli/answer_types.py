"""The answer types of a question (``--answer-type``, an audit check's ``type``) as one type with
their traits (issue 50), so that code asks a type what it is instead of comparing its name.

:class:`AnswerType` is a ``StrEnum``: a member equals its name as a string, prints as it and is
written to JSON as it, so the documents and the trajectories are unchanged. It imports nothing of
the project (rank 1 in ``scripts/check_architecture.py``): ``loop`` (checking a typed answer),
``audit`` (the verdicts) and ``output`` (the reports) may all read it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class AnswerType(StrEnum):
    """One answer type. ``text`` is prose; every other type also has a value (``FINAL(value)``)."""

    TEXT = "text"
    BOOL = "bool"
    INT = "int"
    NUMBER = "number"
    LIST = "list"
    LOCATIONS = "locations"
    JSON = "json"

    @property
    def typed(self) -> bool:
        """Whether an answer of this type has a value beside its prose (every type but ``text``)."""
        return self is not AnswerType.TEXT

    @property
    def counted(self) -> bool:
        """Whether its value is a list whose items an audit check counts (``min``/``max``/``empty``):
        ``list`` and ``locations``."""
        return self in (AnswerType.LIST, AnswerType.LOCATIONS)

    @property
    def placed(self) -> bool:
        """Whether its items are places in the corpus (``path:line`` or ``path:a-b``): ``locations``."""
        return self is AnswerType.LOCATIONS

    @property
    def numeric(self) -> bool:
        """Whether its value is a number, compared as one (``1`` equals ``1.0``): ``int`` and ``number``."""
        return self in (AnswerType.INT, AnswerType.NUMBER)

    @property
    def whole(self) -> bool:
        """Whether its value is a whole number (``42``; ``42.0`` reads as ``42``, ``1.5`` is refused): ``int``."""
        return self is AnswerType.INT

    @property
    def value_words(self) -> str:
        """What a value of this type is, in words, for an error about an ``expect`` value."""
        return _WORDS[self]

    def fits(self, value: Any) -> bool:
        """Whether ``value`` (a TOML value: an audit check's ``expect``) is one of this type."""
        if self is AnswerType.TEXT:
            return isinstance(value, str)
        if self is AnswerType.BOOL:
            return isinstance(value, bool)
        if self.numeric:
            return isinstance(value, int if self.whole else (int, float)) and not isinstance(value, bool)
        if self.placed:
            return isinstance(value, list) and all(isinstance(v, str) for v in value)
        if self is AnswerType.LIST:
            return isinstance(value, list)
        return True


_WORDS = {AnswerType.TEXT: "string", AnswerType.BOOL: "true or false", AnswerType.INT: "whole number",
          AnswerType.NUMBER: "number", AnswerType.LIST: "list",
          AnswerType.LOCATIONS: "list of \"path:line\" strings", AnswerType.JSON: "TOML value"}

#: The names of the answer types, in the order ``--answer-type`` lists them.
NAMES: tuple[str, ...] = tuple(t.value for t in AnswerType)
