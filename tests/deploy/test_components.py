"""deploy/components/<kind>: each builds into the overlays with the real `kubectl kustomize`,
grants get/patch on the one named object of its kind and get on its status (nothing else beside
the Lease and Events), points the tuner at it, and changes nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.deploy.building import (
    COMMON_RULES,
    COMPONENTS,
    DEPLOY,
    KINDS,
    Manifest,
    build,
    build_with,
    kind_rules,
    rule_key,
    rules,
    target_rules,
    tuner_env,
    validate,
)

STANDALONE = DEPLOY / "overlays" / "standalone"


def untouched(objects: list[Manifest]) -> list[Manifest]:
    """What a component must leave as it was: all but the Role and the Deployments."""
    return [o for o in objects if o["kind"] not in ("Role", "Deployment")]


@pytest.fixture(scope="module")
def standalone() -> list[Manifest]:
    return build(STANDALONE)


def test_every_component_directory_is_tested() -> None:
    shipped = {p.name for p in COMPONENTS.iterdir() if p.is_dir()}
    assert shipped == set(KINDS) | {"llm-d", "args-configmap"}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_kind_component_on_the_standalone_controller(
    kind: str, standalone: list[Manifest], tmp_path: Path
) -> None:
    objects = build_with(tmp_path, STANDALONE, [kind])
    validate(objects)
    assert rules(objects) == kind_rules(kind, "vllm")
    assert tuner_env(objects)["AUTOTUNER_TARGET__URI"] == KINDS[kind][2]
    # The alert rules, the dashboard, the settings and the identity stay as they were.
    assert untouched(objects) == untouched(standalone)


def test_the_base_role_names_the_deployment_as_its_component_does(tmp_path: Path) -> None:
    """The base's first two rules and components/deployment/role.yaml are one rule set."""
    base = yaml.safe_load((DEPLOY / "rbac" / "role.yaml").read_text())["rules"]
    patch = yaml.safe_load((COMPONENTS / "deployment" / "role.yaml").read_text())
    assert [(op["op"], op["path"]) for op in patch] == [
        ("replace", "/rules/0"),
        ("replace", "/rules/1"),
    ]
    assert [op["value"] for op in patch] == base[:2]
    assert {rule_key(r) for r in base[2:]} == COMMON_RULES


def test_a_sidecar_in_act_mode_tunes_a_statefulset(tmp_path: Path) -> None:
    objects = build_with(tmp_path, DEPLOY / "overlays" / "act", ["statefulset"])
    validate(objects)
    env = tuner_env(objects)
    assert env["AUTOTUNER_MODE"] == "act"
    assert env["AUTOTUNER_TARGET__URI"] == "k8s://llm/statefulset/vllm/vllm"
    assert rules(objects) == target_rules("apps", "statefulsets", "vllm") | COMMON_RULES


def test_llm_d_tunes_the_modelserver_container_with_the_deployment_role(
    tmp_path: Path,
) -> None:
    objects = build_with(tmp_path, STANDALONE, ["llm-d"])
    validate(objects)
    assert tuner_env(objects)["AUTOTUNER_TARGET__URI"] == "k8s://llm/deployment/vllm/modelserver"
    assert rules(objects) == target_rules("apps", "deployments", "vllm") | COMMON_RULES


def test_args_in_a_configmap_add_a_read_of_that_one_configmap(tmp_path: Path) -> None:
    objects = build_with(tmp_path, STANDALONE, ["leaderworkerset", "args-configmap"])
    validate(objects)
    configmap = (("",), ("configmaps",), ("vllm-args",), ("get",))
    assert rules(objects) == kind_rules("leaderworkerset", "vllm") | {configmap}
