"""When a window of metrics is good enough to act on."""

from __future__ import annotations

from pydantic import Field

from autotuner.core.group import Group


class ObservationLimits(Group):
    """When a window is good enough to act on."""

    min_batch_samples: int = Field(
        3, ge=1, description="Running-request samples needed for a batch distribution."
    )
    min_drafts: float = Field(
        200, ge=0, description="Drafts needed before acceptance is trusted (else: insufficient)."
    )
    max_age_s: float = Field(
        60, gt=0, description="A window whose newest sample is older than this is stale."
    )
