"""The settings tree: precedence cli > env > file > default, durations, field-named errors."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
import yaml

from autotuner.cli.main import app
from autotuner.core.decide.settings import PolicySettings
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import Observation
from autotuner.durations import parse_duration
from autotuner.errors import InputError
from autotuner.settings import Settings, cli_overrides, describe, load_settings
from tests.support.cli import printed, refusal, runner
from tests.support.loop import wired
from tests.support.policy import MODEL


def test_precedence_and_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    file = tmp_path / "autotuner.yaml"
    file.write_text(
        "mode: act\npolicy: {switch: {dwell_s: 20m}, restart: {cooldown_s: 1h}}\n"
        "loop: {interval_s: 30s}\n"
    )
    monkeypatch.setenv("AUTOTUNER_POLICY__SWITCH__DWELL_S", "5m")
    monkeypatch.setenv("AUTOTUNER_LOOP__INTERVAL_S", "10")
    settings, sources = load_settings(file, cli_overrides(["loop.interval_s=500ms"]))
    assert settings.mode == "act"
    assert settings.policy.restart.cooldown_s == 3600
    assert settings.policy.switch.dwell_s == 300
    assert settings.loop.interval_s == 0.5
    assert sources["mode"] == f"file {file}"
    assert sources["policy.switch.dwell_s"] == "env"
    assert sources["loop.interval_s"] == "cli"
    rows = {row[0]: row for row in describe(settings, sources)}
    assert rows["policy.restart.cooldown_s"][2].startswith("file")
    assert rows["loop.window_s"][2] == "default"
    described = ("source.", "target.", "policy.", "engine.")
    assert all(row[3] for row in rows.values() if row[0].startswith(described))


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("policy.switch.min_gain=-1", "policy.switch.min_gain"),
        ("mode=yolo", "mode"),
        ("loop.interval_s=soon", "soon"),
        ("source.kind=graphite", "source.kind"),
        ("nope.field=1", "nope"),
    ],
)
def test_invalid_settings_name_the_field(override: str, field: str) -> None:
    with pytest.raises(InputError, match=field.replace(".", r"\.")):
        load_settings(None, cli_overrides([override]))


def test_bad_file_and_bad_override(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"No such file"):
        load_settings(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("mode: [unclosed\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_settings(broken)
    with pytest.raises(InputError, match=r"group\.field=value"):
        cli_overrides(["no-equals-sign"])


def test_config_show_and_run_refuse_bad_settings() -> None:
    shown = printed("config", "show", "--json", "--set=policy.switch.dwell_s=2m")
    assert '"policy.switch.dwell_s"' in shown
    assert '"cli"' in shown
    assert "loop.interval_s" in refusal("run", "--set", "loop.interval_s=-1")


def test_settings_that_leave_the_policy_nothing_to_do_are_said_and_only_those() -> None:
    assert PolicySettings().cautions() == []
    (frozen,) = PolicySettings.model_validate({"restart": {"max_per_hour": 1}}).cautions()
    assert "no change is ever made" in frozen
    (mute,) = PolicySettings.model_validate({"restart": {"max_per_day": 5}}).cautions()
    assert "no question is asked but where the running setup's calibration is saturated" in mute
    assert "set exploration.reserve to 3 or less" in mute
    both = {"restart": {"max_per_day": 3}, "exploration": {"saturated_reserve": 2}}
    (silent,) = PolicySettings.model_validate(both).cautions()
    assert "no question is ever asked" in silent
    for said in ({"exploration": {"enabled": False}}, {"exploration": {"reserve": 3}}):
        assert (
            PolicySettings.model_validate({"restart": {"max_per_day": 5}, **said}).cautions() == []
        )


def test_config_show_says_a_caution_on_stderr_and_keeps_its_json() -> None:
    result = runner.invoke(app, ["config", "show", "--json", "--set=policy.restart.max_per_day=4"])
    assert result.exit_code == 0, result.output
    assert "caution: exploration.reserve 4 with restart.max_per_day 4" in result.stderr
    assert isinstance(json.loads(result.stdout), list)
    quiet = runner.invoke(app, ["config", "show", "--json"])
    assert "caution" not in quiet.stderr


def unread() -> Observation:
    raise AssertionError("the loop is built, not run")


def test_the_sidecar_logs_each_caution_at_start(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings.model_validate({"policy": {"restart": {"max_per_day": 4}}})
    served = (MODEL, datasheet("H200"))
    with caplog.at_level(logging.WARNING, logger="test"):
        wired(settings, served, observe=unread, actuator=None, clock=lambda: 0.0)
    (record,) = [r for r in caplog.records if r.name == "test"]
    assert record.levelno == logging.WARNING
    assert "no question is asked but where" in record.getMessage()


GROUPED = """\
policy:
  switch: {min_gain: 0.1, dwell_s: 10m}
  objective: {kind: latency_slo, latency_slo_s: 50ms}
  candidates: {spec_tokens: [1, 3], replay_windows: [16]}
  restart: {downtime_s: 2m, max_per_day: 3}
  estimates: {batch_half_life_s: 5m}
  calibration: {bounds: [1, 1]}
  verification: {settle_s: 1m}
  quarantine: {setup_s: 2h, capability_s: 1d}
  exploration: {enabled: false}
engine:
  capabilities: replay-spec
target: {allow_low_precision_replay: true}
"""


def test_grouped_settings_round_trip_through_yaml_and_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "autotuner.yaml"
    file.write_text(GROUPED)
    monkeypatch.setenv("AUTOTUNER_POLICY__RESTART__COOLDOWN_S", "45m")
    monkeypatch.setenv("AUTOTUNER_ENGINE__CAPABILITIES__SPEC_SCHEDULE", "false")
    settings, sources = load_settings(file)
    policy = settings.policy
    assert (policy.switch.min_gain, policy.switch.dwell_s) == (0.1, 600)
    assert policy.objective.kind == "latency_slo"
    assert policy.objective.latency_slo_s == 0.05
    assert policy.candidates.spec_tokens == (1, 3)
    assert (policy.restart.downtime_s, policy.restart.cooldown_s) == (120, 2700)
    assert policy.calibration.bounds == (1.0, 1.0)
    assert policy.quarantine.capability_s == 86400
    assert not policy.exploration.enabled
    assert settings.target.allow_low_precision_replay
    # The preset from the file, one capability changed from the environment: set once.
    engine = settings.engine.capabilities
    assert (engine.name, engine.replay_with_speculation, engine.spec_schedule) == (
        "replay-spec",
        True,
        False,
    )
    assert sources["policy.restart.cooldown_s"] == "env"
    assert sources["engine.capabilities.spec_schedule"] == "env"
    # `config show` names every grouped field, and says what it is for.
    rows = {row[0]: row for row in describe(settings, sources)}
    assert rows["policy.restart.cooldown_s"][1:3] == ("2700.0", "env")
    preset = rows["engine.capabilities.replay_with_speculation"]
    assert preset[1:3] == ("True", f"file {file} (preset replay-spec)")
    assert all(rows[f"policy.{group}.{name}"][3] for group, name in _grouped(settings))
    # Written out and read back (YAML), the same settings.
    monkeypatch.delenv("AUTOTUNER_POLICY__RESTART__COOLDOWN_S")
    monkeypatch.delenv("AUTOTUNER_ENGINE__CAPABILITIES__SPEC_SCHEDULE")
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(settings.model_dump(mode="json")))
    assert load_settings(again)[0] == settings


def _grouped(settings: Settings) -> list[tuple[str, str]]:
    policy = settings.policy
    return [
        (group, name)
        for group in type(policy).model_fields
        for name in type(getattr(policy, group)).model_fields
    ]


UNKNOWN_IN_A_FILE = {
    "policy: {dwell_s: 10m}": "policy.dwell_s: Extra inputs are not permitted",
    "policy: {objective: throughput}": "policy.objective: Input should be a valid dictionary",
    "policy: {allow_low_precision_replay: true}": "policy.allow_low_precision_replay: Extra",
}


@pytest.mark.parametrize("key", UNKNOWN_IN_A_FILE)
def test_a_key_outside_the_tree_is_refused_by_its_name(key: str, tmp_path: Path) -> None:
    file = tmp_path / "unknown.yaml"
    file.write_text(key + "\n")
    with pytest.raises(InputError, match=re.escape(UNKNOWN_IN_A_FILE[key])):
        load_settings(file)


def test_unknown_keys_from_the_environment_and_the_command_line_are_refused_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AUTOTUNER_POLICY__QUARANTINE_S", "1h")
    with pytest.raises(InputError) as refused:
        load_settings(None, cli_overrides(["engine.spec_schedule=false"]))
    message = str(refused.value)
    assert "policy.quarantine_s: Extra inputs are not permitted" in message
    assert "engine.spec_schedule: Extra inputs are not permitted" in message


def test_an_unknown_engine_preset_is_refused() -> None:
    with pytest.raises(InputError, match=r"engine\.capabilities: .*unknown engine preset 'v0'"):
        load_settings(None, cli_overrides(["engine.capabilities=v0"]))
    with pytest.raises(InputError, match=r"engine\.capabilities\.replay_spec: Extra inputs"):
        load_settings(None, cli_overrides(["engine.capabilities.replay_spec=true"]))


def test_an_engine_preset_from_the_environment_takes_fields_from_the_command_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AUTOTUNER_ENGINE__CAPABILITIES", "replay-spec")
    settings, _ = load_settings(None, cli_overrides(["engine.capabilities.max_spec_tokens=3"]))
    engine = settings.engine.capabilities
    assert (engine.name, engine.replay_with_speculation, engine.max_spec_tokens) == (
        "replay-spec",
        True,
        3,
    )


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("policy.restart.first_compile_s=0s", 0.0),  # ge=0: zero is a value
        ("policy.switch.dwell_s=0", 0.0),
        ("policy.verification.settle_s=0ms", 0.0),
        ("policy.restart.first_compile_s=90s", 90.0),
    ],
)
def test_zero_durations_follow_the_fields_bound(override: str, expected: float) -> None:
    settings, _ = load_settings(None, cli_overrides([override]))
    node: object = settings
    for part in override.split("=")[0].split("."):
        node = getattr(node, part)
    assert node == expected


@pytest.mark.parametrize("override", ["loop.interval_s=0s", "policy.restart.horizon_s=0"])
def test_a_zero_duration_is_refused_where_the_field_must_be_positive(override: str) -> None:
    field = override.split("=")[0]
    with pytest.raises(InputError, match=re.escape(field) + ".*greater than 0"):
        load_settings(None, cli_overrides([override]))


@pytest.mark.parametrize("value", ["-5s", "5 parsecs"])
def test_a_negative_or_unreadable_duration_is_refused_naming_the_field(value: str) -> None:
    field = "policy.restart.first_compile_s"
    with pytest.raises(InputError, match=re.escape(f"{field}: cannot read duration")):
        load_settings(None, cli_overrides([f"{field}={value}"]))


def test_a_command_option_of_zero_is_still_refused() -> None:
    """Outside the settings no field's bound stands behind the parser: a zero timeout or
    window is refused by the parser itself."""
    with pytest.raises(InputError, match="duration must be positive"):
        parse_duration("0s")
    assert parse_duration("0s", allow_zero=True) == 0.0
