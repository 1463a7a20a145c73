"""What the policy saw at chosen hours of a decision-quality day, beside what the world serves.

    python -m benchmarks.decision_trace published-drift --engine replay-spec --at 8,9.08

runs the policy on one world exactly as `benchmarks.decision_quality` does, and at the window
ending at (or first after) each hour prints: the running setup and its last window; every
candidate's value over the horizon, its interval and whether its family was measured near this
load; what the world serves on each now (the truth the policy never sees); the calibration's
factors in the band of the typical batch; and the decision. The figures docs/policy.md reads
"window by window" come from here.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotuner.core.decide.policy import situation_after
from autotuner.core.decide.settings import PolicySettings
from autotuner.core.decide.valuation import Evaluation, evaluate
from autotuner.core.predict.attribution import CALIBRATION_BANDS, BandFit, calibration_band
from autotuner.core.types import PLAIN, Setup
from autotuner.sim.worlds import World
from benchmarks.decision_quality import (
    ENGINES,
    TRACE_GPU,
    TRACE_MODEL,
    StepSeen,
    benchmark_settings,
    build_world,
    engines_of,
    run_policy,
)

INTERVAL_S = 300.0  # the decision-quality benchmark's default window
SHOWN_EVIDENCE = 0.05  # a family's own factors are printed from this many decayed windows


@dataclass(frozen=True)
class Moment:
    """One traced window: its end (seconds into the day) and the printed lines."""

    at: float
    lines: tuple[str, ...]


def trace(world_name: str, engine_name: str, hours: Sequence[float], top: int = 12) -> list[Moment]:
    """The policy's run on the world up to the last hour asked, and what it saw at each."""
    world = build_world(world_name, TRACE_MODEL, TRACE_GPU)
    day_h = 24.0 * world.days
    if not hours or any(not 0 < h <= day_h for h in hours):
        raise ValueError(f"hours must lie in (0, {day_h:g}], the world's span: got {list(hours)}")
    settings = benchmark_settings()
    pending = set(hours)
    moments: list[Moment] = []

    def watch(seen: StepSeen) -> None:
        due = {h for h in pending if seen.ctx.now >= h * 3600 - 1e-6}
        if due:  # hours within one window share its moment
            pending.difference_update(due)
            moments.append(Moment(seen.ctx.now, tuple(_moment(world, seen, settings, top))))

    times = np.arange(0.0, max(hours) * 3600, INTERVAL_S)
    engine = ENGINES[engine_name].serving(world.prior.model)
    run_policy(world, engine, settings, times, INTERVAL_S, watch=watch)
    return moments


def _moment(world: World, seen: StepSeen, settings: PolicySettings, top: int) -> list[str]:
    sit = situation_after(seen.state, seen.observation, seen.ctx, settings)
    current = sit.state.current or PLAIN
    rate, batch = sit.state.last_rate, sit.state.last_batch
    last = (
        f"its last window batch {batch:.0f} at {rate:,.0f} tokens/s"
        if rate is not None and batch is not None
        else "no usable window yet"
    )
    lines = [f"{seen.ctx.now / 3600:.2f} h: running {current.label}; {last}"]
    evaluation = evaluate(sit, current)
    if evaluation is None:
        lines.append("  no evaluation (not enough batch history to compare setups)")
    else:
        lines += _candidates(world, evaluation, seen.ctx.now, top)
        typical = sit.state.batch.quantile(0.5)
        lines += _calibration(sit.predictor.fit.at(typical), typical, current)
    lines.append(f"  decision: {seen.decision.sentence}")
    return lines


def _candidates(world: World, evaluation: Evaluation, now: float, top: int) -> list[str]:
    ranked = sorted(evaluation.values, key=lambda s: -evaluation.values[s])[:top]
    lines = [f"  {'setup':40} {'horizon':>9} {'interval':>17} {'measured':>9} {'world now':>10}"]
    for setup in ranked:
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
    band = calibration_band(typical)
    low, high = CALIBRATION_BANDS[band], CALIBRATION_BANDS[band + 1]
    span = f"{low}-{high - 1}" if band < len(CALIBRATION_BANDS) - 2 else f"{low} and up"
    lines = [f"  calibration at batch {typical:.0f} (band {span}):"]
    lines.append(f"    shared: {_factors(fit.shared)}")
    for family, factors in fit.own.items():
        if fit.evidence.get(family, 0.0) >= SHOWN_EVIDENCE or family == current.kind.value:
            windows = fit.evidence.get(family, 0.0)
            lines.append(f"    {family} own ({windows:.1f} windows): {_factors(factors)}")
    return lines


def _factors(factors: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.2f}" for name, value in sorted(factors.items()))


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    options.add_argument("world", help="a decision-quality world, e.g. published-drift")
    options.add_argument("--engine", help="the engine preset (default: the world's first)")
    options.add_argument("--at", required=True, help="hours into the run, comma-separated")
    options.add_argument("--top", type=int, default=12, help="candidates shown, best first")
    args = options.parse_args()
    engines = engines_of(args.world)
    engine = args.engine or engines[0]
    if engine not in engines:
        raise SystemExit(f"world {args.world} runs on {list(engines)}, not {engine}")
    try:
        hours = [float(h) for h in args.at.split(",") if h.strip()]
        moments = trace(args.world, engine, hours, args.top)
    except ValueError as error:
        raise SystemExit(f"--at: {error}") from error
    print(f"[{engine}] world {args.world}, windows of {INTERVAL_S:.0f} s")
    for moment in moments:
        print("\n".join(moment.lines))


if __name__ == "__main__":
    main()
