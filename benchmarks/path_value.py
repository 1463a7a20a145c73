"""What a given path of setups would have served on a decision-quality world; no policy runs.

    python -m benchmarks.path_value combined --engine replay-spec \
        --path '0.17=replay+spec:4:16; 17.25=replay+spec:2:16@1-191:2,192-8191:1' \
        --path '0.17=replay+spec:3:16; 17.25=replay+spec:2:16@1-191:2,192-8191:1'

prices each path as `benchmarks.decision_quality` prices the policy: the world's start setup,
then each move `HOURS=SETUP` (`;` between moves) from the window that starts at that hour (to
the nearest window: the hours `--decisions` prints are the ends of the windows the policy
decided in, so its own moves reproduce its row), the world's truth in every window and each
restart's downtime charged. Each path's row sits beside the oracle and the best static, in the
benchmark's columns. It answers "what would another path have won": a step at another hour,
a K the policy did not take, a schedule it did not find, read from the world's truth rather
than guessed. `--path ''` prices the start setup held all day. `--between A,B` adds each
path's mean tokens/s over the windows that start from hour A to before hour B (net of the
restarts there): what a path is worth over one stretch, such as a decision's horizon. The
older traces (`diurnal`, `bursts`, `drift`, `step`) run on decision_quality's default model
and GPU, as `benchmarks.decision_trace` runs them.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotuner.core.engine.capabilities import EngineCapabilities
from autotuner.core.types import Setup
from autotuner.errors import InputError
from autotuner.sim.days import DAY
from autotuner.sim.worlds import World
from benchmarks.decision_quality import (
    ALL_NAMES,
    ENGINES,
    INTERVAL_S,
    TARGET_RESTARTS,
    TRACE_GPU,
    TRACE_MODEL,
    Outcome,
    build_world,
    candidate_truth,
    engine_for,
    oracle,
    served,
    setup_changes,
    share_of_gap,
    simulate,
    truth_table,
)

HOUR = 3600.0


@dataclass(frozen=True)
class Move:
    hours: float  # into the run
    setup: Setup


@dataclass(frozen=True)
class PathRow:
    path: str  # as given
    tokens_per_oracle: float
    tokens_per_static: float
    gap_won: float
    restarts_per_day: float
    worst_day: int
    between_tps: float | None  # the mean over --between's windows, when asked


@dataclass(frozen=True)
class Priced:
    """The paths' rows on one world and engine, with the references they are read against."""

    world: str
    engine: str
    start: str
    oracle_moves: list[str]
    best_static: str
    static_per_oracle: float
    rows: list[PathRow]
    between: tuple[float, float] | None  # hours


def parse_path(text: str) -> tuple[Move, ...]:
    """`HOURS=SETUP; HOURS=SETUP ...`, hours rising (an empty text: no move). Raises InputError
    naming the move it cannot read."""
    moves: list[Move] = []
    for item in (part.strip() for part in text.split(";")):
        if not item:
            continue
        hours_text, sep, setup_text = item.partition("=")
        if not sep:
            raise InputError(f"move {item!r}: write HOURS=SETUP, e.g. 7.0=replay:16")
        try:
            hours = float(hours_text)
        except ValueError:
            raise InputError(
                f"move {item!r}: {hours_text.strip()!r} is not a number of hours"
            ) from None
        if not (math.isfinite(hours) and hours >= 0):
            raise InputError(f"move {item!r}: hours must be a finite number >= 0")
        if moves and hours <= moves[-1].hours:
            raise InputError(f"move {item!r}: hours must rise from move to move")
        moves.append(Move(hours, Setup.parse(setup_text)))
    return tuple(moves)


def series(start: Setup, moves: Sequence[Move], times: np.ndarray) -> list[Setup]:
    """The setup running in each window: `start`, then each move from the window whose start is
    nearest its hour. Raises InputError for a move at or past the run's end, or two moves in
    one window."""
    windows = len(times)
    running, used, index = start, [], 0
    first = [round(m.hours * HOUR / INTERVAL_S) for m in moves]
    for i, (move, at) in enumerate(zip(moves, first, strict=True)):
        if at >= windows:
            raise InputError(
                f"move at {move.hours} h: the run ends at {windows * INTERVAL_S / HOUR:g} h"
            )
        if i and at == first[i - 1]:
            raise InputError(
                f"moves at {moves[i - 1].hours} h and {move.hours} h fall in the same window "
                f"({INTERVAL_S:.0f} s)"
            )
    for i in range(windows):
        while index < len(moves) and first[index] <= i:
            running, index = moves[index].setup, index + 1
        used.append(running)
    return used


def price(
    world: World,
    engine_name: str,
    paths: Sequence[str],
    between: tuple[float, float] | None = None,
) -> Priced:
    """Each path's row against the oracle and the best static, as decision_quality reads the
    policy's. Raises InputError for an unreadable path, a move past the run or a setup the
    engine refuses, before the world's truth is built."""
    engine = ENGINES[engine_name].serving(world.prior.model)
    times = np.arange(0.0, DAY * world.days, INTERVAL_S)
    stretch = _stretch(times, between)
    runs = {path: _run(path, world.start, engine, times) for path in paths}
    setups, truth, best = candidate_truth(world, engine, times, INTERVAL_S)
    extra = {s for used in runs.values() for s in used} - set(setups)
    truth |= truth_table(world, sorted(extra, key=str), times, INTERVAL_S)
    top_path = oracle(truth, setups, INTERVAL_S)
    top = simulate(top_path, truth, best, INTERVAL_S).tokens
    statics = {s.label: simulate([s] * len(times), truth, best, INTERVAL_S) for s in setups}
    static = max(statics, key=lambda label: statics[label].tokens)
    return Priced(
        world=world.name,
        engine=engine_name,
        start=world.start.label,
        oracle_moves=setup_changes(top_path, times),
        best_static=static,
        static_per_oracle=statics[static].tokens / top,
        rows=[
            _row(
                path,
                simulate(used, truth, best, INTERVAL_S),
                statics[static].tokens,
                top,
                None if stretch is None else served(used, truth, INTERVAL_S)[0][stretch],
            )
            for path, used in runs.items()
        ],
        between=between,
    )


def _run(path: str, start: Setup, engine: EngineCapabilities, times: np.ndarray) -> list[Setup]:
    """The setup each window runs on `path`. Raises InputError naming the path for a move it
    cannot read, one past the run, or a setup the engine refuses."""
    try:
        moves = parse_path(path)
        for move in moves:
            refusal = engine.refusal(move.setup)
            if refusal is not None:
                raise InputError(f"{move.setup.label} at {move.hours} h: {refusal}")
        return series(start, moves, times)
    except InputError as error:
        raise InputError(f"--path {path!r}: {error}") from None


def _stretch(times: np.ndarray, between: tuple[float, float] | None) -> np.ndarray | None:
    """The windows starting from hour A to before hour B (None: none asked). Raises InputError
    for a stretch that holds no window."""
    if between is None:
        return None
    start, end = between
    inside = (times >= start * HOUR) & (times < end * HOUR)
    if not inside.any():
        run_end = len(times) * INTERVAL_S / HOUR
        raise InputError(f"--between {start:g},{end:g}: no window starts there (0-{run_end:g} h)")
    return inside


def _row(
    path: str, outcome: Outcome, static: float, top: float, between_rates: np.ndarray | None
) -> PathRow:
    return PathRow(
        path=path,
        tokens_per_oracle=outcome.tokens / top,
        tokens_per_static=outcome.tokens / static,
        gap_won=share_of_gap(outcome.tokens, static, top),
        restarts_per_day=outcome.restarts,
        worst_day=outcome.worst_day,
        between_tps=None if between_rates is None else float(np.mean(between_rates)),
    )


def print_priced(priced: Priced) -> None:
    print(
        f"[{priced.engine}] world {priced.world}: start {priced.start}; best static "
        f"{priced.best_static} at {priced.static_per_oracle:.4f} of the oracle"
    )
    print(f"  the oracle ran: {', '.join(priced.oracle_moves)}")
    stretch = "" if priced.between is None else " tok/s {:g}-{:g} h".format(*priced.between)
    print(
        f"  {'tok/oracle':>10} {'tok/static':>10} {'gap won':>8} {'restarts/d':>10} "
        f"{'worst d':>7}{stretch}  path"
    )
    for row in priced.rows:
        over = " (over the restart target)" if row.worst_day > TARGET_RESTARTS else ""
        mean = "" if row.between_tps is None else f"{row.between_tps:{len(stretch)},.0f}"
        print(
            f"  {row.tokens_per_oracle:10.4f} {row.tokens_per_static:10.4f} {row.gap_won:8.2f} "
            f"{row.restarts_per_day:10.1f} {row.worst_day:7d}{mean}  {row.path or '(none)'}{over}"
        )


def _options(argv: Sequence[str] | None) -> argparse.Namespace:
    options = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    options.add_argument("world", choices=ALL_NAMES, metavar="world", help="a benchmark world")
    options.add_argument("--engine", help="the engine preset (default: the world's first)")
    options.add_argument(
        "--path",
        action="append",
        required=True,
        dest="paths",
        metavar="'HOURS=SETUP; ...'",
        help="moves from the world's start setup; repeat for paths side by side",
    )
    options.add_argument(
        "--between",
        metavar="A,B",
        help="also each path's mean tokens/s over the windows from hour A to before hour B",
    )
    args = options.parse_args(argv)
    try:
        args.engine = engine_for(args.world, args.engine)
    except InputError as error:
        options.error(str(error))
    args.stretch = None
    if args.between is not None:
        try:
            start, end = (float(h) for h in args.between.split(","))
        except ValueError:
            options.error(f"--between {args.between}: two hours, A,B")
        if not start < end:
            options.error(f"--between {args.between}: A must come before B")
        args.stretch = (start, end)
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = _options(argv)
    try:
        priced = price(
            build_world(args.world, TRACE_MODEL, TRACE_GPU), args.engine, args.paths, args.stretch
        )
    except InputError as error:
        raise SystemExit(str(error)) from error
    print_priced(priced)


if __name__ == "__main__":
    main()
