"""The load generator must not be the bottleneck: measured tokens/s against a simulated server
of known speed (in its own process, as vLLM is), at 512 streams. Issue #8 target: >= 95% of the
configured rate on 2 cores.

Run: python -m benchmarks.bench_overhead [--streams 512] [--step-ms 50] [--output-len 256]
"""

from __future__ import annotations

import time

from autotuner.bench.load import LoadGenerator
from benchmarks.options import numbers
from benchmarks.sim_process import sim_server


def main() -> None:
    args = numbers(__doc__, streams=512, step_ms=50.0, output_len=256, repeats=3)
    with sim_server(args.step_ms) as url:
        step = args.step_ms / 1000
        configured = args.streams / step  # every stream gains one token per step
        building = time.perf_counter()
        with LoadGenerator(url) as load:
            built_s = time.perf_counter() - building
            load.run(args.streams, ["warm up"], 4)  # opens the connections
            results = [load.run(args.streams, ["p"], args.output_len) for _ in range(args.repeats)]
    rates = sorted(r.tokens_per_s for r in results)
    median = rates[len(rates) // 2]
    print(
        f"{args.streams} streams x {args.output_len} tokens, simulated step {args.step_ms:g} ms "
        f"(server in its own process): configured {configured:,.0f} tokens/s, ideal run "
        f"{args.output_len * step:.2f}s"
    )
    for i, r in enumerate(results):
        print(
            f"  run {i}: {r.tokens_per_s:,.0f} tokens/s in {r.seconds:.2f}s, {r.failures} failures"
        )
    print(
        f"ratio measured / configured: median {median / configured:.3f}, best "
        f"{rates[-1] / configured:.3f}"
    )
    print(f"target >= 0.95: {median / configured >= 0.95}")
    print(f"generator set-up (1024 stream clients): {built_s:.3f}s")


if __name__ == "__main__":
    main()
