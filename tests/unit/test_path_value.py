"""A path of setups is priced on a world's truth as the decision-quality benchmark prices the
policy's: its own moves reproduce its path, the oracle's moves price at the oracle."""

import re

import numpy as np
import pytest

from autotuner.core.types import Setup
from autotuner.errors import InputError
from benchmarks.decision_quality import (
    DOWNTIME_S,
    ENGINES,
    INTERVAL_S,
    benchmark_settings,
    build_world,
    candidate_truth,
    oracle,
    policy_path,
    run_policy,
)
from benchmarks.path_value import Priced, main, parse_path, price, series
from tests.support.run import python_module

WORLD, ENGINE = "combined", "replay-spec"
BEST_STATIC = "replay+spec:3:16"  # combined's on replay-spec (checked below)
STEP = "3.5=replay+spec:3:16"


@pytest.fixture(scope="module")
def priced() -> Priced:
    """The shared paths priced once: the best static from hour 0, the start held, a step at
    3.5 h; with the mean over 3.5-4.0 h."""
    world = build_world(WORLD, "", "")
    return price(world, ENGINE, [f"0={BEST_STATIC}", "", STEP], between=(3.5, 4.0))


def _times(hours: float) -> np.ndarray:
    return np.arange(0.0, hours * 3600, INTERVAL_S)


def test_the_policys_own_moves_as_decision_quality_writes_them_reproduce_its_path() -> None:
    world = build_world(WORLD, "", "")
    times = _times(1.0)
    engine = ENGINES[ENGINE].serving(world.prior.model)
    run = run_policy(world, engine, benchmark_settings(), times, INTERVAL_S)
    path = policy_path(times, run.decisions, INTERVAL_S)
    assert re.fullmatch(r"\d+\.\d\d=[^;]+(; \d+\.\d\d=[^;]+)*", path)  # hours as printed
    assert series(world.start, parse_path(path), times) == run.used


def test_the_oracles_moves_price_at_the_oracle_and_a_window_late_below_it() -> None:
    world = build_world(WORLD, "", "")
    engine = ENGINES[ENGINE].serving(world.prior.model)
    times = _times(24 * world.days)
    setups, truth, _ = candidate_truth(world, engine, times, INTERVAL_S)
    path = oracle(truth, setups, INTERVAL_S)
    changes = [(i, s) for i, s in enumerate(path) if i == 0 or s != path[i - 1]]
    assert len(changes) > 2  # the oracle moves on this day

    def written(late: int) -> str:
        return "; ".join(
            f"{(i + late * bool(i)) * INTERVAL_S / 3600}={s.label}" for i, s in changes
        )

    on_time, late = price(world, ENGINE, [written(0), written(1)]).rows
    assert on_time.tokens_per_oracle == pytest.approx(1.0, abs=1e-12)
    assert late.tokens_per_oracle < 1.0


def test_a_move_at_hour_zero_replaces_the_start_and_is_no_restart(priced: Priced) -> None:
    assert priced.best_static == BEST_STATIC
    static, held, _ = priced.rows
    assert static.tokens_per_static == pytest.approx(1.0, abs=1e-12)
    assert static.tokens_per_oracle == pytest.approx(priced.static_per_oracle, abs=1e-12)
    assert (static.restarts_per_day, static.worst_day) == (0, 0)
    assert (held.path, held.restarts_per_day) == ("", 0)
    assert held.tokens_per_static < 1.0  # the start setup, spec:3, is not the best static


def test_moves_apply_from_the_window_nearest_their_hour() -> None:
    times = _times(1.0)
    used = series(Setup(), parse_path("0.17=spec:2; 0.5=replay:16"), times)
    assert [s.label for s in used[:3]] == ["plain", "plain", "spec:2"]  # 0.17 h is 600 s
    assert [s.label for s in used[5:7]] == ["spec:2", "replay:16"]  # 0.5 h starts window 6
    with pytest.raises(InputError, match="fall in the same window"):
        series(Setup(), parse_path("0.17=spec:2; 0.18=replay:16"), times)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("7", "write HOURS=SETUP"),
        ("x=replay:16", "'x' is not a number of hours"),
        ("-1=plain", "finite number >= 0"),
        ("nan=plain", "finite number >= 0"),
        ("7=replay:x", "cannot read setup"),
        ("7=replay:16; 6=plain", "hours must rise"),
    ],
)
def test_an_unreadable_path_is_refused_naming_the_move(text: str, said: str) -> None:
    with pytest.raises(InputError, match=said):
        parse_path(text)


def test_a_move_past_the_run_or_a_setup_the_engine_refuses_is_refused() -> None:
    world = build_world(WORLD, "", "")
    with pytest.raises(InputError, match=r"--path '24=replay:16': move at 24\.0 h: the run ends"):
        price(world, ENGINE, ["24=replay:16"])
    with pytest.raises(InputError, match=r"replay\+spec:3:16 at 2.0 h"):
        price(world, "gdn-replay", ["2=replay+spec:3:16"])


def test_the_command_prints_a_row_per_path_beside_the_oracle(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = "0.17=replay+spec:3:16"
    main([WORLD, "--engine", ENGINE, "--path", path, "--path", "", "--between", "3.5,7.5"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"[{ENGINE}] world {WORLD}: start spec:3; best static ")
    assert lines[1].startswith("  the oracle ran: 00.0h ")
    assert lines[2].split()[-5:] == ["d", "tok/s", "3.5-7.5", "h", "path"]
    assert re.fullmatch(r"\d{1,3}(,\d{3})*", lines[3].split()[-2])  # the mean, in tokens/s
    assert [line.split("  ")[-1] for line in lines[-2:]] == ["0.17=replay+spec:3:16", "(none)"]


def test_the_command_prices_the_older_traces_on_the_benchmarks_model_and_gpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["step", "--engine", "gdn-replay", "--path", "", "--path", "1=replay:16"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("[gdn-replay] world step: start spec:4; best static ")
    assert [line.split("  ")[-1] for line in lines[-2:]] == ["(none)", "1=replay:16"]


def test_the_command_refuses_a_bad_path_with_its_reason() -> None:
    result = python_module("benchmarks.path_value", WORLD, "--path", "7=replay:x")
    assert result.returncode != 0
    assert "--path '7=replay:x': cannot read setup 'replay:x'" in result.stderr


def test_between_is_the_mean_the_world_serves_there_net_of_the_restarts_in_it(
    priced: Priced,
) -> None:
    world = build_world(WORLD, "", "")
    _, held, moved = priced.rows
    times = _times(4.0)[42:48]  # the six windows from 3.5 h

    def world_tps(label: str) -> list[float]:
        return [world.tokens_per_s(Setup.parse(label), float(t) + INTERVAL_S) for t in times]

    assert held.between_tps == pytest.approx(np.mean(world_tps("spec:3")), rel=1e-12)
    rates = world_tps("replay+spec:3:16")
    rates[0] *= (INTERVAL_S - DOWNTIME_S) / INTERVAL_S  # the restart at 3.5 h
    assert moved.between_tps == pytest.approx(np.mean(rates), rel=1e-12)


def test_a_stretch_with_no_window_is_refused() -> None:
    world = build_world(WORLD, "", "")
    with pytest.raises(InputError, match="--between 30,31: no window starts there"):
        price(world, ENGINE, [""], between=(30.0, 31.0))
