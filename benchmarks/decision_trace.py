"""What the policy saw at chosen hours of a decision-quality day, beside what the world serves.

    python -m benchmarks.decision_trace published-drift --engine replay-spec --at 8,9.08
    python -m benchmarks.decision_trace replay-gain --engine gdn-replay --at 5.83 \
        --set policy.exploration.reserve=2

runs the policy on one world exactly as `benchmarks.decision_quality` does, and at the window
ending at (or first after) each hour prints: the running setup and its last window; the best
candidates, the running setup, plain and each family's best, each with its value over the
horizon (the policy's mean over the hours ahead), its interval and whether its family was
measured near this load, beside what the world serves on it at this window's end (the truth the
policy never sees); the calibration's factors in the band of the typical batch; where the
prior puts each family not measured near this load over the running setup (at the load now,
at the forecast's levels in its band and at the band's edges: what holds a question back);
the band the hours ahead are priced in and the restarts a question needs; and the decision.
The figures docs/policy.md reads "window by window" come from here.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotuner.core.decide.context import Situation
from autotuner.core.decide.exploration import (
    level_ahead,
    levels_ahead,
    prior_lead,
    restarts_for_a_question,
    saturation_at,
)
from autotuner.core.decide.policy import situation_after
from autotuner.core.decide.settings import PolicySettings
from autotuner.core.decide.state import TunerState
from autotuner.core.decide.valuation import Evaluation, evaluate
from autotuner.core.predict.attribution import CALIBRATION_BANDS, BandFit, calibration_band
from autotuner.core.types import PLAIN, Setup
from autotuner.errors import InputError
from autotuner.sim.worlds import World
from benchmarks.decision_quality import (
    ALL_NAMES,
    ENGINES,
    INTERVAL_S,
    TRACE_GPU,
    TRACE_MODEL,
    StepSeen,
    benchmark_settings,
    build_world,
    engine_for,
    run_policy,
)

# The last calibration band's edge, for a question's figures (the band itself has none).
TOP_BATCH = 1024

# A family's own factors are printed once this many decayed windows stand behind them in the
# band (below it they are the prior's 1.0, which says nothing).
SHOWN_EVIDENCE = 0.05


class HoursError(ValueError):
    """An hour the world's run does not reach."""


@dataclass(frozen=True)
class Moment:
    """One traced window: its end (seconds into the run) and the printed lines."""

    at: float
    lines: tuple[str, ...]


def trace(
    world_name: str,
    engine_name: str,
    hours: Sequence[float],
    top: int = 12,
    overrides: Sequence[str] = (),
) -> list[Moment]:
    """The policy's run on the world up to the last hour asked (with `overrides`, `--set`
    pairs on its settings), and what it saw at each (hours that fall in one window share its
    moment). Raises InputError on an override that is not a valid policy setting."""
    world = build_world(world_name, TRACE_MODEL, TRACE_GPU)
    span_h = 24.0 * world.days
    if not hours or any(not 0 < h <= span_h for h in hours):
        raise HoursError(f"hours must lie in (0, {span_h:g}], the world's span: got {list(hours)}")
    settings = benchmark_settings(overrides=overrides)
    pending = set(hours)
    moments: list[Moment] = []

    def watch(seen: StepSeen) -> None:
        due = {h for h in pending if seen.ctx.now >= h * 3600 - 1e-6}
        if due:
            pending.difference_update(due)
            moments.append(Moment(seen.ctx.now, tuple(_moment(world, seen, settings, top))))

    times = np.arange(0.0, max(hours) * 3600, INTERVAL_S)
    engine = ENGINES[engine_name].serving(world.prior.model)
    run_policy(world, engine, settings, times, INTERVAL_S, watch=watch)
    return moments


def _moment(world: World, seen: StepSeen, settings: PolicySettings, top: int) -> list[str]:
    """The lines for one step: the situation rebuilt as the step built it, then evaluated."""
    sit = situation_after(seen.state, seen.observation, seen.ctx, settings)
    current = sit.state.current or PLAIN
    lines = [f"{seen.ctx.now / 3600:.2f} h: running {current.label}; {_window(sit.state)}"]
    evaluation = evaluate(sit, current)
    if evaluation is None:
        lines.append("  no evaluation (not enough batch history to compare setups)")
    else:
        ranked = sorted(evaluation.values, key=lambda s: -evaluation.values[s])
        lines += _provenance(ranked, seen.ranked)
        lines += _candidates(world, evaluation, ranked, current, seen.ctx.now, top)
        typical = sit.state.batch.quantile(0.5)
        lines += _calibration(sit.predictor.fit.at(typical), typical, current)
        lines += _unmeasured(sit, evaluation, ranked, current)
        lines += _question(sit, current)
    lines.append(f"  decision: {seen.decision.sentence}")
    return lines


def _window(state: TunerState) -> str:
    """The last usable window the step absorbed (this one, unless it was unusable)."""
    rate, batch = state.last_rate, state.last_batch
    if rate is None or batch is None:
        return "no usable window yet"
    return f"its last usable window batch {batch:.0f} at {rate:,.0f} tokens/s"


def _provenance(mine: Sequence[Setup], stepped: Sequence[Setup]) -> list[str]:
    """Whether the step decided on this ranking (`stepped`, the step's own): a verification's
    verdict decides before any, and a step whose context drift or a rollout changed would
    rank otherwise."""
    if not stepped:
        return ["  (a verification decided this step; the evaluation below was not used)"]
    if tuple(mine) != tuple(stepped):
        return ["  (the step ranked these otherwise: its context differs from this rebuild)"]
    return []


def _candidates(
    world: World,
    evaluation: Evaluation,
    ranked: Sequence[Setup],
    current: Setup,
    now: float,
    top: int,
) -> list[str]:
    """The `top` best of `ranked` (by horizon value), then the running setup, plain and each
    family's best where not among them (a miss is read against what the policy did not pick)."""
    families = {s.kind: s for s in reversed(ranked)}  # each kind's best, by horizon value
    also = {current, PLAIN, *families.values()}
    shown = [*ranked[:top], *(s for s in ranked[top:] if s in also)]
    lines = [f"  {'setup':40} {'horizon':>9} {'interval':>17} {'measured':>9} {'world now':>10}"]
    for setup in shown:
        low, high = evaluation.intervals.get(setup, (math.nan, math.nan))
        measured = "yes" if evaluation.checked.get(setup, False) else "no"
        lines.append(
            f"  {setup.label:40} {evaluation.values[setup]:9,.0f} "
            f"{f'{low:,.0f}-{high:,.0f}':>17} {measured:>9} {_served(world, setup, now):>10}"
        )
    return lines


def _served(world: World, setup: Setup, now: float) -> str:
    """What the world serves on `setup` now ('-' where it cannot run it)."""
    try:
        return f"{world.tokens_per_s(setup, now):,.0f}"
    except ValueError:
        return "-"


def _calibration(fit: BandFit, typical: float, current: Setup) -> list[str]:
    """The band's shared factors, and each family's own where windows stand behind them."""
    lines = [f"  calibration at batch {typical:.0f} ({_band(typical)}):"]
    lines.append(f"    shared: {_factors(fit.shared)}")
    for family, factors in fit.own.items():
        windows = fit.evidence.get(family, 0.0)
        if windows >= SHOWN_EVIDENCE or family == current.kind.value:
            lines.append(f"    {family} own ({windows:.1f} windows): {_factors(factors)}")
    if fit.withheld:
        lines.append(f"    withheld by the bounds, on the whole step: {_factors(fit.withheld)}")
    return lines


def _unmeasured(
    sit: Situation, evaluation: Evaluation, ranked: Sequence[Setup], current: Setup
) -> list[str]:
    """Where the prior puts each family not measured near this load (its best setup by horizon
    value) over the running setup: at the load now, at the forecast's levels in its band (what
    `exploration._within_reach_ahead` reads before a question) and at the band's edges."""
    band = calibration_band(sit.demand_mean)
    low, high = CALIBRATION_BANDS[band], min(CALIBRATION_BANDS[band + 1], TOP_BATCH)
    edges = sorted({low, round(math.sqrt(low * high)), high - 1})
    best = {s.kind: s for s in reversed(ranked) if not evaluation.checked.get(s, False)}
    best.pop(current.kind, None)

    def leads(setup: Setup, batches: Sequence[float]) -> str:
        return ", ".join(f"{b:.0f} {prior_lead(sit, setup, current, b):+.1%}" for b in batches)

    return [
        f"  {setup.label} (not measured here) by the prior over {current.label}: at the load "
        f"now {leads(setup, [sit.demand_mean])}; at the forecast's levels in the band "
        f"{leads(setup, levels_ahead(sit)) or '-'}; at the band's edges {leads(setup, edges)}"
        for setup in best.values()
    ]


def _question(sit: Situation, current: Setup) -> list[str]:
    """What a question waits on besides the families' leads: the load's band against the band
    the hours ahead are priced in (`exploration._load_stays`), and the restarts it needs left
    in the day's budget (`exploration.restarts_for_a_question`)."""
    ahead = level_ahead(sit)
    where = (
        "no forecast yet"
        if ahead is None
        else f"the load now {sit.demand_mean:.0f} ({_band(sit.demand_mean)}), the hours ahead "
        f"priced at {ahead:.0f} ({_band(ahead)})"
    )
    typical = sit.state.batch.quantile(0.5)
    made, needed = restarts_for_a_question(sit, saturation_at(sit, current, typical))
    budget = sit.settings.restart.max_per_day
    return [
        f"  a question: {where}; {made} restart(s) in the last 24 h, and a question needs "
        f"{needed} more within the {budget} a day"
    ]


def _band(batch: float) -> str:
    """The calibration band `batch` falls in, as its batches."""
    band = calibration_band(batch)
    low, high = CALIBRATION_BANDS[band], CALIBRATION_BANDS[band + 1]
    return f"band {low}-{high - 1}" if band < len(CALIBRATION_BANDS) - 2 else f"band {low} and up"


def _factors(factors: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.2f}" for name, value in sorted(factors.items()))


def _options() -> argparse.Namespace:
    options = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    options.add_argument("world", choices=ALL_NAMES, metavar="world", help="a benchmark world")
    options.add_argument("--engine", help="the engine preset (default: the world's first)")
    options.add_argument("--at", required=True, help="hours into the run, comma-separated")
    options.add_argument("--top", type=int, default=12, help="candidates shown, best first")
    options.add_argument(
        "--set",
        action="append",
        default=[],
        dest="overrides",
        metavar="policy.GROUP.FIELD=VALUE",
        help="run the policy with one setting changed, as decision_quality --set does",
    )
    args = options.parse_args()
    try:
        args.engine = engine_for(args.world, args.engine)
    except InputError as error:
        options.error(str(error))
    if args.top < 1:
        options.error(f"--top {args.top}: show at least one candidate")
    try:
        args.hours = [float(h) for h in args.at.split(",") if h.strip()]
    except ValueError:
        options.error(f"--at {args.at}: hours are numbers, comma-separated")
    return args


def main() -> None:
    args = _options()
    try:
        moments = trace(args.world, args.engine, args.hours, args.top, args.overrides)
    except HoursError as error:
        raise SystemExit(f"--at: {error}") from error
    except InputError as error:
        raise SystemExit(str(error)) from error
    print(f"[{args.engine}] world {args.world}, windows of {INTERVAL_S:.0f} s")
    for moment in moments:
        print("\n".join(moment.lines))


if __name__ == "__main__":
    main()
