"""The `autotuner` command run in-process, as its tests read it: what it prints when it succeeds,
its JSON, and the line it refuses a bad input with."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner

from autotuner.cli.main import app

runner = CliRunner()


def printed(*args: str, env: dict[str, str] | None = None) -> str:
    """What the command prints on stdout; a command that does not exit 0 fails the test with
    everything it printed (its traceback or error line)."""
    result = runner.invoke(app, list(args), env=env)
    assert result.exit_code == 0, result.output
    return result.stdout


def printed_json(*args: str) -> Any:
    """The JSON the command prints (the caller passes --json)."""
    return json.loads(printed(*args))


def refusal(*args: str) -> str:
    """What the command says on stderr as it refuses its input: a bad input exits 2."""
    result = runner.invoke(app, list(args))
    assert result.exit_code == 2, result.output
    return result.stderr
