"""The command line's root: the typer app, its commands in the order `--help` lists them, and
the console script's entry point. Each command lives in the module of its group; what they
print lives in autotuner/cli/render/."""

from __future__ import annotations

from typing import Annotated

import typer

from autotuner import __version__
from autotuner.cli.config import config_show
from autotuner.cli.fleet import controller
from autotuner.cli.measure import bench, calibrate, canary
from autotuner.cli.observe import observe
from autotuner.cli.predict import predict
from autotuner.cli.sidecar import demo, run
from autotuner.cli.target import apply, status

# Plain (click) help: rich's option tables cut long option names at 80 columns.
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Tune speculative decoding and ReplaySSM for hybrid-model vLLM and SGLang deployments.",
)
config_app = typer.Typer(help="Inspect the settings.", no_args_is_help=True, rich_markup_mode=None)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False,
) -> None:
    if version:
        print(__version__)
        raise typer.Exit(0)


app.command()(predict)
app.command()(observe)
app.command()(canary)
app.command()(apply)
app.command()(status)
app.add_typer(config_app, name="config")
config_app.command("show")(config_show)
app.command()(run)
app.command()(controller)
app.command()(demo)
app.command()(bench)
app.command()(calibrate)


def main() -> None:
    app()
