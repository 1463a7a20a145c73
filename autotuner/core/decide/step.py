"""One loop step's decision, whole: the policy's choice plus the rules around it (drift adopted,
a stuck rollout reverted, advise mode, a refused restart).

Pure: everything comes in as (state, observation, context, settings) with the time in the
context, and everything goes out as a `Step`: the Decision, the next TunerState, and the notices
the operator must be told of. The controller carries these out and posts the notices; it
decides nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from autotuner.core.decide.context import Context
from autotuner.core.decide.policy import decide
from autotuner.core.decide.settings import PolicySettings
from autotuner.core.decide.state import Refusal, TunerState
from autotuner.core.engine.capabilities import needed
from autotuner.core.types import Action, BlockReason, Decision, Observation, Setup

# Holds an operator would want an Event for (the others are routine), posted every Nth time.
OPERATOR_VISIBLE_BLOCKS = frozenset(
    {BlockReason.PAUSED, BlockReason.BUDGET, BlockReason.COOLDOWN, BlockReason.ROLLOUT}
)
BLOCKED_EVENT_EVERY = 20


class NoticeKind(str, Enum):
    """What happened that the operator is told of; the value is the Kubernetes Event reason."""

    DRIFT = "DriftDetected"
    RECOMMENDED = "SwitchRecommended"
    BLOCKED = "SwitchBlocked"
    SWITCHED = "SetupSwitched"
    REVERTED = "SetupReverted"
    PATCH_FAILED = "PatchFailed"
    CAPABILITY_REFUSED = "CapabilityRefused"
    QUALITY_REGRESSION = "QualityRegression"
    CANARY_SKIPPED = "CanarySkipped"
    STATE_SET_ASIDE = "StateSetAside"


@dataclass(frozen=True)
class Notice:
    kind: NoticeKind
    message: str


@dataclass(frozen=True)
class Step:
    decision: Decision
    state: TunerState
    notices: tuple[Notice, ...] = ()
    rollout_stuck: bool = False
    ranked: tuple[Setup, ...] = ()  # the candidates the policy compared, best first

    @property
    def acts(self) -> bool:
        """The decision changes the target (a switch or a revert to write)."""
        return self.decision.action in (Action.SWITCH, Action.REVERT) and (
            self.decision.target is not None
        )


def step(
    state: TunerState, observation: Observation, ctx: Context, settings: PolicySettings
) -> Step:
    """Drift first (the operator's change wins), then a stuck rollout, then the policy; in
    advise mode (or not leading) nothing decided is applied."""
    state, drift = _adopt_drift(state, ctx)
    stuck = _stuck(state, ctx)
    ranked: tuple[Setup, ...] = ()
    if stuck is not None:
        decision, after = _revert_stuck(state, ctx, settings, stuck)
    else:
        # A stuck rollout is no rollout in progress: nothing will finish it.
        moving = ctx.rollout_in_progress and not ctx.rollout_stuck
        decision, after, ranked = decide(
            state, observation, replace(ctx, rollout_in_progress=moving), settings
        )
    notices = [drift] if drift else []
    result = Step(
        decision, after, rollout_stuck=stuck is not None or bool(ctx.rollout_stuck), ranked=ranked
    )
    if result.acts and ctx.advisory:
        decision = decision.noted(f"{ctx.advisory}: not applied")
        notices.append(
            Notice(NoticeKind.RECOMMENDED, f"{decision.sentence} ({ctx.advisory}: not applied)")
        )
        result = replace(result, decision=decision, state=after.advisory(state))
    elif _blocked_worth_an_event(state, decision):
        notices.append(Notice(NoticeKind.BLOCKED, decision.sentence))
    if drift:
        result = replace(result, decision=result.decision.noted(drift.message))
    return replace(result, notices=tuple(notices))


def restart_refused(
    before: TunerState, decision: Decision, why: str, ctx: Context, settings: PolicySettings
) -> Step:
    """The engine did not come up with `decision.target` and its previous args are back: the
    setup is quarantined, and the capability it needed that the previous did not is taken as
    missing for `quarantine.capability_s` (so a K schedule refused means static K from now on)."""
    assert decision.target is not None
    target, previous = decision.target, decision.current
    state = before.quarantined(target, ctx.now + settings.quarantine.setup_s)
    notices = [
        Notice(NoticeKind.REVERTED, f"rolled back {target.label} -> {previous.label}: {why}")
    ]
    capability = needed(target, previous)
    if capability is not None:
        refusal = Refusal(
            why=f"{target.label}: {why}", until=ctx.now + settings.quarantine.capability_s
        )
        state = state.refusing(capability, refusal)
        notices.append(
            Notice(
                NoticeKind.CAPABILITY_REFUSED,
                f"the engine did not come up with {target.label}: treating {capability} as "
                f"unsupported for {settings.quarantine.capability_s / 3600:.0f} h ({why})",
            )
        )
    noted = decision.noted(f"rolled back to {previous.label}; {target.label} quarantined")
    return Step(noted, state, tuple(notices))


def _adopt_drift(state: TunerState, ctx: Context) -> tuple[TunerState, Notice | None]:
    """Someone else changed the managed flags: adopt their setup, back off, say so."""
    deployed = ctx.deployed
    if deployed is None or state.current is None or deployed == state.current:
        return state, None
    message = (
        f"managed flags changed outside the tuner ({state.current.label} -> "
        f"{deployed.label}): adopting it and backing off for the cooldown"
    )
    return state.adopted(deployed, ctx.now), Notice(NoticeKind.DRIFT, message)


def _stuck(state: TunerState, ctx: Context) -> str | None:
    """Why the rollout after our change cannot finish, if it cannot."""
    verification = state.verification
    if verification is None:
        return None
    if ctx.rollout_stuck:
        return ctx.rollout_stuck
    overdue = ctx.now - verification.switched_at > ctx.rollout_deadline_s
    return "deadline passed" if ctx.rollout_in_progress and overdue else None


def _revert_stuck(
    state: TunerState, ctx: Context, settings: PolicySettings, why: str
) -> tuple[Decision, TunerState]:
    assert state.verification is not None
    target, previous = state.verification.target, state.verification.previous
    state = state.decided()
    decision = Decision(
        id=state.last_decision_id,
        at=ctx.now,
        action=Action.REVERT,
        current=target,
        target=previous,
        sentence=f"revert {target.label} -> {previous.label}: the rollout is stuck ({why})",
    )
    return decision, state.reverted(ctx.now, ctx.now + settings.quarantine.setup_s)


def _blocked_worth_an_event(before: TunerState, decision: Decision) -> bool:
    """A recommendation held by a rule the operator controls: said at the first decision and
    every BLOCKED_EVENT_EVERY-th after (not at every step)."""
    return (
        decision.target is not None
        and decision.blocked_by in OPERATOR_VISIBLE_BLOCKS
        and (before.last_decision_id == 0 or decision.id % BLOCKED_EVENT_EVERY == 1)
    )
