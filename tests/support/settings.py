"""Settings overrides (`--set` pairs) the loop tests share."""

from __future__ import annotations

# The sidecar in act mode with nothing holding a switch back but a settled window to judge it
# by: no dwell, no cooldown, no change budget, a one-minute settle, little batch history, few
# drafts.
ACT_AT_ONCE = (
    "mode=act",
    "policy.switch.dwell_s=0",
    "policy.restart.cooldown_s=0",
    "policy.restart.max_per_hour=100",
    "policy.restart.max_per_day=100",
    "policy.verification.settle_s=60",
    "policy.estimates.min_batch_weight=2",
    "limits.min_drafts=10",
)
