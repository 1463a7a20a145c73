"""Core value types shared by every component: the setups the tuner chooses between."""

from __future__ import annotations

import re
from enum import Enum
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, model_validator

from autotuner.errors import InputError, UnusableReason

if TYPE_CHECKING:  # numpy is imported where arrays are made: the settings tree stays light
    import numpy as np
    import numpy.typing as npt

MAX_SPEC_TOKENS = 16
MAX_BATCH = 1 << 20


class Value(BaseModel):
    """A value: frozen, compared and hashed by what it holds."""

    model_config = ConfigDict(frozen=True)


class SetupKind(str, Enum):
    """The four families of setups; a setup's kind follows from its K and L."""

    PLAIN = "plain"
    SPEC = "spec"
    REPLAY = "replay"
    REPLAY_SPEC = "replay+spec"


class ScheduleBand(Value):
    """One `[start_bs, end_bs, K]` entry of vLLM's `num_speculative_tokens_per_batch_size`."""

    start_batch: int = Field(ge=1, le=MAX_BATCH, description="First batch size of the band.")
    end_batch: int = Field(ge=1, le=MAX_BATCH, description="Last batch size (inclusive).")
    spec_tokens: int = Field(ge=0, le=MAX_SPEC_TOKENS, description="K used in this band.")

    @model_validator(mode="after")
    def _ordered(self) -> ScheduleBand:
        if self.end_batch < self.start_batch:
            raise ValueError(f"band {self.start_batch}-{self.end_batch} ends before it starts")
        return self


class Setup(Value):
    """What the engine runs: draft length K (or a per-batch K schedule, or adaptive
    verification) and replay window L.

    `spec_tokens` is vLLM's `num_speculative_tokens`: the static K, and the upper bound of a
    schedule or of adaptive verification. `replay_window` is ReplaySSM's ring length L; 0 turns
    replay off. `adaptive` is vLLM's `enable_adaptive_verification` (PR #47808): the engine
    verifies per step the drafts its start-up cost profile and online confidence favour, K
    being the ceiling (under a schedule too: the band's K is then the step's ceiling).
    """

    spec_tokens: int = Field(default=0, ge=0, le=MAX_SPEC_TOKENS)
    schedule: tuple[ScheduleBand, ...] = ()
    replay_window: int = Field(default=0, ge=0, le=4096)
    adaptive: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> Setup:
        if self.replay_window == 1:
            raise ValueError("replay_window must be 0 (off) or at least 2")
        if self.adaptive and self.spec_tokens == 0:
            raise ValueError("adaptive verification needs speculation (K >= 1, its ceiling)")
        if self.schedule:
            if self.spec_tokens == 0:
                raise ValueError("a K schedule needs spec_tokens (its upper bound) >= 1")
            previous_end = 0
            for band in self.schedule:
                if band.start_batch <= previous_end:
                    raise ValueError("schedule bands must be sorted and must not overlap")
                if band.spec_tokens > self.spec_tokens:
                    raise ValueError(
                        f"band K={band.spec_tokens} exceeds num_speculative_tokens="
                        f"{self.spec_tokens}"
                    )
                previous_end = band.end_batch
        return self

    @property
    def kind(self) -> SetupKind:
        if self.spec_tokens and self.replay_window:
            return SetupKind.REPLAY_SPEC
        if self.spec_tokens:
            return SetupKind.SPEC
        if self.replay_window:
            return SetupKind.REPLAY
        return SetupKind.PLAIN

    @property
    def name(self) -> str:
        return self.kind.value

    @property
    def label(self) -> str:
        """The compact text form that :meth:`parse` reads back, e.g. ``replay+spec:3:16``."""
        kind = self.kind
        if kind is SetupKind.PLAIN:
            text = "plain"
        elif kind is SetupKind.SPEC:
            text = f"spec:{self.spec_tokens}"
        elif kind is SetupKind.REPLAY:
            text = f"replay:{self.replay_window}"
        else:
            text = f"replay+spec:{self.spec_tokens}:{self.replay_window}"
        if self.schedule:
            text += "@" + ",".join(
                f"{b.start_batch}-{b.end_batch}:{b.spec_tokens}" for b in self.schedule
            )
        return text + (ADAPTIVE_SUFFIX if self.adaptive else "")

    def spec_tokens_at(self, batch: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """K the engine uses at each batch size (the schedule's band, else the static K; under
        adaptive verification the ceiling, which the engine drafts and verifies at most).

        Batch sizes outside every band fall back to the static K, as vLLM does.
        """
        import numpy as np

        sizes = np.asarray(batch, dtype=np.int64)
        k = np.full(sizes.shape, self.spec_tokens, dtype=np.int64)
        for band in self.schedule:
            k[(sizes >= band.start_batch) & (sizes <= band.end_batch)] = band.spec_tokens
        return k

    @classmethod
    def parse(cls, text: str) -> Setup:
        """Read ``plain``, ``spec:K``, ``replay:L`` or ``replay+spec:K:L`` (optionally followed
        by ``@start-end:K,...`` for a schedule, and ``@adaptive`` last for adaptive verification).
        Raises InputError with the accepted forms."""
        text = text.strip()
        adaptive = text.endswith(ADAPTIVE_SUFFIX)
        match = _SETUP_RE.fullmatch(text.removesuffix(ADAPTIVE_SUFFIX))
        if match is None:
            raise InputError(
                f"cannot read setup {text!r}: use plain, spec:K, replay:L or replay+spec:K:L "
                "(optionally @start-end:K,... for a K schedule, @adaptive for adaptive "
                "verification)"
            )
        kind, first, second, schedule_text = match.groups()
        numbers = [int(n) for n in (first, second) if n is not None]
        expected = {"plain": 0, "spec": 1, "replay": 1, "replay+spec": 2}[kind]
        if len(numbers) != expected:
            raise InputError(f"setup {text!r}: {kind} takes {expected} number(s)")
        k, window = {
            "plain": (0, 0),
            "spec": (numbers[0] if numbers else 0, 0),
            "replay": (0, numbers[0] if numbers else 0),
            "replay+spec": tuple(numbers) if len(numbers) == 2 else (0, 0),
        }[kind]
        if kind in ("spec", "replay+spec") and k == 0:
            raise InputError(f"setup {text!r}: K must be >= 1 (use plain or replay:L for K=0)")
        if kind in ("replay", "replay+spec") and window < 2:
            raise InputError(f"setup {text!r}: the replay window L must be >= 2")
        bands: list[ScheduleBand] = []
        if schedule_text:
            for item in schedule_text.split(","):
                band = _BAND_RE.fullmatch(item.strip())
                if band is None:
                    raise InputError(f"schedule entry {item!r}: use start-end:K, e.g. 1-64:3")
                start, end, band_k = (int(g) for g in band.groups())
                bands.append(_band(start, end, band_k))
        try:
            return cls(
                spec_tokens=k, replay_window=window, schedule=tuple(bands), adaptive=adaptive
            )
        except ValueError as exc:
            raise InputError(f"setup {text!r}: {exc}") from None


def _band(start: int, end: int, k: int) -> ScheduleBand:
    try:
        return ScheduleBand(start_batch=start, end_batch=end, spec_tokens=k)
    except ValueError as exc:
        raise InputError(f"schedule band {start}-{end}:{k}: {exc}") from None


ADAPTIVE_SUFFIX = "@adaptive"
_SETUP_RE = re.compile(r"(plain|spec|replay\+spec|replay)(?::(\d+))?(?::(\d+))?(?:@(.+))?")
_BAND_RE = re.compile(r"(\d+)-(\d+):(\d+)")

PLAIN = Setup()


class Prediction(Value):
    """The cost model's answer for one setup at one batch size, with the numbers behind it.

    When the batch does not fit in memory (`feasible` is false), the engine would run
    `effective_batch` requests and queue the rest: the step and throughput are for that batch.
    """

    setup: Setup
    batch: int
    effective_batch: int
    spec_tokens: int
    tau: float
    step_time_s: float
    tokens_per_s: float
    time_per_output_token_s: float
    feasible: bool
    reason: str | None = None
    bytes: dict[str, float] = {}
    time_s: dict[str, float] = {}
    flops: dict[str, float] = {}
    # A setup without the prefix caching the live engine had: the share of each GPU second
    # its recomputed prefill takes, and the prompt tokens it prefills again per second.
    prefill_share: float = 0.0
    recomputed_prompt_tokens_per_s: float = 0.0


class BatchStats(Value):
    """Running requests per engine, sampled every scrape over the window."""

    samples: int
    mean: float
    p50: float
    p90: float
    p99: float
    values: tuple[float, ...] = ()


class AcceptanceStats(Value):
    """Speculative-decoding counter deltas over the window, with what follows from them."""

    drafts: float
    draft_tokens: float
    accepted: float
    accepted_per_position: tuple[float, ...]
    per_position: tuple[float, ...]  # conditional rate p_i, given the position was proposed
    per_position_low: tuple[float, ...]
    per_position_high: tuple[float, ...]
    tau: float  # mean tokens kept per verify step at the deployed K
    acceptance_rate: float  # accepted / draft tokens (vLLM's definition)
    mean_acceptance_length: float  # 1 + accepted / drafts (vLLM's definition)
    sufficient: bool
    note: str | None = None
    # How the proposed lengths were known (`Proposals`, core/predict/acceptance.py): "full"
    # (every draft proposed K), "schedule" (the deployed K schedule and the batch samples) or
    # "unknown" (positions past 0 are lower bounds); `read_with` is the setup read for it
    # (None: none).
    trials_per_position: tuple[float, ...] = ()  # drafts that proposed i having reached it
    lower_bound: tuple[bool, ...] = ()
    proposed_share: tuple[float, ...] = ()  # share of drafts that proposed i, where known
    naive_per_position: tuple[float, ...] = ()  # a_i / a_(i-1), what vLLM's counters say as-is
    proposals: str = "full"
    proposals_note: str | None = None
    read_with: str | None = None


class LiveSetup(Value):
    """What the running engine does, read back from its own metrics."""

    speculation: bool
    spec_tokens: int  # number of per-position acceptance series (0 when speculation is off)
    replay: bool | None  # None: this vLLM build does not export use_replayssm
    replay_window: int | None
    mamba_ssm_cache_dtype: str | None
    mamba_cache_mode: str | None
    cache_config_read: bool = False  # vllm:cache_config_info was there (its labels are fields)
    cache_config_labels: tuple[str, ...] = ()  # its label names: the build's CacheConfig fields

    @property
    def setup(self) -> Setup:
        window = self.replay_window if self.replay and self.replay_window else 0
        return Setup(spec_tokens=self.spec_tokens, replay_window=window)


class Observation(Value):
    """One evaluation window of a vLLM deployment, or the reason it cannot be used."""

    source: str
    window_start: float
    window_end: float
    usable: bool
    reason: UnusableReason | None = None
    detail: str | None = None
    series: int = 0  # engine series (replicas x data-parallel engines) in the window
    batch: BatchStats | None = None
    acceptance: AcceptanceStats | None = None
    step_time_s: float | None = None  # per decode step (inter-token latency, VLLM.md)
    time_per_output_token_s: float | None = None
    generation_tokens_per_s: float | None = None
    prompt_tokens_per_s: float | None = None
    mean_context_tokens: float | None = None
    mean_prompt_tokens: float | None = None  # per finished request (vLLM's prompt histogram)
    mean_generation_tokens: float | None = None  # per finished request
    mean_iteration_tokens: float | None = None
    # Share of the looked-up prompt tokens the prefix cache served (vLLM counts tokens, not
    # requests); None where the engine does not export the counters or looked nothing up.
    prefix_cache_hit_rate: float | None = None
    prefix_cache_queried_tokens: float | None = None  # the window's looked-up tokens behind it
    waiting_mean: float | None = None
    kv_cache_usage_mean: float | None = None
    preemptions: float | None = None
    live_setup: LiveSetup | None = None

    @property
    def duration_s(self) -> float:
        return self.window_end - self.window_start


class Action(str, Enum):
    KEEP = "keep"  # the current setup is the best one
    SWITCH = "switch"  # change to `target`
    HOLD = "hold"  # a better setup exists, but `blocked_by` stops the change
    REVERT = "revert"  # verification failed: back to the last known good setup


class BlockReason(str, Enum):
    """The first rule that stopped a switch (DESIGN.md rules 2, 3, 6, 7)."""

    BELOW_MIN_GAIN = "below_min_gain"
    LOW_CONFIDENCE = "low_confidence"
    DWELL = "dwell"
    RESTART_COST = "restart_cost"
    BUDGET = "budget"
    COOLDOWN = "cooldown"
    STALE_DATA = "stale_data"
    INSUFFICIENT_DATA = "insufficient_data"
    ROLLOUT = "rollout_in_progress"
    VERIFYING = "verifying"
    PAUSED = "paused"
    NOT_LEADER = "not_leader"


class Decision(Value):
    """One decision with every number behind it (DESIGN.md rule 8)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    at: float
    action: Action
    current: Setup
    target: Setup | None = None  # the recommendation (also when held)
    blocked_by: BlockReason | None = None
    gain: float = 0.0  # predicted fractional tokens/s gain of target over current
    confidence: float = 0.0
    predicted_tokens_per_s: dict[str, float] = {}  # candidate label -> objective value
    predicted_interval: dict[str, tuple[float, float]] = {}  # label -> (low, high) tokens/s
    sentence: str
    notes: tuple[str, ...] = ()

    def noted(self, *notes: str) -> Decision:
        """The same decision with more notes (what carrying it out found)."""
        return Decision.model_validate({**dict(self), "notes": (*self.notes, *notes)})
