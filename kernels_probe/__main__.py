"""The probe's command line: measure a HardwareProfile, or prove the replay forms exact."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

USAGE = """python -m kernels_probe [--backend auto|torch|torch-cpu|numpy] [--threads N]
    [--model ID] [--out FILE] [--quick]
python -m kernels_probe exactness"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels_probe", description=USAGE)
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("exactness", help="Prove the replay forms exact (float64); bf16 drift.")
    parser.add_argument(
        "--backend", choices=("auto", "torch", "torch-cpu", "numpy"), default="auto"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch-cpu: threads to compute on."
    )
    parser.add_argument("--model", default="nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4")
    parser.add_argument("--out", default="hardware-profile.json")
    parser.add_argument("--quick", action="store_true", help="Small sizes, few repetitions.")
    args = parser.parse_args(argv)
    if args.command == "exactness":
        return exactness()
    if args.threads is not None and (args.backend != "torch-cpu" or args.threads < 1):
        parser.error("--threads takes a count of 1 or more, with --backend torch-cpu")
    return probe(args.backend, args.model, args.out, args.quick, args.threads)


def exactness() -> int:
    from kernels_probe.exactness import BOUND, bf16_drift, run_all

    results = run_all()
    failed = False
    for name, error in results.items():
        ok = error <= BOUND
        failed |= not ok
        print(
            f"{name:28} max relative error {error:.2e}  (bound {BOUND:.0e}) "
            f"{'ok' if ok else 'FAILED'}"
        )
    print("bf16 SSM state vs float64, relative error of the state after n steps:")
    for steps, error in bf16_drift(np.random.default_rng(0)).items():
        print(f"  {steps:>6} steps: {error:.2%}")
    return 1 if failed else 0


def probe(
    backend_name: str, model_id: str, out: str, quick: bool, threads: int | None = None
) -> int:
    from rich.progress import Progress

    from autotuner.core.model.registry import load_model
    from autotuner.core.predict.hardware import save_profile
    from autotuner.errors import AutotunerError
    from kernels_probe.probe import choose_backend, run_probe

    try:
        model = load_model(model_id)
        backend = choose_backend(backend_name, threads)
    except (AutotunerError, RuntimeError) as exc:
        print(f"kernels_probe: error: {exc}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    with Progress(transient=True) as progress:
        task = progress.add_task(f"probing {backend.details.get('device')}", total=None)
        profile = run_probe(
            backend,
            model,
            quick=quick,
            progress=lambda name: progress.update(task, description=name),
        )
    save_profile(profile, out)
    e = profile.efficiency
    print(f"{profile.name} ({backend.name}) in {time.perf_counter() - started:.1f}s -> {out}")
    print(
        f"  copy {profile.measured_hbm_bytes_per_s or 0:.3e} B/s; efficiencies: gemm "
        f"{e.gemm:.2f}, ssm {e.ssm:.2f}, copies {e.copies:.2f}, mma {e.mma:.2f}; replay "
        f"overhead {profile.replay_overhead_s_per_layer * 1e6:.1f} us/layer"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
