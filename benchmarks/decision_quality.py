"""Decision quality: the policy against static setups and a hindsight oracle over 24-hour
traces, on a simulated engine whose true step times differ from the cost model.

Run: python -m benchmarks.decision_quality [--interval 300] [--traces diurnal,bursts,...]

Every strategy is charged the same restart downtime. Reported side by side, per trace and per
engine capability set: tokens served (ratio to the oracle), time-weighted efficiency (mean of
throughput now / best setup's throughput now, zero while restarting) and restarts per day.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from autotuner.core.capabilities import REPLAY_SPEC, UPSTREAM, EngineCapabilities
from autotuner.core.costmodel import Workload
from autotuner.core.hardware import datasheet
from autotuner.core.policy import Context, decide
from autotuner.core.registry import load_model
from autotuner.core.state import TunerState
from autotuner.core.types import Action, Setup
from autotuner.settings import PolicySettings
from autotuner.sim.truth import TruthEngine, realistic_error

DAY = 86400.0
DOWNTIME_S = 180.0


@dataclass(frozen=True)
class Trace:
    name: str
    batch: Callable[[float], float]  # demand per engine at time t (seconds)
    acceptance: Callable[[float], float]  # conditional rate at every position


def diurnal(t: float) -> float:
    return 4 + (512 - 4) * (1 - math.cos(2 * math.pi * t / DAY)) / 2


TRACES = {
    "diurnal": Trace("diurnal", diurnal, lambda t: 0.75),
    "bursts": Trace("bursts", lambda t: 400.0 if (t % 7200) < 900 else 16.0, lambda t: 0.75),
    "drift": Trace(
        "drift",
        lambda t: 16 + 240 * (1 - math.cos(2 * math.pi * t / DAY)) / 2,
        lambda t: 0.85 - 0.40 * t / DAY,
    ),
    "step": Trace("step", lambda t: 32.0 if t < DAY / 2 else 384.0, lambda t: 0.75),
}


def candidate_setups(engine: EngineCapabilities) -> list[Setup]:
    setups = [
        Setup(),
        *(Setup(spec_tokens=k) for k in (1, 2, 3, 4)),
        *(Setup(replay_window=w) for w in (8, 16, 32)),
        FIXED_SCHEDULE,
    ]
    if engine.replay_with_speculation:
        setups += [
            Setup(spec_tokens=k, replay_window=w)
            for k in (1, 2, 3, 4)
            for w in (8, 16, 32)
            if w > k + 1
        ]
    return setups


FIXED_SCHEDULE = Setup.parse("spec:3@1-32:3,33-8191:0")
STATICS = {
    "plain": Setup(),
    "always spec K=3": Setup(spec_tokens=3),
    "replay L=16": Setup(replay_window=16),
    "K schedule cut at 32": FIXED_SCHEDULE,
}


@dataclass
class Outcome:
    tokens: float
    efficiency: float
    restarts: float


def simulate(
    series: Sequence[Setup], truth_tps: dict[str, np.ndarray], best: np.ndarray, interval: float
) -> Outcome:
    """Tokens and efficiency of a setup sequence (one per interval), restarts charged."""
    tokens, efficiency, restarts = 0.0, 0.0, 0
    for i, setup in enumerate(series):
        uptime = 1.0
        if i and setup != series[i - 1]:
            restarts += 1
            uptime = max(interval - DOWNTIME_S, 0.0) / interval
        rate = truth_tps[setup.label][i]
        tokens += rate * interval * uptime
        efficiency += uptime * rate / best[i]
    return Outcome(tokens, efficiency / len(series), restarts * DAY / (len(series) * interval))


def oracle(
    truth_tps: dict[str, np.ndarray],
    setups: list[Setup],
    interval: float,
    max_restarts: int | None = None,
) -> list[Setup]:
    """Hindsight DP over the candidate setups, paying the same downtime on every change;
    with `max_restarts`, also limited to that many changes over the trace (one DP layer per
    restart used)."""
    labels = [s.label for s in setups]
    table = np.vstack([truth_tps[label] for label in labels]) * interval
    keep = max(interval - DOWNTIME_S, 0.0) / interval
    steps, count = table.shape[1], len(labels)
    limited = max_restarts is not None
    layers = (max_restarts or 0) + 1 if limited else 1
    value = np.full((layers, count), -np.inf)
    value[0] = table[:, 0]
    back = np.zeros((steps, layers, count, 2), dtype=np.int64)
    for i in range(1, steps):
        new = value + table[:, i]
        choice = np.stack(np.meshgrid(np.arange(layers), np.arange(count), indexing="ij"), -1)
        for r in range(layers):
            source_layer = r - 1 if limited else r
            if source_layer < 0:
                continue
            source = int(np.argmax(value[source_layer]))
            moved = value[source_layer, source] + table[:, i] * keep
            better = moved > new[r]
            new[r] = np.where(better, moved, new[r])
            choice[r, better] = (source_layer, source)
        value, back[i] = new, choice
    r, j = (int(x) for x in np.unravel_index(int(np.argmax(value)), value.shape))
    path = [j]
    for i in range(steps - 1, 0, -1):
        r, j = (int(x) for x in back[i, r, j])
        path.append(j)
    path.reverse()
    return [setups[k] for k in path]


def run_policy(
    trace: Trace,
    truth: TruthEngine,
    engine: EngineCapabilities,
    settings: PolicySettings,
    times: np.ndarray,
    interval: float,
    start: Setup,
) -> list[Setup]:
    state, deployed, used = TunerState(), start, []
    for t in times:
        used.append(deployed)
        now = float(t) + interval
        rates = [trace.acceptance(now)] * 4
        obs = truth.observation(
            now=now, window_s=interval, setup=deployed, batch=trace.batch(now), rates=rates
        )
        ctx = Context(
            now=now,
            model=truth.model,
            hardware=truth.hardware,
            engine=engine,
            workload=truth.workload,
            deployed=deployed,
        )
        decision, state = decide(state, obs, ctx, settings)
        if decision.action in (Action.SWITCH, Action.REVERT) and decision.target is not None:
            deployed = decision.target
    return used


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__)
    options.add_argument("--interval", type=float, default=300.0)
    options.add_argument("--traces", default=",".join(TRACES))
    options.add_argument("--model", default="nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
    options.add_argument("--gpu", default="H200")
    options.add_argument("--hours", type=float, default=24.0)
    args = options.parse_args()
    model, gpu = load_model(args.model), datasheet(args.gpu)
    truth = TruthEngine(model, gpu, Workload(), realistic_error)
    settings = PolicySettings(restart_downtime_s=DOWNTIME_S)
    times = np.arange(0.0, args.hours * 3600, args.interval)
    print(
        f"{model.name} on {gpu.name}; interval {args.interval:.0f}s; restart downtime "
        f"{DOWNTIME_S:.0f}s; hidden model error: sim.truth.realistic_error"
    )
    for engine in (UPSTREAM, REPLAY_SPEC):
        setups = candidate_setups(engine)
        for name in args.traces.split(","):
            trace = TRACES[name]
            truth_tps = {
                s.label: np.array(
                    [
                        truth.tokens_per_s(
                            s,
                            trace.batch(t + args.interval),
                            [trace.acceptance(t + args.interval)] * 4,
                        )
                        for t in times
                    ]
                )
                for s in setups
            }
            best = np.max(np.vstack(list(truth_tps.values())), axis=0)
            outcomes: dict[str, Outcome] = {}
            policy = run_policy(
                trace, truth, engine, settings, times, args.interval, start=Setup(spec_tokens=4)
            )
            for s in set(policy) - set(setups):  # schedules the policy built itself
                truth_tps[s.label] = np.array(
                    [
                        truth.tokens_per_s(
                            s,
                            trace.batch(t + args.interval),
                            [trace.acceptance(t + args.interval)] * 4,
                        )
                        for t in times
                    ]
                )
            outcomes["policy"] = simulate(policy, truth_tps, best, args.interval)
            for label, setup in STATICS.items():
                outcomes[label] = simulate([setup] * len(times), truth_tps, best, args.interval)
            hindsight = max(setups, key=lambda s: truth_tps[s.label].sum())
            outcomes[f"best static ({hindsight.label})"] = simulate(
                [hindsight] * len(times), truth_tps, best, args.interval
            )
            limit = int(6 * args.hours / 24)
            outcomes[f"oracle, <= {limit} restarts"] = simulate(
                oracle(truth_tps, setups, args.interval, limit), truth_tps, best, args.interval
            )
            outcomes["oracle"] = simulate(
                oracle(truth_tps, setups, args.interval), truth_tps, best, args.interval
            )
            reference = outcomes["oracle"].tokens
            print(f"\n[{engine.name}] trace {name}")
            print(f"  {'strategy':38} {'tokens/oracle':>13} {'time-eff':>9} {'restarts/day':>13}")
            for label, outcome in outcomes.items():
                print(
                    f"  {label:38} {outcome.tokens / reference:13.3f} "
                    f"{outcome.efficiency:9.3f} {outcome.restarts:13.1f}"
                )
            statics = [
                o.efficiency
                for k, o in outcomes.items()
                if k != "policy" and not k.startswith("oracle")
            ]
            mine = outcomes["policy"]
            print(
                f"  targets: tokens >= 0.97 oracle: {mine.tokens / reference >= 0.97}; "
                f"time-eff >= 0.95: {mine.efficiency >= 0.95}; above every static: "
                f"{mine.efficiency > max(statics)}; <= 6 restarts/day: {mine.restarts <= 6}"
            )


if __name__ == "__main__":
    main()
