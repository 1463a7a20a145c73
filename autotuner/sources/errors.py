"""The one error type sources raise: it carries the typed reason the Observation reports."""

from __future__ import annotations

from autotuner.core.types import UnusableReason
from autotuner.errors import AutotunerError


class SourceError(AutotunerError):
    """Data could not be fetched or trusted; `reason` says why in a word."""

    def __init__(self, reason: UnusableReason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail
