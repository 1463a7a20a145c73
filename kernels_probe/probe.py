"""The microbenchmarks: copy and read bandwidth, GEMM at decode and verify shapes, SSM state
traffic (plain update, a state copy per verified position, replay for L = 8, 16, 32) at the
model's own shapes, and a fixed per-kernel overhead. The result is the HardwareProfile JSON the
sidecar loads (`autotuner predict --profile`).

Backends: torch + CUDA when a GPU is present (events and synchronisation), else numpy on the
CPU with small sizes, so tests, CI and the demo exercise the same code. `torch-cpu` (asked for
by name) measures the CPU itself with torch in float32, the arithmetic vLLM's CPU build runs:
the profile the real-vLLM tier's CPU is predicted with. It adds the rate a one-row matmul
streams weights larger than the last-level cache (a decode step's GEMMs), which sets the
`gemm` efficiency, and GEMMs with a prefill chunk's rows, which set the FLOP/s.
"""

from __future__ import annotations

import datetime
import platform
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotuner.core.model.spec import ModelSpec, SsmKind, SsmShape
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


def torch_cpu_backend(threads: int | None = None) -> Backend:
    """torch on the CPU in float32 (vLLM's CPU build runs its float32 models this way), on
    `threads` threads (None: torch's default). vLLM's CPU worker computes on the cores its
    OpenMP binding gives it (all but one by default), so a profile for it is measured on as
    many."""
    try:
        import torch
    except ImportError:
        raise RuntimeError(
            "torch is not installed in this Python; run the probe with a venv that has it "
            "(the real-vLLM tier's: ~/.cache/spec-autotuner/vllm-venv/bin/python)"
        ) from None
    if threads is not None:
        torch.set_num_threads(threads)
    return Backend(
        "torch",
        "cpu",
        torch,
        lambda: None,
        torch.float32,
        {
            "backend": "torch-cpu",
            "device": _cpu_model(),
            "torch": torch.__version__,
            "threads": str(torch.get_num_threads()),
            "memory_bytes": str(int(_memory_bytes())),
        },
    )


def choose_backend(wanted: str, threads: int | None = None) -> Backend:
    if wanted == "torch-cpu":
        return torch_cpu_backend(threads)
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
    # Weights a one-row matmul streams, in all (0: not measured): beyond the last-level cache.
    weight_stream_bytes: int = 0
    gemm_width: int = 0  # the GEMM weight's output width (0: square)


def sizes_for(backend: Backend, quick: bool) -> Sizes:
    if backend.name == "torch" and backend.device == "cpu":
        # Batches up to 128 x (1 + 3): GEMMs of up to 512 rows, a prefill chunk's.
        batches = (1, 4, 16, 64, 128)
        return Sizes(64 << 20, 4, batches, 1024, 8, 5 if quick else 9, 256 << 20, 4096)
    if backend.name == "torch":
        return Sizes(1 << 30, 4, (1, 8, 64, 256, 512), 8192, 0, 20 if quick else 50)
    if quick:
        return Sizes(16 << 20, 3, (1, 4), 512, 4, 5)
    return Sizes(64 << 20, 4, (1, 4, 16), 1024, 8, 9)


class Recorder:
    """Runs each measurement on one backend at one size, keeping every result by name in the
    order taken (the profile's `measurements`) and reporting each name as it completes."""

    def __init__(self, backend: Backend, sizes: Sizes, progress: Callable[[str], None]) -> None:
        self.backend = backend
        self.sizes = sizes
        self.progress = progress
        self.found: dict[str, Measurement] = {}

    def measure(self, name: str, run: Callable[[int], Any], work: float, unit: str) -> Measurement:
        result = measure(
            run, work=work, unit=unit, sync=self.backend.sync, repeats=self.sizes.repeats
        )
        self.found[name] = result
        self.progress(name)
        return result


WINDOWS = (8, 16, 32)  # replay windows L probed


@dataclass(frozen=True)
class Rates:
    """What the profile is built from, of everything the microbenchmarks measured."""

    copy_bw: Measurement
    read_bw: Measurement
    gemm_rates: list[float]
    weight_stream: Measurement | None
    state_rates: list[float]  # the plain state update's B/s per batch; empty without SSM
    replay_overhead: float  # replay's extra seconds per SSM layer per step


def run_probe(
    backend: Backend,
    model: ModelSpec,
    *,
    quick: bool = False,
    progress: Callable[[str], None] = lambda name: None,
) -> HardwareProfile:
    """Measure everything and build the profile."""
    recorder = Recorder(backend, sizes_for(backend, quick), progress)
    copy_bw, read_bw = _bandwidth(recorder)
    gemm_rates = _gemms(recorder)
    weight_stream = _weight_stream(recorder) if recorder.sizes.weight_stream_bytes else None
    state_rates: list[float] = []
    replay_overhead = 0.0
    if model.ssm is not None:
        state_rates, replay_overhead = _ssm_traffic(recorder, model.ssm)
    _launch(recorder)
    rates = Rates(copy_bw, read_bw, gemm_rates, weight_stream, state_rates, replay_overhead)
    return build_profile(backend, recorder.found, rates, model.ssm.kind if model.ssm else None)


def _bandwidth(recorder: Recorder) -> tuple[Measurement, Measurement]:
    """(copy, read) bandwidth, rotating through buffers larger than any cache."""
    backend, sizes = recorder.backend, recorder.sizes
    elements = sizes.buffer_bytes // 4
    sources = [backend.random((elements,)) for _ in range(sizes.buffers)]
    targets = [backend.empty((elements,)) for _ in range(sizes.buffers)]

    def copy(i: int) -> None:
        j = i % sizes.buffers
        if backend.name == "torch":
            targets[j].copy_(sources[j])
        else:
            np.copyto(targets[j], sources[j])

    copy_bw = recorder.measure("copy_bytes_per_s", copy, 2 * sizes.buffer_bytes, "B/s")
    read_bw = recorder.measure(
        "read_bytes_per_s", lambda i: sources[i % sizes.buffers].sum(), sizes.buffer_bytes, "B/s"
    )
    return copy_bw, read_bw


def _gemms(recorder: Recorder) -> list[float]:
    """GEMM FLOP/s at decode and verify shapes: rows = batch x (1 + K). On the CPU the weight
    is as wide as an MLP's up projection (4 x hidden): square 1024 ones run at about half the
    rate there, which is not what a model's GEMMs see. Weights are stored as a model's linear
    layers store them, (out, in), and multiplied transposed."""
    backend, sizes = recorder.backend, recorder.sizes
    hidden = sizes.gemm_hidden
    width = sizes.gemm_width or hidden
    weight = backend.random((width, hidden), backend.gemm_dtype).T
    rates = []
    for rows in sorted({b * n for b in sizes.batches for n in (1, 4)}):
        activations = backend.random((rows, hidden), backend.gemm_dtype)
        work = 2 * rows * hidden * width
        result = recorder.measure(
            f"gemm_flops_rows_{rows}", _gemm(activations, weight), work, "FLOP/s"
        )
        rates.append(result.median)
    return rates


def _weight_stream(recorder: Recorder) -> Measurement:
    """B/s of a decode step's GEMMs: one row times weights of the GEMMs' shape, stored (out, in)
    as a model's linear layers store them (the (in, out) layout streams about 30% faster on a
    CPU, which no model's decode sees), that together exceed the last-level cache, rotated so
    each call reads its weight from memory."""
    backend, sizes = recorder.backend, recorder.sizes
    shape = (sizes.gemm_width or sizes.gemm_hidden, sizes.gemm_hidden)
    each = 4 * shape[0] * shape[1]
    count = max(sizes.weight_stream_bytes // each, 2)
    weights = [backend.random(shape).T for _ in range(count)]
    row = backend.random((1, shape[1]))
    return recorder.measure(
        "weight_stream_bytes_per_s", lambda i: row @ weights[i % count], each, "B/s"
    )


@dataclass(frozen=True)
class StateShape:
    """The SSM state probed at one batch: (batch, heads, head_dim p, state size s), B in g
    groups; fewer heads than the model's on a CPU."""

    batch: int
    heads: int
    p: int
    s: int
    g: int

    @property
    def dims(self) -> tuple[int, int, int, int]:
        return self.batch, self.heads, self.p, self.s

    @property
    def state_bytes(self) -> int:
        return 4 * self.batch * self.heads * self.p * self.s

    def ring_bytes(self, entries: int) -> int:
        """Bytes of `entries` ring entries as the kernel moves them: x and dt per head, B per
        group."""
        return 4 * entries * self.batch * (self.heads * (self.p + 1) + self.g * self.s)


def _ssm_traffic(recorder: Recorder, ssm: SsmShape) -> tuple[list[float], float]:
    """SSM state traffic at the model's shapes: the plain update, native speculation's state
    copies and replay at each window, per batch. Returns the plain update's rates and what
    replay adds per layer per step at the first batch (over L = 16, 7 ring entries)."""
    sizes = recorder.sizes
    heads = sizes.ssm_heads or ssm.heads
    state_rates: list[float] = []
    replay_overhead = 0.0
    for batch in sizes.batches:
        shape = StateShape(batch, heads, ssm.head_dim, ssm.state_size, min(ssm.groups, heads))
        state = recorder.backend.random(shape.dims)
        state_rates.append(_plain_update(recorder, shape, state))
        _state_copies(recorder, shape, state)
        replay = {window: _replay(recorder, shape, state, window) for window in WINDOWS}
        if batch == sizes.batches[0]:
            plain_time = 2 * shape.state_bytes / state_rates[-1]
            replay_bytes = shape.state_bytes + shape.ring_bytes(7) + shape.state_bytes / 16
            replay_time = replay_bytes / replay[16]
            replay_overhead = max(replay_time - plain_time, 0.0) * ssm.heads / heads
    return state_rates, replay_overhead


def _plain_update(recorder: Recorder, shape: StateShape, state: Any) -> float:
    """B/s of the one-token state update: decay the state and add the input's outer product."""
    backend = recorder.backend
    batch, heads, p, s = shape.dims
    x = backend.random((batch, heads, p, 1))
    b = backend.random((batch, 1, 1, s))
    decay = backend.full((batch, heads, 1, 1), 0.9)

    def plain(i: int) -> None:
        state.mul_(decay).add_(x * b) if backend.name == "torch" else np.add(
            state * decay, x * b, out=state
        )

    name = f"ssm_update_bytes_per_s_batch_{batch}"
    return recorder.measure(name, plain, 2 * shape.state_bytes, "B/s").median


def _state_copies(recorder: Recorder, shape: StateShape, state: Any) -> None:
    """B/s of native speculation's state copies: one state written per verified position."""
    backend = recorder.backend
    slots = [backend.empty(shape.dims) for _ in range(4)]

    def copies(i: int) -> None:
        for slot in slots:  # one state written per verified position (K = 3)
            slot.copy_(state) if backend.name == "torch" else np.copyto(slot, state)

    name = f"state_copy_bytes_per_s_batch_{shape.batch}"
    recorder.measure(name, copies, 5 * shape.state_bytes, "B/s")


def _replay(recorder: Recorder, shape: StateShape, state: Any, window: int) -> float:
    """B/s of ReplaySSM's rebuild at window `window`: read checkpoint + ring, rebuild the state
    as one contraction; the state itself is written only on a flush (every L tokens)."""
    backend, xp = recorder.backend, recorder.backend.xp
    batch, heads, p, s = shape.dims
    occupancy = (window - 1) // 2
    ring_x = backend.random((occupancy, batch, heads, p))
    ring_b = backend.random((occupancy, batch, s))
    weights = backend.random((occupancy, batch, heads))

    def rebuild(i: int) -> Any:
        return state + xp.einsum("tbh,tbhp,tbs->bhps", weights, ring_x, ring_b)

    work = shape.state_bytes + shape.ring_bytes(occupancy) + shape.state_bytes / window
    name = f"replay_L{window}_bytes_per_s_batch_{batch}"
    return recorder.measure(name, rebuild, work, "B/s").median


def _launch(recorder: Recorder) -> Measurement:
    """Fixed cost of one small kernel (launch + synchronisation on a GPU)."""
    tiny = recorder.backend.random((8,))
    return recorder.measure("small_kernel_per_s", lambda i: tiny + 1.0, 1.0, "1/s")


def _gemm(activations: Any, weight: Any) -> Callable[[int], Any]:
    def run(i: int) -> Any:
        return activations @ weight

    return run


def build_profile(
    backend: Backend,
    found: dict[str, Measurement],
    rates: Rates,
    kind: SsmKind | None,
) -> HardwareProfile:
    """The profile from the measured rates: efficiencies over the datasheet's peaks, or over
    the measured copy bandwidth and GEMM rate where the device has no datasheet."""
    copy_bw, read_bw, gemm_rates, state_rates = (
        rates.copy_bw,
        rates.read_bw,
        rates.gemm_rates,
        rates.state_rates,
    )
    sheet = _datasheet_for(backend.details.get("device", ""))
    if sheet is not None:
        peak_bw, peak_flops, fp32, memory = (
            sheet.hbm_bytes_per_s,
            sheet.bf16_flops,
            sheet.fp32_flops,
            sheet.memory_bytes,
        )
    else:  # a CPU or an unknown GPU: the fastest measured traffic is the ceiling
        peak_bw = max(copy_bw.median, rates.weight_stream.median if rates.weight_stream else 0)
        peak_flops = max(gemm_rates) if gemm_rates else 1e12
        fp32 = peak_flops
        memory = float(backend.details.get("memory_bytes", 0) or _memory_bytes())

    def share(value: float) -> float:
        return float(min(max(value / peak_bw, 0.01), 1.0))

    streamed = rates.weight_stream.median if rates.weight_stream else read_bw.median
    efficiency = KernelEfficiency(
        gemm=share(streamed),
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
        replay_overhead_s_per_layer=rates.replay_overhead,
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


def _cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else the machine type."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> float:
    try:
        with open("/proc/meminfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("MemTotal:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return 16e9
