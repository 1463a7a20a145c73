"""The benchmark's worlds: the published one goes through MEASUREMENTS.md's points without the
cost model, each synthetic one differs from the model exactly the way it says, and a world's
observations are what its speeds say."""

from __future__ import annotations

import math

import pytest

import autotuner.core.predict.costmodel
import autotuner.sim.worlds as worlds
from autotuner.core.model.registry import load_model
from autotuner.core.predict.acceptance import from_conditional
from autotuner.core.predict.costmodel import predict
from autotuner.core.types import Setup
from autotuner.engines.vllm.capabilities import FOLLOW_BUILD
from autotuner.sim.days import DAY, daily_load
from autotuner.sim.truth import StepError, realistic_error, spec_tokens_at, wrong_prior_error
from autotuner.sim.worlds import (
    NEMOTRON,
    REFERENCE_ACCEPTANCE,
    REPLAY_L16_RATIO,
    MeasuredSpeed,
    ModelSpeed,
    Prior,
    ReplayGain,
    Speed,
    VerifyCost,
    World,
    constant_acceptance,
    drifting_acceptance,
    log_interp,
    measured_world,
    prefix_cache_worlds,
    qwen_on_b300,
)
from benchmarks.decision_quality import WORLD_NAMES

PLAIN = Setup()


@pytest.fixture(scope="module")
def prior() -> Prior:
    return qwen_on_b300()


def at_batch(speed: Speed, prior: Prior, batch: float, rates: tuple[float, ...]) -> World:
    """A world held at one batch and acceptance."""
    return World("fixed", "", prior, speed, lambda t: batch, constant_acceptance(rates))


def ratio(world: World, label: str) -> float:
    return world.tokens_per_s(Setup.parse(label), 0.0) / world.tokens_per_s(PLAIN, 0.0)


def measured_at(batch: float, prior: Prior) -> World:
    return at_batch(MeasuredSpeed(), prior, batch, REFERENCE_ACCEPTANCE)


def test_log_interp_is_linear_in_log_batch_and_flat_outside() -> None:
    anchors = {1: 1.0, 16: 2.0, 256: 4.0}
    assert log_interp(4, anchors) == pytest.approx(1.5)
    assert log_interp(64, anchors) == pytest.approx(3.0)
    assert log_interp(0.5, anchors) == 1.0
    assert log_interp(4096, anchors) == 4.0


@pytest.mark.parametrize(
    ("label", "published"),
    [("plain", 1.0), ("spec:1", 0.89), ("spec:3", 0.90), ("replay+spec:3:16", 1.90)],
)
def test_measured_world_goes_through_the_published_batch_512_points(
    prior: Prior, label: str, published: float
) -> None:
    world = measured_at(512, prior)
    assert world.tokens_per_s(PLAIN, 0.0) == pytest.approx(10_398)
    assert ratio(world, label) == pytest.approx(published)


@pytest.mark.parametrize(("batch", "published"), sorted(REPLAY_L16_RATIO.items()))
def test_measured_replay_follows_the_replayssm_table(
    prior: Prior, batch: int, published: float
) -> None:
    assert ratio(measured_at(batch, prior), "replay:16") == pytest.approx(published)
    other = ratio(measured_at(batch, prior), "replay:8") - 1
    assert other == pytest.approx(0.9 * (published - 1))


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_measured_speculation_stops_gaining_beyond_batch_128(prior: Prior, k: int) -> None:
    assert ratio(measured_at(128, prior), f"spec:{k}") == pytest.approx(1.0)
    assert ratio(measured_at(32, prior), f"spec:{k}") > 1.05
    for batch in (160, 256, 400, 512, 1024):
        assert ratio(measured_at(batch, prior), f"spec:{k}") < 1.0


def test_measured_interpolation_between_anchors_is_in_log_batch(prior: Prior) -> None:
    """Halfway in log batch between 128 and 512 the step-time ratio is halfway too."""
    cost = worlds.spec_cost(1, 256)
    assert cost == pytest.approx((1.85 + 1.85 / 0.89) / 2)
    assert ratio(measured_at(256, prior), "spec:1") == pytest.approx(1.85 / cost)


def test_measured_world_ranks_replay_first_at_high_batch(prior: Prior) -> None:
    """Upstream at batch 450 (the day's peak): replay:16 beats every speculation setup by more
    than 25% (whatever the prior says: the benchmark reports that)."""
    world = measured_at(450, prior)
    labels = ["spec:1", "spec:2", "spec:3", "spec:4", "replay:8", "replay:16", "replay:32"]
    measured = {label: ratio(world, label) for label in labels}
    assert max(measured, key=lambda k: measured[k]) == "replay:16"
    assert measured["replay:16"] > 1.25 * max(measured[f"spec:{k}"] for k in (1, 2, 3, 4))


def test_measured_world_never_calls_the_cost_model(
    prior: Prior, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the measured world called the cost model")

    monkeypatch.setattr(autotuner.core.predict.costmodel, "predict", refuse)
    monkeypatch.setattr(worlds, "predict", refuse)
    world = measured_world(prior)
    for label in ("plain", "spec:3", "replay:16", "replay+spec:3:16", "spec:3@1-32:3,33-8191:0"):
        assert world.tokens_per_s(Setup.parse(label), DAY / 2) > 0
        assert world.observation(Setup.parse(label), DAY / 2, 300.0).usable


def test_measured_schedule_runs_its_bands_k(prior: Prior) -> None:
    schedule = Setup.parse("spec:3@1-32:3,33-8191:0")
    low, high = measured_at(16, prior), measured_at(256, prior)
    assert low.tokens_per_s(schedule, 0) == pytest.approx(
        low.tokens_per_s(Setup.parse("spec:3"), 0)
    )
    assert high.tokens_per_s(schedule, 0) == pytest.approx(high.tokens_per_s(PLAIN, 0))


def model_step(prior: Prior, label: str, batch: float) -> float:
    return ModelSpeed(prior.model, prior.hardware).step_time(
        Setup.parse(label), batch, REFERENCE_ACCEPTANCE
    )


@pytest.mark.parametrize(("batch", "factor"), [(1, 1.5), (math.sqrt(512), 1.75), (512, 2.0)])
@pytest.mark.parametrize(
    ("label", "base"), [("spec:3", "plain"), ("replay+spec:2:16", "replay:16")]
)
def test_verify_cost_scales_what_speculation_adds(
    prior: Prior, batch: float, factor: float, label: str, base: str
) -> None:
    speed = VerifyCost(ModelSpeed(prior.model, prior.hardware))
    true = speed.step_time(Setup.parse(label), batch, REFERENCE_ACCEPTANCE)
    added = model_step(prior, label, batch) - model_step(prior, base, batch)
    assert added > 0
    assert true - model_step(prior, base, batch) == pytest.approx(factor * added)


@pytest.mark.parametrize("label", ["plain", "replay:8", "replay:16"])
def test_verify_cost_leaves_setups_without_drafts_alone(prior: Prior, label: str) -> None:
    speed = VerifyCost(ModelSpeed(prior.model, prior.hardware))
    assert speed.step_time(Setup.parse(label), 300, REFERENCE_ACCEPTANCE) == pytest.approx(
        model_step(prior, label, 300)
    )


@pytest.mark.parametrize("error", [realistic_error, wrong_prior_error])
def test_the_hidden_errors_charge_speculation_only_where_a_schedule_drafts(
    error: StepError,
) -> None:
    """A K schedule's band at K = 0 runs as plain (no state copies, no draft passes): its
    error there is plain's, and in its drafting band spec:3's."""
    schedule = Setup.parse("spec:3@1-127:3,128-8191:0")
    assert error(schedule, 300) == pytest.approx(error(PLAIN, 300))
    assert error(schedule, 64) == pytest.approx(error(Setup(spec_tokens=3), 64))
    assert error(Setup(spec_tokens=3), 300) > error(PLAIN, 300)


@pytest.mark.parametrize("batch", [4, 64, 450])
@pytest.mark.parametrize(("label", "base"), [("replay:16", "plain"), ("replay+spec:3:8", "spec:3")])
def test_replay_gain_is_1_3x_the_models(prior: Prior, batch: float, label: str, base: str) -> None:
    """At the same batch (same K, same tau): true speed-up - 1 = 1.3 x (the model's - 1)."""
    model = ModelSpeed(prior.model, prior.hardware)
    speed = ReplayGain(model)
    setup, twin = Setup.parse(label), Setup.parse(base)

    def speedup(of: Speed) -> float:
        twin_step = of.step_time(twin, batch, REFERENCE_ACCEPTANCE)
        return twin_step / of.step_time(setup, batch, REFERENCE_ACCEPTANCE)

    assert abs(speedup(model) - 1) > 0.005
    assert speedup(speed) - 1 == pytest.approx(1.3 * (speedup(model) - 1))
    assert speed.step_time(twin, batch, REFERENCE_ACCEPTANCE) == pytest.approx(
        model.step_time(twin, batch, REFERENCE_ACCEPTANCE)
    )


def test_replay_gain_shows_in_tokens_served_under_capacity(prior: Prior) -> None:
    model = ModelSpeed(prior.model, prior.hardware)
    true = at_batch(ReplayGain(model), prior, 128, REFERENCE_ACCEPTANCE)
    modelled = at_batch(model, prior, 128, REFERENCE_ACCEPTANCE)
    assert ratio(true, "replay:8") - 1 == pytest.approx(1.3 * (ratio(modelled, "replay:8") - 1))


def test_acceptance_drifts_from_085_to_045_over_the_day() -> None:
    rates = drifting_acceptance(0.85, 0.45)
    assert rates(0.0) == pytest.approx((0.85,) * 4)
    assert rates(DAY / 2) == pytest.approx((0.65,) * 4)
    assert rates(DAY) == pytest.approx((0.45,) * 4)
    assert rates(2 * DAY) == pytest.approx((0.45,) * 4)


def test_daily_load_rises_to_its_peak_at_noon_and_falls() -> None:
    demand = daily_load(4, 450)
    assert demand(0) == pytest.approx(4)
    assert demand(DAY / 2) == pytest.approx(450)
    assert demand(DAY / 4) == pytest.approx(227)
    assert demand(DAY) == pytest.approx(4)


def test_issue_worlds_are_named_and_start_on_speculation() -> None:
    built = worlds.issue_worlds()
    assert set(built) == set(WORLD_NAMES)  # the benchmark runs each of them
    assert all(w.start == Setup(spec_tokens=3) for w in built.values())
    assert built["combined"].acceptance(DAY)[0] == pytest.approx(0.45)


def test_the_working_days_repeat_and_rise_steeply_in_the_morning() -> None:
    world = worlds.issue_worlds()["working-days"]
    assert world.days > 1
    for hour in (3.0, 9.0, 12.75, 20.0):
        assert world.demand(hour * 3600) == pytest.approx(world.demand(DAY + hour * 3600))
    assert world.demand(9.5 * 3600) > 50 * world.demand(6 * 3600)
    assert world.demand(12.75 * 3600) < world.demand(11 * 3600)


@pytest.mark.parametrize("label", ["spec:3", "replay:16", "spec:3@1-32:3,33-8191:0", "plain"])
def test_observation_reports_what_the_world_serves(prior: Prior, label: str) -> None:
    world = measured_world(prior)
    setup, now = Setup.parse(label), DAY / 3
    observed = world.observation(setup, now, 300.0)
    assert observed.usable
    assert observed.generation_tokens_per_s == pytest.approx(world.tokens_per_s(setup, now))
    assert observed.batch is not None
    assert observed.batch.mean == pytest.approx(world.demand(now))
    k = spec_tokens_at(setup, world.demand(now))
    step = world.speed.step_time(setup, world.demand(now), REFERENCE_ACCEPTANCE)
    assert observed.step_time_s == pytest.approx(step)
    if k:
        assert observed.acceptance is not None
        assert observed.acceptance.per_position[:k] == pytest.approx(REFERENCE_ACCEPTANCE[:k])


def test_observation_queues_past_capacity(prior: Prior) -> None:
    """A model-based world caps running requests at the setup's capacity."""
    speed = ModelSpeed(prior.model, prior.hardware)
    setup = Setup(spec_tokens=4)
    capacity = speed.capacity(setup)
    world = at_batch(speed, prior, capacity + 100, REFERENCE_ACCEPTANCE)
    observed = world.observation(setup, 300.0, 300.0)
    assert observed.batch is not None
    assert observed.batch.mean == pytest.approx(capacity)
    assert observed.waiting_mean == pytest.approx(100)
    accept = from_conditional(list(REFERENCE_ACCEPTANCE))
    curve = predict(prior.model, prior.hardware, setup, [round(capacity + 100)], accept)
    assert world.tokens_per_s(setup, 0) == pytest.approx(float(curve.tokens_per_s[0]))


def test_the_prefix_cache_worlds_disagree_on_replay_with_speculation() -> None:
    """Where 60% of 4k prompts hit the cache, turning it off for replay+spec costs more than
    replay gains at large batch; at 5% it costs little and replay+spec wins."""
    engine = FOLLOW_BUILD.serving(load_model(NEMOTRON))
    worlds = prefix_cache_worlds(engine.keeps_prefix_caching)
    busy = 12 * 3600.0  # the afternoon peak of the daily load
    replay_spec, spec = Setup(spec_tokens=3, replay_window=16), Setup(spec_tokens=3)
    pays, idle = worlds["prefix-pays"], worlds["prefix-idle"]
    assert pays.tokens_per_s(replay_spec, busy) < pays.tokens_per_s(spec, busy)
    assert idle.tokens_per_s(replay_spec, busy) > 1.3 * idle.tokens_per_s(spec, busy)
    # With the cache kept, more hits leave fewer fresh prompt tokens to prefill.
    assert pays.tokens_per_s(spec, busy) > idle.tokens_per_s(spec, busy)
