"""The figures: what each panel shows, and both files written (matplotlib is a test extra)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.container import ErrorbarContainer
from matplotlib.lines import Line2D

from autotuner import plots


def series() -> plots.DemoSeries:
    t = [float(i) for i in range(10)]
    return plots.DemoSeries(
        title="demo",
        seconds_per_hour=10 / 24,
        t=t,
        demand=[4, 16, 64, 256, 512, 512, 256, 64, 16, 4],
        observed_batch=[4, 16, 60, math.nan, math.nan, 500, 250, 64, 16, 4],
        crossover_batch=[math.nan, 180, 180, 180, 190, 190, 190, 190, 190, 190],
        setups=["spec:3"] * 4 + ["replay:16"] * 5 + ["spec:2"],
        tuned=[math.nan, 900, 1500, 0, 0, 3000, 2800, 1500, 900, 500],
        statics={
            "replay:16": [800, 1000, 1400, 2600, 3000, 3000, 2800, 1400, 1000, 800],
            "plain": [700, 900, 1200, 2000, 2400, 2400, 2000, 1200, 900, 700],
            "spec:3": [1000, 1300, 1600, 1500, 1400, 1400, 1500, 1600, 1300, 1000],
        },
        decisions=[(3.0, "spec:3 -> replay:16"), (9.0, "replay:16 -> spec:2")],
    )


def ydata(line: Line2D) -> list[float]:
    values: list[float] = np.asarray(line.get_ydata(), dtype=float).tolist()
    return values


def labels(ax: object) -> list[str]:
    return [line.get_label() for line in ax.get_lines()]  # type: ignore[attr-defined]


def test_the_demo_figure_shows_batch_rates_setups_and_decisions(tmp_path: Path) -> None:
    figure = plots.demo_figure(series(), "replay:16")
    batch, rate, band = figure.axes[:3]
    assert labels(batch)[:3] == ["demand (requests)", "observed batch", "predicted crossover batch"]
    assert batch.get_yscale() == "log"
    assert batch.get_ylabel() == "requests per engine"
    assert labels(rate)[:3] == ["spec-autotuner (served)", "best static: replay:16", "plain"]
    assert rate.get_ylabel() == "tokens/s per engine"
    assert band.get_xlabel() == "seconds into the run"
    assert len(band.collections) == 3  # spec:3, replay:16, spec:2: one span each
    legend = band.get_legend()
    assert legend is not None
    assert [text.get_text() for text in legend.get_texts()] == ["spec:3", "replay:16", "spec:2"]
    notes = [text.get_text() for text in batch.texts]
    assert notes == ["spec:3 -> replay:16", "replay:16 -> spec:2"]
    (hours,) = batch.child_axes
    assert hours.get_xlabel() == "simulated hour of the day"
    paths = plots.save(figure, tmp_path / "demo")
    assert [p.name for p in paths] == ["demo.png", "demo.svg"]
    assert paths[0].read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert "<svg" in paths[1].read_text()


def test_the_bench_figure_has_error_bars_from_the_repeats() -> None:
    points = [
        plots.BenchPoint("spec:3", 16, 900.0, 1000.0),
        plots.BenchPoint("spec:3", 16, 1100.0, 1000.0),
        plots.BenchPoint("spec:3", 64, 2000.0, 2100.0),
        plots.BenchPoint("replay:16", 16, 800.0, None),
        plots.BenchPoint("replay:16", 64, 2500.0, 2400.0),
    ]
    figure = plots.bench_figure(points, "bench")
    (ax,) = figure.axes
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert [b.get_label() for b in bars] == ["replay:16", "spec:3"]
    spec = bars[1]
    line, _, (spread,) = spec.lines
    assert ydata(line) == [1000.0, 2000.0]
    segments = spread.get_segments()
    assert [tuple(s[:, 1]) for s in segments] == [(900.0, 1100.0), (2000.0, 2000.0)]
    predicted = [line for line in ax.get_lines() if line.get_linestyle() == "--" and ydata(line)]
    replay, spec_predicted = (ydata(line) for line in predicted)
    assert math.isnan(replay[0])
    assert replay[1] == 2400.0
    assert spec_predicted == [1000.0, 2100.0]
    assert ax.get_xscale() == "log"
    assert ax.get_xlabel() == "batch (concurrent streams)"
    assert ax.get_ylabel() == "output tokens/s"


def test_the_sidecar_stays_lean() -> None:
    """matplotlib is an extra: not a dependency, not in the sidecar image, never imported by the
    command line or the sidecar until a figure is drawn."""
    root = Path(__file__).resolve().parents[2]
    pyproject = (root / "pyproject.toml").read_text()
    dependencies = pyproject.split("dependencies = [", 1)[1].split("]", 1)[0]
    assert "matplotlib" not in dependencies
    assert 'plots = ["matplotlib>=3.8"]' in pyproject
    containerfile = (root / "deploy" / "Containerfile").read_text()
    assert "pip install --no-cache-dir --prefix=/install ." in containerfile
    assert "[plots]" not in containerfile
    probe = "import sys, autotuner.cli.main, autotuner.demo, autotuner.plots; "
    probe += "print('matplotlib' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=root
    )
    assert result.stdout.strip() == "False"


def test_without_matplotlib_the_command_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from autotuner.cli.main import app

    monkeypatch.setattr(plots, "available", lambda: False)
    result = CliRunner().invoke(
        app, ["demo", "--duration", "2s", "--no-live", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert "python3 -m pip install 'spec-autotuner[plots]'" in result.stdout
    assert not (tmp_path / "demo.png").exists()
    assert (tmp_path / "demo.json").exists()


def test_no_text_of_the_demo_figure_leaves_the_figure() -> None:
    """At the default size, with a title as long as a real run writes, every title, label,
    tick and legend entry is drawn inside the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    long = series()
    long.title = (
        "NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4 on 1 simulated H200: tuned 709,360 tokens, "
        "best static (replay+spec:3:16@1-127:3,128-8191:2) 707,271"
    )
    figure = plots.demo_figure(long, "replay:16")
    canvas = FigureCanvasAgg(figure)
    canvas.draw()  # type: ignore[no-untyped-call]
    renderer = canvas.get_renderer()  # type: ignore[no-untyped-call]
    box = figure.bbox
    texts = [t for t in figure.findobj(Text) if t.get_visible() and t.get_text().strip()]
    assert any("Nemotron" in t.get_text() for t in texts)
    outside = []
    for text in texts:
        extent = text.get_window_extent(renderer)
        if extent.x0 < box.x0 - 1 or extent.x1 > box.x1 + 1 or extent.y1 > box.y1 + 1:
            outside.append(text.get_text())
    assert outside == []


def test_no_crossover_line_is_named_when_none_was_predicted() -> None:
    flat = series()
    flat.crossover_batch = [math.nan] * len(flat.t)
    batch = plots.demo_figure(flat, "replay:16").axes[0]
    assert "predicted crossover batch" not in labels(batch)
    legend = batch.get_legend()
    assert legend is not None
    assert "predicted crossover batch" not in [t.get_text() for t in legend.get_texts()]
