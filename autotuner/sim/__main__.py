"""python -m autotuner.sim --port P [--engine vllm|sglang] [--step-ms 20] [--spec-tokens 0]
[--acceptance 0.8,...] [--model ID]

A standalone simulated engine (metrics + completions) with a fixed step time: the known-speed
server the load generator's own overhead is measured against (it must run in its own process,
as the engine does, or the two share one interpreter lock). `--engine sglang` serves SGLang
0.5.23's metrics, `/server_info` and `/model_info` for the registry model `--model`."""

from __future__ import annotations

import argparse
import signal
import threading

from autotuner.core.model.registry import load_model
from autotuner.sim.completions import CompletionsEngine
from autotuner.sim.engine import SimSetup, SimulatedVllm
from autotuner.sim.server import SimServer
from autotuner.sim.sglang import SglangServer


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--engine", choices=("vllm", "sglang"), default="vllm")
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--spec-tokens", type=int, default=0)
    parser.add_argument("--acceptance", default="")
    parser.add_argument("--model", default="Qwen/Qwen3.5-122B-A10B", help="(sglang) registry id")
    return parser.parse_args()


def sglang_server(args: argparse.Namespace, engine: CompletionsEngine) -> SimServer:
    """The simulated SGLang started as an operator would start it for this K."""
    model = load_model(args.model)
    tokens = ["--model-path", model.name, "--enable-metrics", "--max-running-requests", "1024"]
    if args.spec_tokens:
        k = str(args.spec_tokens)
        tokens += ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", k]
        tokens += ["--speculative-eagle-topk", "1"]
    kind = SglangServer(model, tuple(engine.setup().acceptance))
    sim = kind.simulator(
        setup=kind.running(engine.setup().setup, tokens), load=lambda t: float(engine.running())
    )
    routes = kind.routes(sim, None)
    return SimServer(sim, port=args.port, completions=engine, routes=routes)


def main() -> None:
    args = options()
    rates = tuple(float(x) for x in args.acceptance.split(",") if x)
    setup = SimSetup(spec_tokens=args.spec_tokens, acceptance=rates)
    engine = CompletionsEngine(lambda: setup, lambda batch, s: args.step_ms / 1000)
    if args.engine == "sglang":
        server = sglang_server(args, engine)
    else:
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
