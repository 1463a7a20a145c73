"""What the quality canary costs the server: the load's tokens/s with and without one canary run
beside it, and the canary's tokens as a share of a minute of what the server served. Issue #11
target: under 1% of a minute's capacity.

The server is the simulated vLLM in its own process with a fixed step time (a memory-bound
decode step: one more sequence costs little), driven by N closed-loop streams.

Run: python -m benchmarks.canary_cost [--streams 64] [--step-ms 20] [--seconds 20]
"""

from __future__ import annotations

import threading
import time

from autotuner.bench.load import LoadGenerator
from autotuner.canary import CanaryRun, load_canary, run_canary
from benchmarks.options import numbers
from benchmarks.sim_process import sim_server


def served(url: str, streams: int, seconds: float, output_len: int) -> float:
    """Tokens/s of `streams` closed-loop streams over about `seconds`."""
    with LoadGenerator(url, max_streams=streams) as load:
        tokens, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            tokens += load.run(streams, ["p"], output_len).tokens
        return tokens / (time.perf_counter() - started)


def main() -> None:
    args = numbers(__doc__, streams=64, step_ms=20.0, seconds=20.0, output_len=64, max_tokens=32)
    with sim_server(args.step_ms) as url:
        served(url, args.streams, 1.0, 8)  # warm-up: connections, the engine task
        alone = served(url, args.streams, args.seconds, args.output_len)
        runs: list[CanaryRun] = []
        canary = threading.Thread(
            target=lambda: runs.append(
                run_canary(url, load_canary(None), max_tokens=args.max_tokens)
            )
        )
        canary.start()
        beside = served(url, args.streams, args.seconds, args.output_len)
        canary.join()
    run = runs[0]
    minute = alone * 60
    print(
        f"{args.streams} streams x {args.output_len} tokens, simulated step {args.step_ms:g} ms, "
        f"{args.seconds:g}s per measurement (server in its own process)"
    )
    print(f"  load alone:           {alone:,.0f} tokens/s")
    print(f"  load beside a canary: {beside:,.0f} tokens/s")
    print(
        f"  canary: {len(run.prompts)} prompts x {run.max_tokens} tokens = "
        f"{run.completion_tokens} tokens in {run.duration_s:.2f}s, one prompt at a time"
    )
    print(f"ratio load tokens/s beside / alone: {beside / alone:.3f}")
    share = run.completion_tokens / minute
    print(f"canary tokens / one minute served: {share:.4%} (target < 1%: {share < 0.01})")


if __name__ == "__main__":
    main()
