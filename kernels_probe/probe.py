"""The microbenchmarks: copy and read bandwidth, GEMM at decode and verify shapes, SSM state
traffic (plain update, a state copy per verified position, replay for L = 8, 16, 32) at the
model's own shapes, and a fixed per-kernel overhead. The result is the HardwareProfile JSON the
sidecar loads (`autotuner predict --profile`).

Backends: torch + CUDA when a GPU is present (events and synchronisation), else numpy on the
CPU with small sizes, so tests, CI and the demo exercise the same code.
"""

from __future__ import annotations

import datetime
import platform
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotuner.core.model.spec import ModelSpec, SsmKind
from autotuner.core.predict.hardware import (
    HardwareProfile,
    KernelEfficiency,
    Measurement,
    datasheets,
)
from kernels_probe.timing import measure


@dataclass
class Backend:
    """Array operations the probe needs, on one device."""

    name: str
    device: str
    xp: Any  # numpy or torch
    sync: Callable[[], None]
    gemm_dtype: Any
    details: dict[str, str]

    def empty(self, shape: tuple[int, ...], dtype: Any = None) -> Any:
        if self.name == "torch":
            return self.xp.empty(shape, dtype=dtype or self.xp.float32, device=self.device)
        return np.empty(shape, dtype=dtype or np.float32)

    def full(self, shape: tuple[int, ...], value: float) -> Any:
        if self.name == "torch":
            return self.xp.full(shape, value, dtype=self.xp.float32, device=self.device)
        return np.full(shape, value, dtype=np.float32)

    def random(self, shape: tuple[int, ...], dtype: Any = None) -> Any:
        if self.name == "torch":
            return self.xp.randn(shape, dtype=dtype or self.xp.float32, device=self.device)
        return (
            np.random.default_rng(0)
            .standard_normal(shape, dtype=np.float32)
            .astype(dtype or np.float32)
        )


def numpy_backend() -> Backend:
    return Backend(
        "numpy",
        "cpu",
        np,
        lambda: None,
        np.float32,
        {
            "backend": "numpy",
            "device": platform.processor() or platform.machine(),
            "numpy": np.__version__,
        },
    )


def torch_backend() -> Backend | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return Backend(
        "torch",
        "cuda",
        torch,
        torch.cuda.synchronize,
        torch.bfloat16,
        {
            "backend": "torch",
            "device": props.name,
            "torch": torch.__version__,
            "cuda_runtime": str(torch.version.cuda),
            "memory_bytes": str(props.total_memory),
        },
    )


def choose_backend(wanted: str) -> Backend:
    if wanted in ("auto", "torch"):
        found = torch_backend()
        if found is not None:
            return found
        if wanted == "torch":
            raise RuntimeError("torch with CUDA is not available here; use --backend numpy")
    return numpy_backend()


@dataclass(frozen=True)
class Sizes:
    buffer_bytes: int
    buffers: int
    batches: tuple[int, ...]
    gemm_hidden: int
    ssm_heads: int  # heads probed (the model's, or fewer on a CPU)
    repeats: int


def sizes_for(backend: Backend, quick: bool) -> Sizes:
    if backend.name == "torch":
        return Sizes(1 << 30, 4, (1, 8, 64, 256, 512), 8192, 0, 20 if quick else 50)
    if quick:
        return Sizes(16 << 20, 3, (1, 4), 512, 4, 5)
    return Sizes(64 << 20, 4, (1, 4, 16), 1024, 8, 9)


def run_probe(
    backend: Backend,
    model: ModelSpec,
    *,
    quick: bool = False,
    progress: Callable[[str], None] = lambda name: None,
) -> HardwareProfile:
    """Measure everything and build the profile."""
    sizes = sizes_for(backend, quick)
    xp = backend.xp
    found: dict[str, Measurement] = {}

    def record(name: str, result: Measurement) -> Measurement:
        found[name] = result
        progress(name)
        return result

    # Bandwidth: rotate through buffers larger than any cache.
    elements = sizes.buffer_bytes // 4
    sources = [backend.random((elements,)) for _ in range(sizes.buffers)]
    targets = [backend.empty((elements,)) for _ in range(sizes.buffers)]

    def copy(i: int) -> None:
        j = i % sizes.buffers
        if backend.name == "torch":
            targets[j].copy_(sources[j])
        else:
            np.copyto(targets[j], sources[j])

    copy_bw = record(
        "copy_bytes_per_s",
        measure(
            copy, work=2 * sizes.buffer_bytes, unit="B/s", sync=backend.sync, repeats=sizes.repeats
        ),
    )
    read_bw = record(
        "read_bytes_per_s",
        measure(
            lambda i: sources[i % sizes.buffers].sum(),
            work=sizes.buffer_bytes,
            unit="B/s",
            sync=backend.sync,
            repeats=sizes.repeats,
        ),
    )

    # GEMM at decode and verify shapes: rows = batch x (1 + K).
    hidden = sizes.gemm_hidden
    weight = backend.random((hidden, hidden), backend.gemm_dtype)
    gemm_rates = []
    for rows in sorted({b * n for b in sizes.batches for n in (1, 4)}):
        activations = backend.random((rows, hidden), backend.gemm_dtype)
        result = record(
            f"gemm_flops_rows_{rows}",
            measure(
                _gemm(activations, weight),
                work=2 * rows * hidden * hidden,
                unit="FLOP/s",
                sync=backend.sync,
                repeats=sizes.repeats,
            ),
        )
        gemm_rates.append(result.median)

    # SSM state traffic at the model's shapes (fewer heads on a CPU).
    ssm = model.ssm
    state_rates: list[float] = []
    copy_rates: list[float] = []
    replay: dict[int, list[float]] = {8: [], 16: [], 32: []}
    replay_overhead = 0.0
    if ssm is not None:
        heads = sizes.ssm_heads or ssm.heads
        p, s, g = ssm.head_dim, ssm.state_size, min(ssm.groups, heads)
        for batch in sizes.batches:
            state = backend.random((batch, heads, p, s))
            x = backend.random((batch, heads, p, 1))
            b = backend.random((batch, 1, 1, s))
            decay = backend.full((batch, heads, 1, 1), 0.9)
            state_bytes = 4 * batch * heads * p * s

            def plain(i: int, st: Any = state, xx: Any = x, bb: Any = b, d: Any = decay) -> None:
                st.mul_(d).add_(xx * bb) if backend.name == "torch" else np.add(
                    st * d, xx * bb, out=st
                )

            rate = record(
                f"ssm_update_bytes_per_s_batch_{batch}",
                measure(
                    plain,
                    work=2 * state_bytes,
                    unit="B/s",
                    sync=backend.sync,
                    repeats=sizes.repeats,
                ),
            )
            state_rates.append(rate.median)
            slots = [backend.empty((batch, heads, p, s)) for _ in range(4)]

            def copies(i: int, st: Any = state, out: list[Any] = slots) -> None:
                for slot in out:  # one state written per verified position (K = 3)
                    slot.copy_(st) if backend.name == "torch" else np.copyto(slot, st)

            rate = record(
                f"state_copy_bytes_per_s_batch_{batch}",
                measure(
                    copies,
                    work=5 * state_bytes,
                    unit="B/s",
                    sync=backend.sync,
                    repeats=sizes.repeats,
                ),
            )
            copy_rates.append(rate.median)
            for window in (8, 16, 32):
                occupancy = (window - 1) // 2
                ring_x = backend.random((occupancy, batch, heads, p))
                ring_b = backend.random((occupancy, batch, s))
                weights = backend.random((occupancy, batch, heads))
                checkpoint = state

                def rebuild(
                    i: int,
                    w: Any = weights,
                    rx: Any = ring_x,
                    rb: Any = ring_b,
                    ck: Any = checkpoint,
                ) -> Any:
                    # Read checkpoint + ring, rebuild the state as one contraction; the state
                    # itself is written only on a flush (every L tokens).
                    return ck + xp.einsum("tbh,tbhp,tbs->bhps", w, rx, rb)

                # Bytes as the kernel moves them: x and dt per head, B per group.
                ring_bytes = 4 * occupancy * batch * (heads * (p + 1) + g * s)
                work = state_bytes + ring_bytes + state_bytes / window
                rate = record(
                    f"replay_L{window}_bytes_per_s_batch_{batch}",
                    measure(
                        rebuild, work=work, unit="B/s", sync=backend.sync, repeats=sizes.repeats
                    ),
                )
                replay[window].append(rate.median)
            if batch == sizes.batches[0]:
                plain_time = 2 * state_bytes / state_rates[-1]
                replay_time = (
                    state_bytes + 4 * 7 * batch * (heads * (p + 1) + g * s) + state_bytes / 16
                ) / replay[16][-1]
                replay_overhead = max(replay_time - plain_time, 0.0) * ssm.heads / heads

    # Fixed cost of one small kernel (launch + synchronisation on a GPU).
    tiny = backend.random((8,))
    launch = record(
        "small_kernel_per_s",
        measure(
            lambda i: tiny + 1.0, work=1.0, unit="1/s", sync=backend.sync, repeats=sizes.repeats
        ),
    )
    return build_profile(
        backend,
        found,
        copy_bw,
        read_bw,
        gemm_rates,
        state_rates,
        copy_rates,
        replay,
        replay_overhead,
        launch,
        model.ssm.kind if model.ssm else None,
    )


def _gemm(activations: Any, weight: Any) -> Callable[[int], Any]:
    def run(i: int) -> Any:
        return activations @ weight

    return run


def build_profile(
    backend: Backend,
    found: dict[str, Measurement],
    copy_bw: Measurement,
    read_bw: Measurement,
    gemm_rates: list[float],
    state_rates: list[float],
    copy_rates: list[float],
    replay: dict[int, list[float]],
    replay_overhead: float,
    launch: Measurement,
    kind: SsmKind | None,
) -> HardwareProfile:
    sheet = _datasheet_for(backend.details.get("device", ""))
    if sheet is not None:
        peak_bw, peak_flops, fp32, memory = (
            sheet.hbm_bytes_per_s,
            sheet.bf16_flops,
            sheet.fp32_flops,
            sheet.memory_bytes,
        )
    else:  # a CPU or an unknown GPU: the measured copy bandwidth is the ceiling
        peak_bw = copy_bw.median
        peak_flops = max(gemm_rates) if gemm_rates else 1e12
        fp32 = peak_flops
        memory = float(backend.details.get("memory_bytes", 0) or _memory_bytes())

    def share(value: float) -> float:
        return float(min(max(value / peak_bw, 0.01), 1.0))

    efficiency = KernelEfficiency(
        gemm=share(read_bw.median),
        attention=share(read_bw.median * 0.9),
        ssm=share(float(np.median(state_rates))) if state_rates else 0.75,
        copies=share(copy_bw.median),
        mma=float(min(max(max(gemm_rates) / peak_flops, 0.01), 1.0)) if gemm_rates else 0.55,
        vector=0.5,
    )
    name = sheet.name if sheet is not None else f"{backend.details.get('device', 'cpu')} (probe)"
    return HardwareProfile(
        name=name,
        source="kernels_probe",
        hbm_bytes_per_s=peak_bw,
        bf16_flops=peak_flops,
        fp32_flops=fp32,
        memory_bytes=memory,
        efficiency=efficiency,
        step_overhead_s=sheet.step_overhead_s if sheet else 1e-3,
        replay_overhead_s_per_layer=replay_overhead,
        measured_hbm_bytes_per_s=copy_bw.median,
        measurements=found,
        device={k: str(v) for k, v in backend.details.items()},
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        notes=(
            f"kernels_probe {backend.name} backend; ssm kind {kind.value if kind else '-'}; "
            "efficiencies are measured rates over the datasheet peak (or over the measured "
            "copy bandwidth where there is no datasheet)",
        ),
    )


def _datasheet_for(device: str) -> HardwareProfile | None:
    wanted = device.lower().replace(" ", "").replace("nvidia", "")
    for name, sheet in datasheets().items():
        key = name.lower().replace("-", "").replace("sxm", "").replace("80gb", "")
        if key and key in wanted.replace("-", ""):
            return sheet
    return None


def _memory_bytes() -> float:
    try:
        with open("/proc/meminfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("MemTotal:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return 16e9
