"""The sweep: every setup through the actuator, every batch size as exactly that many
concurrent streams, measured against the server's own /metrics, resumable.

Results go to DIR: header.json (what is held fixed), results.jsonl (one line per finished
point, appended as it finishes: an interrupted sweep continues from there), canary/SETUP.json
(one greedy canary run per setup, on the idle server right after the switch), and at the end
results.csv, results.json (with each setup's canary compared with the first setup's) and
plot.png / plot.svg (with the `plots` extra).

Time (tokens/s, per-token latency, the wait for a restarted server) is read from a Clock: the
wall clock by default; a simulated engine's own clock in tests, so that they measure the
simulator's truth exactly however busy the machine is.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from autotuner.actuators.base import Actuator
from autotuner.bench.load import Clock, LoadGenerator, WallClock
from autotuner.bench.prompts import prompts_hash
from autotuner.canary import CanaryPrompt, CanaryRun, compare, run_canary
from autotuner.core.engine.workload import Workload
from autotuner.core.model.spec import ModelSpec
from autotuner.core.predict.acceptance import from_conditional
from autotuner.core.predict.costmodel import predict
from autotuner.core.predict.hardware import HardwareProfile
from autotuner.core.types import Setup
from autotuner.core.vocabulary import Word
from autotuner.engines.vllm.capabilities import FOLLOW_BUILD
from autotuner.errors import ActuatorError, CanaryError, InputError, SourceError, SweepError
from autotuner.sources.vllm_metrics import window_totals
from autotuner.sources.vllm_scrape import VllmScraper


@dataclass(frozen=True)
class Plan:
    setups: tuple[Setup, ...]
    batches: tuple[int, ...]
    repeats: int = 2
    output_len: int = 256
    prompts: tuple[str, ...] = ()
    canary: tuple[CanaryPrompt, ...] = ()  # empty: no quality check
    canary_max_tokens: int = 32


class PointStatus(Word):
    """A point was measured, or the server refused its setup (or its metrics)."""

    OK = "ok"
    REFUSED = "refused"


@dataclass
class Point:
    setup: str
    batch: int
    repeat: int
    status: PointStatus
    message: str = ""
    tokens_per_s: float = 0.0
    time_per_token_p50_s: float = 0.0
    time_per_token_p90_s: float = 0.0
    step_time_s: float | None = None
    acceptance: list[float] = field(default_factory=list)
    tau: float | None = None
    predicted_tokens_per_s: float | None = None
    predicted_step_time_s: float | None = None
    failures: int = 0

    def __post_init__(self) -> None:
        self.status = PointStatus(self.status)  # read back from results.jsonl as a word

    @property
    def key(self) -> tuple[str, int, int]:
        return self.setup, self.batch, self.repeat


class Sweep:
    def __init__(
        self,
        *,
        url: str,
        actuator: Actuator,
        out: Path,
        plan: Plan,
        model: ModelSpec,
        hardware: HardwareProfile,
        workload: Workload | None = None,
        ready_timeout_s: float = 600.0,
        on_point: Callable[[Point], None] = lambda point: None,
        clock: Clock | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.actuator = actuator
        if actuator.engine is None:  # write each setup with the companion flags its build needs
            actuator.engine = FOLLOW_BUILD.serving(model)
        self.out = out
        self.plan = plan
        self.model = model
        self.hardware = hardware
        self.workload = workload or Workload()
        self.ready_timeout_s = ready_timeout_s
        self.on_point = on_point
        self.clock: Clock = clock or WallClock()
        self.results = out / "results.jsonl"
        self.plots: list[Path] = []  # the figures written at the end (none without matplotlib)

    # ----------------------------------------------------------------- bookkeeping

    def header(self) -> dict[str, Any]:
        return {
            "model": self.model.name,
            "gpu": self.hardware.name,
            "vllm_version": self._version(),
            "prompts_hash": prompts_hash(list(self.plan.prompts)),
            "output_len": self.plan.output_len,
            "setups": [s.label for s in self.plan.setups],
            "batches": list(self.plan.batches),
            "repeats": self.plan.repeats,
        }

    def _version(self) -> str:
        try:
            return str(httpx.get(f"{self.url}/version", timeout=5).json().get("version"))
        except (httpx.HTTPError, ValueError):
            return "unknown"

    def finished(self) -> dict[tuple[str, int, int], Point]:
        if not self.results.exists():
            return {}
        points = [
            Point(**json.loads(line))
            for line in self.results.read_text().splitlines()
            if line.strip()
        ]
        return {p.key: p for p in points}

    def _record(self, point: Point) -> None:
        with self.results.open("a", encoding="utf-8") as stream:
            stream.write(json.dumps(asdict(point)) + "\n")
        self.on_point(point)

    # ----------------------------------------------------------------- running

    def run(self) -> list[Point]:
        self.out.mkdir(parents=True, exist_ok=True)
        header_file = self.out / "header.json"
        header = self.header()
        if header_file.exists():
            previous = json.loads(header_file.read_text())
            fixed = ("model", "gpu", "prompts_hash", "output_len")
            if any(previous.get(k) != header[k] for k in fixed):
                raise SweepError(
                    f"{self.out} holds a different sweep ({previous}); use "
                    "another --out to start a new one"
                )
        header_file.write_text(json.dumps(header, indent=2) + "\n")
        done = self.finished()
        streams = max(self.plan.batches)
        with LoadGenerator(self.url, max_streams=streams, clock=self.clock) as load:
            for setup in self.plan.setups:
                wanted = [
                    (b, r)
                    for b in self.plan.batches
                    for r in range(self.plan.repeats)
                    if (setup.label, b, r) not in done
                ]
                if not wanted:
                    continue
                refusal = self._switch(setup)
                if refusal is not None:
                    for batch, repeat in wanted:
                        self._record(
                            Point(setup.label, batch, repeat, PointStatus.REFUSED, refusal)
                        )
                    continue
                self._canary(setup)
                for batch in sorted({b for b, _ in wanted}):
                    load.run(batch, list(self.plan.prompts), self.plan.output_len)  # warm-up
                    for repeat in [r for b, r in wanted if b == batch]:
                        self._record(self._measure(load, setup, batch, repeat))
        self._write_outputs()
        return list(self.finished().values())

    def _switch(self, setup: Setup) -> str | None:
        """Apply the setup; a refused change is returned as its message. A server that does
        not come back stops the sweep."""
        try:
            live = self.actuator.read()
            self.actuator.apply(setup, state=None, expected_version=live.version)
        except ActuatorError as exc:
            return str(exc)
        deadline = self.clock() + self.ready_timeout_s
        self.clock.wait(0.2)
        while self.clock() < deadline:
            try:
                healthy = httpx.get(f"{self.url}/health", timeout=5).status_code == 200
                probe = (
                    healthy
                    and httpx.post(
                        f"{self.url}/v1/completions",
                        json={"prompt": "ready?", "max_tokens": 1},
                        timeout=30,
                    ).status_code
                    == 200
                )
            except httpx.HTTPError:
                probe = False
            if probe:
                return None
            self.clock.wait(0.5)
        raise SweepError(
            f"the server did not come back within {self.ready_timeout_s:g}s after "
            f"switching to {setup.label}; finished points are in {self.results}"
        )

    def _canary_file(self, setup: Setup) -> Path:
        return self.out / "canary" / f"{setup.label.replace(':', '_')}.json"

    def _canary(self, setup: Setup) -> None:
        """One greedy canary run per setup, kept for the quality columns of the report."""
        path = self._canary_file(setup)
        if not self.plan.canary or path.exists():
            return
        try:
            run = run_canary(
                self.url,
                list(self.plan.canary),
                max_tokens=self.plan.canary_max_tokens,
                setup=setup.label,
            )
        except CanaryError as exc:
            record: dict[str, Any] = {"setup": setup.label, "error": str(exc)}
        else:
            record = run.to_json()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2) + "\n")

    def quality(self) -> dict[str, dict[str, Any]]:
        """Each setup's canary against the first setup's: speed and quality side by side."""
        runs: dict[str, CanaryRun | str] = {}
        for setup in self.plan.setups:
            path = self._canary_file(setup)
            if not path.exists():
                continue
            try:
                data = json.loads(path.read_text())
                runs[setup.label] = data["error"] if "error" in data else CanaryRun.from_json(data)
            except (ValueError, InputError) as exc:
                runs[setup.label] = f"{path}: unreadable ({exc})"
        reference = next((r for r in runs.values() if isinstance(r, CanaryRun)), None)
        report: dict[str, dict[str, Any]] = {}
        for label, run in runs.items():
            if isinstance(run, str):
                report[label] = {"verdict": "error", "summary": run}
            elif reference is None or run is reference:
                report[label] = {"verdict": "reference", "summary": "the reference run"}
            else:
                try:
                    comparison = compare(reference, run)
                except InputError as exc:  # a resumed sweep with another canary set
                    report[label] = {"verdict": "error", "summary": str(exc)}
                    continue
                report[label] = {
                    "verdict": comparison.verdict.value,
                    "summary": comparison.summary,
                    "exact_match_rate": comparison.exact_match_rate,
                    "against": reference.setup,
                }
        return report

    def _measure(self, load: LoadGenerator, setup: Setup, batch: int, repeat: int) -> Point:
        scraper = VllmScraper([f"{self.url}/metrics"])
        try:
            before = scraper.scrape()
            run = load.run(batch, list(self.plan.prompts), self.plan.output_len)
            after = scraper.scrape()
            totals = window_totals([before, after])
        except SourceError as exc:
            return Point(setup.label, batch, repeat, PointStatus.REFUSED, f"metrics: {exc}")
        finally:
            scraper.close()
        rates: list[float] = []
        tau = None
        if totals.speculation and totals.drafts > 0:
            previous = totals.drafts
            for accepted in totals.accepted_per_position:
                rates.append(accepted / previous if previous > 0 else 0.0)
                previous = accepted
            tau = 1 + totals.accepted / totals.drafts
        accept = from_conditional((rates + [0.0] * setup.spec_tokens)[: setup.spec_tokens])
        curve = predict(self.model, self.hardware, setup, [batch], accept, self.workload)
        return Point(
            setup=setup.label,
            batch=batch,
            repeat=repeat,
            status=PointStatus.OK,
            tokens_per_s=run.tokens_per_s,
            time_per_token_p50_s=run.time_per_token_p50_s,
            time_per_token_p90_s=run.time_per_token_p90_s,
            step_time_s=totals.step_time.mean,
            acceptance=rates,
            tau=tau,
            predicted_tokens_per_s=float(curve.tokens_per_s[0]),
            predicted_step_time_s=float(curve.step_time_s[0]),
            failures=run.failures,
        )

    def _write_outputs(self) -> None:
        points = sorted(self.finished().values(), key=lambda p: (p.setup, p.batch, p.repeat))
        rows = [asdict(p) for p in points]
        header = json.loads((self.out / "header.json").read_text())
        (self.out / "results.json").write_text(
            json.dumps(
                {
                    "header": header,
                    "points": rows,
                    "quality": self.quality(),
                },
                indent=2,
            )
            + "\n"
        )
        with (self.out / "results.csv").open("w", newline="", encoding="utf-8") as stream:
            writer = csv.DictWriter(stream, fieldnames=list(rows[0]) if rows else ["setup"])
            writer.writeheader()
            for row in rows:
                writer.writerow(
                    {**row, "acceptance": " ".join(f"{a:.4f}" for a in row["acceptance"])}
                )
        title = f"{header['model']} on {header['gpu']} (vLLM {header['vllm_version']})"
        self.plots = write_plots(points, self.out / "plot", f"{title}: measured vs cost model")


def write_plots(points: list[Point], stem: Path, title: str) -> list[Path]:
    """STEM.png and STEM.svg: measured (with the repeats' spread) vs predicted tokens/s by batch
    per setup; none without matplotlib (the `plots` extra)."""
    from autotuner import plots

    ok = [p for p in points if p.status is PointStatus.OK]
    if not ok or not plots.available():
        return []
    figure = plots.bench_figure(
        [plots.BenchPoint(p.setup, p.batch, p.tokens_per_s, p.predicted_tokens_per_s) for p in ok],
        title,
    )
    return plots.save(figure, stem)
