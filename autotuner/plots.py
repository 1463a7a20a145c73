"""The demo's and the bench sweep's figures, PNG and SVG (matplotlib: the optional `plots`
extra, `pip install 'spec-autotuner[plots]'`; the sidecar never imports this module).

Figures are built on a bare `Figure` (no pyplot, no global state), so they can be drawn from any
thread and inspected by the tests before they are saved.
"""

from __future__ import annotations

import importlib.util
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis
    from matplotlib.figure import Figure

# Characters of a title line per inch of figure width, for the suptitle's size ("large", 12 pt):
# about 7 pt a character, so 72 / 7 per inch, with room left for wide glyphs.
TITLE_CHARS_PER_INCH = 8.5
INSTALL_HINT = "plots need matplotlib: python3 -m pip install 'spec-autotuner[plots]'"
COLOURS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#9d755d")


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def save(figure: Figure, stem: Path) -> list[Path]:
    """Write STEM.png and STEM.svg; returns both paths."""
    paths = [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    for path in paths:
        figure.savefig(path, dpi=110, metadata={"Date": None} if path.suffix == ".svg" else None)
    return paths


# ------------------------------------------------------------------------------------- demo


@dataclass
class DemoSeries:
    """What the demo saw at each loop step (per engine), for its figure."""

    title: str
    seconds_per_hour: float  # run seconds per simulated hour (the day is compressed)
    t: list[float] = field(default_factory=list)  # seconds since the load started
    demand: list[float] = field(default_factory=list)
    observed_batch: list[float] = field(default_factory=list)  # NaN: no usable window
    crossover_batch: list[float] = field(default_factory=list)  # NaN: no crossover predicted
    setups: list[str] = field(default_factory=list)  # what the engine ran
    tuned: list[float] = field(default_factory=list)  # tokens/s served since the last step
    statics: dict[str, list[float]] = field(default_factory=dict)  # label -> tokens/s
    decisions: list[tuple[float, str]] = field(default_factory=list)  # (t, "a -> b")


def demo_figure(series: DemoSeries, best_static: str) -> Figure:
    """Demand and observed batch against the predicted crossover; tokens/s of the tuned run
    against the best static setup and plain; the running setup as a band; the decisions."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(11, 7.5), layout="constrained")
    batch, rate, band = figure.subplots(
        3, 1, sharex=True, gridspec_kw={"height_ratios": [3, 3, 0.7]}
    )
    _batch_panel(batch, series)
    _rate_panel(rate, series, best_static)
    _setup_band(band, series.t, series.setups)
    _decisions(series, (batch, rate, band))
    hours = batch.secondary_xaxis(
        "top",
        functions=(
            lambda t: t / series.seconds_per_hour,
            lambda h: h * series.seconds_per_hour,
        ),
    )
    hours.set_xlabel("simulated hour of the day")
    if series.t:
        band.set_xlim(max(0.0, series.t[0]), series.t[-1])
    band.set_xlabel("seconds into the run")
    width_in = figure.get_figwidth()
    figure.suptitle(textwrap.fill(series.title, width=int(width_in * TITLE_CHARS_PER_INCH)))
    return figure


def _batch_panel(ax: Axes, series: DemoSeries) -> None:
    ax.plot(series.t, series.demand, color="#999999", lw=2, label="demand (requests)")
    ax.plot(series.t, series.observed_batch, color=COLOURS[0], lw=1.2, label="observed batch")
    if any(math.isfinite(value) for value in series.crossover_batch):
        # Only drawn (and named in the legend) where some setup change was predicted: a run
        # whose winner is the same at every batch has no crossover to show.
        ax.plot(
            series.t,
            series.crossover_batch,
            color=COLOURS[3],
            lw=1.2,
            ls="--",
            drawstyle="steps-post",
            label="predicted crossover batch",
        )
    ax.set_yscale("log", base=2)
    seen = [v for v in (*series.demand, *series.observed_batch) if math.isfinite(v) and v > 0]
    _plain_ticks(ax.yaxis, [2**k for k in range(int(math.log2(max(seen, default=2))) + 2)])
    ax.set_ylabel("requests per engine")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="lower center", fontsize="small")


def _plain_ticks(axis: Axis, values: Sequence[float]) -> None:
    """Ticks at these values, written as plain numbers (not 2^k), no minor ticks."""
    from matplotlib.ticker import FixedLocator, NullLocator

    axis.set_major_locator(FixedLocator(list(values)))
    axis.set_major_formatter(lambda value, _: f"{value:g}")
    axis.set_minor_locator(NullLocator())


def _rate_panel(ax: Axes, series: DemoSeries, best_static: str) -> None:
    ax.plot(series.t, series.tuned, color=COLOURS[0], lw=1.4, label="spec-autotuner (served)")
    if best_static in series.statics:
        ax.plot(
            series.t,
            series.statics[best_static],
            color=COLOURS[1],
            ls="--",
            lw=1.2,
            label=f"best static: {best_static}",
        )
    if "plain" in series.statics and best_static != "plain":
        ax.plot(series.t, series.statics["plain"], color="#666666", ls=":", lw=1.2, label="plain")
    ax.set_ylabel("tokens/s per engine")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")


def _setup_band(ax: Axes, t: Sequence[float], setups: Sequence[str]) -> None:
    """One coloured span per stretch of the same running setup."""
    from matplotlib.patches import Patch

    colours: dict[str, str] = {}
    for label, run in groupby(range(len(setups)), key=lambda i: setups[i]):
        steps = list(run)
        start, end = t[steps[0]], t[min(steps[-1] + 1, len(t) - 1)]
        colour = colours.setdefault(label, COLOURS[len(colours) % len(COLOURS)])
        ax.broken_barh([(start, max(end - start, 1e-9))], (0, 1), color=colour)
    handles = [Patch(color=colour, label=label) for label, colour in colours.items()]
    ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize="small")
    ax.set_yticks([])
    ax.set_ylabel("running", rotation=0, ha="right", va="center")


def _decisions(series: DemoSeries, axes: Sequence[Axes]) -> None:
    for at, what in series.decisions:
        for ax in axes:
            ax.axvline(at, color="#333333", lw=0.8, alpha=0.6)
        axes[0].annotate(
            what,
            xy=(at, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -4),
            textcoords="offset points",
            rotation=90,
            va="top",
            fontsize="x-small",
        )


# ------------------------------------------------------------------------------------ bench


@dataclass(frozen=True)
class BenchPoint:
    setup: str
    batch: int
    measured: float  # tokens/s of one measured run
    predicted: float | None


def bench_figure(points: Sequence[BenchPoint], title: str) -> Figure:
    """Measured tokens/s by batch per setup (mean, bars from the fastest to the slowest repeat)
    beside the cost model's prediction (dashed)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 5.5), layout="constrained")
    ax = figure.subplots()
    for index, label in enumerate(sorted({p.setup for p in points})):
        colour = COLOURS[index % len(COLOURS)]
        mine = [p for p in points if p.setup == label]
        batches = sorted({p.batch for p in mine})
        runs = [[p.measured for p in mine if p.batch == b] for b in batches]
        means = [sum(r) / len(r) for r in runs]
        low = [m - min(r) for m, r in zip(means, runs, strict=True)]
        high = [max(r) - m for m, r in zip(means, runs, strict=True)]
        ax.errorbar(
            batches, means, yerr=[low, high], color=colour, marker="o", capsize=4, label=label
        )
        predicted = [_first_prediction(mine, b) for b in batches]
        ax.plot(batches, predicted, color=colour, ls="--", marker="x", alpha=0.8)
    ax.plot([], [], color="#666666", ls="--", marker="x", label="cost model (dashed)")
    ax.set_xscale("log", base=2)
    _plain_ticks(ax.xaxis, sorted({p.batch for p in points}))
    ax.set_xlabel("batch (concurrent streams)")
    ax.set_ylabel("output tokens/s")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    ax.set_title(title)
    return figure


def _first_prediction(points: Sequence[BenchPoint], batch: int) -> float:
    value = next((p.predicted for p in points if p.batch == batch), None)
    return math.nan if value is None else value
