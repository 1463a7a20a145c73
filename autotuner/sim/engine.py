"""Counters of a simulated vLLM engine that evolve with a load trace and the running setup.

Everything advances by expectation (no randomness): over dt seconds at batch B and step time t,
an engine runs dt/t steps, each carrying one draft per running request when speculation is on.
The exposition is produced by prometheus_client, as vLLM's own is, so names, label order,
`_total`/`_created` suffixes and histogram layout match (cf. fixtures/).

The speculative counters count as vLLM's do (vllm/v1/core/sched/scheduler.py
`make_spec_decoding_stats`, vllm/v1/spec_decode/metrics.py `SpecDecodingStats.observe_draft`):
per request and step that proposed at least one token, drafts += 1, draft tokens += the tokens
proposed, and accepted_per_pos[i] += 1 for every accepted position i; a request that proposed
nothing counts nowhere. The K proposed is the schedule's band for the step's batch, and with
`SimSetup.proposed_lengths` (an n-gram or adaptive drafter) a draft proposes fewer at will.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from autotuner.core.types import ScheduleBand, Setup

# The CacheConfig fields only a vLLM 0.33 build exports (docs/engine-rules.md): the simulated
# engine shows them as the 0.33 build it runs unless its image names another.
BUILD_LABELS = {"simple_cpu_offload_num_blocks": "None"}

ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


@dataclass
class SimSetup:
    """What the simulated engine runs; `acceptance` holds conditional rates per position (given
    the position was proposed). `proposed_lengths[j]`, when given, is the probability that a
    draft proposes j tokens (j = 0, 1, ...; capped at the step's K), independent of acceptance;
    empty: every draft proposes the step's K."""

    spec_tokens: int = 3
    acceptance: Sequence[float] = (0.8, 0.7, 0.6)
    replay: bool = False
    replay_window: int = 16
    mamba_ssm_cache_dtype: str = "float32"
    mamba_cache_mode: str = "none"
    schedule: tuple[ScheduleBand, ...] = ()
    proposed_lengths: tuple[float, ...] = ()
    prefix_caching: bool = True  # off: vLLM looks nothing up (its counters stay still)

    @classmethod
    def of(
        cls,
        setup: Setup,
        acceptance: Sequence[float],
        *,
        proposed_lengths: Sequence[float] = (),
        prefix_caching: bool = True,
        **options: str,
    ) -> SimSetup:
        # A world names its drafter's acceptance for the positions it was built with; a setup
        # that drafts deeper meets the last named rate again at each further position.
        rates = tuple(acceptance)
        if rates and setup.spec_tokens > len(rates):
            rates += (rates[-1],) * (setup.spec_tokens - len(rates))
        return cls(
            spec_tokens=setup.spec_tokens,
            acceptance=rates,
            replay=bool(setup.replay_window),
            replay_window=setup.replay_window or 16,
            schedule=setup.schedule,
            proposed_lengths=tuple(proposed_lengths),
            prefix_caching=prefix_caching,
            **options,
        )

    @property
    def setup(self) -> Setup:
        return Setup(
            spec_tokens=self.spec_tokens,
            schedule=self.schedule,
            replay_window=self.replay_window if self.replay else 0,
        )

    def k_at(self, batch: float) -> int:
        return int(self.setup.spec_tokens_at([max(round(batch), 1)])[0])

    def drafting(self, batch: float) -> Drafting:
        """What one request's step drafts at this batch, in expectation."""
        k = self.k_at(batch) if self.spec_tokens else 0
        lengths = list(self.proposed_lengths) or [0.0] * k + [1.0]
        total = sum(lengths)
        # P(the draft proposed at least i tokens), i = 0..k, with lengths past k capped at k.
        at_least = [sum(lengths[i:]) / total if total > 0 else 0.0 for i in range(k + 1)]
        reach, accepted = 1.0, []
        for i, rate in enumerate(list(self.acceptance)[:k]):
            reach *= rate
            accepted.append(at_least[i + 1] * reach)
        return Drafting(
            k=k,
            drafts=at_least[1] if k else 0.0,
            draft_tokens=sum(at_least[1:]),
            accepted=accepted,
        )


@dataclass(frozen=True)
class Drafting:
    """Per request and step: the K in force, the chance it counts as a draft (it proposed a
    token), the draft tokens proposed, and the chance each position was accepted."""

    k: int
    drafts: float
    draft_tokens: float
    accepted: list[float]

    @property
    def tokens(self) -> float:
        """Tokens the request gains in the step: the accepted drafts and one more."""
        return 1.0 + sum(self.accepted)


@dataclass
class EngineCounters:
    created: float
    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0
    drafts: float = 0.0
    draft_tokens: float = 0.0
    # Verify forwards a request ran (SGLang's spec_verify_ct): every step after its first
    # token, which the prefill produced.
    verify_calls: float = 0.0
    tokens_per_s: float = 0.0  # generated over the last advance (SGLang's gen_throughput)
    accepted_per_position: list[float] = field(default_factory=list)
    generation_tokens: float = 0.0
    prompt_tokens: float = 0.0
    prefix_cache_queries: float = 0.0
    prefix_cache_hits: float = 0.0
    preemptions: float = 0.0
    finished: float = 0.0
    itl_sum: float = 0.0
    itl_buckets: list[float] = field(default_factory=lambda: [0.0] * (len(ITL_BUCKETS) + 1))
    tpot_sum: float = 0.0
    iteration_sum: float = 0.0
    iteration_count: float = 0.0
    prompt_length_sum: float = 0.0
    generation_length_sum: float = 0.0


class SimulatedVllm:
    """One vLLM server (one or more data-parallel engines) under a load trace.

    `load(t)` gives running requests per engine at time t; `step_time(batch, setup)` the seconds
    per decode step. Both are plain callables so tests and the demo can script them.
    """

    def __init__(
        self,
        *,
        setup: SimSetup | None = None,
        load: Callable[[float], float] = lambda t: 8.0,
        step_time: Callable[[float, SimSetup], float] = lambda batch, setup: 0.02,
        capacity: Callable[[SimSetup], float] | None = None,
        engines: int = 1,
        model_name: str = "sim-model",
        prompt_tokens: float = 512,
        output_tokens: float = 256,
        prefix_hit_rate: float = 0.0,
        clock: Callable[[], float] = time.time,
        prompt_lengths: bool = False,
    ) -> None:
        self.setup = setup or SimSetup()
        self.load = load
        self.step_time = step_time
        self.capacity = capacity
        self.total_generated = 0.0  # across restarts (the demo's tokens served)
        self.model_name = model_name
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.prefix_hit_rate = prefix_hit_rate  # share of prompt tokens the cache serves
        # Request prompt lengths are reported only where the step time prefills those prompts
        # (the caller's truth says so): a length served but never prefilled would mislead the
        # tuner, which prices every prompt's prefill in the steps it measures.
        self.prompt_lengths = prompt_lengths
        self.clock = clock
        self.engine_count = engines
        self.now = clock()
        self.serving = True  # False between stop() and restart(): a server that is down
        self.engines = [EngineCounters(created=self.now) for _ in range(engines)]
        self._reset_engines()

    def _reset_engines(self) -> None:
        for engine in self.engines:
            engine.accepted_per_position = [0.0] * self.setup.spec_tokens
            demand = max(float(self.load(self.now)), 0.0)
            limit = self.capacity(self.setup) if self.capacity else math.inf
            engine.running = min(demand, max(limit, 1.0))
            engine.waiting = demand - engine.running

    def stop(self) -> None:
        """The server goes down: everything up to now is counted, then nothing is served (and
        no token is counted) until `restart`."""
        self.advance_to(self.clock())
        self.serving = False

    def restart(self, setup: SimSetup | None = None) -> None:
        """A restarted server: new setup, counters from zero, new `_created` stamps."""
        self.advance_to(self.clock())
        self.serving = True
        if setup is not None:
            self.setup = setup
        self.engines = [EngineCounters(created=self.now) for _ in range(self.engine_count)]
        self._reset_engines()

    def advance_to(self, t: float) -> None:
        dt = t - self.now
        if dt <= 0:
            return
        if not self.serving:
            self.now = t
            return
        demand = max(float(self.load(t)), 0.0)
        setup = self.setup
        limit = self.capacity(setup) if self.capacity else math.inf
        batch = min(demand, max(limit, 1.0))
        drafting = setup.drafting(batch)
        step = self.step_time(batch, setup) if batch > 0 else 0.0
        steps = dt / step if step > 0 else 0.0
        tokens_per_request_step = drafting.tokens
        for engine in self.engines:
            engine.running = batch
            engine.waiting = demand - batch
            engine.kv_usage = (
                min(1.0, batch / max(limit, 1.0)) if self.capacity else min(1.0, batch / 1024)
            )
            request_steps = batch * steps
            self._count_drafts(engine, drafting, request_steps)
            generated = request_steps * tokens_per_request_step
            engine.generation_tokens += generated
            self.total_generated += generated
            finished = generated / self.output_tokens
            engine.finished += finished
            engine.tokens_per_s = generated / dt
            if drafting.k:
                engine.verify_calls += (generated - finished) / tokens_per_request_step
            engine.prompt_tokens += finished * self.prompt_tokens
            self._count_prefix_cache(engine, finished * self.prompt_tokens)
            engine.prompt_length_sum += finished * self.prompt_tokens
            engine.generation_length_sum += finished * self.output_tokens
            engine.itl_sum += request_steps * step
            bucket = next((i for i, le in enumerate(ITL_BUCKETS) if step <= le), len(ITL_BUCKETS))
            engine.itl_buckets[bucket] += request_steps
            engine.tpot_sum += finished * step / tokens_per_request_step
            engine.iteration_sum += steps * batch * (1 + drafting.draft_tokens)
            engine.iteration_count += steps
        self.now = t

    @staticmethod
    def _count_drafts(engine: EngineCounters, drafting: Drafting, request_steps: float) -> None:
        """vLLM's `observe_draft`, summed over `request_steps` requests' steps."""
        if not drafting.k:
            return
        engine.drafts += request_steps * drafting.drafts
        engine.draft_tokens += request_steps * drafting.draft_tokens
        for i, value in enumerate(drafting.accepted):
            engine.accepted_per_position[i] += request_steps * value

    def _count_prefix_cache(self, engine: EngineCounters, prompt_tokens: float) -> None:
        """vLLM counts the prompt tokens it looks up and those it finds, only while prefix
        caching is on (the counters are exported either way)."""
        if self.setup.prefix_caching:
            engine.prefix_cache_queries += prompt_tokens
            engine.prefix_cache_hits += prompt_tokens * self.prefix_hit_rate

    def record_step(self, running: float, waiting: float, step_s: float) -> None:
        """Count one engine step that served `running` requests (the completions engine's
        steps, when the load is the real requests rather than a trace)."""
        drafting = self.setup.drafting(running)
        for engine in self.engines:
            engine.running, engine.waiting = running, waiting
            self._count_drafts(engine, drafting, running)
            generated = running * drafting.tokens
            engine.generation_tokens += generated
            engine.verify_calls += running if drafting.k else 0.0
            engine.tokens_per_s = generated / step_s if step_s > 0 else 0.0
            self.total_generated += generated
            engine.itl_sum += running * step_s
            bucket = next((i for i, le in enumerate(ITL_BUCKETS) if step_s <= le), len(ITL_BUCKETS))
            engine.itl_buckets[bucket] += running
            engine.iteration_sum += running * (1 + drafting.draft_tokens)
            engine.iteration_count += 1

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for index, engine in enumerate(self.engines):
            values = [str(index), self.model_name]
            counters = [
                ("vllm:num_preemptions", engine.preemptions),
                ("vllm:prompt_tokens", engine.prompt_tokens),
                ("vllm:generation_tokens", engine.generation_tokens),
                ("vllm:prefix_cache_queries", engine.prefix_cache_queries),
                ("vllm:prefix_cache_hits", engine.prefix_cache_hits),
            ]
            if self.setup.spec_tokens:
                counters += [
                    ("vllm:spec_decode_num_drafts", engine.drafts),
                    ("vllm:spec_decode_num_draft_tokens", engine.draft_tokens),
                    ("vllm:spec_decode_num_accepted_tokens", sum(engine.accepted_per_position)),
                ]
                per_pos = _counter(families, "vllm:spec_decode_num_accepted_tokens_per_pos")
                for position, value in enumerate(engine.accepted_per_position):
                    per_pos.add_metric([*values, str(position)], value, created=engine.created)
            for name, value in counters:
                _counter(families, name).add_metric(values, value, created=engine.created)
            for name, value in (
                ("vllm:num_requests_running", engine.running),
                ("vllm:num_requests_waiting", engine.waiting),
                ("vllm:kv_cache_usage_perc", engine.kv_usage),
            ):
                _gauge(families, name, ENGINE_LABELS).add_metric(values, value)
            self._histograms(families, values, engine)
            info_labels = self._cache_config(index)
            info = _gauge(families, "vllm:cache_config_info", sorted(info_labels))
            info.add_metric([info_labels[k] for k in sorted(info_labels)], 1.0)
        yield from families.values()

    def _histograms(
        self, families: dict[str, Metric], values: list[str], engine: EngineCounters
    ) -> None:
        labels = ["engine", "model_name"]
        itl_count = engine.itl_buckets
        cumulative, running_total = [], 0.0
        for le, count in zip([*map(str, ITL_BUCKETS), "+Inf"], itl_count, strict=True):
            running_total += count
            cumulative.append((le, running_total))
        rows: list[tuple[str, str, list[tuple[str, float]], float]] = [
            (
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                cumulative,
                engine.itl_sum,
            ),
            (
                "vllm:request_time_per_output_token_seconds",
                "Histogram of time_per_output_token_seconds per request.",
                _single(engine.finished),
                engine.tpot_sum,
            ),
            (
                "vllm:iteration_tokens_total",
                "Histogram of number of tokens per engine_step.",
                _single(engine.iteration_count),
                engine.iteration_sum,
            ),
            (
                "vllm:request_prompt_tokens",
                "Number of prefill tokens processed.",
                _single(engine.finished),
                engine.prompt_length_sum,
            ),
            (
                "vllm:request_generation_tokens",
                "Number of generation tokens processed.",
                _single(engine.finished),
                engine.generation_length_sum,
            ),
        ]
        for name, doc, buckets, total in rows:
            if name == "vllm:request_prompt_tokens" and not self.prompt_lengths:
                continue
            family = families.setdefault(name, HistogramMetricFamily(name, doc, labels=labels))
            assert isinstance(family, HistogramMetricFamily)
            family.add_metric(values, buckets, total)

    def _cache_config(self, index: int) -> dict[str, str]:
        return {
            "engine": str(index),
            "mamba_cache_dtype": "auto",
            "mamba_cache_mode": self.setup.mamba_cache_mode,
            "mamba_ssm_cache_dtype": self.setup.mamba_ssm_cache_dtype,
            "use_replayssm": str(self.setup.replay),
            "replayssm_buffer_len": str(self.setup.replay_window),
            "enable_prefix_caching": str(self.setup.prefix_caching),
            "num_gpu_blocks": "16384",
            **BUILD_LABELS,
        }

    def render(self) -> bytes:
        """The `/metrics` body at the current clock."""
        self.advance_to(self.clock())
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self))
        return generate_latest(registry)


def _single(count: float) -> list[tuple[str, float]]:
    """All observations in the +Inf bucket: only sum and count are meaningful here."""
    return [("+Inf", count if math.isfinite(count) else 0.0)]


class _Collector:
    def __init__(self, sim: SimulatedVllm) -> None:
        self.sim = sim

    def collect(self) -> Iterator[Metric]:
        return self.sim.collect()


ENGINE_LABELS = ["engine", "model_name"]
HELP = {  # vLLM's own help strings
    "vllm:num_preemptions": "Cumulative number of preemption.",
    "vllm:prompt_tokens": "Number of prefill tokens processed.",
    "vllm:generation_tokens": "Number of generation tokens processed.",
    "vllm:prefix_cache_queries": "Prefix cache queries, in terms of number of queried tokens.",
    "vllm:prefix_cache_hits": "Prefix cache hits, in terms of number of cached tokens.",
    "vllm:spec_decode_num_drafts": "Number of spec decoding drafts.",
    "vllm:spec_decode_num_draft_tokens": "Number of draft tokens.",
    "vllm:spec_decode_num_accepted_tokens": "Number of accepted tokens.",
    "vllm:spec_decode_num_accepted_tokens_per_pos": "Accepted tokens per draft position.",
    "vllm:num_requests_running": "Number of requests in model execution batches.",
    "vllm:num_requests_waiting": "Number of requests waiting to be processed.",
    "vllm:kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
    "vllm:cache_config_info": "Information of the LLMEngine CacheConfig",
}


def _counter(families: dict[str, Metric], name: str) -> CounterMetricFamily:
    labels = ENGINE_LABELS + (["position"] if name.endswith("_per_pos") else [])
    family = families.setdefault(name, CounterMetricFamily(name, HELP[name], labels=labels))
    assert isinstance(family, CounterMetricFamily)
    return family


def _gauge(families: dict[str, Metric], name: str, labels: list[str]) -> GaugeMetricFamily:
    family = families.setdefault(name, GaugeMetricFamily(name, HELP[name], labels=labels))
    assert isinstance(family, GaugeMetricFamily)
    return family
