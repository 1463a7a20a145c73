"""The SpecTuner custom resource's spec, and the settings one SpecTuner runs with.

The spec names the target and the few per-target inputs; `policy` (and the other overrides)
are the settings tree's own groups, validated by the same pydantic models as the settings
file, so a SpecTuner accepts exactly what `autotuner run --config` accepts there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotuner.actuators.kinds import BY_KIND
from autotuner.errors import InputError
from autotuner.settings import Mode, Settings, load_settings

GROUP = "spec-autotuner.io"
VERSION = "v1alpha1"
PLURAL = "spectuners"
KIND = "SpecTuner"
# Settings groups a SpecTuner may override beside its named fields: everything but the
# process-wide ones (the exporter, the logs, the Kubernetes connection are the controller's).
OVERRIDABLE = ("policy", "quality", "limits", "loop")


class TargetRef(BaseModel):
    """The serving object, as `kubectl get KIND NAME` in the SpecTuner's namespace names it."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    kind: str = Field(description="Deployment, StatefulSet, LeaderWorkerSet, ... (BY_KIND).")
    api_version: str | None = Field(None, alias="apiVersion")
    name: str = Field(min_length=1)
    container: str | None = None  # the engine container (Deployment, StatefulSet, LWS)
    component: str | None = None  # the DynamoGraphDeployment service

    def uri(self, namespace: str) -> str:
        """The `k8s://` target URI `autotuner run` would be given for this object."""
        known = BY_KIND.get(self.kind)
        if known is None:
            raise InputError(
                f"unknown targetRef.kind {self.kind!r}: use one of {', '.join(sorted(BY_KIND))}"
            )
        word = known.word
        if self.api_version:
            group, _, version = self.api_version.rpartition("/")
            if group != known.group:
                raise InputError(
                    f"targetRef.apiVersion {self.api_version!r}: {self.kind} is in group "
                    f"{known.group or 'core'}"
                )
            word = f"{word}.{version}"
        if self.container and self.component:
            raise InputError("targetRef: name a container or a component, not both")
        part = self.container or self.component
        return f"k8s://{namespace}/{word}/{self.name}" + (f"/{part}" if part else "")


class SpecTunerSpec(BaseModel):
    """spec of a SpecTuner (deploy/crd/spectuner.yaml is its OpenAPI form)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    target_ref: TargetRef = Field(alias="targetRef")
    mode: Mode = Mode.ADVISE
    paused: bool = False
    model: str | None = None  # registry id or config.json path; default the settings file's
    gpu: str | None = None
    engine: str | None = None  # vllm, sglang or auto
    source: dict[str, Any] = Field(default_factory=dict)  # the settings' source group
    overrides: dict[str, Any] = Field(default_factory=dict)  # OVERRIDABLE groups by name
    policy: dict[str, Any] = Field(default_factory=dict)

    def layer(self, namespace: str) -> dict[str, Any]:
        """This spec as one layer of the settings tree (above the controller's file)."""
        unknown = set(self.overrides) - set(OVERRIDABLE)
        if unknown:
            raise InputError(
                f"overrides: {', '.join(sorted(unknown))} cannot be set per SpecTuner; "
                f"only {', '.join(OVERRIDABLE)}"
            )
        tree: dict[str, Any] = {**self.overrides, "mode": self.mode.value}
        tree["target"] = {"uri": self.target_ref.uri(namespace)}
        if self.paused:  # false leaves the settings file's own value
            tree["target"]["paused"] = True
        model = {"id": self.model, "gpu": self.gpu}
        tree["model"] = {k: v for k, v in model.items() if v is not None}
        if self.engine is not None:
            tree["engine"] = {"kind": self.engine}
        if self.source:
            tree["source"] = self.source
        if self.policy:
            tree["policy"] = self.policy
        return tree


def parse_spec(raw: Any) -> SpecTunerSpec:
    """A SpecTuner's spec as stored; InputError naming the fields that are wrong."""
    try:
        return SpecTunerSpec.model_validate(raw or {})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise InputError(f"invalid spec: {problems}") from None


def settings_for(spec: SpecTunerSpec, namespace: str, base: Path | None = None) -> Settings:
    """The settings one SpecTuner's loop runs with: defaults < the controller's settings file
    < the environment < this spec, through `load_settings` as `autotuner run` loads them."""
    settings, _ = load_settings(base, cli=spec.layer(namespace))
    return settings
