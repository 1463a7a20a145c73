"""One typed settings tree: defaults < YAML file < environment (AUTOTUNER_*) < command line.

Groups follow the data flow (source, model, engine, policy, quality, target, loop, exporter,
log); every field carries its unit and why in its description, and `autotuner config show`
prints the effective value of each with the layer it came from. Durations are seconds and accept
'500ms', '30s', '15m', '1h' in any layer. Invalid settings fail at start, naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict

from autotuner.actuators.flags import FlagNames
from autotuner.canary.guard import QualitySettings
from autotuner.core.model import DrafterKind
from autotuner.core.observation import ObservationLimits
from autotuner.core.policy import PolicySettings
from autotuner.durations import parse_duration
from autotuner.errors import InputError


class SourceSettings(BaseModel):
    """Where metrics come from."""

    model_config = ConfigDict(extra="forbid")

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


class ModelSettings(BaseModel):
    """What is served, on what."""

    model_config = ConfigDict(extra="forbid")

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


class EngineSettings(BaseModel):
    """What the running vLLM build accepts (VLLM.md) and how its flags are spelled."""

    model_config = ConfigDict(extra="forbid")

    capabilities: Literal["upstream", "replay-spec"] = Field(
        "upstream", description="upstream: replay or speculation, not both."
    )
    spec_schedule: bool = Field(
        True, description="The build takes num_speculative_tokens_per_batch_size."
    )
    max_spec_tokens: int = Field(8, ge=0, le=16, description="The drafter's largest K.")
    flags: FlagNames = Field(default_factory=FlagNames, description="Managed flag names.")


class TargetSettings(BaseModel):
    """What gets patched."""

    model_config = ConfigDict(extra="forbid")

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


class LoopSettings(BaseModel):
    """Timing of the observe -> decide -> act -> verify loop."""

    model_config = ConfigDict(extra="forbid")

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


class ExporterSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = Field("0.0.0.0", description="Address of /metrics, /healthz, /readyz, /decision.")
    port: int = Field(9400, ge=0, le=65535, description="Port (0: any free port).")


class LogSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["auto", "json", "text"] = Field(
        "auto", description="auto: JSON when stderr is not a terminal (containers)."
    )
    level: Literal["debug", "info", "warning", "error"] = "info"


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


def _durations(tree: Any) -> Any:
    """'15m' -> 900.0 for every *_s field, in any layer."""
    if isinstance(tree, dict):
        return {
            k: (parse_duration(v) if k.endswith("_s") and isinstance(v, str) else _durations(v))
            for k, v in tree.items()
        }
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
    """`--set policy.dwell_s=10m --set source.urls=[a,b]` -> a nested dict (YAML values)."""
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
    layers.append(("env", EnvSettingsSource(Settings)()))
    layers.append(("cli", cli or {}))
    merged: dict[str, Any] = {}
    for name, layer in layers:
        merged = _merge(merged, _durations(dict(layer)), name, sources)
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise InputError(f"invalid settings: {problems}") from None
    return settings, sources


def describe(settings: Settings, sources: Mapping[str, str]) -> list[tuple[str, str, str, str]]:
    """(field, value, source, description) for every leaf, for `config show`."""
    rows: list[tuple[str, str, str, str]] = []

    def walk(model: BaseModel, prefix: str) -> None:
        for name, info in type(model).model_fields.items():
            value = getattr(model, name)
            path = f"{prefix}{name}"
            if isinstance(value, BaseModel):
                walk(value, f"{path}.")
                continue
            rows.append(
                (
                    path,
                    repr(value) if isinstance(value, str) else str(value),
                    sources.get(path, "default"),
                    info.description or "",
                )
            )

    walk(settings, "")
    return rows
