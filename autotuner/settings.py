"""One typed settings tree: defaults < YAML file < environment (AUTOTUNER_*) < command line.

Groups follow the data flow (source, model, engine, policy, quality, target, loop, exporter,
log), and the policy's own are split by concern (switch, objective, candidates, restart,
estimates, calibration, verification, quarantine, exploration), as kopf's settings are; every
field carries its unit and why in its description, and `autotuner config show` prints the
effective value of each with the layer it came from. Durations are seconds and accept '500ms',
'30s', '15m', '1h' in any layer. Invalid settings fail at start, naming the field; an unknown key
is refused by its dotted name. This module imports only the core's and the engines' plain
values, never I/O code.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from autotuner.core.decide.settings import PolicySettings
from autotuner.core.engine.builds import BuildInForce
from autotuner.core.engine.capabilities import BUILD, EngineCapabilities
from autotuner.core.group import Group
from autotuner.core.model.spec import DrafterKind
from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.vocabulary import Word
from autotuner.durations import parse_duration
from autotuner.engines.build_table import AUTO, CPU_SUFFIX, version_tuple
from autotuner.engines.dialect import Dialect
from autotuner.engines.kinds import ENGINES, Engine, EngineKind, engine
from autotuner.engines.vllm.flags import FlagNames
from autotuner.errors import InputError

# A Prometheus label name (the data model's rule).
LABEL_NAME = r"^[a-zA-Z_][a-zA-Z0-9_]*$"


class Mode(Word):
    """What the sidecar may do: advise computes, exports and explains; act also patches."""

    ADVISE = "advise"
    ACT = "act"


class SourceKind(Word):
    """Where metrics come from: the engine's own /metrics (vLLM's, or SGLang's), or a
    Prometheus server."""

    VLLM = "vllm"
    SGLANG = "sglang"
    PROMETHEUS = "prometheus"


class LogFormat(Word):
    AUTO = "auto"
    JSON = "json"
    TEXT = "text"


class LogLevel(Word):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


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
    timeout_s: float = Field(
        30.0, gt=0, description="Deadline of each canary completion (the whole answer), seconds."
    )
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


class SourceSettings(Group):
    """Where metrics come from."""

    kind: SourceKind = Field(
        SourceKind.VLLM,
        description="vllm or sglang: scrape the engine's /metrics directly; prometheus: "
        "query a server.",
    )
    urls: list[str] = Field(
        default_factory=lambda: ["http://127.0.0.1:8000/metrics"],
        description="vLLM /metrics URLs (one per replica), or one Prometheus URL.",
    )
    selector: str = Field("", description='Prometheus label selector, e.g. namespace="llm".')
    pod_label: str = Field(
        "pod",
        pattern=LABEL_NAME,
        description="The Prometheus label that holds a series' pod name (kube-prometheus "
        "PodMonitors and ServiceMonitors add `pod`): while a LeaderWorkerSet canary is held, "
        "the queries keep its pods' series by it.",
    )

    @property
    def direct(self) -> bool:
        """The engine's own /metrics are scraped (not a Prometheus server)."""
        return self.kind is not SourceKind.PROMETHEUS

    scrape_interval_s: float = Field(
        15.0, gt=0, description="Prometheus's scrape interval (the range-query step), seconds."
    )
    timeout_s: float = Field(
        5.0, gt=0, description="Deadline of each scrape or Prometheus query (the whole answer), s."
    )
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
    """Which engine serves, what its running build accepts (VLLM.md, docs/engine-rules.md) and
    how its flags are spelled."""

    kind: EngineKind = Field(
        EngineKind.VLLM,
        description="The serving engine: vllm, sglang, or auto (read from the first source "
        "URL: the prefix of its /metrics series, else GET /server_info or /version).",
    )
    capabilities: Annotated[EngineCapabilities, NoDecode] = Field(
        default=ENGINES[EngineKind.VLLM].follow_build,
        description="What the build accepts: `build` (the capability table's row for the "
        "build the engine runs), or a preset that overrides the table (vLLM's upstream: "
        "replay or speculation, not both; gdn-replay: with Gated DeltaNet kernels; "
        "replay-spec: both), or fields changed from the preset `name` names.",
    )
    build: str = Field(
        AUTO,
        description="The engine's version (e.g. vLLM 0.33.0, 0.32.0-cpu; SGLang 0.5.23), over "
        "what is read; `auto`: the image tag, else GET /version (vLLM) or GET /server_info "
        "(SGLang), else the table's default version.",
    )
    flags: FlagNames = Field(default_factory=FlagNames, description="vLLM's managed flag names.")

    @property
    def engine(self) -> Engine:
        """The engine's package (InputError while `kind` is auto: detect it first)."""
        return engine(self.kind)

    @property
    def dialect(self) -> Dialect:
        """The engine's command line, read and written (vLLM's with these flag names)."""
        return self.engine.dialect(self.flags)

    def settled(self, kind: EngineKind) -> EngineSettings:
        """These settings for a detected engine: its own presets where none was set."""
        given = {name: getattr(self, name) for name in self.model_fields_set - {"kind"}}
        if isinstance(given.get("capabilities"), EngineCapabilities):
            given["capabilities"] = given["capabilities"].model_dump()
        return EngineSettings.model_validate({**given, "kind": kind})

    @model_validator(mode="after")
    def _capabilities_name_an_engine(self) -> EngineSettings:
        """A preset is one engine's: with `kind: auto` it would be read as vLLM's before the
        engine is known."""
        if self.kind is EngineKind.AUTO and "capabilities" in self.model_fields_set:
            raise ValueError(
                "engine.capabilities names one engine's preset: set engine.kind (vllm or sglang)"
            )
        return self

    @field_validator("build")
    @classmethod
    def _version(cls, value: str) -> str:
        if value != AUTO and version_tuple(value.removesuffix(CPU_SUFFIX)) is None:
            raise ValueError(f"not a version or 'auto': {value!r} (e.g. 0.33.0, 0.5.23)")
        return value

    @field_validator("capabilities", mode="before")
    @classmethod
    def _from_preset(cls, value: Any, info: ValidationInfo) -> Any:
        """'replay-spec' -> that preset; {name: upstream, spec_schedule: false} -> the preset
        `name` names (default upstream) with those fields changed, among the engine's own."""
        kind = info.data.get("kind", EngineKind.VLLM)
        presets = ENGINES[EngineKind.VLLM if kind is EngineKind.AUTO else kind].presets
        if isinstance(value, str):
            value = {"name": value}
        if isinstance(value, Mapping):
            name = str(value.get("name", BUILD))
            if name not in presets:
                raise ValueError(
                    f"unknown engine preset {name!r} for {kind.value}; known: {', '.join(presets)}"
                )
            return {**presets[name].model_dump(), **value}
        return value

    @model_validator(mode="after")
    def _own_presets(self) -> EngineSettings:
        """SGLang without capabilities set follows SGLang's table, not vLLM's default."""
        if self.kind is EngineKind.SGLANG and "capabilities" not in self.model_fields_set:
            follow = ENGINES[EngineKind.SGLANG].follow_build
            object.__setattr__(self, "capabilities", follow)
        return self


class TargetSettings(Group):
    """What gets patched."""

    uri: str = Field(
        "",
        description="k8s://NS/KIND[.VERSION]/NAME[/CONTAINER|COMPONENT] (KIND: deployment, "
        "statefulset, leaderworkerset, dynamographdeployment, llminferenceservice, "
        "inferenceservice), file://PATH or exec://... Empty in a pod: found from the pod's "
        "owner chain.",
    )
    kube_server: str | None = Field(None, description="API server URL; default in-cluster.")
    lease_name: str = Field("", description="Lease for leader election; default derived.")
    lease_duration_s: float = Field(15.0, gt=0, description="Lease validity, seconds.")
    identity: str = Field("", description="This instance's name; default the pod name.")
    allow_surge: bool = Field(
        False,
        description="Patch even when the rollout starts new GPU pods before old ones stop "
        "(maxSurge >= 1, Dynamo's 25% default, a serverless InferenceService).",
    )
    write_managed: bool = Field(
        False,
        description="Patch even an object Helm or a GitOps tool re-applies (default: advise, "
        "since the next sync reverts a direct patch).",
    )
    canary: bool = Field(
        False,
        description="LeaderWorkerSet: roll only the last group first (partition), and the rest "
        "once the switch is verified.",
    )
    paused: bool = Field(False, description="Stop all patching (as the paused annotation does).")
    rollout_deadline_s: float = Field(
        900.0, gt=0, description="A rollout not done by then is stuck: revert, seconds."
    )
    request_timeout_s: float = Field(
        10.0, gt=0, description="Deadline of each Kubernetes request, seconds."
    )
    call_deadline_s: float = Field(
        30.0,
        gt=0,
        description="Deadline of one Kubernetes call (a read, an apply, a state save), its "
        "retries of 429, 5xx and conflicts included, seconds.",
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

    format: LogFormat = Field(
        LogFormat.AUTO, description="auto: JSON when stderr is not a terminal (containers)."
    )
    level: LogLevel = Field(LogLevel.INFO, description="Lowest level logged.")


class Settings(BaseSettings):
    """Everything `autotuner run` reads."""

    model_config = SettingsConfigDict(
        env_prefix="AUTOTUNER_", env_nested_delimiter="__", extra="forbid"
    )

    mode: Mode = Field(
        Mode.ADVISE, description="advise: compute, export, explain, emit Events; act: also patch."
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

    @model_validator(mode="after")
    def _one_engine(self) -> Settings:
        """source.kind sglang and engine.kind sglang say the same engine: either one alone
        sets the other; vLLM's on one side and SGLang's on the other is refused."""
        source, engine = self.source, self.engine
        scraped = {SourceKind.VLLM: EngineKind.VLLM, SourceKind.SGLANG: EngineKind.SGLANG}
        said = scraped.get(source.kind)
        if said is None or said is engine.kind:
            return self
        engine_set = "kind" in engine.model_fields_set and engine.kind is not EngineKind.AUTO
        source_set = "kind" in source.model_fields_set
        if engine_set and source_set:
            raise ValueError(
                f"source.kind {source.kind.value} scrapes {said.value}'s /metrics but "
                f"engine.kind is {engine.kind.value}"
            )
        if engine_set:
            self.source = source.model_copy(update={"kind": SourceKind(engine.kind.value)})
        elif source_set or engine.kind is not EngineKind.AUTO:
            self.engine = engine.settled(said)
        return self

    def detected(self, kind: EngineKind) -> Settings:
        """These settings for the engine `engine.kind: auto` found."""
        source = self.source
        if source.direct:
            source = source.model_copy(update={"kind": SourceKind(kind.value)})
        return self.model_copy(update={"engine": self.engine.settled(kind), "source": source})


def _problem(error: Mapping[str, Any]) -> str:
    """One validation error as `field: what is wrong` (an unknown key: its dotted name)."""
    return f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"


def _durations(tree: Any, path: str = "") -> Any:
    """'15m' -> 900.0 for every *_s field, in any layer; '0s' too: each field's own bound
    (pydantic's ge/gt) decides whether zero is allowed, and its error names the field, as an
    unreadable duration's does."""
    if isinstance(tree, dict):
        return {k: _duration(v, f"{path}{k}") for k, v in tree.items()}
    return tree


def _duration(value: Any, field: str) -> Any:
    if not (field.endswith("_s") and isinstance(value, str)):
        return _durations(value, f"{field}.")
    try:
        return parse_duration(value, allow_zero=True)
    except InputError as exc:
        raise InputError(f"{field}: {exc}") from None


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


def laid_over(tree: Mapping[str, Any], pairs: list[str]) -> dict[str, Any]:
    """`tree` (settings as plain data) with `--set` pairs laid over it as the tuner lays its
    command line over a file: durations read, a group named keeps its other fields. Nothing is
    validated here; the caller's model does that."""
    return _merge(dict(tree), _presets(_durations(cli_overrides(pairs))), "cli", {})


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
        problems = "; ".join(_problem(e) for e in exc.errors())
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
            if isinstance(value, BuildInForce):
                rows.append((path, value.describe(), "engine", info.description or ""))
                continue
            if isinstance(value, BaseModel):
                walk(value, f"{path}.", unset)
                continue
            rows.append((path, _shown(value), sources.get(path, unset), info.description or ""))

    walk(settings, "", "default")
    return rows


def _shown(value: Any) -> str:
    """A leaf as `config show` prints it: enums by their value, strings quoted."""
    if isinstance(value, Enum):
        value = value.value
    elif isinstance(value, tuple):
        value = tuple(v.value if isinstance(v, Enum) else v for v in value)
    return repr(value) if isinstance(value, str) else str(value)
