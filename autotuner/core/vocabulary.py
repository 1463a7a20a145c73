"""The base of the package's closed vocabularies: a str Enum that prints as its word (Python
3.10, which the package supports, has no `enum.StrEnum`), so text, JSON and metric labels show
`mtp`, not `DrafterKind.MTP`."""

from __future__ import annotations

from enum import Enum


class Word(str, Enum):
    """A closed vocabulary whose members are their words."""

    def __str__(self) -> str:
        return str(self.value)
