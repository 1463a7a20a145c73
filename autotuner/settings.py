"""One typed settings tree: defaults < YAML file < environment (AUTOTUNER_*) < command line.

Groups follow the data flow (source, model, engine, policy, quality, target, loop, exporter,
log), and the policy's own are split by concern (switch, objective, candidates, restart,
estimates, calibration, verification, quarantine, exploration), as kopf's settings are; every
field carries its unit and why in its description, and `autotuner config show` prints the
effective value of each with the layer it came from. Durations are seconds and accept '500ms',
'30s', '15m', '1h' in any layer. Invalid settings fail at start, naming the field; a key that
moved when the groups were split (MOVED) names its new place. This module imports only the
core's plain values, never I/O code.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from autotuner.core.capabilities import PRESETS, UPSTREAM, EngineCapabilities
from autotuner.core.model import DrafterKind
from autotuner.durations import parse_duration
from autotuner.errors import InputError

HOUR = 3600.0


class Group(BaseModel):
    """One group of settings: a frozen value that refuses unknown keys, so a misspelt or moved
    key stops the start naming it instead of being silently ignored."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class FlagNames(Group):
    """The spelling of each managed flag in one vLLM version range (overridable in settings)."""

    speculative_config: str = Field(
        "--speculative-config", description="Takes the drafter's JSON config (K among it)."
    )
    use_replayssm: str = Field("--use-replayssm", description="Turns ReplaySSM on.")
    replayssm_buffer_len: str = Field(
        "--replayssm-buffer-len", description="Takes the replay window L."
    )
    mamba_ssm_cache_dtype: str = Field(
        "--mamba-ssm-cache-dtype", description="Takes the SSM state's dtype."
    )


# Version range -> flag names. ReplaySSM flags exist from the build that merged PR #48018.


class ObservationLimits(Group):
    """When a window is good enough to act on."""

    min_batch_samples: int = Field(
        3, ge=1, description="Running-request samples needed for a batch distribution."
    )
    min_drafts: float = Field(
        200, ge=0, description="Drafts needed before acceptance is trusted (else: insufficient)."
    )
    max_age_s: float = Field(
        60, gt=0, description="A window whose newest sample is older than this is stale."
    )


class QualitySettings(Group):
    """The quality guard: a greedy canary before and after every switch (docs/quality.md)."""

    enabled: bool = Field(True, description="Run the canary around every switch.")
    url: str = Field(
        "",
        description="OpenAI-compatible base URL of one replica; default: the first source URL "
        "without /metrics (direct vllm source only).",
    )
    prompts: Path | None = Field(None, description="Canary set (JSON list); default built-in.")
    model: str = Field("", description="Model name sent in requests; default the served one.")
    max_tokens: int = Field(32, ge=1, le=1024, description="Greedy tokens per prompt.")
    seed: int = Field(0, description="Sent with every request (greedy ignores it; some don't).")
    priority: int | None = Field(
        None,
        description="vLLM request priority for canary requests (higher = later); only for "
        "servers run with --scheduling-policy priority, which others reject: unset by default.",
    )
    timeout_s: float = Field(30.0, gt=0, description="HTTP timeout per canary request, seconds.")
    budget_share: float = Field(
        0.01,
        gt=0,
        le=1,
        description="Largest share of one minute's capacity (tokens) one canary run may cost.",
    )
    max_waiting: float = Field(
        0.5,
        ge=0,
        description="Saturated above this many waiting requests per engine: no canary then.",
    )
    after_deadline_s: float = Field(
        900.0,
        gt=0,
        description="How long after a switch the after-run may wait (saturated server, not "
        "answering) before the check is skipped, seconds.",
    )
    baseline_max_age_s: float = Field(
        6 * 3600.0, gt=0, description="Refresh the running setup's canary after this, seconds."
    )
    noise_rate: float = Field(
        0.05, ge=0, lt=1, description="Tolerated share of outputs diverging early (kernels)."
    )
    alpha: float = Field(0.05, gt=0, lt=1, description="A p-value below this is 'worse'.")


class SwitchSettings(Group):
    """When a better setup is worth a switch: the gain, how sure, and for how long (hysteresis)."""

    min_gain: float = Field(0.05, ge=0, description="Smallest predicted gain (fraction) to act on.")
    min_confidence: float = Field(
        0.6, ge=0, le=1, description="Share of acceptance scenarios (low/point/high) agreeing."
    )
    dwell_s: float = Field(900, ge=0, description="How long recent load must favour a change.")


class ObjectiveSettings(Group):
    """What the candidates are scored on."""

    kind: Literal["throughput", "latency_slo"] = Field(
        "throughput",
        description="throughput: expected tokens/s over the batch distribution; latency_slo: "
        "the same, among setups meeting latency_slo_s at latency_percentile of the batch.",
    )
    latency_slo_s: float | None = Field(
        None, gt=0, description="Time per output token limit (latency_slo), seconds."
    )
    latency_percentile: float = Field(
        0.9, gt=0, lt=1, description="The batch quantile at which latency_slo_s must hold."
    )


class CandidateSettings(Group):
    """The setups the policy may propose (the engine's capabilities narrow them further)."""

    spec_tokens: tuple[int, ...] = Field((1, 2, 3, 4), description="Draft lengths allowed.")
    replay_windows: tuple[int, ...] = Field((8, 16, 32), description="Replay windows allowed.")
    use_schedule: bool = Field(True, description="Use per-batch K schedules when the engine can.")


class RestartSettings(Group):
    """What one restart costs, whether a gain pays for it, and how many the target may take."""

    downtime_s: float = Field(
        180, ge=0, description="Downtime of one restart, seconds (default until measured)."
    )
    share: float = Field(
        1.0, gt=0, le=1, description="Share of replicas restarting at once (rollout strategy)."
    )
    margin: float = Field(
        2.0, ge=1, description="The gain over horizon_s must beat the restart's cost x this."
    )
    horizon_s: float = Field(
        4 * HOUR, gt=0, description="How long a new setup is expected to stay: gain x horizon."
    )
    cooldown_s: float = Field(1800, ge=0, description="Quiet time after any change, seconds.")
    max_per_hour: int = Field(
        2,
        ge=0,
        description="Restarts allowed in any hour, reverts included: a change is made only "
        "with room left for its own revert.",
    )
    max_per_day: int = Field(
        6,
        ge=0,
        description="Restarts allowed in any 24 hours, reverts included: a change is made "
        "only with room left for its own revert.",
    )


class EstimateSettings(Group):
    """How long what was measured counts: the decayed estimates the policy decides on."""

    acceptance_half_life_s: float = Field(
        1800, gt=0, description="Half-life of pooled acceptance counts while speculation runs."
    )
    acceptance_memory_half_life_s: float = Field(
        6 * HOUR, gt=0, description="How fast remembered acceptance loses confidence when off."
    )
    batch_half_life_s: float = Field(
        900, gt=0, description="Half-life of the batch history the expected gain is taken over."
    )
    min_batch_weight: float = Field(
        5, ge=0, description="Batch samples (decayed) needed before deciding."
    )


class CalibrationSettings(Group):
    """How the model is corrected by what was measured (per kernel class and batch band)."""

    half_life_s: float = Field(
        6 * HOUR, gt=0, description="Half-life of each window's measured/predicted error."
    )
    bounds: tuple[float, float] = Field(
        (0.5, 2.0), description="Smallest and largest correction factor ([1, 1] pins the model)."
    )


class VerificationSettings(Group):
    """How a change is judged once it runs."""

    settle_s: float = Field(300, ge=0, description="Warm-up after a change before judging it.")
    regression_tolerance: float = Field(
        0.10,
        ge=0,
        lt=1,
        description="A predicted switch is reverted when it measures this much below the "
        "setup it replaced.",
    )


class QuarantineSettings(Group):
    """What a failed change teaches, and for how long."""

    setup_s: float = Field(
        6 * HOUR, ge=0, description="A reverted setup is not retried for this long."
    )
    capability_s: float = Field(
        24 * HOUR,
        ge=0,
        description="How long a capability the engine refused (it did not come up with a "
        "setup needing it) is taken as missing.",
    )


class ExplorationSettings(Group):
    """Trying a setup family never measured at this load (docs/policy.md, "Exploration")."""

    enabled: bool = Field(
        True,
        description="Try a family never measured at this load when its uncertainty says it "
        "could win by switch.min_gain (once per family and batch band per quarantine.setup_s).",
    )
    tolerance: float = Field(
        0.02,
        ge=0,
        lt=1,
        description="An exploration is reverted when it measures this much below the setup it "
        "replaced (a predicted switch gets verification.regression_tolerance).",
    )
    reserve: int = Field(
        2,
        ge=0,
        description="Restarts of the day's budget (restart.max_per_day) explorations leave "
        "for predicted changes: one is made only when this many remain after it and its revert.",
    )


class PolicySettings(Group):
    """How cautious the policy is, one group per concern. Durations are seconds."""

    switch: SwitchSettings = Field(default_factory=SwitchSettings)
    objective: ObjectiveSettings = Field(default_factory=ObjectiveSettings)
    candidates: CandidateSettings = Field(default_factory=CandidateSettings)
    restart: RestartSettings = Field(default_factory=RestartSettings)
    estimates: EstimateSettings = Field(default_factory=EstimateSettings)
    calibration: CalibrationSettings = Field(default_factory=CalibrationSettings)
    verification: VerificationSettings = Field(default_factory=VerificationSettings)
    quarantine: QuarantineSettings = Field(default_factory=QuarantineSettings)
    exploration: ExplorationSettings = Field(default_factory=ExplorationSettings)


class SourceSettings(Group):
    """Where metrics come from."""

    kind: Literal["vllm", "prometheus"] = Field(
        "vllm", description="vllm: scrape /metrics directly; prometheus: query a server."
    )
    urls: list[str] = Field(
        default_factory=lambda: ["http://127.0.0.1:8000/metrics"],
        description="vLLM /metrics URLs (one per replica), or one Prometheus URL.",
    )
    selector: str = Field("", description='Prometheus label selector, e.g. namespace="llm".')
    scrape_interval_s: float = Field(
        15.0, gt=0, description="Prometheus's scrape interval (the range-query step), seconds."
    )
    timeout_s: float = Field(5.0, gt=0, description="HTTP timeout per request, seconds.")
    max_bytes: int = Field(16 * 2**20, gt=0, description="Largest /metrics body accepted.")


class ModelSettings(Group):
    """What is served, on what."""

    id: str = Field(
        "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4",
        description="Registry id, config.json path or model directory.",
    )
    gpu: str = Field("H200", description="Datasheet GPU, used when no profile file is given.")
    profile: Path | None = Field(None, description="HardwareProfile JSON from kernels_probe.")
    tensor_parallel: int = Field(1, ge=1, description="GPUs per replica.")
    context_tokens: float = Field(4096, ge=0, description="Mean context, until measured.")
    drafter: DrafterKind | None = Field(
        None,
        description="The deployed drafter's kind (mtp, eagle, ngram) when the model's "
        "config does not say: decides what a draft pass costs.",
    )
    weights: str | None = Field(
        None,
        description="Stored weight format overriding what the checkpoint's files say (bf16, "
        "fp16, fp32, fp8, int8, nvfp4, mxfp4, int4).",
    )
    ssm_state_dtype: str | None = Field(
        None,
        description="The SSM state dtype vLLM runs (its --mamba-ssm-cache-dtype); default: the "
        "target's live flag, else as vLLM resolves it from the model's config.",
    )


class EngineSettings(Group):
    """What the running vLLM build accepts (VLLM.md) and how its flags are spelled."""

    capabilities: Annotated[EngineCapabilities, NoDecode] = Field(
        default=UPSTREAM,
        description="What the build accepts: a preset (upstream: replay or speculation, not "
        "both; replay-spec: both), or fields changed from the preset `name` names.",
    )
    flags: FlagNames = Field(default_factory=FlagNames, description="Managed flag names.")

    @field_validator("capabilities", mode="before")
    @classmethod
    def _from_preset(cls, value: Any) -> Any:
        """'replay-spec' -> that preset; {name: upstream, spec_schedule: false} -> the preset
        `name` names (default upstream) with those fields changed."""
        if isinstance(value, str):
            value = {"name": value}
        if isinstance(value, Mapping):
            name = str(value.get("name", UPSTREAM.name))
            if name not in PRESETS:
                raise ValueError(f"unknown engine preset {name!r}; known: {', '.join(PRESETS)}")
            return {**PRESETS[name].model_dump(), **value}
        return value


class TargetSettings(Group):
    """What gets patched."""

    uri: str = Field(
        "",
        description="k8s://NS/deployment/NAME[/C], file://PATH or exec://... "
        "Empty in a pod: found from the pod's owner chain.",
    )
    kube_server: str | None = Field(None, description="API server URL; default in-cluster.")
    lease_name: str = Field("", description="Lease for leader election; default derived.")
    lease_duration_s: float = Field(15.0, gt=0, description="Lease validity, seconds.")
    identity: str = Field("", description="This instance's name; default the pod name.")
    allow_surge: bool = Field(False, description="Patch even with maxSurge >= 1.")
    paused: bool = Field(False, description="Stop all patching (as the paused annotation does).")
    rollout_deadline_s: float = Field(
        900.0, gt=0, description="A rollout not done by then is stuck: revert, seconds."
    )
    allow_low_precision_replay: bool = Field(
        False,
        description="Write replay setups even when the SSM state is not fp32 (it drifts under "
        "replay); else the actuator refuses them and the policy does not propose them.",
    )


class LoopSettings(Group):
    """Timing of the observe -> decide -> act -> verify loop."""

    interval_s: float = Field(15.0, gt=0, description="One loop step, seconds.")
    window_s: float = Field(60.0, gt=0, description="Evaluation window, seconds.")

    @property
    def stalled_after_s(self) -> float:
        """/healthz fails when no step finished for this long: five missed steps, plus slack
        for one slow step (a restart through the exec target blocks its step)."""
        return 5 * self.interval_s + 30

    @property
    def stale_after_s(self) -> float:
        """/readyz fails when the newest usable window is older than three steps past one
        window."""
        return 3 * self.interval_s + self.window_s

    @property
    def state_save_interval_s(self) -> float:
        """How often what was learned is written to the target between changes (at most once a
        minute: each write is an API call and, on Kubernetes, a new resourceVersion)."""
        return max(60.0, self.interval_s)


class ExporterSettings(Group):
    """Where the sidecar answers."""

    host: str = Field("0.0.0.0", description="Address of /metrics, /healthz, /readyz, /decision.")
    port: int = Field(9400, ge=0, le=65535, description="Port (0: any free port).")


class LogSettings(Group):
    """How it logs: one line per decision, with its sentence."""

    format: Literal["auto", "json", "text"] = Field(
        "auto", description="auto: JSON when stderr is not a terminal (containers)."
    )
    level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Lowest level logged."
    )


class Settings(BaseSettings):
    """Everything `autotuner run` reads."""

    model_config = SettingsConfigDict(
        env_prefix="AUTOTUNER_", env_nested_delimiter="__", extra="forbid"
    )

    mode: Literal["advise", "act"] = Field(
        "advise", description="advise: compute, export, explain, emit Events; act: also patch."
    )
    source: SourceSettings = Field(default_factory=SourceSettings)
    model: ModelSettings = Field(default_factory=ModelSettings)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    quality: QualitySettings = Field(default_factory=QualitySettings)
    limits: ObservationLimits = Field(default_factory=ObservationLimits)
    target: TargetSettings = Field(default_factory=TargetSettings)
    loop: LoopSettings = Field(default_factory=LoopSettings)
    exporter: ExporterSettings = Field(default_factory=ExporterSettings)
    log: LogSettings = Field(default_factory=LogSettings)


# Keys that moved when the groups were split by concern: an old key is refused (extra="forbid")
# with its new place named, rather than silently carried over.
_POLICY_GROUPS = {
    "switch": ("min_gain", "min_confidence", "dwell_s"),
    "candidates": ("spec_tokens", "replay_windows", "use_schedule"),
    "objective": ("latency_slo_s", "latency_percentile"),
    "estimates": (
        "acceptance_half_life_s",
        "acceptance_memory_half_life_s",
        "batch_half_life_s",
        "min_batch_weight",
    ),
    "restart": ("horizon_s", "cooldown_s"),
}
MOVED: dict[str, str] = {
    **{f"policy.{k}": f"policy.{g}.{k}" for g, keys in _POLICY_GROUPS.items() for k in keys},
    "policy.objective": "policy.objective.kind",
    "policy.restart_downtime_s": "policy.restart.downtime_s",
    "policy.restart_share": "policy.restart.share",
    "policy.restart_margin": "policy.restart.margin",
    "policy.max_changes_per_hour": "policy.restart.max_per_hour",
    "policy.max_changes_per_day": "policy.restart.max_per_day",
    "policy.calibration_half_life_s": "policy.calibration.half_life_s",
    "policy.calibration_bounds": "policy.calibration.bounds",
    "policy.verify_settle_s": "policy.verification.settle_s",
    "policy.regression_tolerance": "policy.verification.regression_tolerance",
    "policy.quarantine_s": "policy.quarantine.setup_s",
    "policy.refusal_s": "policy.quarantine.capability_s",
    "policy.explore": "policy.exploration.enabled",
    "policy.exploration_tolerance": "policy.exploration.tolerance",
    "policy.allow_low_precision_replay": "target.allow_low_precision_replay",
    "engine.spec_schedule": "engine.capabilities.spec_schedule",
    "engine.max_spec_tokens": "engine.capabilities.max_spec_tokens",
}


def _problem(error: Mapping[str, Any], sources: Mapping[str, str]) -> str:
    """One validation error as `field: what is wrong`; a moved key says where it went (and
    which layer still uses it)."""
    path = ".".join(str(p) for p in error["loc"])
    if error["type"] in ("extra_forbidden", "model_type") and path in MOVED:
        where = f" (set by {sources[path]})" if path in sources else ""
        return (
            f"{path}{where}: moved to {MOVED[path]} when the settings were grouped by concern "
            "(`autotuner config show` lists them all)"
        )
    return f"{path}: {error['msg']}"


def _durations(tree: Any) -> Any:
    """'15m' -> 900.0 for every *_s field, in any layer."""
    if isinstance(tree, dict):
        return {
            k: (parse_duration(v) if k.endswith("_s") and isinstance(v, str) else _durations(v))
            for k, v in tree.items()
        }
    return tree


def _presets(tree: dict[str, Any]) -> dict[str, Any]:
    """`engine.capabilities: replay-spec` in any layer is `{name: replay-spec}`, so a later
    layer's `engine.capabilities.spec_schedule` changes that preset instead of replacing it."""
    engine = tree.get("engine")
    if isinstance(engine, Mapping) and isinstance(engine.get("capabilities"), str):
        return {**tree, "engine": {**engine, "capabilities": {"name": engine["capabilities"]}}}
    return tree


def _merge(
    base: dict[str, Any],
    layer: Mapping[str, Any],
    name: str,
    sources: dict[str, str],
    prefix: str = "",
) -> dict[str, Any]:
    merged = dict(base)
    for key, value in layer.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict | type(None)):
            merged[key] = _merge(merged.get(key) or {}, value, name, sources, f"{path}.")
        else:
            merged[key] = value
            sources[path] = name
    return merged


def cli_overrides(pairs: list[str]) -> dict[str, Any]:
    """`--set policy.switch.dwell_s=10m --set source.urls=[a,b]` -> a nested dict (YAML values)."""
    tree: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise InputError(f"--set {pair!r}: use group.field=value")
        node = tree
        *parents, leaf = key.strip().split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(text) if text else ""
    return tree


def load_settings(
    file: Path | None = None, cli: Mapping[str, Any] | None = None
) -> tuple[Settings, dict[str, str]]:
    """The effective settings and, per dotted field, the layer that set it."""
    sources: dict[str, str] = {}
    layers: list[tuple[str, Mapping[str, Any]]] = []
    if file is not None:
        try:
            loaded = yaml.safe_load(Path(file).read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise InputError(f"settings file {file}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise InputError(f"settings file {file}: not valid YAML ({exc})") from None
        if not isinstance(loaded, dict):
            raise InputError(f"settings file {file}: expected a mapping at the top")
        layers.append((f"file {file}", loaded))
    try:
        layers.append(("env", EnvSettingsSource(Settings)()))
    except SettingsError as exc:
        raise InputError(f"environment AUTOTUNER_*: {exc}") from None
    layers.append(("cli", cli or {}))
    merged: dict[str, Any] = {}
    for name, layer in layers:
        merged = _merge(merged, _presets(_durations(dict(layer))), name, sources)
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as exc:
        problems = "; ".join(_problem(e, sources) for e in exc.errors())
        raise InputError(f"invalid settings: {problems}") from None
    return settings, sources


def describe(settings: Settings, sources: Mapping[str, str]) -> list[tuple[str, str, str, str]]:
    """(field, value, source, description) for every leaf, for `config show`. The fields of
    engine.capabilities that no layer set come from the preset its `name` names: their source
    is that name's layer."""
    rows: list[tuple[str, str, str, str]] = []

    def walk(model: BaseModel, prefix: str, unset: str) -> None:
        if isinstance(model, EngineCapabilities) and f"{prefix}name" in sources:
            unset = f"{sources[prefix + 'name']} (preset {model.name})"
        for name, info in type(model).model_fields.items():
            value = getattr(model, name)
            path = f"{prefix}{name}"
            if isinstance(value, BaseModel):
                walk(value, f"{path}.", unset)
                continue
            shown = repr(value) if isinstance(value, str) else str(value)
            rows.append((path, shown, sources.get(path, unset), info.description or ""))

    walk(settings, "", "default")
    return rows
