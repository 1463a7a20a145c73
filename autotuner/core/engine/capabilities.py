"""What an engine build accepts (VLLM.md, "Flags the autotuner manages"): the model predicts
every setup, the policy proposes only the ones the running engine can run.

Each engine's presets live with the engine (autotuner/engines/<engine>/capabilities.py).
Capabilities start from settings (a preset with fields changed) and are narrowed or widened by
what the engine itself shows: the served model's SSM family (`--use-replayssm` means ReplaySSM
only for the families the build has kernels for), the labels of `vllm:cache_config_info` (a build
without a `use_replayssm` label predates ReplaySSM), the setup it runs (it started with it) and
the restarts it refused."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from autotuner.core.engine.builds import BuildInForce, BuildRow, Companion, Rule, ScheduleRules
from autotuner.core.model.spec import ModelSpec, SsmKind
from autotuner.core.types import MAX_BATCH, LiveSetup, ScheduleBand, Setup, SetupKind
from autotuner.core.vocabulary import Word

BUILD = "build"  # the preset whose replay rules are the capability table's row in force

# A vLLM schedule's rules where no build was read: the newest read (0.33.0, the strictest;
# engines/vllm/builds.yaml has each build's, and a test holds these equal to 0.33's there).
NEWEST_SCHEDULE_RULES = ScheduleRules(
    data_parallel_drops=Rule(
        says="Disabling num_speculative_tokens_per_batch_size",
        source="vllm/config/vllm.py:1110-1127",
    ),
    v1_methods=("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash"),
    v1_methods_rule=Rule(
        says="not supported with the '<method>' speculative method on Model Runner V1",
        source="vllm/config/vllm.py:1088-1108",
    ),
    v2_unsupported_methods=("suffix", "custom_class"),
    v2_unsupported_rule=Rule(
        says="Model Runner V2 does not yet support speculative method '<method>'",
        source="vllm/config/vllm.py:3066-3068, 755-765",
    ),
    v1_piecewise=Rule(
        says="Overriding cudagraph_mode to PIECEWISE", source="vllm/config/vllm.py:1069-1086"
    ),
)


class ModelRunner(Word):
    """vLLM's model runner: V2 by default on a GPU build with Triton (config/vllm.py:731-767),
    V1 with VLLM_USE_V2_MODEL_RUNNER=0, without Triton (the CPU build), or for a method V2
    lacks."""

    V1 = "v1"
    V2 = "v2"


class Capability(Word):
    """A feature a build may lack: the fields of EngineCapabilities a refused restart turns off."""

    SPECULATION = "speculation"
    REPLAY = "replay"
    REPLAY_WITH_SPECULATION = "replay_with_speculation"
    SPEC_SCHEDULE = "spec_schedule"
    ADAPTIVE_VERIFICATION = "adaptive_verification"


class AdaptiveTier(BaseModel):
    """One batch tier of an engine's own adaptive speculation (SGLang's
    --speculative-adaptive): from this batch up, K is the largest candidate not above the K the
    engine started with (0: the tier drafts nothing)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    start_batch: int = Field(ge=1, description="The first batch of the tier.")
    candidates: tuple[int, ...] = Field(description="The K the tier may run.")


class EngineCapabilities(BaseModel):
    """The setup combinations one engine build accepts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(
        description="The build's name (in settings: the preset the fields start from)."
    )
    speculation: bool = Field(True, description="--speculative-config is accepted.")
    replay: bool = Field(True, description="--use-replayssm exists (PR #48018).")
    replay_families: tuple[SsmKind, ...] = Field(
        (SsmKind.MAMBA2,),
        description="SSM families whose ReplaySSM kernels the build has: upstream, Mamba-2 "
        "standard decode (PR #48018); gated_deltanet (Qwen3.5 / Qwen3-Next) needs a build with "
        "its kernels (PRs #48792, #49887, forks).",
    )
    served_family: SsmKind | None = Field(
        None,
        description="The served model's SSM family, set from the model (not a setting): replay "
        "is refused where the build's kernels do not cover it.",
    )
    replay_with_speculation: bool = Field(
        False, description="ReplaySSM together with speculation (PR #49847/#49887 builds)."
    )
    spec_schedule: bool = Field(
        True, description="num_speculative_tokens_per_batch_size (Dynamic SD, PR #32374)."
    )
    adaptive_verification: bool = Field(
        False,
        description="enable_adaptive_verification in --speculative-config (PR #47808, builds "
        "from 2026-08): the engine verifies per step the drafts its cost profile and "
        "confidence favour, K being the ceiling.",
    )
    adaptive_spec_tokens: tuple[int, ...] = Field(
        (),
        description="The K an adaptive setup may start from (empty: any up to max_spec_tokens); "
        "SGLang's --speculative-num-steps must be a candidate step of its adaptive tiers.",
    )
    adaptive_tiers: tuple[AdaptiveTier, ...] = Field(
        (),
        description="An adaptive setup runs these batch tiers (SGLang's --speculative-adaptive, "
        "adaptive_spec_params.py:28-53) and is priced as that K schedule; empty: adaptive is "
        "vLLM's adaptive verification, priced per step by the cost model.",
    )
    draft_window_families: tuple[SsmKind, ...] = Field(
        (),
        description="SSM families whose replay under speculation verifies through a window of "
        "the draft maximum K+1 whatever window is written (SGLang's Gated DeltaNet): the setup "
        "is priced with that window.",
    )
    replay_with_kv_connector: bool = Field(
        False,
        description="Replay beside a KV connector (P/D disaggregation, KV cache offload); vLLM "
        "0.32/0.33 refuse it (config/vllm.py:3541-3553).",
    )
    kv_connector: bool = Field(
        False, description="The live args set a KV connector (read from them, not a setting)."
    )
    schedule_with_data_parallel: bool = Field(
        False,
        description="A per-batch K schedule runs with data parallel size > 1; vLLM 0.33 drops "
        "it with a warning there (config/vllm.py:1110-1127), so it is never proposed.",
    )
    data_parallel: int | None = Field(
        1,
        ge=1,
        description="The live args' data parallel size (read from them, not a setting; None: "
        "the shell computes it, unknown until the engine starts).",
    )
    schedule_runner_rules: bool = Field(
        False,
        description="A schedule runs as vLLM runs one: on Model Runner V1 only for some "
        "drafters (config/vllm.py:1088-1108), and with full CUDA graphs forced down to "
        "PIECEWISE there (:1069-1086); V2 keeps full graphs. Off for engines whose K tiers "
        "are their own (SGLang's adaptive tiers keep a graph runner per tier).",
    )
    model_runner: ModelRunner | None = Field(
        None,
        description="The model runner the operator's environment selects "
        "(VLLM_USE_V2_MODEL_RUNNER=0: v1); None: as vLLM picks it (V2 on a GPU build unless "
        "the method needs V1, V1 on the CPU build).",
    )
    drafter_method: str | None = Field(
        None,
        description="The live args' speculative method, as the engine resolves it (read from "
        "them, not a setting; None: not read).",
    )
    max_spec_tokens: int = Field(8, ge=0, le=16, description="Largest K the drafter allows.")
    build: BuildInForce | None = Field(
        None,
        description="The capability table's rows of the build the engine runs, and where that "
        "came from (not a setting: read from the engine). Under the `build` preset its row "
        "decides replay; under another preset the preset does, and the row only says which "
        "companion flags a setup needs.",
    )
    served_architecture: str | None = Field(
        None, description="The served model's architecture, set from the model (not a setting)."
    )

    @property
    def follows_build(self) -> bool:
        """Replay is what the table's row says (no preset declared in settings)."""
        return self.name == BUILD and self.build is not None

    @property
    def row(self) -> BuildRow | None:
        """The table's row for the served model's SSM family (None: not known)."""
        if self.build is None or self.served_family is None:
            return None
        return self.build.row(self.served_family.value)

    def companions(self, setup: Setup) -> tuple[Companion, ...]:
        """What the build needs besides the setup's own flags to start with it."""
        row = self.row
        return row.companions(setup) if row is not None else ()

    def keeps_prefix_caching(self, setup: Setup) -> bool:
        """Whether the engine runs `setup` with prefix caching (its companions may turn it
        off: then the prompt tokens its cache served are prefilled again)."""
        return Companion.PREFIX_CACHING_OFF not in self.companions(setup)

    @field_validator("replay_families", mode="before")
    @classmethod
    def _known_families(cls, families: Any) -> Any:
        known = [k.value for k in SsmKind]
        if isinstance(families, list | tuple):
            unknown = [f for f in families if str(getattr(f, "value", f)) not in known]
            if unknown:
                raise ValueError(f"unknown SSM families {unknown}; known: {', '.join(known)}")
        return families

    def refusal(self, setup: Setup) -> str | None:
        """Why this engine would refuse the setup, or None when it accepts it."""
        kind = setup.kind
        if setup.spec_tokens and not self.speculation:
            return f"{self.name}: speculative decoding is not available"
        if setup.spec_tokens > self.max_spec_tokens:
            return (
                f"{self.name}: K={setup.spec_tokens} exceeds the drafter's {self.max_spec_tokens}"
            )
        if setup.replay_window and not self.replay:
            return f"{self.name}: this build has no --use-replayssm"
        if setup.replay_window and self.served_architecture and self.served_family is None:
            return (
                f"{self.name}: replay needs recurrent (SSM) layers to replay, and "
                f"{self.served_architecture} has none: the engine refuses it as not supported "
                "for this architecture"
            )
        if setup.replay_window and self.kv_connector and not self.replay_with_kv_connector:
            return (
                f"{self.name}: replay is incompatible with KV connectors (P/D disaggregation, KV "
                "cache offload), and the live args set --kv-transfer-config"
            )
        if kind is SetupKind.REPLAY_SPEC and not self.replay_with_speculation:
            return f"{self.name}: --use-replayssm does not support speculative decoding"
        replay = self._replay_refusal(setup) if setup.replay_window else None
        if replay is not None:
            return replay
        if setup.schedule and not self.spec_schedule:
            return f"{self.name}: no num_speculative_tokens_per_batch_size"
        if setup.schedule and not self.schedule_with_data_parallel:
            dropped = self._data_parallel_refusal()
            if dropped is not None:
                return dropped
        if setup.schedule and self.schedule_runner_rules:
            dropped = self._runner_refusal()
            if dropped is not None:
                return dropped
        if setup.adaptive and not self.adaptive_verification:
            return f"{self.name}: no enable_adaptive_verification (PR #47808)"
        allowed = self.adaptive_spec_tokens
        if setup.adaptive and allowed and setup.spec_tokens not in allowed:
            starts = ", ".join(map(str, allowed))
            return f"{self.name}: adaptive K={setup.spec_tokens} is not one of {starts}"
        return None

    @property
    def schedule_rules(self) -> ScheduleRules:
        """How the build runs a K schedule (its table row; without one, the newest read)."""
        read = self.build.schedule if self.build is not None else None
        return read if read is not None else NEWEST_SCHEDULE_RULES

    def runner(self) -> ModelRunner:
        """The model runner the engine picks for these args (vllm/config/vllm.py:731-767)."""
        if self.model_runner is not None:
            return self.model_runner
        if self._cpu_build():
            return ModelRunner.V1  # no Triton: V1 (vllm/config/vllm.py:752), whatever the model
        unsupported = self.schedule_rules.v2_unsupported_methods
        return ModelRunner.V1 if self.drafter_method in unsupported else ModelRunner.V2

    def piecewise_graphs(self, setup: Setup) -> bool:
        """Whether the engine runs `setup` (as run) with piecewise CUDA graphs where it would
        capture full ones: a K schedule on Model Runner V1, where the build forces them down
        (so every attention and SSM mixer runs outside the captured graphs). The CPU build
        captures no CUDA graphs at all, so nothing is forced down there."""
        return (
            bool(setup.schedule)
            and self.schedule_runner_rules
            and self.schedule_rules.v1_piecewise is not None
            and self.runner() is ModelRunner.V1
            and not self._cpu_build()
        )

    def _cpu_build(self) -> bool:
        rows = self.build.rows if self.build is not None else ()
        return any(row.platform == "cpu" for row in rows)

    def _runner_refusal(self) -> str | None:
        """The build drops a schedule with a warning on Model Runner V1 for a method other
        than the ones whose proposers truncate drafts themselves."""
        rules, method = self.schedule_rules, self.drafter_method
        if self.runner() is not ModelRunner.V1 or method is None or rules.v1_methods is None:
            return None
        if method in rules.v1_methods:
            return None
        source = rules.v1_methods_rule.source if rules.v1_methods_rule else "the build table"
        return (
            f"{self.name}: the engine drops num_speculative_tokens_per_batch_size on Model "
            f"Runner V1 for the '{method}' method ({source}; {self._why_v1()}): the schedule "
            "would not run"
        )

    def _why_v1(self) -> str:
        if self.model_runner is ModelRunner.V1:
            return "the environment selects V1"
        rules = self.schedule_rules
        if self.drafter_method in rules.v2_unsupported_methods:
            where = rules.v2_unsupported_rule.source if rules.v2_unsupported_rule else ""
            return f"V2 does not run '{self.drafter_method}' ({where})"
        return "the CPU build has no Triton, so V1"

    def _data_parallel_refusal(self) -> str | None:
        """vLLM drops a per-batch schedule with a warning when data parallel size > 1: where
        the args say so, or where the shell computes the size (it may well be)."""
        size, rule = self.data_parallel, self.schedule_rules.data_parallel_drops
        if size == 1 or rule is None:
            return None
        said = f"{size} > 1" if size is not None else "computed by the shell (unknown here)"
        return (
            f"{self.name}: the engine drops num_speculative_tokens_per_batch_size when the data "
            f"parallel size is above 1 ({rule.source}), and it is {said}: the schedule would "
            "not run"
        )

    def _replay_refusal(self, setup: Setup) -> str | None:
        """The row's rule a replay setup breaks (under the `build` preset), else the preset's
        families."""
        if self.follows_build:
            row = self.row
            return row.refusal(setup, self.served_architecture) if row is not None else None
        if self.served_family not in (None, *self.replay_families):
            assert self.served_family is not None
            families = ", ".join(f.value for f in self.replay_families)
            return (
                f"{self.name}: --use-replayssm has {families} kernels "
                f"here, not {self.served_family.value} (a build with them: engine.capabilities."
                "replay_families)"
            )
        return None

    def accepts(self, setup: Setup) -> bool:
        return self.refusal(setup) is None

    def as_run(self, setup: Setup) -> Setup:
        """The setup whose speed the engine runs when `setup` is written: its adaptive tiers as
        a K schedule, replay under speculation through the draft window where the family does
        that; `setup` itself elsewhere."""
        k, window = setup.spec_tokens, setup.replay_window
        if k and window and self.served_family in self.draft_window_families:
            window = k + 1
        if setup.adaptive and self.adaptive_tiers:
            return Setup(spec_tokens=k, replay_window=window, schedule=self._tiers(k))
        return (
            setup
            if window == setup.replay_window
            else setup.model_copy(update={"replay_window": window})
        )

    def _tiers(self, k: int) -> tuple[ScheduleBand, ...]:
        tiers = sorted(self.adaptive_tiers, key=lambda t: t.start_batch)
        ends = [*(t.start_batch - 1 for t in tiers[1:]), MAX_BATCH]
        return tuple(
            ScheduleBand(
                start_batch=tier.start_batch,
                end_batch=end,
                spec_tokens=max((c for c in tier.candidates if c <= k), default=0),
            )
            for tier, end in zip(tiers, ends, strict=True)
        )

    def serving(self, model: ModelSpec) -> EngineCapabilities:
        """These capabilities for this model (its SSM family decides what replay means)."""
        return self.model_copy(
            update={
                "served_family": model.ssm.kind if model.ssm else None,
                "served_architecture": model.architecture,
            }
        )

    def deployed(
        self,
        build: BuildInForce | None,
        model: ModelSpec | None,
        kv_connector: bool,
        data_parallel: int | None = 1,
        drafter_method: str | None = None,
    ) -> EngineCapabilities:
        """These capabilities for one deployment as its args say: on its build, serving its
        model (None: not known, the rules of the args alone), beside a KV connector or not, at
        its data parallel size, with its drafter's method. The loop and `apply` both judge a
        setup on this, so neither writes what the other would refuse."""
        on_build = self.running_on(build).connected(kv_connector)
        said = {"data_parallel": data_parallel, "drafter_method": drafter_method}
        changed = {k: v for k, v in said.items() if getattr(on_build, k) != v}
        if changed:
            on_build = on_build.model_copy(update=changed)
        return on_build if model is None else on_build.serving(model)

    def running_on(self, build: BuildInForce | None) -> EngineCapabilities:
        """These capabilities on the build read from the engine (None: keep the one held)."""
        return self if build is None else self.model_copy(update={"build": build})

    def shown_by(self, live: LiveSetup | None) -> EngineCapabilities:
        """Narrowed by what the engine's own metrics say: a `vllm:cache_config_info` without a
        `use_replayssm` label (its labels are the build's CacheConfig fields) is a build that
        predates ReplaySSM."""
        if live and live.cache_config_read and live.replay is None and self.replay:
            return self.model_copy(update={"replay": False, "replay_with_speculation": False})
        return self

    def proven_by(self, running: Setup | None) -> EngineCapabilities:
        """These capabilities with what the running setup shows the build accepts (the engine
        started with it): its schedule, adaptive verification, replay with speculation."""
        if running is None:
            return self
        shown = {
            Capability.SPECULATION: bool(running.spec_tokens),
            Capability.REPLAY: bool(running.replay_window),
            Capability.REPLAY_WITH_SPECULATION: running.kind is SetupKind.REPLAY_SPEC,
            Capability.SPEC_SCHEDULE: bool(running.schedule),
            Capability.ADAPTIVE_VERIFICATION: running.adaptive,
        }
        update: dict[str, object] = {
            name.value: True for name, shown_on in shown.items() if shown_on
        }
        if running.spec_tokens > self.max_spec_tokens:
            update["max_spec_tokens"] = running.spec_tokens
        if running.replay_window and self.served_family not in (None, *self.replay_families):
            update["replay_families"] = (*self.replay_families, self.served_family)
        return self.model_copy(update=update) if update else self

    def connected(self, kv_connector: bool) -> EngineCapabilities:
        """These capabilities beside a KV connector the live args set (or not)."""
        return (
            self
            if kv_connector == self.kv_connector
            else self.model_copy(update={"kv_connector": kv_connector})
        )

    def without(self, refused: Iterable[str]) -> EngineCapabilities:
        """These capabilities turned off (the running engine refused them)."""
        known = {c.value for c in Capability}
        return self.model_copy(update={str(name): False for name in refused if name in known})


def needed(target: Setup, previous: Setup) -> Capability | None:
    """The capability `target` uses that `previous` did not: what a failed change to it says
    the engine may not have."""
    if target.schedule and not previous.schedule:
        return Capability.SPEC_SCHEDULE
    if target.adaptive and not previous.adaptive:
        return Capability.ADAPTIVE_VERIFICATION
    if target.kind is SetupKind.REPLAY_SPEC and previous.kind is not SetupKind.REPLAY_SPEC:
        return Capability.REPLAY_WITH_SPECULATION
    if target.replay_window and not previous.replay_window:
        return Capability.REPLAY
    if target.spec_tokens and not previous.spec_tokens:
        return Capability.SPECULATION
    return None
