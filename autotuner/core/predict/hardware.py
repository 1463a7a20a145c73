"""HardwareProfile: what one GPU can move and compute, per kernel class.

Profiles come from datasheets (bundled JSON, efficiencies are stated assumptions) or from
`kernels_probe`, which measures them on the deployment's own GPU and writes the same schema.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotuner.errors import ProfileError

PROFILE_SCHEMA_VERSION = 1
_TENSOR_FAMILY = {"fp8": "fp8", "float8": "fp8", "int8": "fp8", "nvfp4": "fp4", "mxfp4": "fp4"}


class KernelEfficiency(BaseModel):
    """Achieved fraction of the peak, per kernel class (COSTMODEL.md section 4)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gemm: float = Field(0.80, gt=0, le=1, description="Weight-streaming GEMMs, of HBM peak.")
    attention: float = Field(0.70, gt=0, le=1, description="Decode attention KV reads.")
    ssm: float = Field(0.75, gt=0, le=1, description="SSM state update kernels.")
    ssm_verify: float = Field(
        0.50,
        gt=0,
        le=1,
        description="SSM state kernels of native speculation (multi-token kernels that store a "
        "state per verified position from inside a sequential token loop), of HBM peak.",
    )
    copies: float = Field(0.90, gt=0, le=1, description="Large contiguous copies.")
    mma: float = Field(0.55, gt=0, le=1, description="Tensor-core FLOP/s, of peak.")
    vector: float = Field(0.50, gt=0, le=1, description="FP32 vector FLOP/s, of peak.")


class Measurement(BaseModel):
    """One probe measurement: median with its spread."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    median: float
    p10: float
    p90: float
    unit: str
    samples: int = Field(ge=1)


class HardwareProfile(BaseModel):
    """One GPU, as the cost model sees it. Versioned: `schema_version` must match."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = 1
    name: str
    source: Literal["datasheet", "kernels_probe", "calibrated"] = "datasheet"
    hbm_bytes_per_s: float = Field(gt=0, description="Datasheet HBM bandwidth.")
    bf16_flops: float = Field(gt=0, description="Dense BF16 tensor FLOP/s.")
    fp8_flops: float | None = Field(
        None, gt=0, description="Dense FP8 tensor FLOP/s; None: twice the BF16 rate."
    )
    fp4_flops: float | None = Field(
        None,
        gt=0,
        description="Dense FP4 (NVFP4/MXFP4) tensor FLOP/s; None: no FP4 tensor cores, FP4 "
        "weights are dequantized and run at the BF16 rate.",
    )
    fp32_flops: float = Field(gt=0, description="FP32 vector (non-tensor) FLOP/s.")
    memory_bytes: float = Field(gt=0, description="Device memory capacity.")
    efficiency: KernelEfficiency = KernelEfficiency()
    step_overhead_s: float = Field(
        0.8e-3, ge=0, description="Fixed cost of one decode step: launches, scheduler, sampler."
    )
    replay_overhead_s_per_layer: float = Field(
        8e-6, ge=0, description="Extra kernels per SSM layer per step when ReplaySSM is on."
    )
    draft_pass_overhead_s: float = Field(
        0.15e-3, ge=0, description="Fixed cost of one sequential drafter pass."
    )
    eager_launch_s_per_block: float = Field(
        60e-6,
        ge=0,
        description="Host time to launch one block's kernels (a mixer or an FFN) without CUDA "
        "graphs, which vLLM uses for steps with more tokens than it captured graphs for.",
    )
    piecewise_s_per_split: float = Field(
        20e-6,
        ge=0,
        description="Host time one split op (an attention or SSM mixer) adds to a step run "
        "with piecewise CUDA graphs: the captured piece ends, the mixer's few kernels are "
        "launched from the host, the next piece is replayed. vLLM runs a K schedule that way "
        "on Model Runner V1 (config/vllm.py:1069-1086). An assumption (3-5 launches of ~5 us), "
        "not measured here: kernels_probe does not time it.",
    )
    measured_hbm_bytes_per_s: float | None = Field(
        None, gt=0, description="Copy bandwidth measured by kernels_probe (read + write)."
    )
    measurements: dict[str, Measurement] = {}
    device: dict[str, str] = {}
    created: str | None = None
    notes: tuple[str, ...] = ()

    def tensor_flops(self, dtype: str) -> float:
        """Peak tensor FLOP/s of a GEMM whose weights are stored as `dtype`: FP8 and FP4
        formats use their own tensor cores where the GPU has them; INT4 (AWQ/GPTQ) and FP4
        without FP4 tensor cores are weight-only (dequantized to BF16)."""
        family = _TENSOR_FAMILY.get(dtype.lower(), "bf16")
        if family == "fp8":
            return self.fp8_flops or 2.0 * self.bf16_flops
        if family == "fp4":
            return self.fp4_flops or self.bf16_flops
        return self.bf16_flops

    def bandwidth(self, kernel_class: str) -> float:
        """Bytes/s a kernel class achieves: peak x its efficiency."""
        return self.hbm_bytes_per_s * float(getattr(self.efficiency, kernel_class))


@cache
def datasheets() -> dict[str, HardwareProfile]:
    folder = resources.files("autotuner.core.predict") / "data" / "gpus"
    raw = json.loads((folder / "datasheets.json").read_text(encoding="utf-8"))
    return {entry["name"]: HardwareProfile.model_validate(entry) for entry in raw}


def datasheet(name: str) -> HardwareProfile:
    """Look a GPU up by name, case-insensitively (e.g. h200, H100-SXM, mi300x)."""
    wanted = name.strip().lower()
    for key, profile in datasheets().items():
        if key.lower() == wanted:
            return profile
    raise ProfileError(f"unknown GPU {name!r}; known: {', '.join(datasheets())}")


def load_profile(path: str | Path) -> HardwareProfile:
    """Read a profile JSON (as kernels_probe writes it); refuse bad or foreign versions."""
    file = Path(path)
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"{file}: cannot read profile ({exc.strerror})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProfileError(f"{file}: not a JSON profile ({exc})") from None
    if not isinstance(raw, dict):
        raise ProfileError(f"{file}: a profile is a JSON object")
    version = raw.get("schema_version")
    if version != PROFILE_SCHEMA_VERSION:
        raise ProfileError(
            f"{file}: profile schema_version {version!r} is not supported (expected "
            f"{PROFILE_SCHEMA_VERSION}); re-run kernels_probe with this version"
        )
    try:
        return HardwareProfile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ProfileError(f"{file}: invalid profile field {where!r}: {first['msg']}") from None


def save_profile(profile: HardwareProfile, path: str | Path) -> None:
    Path(path).write_text(profile.model_dump_json(indent=2) + "\n", encoding="utf-8")
