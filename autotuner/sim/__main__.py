"""python -m autotuner.sim --port P [--step-ms 20] [--spec-tokens 0] [--acceptance 0.8,...]

A standalone simulated vLLM (metrics + completions) with a fixed step time: the known-speed
server the load generator's own overhead is measured against (it must run in its own process,
as vLLM does, or the two share one interpreter lock)."""

from __future__ import annotations

import argparse
import signal
import threading

from autotuner.sim.completions import CompletionsEngine
from autotuner.sim.engine import SimSetup, SimulatedVllm
from autotuner.sim.server import SimServer


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__)
    options.add_argument("--port", type=int, default=0)
    options.add_argument("--step-ms", type=float, default=20.0)
    options.add_argument("--spec-tokens", type=int, default=0)
    options.add_argument("--acceptance", default="")
    args = options.parse_args()
    rates = tuple(float(x) for x in args.acceptance.split(",") if x)
    setup = SimSetup(spec_tokens=args.spec_tokens, acceptance=rates)
    engine = CompletionsEngine(lambda: setup, lambda batch, s: args.step_ms / 1000)
    sim = SimulatedVllm(setup=setup, load=lambda t: float(engine.running()))
    server = SimServer(sim, port=args.port, completions=engine)
    print(server.url, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    stop.wait()
    server.close()


if __name__ == "__main__":
    main()
