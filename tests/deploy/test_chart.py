"""deploy/chart/spec-autotuner rendered and linted by real Helm (its Go library, embedded by PyPI
helm-python-sdk): every kind's objects pass kubernetes-validate, its Role is the kustomize
component's, its settings load, the alert rules pass promtool and the dashboard is the one
shipped; bad values are refused with the field named."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from autotuner.engines.kinds import EngineKind
from autotuner.settings import Settings, SourceKind, load_settings
from tests.deploy.building import (
    DEPLOY,
    KINDS,
    Manifest,
    build_with,
    kind_rules,
    promtool,
    rules,
    validate,
)

CHART = DEPLOY / "chart" / "spec-autotuner"
RELEASE, NAMESPACE = "spec-autotuner", "llm"
BASIC = {"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment"}


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def render(chart: helm.Chart, values: dict[str, Any] | None = None) -> list[Manifest]:
    manifests = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return [
        doc
        for path, text in sorted(manifests.items())
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def only(objects: list[Manifest], kind: str, suffix: str = "") -> Manifest:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, [o["metadata"]["name"] for o in found]
    return found[0]


def settings_of(objects: list[Manifest], tmp_path: Path) -> Settings:
    path = tmp_path / "autotuner.yaml"
    path.write_text(only(objects, "ConfigMap", "-settings")["data"]["autotuner.yaml"])
    return load_settings(path)[0]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_helm_lint_is_clean(kind: str) -> None:
    report = helm.lint(CHART, {"target": {"kind": kind}}, strict=True, kube_version="v1.33.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_helm_lint_and_render_refuse_bad_values(chart: helm.Chart) -> None:
    report = helm.lint(CHART, {"target": {"kind": "pod"}}, strict=True)
    assert any("/target/kind" in error for error in report["errors"])
    for bad, field in (
        ({"mode": "auto"}, "/mode"),
        ({"engine": "trtllm"}, "/engine"),
        ({"target": {"nmae": "vllm"}}, "nmae"),
    ):
        with pytest.raises(helm.HelmValuesError, match=field):
            chart.render(bad, name=RELEASE, namespace=NAMESPACE)


def test_defaults_render_an_advising_controller(chart: helm.Chart, tmp_path: Path) -> None:
    objects = render(chart)
    assert {o["kind"] for o in objects} == BASIC
    validate(objects)
    assert {o["metadata"]["namespace"] for o in objects} == {NAMESPACE}
    settings = settings_of(objects, tmp_path)
    assert settings.mode == "advise"
    assert settings.target.uri == "k8s://llm/deployment/vllm"
    assert settings.source.urls == ["http://vllm.llm.svc:8000/metrics"]
    container = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "ghcr.io/spec-autotuner/spec-autotuner:0.1.0"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_the_packaged_chart_carries_the_linked_files(chart: helm.Chart, tmp_path: Path) -> None:
    """files/ links into deploy/; `helm package` copies what they point at."""
    archive = helm.package(CHART, destination=tmp_path)
    values = {
        "target": {"kind": "inferenceservice"},
        "prometheusRule": {"enabled": True},
        "dashboard": {"enabled": True},
    }
    with helm.Chart.load(archive) as packaged:
        assert render(packaged, values) == render(chart, values)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_gets_its_component_role(kind: str, chart: helm.Chart, tmp_path: Path) -> None:
    objects = render(chart, {"target": {"kind": kind}})
    validate(objects)
    component = build_with(tmp_path, DEPLOY / "overlays" / "standalone", [kind])
    assert rules(objects) == rules(component) == kind_rules(kind, "vllm")
    assert settings_of(objects, tmp_path).target.uri == f"k8s://llm/{kind}/vllm"


def test_act_on_an_lws_in_another_namespace_with_args_in_a_configmap(
    chart: helm.Chart, tmp_path: Path
) -> None:
    objects = render(
        chart,
        {
            "mode": "act",
            "target": {
                "kind": "leaderworkerset",
                "name": "qwen",
                "namespace": "serving",
                "argsConfigMaps": ["qwen-args"],
            },
            "settings": {"policy": {"restart": {"cooldown_s": "1h"}}},
        },
    )
    validate(objects)
    configmap = (("",), ("configmaps",), ("qwen-args",), ("get",))
    assert rules(objects) == kind_rules("leaderworkerset", "qwen") | {configmap}
    # The Role and its binding sit beside the target; the identity stays with the release.
    assert only(objects, "Role")["metadata"]["namespace"] == "serving"
    binding = only(objects, "RoleBinding")
    assert binding["metadata"]["namespace"] == "serving"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE}
    ]
    settings = settings_of(objects, tmp_path)
    assert settings.mode == "act"
    assert settings.target.uri == "k8s://serving/leaderworkerset/qwen"
    assert settings.source.urls == ["http://qwen.serving.svc:8000/metrics"]
    assert settings.policy.restart.cooldown_s == 3600


@pytest.mark.parametrize(
    ("target", "uri"),
    [
        ({"container": "modelserver"}, "k8s://llm/deployment/vllm/modelserver"),  # llm-d
        (
            {"kind": "leaderworkerset", "container": "leader"},
            "k8s://llm/leaderworkerset/vllm/leader",
        ),
        (
            {
                "kind": "dynamographdeployment",
                "component": "VllmDecodeWorker",
                "version": "v1alpha1",
            },
            "k8s://llm/dynamographdeployment.v1alpha1/vllm/VllmDecodeWorker",
        ),
        # A container means nothing to a KServe object: its engine container is `main`.
        ({"kind": "llminferenceservice", "container": "x"}, "k8s://llm/llminferenceservice/vllm"),
    ],
)
def test_the_target_uri_names_the_container_or_component(
    target: dict[str, str], uri: str, chart: helm.Chart, tmp_path: Path
) -> None:
    assert settings_of(render(chart, {"target": target}), tmp_path).target.uri == uri


def test_sglang_is_scraped_on_its_port(chart: helm.Chart, tmp_path: Path) -> None:
    objects = render(chart, {"engine": "sglang", "target": {"kind": "dynamographdeployment"}})
    settings = settings_of(objects, tmp_path)
    assert settings.engine.kind is EngineKind.SGLANG
    assert settings.source.kind is SourceKind.SGLANG
    assert settings.source.urls == ["http://vllm.llm.svc:30000/metrics"]


def test_the_alert_rules_behind_their_switch_pass_promtool(
    chart: helm.Chart, tmp_path: Path
) -> None:
    values = {
        "prometheusRule": {
            "enabled": True,
            "namespace": "monitoring",
            "additionalLabels": {"release": "kube-prometheus-stack"},
        },
        "podMonitor": {"enabled": True},
    }
    objects = render(chart, values)
    rule = only(objects, "PrometheusRule")
    assert rule["metadata"]["namespace"] == "monitoring"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"] == yaml.safe_load((DEPLOY / "prometheus" / "rules.yaml").read_text())
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    result = subprocess.run(
        [promtool(), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    count = sum(len(group["rules"]) for group in rule["spec"]["groups"])
    assert f"SUCCESS: {count} rules found" in result.stdout
    monitor = only(objects, "PodMonitor")
    pod_labels = only(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_the_dashboard_behind_its_switch_is_labelled_for_grafana(chart: helm.Chart) -> None:
    objects = render(chart, {"dashboard": {"enabled": True, "namespace": "grafana"}})
    validate(objects)
    board = only(objects, "ConfigMap", "-dashboard")
    assert board["metadata"]["namespace"] == "grafana"
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((DEPLOY / "grafana" / "dashboard.json").read_text())
    assert json.loads(board["data"]["dashboard.json"]) == shipped
