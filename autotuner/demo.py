"""`autotuner demo`: the whole loop on a laptop, no cluster and no GPU.

A simulated vLLM, or SGLang 0.5.23 with `engine_kind="sglang"` (cost model x a hidden error,
restarted whenever its manifest changes, serving nothing while it restarts, refusing args the
engine refuses at start) serves metrics; the sidecar's controller runs in act mode against the
manifest in a temp folder while the load ramps from batch 4 to 512 and back (in some worlds
with a plateau where the world's truth and the prior rank setups differently). A live view shows
what the tuner sees and does; at the end, tokens served are compared with every static setup the
model and the engine build can run, and the figures are drawn (with the `plots` extra). With
`fast`, everything runs on a simulated clock: the same steps, as fast as the CPU allows.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from autotuner import plots
from autotuner.controller import Controller
from autotuner.core.engine.capabilities import EngineCapabilities
from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_model
from autotuner.core.model.spec import DrafterKind, ModelSpec
from autotuner.core.predict.acceptance import from_conditional
from autotuner.core.predict.costmodel import predict
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import PLAIN, Action, Decision, Setup
from autotuner.errors import InputError
from autotuner.settings import Settings, cli_overrides, load_settings
from autotuner.sim.clock import EngineClock
from autotuner.sim.deployment import SimulatedDeployment, demo_manifest
from autotuner.sim.sglang import SglangServer, sglang_manifest
from autotuner.sim.sglang_startup import run_at
from autotuner.sim.truth import WORLDS, StepError, TruthEngine, realistic_error
from autotuner.sim.worlds import unchanged
from autotuner.sources.observers import ScrapeObserver
from autotuner.telling.exporter import TunerMetrics
from autotuner.telling.logs import configure
from autotuner.wiring import build_controller

Load = Callable[[float], float]
SGLANG = "sglang"


def explores(decision: Decision) -> bool:
    """A switch the policy made as an exploration (its sentence says so first)."""
    return decision.action is Action.SWITCH and decision.sentence.startswith("explore ")


def verdict(decision: Decision) -> bool:
    """The end of a change's verification: verified (kept) or reverted."""
    return decision.action is Action.REVERT or (
        decision.action is Action.KEEP and decision.sentence.startswith("verified ")
    )


@dataclass
class Exploration:
    at: float  # seconds into the run
    decision: Decision  # the switch that explored
    verdict: Decision | None = None  # its verification's end (None: the run ended first)

    @property
    def outcome(self) -> str:
        if self.verdict is None:
            return "unverified"
        return "reverted" if self.verdict.action is Action.REVERT else "kept"


@dataclass
class DemoResult:
    series: plots.DemoSeries
    decisions: list[Decision] = field(default_factory=list)
    tokens: float = 0.0  # served by the tuned run over the sampled span
    statics: dict[str, float] = field(default_factory=dict)  # label -> tokens, same span
    restarts: int = 0
    plots: list[Path] = field(default_factory=list)  # demo.png and demo.svg, when drawn
    explorations: list[Exploration] = field(default_factory=list)
    changing: Decision | None = None  # the switch whose verification is under way

    @property
    def best_static(self) -> str:
        return max(self.statics, key=lambda label: self.statics[label])

    def explorations_line(self) -> str:
        """How many explorations, and what became of them."""
        outcomes = [e.outcome for e in self.explorations]
        counts = ", ".join(f"{outcomes.count(o)} {o}" for o in dict.fromkeys(outcomes))
        return f"{len(outcomes)} exploration(s)" + (f": {counts}" if counts else "")


class WallClock:
    """The demo in real time: steps are paced by the loop interval."""

    def __call__(self) -> float:
        return time.time()

    def wait(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


# `fast`: the simulated engine's clock (time moves only when the loop waits, by exactly what
# it waits), so every run takes the same steps, windows and restarts however slow the machine
# is, and as fast as it allows.
Clock = WallClock | EngineClock


def ramp(start: float, duration: float, low: float = 4, high: float = 512) -> Load:
    """Demand per engine: low -> high -> low over the run (a compressed day)."""

    def load(t: float) -> float:
        phase = min(max((t - start) / duration, 0.0), 1.0)
        return low + (high - low) * (1 - math.cos(2 * math.pi * phase)) / 2

    return load


def plateau(
    start: float,
    duration: float,
    level: float,
    hold: float,
    low: float = 4,
    high: float = 512,
) -> Load:
    """The ramp with a plateau: demand rises to `level`, stays there for `hold` of the run,
    then goes on up to `high` and back (the rest of the day compressed around it)."""
    base = ramp(0.0, 1.0, low, high)
    reach = math.acos(1 - 2 * (level - low) / (high - low)) / (2 * math.pi)  # base(reach) = level
    before = reach * (1 - hold)

    def load(t: float) -> float:
        phase = min(max((t - start) / duration, 0.0), 1.0)
        if phase < before:
            return base(phase / (1 - hold))
        if phase < before + hold:
            return level
        return base((phase - hold) / (1 - hold))

    return load


# Where a world's demo load dwells (a plateau for PLATEAU_HOLD of the run); else the plain ramp.
# wrong-prior: batch 24, in the 16-64 band, where the prior ranks spec:3 a third above replay:16
# and that world's truth ranks replay:16 40% above spec:3. Once speculation's measured error is
# learned (it lands on what speculation adds, so fewer drafts look better and the tuner may
# first move to a lower K), speculation and replay are predicted about level there and the
# interval of the never-measured replay reaches some 19% past the running setup: more than the
# 10% a restart costs in this compressed day (2 x a 0.75 s restart over a 15 s horizon). The
# plain ramp passes that band in about 6 s, less than the cooldown after that first switch
# (7.5 s) plus the lag of the batch history, and above it replay wins by prediction.
PLATEAUS: dict[str, float] = {"wrong-prior": 24.0}
PLATEAU_HOLD = 0.3


@dataclass(frozen=True)
class DemoWorld:
    """What the simulated engine hides from the tuner: its step times' error against the cost
    model, and the workload it serves beyond the model and GPU (the tuner reads the workload
    from the engine's metrics, as it would a real one's)."""

    error: StepError
    served: dict[str, float] = field(default_factory=dict)  # Workload fields


# A world that names no request lengths has its simulated engine report none, so neither it nor
# the tuner prices the prompts' prefill. prefix-cache names them (4k-token prompts, 60% of their
# tokens served by the prefix cache) and both price them: speculation with the cache wins at low
# load, plain at the peak, and replay, which vLLM 0.33 runs on FlashInfer without the cache,
# prefills the cached tokens again. The best setup changes with the load.
DEMO_WORLDS: dict[str, DemoWorld] = {
    **{name: DemoWorld(error) for name, error in WORLDS.items()},
    "prefix-cache": DemoWorld(
        realistic_error,
        {"prefix_hit_rate": 0.6, "prompt_tokens": 4096.0, "generation_tokens": 512.0},
    ),
}


def world_load(world: str, start: float, duration: float) -> Load:
    level = PLATEAUS.get(world)
    if level is None:
        return ramp(start, duration)
    return plateau(start, duration, level, PLATEAU_HOLD)


def describe_load(world: str) -> str:
    level = PLATEAUS.get(world)
    held = f" (held at {level:.0f} for {PLATEAU_HOLD:.0%} of the run)" if level is not None else ""
    return f"load 4 -> 512 -> 4 per engine{held}"


def statics_for(
    model: ModelSpec,
    engine: EngineCapabilities,
    spec_tokens: int,
    drafter: bool,
    windows: tuple[int, ...] = (8, 16),
) -> tuple[Setup, ...]:
    """Every static setup the model and the engine build can run, within the deployed draft
    length and the policy's replay windows (no replay without recurrent state, no speculation
    without a drafter, replay with speculation only where the build has it and L >= 1 + K):
    the tuner is compared with each, held over the same span."""
    ks = range(1, spec_tokens + 1) if drafter else range(0)
    setups = [PLAIN, *(Setup(spec_tokens=k) for k in ks)]
    if model.is_hybrid:
        setups += [Setup(replay_window=w) for w in sorted(windows, reverse=True)]
        setups += [
            Setup(spec_tokens=k, replay_window=w)
            for k in ks
            for w in sorted(windows, reverse=True)
            if w >= k + 1
        ]
    serving = engine.serving(model)
    return tuple(s for s in setups if serving.accepts(s))


def demo_settings(
    *,
    model_id: str,
    gpu: str,
    duration_s: float,
    manifest: Path,
    tp: int,
    drafter: str | None,
    engine: str = "vllm",
) -> Settings:
    """The sidecar's settings with every duration scaled to one simulated day in the run."""
    scale = duration_s / 86400
    settings, _ = load_settings(
        cli=cli_overrides(
            [
                "mode=act",
                *([f"engine.kind={engine}", f"source.kind={engine}"] if engine != "vllm" else []),
                f"target.uri=file://{manifest}",
                f"model.id={model_id}",
                f"model.tensor_parallel={tp}",
                *([f"model.drafter={drafter}"] if drafter else []),
                f"model.gpu={gpu}",
                f"loop.interval_s={max(0.2, duration_s / 400):.3f}",
                f"loop.window_s={max(1.0, duration_s / 90):.3f}",
                f"policy.switch.dwell_s={900 * scale * 4:.3f}",
                f"policy.restart.cooldown_s={1800 * scale * 4:.3f}",
                f"policy.verification.settle_s={max(1.0, 300 * scale * 4):.3f}",
                f"policy.estimates.batch_half_life_s={900 * scale * 4:.3f}",
                f"policy.restart.horizon_s={4 * 3600 * scale:.3f}",
                f"policy.restart.downtime_s={restart_gap(duration_s):.3f}",
                # The simulated engine restarts in the same time into any setup (no compile).
                "policy.restart.first_compile_s=0",
                f"policy.forecast.period_s={duration_s:.3f}",
                f"policy.forecast.trend_window_s={3600 * scale * 4:.3f}",
                f"policy.forecast.min_trend_s={600 * scale * 4:.3f}",
                f"policy.forecast.profile_half_life_s={3 * 86400 * scale:.3f}",
                "policy.restart.max_per_hour=100",
                f"policy.restart.max_per_day={max(6, int(6 * 86400 * scale / 3600) + 6)}",
                f"quality.after_deadline_s={max(1.0, 900 * scale * 4):.3f}",
                f"quality.baseline_max_age_s={max(1.0, 6 * 3600 * scale):.3f}",
                "quality.max_tokens=8",
                "limits.min_drafts=20",
                "limits.min_batch_samples=2",
                "policy.estimates.min_batch_weight=2",
                f"limits.max_age_s={max(5.0, duration_s / 20):.3f}",
            ]
        )
    )
    return settings


def restart_gap(duration_s: float) -> float:
    """A vLLM restart (about 3 minutes) in the compressed day."""
    return max(0.5, 180 * duration_s / 86400 * 4)


FITTING_TP = (1, 2, 4, 8)
PEAK = 512  # requests per engine at the ramp's top


def fitting_truth(
    model: ModelSpec,
    gpu: str,
    tensor_parallel: int | None,
    drafter: DrafterKind | None,
    world: DemoWorld,
) -> TruthEngine:
    """The simulated engine's truth on `tensor_parallel` GPUs; None: the fewest of FITTING_TP
    on which plain decoding holds the ramp's peak (512 requests), else the fewest it fits on.
    InputError where the model does not fit."""
    fitting: list[TruthEngine] = []
    for tp in [tensor_parallel] if tensor_parallel else FITTING_TP:
        workload = Workload(tensor_parallel=tp, drafter=drafter, **world.served)
        truth = TruthEngine(model, datasheet(gpu), workload, error=world.error)
        room = predict(model, truth.hardware, PLAIN, [1], from_conditional([]), workload)
        if room.max_batch >= PEAK:
            return truth
        if room.max_batch >= 1:
            fitting.append(truth)
    if fitting:
        return fitting[0]
    given = f"{tensor_parallel} x {gpu}" if tensor_parallel else f"{FITTING_TP[-1]} x {gpu}"
    raise InputError(f"{model.name} does not fit {given}: give a larger --tp (or another --gpu)")


def run_demo(
    *,
    model_id: str,
    gpu: str,
    duration_s: float,
    out: Path,
    acceptance: tuple[float, ...],
    tensor_parallel: int | None = 1,
    drafter: str | None = None,
    console: Console | None = None,
    live: bool = True,
    world: str = "realistic",
    fast: bool = False,
    engine_kind: str = "vllm",
) -> DemoResult:
    """`fast`: on a simulated clock (EngineClock), as fast as the CPU allows. `engine_kind`:
    the simulated engine, vllm or sglang (SGLang 0.5.23: its args, start-up rules, metrics).
    `tensor_parallel` None: the fewest GPUs the model fits on."""
    console = console or Console()
    model = load_model(model_id)
    kind = DrafterKind(drafter) if drafter else None
    speculates = (kind or model.drafter) is not DrafterKind.NONE
    truth = fitting_truth(model, gpu, tensor_parallel, kind, DEMO_WORLDS[world])
    tensor_parallel = truth.workload.tensor_parallel
    manifest = Path(tempfile.mkdtemp(prefix="autotuner-demo-")) / f"{engine_kind}.yaml"
    first = Setup(spec_tokens=len(acceptance)) if speculates else PLAIN
    method = (kind or model.drafter).value if speculates else None
    write_manifest = sglang_manifest if engine_kind == SGLANG else demo_manifest
    manifest.write_text(write_manifest(model_id, first, drafter=method))
    settings = demo_settings(
        model_id=model_id,
        gpu=gpu,
        duration_s=duration_s,
        manifest=manifest,
        tp=tensor_parallel,
        drafter=drafter,
        engine=engine_kind,
    )
    engine = settings.engine.capabilities
    # What the engine really recomputes follows the build's rules for each setup, as the
    # tuner's prediction does.
    truth = replace(truth, prefix_caching=engine.serving(model).keeps_prefix_caching)
    clock: Clock = EngineClock(time.time()) if fast else WallClock()
    start = clock() + 1.0
    load = world_load(world, start, duration_s)
    result = DemoResult(
        series=plots.DemoSeries(
            title=f"{model.name} on {tensor_parallel} simulated {gpu}",
            seconds_per_hour=duration_s / 24,
        )
    )
    with SimulatedDeployment(
        manifest,
        truth,
        load=load,
        acceptance=acceptance,
        restart_gap_s=restart_gap(duration_s),
        engine=engine,
        clock=clock,
        watch=not fast,  # on the simulated clock the loop polls it (the gap passes on that clock)
        kind=SglangServer(model, acceptance) if engine_kind == SGLANG else None,
    ) as deployment:
        settings = settings.model_copy(
            update={"source": settings.source.model_copy(update={"urls": [deployment.url]})}
        )
        controller = build_controller(settings, TunerMetrics(), configure("json", "warning"))
        controller.clock = clock
        if isinstance(controller.observe, ScrapeObserver):
            controller.observe.scraper.clock = clock
        _loop(controller, deployment, clock, load, start, duration_s, result, console, live)
        result.restarts = deployment.restarts
    windows = settings.policy.candidates.replay_windows
    statics = statics_for(model, engine, len(acceptance), speculates, windows)
    runs = run_at if engine_kind == SGLANG else unchanged
    compare_statics(result, statics, truth, load, start, acceptance, runs)
    _write(result, out)
    return result


def _loop(
    controller: Controller,
    deployment: SimulatedDeployment,
    clock: Clock,
    load: Load,
    start: float,
    duration_s: float,
    result: DemoResult,
    console: Console,
    live: bool,
) -> None:
    """Step the sidecar every interval until the run ends, recording what it saw and did."""
    progress = Progress(
        TextColumn("[bold]demo"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeRemainingColumn(),
    )
    task = progress.add_task("run", total=duration_s)
    interval = controller.settings.loop.interval_s
    served: list[float] = []
    view = Live(Group(progress), console=console, refresh_per_second=4) if live else _NoLive()
    with view:
        while clock() < start + duration_s:
            step_started = clock()
            if deployment.watcher is None:
                deployment.poll()  # a restart the last step asked for may be over by now
            decision = controller.step()
            if deployment.watcher is None:
                deployment.poll()  # a change this step made takes the server down now
            now = clock()
            served.append(deployment.served())
            _record(result, controller, decision, now - start, load(now), deployment, served)
            progress.update(task, completed=min(now - start, duration_s))
            view.update(Group(progress, _view(controller, decision, load(now), deployment, result)))
            clock.wait(interval - (clock() - step_started))
    result.tokens = served[-1] - served[0] if served else 0.0


def _record(
    result: DemoResult,
    controller: Controller,
    decision: Decision,
    t: float,
    demand: float,
    deployment: SimulatedDeployment,
    served: list[float],
) -> None:
    """One step of the series: what was asked, seen, predicted, run and served."""
    series = result.series
    snapshot = controller.metrics.current()
    obs = snapshot.observation
    usable = obs is not None and obs.usable and obs.batch is not None
    series.t.append(t)
    series.demand.append(demand)
    series.observed_batch.append(obs.batch.mean if usable and obs and obs.batch else math.nan)
    series.crossover_batch.append(
        float(snapshot.crossover.batch) if snapshot.crossover else math.nan
    )
    series.setups.append(deployment.sim.setup.setup.label)
    rate = math.nan
    if len(served) > 1 and t > series.t[-2]:
        rate = (served[-1] - served[-2]) / (t - series.t[-2])
    series.tuned.append(rate)
    result.decisions.append(decision)
    if decision.action in (Action.SWITCH, Action.REVERT) and decision.target is not None:
        what = f"{decision.current.label} -> {decision.target.label}"
        series.decisions.append((t, f"explore {what}" if explores(decision) else what))
    if decision.action is Action.SWITCH:
        result.changing = decision
        if explores(decision):
            result.explorations.append(Exploration(t, decision))
    elif verdict(decision) and result.changing is not None:
        if result.explorations and result.explorations[-1].decision is result.changing:
            result.explorations[-1].verdict = decision
        result.changing = None


def compare_statics(
    result: DemoResult,
    statics: tuple[Setup, ...],
    truth: TruthEngine,
    load: Load,
    start: float,
    acceptance: tuple[float, ...],
    runs: Callable[[Setup, float], Setup] = unchanged,
) -> None:
    """What each static setup would have served over the same span, step by step (no restarts,
    no learning: the true tokens/s at each step's demand), run as the engine runs it at that
    demand (`runs`: SGLang's run_at); setups the engine runs alike are shown once."""
    times = result.series.t
    alike: dict[tuple[Setup, ...], Setup] = {}
    for static in statics:
        alike.setdefault(tuple(runs(static, batch) for batch in (1, 64, 512)), static)
    for static in alike.values():
        demands = [load(start + t) for t in times]
        rates = [truth.tokens_per_s(runs(static, d), d, acceptance) for d in demands]
        result.series.statics[static.label] = rates
        result.statics[static.label] = sum(
            rates[i] * (times[i] - times[i - 1]) for i in range(1, len(times))
        )


def _write(result: DemoResult, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if result.statics and len(result.series.t) > 1 and plots.available():
        best = result.best_static
        result.series.title += (
            f": tuned {result.tokens:,.0f} tokens, best static ({best}) {result.statics[best]:,.0f}"
        )
        result.plots = plots.save(plots.demo_figure(result.series, best), out / "demo")
    (out / "demo.json").write_text(json.dumps(_document(result), indent=2))


def _document(result: DemoResult) -> dict[str, Any]:
    series = result.series

    def finite(values: list[float]) -> list[float | None]:
        return [round(v, 3) if math.isfinite(v) else None for v in values]

    return {
        "tokens": result.tokens,
        "statics": result.statics,
        "restarts": result.restarts,
        "decisions": [
            d.model_dump(mode="json")
            for d in result.decisions
            if d.action in (Action.SWITCH, Action.REVERT)
        ],
        "explorations": [
            {
                "at_s": round(e.at, 3),
                "from": e.decision.current.label,
                "to": e.decision.target.label if e.decision.target else None,
                "sentence": e.decision.sentence,
                "outcome": e.outcome,
                "verdict": e.verdict.sentence if e.verdict else None,
            }
            for e in result.explorations
        ],
        "series": {
            "t": finite(series.t),
            "demand": finite(series.demand),
            "observed_batch": finite(series.observed_batch),
            "crossover_batch": finite(series.crossover_batch),
            "setup": series.setups,
            "tuned_tokens_per_s": finite(series.tuned),
            "static_tokens_per_s": {k: finite(v) for k, v in series.statics.items()},
        },
    }


class _NoLive:
    def __enter__(self) -> _NoLive:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, renderable: object) -> None:
        return None


def _view(
    controller: object,
    decision: Decision,
    demand: float,
    deployment: SimulatedDeployment,
    result: DemoResult | None = None,
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
    if result is not None and result.explorations:
        table.add_row("explorations", result.explorations_line())
    return table


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


def log_lines(result: DemoResult) -> list[str]:
    """What the tuner changed and how each change was judged, then the explorations' count."""
    lines = [
        f"  {d.action.value}: {d.sentence}"
        for d in result.decisions
        if d.action in (Action.SWITCH, Action.REVERT) or verdict(d)
    ]
    return [*lines, result.explorations_line()]
