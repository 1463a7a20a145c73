"""Settings overrides (`--set` pairs) the loop tests share."""

from __future__ import annotations

# The sidecar in act mode with nothing holding a switch back but a settled window to judge it
# by: no dwell, no cooldown, no change budget, a one-minute settle, little batch history, few
# drafts. The engine is vLLM 0.33 (declared: some fixtures' images name an older tag, whose
# start-up rules the capability table does not have).
ACT_AT_ONCE = (
    "mode=act",
    "engine.build=0.33.0",
    "policy.switch.dwell_s=0",
    "policy.restart.cooldown_s=0",
    "policy.restart.max_per_hour=100",
    "policy.restart.max_per_day=100",
    "policy.verification.settle_s=60",
    "policy.estimates.min_batch_weight=2",
    "limits.min_drafts=10",
)
