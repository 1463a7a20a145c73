"""`autotuner predict`: tokens/s of every setup at each batch size, from the model, the
hardware, the acceptance and the engine's command line."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Annotated, Any

import typer

from autotuner.cli.common import (
    DEFAULT_MODEL,
    failing_on_bad_input,
    parse_int_list,
    parse_rates,
    resolve_hardware,
)
from autotuner.cli.render.report import render_report
from autotuner.core.engine.args import EngineArgs
from autotuner.core.engine.capabilities import EngineCapabilities
from autotuner.core.engine.drafter import DECLARED, DEFAULT
from autotuner.core.engine.resolution import Fallback, resolve
from autotuner.core.engine.workload import ENGINE_NAMES, PrefixCacheReading, Workload
from autotuner.core.model.registry import load_draft_model, load_model
from autotuner.core.model.spec import DrafterKind, ModelSpec
from autotuner.core.predict import acceptance as acc
from autotuner.core.predict.acceptance import AcceptanceEstimate
from autotuner.core.predict.report import build_report, prefill_lines
from autotuner.core.types import Setup
from autotuner.engines.build_table import AUTO
from autotuner.engines.kinds import Engine, EngineKind, engine
from autotuner.errors import InputError


# A command runs longer than ~60 lines only by its signature: typer reads each option, with
# its help, from one annotated parameter.
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
    prompt_tokens: Annotated[
        float | None,
        typer.Option(
            help="Mean prompt tokens per request: prefilled in the decode steps, they take "
            "their share of every second (with --output-tokens; --context becomes prompt + "
            "half the output unless given)."
        ),
    ] = None,
    output_tokens: Annotated[
        float | None, typer.Option(help="Mean output tokens per request (with --prompt-tokens).")
    ] = None,
    prefix_hit_rate: Annotated[
        float | None,
        typer.Option(help="Share of the prompt tokens the prefix cache serves (default 0)."),
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
    sglang_args: Annotated[
        str | None,
        typer.Option(
            help="The engine's SGLang command line (one quoted string, with --engine-kind "
            "sglang): its --tp-size, --max-running-requests, --context-length, --mamba-ssm-dtype "
            "and --speculative-* are used as --vllm-args' are."
        ),
    ] = None,
    engine_kind: Annotated[
        str,
        typer.Option(
            help="The serving engine: vllm or sglang (its capability table, presets and flags)."
        ),
    ] = "vllm",
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
            help="What the vLLM build accepts: build (the capability table's row for "
            "--engine-version), or a preset that overrides it: upstream (replay or speculation, "
            "not both), gdn-replay, replay-spec. Winners are chosen among what it accepts."
        ),
    ] = "build",
    engine_version: Annotated[
        str | None,
        typer.Option(
            help="The vLLM version (e.g. 0.33, 0.32.0, 0.32.0-cpu) whose capability table row "
            "applies; default: the table's default version."
        ),
    ] = None,
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
    with failing_on_bad_input():
        batches = parse_int_list(batch, "batch", minimum=1)
        rates = parse_rates(acceptance_per_position) if acceptance_per_position else None
        default_ks = f"1..{len(rates)}" if rates else "1..4"
        ks = parse_int_list(spec_tokens or default_ks, "spec-tokens", minimum=1)
        windows = parse_int_list(replay_windows, "replay-windows", minimum=2)
        if acceptance is not None and acceptance_per_position is not None:
            raise InputError("give --acceptance or --acceptance-per-position, not both")
        estimate = _estimate(acceptance, rates, ks)
        chosen = _engine(engine_kind, engine, vllm_args, sglang_args)
        live = _engine_args(chosen, vllm_args or sglang_args)
        kind = _drafter_kind(drafter, draft_model)
        spec = load_model(
            model,
            weights=weights,
            ssm_state_dtype=ssm_state_dtype or (live.mamba_ssm_cache_dtype if live else None),
            mamba_cache_dtype=live.mamba_cache_dtype if live else None,
        )
        lengths = _lengths(prompt_tokens, output_tokens, prefix_hit_rate)
        fallback = _derived_context(_fallback(context, tp, kind, draft_model), context, lengths)
        resolved = resolve(
            spec,
            live,
            fallback,
            base=Workload(engine_name=ENGINE_NAMES[chosen.kind.value]),
            observed_prefix=lengths,
            load_draft=load_draft_model,
        )
        report = build_report(
            resolved.model,
            resolve_hardware(gpu, profile),
            estimate,
            resolved.workload,
            batches=batches,
            spec_tokens=ks,
            windows=windows,
            engine=_predicted_engine(chosen, engine, adaptive_verification, live).running_on(
                chosen.table.build_in_force(engine_version or AUTO, declared_by="--engine-version")
            ),
            drafter=resolved.drafter,
            acceptance_measured=acceptance is not None or rates is not None,
            inputs=resolved.table(),
        )
        report["engine_kind"] = chosen.kind.value
        report["flags"] = _winners_flags(report, engine_flags(report, resolved.model))
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        render_report(report, detail=detail)
        for line in prefill_lines(report):
            print(f"  prefill at {line}")


def _estimate(
    acceptance: float | None, rates: list[float] | None, ks: list[int]
) -> AcceptanceEstimate:
    """The acceptance the prediction assumes: the rates per position, else geometric in p."""
    if rates is not None:
        if len(rates) < max(ks):
            raise InputError(
                f"acceptance is given for {len(rates)} position(s) but K up to {max(ks)} "
                "was asked: the model never extrapolates past observed positions"
            )
        return acc.from_conditional(rates)
    estimate = acc.geometric(0.7 if acceptance is None else acceptance, max(ks))
    if acceptance is not None and not 0 <= acceptance <= 1:
        raise InputError("acceptance must lie in [0, 1]")
    return estimate


def _lengths(
    prompt: float | None, output: float | None, hit_rate: float | None
) -> PrefixCacheReading | None:
    """The request lengths the options give (both or neither), as the live loop reads them."""
    if prompt is None and output is None:
        if hit_rate is not None:
            raise InputError("--prefix-hit-rate needs --prompt-tokens and --output-tokens")
        return None
    if prompt is None or output is None or prompt <= 0 or output <= 0:
        raise InputError("give --prompt-tokens and --output-tokens together, both above 0")
    if hit_rate is not None and not 0 <= hit_rate <= 1:
        raise InputError("--prefix-hit-rate must lie in [0, 1]")
    return PrefixCacheReading(
        hit_rate=hit_rate or 0.0, prompt_tokens=prompt, generation_tokens=output, looked_up_tokens=0
    )


def _derived_context(
    fallback: Fallback, context: float | None, lengths: PrefixCacheReading | None
) -> Fallback:
    """Without --context, a request's mean context over its decode: the prompt and half the
    output."""
    if context is not None or lengths is None:
        return fallback
    return dataclasses.replace(
        fallback,
        context_tokens=lengths.prompt_tokens + lengths.generation_tokens / 2.0,
        context_source="--prompt-tokens + --output-tokens / 2",
    )


def _fallback(
    context: float | None, tp: int | None, drafter: DrafterKind | None, draft_model: str | None
) -> Fallback:
    """What the options say where the live args say nothing."""
    return Fallback(
        context_tokens=4096 if context is None else context,
        tensor_parallel=1 if tp is None else tp,
        drafter=drafter,
        draft_model=draft_model,
        context_source=DEFAULT if context is None else "--context",
        tensor_parallel_source=DEFAULT if tp is None else "--tp",
        drafter_source=DECLARED,
    )


def _engine(kind: str, preset: str, vllm_args: str | None, sglang_args: str | None) -> Engine:
    """The engine the options name, checked against the preset and the args given."""
    chosen = engine(kind)
    if preset not in chosen.presets:
        known = ", ".join(chosen.presets)
        raise InputError(f"unknown engine {preset!r} for {kind}; known: {known}")
    given = {EngineKind.VLLM: vllm_args, EngineKind.SGLANG: sglang_args}
    other = next((k for k, text in given.items() if text and k is not chosen.kind), None)
    if other is not None:
        raise InputError(f"--{other.value}-args given with --engine-kind {kind}")
    return chosen


def _predicted_engine(
    chosen: Engine, preset: str, adaptive_verification: bool, live: EngineArgs | None
) -> EngineCapabilities:
    """The preset, with adaptive verification where asked for or running in the live args."""
    speculative = live.speculative if live is not None else None
    if adaptive_verification or (speculative and speculative.enable_adaptive_verification):
        return chosen.presets[preset].model_copy(update={"adaptive_verification": True})
    return chosen.presets[preset]


def engine_flags(report: dict[str, Any], model: ModelSpec) -> Callable[[Setup], list[str]]:
    """A setup's flags on the predicted build: its own and the companions it needs there."""
    capabilities = EngineCapabilities.model_validate(report["engine"]).serving(model)
    dialect = engine(report.get("engine_kind", EngineKind.VLLM.value)).dialect()

    def flags(setup: Setup) -> list[str]:
        return dialect.setup_flags(setup, capabilities.companions(setup))

    return flags


def _winners_flags(
    report: dict[str, Any], flags: Callable[[Setup], list[str]]
) -> dict[str, list[str]]:
    """Each winning setup's flags (what `apply` writes for it on this build)."""
    winners = dict.fromkeys(row["setup"] for row in report["best"])
    return {label: flags(Setup.parse(label)) for label in winners}


def _engine_args(chosen: Engine, text: str | None) -> EngineArgs | None:
    """The engine's command line given as one string, read as the sidecar reads the live
    args."""
    if text is None:
        return None
    import shlex

    option = f"--{chosen.kind.value}-args"
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise InputError(f"{option}: cannot split the command line ({exc})") from None
    return chosen.dialect().live_args(words, [])


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
