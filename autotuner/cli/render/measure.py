"""What the measuring commands print: a sweep's points beside their predictions, a fit's
step-time errors and efficiencies, a canary run or comparison."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from autotuner.cli.common import plots_line

if TYPE_CHECKING:
    from autotuner.bench.calibrate import Fit
    from autotuner.bench.sweep import Point, Sweep
    from autotuner.canary import CanaryRun, Comparison


def print_bench_results(points: list[Point], sweep: Sweep, out: Path) -> None:
    """The sweep's points beside their predictions, the quality verdicts and the plots."""
    quality = sweep.quality()
    table = Table(title=f"Measured vs predicted ({out})")
    columns = ("setup", "batch", "tokens/s", "predicted", "step ms", "tpot p50 ms", "quality")
    for column in (*columns, "status"):
        table.add_column(column)
    for p in sorted(points, key=lambda p: (p.setup, p.batch, p.repeat)):
        table.add_row(
            p.setup,
            str(p.batch),
            f"{p.tokens_per_s:,.0f}",
            f"{p.predicted_tokens_per_s or 0:,.0f}",
            f"{(p.step_time_s or 0) * 1e3:.1f}",
            f"{p.time_per_token_p50_s * 1e3:.1f}",
            quality.get(p.setup, {}).get("verdict", "-"),
            p.status if p.status == "ok" else f"{p.status}: {p.message[:60]}",
        )
    console = Console()
    console.print(table)
    for label, verdict in quality.items():
        console.print(f"  quality {label}: {verdict['verdict']}: {verdict['summary']}")
    console.print(plots_line(sweep.plots), markup=False, soft_wrap=True)  # paths unbroken


def print_calibration(fit: Fit, out: Path) -> None:
    table = Table(title="Step-time error per setup (mean |predicted / measured - 1|)")
    for column in ("setup", "before", "after"):
        table.add_column(column)
    for label, before in fit.error_before.items():
        table.add_row(label, f"{before:.1%}", f"{fit.error_after[label]:.1%}")
    Console().print(table)
    e = fit.profile.efficiency
    print(
        f"efficiencies: gemm {e.gemm:.3f}, attention {e.attention:.3f}, ssm {e.ssm:.3f}, "
        f"copies {e.copies:.3f} -> {out}"
    )


def print_canary(
    run: CanaryRun, result: Comparison | None, out: str | None, *, as_json: bool
) -> None:
    """A run alone (how long, where saved), or its comparison with the earlier run."""
    if result is None:
        print(
            f"canary: {len(run.outputs)} prompts, {run.completion_tokens} tokens "
            f"in {run.duration_s:.1f}s" + (f"; saved to {out}" if out else "")
        )
        return
    if as_json:
        print(json.dumps(dataclasses.asdict(result), indent=2, default=str))
        return
    print(f"canary: {result.verdict.value}: {result.summary}")
    for item in result.prompts:
        if not item.identical:
            print(f"  {item.name}: first divergence at char {item.first_divergence}/{item.length}")
