"""Fidelity: every row of ../shared/MEASUREMENTS.md beside what the cost model predicts.

Run: python -m benchmarks.fidelity [--context 1024] [--target 0.15]

Each published number is a ratio of whole-model decode throughput to plain decoding on the same
model, GPU and batch; the prediction is the same ratio from
`autotuner.core.predict.costmodel.predict`
(what `autotuner predict` prints, e.g. `autotuner predict --model <config.json> --gpu B300
--acceptance-per-position 0.85,0.75,0.65 --spec-tokens 1,3 --replay-windows 16 --engine
replay-spec --context 1024`). The error is predicted / measured - 1; the worst |error| is the
figure of merit. Where a setup does not fit at the published batch the engine queues, and the
prediction is the throughput at the batch that fits (shown as `queued at N`).

Qwen3.5-122B-A10B-NVFP4 is read from the fixture's real config.json. The ~4B H100 models are
not among the fixtures: their specs are built by the family readers from their published shapes
(below), which the output says.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotuner.core.engine.workload import Workload
from autotuner.core.model.hf_config import from_hf_config
from autotuner.core.model.registry import load_model
from autotuner.core.model.spec import ModelSpec
from autotuner.core.predict.acceptance import AcceptanceEstimate, from_conditional
from autotuner.core.predict.costmodel import predict
from autotuner.core.predict.hardware import datasheet
from autotuner.core.types import PLAIN, Setup

FIXTURE = (
    Path(__file__).resolve().parents[1].parent
    / "shared"
    / "fixtures"
    / "configs"
    / "qwen3.5-122b-a10b-nvfp4.config.json"
)
# An MTP head on greedy GSM8K keeps about this share of drafts per position (MEASUREMENTS.md).
ACCEPTANCE = (0.85, 0.75, 0.65)

# Qwen/Qwen3.5-4B as published (config.json of the release: 32 layers, 3 GDN : 1 attention).
QWEN35_4B: dict[str, Any] = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": True,
    "text_config": {
        "hidden_size": 2560,
        "num_hidden_layers": 32,
        "full_attention_interval": 4,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "attn_output_gate": True,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "intermediate_size": 9216,
        "vocab_size": 248320,
        "mamba_ssm_dtype": "float32",
        "mtp_num_hidden_layers": 1,
    },
}
# nvidia/NVIDIA-Nemotron-3-Nano-4B-BF16 as published (NemotronH: 42 blocks, Mamba-2 + MLP +
# 4 attention blocks, dense).
NEMOTRON_NANO_4B: dict[str, Any] = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "hidden_size": 3136,
    "vocab_size": 131072,
    "num_hidden_layers": 42,
    "hybrid_override_pattern": "M-M-M-MM-M-M*-M-M*-M-M-M*-M-M-MM*-MMM-M-M-",
    "mamba_num_heads": 96,
    "mamba_head_dim": 80,
    "n_groups": 8,
    "ssm_state_size": 128,
    "conv_kernel": 4,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 12544,
    "mlp_hidden_act": "relu2",
}


REPLAY_BATCHES = (1, 8, 32, 64, 128, 256, 512)
QWEN_TABLE, NANO_TABLE = "Qwen3.5-4B GDN, H100", "Nemotron-Nano-4B Mamba-2, H100"
REPLAY_ALONE: tuple[tuple[str, str, tuple[float | None, ...]], ...] = (
    (
        f"{QWEN_TABLE}, fp32 state (PR #48792)",
        "qwen4b-fp32",
        (0.99, 1.03, 1.08, 1.14, 1.21, 1.27, 1.30),
    ),
    (
        f"{QWEN_TABLE}, fp16 state (PR #48792)",
        "qwen4b-fp16",
        (0.99, 1.01, 1.03, 1.05, 1.06, 1.07, 1.08),
    ),
    (
        f"{NANO_TABLE}, fp32 state (PR #48018)",
        "nano4b-fp32",
        (0.98, 1.03, 1.16, None, 1.38, 1.47, 1.52),
    ),
    (
        f"{NANO_TABLE}, fp16 state (PR #48018)",
        "nano4b-fp16",
        (0.98, 1.00, 1.07, None, 1.21, 1.26, 1.30),
    ),
)


@dataclass(frozen=True)
class Row:
    """One published point: `setup` at `batch` ran `measured` x plain."""

    table: str
    model: str
    gpu: str
    setup: str
    batch: int
    measured: float


def ratio_rows() -> list[Row]:
    """Every ratio row of MEASUREMENTS.md, in its order."""
    b300 = "B300 Qwen3.5-122B-A10B-NVFP4, fp32 state (PR #49887)"
    rows = [
        Row(b300, "qwen122-nvfp4", "B300", "spec:1", 512, 9223 / 10398),
        Row(b300, "qwen122-nvfp4", "B300", "spec:3", 512, 9395 / 10398),
        Row(b300, "qwen122-nvfp4", "B300", "replay+spec:3:16", 512, 19707 / 10398),
    ]
    for table, model, values in REPLAY_ALONE:
        for batch, value in zip(REPLAY_BATCHES, values, strict=True):
            if value is not None:
                rows.append(Row(table, model, "H100-SXM", "replay:16", batch, value))
    return rows


PLAIN_TOKENS_PER_S = ("qwen122-nvfp4", "B300", 512, 10398.0)  # the one absolute number

# Published elsewhere, not in MEASUREMENTS.md and not used to develop the model (--held-out):
# PR #49887's tables at the other batches (native = ReplaySSM-spec over standard divided by
# ReplaySSM-spec over native spec; T = 1 + K) and PR #48792's B300 column (replay alone).
HELD_OUT_BATCHES = (1, 32, 128, 256)  # 512 is MEASUREMENTS.md's own table
HELD_OUT: tuple[tuple[str, str, tuple[float, ...]], ...] = (
    ("spec:1", "native", (1.37 / 1.00, 1.44 / 1.05, 1.56 / 1.35, 1.45 / 1.36)),
    ("spec:3", "native", (1.97 / 1.12, 2.08 / 1.22, 1.87 / 1.43, 1.84 / 1.79)),
    ("replay+spec:1:16", "replay-spec", (1.37, 1.44, 1.56, 1.45)),
    ("replay+spec:3:16", "replay-spec", (1.97, 2.08, 1.87, 1.84)),
)
HELD_OUT_REPLAY = (0.96, 1.03, 1.09, 1.11, 1.16, 1.20, 1.22)  # PR #48792, B300, fp32, L=16


def held_out_rows() -> list[Row]:
    table = "held out: B300 Qwen3.5-122B-A10B-NVFP4, PR #49887 at other batches"
    rows = [
        Row(f"{table} ({kind})", "qwen122-nvfp4", "B300", setup, batch, value)
        for setup, kind, values in HELD_OUT
        for batch, value in zip(HELD_OUT_BATCHES, values, strict=True)
    ]
    replay = "held out: B300 Qwen3.5-122B-A10B-NVFP4, ReplaySSM alone (PR #48792)"
    rows += [
        Row(replay, "qwen122-nvfp4", "B300", "replay:16", batch, value)
        for batch, value in zip(REPLAY_BATCHES, HELD_OUT_REPLAY, strict=True)
    ]
    return rows


def models() -> tuple[dict[str, ModelSpec], list[str]]:
    """The specs the rows need, and a sentence per model on where its shapes came from."""
    notes = []
    if FIXTURE.is_file():
        qwen122 = load_model(str(FIXTURE))
        notes.append(f"Qwen3.5-122B-A10B-NVFP4: the real config.json ({FIXTURE.name})")
    else:
        qwen122 = load_model("Qwen/Qwen3.5-122B-A10B", weights="nvfp4")
        notes.append("Qwen3.5-122B-A10B-NVFP4: fixture missing, built-in id with NVFP4 weights")
    specs = {"qwen122-nvfp4": qwen122}
    for key, raw, name in (
        ("qwen4b", QWEN35_4B, "Qwen/Qwen3.5-4B"),
        ("nano4b", NEMOTRON_NANO_4B, "nvidia/NVIDIA-Nemotron-3-Nano-4B-BF16"),
    ):
        for short, dtype in (("fp32", "float32"), ("fp16", "float16")):
            specs[f"{key}-{short}"] = from_hf_config(raw, name=name, ssm_state_dtype=dtype)
        notes.append(
            f"{name}: not in fixtures; built by the family reader from its published shapes "
            "(benchmarks/fidelity.py), SSM state fp32 and fp16 via --mamba-ssm-cache-dtype"
        )
    return specs, notes


@dataclass(frozen=True)
class Result:
    row: Row
    predicted: float
    note: str
    ssm_share: float  # of plain's step: all that replay can save is a part of it

    @property
    def error(self) -> float:
        return self.predicted / self.row.measured - 1.0


def evaluate(
    row: Row, spec: ModelSpec, acceptance: AcceptanceEstimate, workload: Workload
) -> Result:
    gpu = datasheet(row.gpu)
    setup = Setup.parse(row.setup)
    plain = predict(spec, gpu, PLAIN, [row.batch], acceptance, workload)
    other = predict(spec, gpu, setup, [row.batch], acceptance, workload)
    note = ""
    if other.effective_batch[0] < row.batch:
        note = f"queued at {int(other.effective_batch[0])}"
    if plain.effective_batch[0] < row.batch:
        note = f"{note}; plain queued at {int(plain.effective_batch[0])}".lstrip("; ")
    share = float(plain.time_s["ssm"][0] / plain.step_time_s[0])
    return Result(row, float(other.tokens_per_s[0] / plain.tokens_per_s[0]), note, share)


def render(results: Sequence[Result]) -> list[str]:
    lines = [
        f"{'setup':<19} {'batch':>5} {'measured':>8} {'predicted':>9} {'error':>8} {'ssm share':>9}"
    ]
    table = ""
    for r in results:
        if r.row.table != table:
            table = r.row.table
            lines.append(table)
        lines.append(
            f"  {r.row.setup:<17} {r.row.batch:>5} {r.row.measured:>8.2f} {r.predicted:>9.2f} "
            f"{r.error:>+8.1%} {r.ssm_share:>9.0%}  {r.note}".rstrip()
        )
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    options = argparse.ArgumentParser(description=__doc__)
    options.add_argument("--context", type=float, default=1024.0, help="Mean context tokens.")
    options.add_argument("--target", type=float, default=0.15, help="Worst |error| allowed.")
    options.add_argument(
        "--held-out", action="store_true", help="Also print other published points."
    )
    args = options.parse_args(argv)
    workload = Workload(context_tokens=args.context)
    acceptance = from_conditional(ACCEPTANCE)
    specs, notes = models()
    print("Fidelity: MEASUREMENTS.md against the cost model (ratio to plain, same model/GPU/batch)")
    print(
        f"assumed: mean context {args.context:g} tokens, acceptance per position "
        f"{', '.join(f'{p:.2f}' for p in ACCEPTANCE)} (MTP on GSM8K), datasheet GPUs, "
        f"gpu_memory_utilization {workload.gpu_memory_utilization}"
    )
    for note in notes:
        print(f"  {note}")
    results = [evaluate(r, specs[r.model], acceptance, workload) for r in ratio_rows()]
    print("\n".join(render(results)))
    print("(ssm share: the SSM state kernels' share of plain's step, what dilutes replay's gain)")
    model, gpu, batch, measured = PLAIN_TOKENS_PER_S
    plain = predict(specs[model], datasheet(gpu), PLAIN, [batch], acceptance, workload)
    absolute = float(plain.tokens_per_s[0])
    print(
        f"absolute (not a ratio, not in the worst): plain {model} on {gpu} at batch {batch}: "
        f"measured {measured:,.0f} tokens/s, predicted {absolute:,.0f} "
        f"({absolute / measured - 1:+.1%})"
    )
    print(worst_line(results, args.target))
    if args.held_out:
        held = [evaluate(r, specs[r.model], acceptance, workload) for r in held_out_rows()]
        print("\n".join(render(held)))
        print(f"held out, {worst_line(held, args.target)}")


def worst_line(results: Sequence[Result], target: float) -> str:
    worst = max(results, key=lambda r: abs(r.error))
    return (
        f"worst |error|: {abs(worst.error):.1%} ({worst.row.table}, {worst.row.setup} at "
        f"batch {worst.row.batch}); target <= {target:.0%}: {abs(worst.error) <= target}"
    )


if __name__ == "__main__":
    main()
