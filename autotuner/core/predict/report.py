"""The `predict` report: every candidate setup over a batch grid, the winners, the crossovers
and the operators' quick rule, as one plain object (rendered by the CLI as a table or JSON)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from autotuner.core.engine.capabilities import EngineCapabilities
from autotuner.core.engine.drafter import DECLARED, Drafter, deployed_drafter
from autotuner.core.engine.workload import Workload
from autotuner.core.model.spec import ModelSpec
from autotuner.core.predict.acceptance import (
    AcceptanceEstimate,
    copy_rule,
    copy_rule_break_even,
    from_conditional,
    tokens_kept,
)
from autotuner.core.predict.comparisons import crossover_batches, winner_changes
from autotuner.core.predict.costmodel import SetupCurve, predict, predict_all
from autotuner.core.predict.hardware import HardwareProfile
from autotuner.core.types import PLAIN, Setup


def candidate_setups(
    spec_tokens: Sequence[int], windows: Sequence[int], *, adaptive: bool = False
) -> list[Setup]:
    """plain, spec:K, replay:L and replay+spec:K:L for every K and L given (and each
    speculating one with adaptive verification when `adaptive`)."""
    spec = [Setup(spec_tokens=k) for k in spec_tokens]
    replay = [Setup(replay_window=w) for w in windows]
    both = [Setup(spec_tokens=k, replay_window=w) for k in spec_tokens for w in windows]
    setups = [PLAIN, *spec, *replay, *both]
    if adaptive:
        setups += [s.model_copy(update={"adaptive": True}) for s in (*spec, *both)]
    return setups


def equivalent_rate(acceptance: AcceptanceEstimate, drafts: int) -> float:
    """The constant rate p with tokens_kept(p, T) = tau(T): how the quick rule reads
    per-position acceptance."""
    target = acceptance.tau(drafts)
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        if tokens_kept(middle, drafts) < target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def quick_rule(acceptance: AcceptanceEstimate, drafts: int) -> dict[str, Any]:
    rate = equivalent_rate(acceptance, drafts)
    value = copy_rule(rate, drafts)
    return {
        "drafts": drafts,
        "rate": round(rate, 4),
        "tokens_kept": round(acceptance.tau(drafts), 4),
        "value": round(value, 4),
        "break_even_rate": round(copy_rule_break_even(drafts), 4),
        "verdict": "wins" if value > 1 else "loses",
    }


def build_report(
    model: ModelSpec,
    hardware: HardwareProfile,
    acceptance: AcceptanceEstimate,
    workload: Workload,
    *,
    batches: Sequence[int],
    spec_tokens: Sequence[int],
    windows: Sequence[int],
    engine: EngineCapabilities,
    drafter: Drafter | None = None,
    acceptance_measured: bool = False,
    inputs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Predict every candidate; winners and crossovers only among what `engine` accepts.

    Speculation is a candidate only with a drafter whose cost is known (the deployed or
    declared one: `drafter`, by default the workload's override or the model's own MTP
    layers), and for ngram / suffix drafters only with measured acceptance."""
    engine = engine.serving(model)
    drafter = drafter or deployed_drafter(model, None, workload.drafter, declared_source=DECLARED)
    spec_tokens, why_not = _speculation(drafter, spec_tokens, acceptance_measured)
    # Replay applies only to models with recurrent state.
    setups = candidate_setups(
        spec_tokens, windows if model.is_hybrid else (), adaptive=engine.adaptive_verification
    )
    runnable = [s for s in setups if engine.accepts(s)]
    chunk = workload.chunk_budget(hardware.name, hardware.memory_bytes)
    # A prompt chunk run as a forward of its own passes over the weights at least once.
    floor = float(
        predict(model, hardware, PLAIN, [1], from_conditional([]), workload).step_time_s[0]
    )
    asked = predict_all(
        model,
        hardware,
        setups,
        sorted(set(batches)),
        acceptance,
        workload,
        as_run=engine.as_run,
        piecewise=engine.piecewise_graphs,
    )
    # Crossovers are found on every integer batch, not just the ones asked for.
    grid = np.arange(1, max(batches) + 1)
    dense = predict_all(
        model,
        hardware,
        runnable,
        grid,
        acceptance,
        workload,
        as_run=engine.as_run,
        piecewise=engine.piecewise_graphs,
    )
    plain = dense[PLAIN.label]
    versus_plain = {
        label: [c.batch for c in crossover_batches(curve, plain)]
        for label, curve in dense.items()
        if label != PLAIN.label
    }
    return {
        "model": model.summary(),
        "notes": [*model.notes, *why_not, *drafter.notes],
        "gpu": hardware.name,
        "profile_source": hardware.source,
        "workload": workload.model_dump(mode="json"),
        "inputs": _with_budget(inputs or {}, chunk),
        "prefill_chunk_tokens": chunk,
        "drafter": {
            **drafter.model_dump(mode="json", exclude={"draft"}),
            "description": drafter.describe(),
            "speculation_predicted": bool(spec_tokens),
        },
        "acceptance": {"conditional": list(acceptance.conditional)},
        "engine": engine.model_dump(mode="json"),
        "build": _build(engine),
        "capacity": {label: curve.max_batch for label, curve in asked.items()},
        "predictions": [
            {**_row(p, engine), "time_to_first_token_s": ttft}
            for curve in asked.values()
            for p, ttft in zip(
                curve.predictions(), _ttft(curve, chunk, workload, floor), strict=True
            )
        ],
        "best": _best_rows({s.label: asked[s.label] for s in runnable}),
        "crossovers": [
            {"batch": c.batch, "from": c.loser, "to": c.winner}
            for c in winner_changes(list(dense.values()))
        ],
        "versus_plain": versus_plain,
        "quick_rule": [quick_rule(acceptance, k) for k in spec_tokens],
    }


def _build(engine: EngineCapabilities) -> dict[str, Any] | None:
    """The capability table's row in force for this model, and where the build came from."""
    if engine.build is None:
        return None
    row = engine.row
    return {
        "description": engine.build.describe(),
        "row": row.name if row is not None else None,
        "source": row.source if row is not None else None,
        "decides": engine.follows_build,
    }


def _speculation(
    drafter: Drafter, spec_tokens: Sequence[int], acceptance_measured: bool
) -> tuple[Sequence[int], list[str]]:
    """The draft lengths to predict, and why none are."""
    if not drafter.predictable:
        return (), [drafter.problem or "speculation not predicted"]
    if drafter.acceptance_is_the_workloads and not acceptance_measured:
        return (), [
            f"{drafter.method or drafter.kind.value} drafter: its acceptance is the workload's; "
            "speculation not predicted without measured acceptance (give --acceptance or "
            "--acceptance-per-position as measured, e.g. by `autotuner observe`)"
        ]
    return spec_tokens, []


def _row(prediction: Any, engine: EngineCapabilities) -> dict[str, Any]:
    row: dict[str, Any] = prediction.model_dump(mode="json")
    setup: Setup = prediction.setup
    row["refused_by_engine"] = engine.refusal(setup)
    row["setup"] = {
        "spec_tokens": setup.spec_tokens,
        "replay_window": setup.replay_window,
        "adaptive": setup.adaptive,
        "label": setup.label,
        "name": setup.name,
    }
    return row


def _with_budget(inputs: dict[str, Any], chunk: int | None) -> dict[str, Any]:
    """The inputs with the engine's default prefill budget filled in where the args gave
    none (the default depends on the GPU, which the resolution does not know)."""
    given = inputs.get("prefill_chunk_tokens")
    if given is None or given.get("value") is not None or chunk is None:
        return inputs
    return {**inputs, "prefill_chunk_tokens": {**given, "value": chunk}}


def _ttft(
    curve: SetupCurve, chunk: int | None, workload: Workload, floor_s: float
) -> list[float | None]:
    """The model's time to first token per batch (None: prompt length unknown), prompts
    prefilled in `chunk`-token steps (None: whole), a chunk run on its own taking at least
    `floor_s`."""
    cost = curve.prefill
    if cost is None:
        return [None] * len(curve.batch)
    decode_tokens = curve.effective_batch * (1 + curve.spec_tokens)
    return [
        cost.time_to_first_token_s(
            float(step),
            float(tokens),
            chunk,
            mixed=workload.prefill_mixed,
            forward_floor_s=floor_s,
        )
        for step, tokens in zip(curve.step_time_s, decode_tokens, strict=True)
    ]


def prefill_lines(report: dict[str, Any]) -> list[str]:
    """What prefill takes at each batch asked, for people: the best setup's share of each
    second and its time to first token (nothing when the prompt length is unknown)."""
    rows = {(r["setup"]["label"], r["batch"]): r for r in report["predictions"]}
    lines = []
    for best in report["best"]:
        row = rows.get((best["setup"], best["batch"]))
        if row is None or row["time_to_first_token_s"] is None:
            continue
        lines.append(
            f"batch {best['batch']}: {best['setup']} spends {row['prefill_share']:.0%} of each "
            f"second on prefill; time to first token {row['time_to_first_token_s']:.3f} s"
        )
    return lines


def _best_rows(curves: dict[str, SetupCurve]) -> list[dict[str, Any]]:
    labels = list(curves)
    table = np.vstack([curves[label].tokens_per_s for label in labels])
    plain = curves[PLAIN.label].tokens_per_s
    rows = []
    for i, batch in enumerate(next(iter(curves.values())).batch):
        best = int(np.argmax(table[:, i]))
        rows.append(
            {
                "batch": int(batch),
                "setup": labels[best],
                "tokens_per_s": float(table[best, i]),
                "ratio_to_plain": float(table[best, i] / plain[i]) if plain[i] > 0 else None,
            }
        )
    return rows
