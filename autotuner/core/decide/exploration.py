"""Exploration: asking once whether a setup family never measured at this load would win, when
its interval says it could and the prediction alone is not sure enough to switch."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from autotuner.core.decide.context import Situation
from autotuner.core.decide.decisions import Make, numbers, percent
from autotuner.core.decide.gating import first_block, valued_acceptance
from autotuner.core.decide.settings import CHANGE_ROOM
from autotuner.core.decide.state import Exploration, TunerState, Verification
from autotuner.core.decide.valuation import Evaluation
from autotuner.core.predict.acceptance import AcceptanceEstimate, first_position
from autotuner.core.predict.attribution import calibration_band
from autotuner.core.types import Action, Decision, Setup

# What a family adds on a kernel class, as a share of its step: at least SATURATED_SHARE for
# the running family's saturated classes to count, at least SHARED_SHARE for another family
# to err the same way on them.
SATURATED_SHARE = 0.1
SHARED_SHARE = 0.05


def explore(
    sit: Situation, evaluation: Evaluation, make: Make
) -> tuple[Decision, TunerState] | None:
    """Try a setup family never measured at this load when its interval says it could win.

    Only from a setup measured here (we know where we stand), only when the load sits in the
    band now, for the family whose interval reaches highest above the running setup (by at
    least exploration.min_gain), not one the load ahead brings within a switch's minimum
    (`_within_reach_ahead`), at most once per family and band per quarantine period, and
    under every switch rule but the dwell (nothing is predicted to hold: it is a question asked
    once).
    Verification then keeps it or reverts it, and what was measured stays learned."""
    state, settings, current = sit.state, sit.settings, make.current
    typical = state.batch.quantile(0.5)
    band = calibration_band(typical)
    if not settings.exploration.enabled or not evaluation.checked.get(current, False):
        return None
    if sit.observation.batch is None or calibration_band(sit.demand_mean) != band:
        return None
    if sit.unwatched > 0 or not _load_stays(sit):
        return None  # unwatched: where the load goes is unknown; out of the band ahead: moot
    saturation = saturation_at(sit, current, typical)
    restarts, needed = restarts_for_a_question(sit, saturation)
    if restarts + needed > settings.restart.max_per_day:
        return None  # a question must not spend the restarts a predicted change needs
    chosen = _widest_chance(sit, evaluation, current, band, saturation)
    if chosen is None:
        return None
    target, high = chosen
    trial = replace(
        evaluation, best=target, best_value=high, gain=high / evaluation.current_value - 1
    )
    trial = replace(trial, confidence=1.0, plan=None)  # a question, outside the plan
    # The question's own hurdle, which `_widest_chance` already held it to; the switch's own
    # minimum would refuse the questions between the two.
    if first_block(sit, trial, dwell=False, min_gain=settings.exploration.min_gain) is not None:
        return None
    verification = Verification(
        target=target,
        previous=current,
        switched_at=sit.now,
        predicted_gain=evaluation.values[target] / evaluation.current_value - 1,
        baseline_rate=state.last_rate,
        baseline_batch=state.last_batch,
        exploration=True,
        band=band,
        first_start=sit.first_start(target),
    )
    until = sit.now + settings.quarantine.setup_s
    state = state.exploring(Exploration(target.kind, band), until).verifying(verification)
    low = evaluation.intervals[target][0]
    return make(
        Action.SWITCH,
        f"explore {current.label} -> {target.label}: {target.kind.value} has not been measured "
        f"near batch {typical:.0f}, and its interval ({low:,.0f}-{high:,.0f} tokens/s) reaches "
        f"{percent(trial.gain)} over {current.label}'s {evaluation.current_value:,.0f} (point "
        f"estimate {percent(verification.predicted_gain)}); an exploration, tried once per "
        f"band every {settings.quarantine.setup_s / 3600:.0f} h, reverted if it measures worse",
        **numbers(trial),
    ), state


def restarts_for_a_question(sit: Situation, saturation: Saturation) -> tuple[int, int]:
    """(the restarts made in the last 24 hours, the restarts a question needs besides them:
    itself, its revert and the reserve for predicted changes, the lower saturated reserve
    where the running family's calibration is saturated)."""
    reserve = sit.settings.exploration.reserve
    if saturation.classes:
        reserve = min(reserve, sit.settings.exploration.saturated_reserve)
    return len(sit.state.recent_changes(sit.now)), CHANGE_ROOM + reserve


def _load_stays(sit: Situation) -> bool:
    """Whether the load now is in the calibration band the hours ahead are priced in: the
    band of the forecast's mean level over the horizon. Calibration learns per band, so what
    a question measures now answers for the hours ahead only there: asked at batch 25 on a
    morning rising to 200, replay measured slower, was reverted, and the plan moved to it for
    the peak anyway, three restarts for one; asked at 78 on a morning rising to 260 it measures
    the band the morning is priced in, and a slower answer is still kept while the plan,
    valued with it, holds it (verification)."""
    ahead = level_ahead(sit)
    if ahead is None or not math.isfinite(sit.demand_mean):
        return True
    return calibration_band(sit.demand_mean) == calibration_band(ahead)


def level_ahead(sit: Situation) -> float | None:
    """The forecast's mean level over the horizon (geometric, by duration): the load the hours
    ahead are priced at (None: no forecast yet)."""
    if sit.forecast is None:
        return None
    levels = np.log(np.maximum(np.asarray(sit.forecast.level), 1.0))
    return math.exp(float(np.average(levels, weights=np.asarray(sit.forecast.durations))))


@dataclass(frozen=True)
class Saturation:
    """The kernel classes the running family's calibration holds at its upper bound near the
    typical batch, among those it adds SATURATED_SHARE of its step or more on
    (`Predictor.saturated`), and the acceptance and batch they were read at. There the model
    underprices the running setup by more than calibration can carry; while it is the only
    family measured, the rest goes to the terms every setup shares, so every other family is
    priced through terms in doubt, and a question may spend the reserve down to
    `exploration.saturated_reserve`. (A running setup drafting deeper than the valued
    acceptance reaches is never taken as saturated.)"""

    classes: frozenset[str]
    accept: AcceptanceEstimate
    batch: int

    def errs_alike(self, sit: Situation, setup: Setup) -> bool:
        """Whether `setup` adds at least SHARED_SHARE of its step on a saturated class: the
        same kernels the model underprices, so its interval would reach high for the same
        wrong reason."""
        if setup.spec_tokens > self.accept.max_spec_tokens:
            return True
        shares = sit.predictor.added_shares(setup, self.batch, self.accept)
        return any(shares.get(c, 0.0) >= SHARED_SHARE for c in self.classes)


def saturation_at(sit: Situation, current: Setup, typical: float) -> Saturation:
    accept, batch = valued_acceptance(sit), max(round(typical), 1)
    if current.spec_tokens > accept.max_spec_tokens:
        return Saturation(frozenset(), accept, batch)
    classes = sit.predictor.saturated(current, batch, accept, SATURATED_SHARE)
    return Saturation(classes, accept, batch)


def _within_reach_ahead(sit: Situation, setup: Setup, current: Setup) -> bool:
    """Whether the prior puts `setup` more than a switch's minimum behind the running setup at
    the load now, but within it at a level the forecast expects in the same band.

    A question measures the family at the load now, and there the prior itself expects a no.
    On replay-gain's rising morning replay was priced 34% behind spec:3 at batch 73 and 1.5%
    behind at 255; asked at 73 it measured 30% slower and was reverted, and the plan moved to
    it for the peak anyway: three restarts where one did. Where the load is going the plan's
    own valuation is within a switch's minimum of the family, so its move there (or a
    question asked once the load is there) tests it where it is expected to win. Where the
    prior puts the family further behind than that everywhere in the band ahead (the
    published days: replay 40% behind at batch 82 and 11% at 255, and 1.8 times faster in
    truth), only a question can find the prior wrong, and it is asked now."""
    if sit.forecast is None or not math.isfinite(sit.demand_mean):
        return False
    least = -sit.settings.switch.min_gain
    if prior_lead(sit, setup, current, sit.demand_mean) >= least:
        return False
    return any(prior_lead(sit, setup, current, level) >= least for level in levels_ahead(sit))


def prior_lead(sit: Situation, setup: Setup, current: Setup, batch: float) -> float:
    """The calibrated model's `setup` over the running setup at `batch`, less one, at the
    acceptance the candidates are valued on."""
    accept = valued_acceptance(sit)
    ours = sit.predictor.tokens_per_s_at(current, batch, accept)
    return sit.predictor.tokens_per_s_at(setup, batch, accept) / ours - 1.0


def levels_ahead(sit: Situation) -> list[float]:
    """The forecast's levels over the horizon that fall in the load's band now."""
    if sit.forecast is None:
        return []
    band = calibration_band(sit.demand_mean)
    return [level for level in sit.forecast.level if calibration_band(level) == band]


def question_open(sit: Situation, key: Exploration) -> bool:
    """Whether a family may be asked about in a band: not within its quarantine, nor while a
    no it answered there is remembered, unless the first draft position's acceptance has moved
    past the tolerance from the answer's (after the quarantine). An answer measured with
    nothing drafted, or with no acceptance known now, holds for its whole memory."""
    if sit.state.explored.get(key, 0.0) <= sit.now:
        return True
    answer = sit.state.answered_no.get(key)
    if answer is None or sit.now < answer.at + sit.settings.quarantine.setup_s:
        return False
    now, then = first_position(sit.acceptance), answer.acceptance
    if now is None or then is None:
        return False
    return abs(now - then) > sit.settings.exploration.answer_acceptance_tolerance


def _widest_chance(
    sit: Situation,
    evaluation: Evaluation,
    current: Setup,
    band: int,
    saturation: Saturation,
) -> tuple[Setup, float] | None:
    """The unmeasured family's setup whose upper bound is highest and beats the running setup
    by exploration.min_gain (and overlaps its interval), not explored in this band lately, nor
    adding to the kernel classes the running family saturated, nor brought within reach by the
    load ahead."""
    current_low = evaluation.intervals.get(current, (evaluation.current_value,))[0]
    floor = max(evaluation.current_value * (1 + sit.settings.exploration.min_gain), current_low)
    options = []
    for setup, (_, high) in evaluation.intervals.items():
        if setup.kind is current.kind or evaluation.checked.get(setup, False):
            continue
        if high < floor or not question_open(sit, Exploration(setup.kind, band)):
            continue
        if saturation.classes and saturation.errs_alike(sit, setup):
            continue
        if _within_reach_ahead(sit, setup, current):
            continue
        options.append((high, setup.label, setup))
    if not options:
        return None
    high, _, setup = max(options)
    return setup, high
