"""deploy/fleet: the SpecTuner CRD validates with kubernetes-validate and agrees with the
pydantic spec; the kustomization builds; the ClusterRole patches only the kinds the tuner
patches; the chart ships the same CRD (Helm's library loads it); every example SpecTuner
loads into settings, with nothing for the tuner to warn of at start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from autotuner.actuators.kinds import BY_KIND
from autotuner.engines.kinds import EngineKind
from autotuner.fleet.spec import GROUP, KIND, PLURAL, VERSION, parse_spec, settings_for
from autotuner.settings import Mode
from tests.deploy.building import DEPLOY, K8S_VERSION, build

FLEET = DEPLOY / "fleet"
CRD = FLEET / "spectuner-crd.yaml"
EXAMPLES = sorted((FLEET / "examples").glob("*.yaml"))


def crd() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(CRD.read_text())
    return loaded


def schema() -> dict[str, Any]:
    version = crd()["spec"]["versions"][0]
    assert version["name"] == VERSION
    found: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return found


def test_the_crd_validates_and_names_what_the_controller_watches() -> None:
    kubernetes_validate.validate(crd(), K8S_VERSION, strict=True)
    spec = crd()["spec"]
    assert (spec["group"], spec["names"]["plural"], spec["names"]["kind"]) == (GROUP, PLURAL, KIND)
    assert spec["scope"] == "Namespaced"
    columns = {c["name"] for c in spec["versions"][0]["additionalPrinterColumns"]}
    assert {"Target", "Mode", "Setup", "Gain", "Crossover", "Age"} <= columns


def test_the_schema_agrees_with_the_pydantic_spec() -> None:
    fields = schema()["properties"]["spec"]["properties"]
    assert set(fields["targetRef"]["properties"]["kind"]["enum"]) == set(BY_KIND)
    assert set(fields["mode"]["enum"]) == {m.value for m in Mode}
    assert set(fields["engine"]["enum"]) == {e.value for e in EngineKind}
    aliases = {f.alias or name for name, f in type(parse_spec(_minimal())).model_fields.items()}
    assert set(fields) == aliases
    conditions = schema()["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


def _minimal() -> dict[str, Any]:
    return {"targetRef": {"kind": "Deployment", "name": "vllm"}}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_each_example_loads_into_settings(path: Path) -> None:
    obj = yaml.safe_load(path.read_text())
    assert (obj["apiVersion"], obj["kind"]) == (f"{GROUP}/{VERSION}", KIND)
    spec = parse_spec(obj["spec"])
    settings = settings_for(spec, obj["metadata"]["namespace"])
    assert settings.target.uri.startswith(f"k8s://llm/{BY_KIND[spec.target_ref.kind].word}/vllm")
    assert settings.policy.cautions() == []  # an example a user copies starts without a warning


def test_every_target_kind_has_an_example() -> None:
    kinds = {yaml.safe_load(p.read_text())["spec"]["targetRef"]["kind"] for p in EXAMPLES}
    assert kinds == set(BY_KIND)


def test_the_kustomization_builds_validates_and_grants_only_the_tuned_kinds() -> None:
    objects = build(FLEET)
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    role = next(o for o in objects if o["kind"] == "ClusterRole")
    patched = {
        (group, resource)
        for rule in role["rules"]
        if "patch" in rule["verbs"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    tuned = {(k.group, k.plural) for k in BY_KIND.values()}
    assert patched == tuned | {(GROUP, f"{PLURAL}/status")}
    spectuners = [r for r in role["rules"] if r["resources"] == [PLURAL]]
    assert [sorted(r["verbs"]) for r in spectuners] == [["get", "list", "watch"]]
    assert all("*" not in r["verbs"] and "*" not in r["resources"] for r in role["rules"])
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "controller"
    assert "--leader-elect" in args


def test_the_chart_installs_the_same_crd() -> None:
    with helm.Chart.load(DEPLOY / "chart" / "spec-autotuner") as chart:
        crds = [yaml.safe_load(c["data"]) for c in chart.crds]
    assert crds == [crd()]


def documents(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """The objects of a rendered chart's YAML files."""
    return [
        doc
        for path, text in rendered.items()
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def test_the_chart_in_fleet_mode_runs_the_controller_with_the_same_cluster_role() -> None:
    with helm.Chart.load(DEPLOY / "chart" / "spec-autotuner") as chart:
        values = {"fleet": {"enabled": True, "namespaces": ["llm", "llm-b"]}}
        rendered = chart.render(values, name="spec-autotuner", namespace="llm", is_install=True)
        plain = chart.render({}, name="spec-autotuner", namespace="llm", is_install=True)
    objects = documents(rendered)
    for obj in objects:
        if obj["kind"] in {"ClusterRole", "ClusterRoleBinding", "Deployment"}:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    role = next(o for o in objects if o["kind"] == "ClusterRole")
    shipped = next(o for o in build(FLEET) if o["kind"] == "ClusterRole")
    assert role["rules"] == shipped["rules"]
    binding = next(o for o in objects if o["kind"] == "ClusterRoleBinding")
    assert binding["subjects"][0]["name"] == "spec-autotuner"
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:3] == ["controller", "--config", "/etc/spec-autotuner/autotuner.yaml"]
    assert args[3:] == ["--namespace", "llm", "--namespace", "llm-b"]
    plain_kinds = {d["kind"] for d in documents(plain)}
    assert not plain_kinds & {"ClusterRole", "ClusterRoleBinding"}


def controller_args(obj: dict[str, Any]) -> list[str]:
    return list(obj["spec"]["template"]["spec"]["containers"][0]["args"])


def test_the_sharded_kustomization_runs_one_controller_pod_per_shard() -> None:
    objects = build(DEPLOY / "fleet-sharded")
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    kinds = [o["kind"] for o in objects]
    assert "Deployment" not in kinds  # the StatefulSet replaces the one controller
    sets = [o for o in objects if o["kind"] == "StatefulSet"]
    assert len(sets) == 1
    args = controller_args(sets[0])
    assert args[0] == "controller"
    assert "--leader-elect" in args
    assert int(args[args.index("--shards") + 1]) == sets[0]["spec"]["replicas"] > 1
    env = {e["name"] for e in sets[0]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "POD_NAMESPACE" in env  # where each shard's Lease is
    assert {o["kind"] for o in build(FLEET)} - {"Deployment"} == set(kinds) - {"StatefulSet"}


def test_the_chart_with_shards_renders_a_statefulset_of_that_many_controllers() -> None:
    with helm.Chart.load(DEPLOY / "chart" / "spec-autotuner") as chart:
        values = {"fleet": {"enabled": True, "shards": 3}}
        rendered = chart.render(values, name="spec-autotuner", namespace="llm", is_install=True)
    objects = documents(rendered)
    assert not [o for o in objects if o["kind"] == "Deployment"]
    sets = [o for o in objects if o["kind"] == "StatefulSet"]
    assert len(sets) == 1
    kubernetes_validate.validate(sets[0], K8S_VERSION, strict=True)
    assert sets[0]["spec"]["replicas"] == 3
    args = controller_args(sets[0])
    assert args[args.index("--shards") + 1] == "3"
    assert "--leader-elect" in args
