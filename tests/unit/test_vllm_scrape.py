"""The direct-scrape source: the real capture, window arithmetic, and every kind of bad input."""

import time
from collections.abc import Callable

import httpx
import pytest

from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.types import Observation
from autotuner.errors import SourceError, UnusableReason
from autotuner.sim.engine import SimSetup, SimulatedVllm
from autotuner.sources.invariants import check_scrape
from autotuner.sources.promtext import parse
from autotuner.sources.vllm_metrics import engine_samples, wanted_names
from autotuner.sources.vllm_scrape import DEFAULT_MAX_BYTES, VllmScraper
from tests.support.clock import Clock

LIMITS = ObservationLimits(min_batch_samples=2, min_drafts=10, max_age_s=30)


def test_real_capture_parses_to_its_counters(vllm_capture: str) -> None:
    engines = engine_samples("e", parse(vllm_capture, wanted_names()))
    assert list(engines) == [("e", "0")]
    sample = engines[("e", "0")]
    assert sample.model_name == "tiny-llama"
    assert sample.counters["drafts"] == 55
    assert sample.counters["draft_tokens"] == 155
    assert sample.counters["accepted"] == 125
    assert sample.counters["generation_tokens"] == 1078
    assert sample.per_position == {0: 50, 1: 40, 2: 35}
    assert sample.histograms["step_time"] == pytest.approx((2.6657569959999137, 939))
    assert sample.cache_config["use_replayssm"] == "False"
    assert sample.cache_config["replayssm_buffer_len"] == "16"
    assert sample.cache_config["mamba_ssm_cache_dtype"] == "float32"
    assert sample.gauges == {"running": 0.0, "waiting": 0.0, "kv_usage": 0.0}


def transport_for(sims: dict[str, SimulatedVllm]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        sim = sims[str(request.url)]
        return httpx.Response(
            200, content=sim.render(), headers={"content-type": "text/plain; version=0.0.4"}
        )

    return httpx.MockTransport(handle)


Respond = Callable[[httpx.Request], httpx.Response]


def replica(
    respond: Respond, clock: Callable[[], float] = time.time, max_bytes: int = DEFAULT_MAX_BYTES
) -> VllmScraper:
    """A scraper of one replica (http://a/metrics) that `respond` answers."""
    client = httpx.Client(transport=httpx.MockTransport(respond))
    return VllmScraper(["http://a/metrics"], client=client, clock=clock, max_bytes=max_bytes)


def window_after(scraper: VllmScraper, clock: Clock, scrapes: int) -> Observation:
    """`scrapes` scrapes one second apart, then the 10 s window ending at the last."""
    for _ in range(scrapes):
        scraper.record(scraper.scrape(), keep_s=1e9)
        clock.t += 1
    clock.t -= 1
    return scraper.observation(window_s=10, limits=LIMITS)


def run_window(
    sims: dict[str, SimulatedVllm],
    clock: Clock,
    steps: int = 5,
    interval: float = 2.0,
    between: Callable[[int], None] | None = None,
) -> Observation:
    scraper = VllmScraper(
        list(sims), client=httpx.Client(transport=transport_for(sims)), clock=clock
    )
    for i in range(steps):
        if between:
            between(i)
        scraper.record(scraper.scrape(), keep_s=1e9)
        clock.t += interval
    clock.t -= interval
    return scraper.observation(window_s=interval * (steps - 1), limits=LIMITS)


def test_window_recovers_the_simulated_truth() -> None:
    clock = Clock()
    setup = SimSetup(spec_tokens=3, acceptance=(0.8, 0.5, 0.25))
    sim = SimulatedVllm(
        setup=setup,
        load=lambda t: 16,
        step_time=lambda b, s: 0.02,
        engines=2,
        clock=clock,
        prompt_lengths=True,
    )
    obs = run_window({"http://a/metrics": sim}, clock)
    assert obs.usable, obs.detail
    assert obs.series == 2
    assert obs.acceptance is not None
    assert obs.acceptance.per_position == pytest.approx((0.8, 0.5, 0.25))
    assert obs.acceptance.tau == pytest.approx(1 + 0.8 + 0.4 + 0.1)
    assert obs.acceptance.sufficient
    assert obs.step_time_s == pytest.approx(0.02)
    # 2 engines x 16 requests x 50 steps/s x tau tokens.
    assert obs.generation_tokens_per_s == pytest.approx(2 * 16 * 50 * 2.3)
    assert obs.batch is not None
    assert obs.batch.mean == 16
    assert obs.batch.samples == 10
    assert obs.live_setup is not None
    assert obs.live_setup.setup.label == "spec:3"
    assert obs.live_setup.replay is False
    assert obs.mean_context_tokens == pytest.approx(512 + 128)


def test_replicas_are_summed() -> None:
    clock = Clock()
    sims = {f"http://r{i}/metrics": SimulatedVllm(load=lambda t: 8, clock=clock) for i in range(3)}
    single = Clock()
    one = run_window({"http://x/metrics": SimulatedVllm(load=lambda t: 8, clock=single)}, single)
    three = run_window(sims, clock)
    assert three.series == 3
    assert three.generation_tokens_per_s == pytest.approx(3 * (one.generation_tokens_per_s or 0))
    assert three.acceptance is not None
    assert one.acceptance is not None
    assert three.acceptance.drafts == pytest.approx(3 * one.acceptance.drafts)


def test_speculation_off_is_reported_not_an_error() -> None:
    clock = Clock()
    sim = SimulatedVllm(setup=SimSetup(spec_tokens=0), clock=clock)
    obs = run_window({"http://a/metrics": sim}, clock)
    assert obs.usable
    assert obs.acceptance is None
    assert obs.live_setup is not None
    assert not obs.live_setup.speculation
    assert obs.live_setup.setup.label == "plain"


def test_window_is_cut_at_a_restart() -> None:
    clock = Clock()
    sim = SimulatedVllm(setup=SimSetup(acceptance=(0.9, 0.9, 0.9)), clock=clock)
    after = SimSetup(spec_tokens=2, acceptance=(0.5, 0.5))

    def restart_midway(i: int) -> None:
        if i == 2:
            sim.restart(after)

    obs = run_window({"http://a/metrics": sim}, clock, steps=6, between=restart_midway)
    assert obs.usable
    assert obs.acceptance is not None
    # Only the post-restart setup is judged: no mix, no negative rates.
    assert obs.acceptance.per_position == pytest.approx((0.5, 0.5))
    assert obs.generation_tokens_per_s is not None
    assert obs.generation_tokens_per_s > 0
    assert obs.batch is not None
    assert obs.batch.samples == 4


def test_restart_at_the_last_scrape_leaves_nothing_to_judge() -> None:
    clock = Clock()
    sim = SimulatedVllm(clock=clock)
    obs = run_window(
        {"http://a/metrics": sim},
        clock,
        steps=4,
        between=lambda i: sim.restart() if i == 3 else None,
    )
    assert not obs.usable
    assert obs.reason is UnusableReason.RESET


def test_too_few_drafts_is_insufficient_not_guessed() -> None:
    clock = Clock()
    sim = SimulatedVllm(load=lambda t: 1, step_time=lambda b, s: 10.0, clock=clock)
    obs = run_window({"http://a/metrics": sim}, clock, steps=3, interval=1.0)
    assert obs.usable
    assert obs.acceptance is not None
    assert not obs.acceptance.sufficient
    assert obs.acceptance.note is not None


def test_stale_window() -> None:
    clock = Clock()
    sim = SimulatedVllm(clock=clock)
    scraper = VllmScraper(
        ["http://a/metrics"],
        client=httpx.Client(transport=transport_for({"http://a/metrics": sim})),
        clock=clock,
    )
    for _ in range(3):
        scraper.record(scraper.scrape(), keep_s=1e9)
        clock.t += 1
    clock.t += 100
    obs = scraper.observation(window_s=200, limits=LIMITS)
    assert obs.reason is UnusableReason.STALE


CAPTURE_OK = 'vllm:num_requests_running{engine="0",model_name="m"} 3\n'


@pytest.mark.parametrize(
    ("respond", "reason"),
    [
        (
            lambda r: httpx.Response(200, text=CAPTURE_OK + "vllm:num_requests_running{oops\n"),
            UnusableReason.MALFORMED,
        ),
        (
            lambda r: httpx.Response(200, text=CAPTURE_OK + CAPTURE_OK),
            UnusableReason.DUPLICATE_SERIES,
        ),
        (lambda r: httpx.Response(503, text="busy"), UnusableReason.HTTP_ERROR),
        (lambda r: httpx.Response(500, text="<html>oops</html>"), UnusableReason.HTTP_ERROR),
        (
            lambda r: httpx.Response(200, text="<html><body>login</body></html>"),
            UnusableReason.NOT_METRICS,
        ),
        (
            lambda r: httpx.Response(
                200, text="<!doctype html>", headers={"content-type": "text/html"}
            ),
            UnusableReason.NOT_METRICS,
        ),
        (lambda r: httpx.Response(200, text="up 1\n"), UnusableReason.NOT_METRICS),
        (lambda r: httpx.Response(200, content=b"x" * (50 * 2**20)), UnusableReason.TOO_LARGE),
    ],
)
def test_bad_responses_have_a_typed_reason(respond, reason) -> None:  # type: ignore[no-untyped-def]
    scraper = replica(respond, max_bytes=16 * 2**20)
    obs = scraper.observe(window_s=0.001, interval_s=0.001, sleep=lambda s: None)
    assert not obs.usable
    assert obs.reason is reason
    assert obs.detail


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (httpx.ReadTimeout("slow"), UnusableReason.TIMEOUT),
        (httpx.ConnectError("refused"), UnusableReason.SERVER_DOWN),
    ],
)
def test_transport_failures_have_a_typed_reason(error: Exception, reason: UnusableReason) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise error

    scraper = replica(fail)
    obs = scraper.observe(window_s=0.001, interval_s=0.001, sleep=lambda s: None)
    assert obs.reason is reason


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-3"])
def test_invalid_values_make_the_window_unusable(value: str) -> None:
    clock = Clock()
    body = f'vllm:num_requests_running{{engine="0",model_name="m"}} {value}\n'

    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=body)

    obs = window_after(replica(respond, clock), clock, scrapes=3)
    assert obs.reason is UnusableReason.INVALID_VALUE


def test_counters_going_backwards_are_a_reset_not_a_negative_rate() -> None:
    clock = Clock()
    values = iter([100.0, 200.0, 50.0, 60.0])

    def respond(request: httpx.Request) -> httpx.Response:
        value = next(values)
        return httpx.Response(
            200,
            text=(
                f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {value}\n'
                'vllm:num_requests_running{engine="0",model_name="m"} 4\n'
            ),
        )

    obs = window_after(replica(respond, clock), clock, scrapes=4)
    assert obs.usable
    assert obs.generation_tokens_per_s == pytest.approx(10.0)


def slow_one_shot(
    later_scrape_s: float, window_s: float, interval_s: float, limits: ObservationLimits
) -> tuple[Observation, int]:
    """A one-shot window on a simulated clock whose scrapes after the first take
    `later_scrape_s` each; the Observation and the scrapes it took."""
    clock = Clock()
    sim = SimulatedVllm(load=lambda t: 8, step_time=lambda b, s: 0.02, clock=clock)
    inner = transport_for({"http://a/metrics": sim})
    scrapes = 0

    def slow(request: httpx.Request) -> httpx.Response:
        nonlocal scrapes
        clock.t += later_scrape_s if scrapes else 0.0
        scrapes += 1
        return inner.handle_request(request)

    def sleep(seconds: float) -> None:
        clock.t += seconds

    scraper = replica(slow, clock)
    obs = scraper.observe(window_s=window_s, interval_s=interval_s, limits=limits, sleep=sleep)
    return obs, scrapes


def test_one_shot_observe_summarises_every_scrape_even_when_scrapes_are_slow() -> None:
    # Scrapes land at +0.0, +1.2 and +2.4 s: the loop overruns its 2 s window.
    obs, scrapes = slow_one_shot(0.7, window_s=2.0, interval_s=0.5, limits=LIMITS)
    assert obs.usable, obs.detail
    assert scrapes == 3
    assert obs.batch is not None
    assert obs.batch.samples == 3
    assert obs.duration_s == pytest.approx(2.4)


def test_one_shot_observe_scrapes_on_until_the_window_holds_the_samples_it_needs() -> None:
    """Each scrape after the first takes 1.5 s (a busy engine): the 2 s window ends with two
    samples, one short of a batch distribution, so it scrapes once more rather than answer
    "too few samples" (the CLI's `observe --window 1s` did on a loaded 2-core machine)."""
    limits = LIMITS.model_copy(update={"min_batch_samples": 3})  # the default's
    obs, scrapes = slow_one_shot(1.5, window_s=2.0, interval_s=0.5, limits=limits)
    assert obs.usable, obs.detail
    assert scrapes == 3
    assert obs.batch is not None
    assert obs.batch.samples == 3
    assert obs.duration_s == pytest.approx(4.0)  # answered at +0, +2.0 and +4.0


def exposition(**replace: str) -> str:
    """A consistent one-engine answer; `replace` swaps whole lines by key."""
    engine = 'engine="0",model_name="m"'
    lines = {
        "running": f"vllm:num_requests_running{{{engine}}} 4",
        "generation": f"vllm:generation_tokens_total{{{engine}}} 500",
        "drafts": f"vllm:spec_decode_num_drafts_total{{{engine}}} 100",
        "draft_tokens": f"vllm:spec_decode_num_draft_tokens_total{{{engine}}} 300",
        "accepted": f"vllm:spec_decode_num_accepted_tokens_total{{{engine}}} 150",
        "pos0": f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{engine},position="0"}} 80',
        "pos1": f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{engine},position="1"}} 50',
        "pos2": f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{engine},position="2"}} 20',
        "b1": f'vllm:inter_token_latency_seconds_bucket{{{engine},le="0.05"}} 90',
        "b2": f'vllm:inter_token_latency_seconds_bucket{{{engine},le="0.1"}} 120',
        "b3": f'vllm:inter_token_latency_seconds_bucket{{{engine},le="+Inf"}} 130',
        "count": f"vllm:inter_token_latency_seconds_count{{{engine}}} 130",
        "sum": f"vllm:inter_token_latency_seconds_sum{{{engine}}} 6.5",
    }
    lines.update(replace)
    return "".join(f"{line}\n" for line in lines.values() if line)


def observe_body(body: str) -> Observation:
    """Three scrapes of the same answer over 2 s (constant counters: deltas of zero)."""
    clock = Clock()
    scraper = replica(lambda r: httpx.Response(200, text=body), clock)

    def sleep(seconds: float) -> None:
        clock.t += seconds

    return scraper.observe(window_s=2.0, interval_s=1.0, limits=LIMITS, sleep=sleep)


def test_a_consistent_answer_is_used() -> None:
    obs = observe_body(exposition())
    assert obs.usable, obs.detail


ENGINE = 'engine="0",model_name="m"'
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


@pytest.mark.parametrize(
    ("replace", "named"),
    [
        (
            {"generation": f"vllm:generation_tokens_total{{{ENGINE}}} -5"},
            f"vllm:generation_tokens_total{{{ENGINE}}} is -5",
        ),
        (
            {"drafts": f"vllm:spec_decode_num_drafts_total{{{ENGINE}}} NaN"},
            "vllm:spec_decode_num_drafts_total",
        ),
        (
            {"accepted": f"vllm:spec_decode_num_accepted_tokens_total{{{ENGINE}}} 301"},
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} = 301 '
            "exceeds vllm:spec_decode_num_draft_tokens_total",
        ),
        (
            {"pos2": f'{PER_POS}{{{ENGINE},position="2"}} 60'},
            'position="2"} = 60 exceeds the position before it',
        ),
        (
            {"pos0": f'{PER_POS}{{{ENGINE},position="0"}} 101'},
            "exceeds vllm:spec_decode_num_drafts_total",
        ),
        (
            {"b2": f'vllm:inter_token_latency_seconds_bucket{{{ENGINE},le="0.1"}} 85'},
            'vllm:inter_token_latency_seconds_bucket{engine="0",model_name="m"} is not cumulative',
        ),
        (
            {"sum": f"vllm:inter_token_latency_seconds_sum{{{ENGINE}}} -0.5"},
            "histogram sum vllm:inter_token_latency_seconds_sum",
        ),
        (
            {"count": f"vllm:inter_token_latency_seconds_count{{{ENGINE}}} -1"},
            "vllm:inter_token_latency_seconds_count",
        ),
        (
            {"draft_tokens": f"vllm:spec_decode_num_draft_tokens_total{{{ENGINE}}} 90"},
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} = 100 exceeds '
            "vllm:spec_decode_num_draft_tokens_total",
        ),
        (
            {"count": f"vllm:inter_token_latency_seconds_count{{{ENGINE}}} 129"},
            'vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} = 129 '
            "differs from its +Inf bucket (130)",
        ),
        (
            {"kv": f"vllm:kv_cache_usage_perc{{{ENGINE}}} 1.7"},
            'gauge vllm:kv_cache_usage_perc{engine="0",model_name="m"} is 1.7, outside [0, 1]',
        ),
    ],
    ids=[
        "negative-counter",
        "nan-counter",
        "accepted-above-drafted",
        "per-position-rising",
        "per-position-above-drafts",
        "buckets-not-cumulative",
        "negative-histogram-sum",
        "negative-histogram-count",
        "draft-tokens-fewer-than-drafts",
        "count-is-not-the-inf-bucket",
        "ratio-above-one",
    ],
)
def test_impossible_absolute_values_refuse_the_scrape(replace: dict[str, str], named: str) -> None:
    obs = observe_body(exposition(**replace))
    assert not obs.usable
    assert obs.reason is UnusableReason.INVALID_VALUE
    assert named in (obs.detail or "")


def test_the_real_capture_passes_every_invariant(vllm_capture: str) -> None:
    check_scrape("capture", parse(vllm_capture, wanted_names()))


def test_nothing_from_a_refused_scrape_is_used() -> None:
    clock = Clock()
    bodies = iter(
        [
            exposition(),
            exposition(accepted=f"vllm:spec_decode_num_accepted_tokens_total{{{ENGINE}}} 999"),
            exposition(),
        ]
    )
    scraper = replica(lambda r: httpx.Response(200, text=next(bodies)), clock)
    refused = []
    for _ in range(3):
        try:
            scraper.record(scraper.scrape(), keep_s=1e9)
        except SourceError as exc:
            refused.append(exc.reason)
        clock.t += 1
    assert refused == [UnusableReason.INVALID_VALUE]
    assert len(scraper.history) == 2
    assert all(
        s.engines[("http://a/metrics", "0")].counters["accepted"] == 150 for s in scraper.history
    )


def test_speculative_counters_without_the_running_gauge_say_the_gauge_is_missing() -> None:
    obs = observe_body(exposition(running=""))
    assert not obs.usable
    assert obs.reason is UnusableReason.EMPTY_RESULT
    assert "vllm:num_requests_running is missing" in (obs.detail or "")
    assert "batch samples" not in (obs.detail or "")
