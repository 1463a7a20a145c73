"""A simulated deployment: a simulated engine behind HTTP, restarted (with a gap and a counter
reset) whenever the engine's args in its manifest change. The demo and the end-to-end tests
point `autotuner run` at it; its step times come from a TruthEngine, so they differ from the
cost model by a hidden error. Nothing is served during the gap, and a setup the model or the
engine cannot run does not come up (the server stays down until the manifest asks for one it
can run). Which engine it simulates is a `ServerKind`: vLLM's (`VllmServer`, the default) or
SGLang's (sim/sglang.py `SglangServer`)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from autotuner.actuators.base import LiveTarget
from autotuner.actuators.manifest import ManifestActuator
from autotuner.core.engine.capabilities import EngineCapabilities
from autotuner.core.model.spec import ModelSpec
from autotuner.core.predict.acceptance import from_conditional
from autotuner.core.predict.costmodel import predict
from autotuner.core.types import Setup
from autotuner.engines.build_table import image_version
from autotuner.engines.dialect import Dialect
from autotuner.engines.vllm.args import parse
from autotuner.engines.vllm.builds import TABLE
from autotuner.engines.vllm.capabilities import FOLLOW_BUILD
from autotuner.engines.vllm.companions import missing, spelled
from autotuner.engines.vllm.setup import vllm_tokens
from autotuner.errors import ActuatorError
from autotuner.sim.clock import EngineClock
from autotuner.sim.completions import CompletionsEngine
from autotuner.sim.engine import SimSetup, SimulatedVllm
from autotuner.sim.server import SimServer
from autotuner.sim.truth import TruthEngine

Routes = Mapping[str, Callable[[], object]]


class ServerKind(Protocol):
    """What differs between the engines a simulated deployment runs: how the manifest's
    command line is read, which change restarts the server, what it refuses, what runs."""

    @property
    def dialect(self) -> Dialect | None:
        """How the manifest is read (None: vLLM's)."""

    def tokens(self, command: Sequence[str], args: Sequence[str]) -> list[str]:
        """The engine's argument list in a container."""

    def wanted(self, live: LiveTarget, tokens: Sequence[str]) -> Hashable:
        """What the manifest asks the engine to run: a change of it restarts the server."""

    def label(self, wanted: Hashable) -> str:
        """`wanted` in the deployment's history."""

    def refusal(self, setup: Setup, tokens: Sequence[str], image: str | None) -> str | None:
        """Why the engine would not come up (None: it starts)."""

    def running(self, setup: Setup, tokens: Sequence[str]) -> SimSetup:
        """What a server that came up runs."""

    def max_running(self) -> float:
        """Requests the running server admits at once (its own cap, beside memory)."""

    def runs_at(self, setup: Setup, batch: float) -> Setup:
        """The setup whose speed a server running `setup` has at this batch."""

    def simulator(self, **options: Any) -> SimulatedVllm:
        """The simulated engine, built with SimulatedVllm's options."""

    def routes(self, sim: SimulatedVllm, image: str | None) -> Routes:
        """The GET endpoints its server answers with JSON."""

    def serves_metrics(self) -> bool:
        """Whether the running server answers `/metrics`."""


@dataclass
class VllmServer:
    """vLLM: a restart when the Setup the args configure changes; refused as the capability
    table's row for the build the image names says (companion flags included)."""

    model: ModelSpec
    engine: EngineCapabilities
    acceptance: tuple[float, ...]
    dialect: Dialect | None = None

    def tokens(self, command: Sequence[str], args: Sequence[str]) -> list[str]:
        return vllm_tokens(command, args)

    def wanted(self, live: LiveTarget, tokens: Sequence[str]) -> Hashable:
        return live.setup

    def label(self, wanted: Hashable) -> str:
        assert isinstance(wanted, Setup)
        return wanted.label

    def refusal(self, setup: Setup, tokens: Sequence[str], image: str | None) -> str | None:
        """A model without recurrent state has no replay; the engine build accepts what its
        capabilities say: under the `build` preset, the capability table's row for the build
        the manifest's image names, companion flags included, as vLLM checks them at start."""
        if setup.replay_window and not self.model.is_hybrid:
            return f"{self.model.name} has no recurrent state: no --use-replayssm"
        engine = self.engine.serving(self.model)
        if engine.follows_build:
            engine = engine.running_on(TABLE.build_in_force(image=image))
        refused = engine.refusal(setup)
        row = engine.row
        if refused is not None or row is None or not engine.follows_build:
            return refused
        absent = missing(tokens, engine.companions(setup))
        if absent:
            needs = ", ".join(spelled(c) for c in absent)
            return f"{row.name}: {setup.kind.value} needs {needs} ({row.source})"
        return None

    def running(self, setup: Setup, tokens: Sequence[str]) -> SimSetup:
        """Prefix caching as the args say (on unless turned off, vLLM's default for hybrids)."""
        caching = parse(tokens).enable_prefix_caching is not False
        return SimSetup.of(setup, self.acceptance, prefix_caching=caching)

    def max_running(self) -> float:
        return math.inf

    def runs_at(self, setup: Setup, batch: float) -> Setup:
        return setup

    def simulator(self, **options: Any) -> SimulatedVllm:
        return SimulatedVllm(**options)

    def routes(self, sim: SimulatedVllm, image: str | None) -> Routes:
        version = image_version(image) or TABLE.table()[0]  # as the image's vLLM answers
        return {"/version": lambda: {"version": version}}

    def serves_metrics(self) -> bool:
        return True


class SimulatedDeployment:
    def __init__(
        self,
        manifest: Path,
        truth: TruthEngine,
        *,
        load: Callable[[float], float] | None = None,
        acceptance: Sequence[float],
        restart_gap_s: float = 2.0,
        engines: int = 1,
        poll_s: float = 0.1,
        clock: Callable[[], float] = time.time,
        generate: Callable[[str, int], str] | None = None,
        engine: EngineCapabilities | None = None,
        watch: bool = True,
        engine_clock: EngineClock | None = None,
        kind: ServerKind | None = None,
    ) -> None:
        """`kind`: the engine simulated (vLLM's by default, with `engine` its capabilities).

        `watch`: a thread looks at the manifest every `poll_s` and a restart takes
        `restart_gap_s` real seconds (whatever `clock` says); without it the caller calls `poll()`
        and the gap passes on `clock` (a simulated clock that moves only when the caller moves
        it).

        `engine_clock`: the deployment on its engine's own time (the bench's tests), in place of
        `clock` and `watch`: completions take their simulated step times on it (no sleeping),
        the restart gap passes on it, and every request the server answers first looks at the
        manifest (no watcher thread), so whoever changed it sees the restart on their next
        request, however busy the host."""
        if engine_clock is not None:
            clock, watch = engine_clock, False
        self.truth = truth
        self.engine = engine or FOLLOW_BUILD
        self.acceptance = tuple(acceptance)
        self.kind = kind or VllmServer(truth.model, self.engine, self.acceptance)
        self.manifest = ManifestActuator(manifest, dialect=self.kind.dialect)
        self.restart_gap_s = restart_gap_s
        self.poll_s = poll_s
        self.restarts = 0
        self.history: list[tuple[float, str]] = []
        first = self.manifest.read()
        self.args = self.kind.tokens(first.command, first.args)  # the engine's args, last look
        self.image = first.image
        self.setup_asked = first.setup  # the Setup the manifest's args configure, last look
        # Without a load trace the load is the requests the engine really serves, and its
        # steps count the metrics.
        self.completions = CompletionsEngine(
            lambda: self.sim.setup,
            self._step_time,
            self._capacity,
            on_step=None if load else self._count_step,
            clock=engine_clock,
        )
        trace: Callable[[float], float] = load or (lambda t: 0.0)
        workload = truth.workload
        self.sim = self.kind.simulator(
            setup=self.kind.running(first.setup, self.args),
            load=trace,
            step_time=self._step_time,
            capacity=self._capacity,
            engines=engines,
            model_name=truth.model.name,
            clock=clock,
            prefix_hit_rate=workload.prefix_hit_rate or 0.0,
            prompt_tokens=workload.prompt_tokens or 512,
            prompt_lengths=workload.prompt_tokens is not None,
            output_tokens=workload.generation_tokens or 256,
        )
        self.server = SimServer(
            self.sim,
            completions=self.completions,
            generate=generate,
            routes=self.kind.routes(self.sim, first.image),
            serves_metrics=self.kind.serves_metrics,
        )
        self.clock = clock
        # What the manifest asked for last (run or refused).
        self.current = self.kind.wanted(first, self.args)
        self.history.append((clock(), self.kind.label(self.current)))
        self.wanted: Hashable | None = None  # restarting towards this
        self.up_at = math.inf  # when the restart towards `wanted` ends, on gap_clock
        self.gap_clock = time.monotonic if watch else clock
        self.seen = ""  # the manifest's text at the last look
        self.stop_event = threading.Event()
        self.watcher: threading.Thread | None = None
        if engine_clock is not None:
            self.server.on_request = self.poll
        if watch:
            self.watcher = threading.Thread(target=self._watch, daemon=True)
            self.watcher.start()

    @property
    def url(self) -> str:
        return f"{self.server.url}/metrics"

    def _step_time(self, batch: float, setup: SimSetup) -> float:
        return self.truth.step_time(self.kind.runs_at(setup.setup, batch), batch, setup.acceptance)

    def _count_step(self, running: int, waiting: int, step_s: float) -> None:
        with self.server.lock:
            self.sim.record_step(running, waiting, step_s)

    def _capacity(self, setup: SimSetup) -> float:
        accept = from_conditional(list(setup.acceptance)[: setup.spec_tokens])
        curve = predict(
            self.truth.model, self.truth.hardware, setup.setup, [1], accept, self.truth.workload
        )
        return min(float(curve.max_batch), self.kind.max_running())

    def refusal(self, setup: Setup, args: Sequence[str] = ()) -> str | None:
        """Why this engine would not come up with `setup` and `args` (None: it runs it), on
        the image the manifest named at the last look."""
        return self.kind.refusal(setup, args, self.image)

    def served(self) -> float:
        """Tokens generated so far, across restarts, counted up to this moment."""
        with self.server.lock:
            self.sim.advance_to(self.clock())
            return self.sim.total_generated

    def _watch(self) -> None:
        while not self.stop_event.wait(min(self.poll_s, max(self.up_at - self.gap_clock(), 0))):
            self.poll()

    def poll(self) -> None:
        """One look: a manifest that asks for another setup takes the server down (nothing is
        served), and `restart_gap_s` later the engine comes up with it, unless it
        cannot run it (then it stays down until the manifest changes again)."""
        if self.wanted is not None:
            if self.gap_clock() < self.up_at:
                return
            self._come_up(self.wanted)
            return
        try:
            text = self.manifest.path.read_text(encoding="utf-8")
            if text == self.seen:
                return  # unchanged since the last look (parsing it costs more than a step)
            live = self.manifest.read()
        except (OSError, ActuatorError):
            return  # mid-write; look again
        self.seen = text
        self.args, self.image = self.kind.tokens(live.command, live.args), live.image
        self.setup_asked = live.setup
        wanted = self.kind.wanted(live, self.args)
        if wanted == self.current:
            return
        with self.server.lock:
            self.server.up = False
            self.sim.stop()  # nothing is served while it restarts
        self.wanted, self.up_at = wanted, self.gap_clock() + self.restart_gap_s

    def _come_up(self, wanted: Hashable) -> None:
        self.current, self.wanted, self.up_at = wanted, None, math.inf
        label = self.kind.label(wanted)
        refused = self.kind.refusal(self.setup_asked, self.args, self.image)
        if refused is not None:
            self.history.append((self.clock(), f"refused {label}: {refused}"))
            return
        with self.server.lock:
            self.sim.restart(self.kind.running(self.setup_asked, self.args))
            self.server.up = True
        self.restarts += 1
        self.history.append((self.clock(), label))

    def close(self) -> None:
        self.stop_event.set()
        if self.watcher is not None:
            self.watcher.join(timeout=5)
        self.server.close()

    def __enter__(self) -> SimulatedDeployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def demo_manifest(model_id: str, setup: Setup, drafter: str | None = "mtp") -> str:
    """A vLLM Deployment like deploy/ ships, for the demo and the end-to-end tests (without a
    drafter: no --speculative-config, the model cannot speculate)."""
    import json

    config = json.dumps({"method": drafter, "num_speculative_tokens": setup.spec_tokens or 3})
    speculation = (
        f"""
            - --speculative-config
            - '{config}'"""
        if drafter
        else ""
    )
    container = f"""\
          args:
            - --model
            - {model_id}{speculation}
            - --max-num-seqs
            - "1024"
"""
    return deployment_yaml("A vLLM", "vllm", "vllm/vllm-openai:v0.33.0", container)


def deployment_yaml(title: str, name: str, image: str, container: str) -> str:
    """A one-replica Deployment (simulated: no cluster, no GPU) whose container `name` runs
    `image` with `container` (its command and args, indented as a container's fields)."""
    return f"""\
# {title} Deployment tuned by spec-autotuner (simulated: no cluster, no GPU).
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: llm
spec:
  replicas: 1
  strategy:
    type: RollingUpdate
    rollingUpdate: {{maxSurge: 0, maxUnavailable: 1}}  # never wait for a spare GPU
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
        - name: {name}
          image: {image}
{container}          resources:
            limits: {{nvidia.com/gpu: "1"}}
"""
