"""Where the published days' misses sit (issue 42), from the worlds' truth alone: no policy runs.

1. The published world's speeds against the raw cost model, by batch, for the setups the
   misses turn on. Only some of the world's points are published (MEASUREMENTS.md: plain and
   spec:3 at batch 512 for this model and GPU; replay:16's ratio to plain at the batches
   listed, from a Qwen3.5-4B on an H100); between them the world interpolates from an assumed
   batch-1 step (`sim/worlds.py`). Where the two part, only a question finds out which is right.
2. A single switch from the world's start setup to a target at each time, priced as
   `decision_quality` prices the policy (the restart's downtime charged): tokens against the
   oracle and the best static, and the share of the gap won. The earliest switch bounds what
   any policy starting there can win; the time where the share crosses 0.5 says how many
   windows a question may come after the oracle's move.

`python -m benchmarks.switch_timing` prints both for the published worlds."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotuner.core.predict.acceptance import from_conditional
from autotuner.core.predict.costmodel import predict
from autotuner.core.types import Setup
from autotuner.sim.worlds import (
    HELD_OUT_ACCEPTANCE,
    MEASURED_CAPACITY,
    REPLAY_L16_RATIO,
    MeasuredSpeed,
    World,
    qwen_on_b300,
    tau,
)
from benchmarks.decision_quality import (
    ENGINES,
    TARGET_GAP_WON,
    build_world,
    candidate_truth,
    engines_of,
    oracle,
    setup_changes,
    share_of_gap,
    simulate,
    truth_table,
)

INTERVAL_S = 300.0
HOUR = 3600.0
BATCHES = (1, 4, 8, 16, 32, 64, 78, 128, 256, 512)
COMPARED = ("plain", "spec:3", "replay:16")
PUBLISHED_BATCH = int(MEASURED_CAPACITY)  # every published setup on this model and GPU ran 512
# The batches where MEASUREMENTS.md publishes each figure the world is built from.
PUBLISHED_AT = {
    "plain": (PUBLISHED_BATCH,),
    "spec:3 / plain": (PUBLISHED_BATCH,),
    "replay:16 / plain (a Qwen3.5-4B, H100)": tuple(REPLAY_L16_RATIO),
}


@dataclass(frozen=True)
class SwitchAt:
    hours: float
    tokens_per_oracle: float
    tokens_per_static: float
    gap_won: float


@dataclass(frozen=True)
class Timing:
    world: str
    engine: str
    start: str
    target: str
    best_static: str
    oracle_over_static: float
    oracle_moves: list[str]  # 'hh.hh h label' at the start and at each of the oracle's changes
    switches: list[SwitchAt]


def speeds_against_model() -> list[tuple[int, dict[str, float]]]:
    """Per batch, the published world's tokens/s over the raw model's, for COMPARED (the
    held-out days' MTP acceptance at every position)."""
    prior = qwen_on_b300()
    rates = (HELD_OUT_ACCEPTANCE,) * 4
    accept = from_conditional(rates)
    speed = MeasuredSpeed()
    rows = []
    for batch in BATCHES:
        ratios = {}
        for label in COMPARED:
            setup = Setup.parse(label)
            world = batch * tau(setup, batch, rates) / speed.step_time(setup, batch, rates)
            model = predict(prior.model, prior.hardware, setup, [batch], accept, prior.workload)
            ratios[label] = world / float(model.tokens_per_s[0])
        rows.append((batch, ratios))
    return rows


def timing(world: World, engine_name: str, target: str | None, at: Sequence[float]) -> Timing:
    """One switch from the world's start to `target` (the best static by tokens if None) at
    each of `at` hours, on the world's truth."""
    engine = ENGINES[engine_name].serving(world.prior.model)
    times = np.arange(0.0, 24 * world.days * HOUR, INTERVAL_S)
    setups, truth, best = candidate_truth(world, engine, times, INTERVAL_S)
    statics = {s.label: simulate([s] * len(times), truth, best, INTERVAL_S).tokens for s in setups}
    static = max(statics, key=lambda label: statics[label])
    path = oracle(truth, setups, INTERVAL_S)
    top = simulate(path, truth, best, INTERVAL_S).tokens
    goal = Setup.parse(target or static)
    missing = [s for s in (world.start, goal) if s.label not in truth]
    truth |= truth_table(world, missing, times, INTERVAL_S)
    switches = []
    for hours in at:
        k = max(1, round(hours * HOUR / INTERVAL_S))
        series = [world.start] * k + [goal] * (len(times) - k)
        tokens = simulate(series, truth, best, INTERVAL_S).tokens
        won = share_of_gap(tokens, statics[static], top)
        switches.append(
            SwitchAt(k * INTERVAL_S / HOUR, tokens / top, tokens / statics[static], won)
        )
    return Timing(
        world.name,
        engine_name,
        world.start.label,
        goal.label,
        static,
        top / statics[static],
        setup_changes(path, times),
        switches,
    )


def print_speeds() -> None:
    print(
        "the published world's tokens/s over the raw model's (Qwen3.5-122B-A10B NVFP4, B300; "
        f"acceptance {HELD_OUT_ACCEPTANCE} at every draft position)"
    )
    print(f"  {'batch':>5} " + " ".join(f"{label:>10}" for label in COMPARED) + "  published")
    for batch, ratios in speeds_against_model():
        said = [what for what, batches in PUBLISHED_AT.items() if batch in batches]
        row = " ".join(f"{ratios[label]:10.2f}" for label in COMPARED)
        print(f"  {batch:5d} {row}  {', '.join(said) or '-'}")


def print_timing(result: Timing) -> None:
    print(
        f"\n[{result.engine}] {result.world}: one switch {result.start} -> {result.target}; "
        f"best static {result.best_static}, oracle / best static {result.oracle_over_static:.4f}"
    )
    print(f"  the oracle ran: {', '.join(result.oracle_moves)}")
    print(f"  {'at':>6} {'tok/oracle':>10} {'tok/static':>10} {'gap won':>8}")
    for s in result.switches:
        mark = " (>= target)" if s.gap_won >= TARGET_GAP_WON else ""
        print(
            f"  {s.hours:5.2f}h {s.tokens_per_oracle:10.4f} {s.tokens_per_static:10.4f} "
            f"{s.gap_won:8.2f}{mark}"
        )


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worlds", default="measured,published-diurnal,published-drift")
    parser.add_argument(
        "--at",
        default="0.08,0.17,2.75,3.0,3.08,3.17,3.25,3.33",
        help="hours of the one switch, comma-separated",
    )
    parser.add_argument("--target", default=None, help="setup switched to (the best static)")
    return parser.parse_args()


def main() -> None:
    args = options()
    at = [float(h) for h in args.at.split(",")]
    if any(not 0 < h < 24 for h in at):
        raise SystemExit(f"--at {args.at}: every switch must fall within the first day (0-24 h)")
    print_speeds()
    for name in args.worlds.split(","):
        world = build_world(name, "", "")
        for engine_name in engines_of(name):
            print_timing(timing(world, engine_name, args.target, at))


if __name__ == "__main__":
    main()
