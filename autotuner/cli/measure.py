"""`autotuner bench`, `calibrate` and `canary`: measure the setups on your own hardware, fit
the cost model to what was measured, and run the quality canary by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from autotuner.cli.common import (
    DEFAULT_MODEL,
    fail,
    failing_on_bad_input,
    one_line,
    parse_int_list,
    resolve_hardware,
)
from autotuner.cli.render.measure import (
    print_bench_results,
    print_calibration,
    print_canary,
)
from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.durations import parse_duration
from autotuner.errors import AutotunerError, InputError


# A command runs longer than ~60 lines only by its signature: typer reads each option, with
# its help, from one annotated parameter.
def canary(
    url: Annotated[str, typer.Option(help="Server base URL (OpenAI-compatible /v1/completions).")],
    prompts: Annotated[
        str | None, typer.Option(help="Canary set: JSON list of {name, prompt, answer?}.")
    ] = None,
    against: Annotated[
        str | None, typer.Option(help="A saved run (--out of an earlier call) to compare with.")
    ] = None,
    out: Annotated[str | None, typer.Option(help="Save this run as JSON here.")] = None,
    model: Annotated[
        str | None, typer.Option(help="Served model name, if the server needs it.")
    ] = None,
    max_tokens: Annotated[int, typer.Option(help="Greedy tokens per prompt.")] = 32,
    seed: Annotated[int, typer.Option(help="Sampling seed sent with every request.")] = 0,
    timeout: Annotated[str, typer.Option(help="HTTP timeout per request.")] = "60s",
    priority: Annotated[
        int | None,
        typer.Option(help="vLLM request priority (only with --scheduling-policy priority)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
) -> None:
    """Send the canary set greedily, one prompt at a time; compare with an earlier run.

    Exit status 4 when the comparison says the outputs got worse."""
    from autotuner.canary import CanaryRun, Verdict, compare, load_canary, run_canary

    try:
        before = CanaryRun.load(against) if against else None
        canary_set = list(before.prompts) if before and prompts is None else load_canary(prompts)
        if before is not None:
            max_tokens, seed = before.max_tokens, before.seed
        run = run_canary(
            url,
            canary_set,
            model=model,
            max_tokens=max_tokens,
            seed=seed,
            timeout_s=parse_duration(timeout),
            priority=priority,
        )
        if out:
            Path(out).write_text(json.dumps(run.to_json(), indent=2) + "\n", encoding="utf-8")
        result = compare(before, run) if before else None
    except (AutotunerError, ValueError, OSError) as exc:
        fail(one_line(exc))
    print_canary(run, result, out, as_json=as_json)
    if result is not None and result.verdict is Verdict.WORSE:
        raise typer.Exit(4)


def bench(
    url: Annotated[
        str, typer.Option(help="The vLLM server (OpenAI-compatible), e.g. http://h:8000.")
    ],
    target: Annotated[str, typer.Option(help="How to switch setups: k8s://, file://, exec://.")],
    setups: Annotated[str, typer.Option(help="Comma-separated, e.g. plain,spec:4,replay:16.")],
    batches: Annotated[str, typer.Option(help="Concurrent streams, e.g. 16,64,128,256,512.")] = (
        "16,64,128,256,512"
    ),
    repeats: Annotated[int, typer.Option(help="Measured runs per point (after a warm-up).")] = 2,
    prompts: Annotated[str | None, typer.Option(help="Prompt file (one per line or JSON).")] = None,
    output_len: Annotated[int, typer.Option(help="Tokens per request (ignore_eos).")] = 256,
    out: Annotated[Path, typer.Option(help="Results folder (resumable).")] = Path("bench-results"),
    model: Annotated[str, typer.Option(help="Model for the predictions.")] = DEFAULT_MODEL,
    gpu: Annotated[str | None, typer.Option(help="Datasheet GPU for the predictions.")] = None,
    profile: Annotated[str | None, typer.Option(help="HardwareProfile JSON.")] = None,
    tp: Annotated[int, typer.Option(help="Tensor-parallel GPUs per replica.")] = 1,
    ready_timeout: Annotated[str, typer.Option(help="Wait for the server after a switch.")] = (
        "10m"
    ),
    kube_server: Annotated[str | None, typer.Option(help="API server URL for k8s targets.")] = None,
    canary: Annotated[
        bool, typer.Option(help="Run the quality canary once per setup (compared with the first).")
    ] = True,
    canary_prompts: Annotated[
        str | None, typer.Option(help="Canary set (JSON list); default built-in.")
    ] = None,
    canary_max_tokens: Annotated[int, typer.Option(help="Greedy tokens per canary prompt.")] = 32,
) -> None:
    """Measure every setup at every batch size on your own hardware; resumable."""
    from rich.progress import Progress

    from autotuner.actuators.targets import open_target
    from autotuner.bench.prompts import load_prompts
    from autotuner.bench.sweep import Plan, Sweep
    from autotuner.canary import load_canary
    from autotuner.core.types import Setup
    from autotuner.errors import SweepError

    with failing_on_bad_input():
        plan = Plan(
            setups=tuple(Setup.parse(s) for s in setups.split(",") if s.strip()),
            batches=tuple(parse_int_list(batches, "batches", minimum=1)),
            repeats=repeats,
            output_len=output_len,
            prompts=tuple(load_prompts(prompts)),
            canary=tuple(load_canary(canary_prompts)) if canary else (),
            canary_max_tokens=canary_max_tokens,
        )
        sweep_model = load_model(model)
        hardware = resolve_hardware(gpu, profile)
        actuator = open_target(target, kube_server=kube_server)
        timeout_s = parse_duration(ready_timeout)
    total = len(plan.setups) * len(plan.batches) * plan.repeats
    with Progress() as progress:
        task = progress.add_task("bench", total=total)
        sweep = Sweep(
            url=url,
            actuator=actuator,
            out=out,
            plan=plan,
            model=sweep_model,
            hardware=hardware,
            workload=Workload(tensor_parallel=tp),
            ready_timeout_s=timeout_s,
            on_point=lambda p: progress.update(
                task, advance=1, description=f"{p.setup} x{p.batch}"
            ),
        )
        progress.update(task, completed=len(sweep.finished()))
        try:
            points = sweep.run()
        except SweepError as exc:
            fail(one_line(exc), code=1)
    print_bench_results(points, sweep, out)


def calibrate(
    from_dir: Annotated[Path, typer.Option("--from", help="A bench results folder.")],
    model: Annotated[str, typer.Option(help="Model the sweep ran.")] = DEFAULT_MODEL,
    gpu: Annotated[str | None, typer.Option(help="Datasheet GPU to start from.")] = None,
    profile: Annotated[str | None, typer.Option(help="Profile to start from.")] = None,
    tp: Annotated[int, typer.Option(help="Tensor-parallel GPUs per replica.")] = 1,
    out: Annotated[Path, typer.Option(help="Where to write the fitted profile.")] = Path(
        "calibrated-profile.json"
    ),
) -> None:
    """Fit the cost model's efficiencies to a sweep's measured step times."""
    from autotuner.bench.calibrate import Measured
    from autotuner.bench.calibrate import calibrate as fit_profile
    from autotuner.core.predict.hardware import save_profile
    from autotuner.core.types import Setup

    try:
        results = json.loads((from_dir / "results.json").read_text())
        points = [
            Measured(Setup.parse(p["setup"]), p["batch"], tuple(p["acceptance"]), p["step_time_s"])
            for p in results["points"]
            if p["status"] == "ok" and p["step_time_s"]
        ]
        if not points:
            raise InputError(f"{from_dir}: no measured points with a step time")
        fit = fit_profile(
            load_model(model), resolve_hardware(gpu, profile), points, Workload(tensor_parallel=tp)
        )
    except OSError as exc:
        fail(f"{from_dir}: {exc.strerror}")
    except (AutotunerError, ValueError, KeyError) as exc:
        fail(one_line(exc))
    save_profile(fit.profile, out)
    print_calibration(fit, out)
