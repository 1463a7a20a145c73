"""`autotuner observe`: scrape the engine (vLLM or SGLang) or query Prometheus over a window and
print the Observation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from autotuner.cli.common import failing_on_bad_input
from autotuner.cli.render.observation import render_observation
from autotuner.core.observe.limits import ObservationLimits
from autotuner.durations import parse_duration
from autotuner.errors import InputError

if TYPE_CHECKING:
    from autotuner.actuators.base import LiveTarget
    from autotuner.core.types import Observation


def observe(
    url: Annotated[
        list[str],
        typer.Option(help="The engine's /metrics URL (repeat for replicas) or Prometheus URL."),
    ],
    source: Annotated[
        str,
        typer.Option(
            help="vllm or sglang (a direct scrape of that engine), auto (a direct scrape of the "
            "engine the first URL shows), or prometheus."
        ),
    ] = "vllm",
    engine_kind: Annotated[
        str, typer.Option(help="Whose series Prometheus is asked for: vllm or sglang.")
    ] = "vllm",
    window: Annotated[str, typer.Option(help="Evaluation window, e.g. 30s or 5m.")] = "30s",
    interval: Annotated[str, typer.Option(help="Scrape interval (vllm source).")] = "1s",
    selector: Annotated[
        str, typer.Option(help='Prometheus label selector, e.g. namespace="llm",model_name="x".')
    ] = "",
    scrape_interval: Annotated[
        str, typer.Option(help="Prometheus's scrape interval (range-query step).")
    ] = "15s",
    min_drafts: Annotated[float, typer.Option(help="Drafts needed to trust acceptance.")] = 200,
    timeout: Annotated[
        str, typer.Option(help="Deadline of each scrape or query (the whole answer).")
    ] = "5s",
    target: Annotated[
        str | None,
        typer.Option(
            help="The serving object (k8s://NS/KIND/NAME, file://PATH or exec://PATH; its engine "
            "read from its command line): its live args give the K schedule and the drafter, so "
            "that each position's acceptance counts only the drafts that proposed it."
        ),
    ] = None,
    kube_server: Annotated[str | None, typer.Option(help="API server URL (k8s targets).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the Observation as JSON.")] = False,
) -> None:
    """Scrape the engine (or query Prometheus) over a window and print the Observation.

    Exit status 3 when the window is unusable (the reason is printed)."""
    from autotuner.actuators.targets import open_target
    from autotuner.cli.target import target_engine
    from autotuner.core.observe.observation import read_acceptance
    from autotuner.core.observe.workload import served_workload
    from autotuner.engines.kinds import EngineKind

    live: LiveTarget | None = None
    if target:
        with failing_on_bad_input(target_code=1):
            dialect = target_engine(EngineKind.AUTO, target, kube_server).dialect()
            live = open_target(target, kube_server=kube_server, dialect=dialect).read()
    with failing_on_bad_input():
        result = _observe(
            url,
            _source(source, url, timeout),
            window,
            interval,
            selector,
            scrape_interval,
            min_drafts,
            timeout,
            engine_kind,
        )
    if live is not None:
        result = read_acceptance(result, live.setup, live.speculative_config)
    if as_json:
        print(result.model_dump_json(indent=2))
    else:
        render_observation(result)
        served = served_workload(result)
        if served is not None:
            print(served.describe())
    if not result.usable:
        raise typer.Exit(3)


def _observe(
    urls: list[str],
    source: str,
    window: str,
    interval: str,
    selector: str,
    scrape_interval: str,
    min_drafts: float,
    timeout: str,
    engine_kind: str = "vllm",
) -> Observation:
    """One window from the source the options name."""
    from autotuner.sources.prometheus_api import PrometheusSource
    from autotuner.sources.readings import READINGS
    from autotuner.sources.sglang_info import with_live_config
    from autotuner.sources.sglang_metrics import SOURCE as SGLANG
    from autotuner.sources.vllm_scrape import VllmScraper

    window_s, interval_s = parse_duration(window), parse_duration(interval)
    timeout_s = parse_duration(timeout)
    limits = ObservationLimits(min_drafts=min_drafts, max_age_s=max(60.0, 2 * interval_s))
    if source in READINGS:
        scraper = VllmScraper(urls, timeout_s=timeout_s, reading=READINGS[source])
        observation = scraper.observe(window_s, interval_s, limits=limits)
        if source == SGLANG:  # its setup is in /server_info, not in its metrics
            return with_live_config(observation, urls[0], timeout_s)
        return observation
    if source != "prometheus":
        raise InputError(f"unknown source {source!r}; use vllm, sglang, auto or prometheus")
    if engine_kind not in READINGS:
        raise InputError(f"unknown engine {engine_kind!r}; use vllm or sglang")
    if len(urls) != 1:
        raise InputError("the prometheus source takes exactly one --url")
    step = parse_duration(scrape_interval)
    limits = limits.model_copy(update={"max_age_s": max(limits.max_age_s, 3 * step)})
    prom = PrometheusSource(
        urls[0], selector, timeout_s=timeout_s, scrape_interval_s=step, engine=engine_kind
    )
    return prom.observe(window_s, limits=limits)


def _source(source: str, urls: list[str], timeout: str) -> str:
    """`auto`: the engine the first URL shows (its /metrics prefix, else /server_info or
    /version); any other source as given."""
    if source != "auto":
        return source
    from autotuner.sources.detect import detect

    found = detect(urls[0], deadline_s=parse_duration(timeout)) if urls else None
    if found is None:
        raise InputError(f"--source auto: {urls[0] if urls else 'no URL'} shows no engine")
    return found.value
