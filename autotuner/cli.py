"""Command line: `autotuner predict | ...`. A thin adapter over the core: parse, call, render.

A command runs longer than the project's ~60 lines only by its signature: typer reads each
option, with its help, from one annotated parameter, so the options cannot move elsewhere
without losing `--help`. Bodies stay short; what they render lives in functions below them."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from autotuner import __version__
from autotuner.core.engine.args import EngineArgs, SpeculativeConfig
from autotuner.core.engine.args import parse as parse_engine_args
from autotuner.core.engine.capabilities import PRESETS, EngineCapabilities
from autotuner.core.engine.drafter import DECLARED, DEFAULT, LIVE
from autotuner.core.engine.resolution import Fallback, args_table, resolve
from autotuner.core.engine.workload import Workload
from autotuner.core.model.registry import load_draft_model, load_model
from autotuner.core.model.spec import DrafterKind
from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.predict import acceptance as acc
from autotuner.core.predict.hardware import HardwareProfile, datasheet, load_profile
from autotuner.core.predict.report import build_report
from autotuner.core.types import Observation
from autotuner.durations import parse_duration
from autotuner.errors import AutotunerError, InputError

if TYPE_CHECKING:
    from autotuner.bench.sweep import Point, Sweep

DEFAULT_MODEL = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"

# Plain (click) help: rich's option tables cut long option names at 80 columns.
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Tune speculative decoding and ReplaySSM for hybrid-model vLLM deployments.",
)


def fail(message: str, code: int = 2) -> NoReturn:
    """One line on stderr and a non-zero exit: how every bad input ends."""
    print(f"autotuner: error: {message}", file=sys.stderr)
    raise typer.Exit(code)


def parse_int_list(text: str, what: str, *, minimum: int = 0) -> list[int]:
    """'1,8,32' or '1..8' (inclusive) or a mix: '1..4,8'."""
    values: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if ".." in part:
                start, end = (int(x) for x in part.split("..", 1))
                if end < start:
                    raise ValueError
                values.extend(range(start, end + 1))
            elif part:
                values.append(int(part))
    except ValueError:
        raise InputError(f"{what}: cannot read {text!r}; use e.g. 1,8,32 or 1..8") from None
    if not values or min(values) < minimum:
        raise InputError(f"{what}: need values >= {minimum}, got {text!r}")
    return sorted(set(values))


def parse_rates(text: str) -> list[float]:
    try:
        rates = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"acceptance: cannot read {text!r}; use e.g. 0.9,0.8,0.7") from None
    if not rates:
        raise InputError("acceptance: no rates given")
    return rates


def resolve_hardware(gpu: str | None, profile: str | None) -> HardwareProfile:
    if gpu and profile:
        raise InputError("give --gpu or --profile, not both")
    if profile:
        return load_profile(profile)
    return datasheet(gpu or "H200")


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False,
) -> None:
    if version:
        print(__version__)
        raise typer.Exit(0)


@app.command()
def predict(
    model: Annotated[
        str, typer.Option(help="Registry id, config.json path or model directory.")
    ] = DEFAULT_MODEL,
    gpu: Annotated[str | None, typer.Option(help="Datasheet GPU name (default H200).")] = None,
    profile: Annotated[
        str | None, typer.Option(help="HardwareProfile JSON from kernels_probe.")
    ] = None,
    batch: Annotated[str, typer.Option(help="Batch sizes, e.g. 1,8,32 or 1..16.")] = (
        "1,8,32,128,256,512"
    ),
    acceptance: Annotated[
        float | None, typer.Option(help="Constant per-position acceptance rate p.")
    ] = None,
    acceptance_per_position: Annotated[
        str | None, typer.Option(help="Conditional rate per draft position, e.g. 0.9,0.8,0.7.")
    ] = None,
    spec_tokens: Annotated[
        str | None,
        typer.Option(help="Draft lengths K to compare (default 1..4, or 1..positions given)."),
    ] = None,
    replay_windows: Annotated[str, typer.Option(help="Replay windows L to compare.")] = "8,16,32",
    context: Annotated[
        float | None, typer.Option(help="Mean context length (tokens; default 4096).")
    ] = None,
    tp: Annotated[
        int | None, typer.Option(help="Tensor-parallel GPUs per replica (default 1).")
    ] = None,
    drafter: Annotated[
        str | None,
        typer.Option(
            help="The deployed drafter: mtp, eagle, eagle3, ngram, suffix or draft_model (with "
            "--draft-model). Without one (none in the model's config or --vllm-args) "
            "speculation is not predicted."
        ),
    ] = None,
    draft_model: Annotated[
        str | None,
        typer.Option(
            help="The draft model of --drafter draft_model (config.json path, model directory "
            "or built-in id): sized from its own config."
        ),
    ] = None,
    vllm_args: Annotated[
        str | None,
        typer.Option(
            help="The engine's vLLM command line (one quoted string): its "
            "--tensor-parallel-size, --gpu-memory-utilization, --max-num-seqs, --max-model-len, "
            "--kv-cache-dtype, --mamba-* and --speculative-config are used over --tp, "
            "--context and --drafter; the report says where each input came from."
        ),
    ] = None,
    ssm_state_dtype: Annotated[
        str | None,
        typer.Option(
            help="vLLM's --mamba-ssm-cache-dtype (auto, float32, bfloat16, float16); default: "
            "as vLLM resolves it from the config."
        ),
    ] = None,
    weights: Annotated[
        str | None,
        typer.Option(
            help="Stored weight format, overriding what the files say: bf16, fp16, fp32, fp8, "
            "int8, nvfp4, mxfp4, int4 (the report says it is an override)."
        ),
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            help="What the vLLM build accepts: upstream (replay or speculation, not "
            "both) or replay-spec. Winners are chosen among what it accepts."
        ),
    ] = "upstream",
    adaptive_verification: Annotated[
        bool,
        typer.Option(
            help="The build has vLLM's adaptive verification (PR #47808): predict "
            "spec:K@adaptive too (on by itself when --vllm-args turn it on)."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    detail: Annotated[bool, typer.Option(help="Also print every setup at every batch.")] = False,
) -> None:
    """Predict tokens/s of every setup at each batch size, the winners and the crossovers."""
    try:
        batches = parse_int_list(batch, "batch", minimum=1)
        rates = parse_rates(acceptance_per_position) if acceptance_per_position else None
        default_ks = f"1..{len(rates)}" if rates else "1..4"
        ks = parse_int_list(spec_tokens or default_ks, "spec-tokens", minimum=1)
        windows = parse_int_list(replay_windows, "replay-windows", minimum=2)
        if acceptance is not None and acceptance_per_position is not None:
            raise InputError("give --acceptance or --acceptance-per-position, not both")
        if rates is not None:
            if len(rates) < max(ks):
                raise InputError(
                    f"acceptance is given for {len(rates)} position(s) but K up to {max(ks)} "
                    "was asked: the model never extrapolates past observed positions"
                )
            estimate = acc.from_conditional(rates)
        else:
            estimate = acc.geometric(0.7 if acceptance is None else acceptance, max(ks))
            if acceptance is not None and not 0 <= acceptance <= 1:
                raise InputError("acceptance must lie in [0, 1]")
        live = _vllm_args(vllm_args)
        kind = _drafter_kind(drafter, draft_model)
        if engine not in PRESETS:
            raise InputError(f"unknown engine {engine!r}; known: {', '.join(PRESETS)}")
        spec = load_model(
            model,
            weights=weights,
            ssm_state_dtype=ssm_state_dtype or (live.mamba_ssm_cache_dtype if live else None),
            mamba_cache_dtype=live.mamba_cache_dtype if live else None,
        )
        resolved = resolve(
            spec,
            live,
            Fallback(
                context_tokens=4096 if context is None else context,
                tensor_parallel=1 if tp is None else tp,
                drafter=kind,
                draft_model=draft_model,
                context_source=DEFAULT if context is None else "--context",
                tensor_parallel_source=DEFAULT if tp is None else "--tp",
                drafter_source=DECLARED,
            ),
            load_draft=load_draft_model,
        )
        hardware = resolve_hardware(gpu, profile)
        report = build_report(
            resolved.model,
            hardware,
            estimate,
            resolved.workload,
            batches=batches,
            spec_tokens=ks,
            windows=windows,
            engine=_predicted_engine(engine, adaptive_verification, live),
            drafter=resolved.drafter,
            acceptance_measured=acceptance is not None or rates is not None,
            inputs=resolved.table(),
        )
    except (AutotunerError, ValueError) as exc:
        fail(_one_line(exc))
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        render_report(report, detail=detail)


def _predicted_engine(
    preset: str, adaptive_verification: bool, live: EngineArgs | None
) -> EngineCapabilities:
    """The preset, with adaptive verification where asked for or running in the live args."""
    speculative = live.speculative if live is not None else None
    if adaptive_verification or (speculative and speculative.enable_adaptive_verification):
        return PRESETS[preset].model_copy(update={"adaptive_verification": True})
    return PRESETS[preset]


def _vllm_args(text: str | None) -> EngineArgs | None:
    """A vLLM command line given as one string, read as the sidecar reads the live args."""
    if text is None:
        return None
    import shlex

    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise InputError(f"--vllm-args: cannot split the command line ({exc})") from None
    return parse_engine_args(words)


def _drafter_kind(drafter: str | None, draft_model: str | None) -> DrafterKind | None:
    if drafter is None:
        return DrafterKind.DRAFT_MODEL if draft_model else None
    aliases = {"eagle3": DrafterKind.EAGLE}
    try:
        kind = aliases.get(drafter.lower()) or DrafterKind(drafter.lower())
    except ValueError:
        known = ", ".join([*(k.value for k in DrafterKind), "eagle3"])
        raise InputError(f"unknown drafter {drafter!r}; known: {known}") from None
    if draft_model and kind is not DrafterKind.DRAFT_MODEL:
        raise InputError(f"--draft-model is the model of --drafter draft_model, not {drafter}")
    return kind


def _one_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if len(text) == 1 else " ".join(line.strip() for line in text)


def render_report(report: dict[str, Any], *, detail: bool, console: Console | None = None) -> None:
    console = console or Console()
    _print_model_and_inputs(report, console)
    rates = ", ".join(f"{p:.2f}" for p in report["acceptance"]["conditional"])
    console.print(f"  acceptance per position: {rates}; engine: {report['engine']['name']}")
    rows = _by_batch(report)
    console.print(_winners_table(report, rows))
    _print_report_notes(report, console)
    if detail:
        console.print(_every_setup_table(report, rows))


def _by_batch(report: dict[str, Any]) -> dict[int, dict[str, dict[str, Any]]]:
    rows: dict[int, dict[str, dict[str, Any]]] = {}
    for p in report["predictions"]:
        rows.setdefault(p["batch"], {})[p["setup"]["label"]] = p
    return rows


def _print_model_and_inputs(report: dict[str, Any], console: Console) -> None:
    summary = report["model"]
    workload = report["workload"]
    console.print(
        f"[bold]{summary['name']}[/] on [bold]{report['gpu']}[/] ({report['profile_source']}), "
        f"TP={workload['tensor_parallel']}, context {workload['context_tokens']:.0f} tokens"
    )
    console.print(
        f"  {summary['ssm_layers']} SSM / {summary['attention_layers']} attention / "
        f"{summary['moe_layers']} MoE blocks; {summary['total_params_b']}B params "
        f"({summary['active_params_b']}B active, {summary['weight_gib']} GiB); state "
        f"{summary['ssm_state_mib_per_layer']} MiB/layer, {summary['ssm_state_mib_per_request']} "
        f"MiB/request; ring entry {summary['ring_entry_kib']} KiB; KV "
        f"{summary['kv_kib_per_token']} KiB/token; drafter {summary['drafter']}"
    )
    drafter = report.get("drafter")
    if drafter:
        predicted = "" if drafter["speculation_predicted"] else "; speculation not predicted"
        console.print(
            f"  deployed drafter: {escape(drafter['description'])} ({drafter['source']}){predicted}"
        )
    if report.get("inputs"):
        console.print("  inputs: " + escape(_inputs_line(report["inputs"])))
        for name, item in report["inputs"].items():
            said = item["source"] != DEFAULT or item["note"].startswith("bounded")
            if item["note"] and name != "drafter" and said:
                console.print(f"  [dim]{name}: {escape(item['note'])}[/]")


def _winners_table(report: dict[str, Any], rows: dict[int, dict[str, dict[str, Any]]]) -> Table:
    table = Table(title="Predicted decode throughput (tokens/s; x = ratio to plain)")
    for column in ("batch", "plain", "best spec", "best replay", "best replay+spec", "winner"):
        table.add_column(column, justify="right" if column == "batch" else "left")
    best = {row["batch"]: row for row in report["best"]}
    for batch_size, by_label in sorted(rows.items()):
        plain = by_label["plain"]
        cells = [str(batch_size), _cell(plain, plain)]
        for family in ("spec", "replay", "replay+spec"):
            members = [p for p in by_label.values() if p["setup"]["name"] == family]
            top = max(members, key=lambda p: p["tokens_per_s"], default=None)
            cell = _cell(top, plain) if top else "-"
            cells.append(f"[dim]{cell} (refused)[/]" if top and top["refused_by_engine"] else cell)
        winner = best[batch_size]
        ratio = winner["ratio_to_plain"]
        cells.append(f"[bold]{winner['setup']}[/]" + (f" x{ratio:.2f}" if ratio else ""))
        table.add_row(*cells)
    return table


def _print_report_notes(report: dict[str, Any], console: Console) -> None:
    refused = {p["refused_by_engine"] for p in report["predictions"] if p["refused_by_engine"]}
    for reason in sorted(refused):
        console.print(f"[dim](refused) {reason}: predicted, never chosen[/]")
    if report["crossovers"]:
        console.print("Winner changes (first batch of the new winner):")
        for c in report["crossovers"]:
            console.print(f"  batch {c['batch']:>4}: {c['from']} -> {c['to']}")
    flips = {k: v for k, v in report["versus_plain"].items() if v and k.startswith("spec:")}
    for label, batches in flips.items():
        console.print(f"  {label} vs plain flips at batch {', '.join(map(str, batches))}")
    _print_adaptive(report, console)
    if report["quick_rule"]:
        console.print("Quick rule (speculation with state copies, state-dominated steps):")
    for rule in report["quick_rule"]:
        console.print(
            f"  T={rule['drafts']}: copy_rule(p={rule['rate']:.2f}) = {rule['value']:.2f} -> "
            f"{rule['verdict']} (break-even p = {rule['break_even_rate']:.2f})"
        )
    infeasible = sorted({p["setup"]["label"] for p in report["predictions"] if not p["feasible"]})
    if infeasible:
        capacity = report["capacity"]
        limited = ", ".join(f"{label} {capacity[label]}" for label in infeasible)
        console.print(
            "* = batch does not fit in memory (or is above --max-num-seqs); shown is what the "
            f"engine reaches by queueing. Max batch: {limited}"
        )
    for note in report["notes"]:
        console.print(f"[dim]note: {note}[/]")


def _print_adaptive(report: dict[str, Any], console: Console) -> None:
    """How many of its K drafts adaptive verification is predicted to verify at each batch."""
    verified: dict[str, list[str]] = {}
    for p in report["predictions"]:
        if p["setup"]["adaptive"] and not p["refused_by_engine"]:
            verified.setdefault(p["setup"]["label"], []).append(f"{p['spec_tokens']}@{p['batch']}")
    if verified:
        console.print("Adaptive verification, drafts verified of K (at batch):")
    for label, counts in verified.items():
        console.print(f"  {label}: {', '.join(counts)}")


def _every_setup_table(report: dict[str, Any], rows: dict[int, dict[str, dict[str, Any]]]) -> Table:
    full = Table(title="Every setup")
    for column in ("setup", "batch", "tokens/s", "x plain", "step ms", "tau", "fits"):
        full.add_column(column)
    for p in report["predictions"]:
        plain = rows[p["batch"]]["plain"]
        versus = p["tokens_per_s"] / plain["tokens_per_s"] if plain["tokens_per_s"] else 0.0
        full.add_row(
            p["setup"]["label"],
            str(p["batch"]),
            f"{p['tokens_per_s']:.0f}",
            f"{versus:.2f}",
            f"{p['step_time_s'] * 1e3:.2f}",
            f"{p['tau']:.2f}",
            "yes" if p["feasible"] else "no",
        )
    return full


def _inputs_line(inputs: dict[str, dict[str, Any]]) -> str:
    """`name value (source)` for every input the prediction used, the drafter aside."""
    parts = []
    for name, item in inputs.items():
        if name == "drafter":
            continue
        value = "-" if item["value"] is None else item["value"]
        mark = "" if item["modelled"] else ", not modelled"
        parts.append(f"{name} {value} ({item['source']}{mark})")
    return ", ".join(parts)


def _cell(p: dict[str, Any], plain: dict[str, Any]) -> str:
    mark = "" if p["feasible"] else "*"
    if p is plain:
        return f"{p['tokens_per_s']:,.0f}{mark}"
    ratio = p["tokens_per_s"] / plain["tokens_per_s"] if plain["tokens_per_s"] else 0.0
    setup = p["setup"]
    knobs = " ".join(
        f"{name}{value}"
        for name, value in (("K", setup["spec_tokens"]), ("L", setup["replay_window"]))
        if value
    ) + (" adaptive" if setup.get("adaptive") else "")
    return f"{knobs}: {p['tokens_per_s']:,.0f}{mark} x{ratio:.2f}"


@app.command()
def observe(
    url: Annotated[
        list[str], typer.Option(help="vLLM /metrics URL (repeat for replicas) or Prometheus URL.")
    ],
    source: Annotated[str, typer.Option(help="vllm (direct scrape) or prometheus.")] = "vllm",
    window: Annotated[str, typer.Option(help="Evaluation window, e.g. 30s or 5m.")] = "30s",
    interval: Annotated[str, typer.Option(help="Scrape interval (vllm source).")] = "1s",
    selector: Annotated[
        str, typer.Option(help='Prometheus label selector, e.g. namespace="llm",model_name="x".')
    ] = "",
    scrape_interval: Annotated[
        str, typer.Option(help="Prometheus's scrape interval (range-query step).")
    ] = "15s",
    min_drafts: Annotated[float, typer.Option(help="Drafts needed to trust acceptance.")] = 200,
    timeout: Annotated[str, typer.Option(help="HTTP timeout per request.")] = "5s",
    target: Annotated[
        str | None,
        typer.Option(
            help="The deployment (k8s://NS/deployment/NAME, file://PATH or exec://PATH): its live "
            "args give the K schedule and the drafter, so that each position's acceptance counts "
            "only the drafts that proposed it."
        ),
    ] = None,
    kube_server: Annotated[str | None, typer.Option(help="API server URL (k8s targets).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the Observation as JSON.")] = False,
) -> None:
    """Scrape vLLM (or query Prometheus) over a window and print the Observation.

    Exit status 3 when the window is unusable (the reason is printed)."""
    from autotuner.actuators.targets import open_target
    from autotuner.core.observe.observation import read_acceptance
    from autotuner.errors import ActuatorError
    from autotuner.sources.prometheus_api import PrometheusSource
    from autotuner.sources.vllm_scrape import VllmScraper

    live = None
    if target:
        try:
            live = open_target(target, kube_server=kube_server).read()
        except ActuatorError as exc:
            fail(_one_line(exc), code=1)
        except (AutotunerError, ValueError) as exc:
            fail(_one_line(exc))
    try:
        window_s, interval_s = parse_duration(window), parse_duration(interval)
        timeout_s = parse_duration(timeout)
        limits = ObservationLimits(min_drafts=min_drafts, max_age_s=max(60.0, 2 * interval_s))
        if source == "vllm":
            scraper = VllmScraper(url, timeout_s=timeout_s)
            result = scraper.observe(window_s, interval_s, limits=limits)
        elif source == "prometheus":
            if len(url) != 1:
                raise InputError("the prometheus source takes exactly one --url")
            step = parse_duration(scrape_interval)
            limits = limits.model_copy(update={"max_age_s": max(limits.max_age_s, 3 * step)})
            prom = PrometheusSource(url[0], selector, timeout_s=timeout_s, scrape_interval_s=step)
            result = prom.observe(window_s, limits=limits)
        else:
            raise InputError(f"unknown source {source!r}; use vllm or prometheus")
    except (AutotunerError, ValueError) as exc:
        fail(_one_line(exc))
    if live is not None:
        result = read_acceptance(result, live.setup, live.speculative_config)
    if as_json:
        print(result.model_dump_json(indent=2))
    else:
        render_observation(result)
    if not result.usable:
        raise typer.Exit(3)


@app.command()
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
    import dataclasses

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
        fail(_one_line(exc))
    if result is None:
        print(
            f"canary: {len(run.outputs)} prompts, {run.completion_tokens} tokens "
            f"in {run.duration_s:.1f}s" + (f"; saved to {out}" if out else "")
        )
        return
    if as_json:
        print(json.dumps(dataclasses.asdict(result), indent=2, default=str))
    else:
        print(f"canary: {result.verdict.value}: {result.summary}")
        for item in result.prompts:
            if not item.identical:
                print(
                    f"  {item.name}: first divergence at char {item.first_divergence}/{item.length}"
                )
    if result.verdict is Verdict.WORSE:
        raise typer.Exit(4)


def render_observation(obs: Observation, console: Console | None = None) -> None:
    console = console or Console()
    console.print(f"[bold]{obs.source}[/] window {obs.duration_s:.1f}s, {obs.series} engine series")
    if not obs.usable:
        reason = obs.reason.value if obs.reason else "unknown"
        console.print(f"[red]unusable[/]: {reason}: {obs.detail}")
        return
    if obs.batch:
        b = obs.batch
        console.print(
            f"  batch (running/engine): mean {b.mean:.1f}, p50 {b.p50:.0f}, p90 {b.p90:.0f}, "
            f"p99 {b.p99:.0f} ({b.samples} samples)"
        )
    if obs.acceptance:
        a = obs.acceptance
        bounds = a.lower_bound or (False,) * len(a.per_position)
        rates = ", ".join(
            f"{'>=' if bound else ''}{p:.2f} [{lo:.2f}-{hi:.2f}]"
            for p, lo, hi, bound in zip(
                a.per_position, a.per_position_low, a.per_position_high, bounds, strict=True
            )
        )
        trust = "" if a.sufficient else f" ({a.note})"
        console.print(
            f"  acceptance per position: {rates}; tau {a.tau:.2f} over {a.drafts:.0f} drafts{trust}"
        )
        if a.proposals == "schedule":
            shares = ", ".join(f"{s:.2f}" for s in a.proposed_share)
            naive = ", ".join(f"{p:.2f}" for p in a.naive_per_position)
            console.print(
                f"  read with the schedule {escape(a.read_with or '')}: share of drafts that "
                f"proposed each position {shares} (rates as counted, over every draft: {naive})"
            )
        if a.proposals_note:
            console.print(f"  [yellow]{escape(a.proposals_note)}[/]")
    else:
        console.print("  speculation off (no spec-decode series)")
    for label, value, unit in (
        ("step time", obs.step_time_s and obs.step_time_s * 1e3, "ms"),
        (
            "time per output token",
            obs.time_per_output_token_s and obs.time_per_output_token_s * 1e3,
            "ms",
        ),
        ("generation", obs.generation_tokens_per_s, "tokens/s"),
        ("mean context", obs.mean_context_tokens, "tokens"),
        ("waiting", obs.waiting_mean, "requests"),
        ("KV cache usage", obs.kv_cache_usage_mean, ""),
        ("preemptions", obs.preemptions, ""),
    ):
        if value is not None:
            console.print(f"  {label}: {value:,.3f} {unit}".rstrip())
    if obs.live_setup:
        live = obs.live_setup
        console.print(
            f"  live setup: {live.setup.label} (replay {live.replay}, window "
            f"{live.replay_window}, ssm dtype {live.mamba_ssm_cache_dtype}, cache mode "
            f"{live.mamba_cache_mode})"
        )


@app.command()
def apply(
    setup: Annotated[str, typer.Option(help="plain | spec:K | replay:L | replay+spec:K:L")],
    target: Annotated[
        str, typer.Option(help="k8s://NS/deployment/NAME(/CONTAINER), file://PATH or exec://PATH")
    ],
    schedule: Annotated[
        str | None, typer.Option(help="Per-batch K bands, e.g. 1-64:3,65-128:1,129-512:0.")
    ] = None,
    dry_run: Annotated[bool, typer.Option(help="Show the change; write nothing.")] = False,
    kube_server: Annotated[
        str | None, typer.Option(help="API server URL (e.g. kubectl proxy); default in-cluster.")
    ] = None,
    allow_surge: Annotated[bool, typer.Option(help="Patch even with maxSurge >= 1.")] = False,
    allow_low_precision_replay: Annotated[
        bool, typer.Option(help="Allow replay with a non-fp32 SSM state (it drifts).")
    ] = False,
    force: Annotated[bool, typer.Option(help="Apply even to a paused target.")] = False,
) -> None:
    """Write a setup into the vLLM deployment's args (only the managed flags change),
    recorded in the tuner's state on the target, with an Event."""
    from autotuner.actuators.manual import apply_by_hand
    from autotuner.actuators.targets import open_target
    from autotuner.core.types import Setup
    from autotuner.errors import ActuatorError

    try:
        wanted = Setup.parse(f"{setup}@{schedule}" if schedule else setup)
        actuator = open_target(
            target,
            kube_server=kube_server,
            allow_surge=allow_surge,
            allow_low_precision_replay=allow_low_precision_replay,
        )
        change = apply_by_hand(actuator, wanted, dry_run=dry_run, force=force)
    except ActuatorError as exc:
        fail(_one_line(exc), code=1)
    except (AutotunerError, ValueError) as exc:
        fail(_one_line(exc))
    live, result = change.live, change.result
    if not result.changed:
        print(f"{live.description}: already {wanted.label}; nothing to change")
        return
    print(result.diff, end="")
    verb = "would change" if dry_run else "changed"
    print(f"{live.description}: {verb} {live.setup.label} -> {wanted.label}", flush=True)
    if change.event_error:
        print(f"autotuner: warning: event not posted: {change.event_error}", file=sys.stderr)


@app.command()
def status(
    target: Annotated[
        str, typer.Option(help="k8s://NS/deployment/NAME(/CONTAINER), file://PATH or exec://PATH")
    ],
    kube_server: Annotated[str | None, typer.Option(help="API server URL.")] = None,
    lease: Annotated[
        str | None, typer.Option(help="Lease name to report the leader of (k8s targets).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Show the live args, the setup they configure, the engine inputs they set (and which are
    left to vLLM's defaults), the deployed drafter, the persisted state, pause and leader."""
    from autotuner.actuators.flags import vllm_tokens
    from autotuner.actuators.targets import open_target
    from autotuner.errors import ActuatorError

    try:
        live = open_target(target, kube_server=kube_server).read()
        leader = _lease_holder(target, kube_server, lease) if lease else None
        engine_args = parse_engine_args(vllm_tokens(live.command, live.args))
    except ActuatorError as exc:
        fail(_one_line(exc), code=1)
    except (AutotunerError, ValueError) as exc:
        fail(_one_line(exc))
    inputs = {name: i.model_dump(mode="json") for name, i in args_table(engine_args).items()}
    drafter = _status_drafter(engine_args.speculative)
    report = {
        "target": live.description,
        "setup": live.setup.label,
        "command": list(live.command),
        "args": list(live.args),
        "engine_args": inputs,
        "drafter": drafter,
        "paused": live.paused,
        "rollout": {
            "done": live.rollout.done,
            "stuck": live.rollout.stuck,
            "detail": live.rollout.detail,
        },
        "state": json.loads(live.state) if live.state else None,
        "leader": leader,
    }
    if as_json:
        print(json.dumps(report, indent=2))
        return
    console = Console()
    console.print(
        f"[bold]{live.description}[/]: {live.setup.label}"
        + (" [yellow](paused)[/]" if live.paused else "")
    )
    console.print(f"  args: {' '.join(live.command + live.args)}")
    given = [f"{k} {v['value']}" for k, v in inputs.items() if v["source"] == LIVE]
    left = [k for k, v in inputs.items() if v["source"] != LIVE]
    console.print(f"  from the live args: {', '.join(given) or 'none of the modelled flags'}")
    console.print(f"  vLLM's defaults (not in the args): {', '.join(left) or '-'}")
    console.print(
        f"  drafter: {escape(drafter['description'])}"
        + (f" [dim]({escape(drafter['note'])})[/]" if drafter["note"] else "")
    )
    console.print(
        f"  rollout: {'done' if live.rollout.done else 'in progress'} "
        f"{live.rollout.stuck or live.rollout.detail}"
    )
    console.print(f"  state: {'persisted' if live.state else 'none'}; leader: {leader or '-'}")
    for line in _state_lines(live.state):
        console.print(f"  {line}")


def _status_drafter(spec: SpeculativeConfig | None) -> dict[str, Any]:
    """The drafter the live args deploy, as far as the args alone tell (no model is read:
    whether the model has MTP layers is the sidecar's check)."""
    if spec is None:
        return {
            "description": "none in the args",
            "source": DEFAULT,
            "note": "no --speculative-config: the model's own MTP layers or a declared drafter "
            "(model.drafter), else no speculation",
        }
    method = spec.resolved_method
    described = {
        **spec.model_dump(mode="json"),
        "resolved_method": method,
        "source": LIVE,
        "note": "" if spec.kind else f"method {method} is not modelled: speculation not predicted",
    }
    size = ""
    if spec.kind is DrafterKind.DRAFT_MODEL and spec.model:
        try:
            draft = load_draft_model(spec.model)
            size = f", {draft.params / 1e9:.2f}B params"
            described["draft_params"] = draft.params
        except AutotunerError as exc:
            described["note"] = f"draft model size unknown ({_one_line(exc)})"
    described["description"] = " ".join(
        filter(
            None,
            (
                method or "?",
                f"({spec.model}{size})" if spec.model else "",
                f"K={spec.num_speculative_tokens}" if spec.num_speculative_tokens else "",
                "adaptive verification" if spec.enable_adaptive_verification else "",
            ),
        )
    )
    return described


def _state_lines(persisted: str | None) -> list[str]:
    """What an operator asks of the persisted state: a change in flight, quality, refusals,
    what the calibration learned, what was explored."""
    import time

    from autotuner.core.decide.settings import PolicySettings
    from autotuner.core.decide.state import read_state

    if not persisted:
        return []
    read = read_state(persisted)
    state = read.state
    if state is None:
        return [f"state: unreadable ({read.problem}); the tuner keeps it aside and starts afresh"]
    lines = [f"state: schema {read.written_as}" + (" (migrated on read)" if read.migrated else "")]
    if state.verification is not None:
        v = state.verification
        kind = "exploring" if v.exploration else "verifying"
        lines.append(f"{kind}: {v.previous.label} -> {v.target.label}")
    if state.last_quality is not None:
        lines.append(f"quality: {state.last_quality.status}: {state.last_quality.summary}")
    lines += [f"quarantined: {label}" for label in sorted(state.quarantine)]
    lines += [f"refused by the engine: {name} ({r.why})" for name, r in state.refused.items()]
    lines += [f"explored: {key.replace('|', ' in batch band ')}" for key in sorted(state.explored)]
    defaults = PolicySettings()  # status reads no settings file: the defaults' half-life
    fit = state.calibration.fit(
        time.time(), defaults.calibration.half_life_s, defaults.calibration.bounds
    )
    lines += [
        f"calibration: {f.term} {f.kernel} x{f.factor:.2f} (batch band {f.band})"
        for f in fit.factors()
    ]
    return lines


def _lease_holder(target: str, kube_server: str | None, lease: str) -> str | None:
    from kubernetes import client as k8s

    from autotuner.actuators.kubernetes import K8sTarget, api_client

    parsed = K8sTarget.parse(target)
    record = k8s.CoordinationV1Api(api_client(kube_server)).read_namespaced_lease(
        lease, parsed.namespace
    )
    return record.spec.holder_identity if record.spec else None


config_app = typer.Typer(help="Inspect the settings.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(config_app, name="config")

ConfigFile = Annotated[
    Path | None, typer.Option("--config", help="YAML settings file (also AUTOTUNER_CONFIG).")
]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override one setting: group.field=value (repeatable)."),
]


def _settings(config: Path | None, overrides: list[str] | None, **flags: Any) -> tuple[Any, Any]:
    from autotuner.settings import cli_overrides, load_settings

    tree = cli_overrides(overrides or [])
    for dotted, value in flags.items():
        if value is None:
            continue
        node = tree
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    file = config or (
        Path(os.environ["AUTOTUNER_CONFIG"]) if os.environ.get("AUTOTUNER_CONFIG") else None
    )
    return load_settings(file, tree)


@config_app.command("show")
def config_show(
    config: ConfigFile = None,
    overrides: SetOption = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Print the effective settings, where each came from, and what it is for."""
    from autotuner.settings import describe

    try:
        settings, sources = _settings(config, overrides)
    except AutotunerError as exc:
        fail(_one_line(exc))
    rows = describe(settings, sources)
    if as_json:
        print(
            json.dumps(
                [
                    dict(zip(("field", "value", "source", "description"), r, strict=True))
                    for r in rows
                ],
                indent=2,
            )
        )
        return
    table = Table(title="Effective settings (cli > env AUTOTUNER_* > file > default)")
    for column in ("field", "value", "source", "description"):
        table.add_column(column)
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    Console().print(table)


@app.command()
def run(
    config: ConfigFile = None,
    overrides: SetOption = None,
    mode: Annotated[str | None, typer.Option(help="advise (default) or act.")] = None,
    url: Annotated[list[str] | None, typer.Option(help="vLLM /metrics URL(s).")] = None,
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
    import signal
    import threading

    from autotuner.telling.exporter import ExporterServer, TunerMetrics
    from autotuner.telling.logs import configure, event
    from autotuner.wiring import build_controller

    try:
        settings, _ = _settings(
            config,
            overrides,
            **{
                "mode": mode,
                "source.urls": url,
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
    except (AutotunerError, ValueError) as exc:
        fail(_one_line(exc))
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
        target=settings.target.uri or None,
        model=controller.model.name,
        architecture=controller.model.architecture,
        ssm_layers=controller.model.ssm_layers,
        gpu=controller.hardware.name,
        port=server.port,
    )

    def stop(signum: int, frame: object) -> None:
        controller.stop_event.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    worker = threading.Thread(target=controller.run, name="controller")
    worker.start()
    while worker.is_alive():
        worker.join(timeout=0.5)
    server.close()


@app.command()
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
    tp: Annotated[int, typer.Option(help="Tensor-parallel GPUs per simulated replica.")] = 1,
    drafter: Annotated[
        str | None, typer.Option(help="Drafter kind when the model has none (eagle, ngram).")
    ] = None,
    world: Annotated[
        str,
        typer.Option(
            help="The simulated engine's hidden error: realistic (about 10%), or wrong-prior "
            "(speculation 30% slower and replay 30% faster than modelled, the load held at "
            "batch 24 for 30% of the run: the prior's ranking is wrong there, which only trying "
            "replay can show: the tuner explores)."
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
    """Simulated vLLM + the sidecar in act mode against a manifest, load 4 -> 512 -> 4."""
    from autotuner.demo import describe_load, log_lines, run_demo, summary_table
    from autotuner.sim.truth import WORLDS

    try:
        seconds = parse_duration(duration)
        rates = tuple(parse_rates(acceptance))
        if world not in WORLDS:
            raise InputError(f"unknown world {world!r}; known: {', '.join(WORLDS)}")
    except AutotunerError as exc:
        fail(_one_line(exc))
    console = Console()
    console.print(
        f"[bold]spec-autotuner demo[/]: {model} on a simulated {gpu}, "
        f"{seconds:.0f}s{' (simulated clock)' if fast else ''}, {describe_load(world)}"
    )
    result = run_demo(
        model_id=model,
        gpu=gpu,
        duration_s=seconds,
        out=out,
        acceptance=rates,
        tensor_parallel=tp,
        drafter=drafter,
        console=console,
        live=not no_live,
        world=world,
        fast=fast,
    )
    console.print(summary_table(result))
    for line in log_lines(result):
        console.print(line, markup=False)
    console.print(f"{result.restarts} restart(s); details: {out / 'demo.json'}")
    console.print(_plots_line(result.plots), markup=False)


def _plots_line(paths: list[Path]) -> str:
    from autotuner.plots import INSTALL_HINT

    return f"plots: {', '.join(map(str, paths))}" if paths else f"no plots: {INSTALL_HINT}"


@app.command()
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

    try:
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
    except (AutotunerError, ValueError) as exc:
        fail(_one_line(exc))
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
            fail(_one_line(exc), code=1)
    _print_bench_results(points, sweep, out)


def _print_bench_results(points: list[Point], sweep: Sweep, out: Path) -> None:
    """The sweep's points beside their predictions, the quality verdicts and the plots."""
    quality = sweep.quality()
    table = Table(title=f"Measured vs predicted ({out})")
    columns = ("setup", "batch", "tokens/s", "predicted", "step ms", "tpot p50 ms", "quality")
    for column in (*columns, "status"):
        table.add_column(column)
    for p in sorted(points, key=lambda p: (p.setup, p.batch, p.repeat)):
        table.add_row(
            p.setup,
            str(p.batch),
            f"{p.tokens_per_s:,.0f}",
            f"{p.predicted_tokens_per_s or 0:,.0f}",
            f"{(p.step_time_s or 0) * 1e3:.1f}",
            f"{p.time_per_token_p50_s * 1e3:.1f}",
            quality.get(p.setup, {}).get("verdict", "-"),
            p.status if p.status == "ok" else f"{p.status}: {p.message[:60]}",
        )
    console = Console()
    console.print(table)
    for label, verdict in quality.items():
        console.print(f"  quality {label}: {verdict['verdict']}: {verdict['summary']}")
    console.print(_plots_line(sweep.plots), markup=False)


@app.command()
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
        fail(_one_line(exc))
    save_profile(fit.profile, out)
    table = Table(title="Step-time error per setup (mean |predicted / measured - 1|)")
    for column in ("setup", "before", "after"):
        table.add_column(column)
    for label, before in fit.error_before.items():
        table.add_row(label, f"{before:.1%}", f"{fit.error_after[label]:.1%}")
    Console().print(table)
    e = fit.profile.efficiency
    print(
        f"efficiencies: gemm {e.gemm:.3f}, attention {e.attention:.3f}, ssm {e.ssm:.3f}, "
        f"copies {e.copies:.3f} -> {out}"
    )


def main() -> None:
    app()


if __name__ == "__main__":
    main()
