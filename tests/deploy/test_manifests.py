"""deploy/: every overlay builds with kubectl kustomize and validates against the Kubernetes
schemas; RBAC grants nothing beyond what the sidecar needs; the shipped settings load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotuner.settings import load_settings
from tests.deploy.building import COMMON_RULES, DEPLOY, Manifest, rules, target_rules, validate
from tests.deploy.building import build as build_directory

OVERLAYS = ("advise", "act", "standalone")


def build(overlay: str) -> list[Manifest]:
    return build_directory(DEPLOY / "overlays" / overlay)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_builds_and_validates(overlay: str) -> None:
    objects = build(overlay)
    kinds = {o["kind"] for o in objects}
    assert {"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment"} <= kinds
    validate(objects)
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}
    assert all(o["metadata"].get("namespace", "llm") == "llm" for o in objects)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rbac_is_least_privilege(overlay: str) -> None:
    assert rules(build(overlay)) == target_rules("apps", "deployments", "vllm") | COMMON_RULES


def containers(objects: list[dict[str, Any]], name: str) -> dict[str, dict[str, Any]]:
    deployment = next(
        o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == name
    )
    spec = deployment["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec.get("initContainers", []) + spec["containers"]}


def test_sidecar_is_hardened_probed_and_advisory_by_default() -> None:
    objects = build("advise")
    vllm = next(o for o in objects if o["kind"] == "Deployment")
    assert vllm["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0
    found = containers(objects, "vllm")
    sidecar = found["autotuner"]
    security = sidecar["securityContext"]
    assert security["runAsNonRoot"]
    assert security["readOnlyRootFilesystem"]
    assert security["allowPrivilegeEscalation"] is False
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert sidecar["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "nvidia.com/gpu" not in sidecar["resources"].get("limits", {})
    assert found["kernels-probe"]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert not any(e["name"] == "AUTOTUNER_MODE" for e in sidecar.get("env", []))
    act = containers(build("act"), "vllm")["autotuner"]
    assert {"name": "AUTOTUNER_MODE", "value": "act"} in act["env"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_shipped_settings_load(overlay: str, tmp_path: Path) -> None:
    config = next(
        o
        for o in build(overlay)
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("spec-autotuner-settings")
    )
    path = tmp_path / "autotuner.yaml"
    path.write_text(config["data"]["autotuner.yaml"])
    settings, sources = load_settings(path)
    assert settings.target.uri == "k8s://llm/deployment/vllm/vllm"
    assert settings.mode == "advise"
    assert sources["mode"].startswith("file")
