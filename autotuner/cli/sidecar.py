"""`autotuner run` (the sidecar until SIGTERM) and `autotuner demo` (a simulated vLLM and the
sidecar acting on it)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from autotuner.cli.common import (
    DEFAULT_MODEL,
    ConfigFile,
    SetOption,
    fail,
    failing_on_bad_input,
    load_cli_settings,
    one_line,
    parse_rates,
    plots_line,
)
from autotuner.cli.stopping import Stopper, stop_grace_s
from autotuner.durations import parse_duration
from autotuner.errors import AutotunerError, InputError


def run(
    config: ConfigFile = None,
    overrides: SetOption = None,
    mode: Annotated[str | None, typer.Option(help="advise (default) or act.")] = None,
    url: Annotated[list[str] | None, typer.Option(help="The engine's /metrics URL(s).")] = None,
    engine: Annotated[
        str | None,
        typer.Option(help="engine.kind: vllm (default), sglang, or auto (detected from --url)."),
    ] = None,
    target: Annotated[str | None, typer.Option(help="k8s://..., file://... or exec://...")] = None,
    model: Annotated[str | None, typer.Option(help="Registry id or config.json path.")] = None,
    gpu: Annotated[str | None, typer.Option(help="Datasheet GPU name.")] = None,
    profile: Annotated[str | None, typer.Option(help="HardwareProfile JSON.")] = None,
    weights: Annotated[
        str | None, typer.Option(help="Stored weight format overriding the files (nvfp4, ...).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Exporter port.")] = None,
) -> None:
    """The sidecar: observe -> decide -> act -> verify every interval until SIGTERM."""
    from autotuner.telling.exporter import TunerMetrics
    from autotuner.telling.logs import configure, event
    from autotuner.telling.server import ExporterServer
    from autotuner.wiring import build_controller

    stopper = Stopper()
    stopper.install()  # from the start: a SIGTERM while wiring stops the loop before it steps
    with failing_on_bad_input():
        settings, _ = load_cli_settings(
            config,
            overrides,
            **{
                "mode": mode,
                "source.urls": url,
                "engine.kind": engine,
                "target.uri": target,
                "model.id": model,
                "model.gpu": gpu,
                "model.profile": profile,
                "model.weights": weights,
                "exporter.port": port,
            },
        )
        logger = configure(settings.log.format, settings.log.level)
        metrics = TunerMetrics()
        controller = build_controller(settings, metrics, logger)
    server = ExporterServer(
        metrics,
        host=settings.exporter.host,
        port=settings.exporter.port,
        alive=controller.alive,
        ready=controller.ready,
    )
    event(
        logger,
        "started",
        mode=settings.mode,
        engine=controller.settings.engine.kind,
        target=settings.target.uri or None,
        model=controller.model.name,
        architecture=controller.model.architecture,
        ssm_layers=controller.model.ssm_layers,
        gpu=controller.hardware.name,
        port=server.port,
    )
    stopper.stops(controller.stop_event)
    # A daemon thread: a step wedged past every deadline must not keep the process alive.
    worker = threading.Thread(target=controller.run, name="controller", daemon=True)
    worker.start()
    stopper.wait(worker, stop_grace_s(settings, controller.actuator), logger)
    server.close()


def demo(
    model: Annotated[str, typer.Option(help="Registry id of the simulated model.")] = DEFAULT_MODEL,
    gpu: Annotated[str, typer.Option(help="Datasheet GPU of the simulated server.")] = "H200",
    duration: Annotated[str, typer.Option(help="Length of the run (a compressed day).")] = "90s",
    acceptance: Annotated[str, typer.Option(help="Conditional acceptance per position.")] = (
        "0.8,0.7,0.6"
    ),
    out: Annotated[Path, typer.Option(help="Folder for demo.png, demo.svg and demo.json.")] = Path(
        "autotuner-demo"
    ),
    no_live: Annotated[bool, typer.Option(help="No live view (logs and summary only).")] = False,
    tp: Annotated[
        int | None,
        typer.Option(
            help="Tensor-parallel GPUs per simulated replica (default: 1 for vLLM; for SGLang "
            "the fewest of 1, 2, 4, 8 that hold batch 512)."
        ),
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            help="The simulated engine: vllm, or sglang (SGLang 0.5.23: its args, start-up "
            "rules, /metrics and /server_info)."
        ),
    ] = "vllm",
    drafter: Annotated[
        str | None, typer.Option(help="Drafter kind when the model has none (eagle, ngram).")
    ] = None,
    world: Annotated[
        str,
        typer.Option(
            help="The simulated engine's hidden error: realistic (about 10%), wrong-prior "
            "(speculation 30% slower and replay 30% faster than modelled, the load held at "
            "batch 24 for 30% of the run: the prior's ranking is wrong there, which only trying "
            "replay can show: the tuner explores), or prefix-cache (realistic, serving 4k-token "
            "prompts 60% of whose tokens the prefix cache serves: the best setup changes with "
            "the load)."
        ),
    ] = "realistic",
    fast: Annotated[
        bool,
        typer.Option(
            help="On a simulated clock: the same steps, windows and restarts, as fast as the "
            "CPU allows (and the same on a slow machine)."
        ),
    ] = False,
) -> None:
    """Simulated vLLM or SGLang + the sidecar in act mode against a manifest, load 4 -> 512 -> 4."""
    from autotuner.demo import DEMO_WORLDS, describe_load, log_lines, run_demo, summary_table

    try:
        seconds = parse_duration(duration)
        rates = tuple(parse_rates(acceptance))
        if world not in DEMO_WORLDS:
            raise InputError(f"unknown world {world!r}; known: {', '.join(DEMO_WORLDS)}")
        if engine not in ("vllm", "sglang"):
            raise InputError(f"unknown engine {engine!r}; known: vllm, sglang")
    except AutotunerError as exc:
        fail(one_line(exc))
    console = Console()
    console.print(
        f"[bold]spec-autotuner demo[/]: {model} on a simulated {engine} ({gpu}), "
        f"{seconds:.0f}s{' (simulated clock)' if fast else ''}, {describe_load(world)}"
    )
    try:
        result = run_demo(
            model_id=model,
            gpu=gpu,
            duration_s=seconds,
            out=out,
            acceptance=rates,
            tensor_parallel=tp if tp is not None or engine == "sglang" else 1,
            drafter=drafter,
            console=console,
            live=not no_live,
            world=world,
            fast=fast,
            engine_kind=engine,
        )
    except AutotunerError as exc:
        fail(one_line(exc))
    console.print(summary_table(result))
    for line in log_lines(result):
        console.print(line, markup=False)
    # Paths unbroken (the terminal wraps them, not rich): they are to be copied.
    details = f"{result.restarts} restart(s); details: {out / 'demo.json'}"
    console.print(details, markup=False, soft_wrap=True)
    console.print(plots_line(result.plots), markup=False, soft_wrap=True)
