"""An engine build's start-up rules (pure, engine-neutral): one row per (engine, version range,
SSM family), as the engine package loads them from its table in data
(autotuner/engines/<engine>/builds.yaml), and the row in force with where it came from.

A row says, per setup family that needs more than the operator's own flags, whether the build
starts with it, the bounds on the replay window L and the draft length K, and the companion
settings it needs besides the setup's own flags (the Mamba backend, prefix caching off, the
model runner). Each rule carries the engine's own words and the file:line of the released code
it was read from, so a refusal names the rule."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from autotuner.core.engine.workload import ENGINE_NAMES
from autotuner.core.types import Setup, SetupKind
from autotuner.core.vocabulary import Word


class Companion(Word):
    """A setting a setup needs besides its own flags (each engine spells it its own way)."""

    MAMBA_BACKEND_FLASHINFER = "mamba_backend_flashinfer"
    PREFIX_CACHING_OFF = "prefix_caching_off"
    MODEL_RUNNER_V1 = "model_runner_v1"
    # SGLang: its linear-attention ReplaySSM refuses the extra_buffer radix cache, and no_buffer
    # refuses the overlap scheduler.
    MAMBA_RADIX_NO_BUFFER = "mamba_radix_no_buffer"
    OVERLAP_SCHEDULE_OFF = "overlap_schedule_off"


class Origin(Word):
    """Where the row in force came from, strongest first."""

    SETTINGS = "settings"
    IMAGE_TAG = "image tag"
    VERSION_ENDPOINT = "GET /version"
    SERVER_INFO = "GET /server_info"
    METRICS = "the engine's metrics"  # labels only a build from some version on exports
    DEFAULT = "default"


class Rule(BaseModel):
    """One start-up check: the engine's words and where they are in its released code."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    says: str
    source: str

    def named(self, build: str, detail: str) -> str:
        return f'{build}: {detail}: "{self.says}" ({self.source})'


class WindowLimit(Rule):
    value: int = Field(ge=2)


class SetupRule(BaseModel):
    """What one setup family needs to start on this build, or the rule that refuses it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    refused: Rule | None = None
    max_window: WindowLimit | None = None  # L <= value
    window_covers_drafts: Rule | None = None  # 1 + K <= L
    companions: tuple[Companion, ...] = ()
    why: str = ""  # why this variant (when the build offers several)

    def refusal(self, setup: Setup, build: str) -> str | None:
        """The rule this setup breaks, named with the build's own words, or None."""
        if self.refused is not None:
            return self.refused.named(build, f"{setup.kind.value} refused")
        window, k = setup.replay_window, setup.spec_tokens
        if self.max_window is not None and window > self.max_window.value:
            return self.max_window.named(build, f"L={window} > {self.max_window.value}")
        if self.window_covers_drafts is not None and k and window < 1 + k:
            return self.window_covers_drafts.named(build, f"L={window} < 1+K={1 + k}")
        return None


class ScheduleRules(BaseModel):
    """How the build runs a per-batch K schedule (vLLM's num_speculative_tokens_per_batch_size):
    where it drops it, and the CUDA graphs it runs it with. Empty: no rule read (the engine has
    no such schedule, or the build was not read)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    data_parallel_drops: Rule | None = Field(
        None, description="Dropped with a warning when the data parallel size is above 1."
    )
    v1_methods: tuple[str, ...] | None = Field(
        None,
        description="On Model Runner V1 the schedule runs only for these speculative methods "
        "(dropped with a warning for the others); None: for every method.",
    )
    v1_methods_rule: Rule | None = None
    v2_unsupported_methods: tuple[str, ...] = Field(
        (), description="Methods Model Runner V2 does not run: the engine picks V1 for them."
    )
    v2_unsupported_rule: Rule | None = None
    v1_piecewise: Rule | None = Field(
        None, description="On Model Runner V1 full CUDA graphs are forced down to PIECEWISE."
    )


class BuildRow(BaseModel):
    """One (engine, version range, SSM family) row of an engine's capability table."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: str
    versions: str = Field(description="The range as written, e.g. '>=0.33.0,<0.34'.")
    family: str = Field(description="An SSM family, or 'any'.")
    platform: str = "cuda"
    architectures: tuple[str, ...] = Field(
        (), description="Replay only for these architectures (empty: every one of the family)."
    )
    other_architectures: Rule | None = None  # the refusal for the family's other ones
    spec: SetupRule = SetupRule()  # speculation alone: starts everywhere, with companions on some
    replay: SetupRule = SetupRule()
    replay_spec: SetupRule = SetupRule()
    schedule: ScheduleRules = ScheduleRules()
    source: str = ""
    note: str = ""

    @property
    def name(self) -> str:
        cpu = "-cpu" if self.platform == "cpu" else ""
        return f"{self.engine}{cpu} {self.versions} {self.family}"

    def rule(self, kind: SetupKind) -> SetupRule | None:
        """The rule of a setup family (plain starts on every row: None)."""
        if kind is SetupKind.SPEC:
            return self.spec
        if kind is SetupKind.REPLAY:
            return self.replay
        if kind is SetupKind.REPLAY_SPEC:
            return self.replay_spec
        return None

    def refusal(self, setup: Setup, architecture: str | None) -> str | None:
        rule = self.rule(setup.kind)
        if rule is None:
            return None
        # The architectures are those with ReplaySSM: speculation alone starts on every one.
        replays = bool(setup.replay_window)
        if replays and self.architectures and architecture not in (None, *self.architectures):
            refused = self.other_architectures or Rule(says="not supported", source=self.source)
            return refused.named(self.name, f"{setup.kind.value} refused for {architecture}")
        refusal = rule.refusal(setup, self.name)
        return refusal.replace("<arch>", architecture) if refusal and architecture else refusal

    def companions(self, setup: Setup) -> tuple[Companion, ...]:
        rule = self.rule(setup.kind)
        return rule.companions if rule is not None and rule.refused is None else ()


class BuildInForce(BaseModel):
    """The rows of the build the engine runs (one per SSM family), and where that came from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: str | None = Field(None, description="The version as read (None: not read).")
    origin: Origin = Origin.DEFAULT
    detail: str = Field("", description="What was read, e.g. the image.")
    rows: tuple[BuildRow, ...] = ()
    known: bool = Field(True, description="The version is one the table has rules for.")

    def row(self, family: str | None) -> BuildRow | None:
        """The row for a model's SSM family (None: a model without recurrent state)."""
        if family is None:
            return None
        exact = [r for r in self.rows if r.family == family]
        fitting = exact or [r for r in self.rows if r.family == "any"]
        return fitting[0] if fitting else None

    @property
    def schedule(self) -> ScheduleRules | None:
        """The build's schedule rules (the same on each of its rows; None: no row)."""
        return self.rows[0].schedule if self.rows else None

    def describe(self) -> str:
        version = self.version or "not read"
        said = f" ({self.detail})" if self.detail else ""
        unknown = "" if self.known else ": no rules read for it, the safest row"
        engine = self.rows[0].engine if self.rows else "the engine"
        label = ENGINE_NAMES.get(engine, engine)
        return f"{label} {version} from {self.origin.value}{said}{unknown}"
