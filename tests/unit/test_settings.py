"""The settings tree: precedence cli > env > file > default, durations, field-named errors."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotuner.cli import app
from autotuner.errors import InputError
from autotuner.settings import cli_overrides, describe, load_settings


def test_precedence_and_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    file = tmp_path / "autotuner.yaml"
    file.write_text("mode: act\npolicy: {dwell_s: 20m, cooldown_s: 1h}\nloop: {interval_s: 30s}\n")
    monkeypatch.setenv("AUTOTUNER_POLICY__DWELL_S", "5m")
    monkeypatch.setenv("AUTOTUNER_LOOP__INTERVAL_S", "10")
    settings, sources = load_settings(file, cli_overrides(["loop.interval_s=500ms"]))
    assert settings.mode == "act"
    assert settings.policy.cooldown_s == 3600
    assert settings.policy.dwell_s == 300
    assert settings.loop.interval_s == 0.5
    assert sources["mode"] == f"file {file}"
    assert sources["policy.dwell_s"] == "env"
    assert sources["loop.interval_s"] == "cli"
    rows = {row[0]: row for row in describe(settings, sources)}
    assert rows["policy.cooldown_s"][2].startswith("file")
    assert rows["loop.window_s"][2] == "default"
    assert all(row[3] for row in rows.values() if row[0].startswith(("source.", "target.")))


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("policy.min_gain=-1", "policy.min_gain"),
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
    runner = CliRunner()
    shown = runner.invoke(app, ["config", "show", "--json", "--set", "policy.dwell_s=2m"])
    assert shown.exit_code == 0, shown.output
    assert '"policy.dwell_s"' in shown.stdout
    assert '"cli"' in shown.stdout
    bad = runner.invoke(app, ["run", "--set", "loop.interval_s=-1"])
    assert bad.exit_code == 2
    assert "loop.interval_s" in bad.stderr


def test_settings_sit_at_the_bottom_of_the_import_graph() -> None:
    """Importing the settings tree loads no I/O code of ours (no httpx, no Kubernetes client,
    no actuator, no canary): every other module may import it."""
    code = (
        "import sys, autotuner.settings as s; "
        "print(sorted(m for m in sys.modules if m.startswith('autotuner') or m in "
        "('httpx', 'kubernetes', 'numpy')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert ast.literal_eval(loaded) == [
        "autotuner",
        "autotuner.core",
        "autotuner.core.model",
        "autotuner.durations",
        "autotuner.errors",
        "autotuner.settings",
    ]
