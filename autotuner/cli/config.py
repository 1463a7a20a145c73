"""`autotuner config show`: the effective settings, where each came from, and what it is for;
the settings that leave a part of the policy nothing to do, said on stderr."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from autotuner.cli.common import ConfigFile, SetOption, fail, load_cli_settings, one_line
from autotuner.errors import AutotunerError

COLUMNS = ("field", "value", "source", "description")


def config_show(
    config: ConfigFile = None,
    overrides: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Print the effective settings, where each came from, and what it is for."""
    from autotuner.settings import describe

    try:
        settings, sources = load_cli_settings(config, overrides)
    except AutotunerError as exc:
        fail(one_line(exc))
    rows = describe(settings, sources)
    for caution in settings.policy.cautions():  # stderr: the JSON on stdout stays a list
        print(f"autotuner: caution: {caution}", file=sys.stderr)
    if as_json:
        print(json.dumps([dict(zip(COLUMNS, r, strict=True)) for r in rows], indent=2))
        return
    table = Table(title="Effective settings (cli > env AUTOTUNER_* > file > default)")
    for column in COLUMNS:
        table.add_column(column)
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    Console().print(table)
