"""The base of every settings group: a frozen value that refuses unknown keys."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

HOUR = 3600.0


class Group(BaseModel):
    """One group of settings: a frozen value that refuses unknown keys, so a misspelt or moved
    key stops the start naming it instead of being silently ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid")
