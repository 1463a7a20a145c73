"""The benchmark's world in a process of its own: the loopback API server with N Deployments
and the simulated vLLM /metrics servers, so that the controller's CPU and memory are measured
without them. Prints one JSON line with the URLs; each line read from stdin is answered with
the requests served so far (by kind), as one JSON line; EOF ends it.

Run by benchmarks/fleet.py: python -m benchmarks.fleet_servers TARGETS ENGINES
"""

from __future__ import annotations

import json
import sys
from collections import Counter

from autotuner.sim.engine import SimSetup, SimulatedVllm
from autotuner.sim.server import SimServer
from tests.support.fake_apiserver import FakeApiServer, deployment
from tests.support.fleet import ARGS


def request_kind(method: str, path: str) -> str:
    if "/spectuners" in path:
        return f"{method} spectuner{'/status' if path.endswith('/status') else ''}"
    if method == "GET":
        return f"GET {path.split('/')[-2]}"
    return f"{method} target"


def main() -> None:
    targets, engines = int(sys.argv[1]), int(sys.argv[2])
    scrapes = [0]

    def scraped() -> None:
        scrapes[0] += 1

    servers = [
        SimServer(
            SimulatedVllm(setup=SimSetup(), load=lambda t: 64.0, engines=1), on_request=scraped
        )
        for _ in range(engines)
    ]
    api = FakeApiServer()
    for i in range(targets):
        api.put("Deployment", deployment(f"t{i}", args=ARGS))
    print(json.dumps({"kube": api.url, "engines": [s.url for s in servers]}), flush=True)
    for _ in sys.stdin:
        counts = Counter(request_kind(m, p) for m, p, _ in list(api.requests))
        counts["scrapes"] = scrapes[0]
        print(json.dumps(counts), flush=True)
    api.close()
    for server in servers:
        server.close()


if __name__ == "__main__":
    main()
