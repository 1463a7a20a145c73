"""Restart costs by setup (core/decide/restarts.py): learned from the rollouts the tuner
watches, patch to ready, with a first compile of a new (replay, L, K) charged apart."""

from __future__ import annotations

from autotuner.core.decide.context import Context
from autotuner.core.decide.restarts import RestartCosts, compile_key
from autotuner.core.decide.settings import RestartSettings
from autotuner.core.decide.state import TunerState
from autotuner.core.decide.step import step
from autotuner.core.observe.observation import unusable
from autotuner.core.types import Action, Setup
from autotuner.engines.vllm.capabilities import GDN_REPLAY
from autotuner.errors import UnusableReason
from autotuner.sim.worlds import qwen_on_b300
from tests.support.policy import cost_model_world, policy_settings

DEFAULTS = RestartSettings(downtime_s=180, first_compile_s=60)
SPEC3, REPLAY16, REPLAY8 = Setup(spec_tokens=3), Setup(replay_window=16), Setup(replay_window=8)


ON, OFF = {"prefix_caching": True}, {"prefix_caching": False}


def key(setup: Setup) -> str:
    return compile_key(setup, prefix_caching=True)


def test_the_compile_key_follows_replay_the_window_and_the_largest_k() -> None:
    assert key(REPLAY16) != key(REPLAY8)
    assert key(SPEC3) != key(Setup(spec_tokens=2))
    schedule = Setup.parse("spec:3@1-63:3,64-8191:1")
    assert key(schedule) == key(SPEC3)


def test_turning_prefix_caching_off_is_a_new_compile_key() -> None:
    # On a hybrid, prefix caching sets mamba_cache_mode and mamba_block_size, which the key
    # holds: the same setup with the cache turned off compiles anew.
    assert compile_key(REPLAY16, prefix_caching=False) != key(REPLAY16)
    costs = RestartCosts().seen_running(REPLAY16, **ON)
    assert costs.expected_s(REPLAY16, DEFAULTS, **ON) == 180
    assert costs.expected_s(REPLAY16, DEFAULTS, **OFF) == 240


def test_a_first_start_is_charged_its_compile_until_the_engine_has_run_it() -> None:
    costs = RestartCosts().seen_running(SPEC3, **ON)
    assert costs.expected_s(SPEC3, DEFAULTS, **ON) == 180
    assert costs.expected_s(REPLAY16, DEFAULTS, **ON) == 240
    ran = costs.measured(REPLAY16, 300.0, True, DEFAULTS, **ON)
    assert ran.first_compile is not None
    assert ran.first_compile.seconds == 120  # 300 s, of which 180 a cached restart
    assert ran.expected_s(REPLAY16, DEFAULTS, **ON) == 180  # compiled now
    assert ran.expected_s(REPLAY8, DEFAULTS, **ON) == 300  # another window: a compile of its own


def test_cached_restarts_are_learned_per_setup_and_lent_to_unmeasured_ones() -> None:
    costs = RestartCosts().seen_running(SPEC3, **ON).seen_running(REPLAY16, **ON)
    costs = costs.measured(REPLAY16, 90.0, False, DEFAULTS, **ON).measured(
        REPLAY16, 110.0, False, DEFAULTS, **ON
    )
    assert costs.cached_s(REPLAY16, DEFAULTS) == 100
    assert costs.cached_s(SPEC3, DEFAULTS) == 100  # another setup's restarts say more than 180
    assert costs.at_most(REPLAY16, 60.0, **ON).cached_s(REPLAY16, DEFAULTS) == 60
    assert costs.at_most(REPLAY16, 500.0, **ON).cached_s(REPLAY16, DEFAULTS) == 100


def test_a_watched_restart_is_timed_from_patch_to_ready() -> None:
    prior = qwen_on_b300()
    world = cost_model_world(prior, lambda t: 450.0, (0.85, 0.75, 0.65))  # replay wins at once
    settings = policy_settings(
        switch={"dwell_s": 0}, restart={"cooldown_s": 0}, exploration={"enabled": False}
    )
    state, deployed, interval, t = TunerState(), world.start, 60.0, 0.0
    switched_at = None
    while t < 7200 and state.restart_costs.first_compile is None:
        t += interval
        ctx = Context(
            now=t,
            model=prior.model,
            hardware=prior.hardware,
            engine=GDN_REPLAY,
            workload=prior.workload,
            deployed=deployed,
        )
        down = switched_at is not None and t - switched_at <= 200
        observation = (
            unusable("engine", UnusableReason.STALE, "restarting", start=t - interval, end=t)
            if down
            else world.observation(deployed, t, interval)
        )
        result = step(state, observation, ctx, settings)
        state = result.state
        if result.decision.action is Action.SWITCH and result.decision.target is not None:
            deployed, switched_at = result.decision.target, t
    # The engine had never run the new setup: what the restart took beyond a cached one
    # (180 s by default) is what its first compile cost.
    assert switched_at is not None
    assert deployed.replay_window
    learned = state.restart_costs.first_compile
    assert learned is not None
    assert 0 < learned.seconds <= 2 * interval
    assert key(deployed) in state.restart_costs.compiled
