"""A plan move its own verification is predicted to revert is not made: verification judges a
change at the load now against the rate the running setup measured there, so a move the
calibrated model puts more than the regression tolerance under that measurement waits for the
load it is for (issue 42: on the published held-out days the evening moves ahead of a falling
load were each reverted, two restarts and a quarantine apiece)."""

from __future__ import annotations

from autotuner.core.decide.state import TunerState
from autotuner.core.types import Action, BlockReason, Decision, Setup
from tests.support.policy import policy_settings
from tests.unit.test_exploration import SETTINGS, SPEC3, World

# The model pinned (no calibration, nothing anchored to the running setup's measurement), so
# what spec:3 measures stays above what the model says and only this rule weighs it.
PINNED = policy_settings(
    SETTINGS,
    calibration={"bounds": (1.0, 1.0), "anchor_octaves": 0.0},
    exploration={"enabled": False},
)


def rising_to(world: World, factor: float) -> None:
    """The last hour rose `factor`-fold to the world's load: the forecast goes on up."""
    load, settings = world.state.load, world.settings.forecast
    for minute in range(60, 0, -1):
        demand = world.batch / factor ** (minute / 60)
        load = load.add(demand, world.now - 60 * minute, settings)
    world.state = world.state.updated(load=load)


def spec_faster(setup: Setup, batch: float) -> float:
    """Speculation alone steps in 0.7 of the model's time (replay as modelled)."""
    return 0.7 if setup.spec_tokens and not setup.replay_window else 1.0


def changes(decisions: list[Decision]) -> list[Decision]:
    return [d for d in decisions if d.action in (Action.SWITCH, Action.REVERT)]


def test_a_move_predicted_to_be_reverted_here_waits() -> None:
    # The load rose 3x in the last hour: over the horizon the model values replay:16 far
    # above spec:3, but here replay is predicted well under what spec:3 measures, so the
    # verification would revert it: held, saying so (before: switched, then reverted).
    world = World(spec_faster, settings=PINNED, state=TunerState(current=SPEC3))
    rising_to(world, 3.0)
    made = world.run(20)
    assert not changes(made), [d.sentence for d in changes(made)]
    held = [d for d in made if "it would be reverted" in d.sentence]
    assert held, [d.sentence for d in made]
    assert held[0].blocked_by is BlockReason.RESTART_COST
    assert "where its verification judges it" in held[0].sentence


def test_a_move_within_the_tolerance_here_goes_ahead_of_the_load() -> None:
    # As modelled (spec:3 measures what the model says): replay:16 is a little under spec:3
    # here, within the regression tolerance, and far above it where the load goes.
    world = World(lambda setup, batch: 1.0, settings=PINNED, state=TunerState(current=SPEC3))
    rising_to(world, 3.0)
    made = changes(world.run(20))
    assert made, "no switch"
    assert made[0].action is Action.SWITCH, [d.sentence for d in made]
    assert made[0].target == Setup(replay_window=16)


def test_a_model_off_the_machines_scale_holds_nothing_here() -> None:
    # Every setup steps 20x faster than the model says (an unprofiled machine, as the real-vLLM
    # tier's CPU is to the GPU profile it is given) and the calibration is pinned: the model's
    # tokens/s cannot be set against what spec:3 measures, so its ranking decides, as in the
    # world above that runs as modelled (before: every move held as "would be reverted").
    world = World(lambda setup, batch: 0.05, settings=PINNED, state=TunerState(current=SPEC3))
    rising_to(world, 3.0)
    made = world.run(20)
    assert not [d for d in made if "it would be reverted" in d.sentence]
    moved = changes(made)
    assert moved, [d.sentence for d in made[-3:]]
    assert moved[0].target == Setup(replay_window=16)
