"""Worlds: ground truths the policy is judged against, other than its own cost model.

A `World` is what one engine really does over a day: how many requests want service
(`demand`), how many drafts are accepted (`acceptance`), and how fast each setup steps at each
batch (`speed`, a `Speed`: step time per setup and batch, and how many requests fit). The policy
never sees it: it is told only the `prior` (model, GPU, workload) its cost model predicts from,
and the Observations a scrape of the world would give (`World.observation`). Swap the policy,
keep the worlds: the decision-quality benchmark reads nothing else.

Two kinds of truth:
- `MeasuredSpeed`: the published points of MEASUREMENTS.md (Qwen3.5-122B-A10B-NVFP4 on one
  B300, MTP drafter), interpolated over batch; it never calls the cost model.
- Distortions of the cost model that change its ranking: `VerifyCost` (what speculation adds
  to a step costs 1.5x the model's at batch 1 rising to 2x at batch 512), `ReplayGain`
  (replay's throughput gain is 1.3x the model's), and acceptance that drifts over the day.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

import numpy as np

from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.core.model.spec import ModelSpec
from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.observe.observation import Ratio, WindowTotals, build_observation
from autotuner.core.predict.acceptance import from_conditional
from autotuner.core.predict.costmodel import predict
from autotuner.core.predict.hardware import HardwareProfile, datasheet
from autotuner.core.types import Observation, Setup
from autotuner.sim.days import DAY, LULL_DAY, WORKING_DAY, daily_load, day_of
from autotuner.sim.sglang_startup import run_at
from autotuner.sim.truth import (
    StepError,
    TruthEngine,
    cache_config_labels,
    no_error,
    realistic_error,
    spec_tokens_at,
)
from autotuner.sources.sglang_metrics import add_speculation, marked

Rates = tuple[float, ...]


VLLM, SGLANG = "vllm", "sglang"
PUBLISHED, MODEL = "published", "model"


def unchanged(setup: Setup, batch: float) -> Setup:
    """The engine runs the setup it is given, at any batch."""
    return setup


class Speed(Protocol):
    """How fast one engine really runs each setup."""

    def step_time(self, setup: Setup, batch: float, rates: Sequence[float]) -> float:
        """Seconds per engine step with `batch` requests running (conditional acceptance
        `rates` per draft position, for speeds that depend on them)."""

    def capacity(self, setup: Setup) -> float:
        """Requests one engine runs at once with this setup; the rest queue."""


@dataclass(frozen=True)
class Prior:
    """What the policy is told: the inputs of its cost model."""

    model: ModelSpec
    hardware: HardwareProfile
    workload: Workload = field(default_factory=Workload)


@dataclass(frozen=True)
class World:
    name: str
    about: str
    prior: Prior
    speed: Speed
    demand: Callable[[float], float]  # running + waiting requests per engine at time t (s)
    acceptance: Callable[[float], Rates]  # conditional rate per draft position at time t
    start: Setup = field(default_factory=lambda: Setup(spec_tokens=4))  # deployed at t = 0
    days: float = 1.0  # how long a run of this world lasts at least (a repeating day: several)
    # The setup the world's engine runs at a batch for one the policy names (SGLang:
    # sim/sglang_startup.run_at).
    runs: Callable[[Setup, float], Setup] = unchanged
    engine: str = VLLM  # whose metrics a scrape reads (SGLANG: no per-position acceptance)
    # Whose numbers the truth is: PUBLISHED (a table the cost model was not fitted to) or
    # MODEL (the project's own cost model, distorted or not); the benchmark reports them apart.
    truth: str = MODEL
    # The largest K the hindsight oracle and the statics may draft (None: the starting K).
    oracle_spec_tokens: int | None = None

    @property
    def largest_k(self) -> int:
        return self.oracle_spec_tokens or self.start.spec_tokens

    def running(self, setup: Setup, t: float) -> float:
        """Requests running at time t: the engine sizes its state for the first batch's K."""
        return max(min(self.demand(t), self.speed.capacity(self.runs(setup, 1.0))), 1.0)

    def tokens_per_s(self, setup: Setup, t: float) -> float:
        """What one engine really serves at time t (queueing past capacity)."""
        running = self.running(setup, t)
        setup = self.runs(setup, running)
        rates = self.acceptance(t)
        step = self.speed.step_time(setup, running, rates)
        return running * tau(setup, running, rates) / step

    def observation(self, setup: Setup, now: float, window_s: float) -> Observation:
        """The window ending at `now` as a scrape of one engine would summarise it."""
        return observe(self, setup, now, window_s)


def tau(setup: Setup, batch: float, rates: Sequence[float]) -> float:
    """Tokens per request per step: 1 + the expected accepted drafts at this batch's K."""
    k = spec_tokens_at(setup, batch)
    return 1.0 + float(np.cumprod(list(rates)[:k]).sum()) if k else 1.0


def flat(setup: Setup, batch: float) -> Setup:
    """The static setup a (possibly scheduled) setup runs at this batch."""
    return Setup(spec_tokens=spec_tokens_at(setup, batch), replay_window=setup.replay_window)


def log_interp(batch: float, anchors: Mapping[int, float]) -> float:
    """Piecewise linear in log2(batch) through the anchor points; flat beyond the first and
    last anchor."""
    xs = sorted(anchors)
    return float(
        np.interp(math.log2(max(batch, 1.0)), [math.log2(x) for x in xs], [anchors[x] for x in xs])
    )


# --- The published world (MEASUREMENTS.md) ---------------------------------------------------

REFERENCE_ACCEPTANCE: Rates = (0.85, 0.75, 0.65, 0.55)  # MTP on GSM8K; position 4 assumed
PLAIN_TOKENS_AT_512 = 10_398.0  # published, batch 512
PLAIN_STEP_AT_1_S = 3.0e-3  # assumed (not published): ~330 tokens/s for one request
SPEC_RATIO_AT_512 = {1: 0.89, 3: 0.90}  # published, state copies
SPEC_EVEN_AT = 128  # published shape: speculation stops gaining beyond batch 128
DRAFT_COST_AT_1 = 0.15  # assumed: each draft pass + verify position, share of a plain step
REPLAY_SPEC_RATIO = {128: 1.87, 512: 1.90}  # K=3 L=16: 512 published; 128 NVIDIA's range low end
REPLAY_L16_RATIO = {1: 0.99, 8: 1.03, 32: 1.08, 64: 1.14, 128: 1.21, 256: 1.27, 512: 1.30}
OTHER_WINDOW_GAIN_SHARE = 0.9  # assumed: L = 8 or 32 keep 90% of L = 16's gain (16 was best)
MEASURED_CAPACITY = 512.0  # every published setup ran batch 512


def reference_tau(k: int) -> float:
    if k > len(REFERENCE_ACCEPTANCE):
        raise ValueError(f"K={k}: the published world has no acceptance beyond position 4")
    return 1.0 + float(np.cumprod(REFERENCE_ACCEPTANCE[:k]).sum())


def spec_ratio_at_512(k: int) -> float:
    """Linear in K through the two published points (K=1 0.89x, K=3 0.90x)."""
    (k1, r1), (k3, r3) = sorted(SPEC_RATIO_AT_512.items())
    return r1 + (r3 - r1) * (k - k1) / (k3 - k1)


def replay_ratio(window: int, batch: float) -> float:
    """Replay alone, throughput over plain: the GDN fp32 row (PR #48792) for L = 16."""
    ratio = log_interp(batch, REPLAY_L16_RATIO)
    return ratio if window == 16 else 1.0 + OTHER_WINDOW_GAIN_SHARE * (ratio - 1.0)


def spec_cost(k: int, batch: float) -> float:
    """Step time of spec:K (state copies) over plain's at the same batch. Anchors: batch 1
    (1 + 0.15 K, assumed), batch 128 (tau: no gain), batch 512 (tau / published ratio)."""
    anchors = {
        1: 1.0 + DRAFT_COST_AT_1 * k,
        SPEC_EVEN_AT: reference_tau(k),
        512: reference_tau(k) / spec_ratio_at_512(k),
    }
    return log_interp(batch, anchors)


def replay_spec_cost(k: int, window: int, batch: float) -> float:
    """Step time of replay+spec:K:L over plain's. K=3, L=16 anchors: batch 1 (spec's cost
    there, no copies to save, over replay's 0.99), 128 and 512 (tau / ratio); the step's extra
    over plain scales with K; other windows pay replay alone's difference to L = 16."""
    tau3 = reference_tau(3)
    anchors = {1: (1.0 + DRAFT_COST_AT_1 * 3) / REPLAY_L16_RATIO[1]}
    anchors |= {b: tau3 / ratio for b, ratio in REPLAY_SPEC_RATIO.items()}
    extra = (log_interp(batch, anchors) - 1.0) * k / 3
    return (1.0 + extra) * replay_ratio(16, batch) / replay_ratio(window, batch)


def plain_step(batch: float) -> float:
    """Plain decoding's step: linear in batch from the assumed batch-1 step to the published
    batch-512 throughput."""
    at_512 = 512 / PLAIN_TOKENS_AT_512
    return PLAIN_STEP_AT_1_S + (at_512 - PLAIN_STEP_AT_1_S) * (max(batch, 1.0) - 1) / 511


def relative_step(setup: Setup, batch: float) -> float:
    """A static setup's step time over plain's at the same batch."""
    k, window = setup.spec_tokens, setup.replay_window
    if k and window:
        return replay_spec_cost(k, window, batch)
    if k:
        return spec_cost(k, batch)
    return 1.0 / replay_ratio(window, batch) if window else 1.0


@dataclass(frozen=True)
class MeasuredSpeed:
    """Speeds interpolated from the published points (no cost model). A K schedule runs its
    band's K as the static setup would (the state slots it reserves cost nothing here: every
    published setup ran batch 512)."""

    def step_time(self, setup: Setup, batch: float, rates: Sequence[float]) -> float:
        return plain_step(batch) * relative_step(flat(setup, batch), batch)

    def capacity(self, setup: Setup) -> float:
        return MEASURED_CAPACITY


# --- The cost model, and distortions of it -----------------------------------------------------

UNCAPPED_MEMORY = 1e18  # bytes: step times at any batch, capacity taken from the real GPU


@dataclass
class ModelSpeed(TruthEngine):
    """The truth engine (the cost model times a hidden error) as a world's speed: its step
    times at exactly the batch asked for (as if memory held any batch), the real GPU's
    capacity."""

    _capacity: dict[str, float] = field(default_factory=dict, repr=False)

    @cached_property
    def _uncapped(self) -> TruthEngine:
        roomy = self.hardware.model_copy(update={"memory_bytes": UNCAPPED_MEMORY})
        return TruthEngine(
            self.model, roomy, self.workload, self.error, self.prefix_caching, self.prefill_error
        )

    def step_time(self, setup: Setup, batch: float, rates: Sequence[float]) -> float:
        return self._uncapped.step_time(setup, batch, rates)

    def capacity(self, setup: Setup) -> float:
        if setup.label not in self._capacity:
            accept = from_conditional([0.5] * setup.spec_tokens)
            curve = predict(self.model, self.hardware, setup, [1], accept, self.workload)
            self._capacity[setup.label] = float(curve.max_batch)
        return self._capacity[setup.label]


@dataclass(frozen=True)
class VerifyCost:
    """What speculation adds to a step (draft passes, verifying K more tokens per request,
    state copies: the step minus the same setup's step without drafts) costs `small` times the
    inner speed's at batch 1, rising log-linearly to `large` times at batch 512."""

    inner: Speed
    small: float = 1.5
    large: float = 2.0

    def factor(self, batch: float) -> float:
        return log_interp(batch, {1: self.small, 512: self.large})

    def step_time(self, setup: Setup, batch: float, rates: Sequence[float]) -> float:
        step = self.inner.step_time(setup, batch, rates)
        if not spec_tokens_at(setup, batch):
            return step
        base = self.inner.step_time(Setup(replay_window=setup.replay_window), batch, rates)
        return base + self.factor(batch) * (step - base)

    def capacity(self, setup: Setup) -> float:
        return self.inner.capacity(setup)


@dataclass(frozen=True)
class ReplayGain:
    """Replay's throughput gain over the same setup without replay (at the same batch) is
    `scale` times the inner speed's: true ratio - 1 = scale x (inner ratio - 1)."""

    inner: Speed
    scale: float = 1.3

    def step_time(self, setup: Setup, batch: float, rates: Sequence[float]) -> float:
        step = self.inner.step_time(setup, batch, rates)
        if not setup.replay_window:
            return step
        without = Setup(spec_tokens=setup.spec_tokens, schedule=setup.schedule)
        base = self.inner.step_time(without, batch, rates)
        return base / (1.0 + self.scale * (base / step - 1.0))

    def capacity(self, setup: Setup) -> float:
        return self.inner.capacity(setup)


# --- Days ----------------------------------------------------------------------------------------


def working_days_world(prior: Prior | None = None, days: float = 3.0) -> World:
    """The same working day repeated: the demand profile kept by time of day should make the
    second day's decisions better than the first's."""
    about = "identical working days (steep 8-9.5 h rise, lunch dip, evening fall)"
    return repeating_world("working-days", about, WORKING_DAY, prior, days)


def lull_days_world(prior: Prior | None = None, days: float = 3.0) -> World:
    """Busy days with an afternoon lull: from the second day the plan over the whole day holds
    through the lull (fewer restarts on average; the worst 24 hours are the same)."""
    about = "identical busy days (450) with a 3 h afternoon lull (100)"
    return repeating_world("lull-days", about, LULL_DAY, prior, days)


def repeating_world(
    name: str,
    about: str,
    table: tuple[tuple[float, float], ...],
    prior: Prior | None = None,
    days: float = 3.0,
) -> World:
    """The day of `table` repeated `days` times, on the cost model x realistic_error."""
    prior = prior or qwen_on_b300()
    return World(
        name=name,
        about=f"{days:g} {about}; model x sim.truth.realistic_error",
        prior=prior,
        speed=model_speed(prior, realistic_error),
        demand=day_of(table),
        acceptance=constant_acceptance(REFERENCE_ACCEPTANCE),
        start=Setup(spec_tokens=3),
        days=days,
    )


def constant_acceptance(rates: Rates) -> Callable[[float], Rates]:
    return lambda t: rates


def drifting_acceptance(first: float, last: float, positions: int = 4) -> Callable[[float], Rates]:
    """The same conditional rate at every position, linear from `first` at t = 0 to `last`
    at t = one day (held beyond)."""

    def rates(t: float) -> Rates:
        share = min(max(t / DAY, 0.0), 1.0)
        return (first + (last - first) * share,) * positions

    return rates


QWEN = "Qwen/Qwen3.5-122B-A10B"


def qwen_on_b300() -> Prior:
    """The published setting: Qwen3.5-122B-A10B in NVFP4 on one B300 (MTP drafter)."""
    return Prior(load_model(QWEN, weights="nvfp4"), datasheet("B300"))


def measured_world(prior: Prior | None = None) -> World:
    return World(
        name="measured",
        about="MEASUREMENTS.md points interpolated over log batch (no cost model); load to 450",
        prior=prior or qwen_on_b300(),
        speed=MeasuredSpeed(),
        demand=daily_load(4, 450),
        acceptance=constant_acceptance(REFERENCE_ACCEPTANCE),
        start=Setup(spec_tokens=3),
        truth=PUBLISHED,
    )


# The held-out days (issue 42): the published speeds under a load and an acceptance the model
# was not fitted to. A load to batch 512 (the published table's batch) over a cosine day, and an
# MTP head keeping 0.85 of drafts at every position (the published day's first position; later
# positions of an MTP head on easy prompts keep about as much), constant or drifting to 0.45.
HELD_OUT_PEAK = 512.0
HELD_OUT_ACCEPTANCE = 0.85


def held_out_worlds(prior: Prior | None = None) -> dict[str, World]:
    """Days on MeasuredSpeed (MEASUREMENTS.md's points: vLLM PR #49887 for speculation at batch
    512, PR #48792's GDN fp32 row for replay, NVIDIA's write-up for replay with speculation),
    starting at spec:3, the oracle drafting up to K = 4 as the engine accepts."""
    prior = prior or qwen_on_b300()
    days = (
        ("published-diurnal", "acceptance 0.85", constant_acceptance((HELD_OUT_ACCEPTANCE,) * 4)),
        (
            "published-drift",
            "acceptance 0.85 -> 0.45",
            drifting_acceptance(HELD_OUT_ACCEPTANCE, 0.45),
        ),
    )
    return {
        name: World(
            name=name,
            about=f"MEASUREMENTS.md points (no cost model); load 4 to 512; {about}",
            prior=prior,
            speed=MeasuredSpeed(),
            demand=daily_load(4, HELD_OUT_PEAK),
            acceptance=acceptance,
            start=Setup(spec_tokens=3),
            truth=PUBLISHED,
            oracle_spec_tokens=4,
        )
        for name, about, acceptance in days
    }


def model_speed(prior: Prior, error: StepError = no_error) -> ModelSpeed:
    return ModelSpeed(prior.model, prior.hardware, prior.workload, error)


NEMOTRON = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"


def prefix_cache_worlds(prefix_caching: Callable[[Setup], bool]) -> dict[str, World]:
    """Nemotron-3-Super NVFP4 on one H200 over a day, on a build whose replay runs without
    prefix caching (`prefix_caching` says which setups keep it): 4k-token prompts with 60% of
    their tokens in the cache (turning it off costs more than replay gains), and with 5% (it
    costs little). The truth is the cost model times the realistic error, with the prefill a
    setup without the cache really recomputes, priced by the world apart from the model: 1.3 times
    the model's prefill cost where the cache pays, 0.7 times where it hardly does (the policy is
    not told)."""
    worlds = {}
    for name, hits, prefill_error, about in (
        ("prefix-pays", 0.6, 1.3, "60% prefix-cache hits on 4k prompts: the cache pays"),
        ("prefix-idle", 0.05, 0.7, "5% prefix-cache hits on 4k prompts: the cache hardly pays"),
    ):
        workload = Workload(prefix_hit_rate=hits, prompt_tokens=4096, generation_tokens=512)
        prior = Prior(load_model(NEMOTRON), datasheet("H200"), workload)
        worlds[name] = World(
            name=name,
            about=f"{about}; load 4 to 450",
            prior=prior,
            speed=ModelSpeed(
                prior.model,
                prior.hardware,
                workload,
                realistic_error,
                prefix_caching,
                prefill_error,
            ),
            demand=daily_load(4, 450),
            acceptance=constant_acceptance(REFERENCE_ACCEPTANCE),
            start=Setup(spec_tokens=3),
        )
    return worlds


def synthetic_worlds(prior: Prior | None = None) -> dict[str, World]:
    """The cost model distorted the ways issue 17 names, on the published world's day."""
    prior = prior or qwen_on_b300()
    model = model_speed(prior)
    drift = drifting_acceptance(0.85, 0.45)
    reference = constant_acceptance(REFERENCE_ACCEPTANCE)
    options: list[tuple[str, str, Speed, Callable[[float], Rates]]] = [
        (
            "verify-cost",
            "speculation's extra step 1.5x (batch 1) to 2x (512) the model's",
            VerifyCost(model),
            reference,
        ),
        (
            "replay-gain",
            "replay's gain over its non-replay twin 1.3x the model's",
            ReplayGain(model),
            reference,
        ),
        (
            "acceptance-drift",
            "model x sim.truth.realistic_error, acceptance 0.85 -> 0.45",
            model_speed(prior, realistic_error),
            drift,
        ),
        (
            "combined",
            "verify 1.5-2x, replay gain 1.3x, acceptance 0.85 -> 0.45",
            ReplayGain(VerifyCost(model)),
            drift,
        ),
    ]
    return {
        name: World(name, about, prior, speed, daily_load(4, 450), accept, Setup(spec_tokens=3))
        for name, about, speed, accept in options
    }


def issue_worlds() -> dict[str, World]:
    """The published world, the synthetic ones and the repeating working day, sharing one
    prior."""
    prior = qwen_on_b300()
    return {
        "measured": measured_world(prior),
        **held_out_worlds(prior),
        **synthetic_worlds(prior),
        "working-days": working_days_world(prior),
        "lull-days": lull_days_world(prior),
    }


# --- Qwen3.5 on SGLang ------------------------------------------------------------------------


def qwen_sglang_world(prior: Prior | None = None) -> World:
    """Qwen3.5-122B-A10B (NVFP4, one B300, MTP drafter) served by SGLang 0.5.23 over a day
    reaching batch 512: the cost model x sim.truth.realistic_error, each setup run as SGLang
    runs it (sim/sglang_startup.run_at: replay with speculation verifies through a K + 1 window,
    `--speculative-adaptive` runs its batch tiers, a tier at K = 0 decodes plainly).
    Speculation alone falls below plain at batch 512 (state copies, and K state slots kept per
    request); replay with speculation, which SGLang ships for Gated DeltaNet, is the setup to
    move to there."""
    prior = prior or qwen_on_b300()
    return World(
        name="qwen-sglang",
        about="Qwen3.5 on SGLang 0.5.23 (replay+spec window K+1, adaptive tiers); "
        "model x sim.truth.realistic_error; load 4 to 512",
        prior=prior,
        speed=model_speed(prior, realistic_error),
        demand=daily_load(4, 512),
        acceptance=constant_acceptance(REFERENCE_ACCEPTANCE),
        start=Setup(spec_tokens=3),
        runs=run_at,
        engine=SGLANG,
    )


def sglang_worlds() -> dict[str, World]:
    """The worlds served by SGLang (the benchmark runs them on SGLang's capability table)."""
    return {"qwen-sglang": qwen_sglang_world()}


# --- Observations ---------------------------------------------------------------------------------


def observe(world: World, setup: Setup, now: float, window_s: float) -> Observation:
    """A window of one engine running `setup` in `world`, as build_observation sees a scrape:
    batch and waiting samples, step and output-token times, accepted drafts per position and
    the cache config that names replay."""
    demand, rates = world.demand(now), world.acceptance(now)
    running = world.running(setup, now)
    setup = world.runs(setup, running)
    step = world.speed.step_time(setup, running, rates)
    steps = running * window_s / step  # request-steps in the window
    totals = WindowTotals(
        start=now - window_s,
        end=now,
        last_sample_at=now,
        series=1,
        batch_samples=[running] * 5,
        waiting_samples=[max(demand - running, 0.0)] * 5,
        generation_tokens_per_s=running * tau(setup, running, rates) / step,
        step_time=Ratio(steps * step, steps),
        time_per_output_token=Ratio(step / tau(setup, running, rates), 1.0),
        prompt_length=Ratio(1024.0, 1.0),
        generation_length=Ratio(512.0, 1.0),
    )
    if world.engine == SGLANG:
        return _sglang_observation(world.name, totals, setup, running, rates, steps)
    totals.cache_config = cache_config_labels(setup)
    if setup.spec_tokens:
        _drafts(totals, setup, spec_tokens_at(setup, running), rates, steps)
    return build_observation(world.name, totals, now=now, limits=ObservationLimits())


def _sglang_observation(
    name: str,
    totals: WindowTotals,
    setup: Setup,
    running: float,
    rates: Sequence[float],
    steps: float,
) -> Observation:
    """The window as the SGLang source reads it (sources/sglang_metrics.py): acceptance only
    from the counters (one verify per request-step, the requests' first tokens from prefill),
    per position a geometric fit to the mean, the assumption marked."""
    k = spec_tokens_at(setup, running)
    generated = steps * tau(setup, running, rates)
    requests = generated / 512.0
    counters = {"verify_calls": steps, "generation_tokens": generated + requests}
    add_speculation(totals, {**counters, "requests": requests} if k else {}, max(k, 1))
    observation = build_observation(name, totals, now=totals.end, limits=ObservationLimits())
    return marked(observation)


def _drafts(
    totals: WindowTotals, setup: Setup, k: int, rates: Sequence[float], steps: float
) -> None:
    """Speculation counters: every request-step drafts K (this batch's band) tokens."""
    reach = np.cumprod(list(rates)[:k]) if k else np.zeros(0)
    drafts = steps if k else 0.0
    per_position = [drafts * float(r) for r in reach]
    totals.speculation = True
    totals.drafts = drafts
    totals.draft_tokens = drafts * k
    totals.accepted_per_position = per_position + [0.0] * (setup.spec_tokens - len(per_position))
    totals.accepted = float(sum(per_position))
