"""A simulated SGLang 0.5.23 server: the simulated engine's counters (sim/engine.py, the same
dynamics and truth as the simulated vLLM) shown as SGLang shows them, on `/metrics`,
`/server_info` and `/model_info`.

No capture of a real SGLang `/metrics` exists here: the exposition is built from the metric
definitions in the 0.5.23 wheel's `sglang/srt/observability/metrics_collector.py` (names,
types, label names, help texts; line numbers below), rendered by prometheus_client as SGLang's
own collectors are (so a counter defined as `..._total` shows `_total` and `_created`). What is
counted follows the collectors too:
- the scheduler's gauges (:364-541) carry `model_name, engine_type, tp_rank, pp_rank,
  moe_ep_rank` (:1382-1393; `dp_rank` with data parallelism) and are set by tensor-parallel
  rank 0 only; the speculative gauges are means over the last decode-log interval
  (managers/scheduler_components/metrics_reporter.py:965-985), here the current step's values;
- the tokenizer's counters (:1855-1960) carry `model_name, engine_type` (:1806-1821), plus
  `is_streaming` on the token and request counters but not on `spec_verify_calls_total`, and
  move per finished request (`observe_one_finished_request`, :2092-2136): a request's verify
  calls are its decode steps after the first token, which the prefill produced;
- `inter_token_latency_seconds` (:2050, observed per output chunk, :2161-2180: the chunk's
  interval in the sum, its tokens in the count) holds every observation in +Inf (sum and count
  are what a reader can use).
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from autotuner.actuators.base import LiveTarget
from autotuner.core.model.spec import ModelSpec
from autotuner.core.types import Setup
from autotuner.engines.dialect import Dialect
from autotuner.engines.sglang.dialect import SglangDialect
from autotuner.sim.deployment import Routes, deployment_yaml
from autotuner.sim.engine import EngineCounters, SimSetup, SimulatedVllm
from autotuner.sim.sglang_startup import (
    SGLANG_VERSION,
    Started,
    StartupError,
    run_at,
    start,
)

SCHEDULER_LABELS = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"]
TOKENIZER_LABELS = ["model_name", "engine_type"]
STREAMING = "is_streaming"
HELP = {  # SGLang's own documentation strings
    "sglang:num_running_reqs": "The number of running requests.",
    "sglang:num_queue_reqs": "The number of requests in the waiting queue.",
    "sglang:gen_throughput": "The generation throughput (token/s).",
    "sglang:cache_hit_rate": "The prefix cache hit rate.",
    "sglang:token_usage": "The token usage.",
    "sglang:spec_accept_length": "Mean acceptance length of speculative decoding (accepted "
    "drafts + bonus token per forward).",
    "sglang:spec_accept_rate": "Speculative acceptance rate (`accepted drafts / proposed "
    "drafts` in batch).",
    "sglang:spec_num_steps": "Currently active speculative_num_steps.",
    "sglang:spec_num_draft_tokens": "Currently active speculative_num_draft_tokens (decouples "
    "from steps under topk>1).",
    "sglang:prompt_tokens": "Number of prefill tokens processed.",
    "sglang:generation_tokens": "Number of generation tokens processed.",
    "sglang:spec_verify_calls": "Number of speculative decoding verification calls.",
    "sglang:num_requests": "Number of requests processed.",
    "sglang:cached_tokens": "Number of cached prompt tokens by source (device/host/storage).",
    "sglang:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "sglang:request_time_per_output_token_seconds": "Per-request TPOT in seconds: "
    "(finished_time - first_token_time) / (completion_tokens - 1).",
    "sglang:prompt_tokens_histogram": "Histogram of prompt token length.",
    "sglang:generation_tokens_histogram": "Histogram of generation token length.",
}
NOT_STREAMING = {STREAMING: "false"}
# The tokenizer's counters (:1855-1960): name, the simulated engine's count, extra labels.
COUNTERS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("sglang:prompt_tokens", "prompt_tokens", NOT_STREAMING),
    ("sglang:generation_tokens", "generation_tokens", NOT_STREAMING),
    ("sglang:num_requests", "finished", NOT_STREAMING),
    ("sglang:spec_verify_calls", "verify_calls", {}),
    ("sglang:cached_tokens", "prefix_cache_hits", {"cache_source": "device"}),
)
# Its histograms (:1908-1925, :2050-2065): name, (sum, count) counts, extra labels. The
# inter-token latency sums each step's interval and counts its tokens (:2161-2180).
HISTOGRAMS: tuple[tuple[str, tuple[str, str], dict[str, str]], ...] = (
    ("sglang:inter_token_latency_seconds", ("itl_sum", "generation_tokens"), {}),
    (
        "sglang:request_time_per_output_token_seconds",
        ("tpot_sum", "finished"),
        NOT_STREAMING,
    ),
    ("sglang:prompt_tokens_histogram", ("prompt_length_sum", "finished"), {}),
    ("sglang:generation_tokens_histogram", ("generation_length_sum", "finished"), {}),
)


class SimulatedSglang(SimulatedVllm):
    """One SGLang server (`engines` data-parallel ranks) under a load trace, started with
    `started` (sim/sglang_startup.py): the simulated vLLM's counting, SGLang's exposition."""

    def __init__(self, *, started: Callable[[], Started], model: ModelSpec, **options: Any) -> None:
        """`started`: the running server's start-up (it changes with each restart)."""
        super().__init__(**options)
        self.started = started
        self.model = model

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        data_parallel = self.engine_count > 1
        labels = SCHEDULER_LABELS + (["dp_rank"] if data_parallel else [])
        for index, engine in enumerate(self.engines):
            rank = [str(index)] if data_parallel else []
            values = [self.model_name, "unified", "0", "0", "0", *rank]
            self._scheduler_gauges(families, labels, values, engine)
        self._tokenizer_counters(families)
        yield from families.values()

    def _scheduler_gauges(
        self,
        families: dict[str, Metric],
        labels: list[str],
        values: list[str],
        engine: EngineCounters,
    ) -> None:
        rows = [
            ("sglang:num_running_reqs", engine.running),
            ("sglang:num_queue_reqs", engine.waiting),
            ("sglang:gen_throughput", engine.tokens_per_s),
            ("sglang:token_usage", engine.kv_usage),
            ("sglang:cache_hit_rate", self.prefix_hit_rate if self.setup.prefix_caching else 0.0),
        ]
        if self.setup.spec_tokens:
            drafting = self.setup.drafting(engine.running)
            proposed = drafting.draft_tokens
            rows += [
                ("sglang:spec_accept_length", drafting.tokens if drafting.k else 0.0),
                ("sglang:spec_accept_rate", sum(drafting.accepted) / proposed if proposed else 0),
                ("sglang:spec_num_steps", float(drafting.k)),
                ("sglang:spec_num_draft_tokens", float(drafting.k + 1)),
            ]
        for name, value in rows:
            family = families.setdefault(name, GaugeMetricFamily(name, HELP[name], labels=labels))
            assert isinstance(family, GaugeMetricFamily)
            family.add_metric(values, value)

    def _tokenizer_counters(self, families: dict[str, Metric]) -> None:
        """One tokenizer for every data-parallel rank: its counters sum theirs. A labelled
        series shows no sample before its first observation (no request finished yet)."""
        created = min(engine.created for engine in self.engines)

        def total(counter: str) -> float:
            value = float(sum(getattr(engine, counter) for engine in self.engines))
            return value if math.isfinite(value) else 0.0

        values = [self.model_name, "unified"]
        for name, counter, extra in COUNTERS:
            family = CounterMetricFamily(name, HELP[name], labels=TOKENIZER_LABELS + list(extra))
            if total(counter) > 0:
                family.add_metric([*values, *extra.values()], total(counter), created=created)
            families[name] = family
        for name, (summed, counted), extra in HISTOGRAMS:
            if summed == "prompt_length_sum" and not self.prompt_lengths:
                continue
            latency = HistogramMetricFamily(name, HELP[name], labels=TOKENIZER_LABELS + list(extra))
            if total(counted) > 0:
                buckets = [("+Inf", total(counted))]
                latency.add_metric([*values, *extra.values()], buckets, total(summed))
            families[name] = latency

    def server_info(self) -> dict[str, Any]:
        """`GET /server_info` (entrypoints/http_server.py:863-891): every resolved ServerArgs
        field by its flat name (server_args.py:316-333), the launch command, the scheduler's
        internal state per data-parallel rank
        (managers/scheduler_components/internal_state.py:74, :119-125) and the version."""
        self.advance_to(self.clock())
        states: list[dict[str, float]] = []
        for engine in self.engines:
            state = {"last_gen_throughput": engine.tokens_per_s}
            if self.setup.spec_tokens:
                state["avg_spec_accept_length"] = self.setup.drafting(engine.running).tokens
            states.append(state)
        return {
            **self.started().args.fields(),
            "launch_command": self.started().launch_command,
            "internal_states": states,
            "version": SGLANG_VERSION,
            "frontend": "python",
        }

    def model_info(self) -> dict[str, Any]:
        """`GET /model_info` and its deprecated alias `/get_model_info`
        (entrypoints/http_server.py:802-850)."""
        args = self.started().args
        return {
            "model_path": args.model_path,
            "served_model_name": args.served_model_name or args.model_path,
            "is_generation": True,
            "architectures": [self.model.architecture],
        }


@dataclass
class SglangServer:
    """SGLang for a SimulatedDeployment (sim/deployment.py `ServerKind`): any change of its
    command line restarts it (a pod rolls); it starts, or refuses to, as sim/sglang_startup.py
    says SGLang 0.5.23 does; `/metrics` is there only with `--enable-metrics`
    (observability.py:70). The manifest is read with the tuner's SGLang dialect (where the args
    sit), what the args do with the simulation's own reading."""

    model: ModelSpec
    acceptance: tuple[float, ...]
    dialect: Dialect = field(default_factory=SglangDialect)
    last: Started | None = None  # the running server's start-up

    def tokens(self, command: Sequence[str], args: Sequence[str]) -> list[str]:
        return self.dialect.tokens(command, args)

    def wanted(self, live: LiveTarget, tokens: Sequence[str]) -> Hashable:
        return tuple(tokens)

    def label(self, wanted: Hashable) -> str:
        assert isinstance(wanted, tuple)
        try:
            return start(wanted, self.model).setup.label
        except StartupError:
            return "sglang " + shlex.join(wanted)

    def refusal(self, setup: Setup, tokens: Sequence[str], image: str | None) -> str | None:
        try:
            start(tokens, self.model)
        except StartupError as exc:
            return str(exc)
        return None

    def running(self, setup: Setup, tokens: Sequence[str]) -> SimSetup:
        self.last = start(tokens, self.model)
        caching = not self.last.args.disable_radix_cache
        return SimSetup.of(self.last.setup, self.acceptance, prefix_caching=caching)

    def started(self) -> Started:
        if self.last is None:
            raise RuntimeError("the simulated SGLang has not started")
        return self.last

    def max_running(self) -> float:
        return self.started().max_running

    def runs_at(self, setup: Setup, batch: float) -> Setup:
        return run_at(setup, batch)

    def simulator(self, **options: Any) -> SimulatedVllm:
        args = self.started().args
        options["model_name"] = args.served_model_name or args.model_path
        return SimulatedSglang(started=self.started, model=self.model, **options)

    def routes(self, sim: SimulatedVllm, image: str | None) -> Routes:
        assert isinstance(sim, SimulatedSglang)
        return {
            "/server_info": sim.server_info,
            "/get_server_info": sim.server_info,
            "/model_info": sim.model_info,
            "/get_model_info": sim.model_info,
        }

    def serves_metrics(self) -> bool:
        return self.last is not None and self.last.args.enable_metrics


# The operator's speculative algorithm for each drafter kind (NEXTN: the model's own MTP layers).
ALGORITHM_OF = {"mtp": "NEXTN", "eagle": "EAGLE", "eagle3": "EAGLE3", "ngram": "NGRAM"}


def sglang_manifest(model_id: str, setup: Setup, drafter: str | None = "mtp") -> str:
    """An SGLang Deployment for the demo and the tests: the operator's drafter and speculation
    (K = the setup's), `--max-running-requests` (without it speculation caps the server at 48)
    and `--enable-metrics`; no drafter, no speculation."""
    speculation = ""
    if drafter:
        k = setup.spec_tokens or 3
        speculation = f"""
            - --speculative-algorithm
            - {ALGORITHM_OF.get(drafter, drafter.upper())}
            - --speculative-num-steps
            - "{k}"
            - --speculative-eagle-topk
            - "1"
            - --speculative-num-draft-tokens
            - "{k + 1}\""""
    container = f"""\
          command: ["python3", "-m", "sglang.launch_server"]
          args:
            - --model-path
            - {model_id}{speculation}
            - --max-running-requests
            - "1024"
            - --enable-metrics
"""
    return deployment_yaml("An SGLang", "sglang", f"lmsysorg/sglang:v{SGLANG_VERSION}", container)
