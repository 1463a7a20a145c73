"""Alert rules checked and unit-tested by promtool, the tool operators use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.deploy.building import promtool

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "rules.yaml"
RULE_TESTS = DEPLOY / "prometheus" / "tests" / "rules_test.yaml"
GENERATOR = DEPLOY.parent / "scripts" / "rules-test.py"


def alerts() -> dict[str, dict[str, object]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


def test_promtool_check_rules() -> None:
    result = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in result.stdout


def test_promtool_unit_tests_fire_and_stay_silent() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())
    rules = alerts()
    tested = set()
    for case in tests["tests"]:
        for check in case["alert_rule_test"]:
            tested.add(check["alertname"])
            for expected in check["exp_alerts"]:
                assert expected["exp_annotations"] == rules[check["alertname"]]["annotations"]
    assert tested == set(rules), f"alerts without a unit test: {set(rules) - tested}"
    silent = {
        c["alertname"]
        for case in tests["tests"]
        for c in case["alert_rule_test"]
        if not c["exp_alerts"]
    }
    assert silent, "some alert must be shown staying silent"
    # The committed file, as operators and their CI run it.
    result = subprocess.run(
        [promtool(), "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_committed_rule_tests_are_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_runbook_and_a_severity() -> None:
    for name, rule in alerts().items():
        annotations = rule["annotations"]
        assert isinstance(annotations, dict)
        assert annotations.get("summary"), name
        assert annotations.get("runbook"), name
        labels = rule["labels"]
        assert isinstance(labels, dict)
        assert labels.get("severity") in ("info", "warning", "critical"), name


def test_prometheusrule_carries_the_same_groups() -> None:
    crd = yaml.safe_load((DEPLOY / "prometheus" / "prometheusrule.yaml").read_text())
    assert crd["kind"] == "PrometheusRule"
    assert crd["spec"] == yaml.safe_load(RULES.read_text())
