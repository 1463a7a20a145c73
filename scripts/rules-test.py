#!/usr/bin/env python3
"""Fill in deploy/prometheus/tests/rules_test.yaml's exp_annotations from rules.yaml.

promtool compares the annotations of every alert it expects, so the committed test file
carries them in full: `promtool test rules deploy/prometheus/tests/rules_test.yaml` runs as it
is. Edit the cases (series, eval times, labels) in that file, then run this script; an alert's
annotations are only ever written here, from rules.yaml. `--check` changes nothing and exits 1
when the file is not up to date (the test suite runs it).
"""

from __future__ import annotations

import argparse
import copy
import difflib
import io
import sys
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

PROMETHEUS = Path(__file__).resolve().parents[1] / "deploy" / "prometheus"
RULES = PROMETHEUS / "rules.yaml"
TESTS = PROMETHEUS / "tests" / "rules_test.yaml"


def _yaml() -> YAML:
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def alert_annotations(rules_text: str) -> dict[str, Any]:
    groups = _yaml().load(rules_text)["groups"]
    return {rule["alert"]: rule["annotations"] for group in groups for rule in group["rules"]}


def generate(tests_text: str, rules_text: str) -> str:
    """The test file with every expected alert's annotations taken from the rules."""
    yaml = _yaml()
    tests = yaml.load(tests_text)
    by_alert = alert_annotations(rules_text)
    for case in tests["tests"]:
        for check in case["alert_rule_test"]:
            for expected in check["exp_alerts"]:
                expected["exp_annotations"] = copy.deepcopy(by_alert[check["alertname"]])
    out = io.StringIO()
    yaml.dump(tests, out)
    return out.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is outdated")
    options = parser.parse_args()
    current = TESTS.read_text(encoding="utf-8")
    wanted = generate(current, RULES.read_text(encoding="utf-8"))
    if wanted == current:
        return 0
    if options.check:
        sys.stdout.writelines(
            difflib.unified_diff(
                current.splitlines(keepends=True),
                wanted.splitlines(keepends=True),
                fromfile=str(TESTS),
                tofile=f"{TESTS} (generated)",
            )
        )
        print(f"{TESTS} is out of date: run scripts/rules-test.py", file=sys.stderr)
        return 1
    TESTS.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
