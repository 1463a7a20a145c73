"""Every command's --help, read in an 80-column terminal: option names print whole."""

from __future__ import annotations

from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from autotuner.cli.main import app

ROOT = typer.main.get_command(app)


def commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path, groups included (the root is ())."""
    found = [path]
    for name, command in getattr(group, "commands", {}).items():
        found += commands(command, (*path, name))
    return found


@pytest.mark.parametrize("path", commands(ROOT), ids=lambda p: " ".join(p) or "autotuner")
def test_every_option_name_prints_whole_at_80_columns(path: tuple[str, ...]) -> None:
    command: Any = ROOT
    for name in path:
        command = command.commands[name]
    result = CliRunner().invoke(
        app, [*path, "--help"], env={"COLUMNS": "80", "TERMINAL_WIDTH": None}
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    words = {word.strip(",.[]()") for line in lines for word in line.split()}
    for param in command.params:
        for name in (*param.opts, *param.secondary_opts):
            if name.startswith("--"):
                assert name in words, f"{' '.join(path)}: {name} is not printed whole"
