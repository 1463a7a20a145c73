"""`autotuner demo`: the whole loop on a laptop, no cluster and no GPU.

A simulated vLLM (cost model x a hidden error, restarted whenever its manifest changes) serves
metrics; the sidecar's controller runs in act mode against the manifest in a temp folder while
the load ramps from batch 4 to 512 and back. A live view shows what the tuner sees and does; at
the end, tokens served are compared with every static setup and a plot is written.
"""

from __future__ import annotations

import json
import math
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from autotuner.controller import build_controller
from autotuner.core.costmodel import Workload
from autotuner.core.hardware import datasheet
from autotuner.core.model import DrafterKind
from autotuner.core.registry import load_model
from autotuner.core.types import Decision, Setup
from autotuner.exporter import TunerMetrics
from autotuner.logs import configure
from autotuner.settings import cli_overrides, load_settings
from autotuner.sim.deployment import SimulatedDeployment, demo_manifest
from autotuner.sim.truth import TruthEngine, realistic_error

STATICS = (Setup(), Setup(spec_tokens=3), Setup(replay_window=16), Setup(replay_window=8))


@dataclass
class Sample:
    t: float
    demand: float
    setup: str
    tokens: float  # cumulative tokens served by the simulated server


@dataclass
class DemoResult:
    samples: list[Sample] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    tokens: float = 0.0
    statics: dict[str, float] = field(default_factory=dict)
    restarts: int = 0
    plot: Path | None = None


def ramp(start: float, duration: float, low: float = 4, high: float = 512):  # type: ignore[no-untyped-def]
    """Demand per engine: low -> high -> low over the run (a compressed day)."""

    def load(t: float) -> float:
        phase = min(max((t - start) / duration, 0.0), 1.0)
        return low + (high - low) * (1 - math.cos(2 * math.pi * phase)) / 2

    return load


def run_demo(
    *,
    model_id: str,
    gpu: str,
    duration_s: float,
    out: Path,
    acceptance: tuple[float, ...],
    tensor_parallel: int = 1,
    drafter: str | None = None,
    console: Console | None = None,
    live: bool = True,
) -> DemoResult:
    console = console or Console()
    model, hardware = load_model(model_id), datasheet(gpu)
    kind = DrafterKind(drafter) if drafter else None
    truth = TruthEngine(
        model,
        hardware,
        Workload(tensor_parallel=tensor_parallel, drafter=kind),
        error=realistic_error,
    )
    folder = Path(tempfile.mkdtemp(prefix="autotuner-demo-"))
    manifest = folder / "vllm.yaml"
    manifest.write_text(demo_manifest(model_id, Setup(spec_tokens=len(acceptance))))
    start = time.time() + 1.0
    load = ramp(start, duration_s)
    # One simulated day squeezed into the run: every duration is scaled alike.
    scale = duration_s / 86400
    gap = max(0.5, 180 * scale * 4)
    settings, _ = load_settings(
        cli=cli_overrides(
            [
                "mode=act",
                f"target.uri=file://{manifest}",
                f"model.id={model_id}",
                f"model.tensor_parallel={tensor_parallel}",
                *([f"model.drafter={drafter}"] if drafter else []),
                f"model.gpu={gpu}",
                f"loop.interval_s={max(0.2, duration_s / 400):.3f}",
                f"loop.window_s={max(1.0, duration_s / 90):.3f}",
                f"policy.dwell_s={900 * scale * 4:.3f}",
                f"policy.cooldown_s={1800 * scale * 4:.3f}",
                f"policy.verify_settle_s={max(1.0, 300 * scale * 4):.3f}",
                f"policy.batch_half_life_s={900 * scale * 4:.3f}",
                f"policy.horizon_s={4 * 3600 * scale:.3f}",
                f"policy.restart_downtime_s={gap:.3f}",
                "policy.max_changes_per_hour=100",
                f"policy.max_changes_per_day={max(6, int(6 * 86400 * scale / 3600) + 6)}",
                f"quality.after_deadline_s={max(1.0, 900 * scale * 4):.3f}",
                f"quality.baseline_max_age_s={max(1.0, 6 * 3600 * scale):.3f}",
                "quality.max_tokens=8",
                "limits.min_drafts=20",
                "limits.min_batch_samples=2",
                "policy.min_batch_weight=2",
                f"limits.max_age_s={max(5.0, duration_s / 20):.3f}",
            ]
        )
    )
    result = DemoResult()
    with SimulatedDeployment(
        manifest, truth, load=load, acceptance=acceptance, restart_gap_s=gap
    ) as deployment:
        settings = settings.model_copy(
            update={"source": settings.source.model_copy(update={"urls": [deployment.url]})}
        )
        logger = configure("json", "warning")
        controller = build_controller(settings, TunerMetrics(), logger)
        progress = Progress(
            TextColumn("[bold]demo"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            TimeRemainingColumn(),
        )
        task = progress.add_task("run", total=duration_s)
        end = start + duration_s
        with (
            Live(Group(progress), console=console, refresh_per_second=4, transient=False)
            if live
            else _NoLive() as view
        ):
            while time.time() < end:
                step_started = time.time()
                decision = controller.step()
                now = time.time()
                result.decisions.append(decision)
                result.samples.append(
                    Sample(
                        now - start,
                        load(now),
                        deployment.sim.setup.setup.label,
                        deployment.sim.total_generated,
                    )
                )
                progress.update(task, completed=min(now - start, duration_s))
                view.update(Group(progress, _view(controller, decision, load(now), deployment)))
                time.sleep(max(0.0, settings.loop.interval_s - (time.time() - step_started)))
        deployment.sim.advance_to(time.time())
        result.tokens = deployment.sim.total_generated
        result.restarts = deployment.restarts
    rates = list(acceptance)
    times = [s.t for s in result.samples]
    for static in STATICS:
        total = 0.0
        for i in range(1, len(times)):
            dt = times[i] - times[i - 1]
            total += truth.tokens_per_s(static, load(start + times[i]), rates) * dt
        result.statics[static.label] = total
    out.mkdir(parents=True, exist_ok=True)
    result.plot = write_plot(result, out / "demo.svg")
    (out / "demo.json").write_text(
        json.dumps(
            {
                "tokens": result.tokens,
                "statics": result.statics,
                "restarts": result.restarts,
                "decisions": [
                    d.model_dump(mode="json")
                    for d in result.decisions
                    if d.action.value in ("switch", "revert")
                ],
            },
            indent=2,
        )
    )
    return result


class _NoLive:
    def __enter__(self) -> _NoLive:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, renderable: object) -> None:
        return None


def _view(
    controller: object, decision: Decision, demand: float, deployment: SimulatedDeployment
) -> Table:
    snapshot = controller.metrics.current()  # type: ignore[attr-defined]
    obs = snapshot.observation
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    table.add_row("demand / engine", f"{demand:,.0f} requests")
    if obs is not None and obs.usable and obs.batch is not None:
        table.add_row(
            "observed",
            f"batch p50 {obs.batch.p50:.0f}, "
            f"{obs.generation_tokens_per_s or 0:,.0f} tokens/s, step "
            f"{(obs.step_time_s or 0) * 1e3:.1f} ms",
        )
        if obs.acceptance is not None:
            rates = ", ".join(f"{p:.2f}" for p in obs.acceptance.per_position)
            table.add_row("acceptance", f"{rates} (tau {obs.acceptance.tau:.2f})")
    elif obs is not None:
        table.add_row("observed", f"[yellow]unusable: {obs.reason.value if obs.reason else ''}[/]")
    table.add_row("running", f"[cyan]{deployment.sim.setup.setup.label}[/]")
    top = sorted(decision.predicted_tokens_per_s.items(), key=lambda kv: -kv[1])[:4]
    if top:
        table.add_row("predicted", ", ".join(f"{k} {v:,.0f}" for k, v in top))
    if snapshot.crossover:
        table.add_row(
            "crossover",
            f"{snapshot.crossover.loser} -> {snapshot.crossover.winner} "
            f"at batch {snapshot.crossover.batch}",
        )
    state = snapshot.state
    check = state.verification.quality if state.verification else state.last_quality
    if check is not None:
        table.add_row("quality", f"{check.status}: {check.summary}"[:150])
    table.add_row("decision", decision.sentence[:150])
    return table


def write_plot(result: DemoResult, path: Path) -> Path:
    """An SVG of demand, throughput and the running setup over the run (no plotting deps)."""
    width, height, left, top = 900, 420, 60, 20
    plot_w, plot_h = width - left - 20, 300
    if len(result.samples) < 2:
        path.write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
        return path
    t_end = result.samples[-1].t or 1.0
    demand_max = max(s.demand for s in result.samples) or 1.0
    rates = [0.0] + [
        (b.tokens - a.tokens) / max(b.t - a.t, 1e-9)
        for a, b in zip(result.samples, result.samples[1:], strict=False)
    ]
    rate_max = max(rates) or 1.0

    def x(t: float) -> float:
        return left + plot_w * t / t_end

    def y(value: float, top_value: float) -> float:
        return top + plot_h * (1 - value / top_value)

    palette = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#9d755d"]
    colours: dict[str, str] = {}
    bands = []
    for a, b in zip(result.samples, result.samples[1:], strict=False):
        colour = colours.setdefault(a.setup, palette[len(colours) % len(palette)])
        bands.append(
            f"<rect x='{x(a.t):.1f}' y='{top + plot_h + 8}' width='{x(b.t) - x(a.t):.1f}'"
            f" height='14' fill='{colour}'/>"
        )
    demand = " ".join(f"{x(s.t):.1f},{y(s.demand, demand_max):.1f}" for s in result.samples)
    served = " ".join(
        f"{x(s.t):.1f},{y(r, rate_max):.1f}" for s, r in zip(result.samples, rates, strict=True)
    )
    legend = "".join(
        f"<rect x='{left + 150 * i}' y='{height - 40}' width='12' height='12' fill='{c}'/>"
        f"<text x='{left + 150 * i + 16}' y='{height - 30}' font-size='12'>{label}</text>"
        for i, (label, c) in enumerate(colours.items())
    )
    svg = f"""<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}'
 font-family='sans-serif'>
<rect width='100%' height='100%' fill='white'/>
<text x='{left}' y='14' font-size='13'>demand per engine (grey, max {demand_max:,.0f}) and
 tokens/s served (blue, max {rate_max:,.0f}); bar: running setup</text>
<polyline points='{demand}' fill='none' stroke='#999' stroke-width='2'/>
<polyline points='{served}' fill='none' stroke='#1f5fa8' stroke-width='1.5'/>
<line x1='{left}' y1='{top + plot_h}' x2='{left + plot_w}' y2='{top + plot_h}' stroke='black'/>
{"".join(bands)}
{legend}
</svg>
"""
    path.write_text(svg)
    return path


def summary_table(result: DemoResult) -> Table:
    table = Table(title="Tokens served over the run")
    for column in ("strategy", "tokens", "vs tuned"):
        table.add_column(column)
    table.add_row("[bold]spec-autotuner[/]", f"{result.tokens:,.0f}", "1.00")
    for label, tokens in sorted(result.statics.items(), key=lambda kv: -kv[1]):
        table.add_row(
            f"static {label}",
            f"{tokens:,.0f}",
            f"{tokens / result.tokens:.2f}" if result.tokens else "-",
        )
    return table


__all__ = ["run_demo", "summary_table", "threading"]
