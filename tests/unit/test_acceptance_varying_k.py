"""Acceptance when the proposed K varies: a per-batch K schedule, n-gram-like drafters.

vLLM counts a draft in `num_drafts` whenever it proposed a token, but a trial at position i
only when it proposed i + 1 tokens or more (vllm/v1/spec_decode/metrics.py `observe_draft`):
the simulated engine counts the same way, and these tests read its scrapes as the loop does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import httpx
import pytest

from autotuner.core.decide.context import Context
from autotuner.core.decide.estimates import AcceptanceMemory
from autotuner.core.decide.learning import absorb
from autotuner.core.decide.settings import PolicySettings
from autotuner.core.decide.state import TunerState
from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.observe.observation import read_acceptance
from autotuner.core.predict import acceptance as acc
from autotuner.core.types import AcceptanceStats, Observation, Setup
from autotuner.errors import InputError
from autotuner.sim.engine import SimSetup, SimulatedVllm
from autotuner.sources.vllm_scrape import VllmScraper
from tests.support.clock import Clock
from tests.support.policy import H200, MODEL, STATIC_K

TRUTH = (0.8, 0.7, 0.6)  # the simulated drafter's rates given the position was proposed
SCHEDULE = Setup.parse("spec:3@1-4:3,5-512:1")  # K = 3 alone or nearly, 1 when busy
MIXED = (1, 8, 2, 8, 16, 8)  # running requests, one per scrape interval, cycled
LIMITS = ObservationLimits(min_batch_samples=2, min_drafts=10, max_age_s=1e9)


def step_time(batch: float, setup: SimSetup) -> float:
    """Slower with the batch and with K: drafts per second are not simply the batch."""
    return 0.01 + 0.002 * batch + 0.003 * setup.k_at(batch)


def scraped(
    setup: Setup,
    loads: Sequence[float] = MIXED,
    *,
    proposed_lengths: Sequence[float] = (),
    scrapes: int = 60,
    step: Callable[[float, SimSetup], float] = step_time,
) -> Observation:
    """A window of one simulated engine, scraped every second while the load cycles through
    `loads`, summarised as the loop's source does (without the deployed setup)."""
    clock = Clock()
    start = clock.t
    sim = SimulatedVllm(
        setup=SimSetup.of(setup, TRUTH, proposed_lengths=proposed_lengths),
        load=lambda t: loads[round(t - start) % len(loads)],
        step_time=step,
        clock=clock,
    )

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, content=sim.render(), headers={"content-type": "text/plain; version=0.0.4"}
        )

    scraper = VllmScraper(
        ["http://sim/metrics"],
        client=httpx.Client(transport=httpx.MockTransport(handle)),
        clock=clock,
    )
    for _ in range(scrapes):
        scraper.record(scraper.scrape(), keep_s=1e9)
        clock.t += 1.0
    clock.t -= 1.0
    return scraper.observation(1e9, LIMITS)


def accepted(observation: Observation) -> AcceptanceStats:
    assert observation.usable, observation.detail
    assert observation.acceptance is not None
    return observation.acceptance


def within(stats: AcceptanceStats, truth: Sequence[float]) -> list[bool]:
    return [
        lo <= t <= hi
        for lo, t, hi in zip(stats.per_position_low, truth, stats.per_position_high, strict=True)
    ]


# --- the sim engine under a K schedule -------------------------------------------------------


def test_a_schedule_biases_the_naive_rates_and_the_schedule_recovers_them() -> None:
    window = scraped(SCHEDULE)
    naive = accepted(window)  # no setup: the counters alone
    read = accepted(read_acceptance(window, SCHEDULE))  # what the loop reads with the args
    print(
        f"\nschedule {SCHEDULE.label} at batches {MIXED}: naive {naive.per_position}, "
        f"read {read.per_position} [{read.per_position_low} - {read.per_position_high}], "
        f"share proposed {read.proposed_share}, truth {TRUTH}"
    )
    # Naive: position 1 is P(accepted and proposed), a quarter of the truth and far below its
    # interval; position 0 is unbiased (every draft proposes it).
    assert naive.per_position[0] == pytest.approx(TRUTH[0])
    assert naive.per_position[1] < 0.5 * TRUTH[1]
    assert naive.per_position_high[1] < TRUTH[1]
    # The counters alone see fewer draft tokens than K per draft and say so.
    assert naive.proposals == "unknown"
    assert naive.lower_bound == (False, True, True)
    # Read with the schedule: each position over the drafts that proposed it.
    assert read.proposals == "schedule"
    assert read.lower_bound == (False, False, False)
    assert all(within(read, TRUTH)), (read.per_position_low, read.per_position_high)
    assert read.per_position == pytest.approx(TRUTH, abs=1e-6)
    assert read.per_position[1] > naive.per_position[1] / read.proposed_share[1] * 0.99
    assert read.trials_per_position[1] < read.drafts * 0.2  # only the K = 3 drafts


def test_a_window_in_one_band_learns_nothing_of_the_positions_it_did_not_propose() -> None:
    busy = accepted(read_acceptance(scraped(SCHEDULE, loads=(8, 16)), SCHEDULE))
    assert busy.proposed_share == (1.0, 0.0, 0.0)
    assert busy.trials_per_position[1:] == (0.0, 0.0)
    assert (busy.per_position_low[1], busy.per_position_high[1]) == (0.0, 1.0)


def test_three_k_values_lean_on_the_batch_samples() -> None:
    schedule = Setup.parse("spec:3@1-2:3,3-6:2,7-512:1")
    loads = (1, 8, 4, 8, 16, 2)
    # At a constant step the samples' mix (b drafts a step at batch b) is the drafts' mix.
    steady = accepted(read_acceptance(scraped(schedule, loads, step=lambda b, s: 0.02), schedule))
    assert all(within(steady, TRUTH)), (steady.per_position_low, steady.per_position_high)
    # A step that grows with the batch shifts the mix; the mean draft length corrects most of it.
    moving = accepted(read_acceptance(scraped(schedule, loads), schedule))
    naive_error = max(abs(n - t) for n, t in zip(moving.naive_per_position, TRUTH, strict=True))
    error = max(abs(p - t) for p, t in zip(moving.per_position, TRUTH, strict=True))
    assert error < 0.1 < 0.4 < naive_error


def test_a_drafter_that_proposes_fewer_at_will_gives_lower_bounds() -> None:
    # n-gram-like: 10% of steps find nothing (no draft counted), the rest propose 1, 2 or 3.
    lengths = (0.1, 0.3, 0.2, 0.4)
    window = scraped(Setup(spec_tokens=3), loads=(4, 8), proposed_lengths=lengths)
    stats = accepted(window)
    assert stats.proposals == "unknown"
    assert stats.lower_bound == (False, True, True)
    assert stats.per_position[0] == pytest.approx(TRUTH[0])  # every counted draft proposed it
    assert all(p <= t + 1e-9 for p, t in zip(stats.per_position, TRUTH, strict=True))
    assert stats.proposals_note
    assert "lower bound" in stats.proposals_note
    # The drafter named in the args does not make the deep positions known.
    named = read_acceptance(window, Setup(spec_tokens=3), {"method": "ngram"})
    assert accepted(named).lower_bound == (False, True, True)
    # Nor does a schedule when the drafter shortens its own proposals.
    scheduled = scraped(SCHEDULE, proposed_lengths=lengths)
    for drafter in ({"method": "ngram"}, {"method": "eagle", "enable_adaptive_verification": True}):
        assert accepted(read_acceptance(scheduled, SCHEDULE, drafter)).proposals == "unknown"


def test_every_draft_proposing_k_needs_no_setup() -> None:
    stats = accepted(scraped(Setup(spec_tokens=3), loads=(4, 8)))
    assert stats.proposals == "full"
    assert stats.per_position == pytest.approx(TRUTH)
    assert stats.lower_bound == (False, False, False)


# --- the loop: the policy pools what the deployed setup says ---------------------------------


def test_the_loop_pools_the_rates_given_proposed_under_the_deployed_schedule() -> None:
    settings = PolicySettings()
    context = Context(now=10_000.0, model=MODEL, hardware=H200, engine=STATIC_K, deployed=SCHEDULE)
    state = TunerState(current=SCHEDULE)
    for minute in range(3):
        window = scraped(SCHEDULE)  # built without the setup, as a source builds it
        state = absorb(state, window, context, settings)
        context = Context(
            now=context.now + 60 * minute,
            model=MODEL,
            hardware=H200,
            engine=STATIC_K,
            deployed=SCHEDULE,
        )
    estimate = state.acceptance.estimate(context.now, 3600.0)
    assert estimate is not None
    assert estimate.max_spec_tokens == 3
    assert estimate.conditional == pytest.approx(TRUTH, abs=1e-6)
    assert estimate.exact_spec_tokens == 3
    # A busy window (every draft K = 1) keeps what the K = 3 drafts taught.
    state = absorb(state, scraped(SCHEDULE, loads=(8, 16)), context, settings)
    kept = state.acceptance.estimate(context.now, 3600.0)
    assert kept is not None
    assert kept.conditional == pytest.approx(TRUTH, abs=1e-6)


def test_controller_and_policy_read_the_same_once() -> None:
    window = scraped(SCHEDULE)
    once = read_acceptance(window, SCHEDULE, {"method": "draft_model"})
    assert read_acceptance(once, SCHEDULE) is once  # already read for this setup


# --- the estimator ---------------------------------------------------------------------------


def test_trials_are_the_drafts_that_proposed_each_position() -> None:
    # 1000 drafts, a quarter proposed 3 tokens, the rest 1; rates 0.8, 0.7, 0.6 given proposed.
    counts = [800.0, 250 * 0.8 * 0.7, 250 * 0.8 * 0.7 * 0.6]
    est = acc.from_counts(1000, counts, proposed=(1.0, 0.25, 0.25))
    assert est.trials == pytest.approx((1000, 200, 140))
    assert est.conditional == pytest.approx(TRUTH)
    assert acc.from_counts(1000, counts).conditional[1] == pytest.approx(0.175)  # naive
    # Unknown past position 0: naive rates, flagged, nothing read past them.
    bounded = acc.from_counts(1000, counts, proposed=(1.0,))
    assert bounded.lower_bound == (False, True, True)
    assert bounded.exact_spec_tokens == 1
    assert bounded.conditional[1] == pytest.approx(0.175)
    with pytest.raises(InputError):
        acc.from_counts(1000, counts, proposed=(1.0, 0.25, 0.5))  # shares cannot rise


def test_proposed_lengths_from_the_mean_draft_length() -> None:
    two = acc.proposed_lengths(
        spec_tokens=3, drafts=1000, draft_tokens=1500, setup=SCHEDULE, batch_samples=[8, 8]
    )
    # Samples all in the K = 1 band, yet 1.5 tokens per draft: half the drafts proposed 3.
    assert two.how == "schedule"
    assert two.mix == pytest.approx({1: 0.75, 3: 0.25})
    assert two.share == pytest.approx((1.0, 0.25, 0.25))
    full = acc.proposed_lengths(spec_tokens=3, drafts=1000, draft_tokens=2995)
    assert full.how == "full"
    outside = acc.proposed_lengths(
        spec_tokens=3, drafts=1000, draft_tokens=900, setup=SCHEDULE, batch_samples=[8]
    )
    assert outside.how == "unknown"
    assert "does not fit" in (outside.note or "")
    restarted = acc.proposed_lengths(
        spec_tokens=4, drafts=1000, draft_tokens=1500, setup=SCHEDULE, batch_samples=[8]
    )
    assert restarted.how == "unknown"
    assert "K=3" in (restarted.note or "")
    assert acc.proposed_lengths(spec_tokens=1, drafts=10, draft_tokens=9).how == "full"


def test_memory_of_a_state_written_before_trials_reads_as_before() -> None:
    old = AcceptanceMemory(drafts=1000, accepted_per_position=(800, 480, 240), updated_at=0.0)
    estimate = old.estimate(0.0, 3600.0)
    assert estimate is not None
    assert estimate.conditional == pytest.approx((0.8, 0.6, 0.5))
    assert estimate.lower_bound == (False, False, False)


def test_memory_marks_lower_bounds_while_their_windows_weigh() -> None:
    window = scraped(Setup(spec_tokens=3), loads=(4, 8), proposed_lengths=(0.1, 0.3, 0.2, 0.4))
    stats = accepted(window)
    memory = AcceptanceMemory().add(stats, 0.0, 1800.0)
    estimate = memory.estimate(0.0, 3600.0)
    assert estimate is not None
    assert estimate.lower_bound == (False, True, True)
    assert estimate.exact_spec_tokens == 1
    full = accepted(scraped(Setup(spec_tokens=3), loads=(4, 8)))
    for hours in range(1, 12):  # exact windows take over as the lower bounds decay
        memory = memory.add(full, 3600.0 * hours, 1800.0)
    later = memory.estimate(3600.0 * 11, 3600.0)
    assert later is not None
    assert later.exact_spec_tokens == 3
