"""How cautious the policy is: its settings, one group per concern (durations in seconds)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from autotuner.core.group import HOUR, Group
from autotuner.core.vocabulary import Word

# Restarts a change needs in the budget: itself and the revert its verification may make. The
# budget rules of gating and exploration and the start cautions all count with it.
CHANGE_ROOM = 2


class SwitchSettings(Group):
    """When a better setup is worth a switch: the gain, how sure, and for how long (hysteresis)."""

    min_gain: float = Field(0.05, ge=0, description="Smallest predicted gain (fraction) to act on.")
    gain_per_restart: float = Field(
        0.025,
        ge=0,
        lt=1,
        description="How much min_gain rises for a predicted switch with each restart in the "
        "last 24 hours past the first (every restart counts: switches, reverts, questions, "
        "adopted drift and `autotuner apply`): restarts spent make the day's later ones "
        "dearer, so the day keeps room for the moves its load needs. It raises the gain's own "
        "minimum only (confidence and the dwell count against min_gain); questions keep "
        "exploration.min_gain.",
    )
    min_confidence: float = Field(
        0.6, ge=0, le=1, description="Share of acceptance scenarios (low/point/high) agreeing."
    )
    dwell_s: float = Field(
        900, ge=0, description="How long the plan over the horizon must have held a change."
    )
    load_gone_memory_s: float = Field(
        24 * HOUR,
        ge=0,
        description="After a change reverted because the load it was made for had gone by its "
        "first settled window, how long every change waits the whole dwell (a large gain "
        "otherwise passes sooner): a load seen to leave within minutes may do so again.",
    )


class ObjectiveKind(Word):
    """What the policy maximises."""

    THROUGHPUT = "throughput"
    LATENCY_SLO = "latency_slo"


class ObjectiveSettings(Group):
    """What the candidates are scored on."""

    kind: ObjectiveKind = Field(
        ObjectiveKind.THROUGHPUT,
        description="throughput: expected tokens/s over the batch distribution; latency_slo: "
        "the same, among setups meeting latency_slo_s and ttft_slo_s at latency_percentile of "
        "the batch.",
    )
    latency_slo_s: float | None = Field(
        None, gt=0, description="Time per output token limit (latency_slo), seconds."
    )
    ttft_slo_s: float | None = Field(
        None,
        gt=0,
        description="Time to first token limit (latency_slo), seconds: a setup whose predicted "
        "TTFT (the prompt prefilled in the engine's chunked-prefill budget beside the batch's "
        "decoding) exceeds it is ruled out. Needs the prompt and output lengths (observed, or "
        "predict's --prompt-tokens/--output-tokens); while they are unknown it rules out none.",
    )
    latency_percentile: float = Field(
        0.9,
        gt=0,
        lt=1,
        description="The batch quantile at which latency_slo_s and ttft_slo_s must hold.",
    )


class CandidateSettings(Group):
    """The setups the policy may propose (the engine's capabilities narrow them further)."""

    spec_tokens: tuple[int, ...] = Field((1, 2, 3, 4), description="Draft lengths allowed.")
    replay_windows: tuple[int, ...] = Field(
        (8, 16),
        description="Replay windows allowed: a short list, since every new window is a new "
        "compile (vLLM's compile cache key holds L) and FlashInfer takes L <= 16.",
    )
    use_schedule: bool = Field(True, description="Use per-batch K schedules when the engine can.")


class RestartSettings(Group):
    """What one restart costs, whether a gain pays for it, and how many the target may take."""

    downtime_s: float = Field(
        180,
        ge=0,
        description="Downtime of one restart into a setup compiled before, seconds (the "
        "default until restarts are measured, per setup, from patch to ready).",
    )
    first_compile_s: float = Field(
        60,
        ge=0,
        description="What the first start of a setup not compiled before adds to downtime_s "
        "(vLLM's compile cache key holds replay, L and, through the CUDA-graph capture sizes, "
        "K), seconds; the default until a first start is measured.",
    )
    share: float = Field(
        1.0, gt=0, le=1, description="Share of replicas restarting at once (rollout strategy)."
    )
    margin: float = Field(
        2.0, ge=1, description="The gain over horizon_s must beat the restart's cost x this."
    )
    horizon_s: float = Field(
        4 * HOUR,
        gt=0,
        description="How far ahead demand is forecast and a plan of setups is valued (net of "
        "its restarts, the way back included): the payback horizon of a change.",
    )
    cooldown_s: float = Field(1800, ge=0, description="Quiet time after any change, seconds.")
    max_per_hour: int = Field(
        2,
        ge=0,
        description="Restarts allowed in any hour, reverts included: a change is made only "
        "with room left for its own revert.",
    )
    max_per_day: int = Field(
        6,
        ge=0,
        description="Restarts allowed in any 24 hours, reverts included: a change is made "
        "only with room left for its own revert.",
    )


class EstimateSettings(Group):
    """How long what was measured counts: the decayed estimates the policy decides on."""

    acceptance_half_life_s: float = Field(
        1800, gt=0, description="Half-life of pooled acceptance counts while speculation runs."
    )
    acceptance_memory_half_life_s: float = Field(
        6 * HOUR, gt=0, description="How fast remembered acceptance loses confidence when off."
    )
    acceptance_drift_half_life_s: float = Field(
        2 * HOUR,
        gt=0,
        description="Half-life of the windows the acceptance's drift per hour is fitted on; "
        "remembered acceptance's interval widens by that drift times its age.",
    )
    batch_half_life_s: float = Field(
        900, gt=0, description="Half-life of the batch history the expected gain is taken over."
    )
    min_batch_weight: float = Field(
        5, ge=0, description="Batch samples (decayed) needed before deciding."
    )
    acceptance_pinned: tuple[Annotated[float, Field(ge=0, le=1)], ...] | None = Field(
        None,
        min_length=1,
        max_length=16,
        description="Per-position conditional acceptance to decide on instead of the measured "
        "one (a drafter measured offline, a test that is not about acceptance); the measured "
        "one is still reported. Unset: decide on what the engine measures.",
    )


class CalibrationSettings(Group):
    """How the model is corrected by what was measured (per kernel class and batch band)."""

    half_life_s: float = Field(
        6 * HOUR, gt=0, description="Half-life of each window's measured/predicted error."
    )
    bounds: tuple[float, float] = Field(
        (0.5, 2.0), description="Smallest and largest correction factor ([1, 1] pins the model)."
    )
    anchor_octaves: float = Field(
        0.5,
        ge=0,
        description="How far, in octaves of batch, what the running setup measures now moves "
        "its family's calibrated rates (a Gaussian of this width around the measured demand; "
        "0: not at all).",
    )


class VerificationSettings(Group):
    """How a change is judged once it runs."""

    settle_s: float = Field(300, ge=0, description="Warm-up after a change before judging it.")
    regression_tolerance: float = Field(
        0.10,
        ge=0,
        lt=1,
        description="A predicted switch is reverted when it measures this much below the "
        "setup it replaced.",
    )
    down_deadline_s: float = Field(
        600,
        gt=0,
        description="A switched-to engine that does not serve this long after the switch (nor "
        "twice what its restart is expected to take, if longer) is reverted: it died at start "
        "or at its first request.",
    )


class QuarantineSettings(Group):
    """What a failed change teaches, and for how long."""

    setup_s: float = Field(
        6 * HOUR, ge=0, description="A reverted setup is not retried for this long."
    )
    capability_s: float = Field(
        24 * HOUR,
        ge=0,
        description="How long a capability the engine refused (it did not come up with a "
        "setup needing it) is taken as missing.",
    )


class ExplorationSettings(Group):
    """Trying a setup family never measured at this load (docs/policy.md, "Exploration")."""

    enabled: bool = Field(
        True,
        description="Try a family never measured at this load when its uncertainty says it "
        "could win by exploration.min_gain (once per family and batch band per quarantine.setup_s; "
        "after a no, see answer_memory_s).",
    )
    min_gain: float = Field(
        0.025,
        ge=0,
        lt=1,
        description="How far above the running setup an unmeasured family's interval must "
        "reach for a question. A switch's point estimate needs switch.min_gain, a guard against "
        "acting on noise; a question is asked once per band and period and verified, and its "
        "interval already holds the noise, so it needs less.",
    )
    tolerance: float = Field(
        0.02,
        ge=0,
        lt=1,
        description="An exploration is reverted when it measures this much below the setup it "
        "replaced (a predicted switch gets verification.regression_tolerance).",
    )
    reserve: int = Field(
        4,
        ge=0,
        description="Restarts of the day's budget (restart.max_per_day) explorations leave "
        "for predicted changes: one is made only when this many remain after it and its revert. "
        "4 is room for a day's two predicted moves (up for the peak, back for the night), each "
        "with its own revert: with the default budget of 6, a question is asked only when no "
        "restart was made in the last 24 hours; with a budget of 4, none is but where the "
        "calibration is saturated (saturated_reserve; the tuner warns at start when none can "
        "be).",
    )
    saturated_reserve: int = Field(
        2,
        ge=0,
        description="The reserve (as `reserve`, the lower of the two applies) where the running "
        "setup's calibration is saturated near the load: its own factors at the upper bound "
        "of calibration.bounds on kernels it adds 10% or more of its step on. The model "
        "underprices it there by more than calibration can say, so the predicted moves the "
        "reserve keeps room for are themselves in doubt; 2 is room for one predicted move and "
        "its revert, so a question may follow the day's first switch.",
    )
    answer_memory_s: float = Field(
        72 * HOUR,
        ge=0,
        description="A question answered no is not asked again in its family and batch band for "
        "this long (at least quarantine.setup_s) while acceptance stays within "
        "answer_acceptance_tolerance of the answer's: on days that repeat, the same evening "
        "would ask the same question, at two restarts, for the same answer.",
    )
    answer_acceptance_tolerance: float = Field(
        0.05,
        gt=0,
        le=1,
        description="How far the first draft position's acceptance may move from where a no "
        "was measured before the question is open again (after quarantine.setup_s).",
    )


class ForecastSettings(Group):
    """How demand over the payback horizon is forecast (docs/policy.md, "Ahead of the load")."""

    period_s: float = Field(
        24 * HOUR, gt=0, description="The period of the demand profile (a day)."
    )
    trend_window_s: float = Field(
        HOUR,
        gt=0,
        description="The recent windows whose trend is fitted (a least-squares line in log "
        "demand; a slope under two standard errors is taken as none).",
    )
    min_trend_s: float = Field(
        600,
        ge=0,
        description="History a trend needs before it counts: a slope fitted on less is taken "
        "as none and the level holds (a ramp of seconds, clients starting or reconnecting after "
        "a restart, says nothing of the next hour).",
    )
    trend_damping_s: float = Field(
        2 * HOUR,
        gt=0,
        description="How far ahead the trend carries: its extrapolation flattens with this "
        "time constant (the trend alone never moves demand more than 8x).",
    )
    profile_half_life_s: float = Field(
        3 * 24 * HOUR,
        gt=0,
        description="Half-life of the demand profile by time of day: older days count less.",
    )
    segments: int = Field(
        8, ge=1, le=48, description="Pieces of the horizon the forecast and the plan use."
    )
    noise: float = Field(
        0.02,
        ge=0,
        lt=1,
        description="Plans whose tokens over the horizon are within this fraction of the best "
        "are taken as equal: the one with fewer restarts wins.",
    )
    max_plan_restarts: int = Field(
        3, ge=1, le=8, description="Most restarts a plan over the horizon may hold."
    )
    whole_day: bool = Field(
        True,
        description="Once the profile has seen a whole period, hold a move that the plan over "
        "the next period (the day's restart budget, the fewest restarts within `noise` of the "
        "best) does not make: fewer restarts a day for up to `noise` of the day's tokens.",
    )


class PolicySettings(Group):
    """How cautious the policy is, one group per concern. Durations are seconds."""

    switch: SwitchSettings = Field(default_factory=SwitchSettings)
    objective: ObjectiveSettings = Field(default_factory=ObjectiveSettings)
    candidates: CandidateSettings = Field(default_factory=CandidateSettings)
    restart: RestartSettings = Field(default_factory=RestartSettings)
    estimates: EstimateSettings = Field(default_factory=EstimateSettings)
    calibration: CalibrationSettings = Field(default_factory=CalibrationSettings)
    verification: VerificationSettings = Field(default_factory=VerificationSettings)
    quarantine: QuarantineSettings = Field(default_factory=QuarantineSettings)
    exploration: ExplorationSettings = Field(default_factory=ExplorationSettings)
    forecast: ForecastSettings = Field(default_factory=ForecastSettings)

    def cautions(self) -> list[str]:
        """Settings that are valid but leave a part of the policy with nothing to do, in
        sentences for the log at start: an operator should not wait for what cannot come."""
        restart, exploration = self.restart, self.exploration
        # A change, a question included, is made only with room for its own revert.
        if min(restart.max_per_hour, restart.max_per_day) < CHANGE_ROOM:
            return [
                f"restart.max_per_hour {restart.max_per_hour} / max_per_day "
                f"{restart.max_per_day}: every change needs room for itself and its revert "
                f"({CHANGE_ROOM}), so no change is ever made; set both to {CHANGE_ROOM} or more "
                "to let the tuner act"
            ]
        if exploration.enabled and exploration.reserve + CHANGE_ROOM > restart.max_per_day:
            saturated = min(exploration.reserve, exploration.saturated_reserve)
            which = (
                "no question is ever asked"
                if saturated + CHANGE_ROOM > restart.max_per_day
                else "no question is asked but where the running setup's calibration is "
                f"saturated (exploration.saturated_reserve {saturated})"
            )
            return [
                f"exploration.reserve {exploration.reserve} with restart.max_per_day "
                f"{restart.max_per_day}: a question and its revert ({CHANGE_ROOM}) never leave "
                f"the reserve for predicted changes, so {which}; set "
                f"exploration.reserve to {restart.max_per_day - CHANGE_ROOM} or less to allow "
                "one after a day without restarts, or exploration.enabled false to say none is "
                "wanted"
            ]
        return []
