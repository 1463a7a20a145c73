"""`observe`'s Observation as text: the window, the batch, the acceptance per position (and
how the schedule read it), the step time and the live setup."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from autotuner.core.types import AcceptanceStats, Observation


def render_observation(obs: Observation, console: Console | None = None) -> None:
    console = console or Console()
    console.print(f"[bold]{obs.source}[/] window {obs.duration_s:.1f}s, {obs.series} engine series")
    if not obs.usable:
        reason = obs.reason.value if obs.reason else "unknown"
        console.print(f"[red]unusable[/]: {reason}: {obs.detail}")
        return
    if obs.batch:
        b = obs.batch
        console.print(
            f"  batch (running/engine): mean {b.mean:.1f}, p50 {b.p50:.0f}, p90 {b.p90:.0f}, "
            f"p99 {b.p99:.0f} ({b.samples} samples)"
        )
    if obs.acceptance:
        _print_acceptance(obs.acceptance, console)
    else:
        console.print("  speculation off (no spec-decode series)")
    for label, value, unit in (
        ("step time", obs.step_time_s and obs.step_time_s * 1e3, "ms"),
        (
            "time per output token",
            obs.time_per_output_token_s and obs.time_per_output_token_s * 1e3,
            "ms",
        ),
        ("generation", obs.generation_tokens_per_s, "tokens/s"),
        ("mean context", obs.mean_context_tokens, "tokens"),
        ("waiting", obs.waiting_mean, "requests"),
        ("KV cache usage", obs.kv_cache_usage_mean, ""),
        ("preemptions", obs.preemptions, ""),
    ):
        if value is not None:
            console.print(f"  {label}: {value:,.3f} {unit}".rstrip())
    if obs.live_setup:
        live = obs.live_setup
        console.print(
            f"  live setup: {live.setup.label} (replay {live.replay}, window "
            f"{live.replay_window}, ssm dtype {live.mamba_ssm_cache_dtype}, cache mode "
            f"{live.mamba_cache_mode})"
        )


def _print_acceptance(a: AcceptanceStats, console: Console) -> None:
    """Each position's rate with its interval, and how the schedule read them."""
    bounds = a.lower_bound or (False,) * len(a.per_position)
    rates = ", ".join(
        f"{'>=' if bound else ''}{p:.2f} [{lo:.2f}-{hi:.2f}]"
        for p, lo, hi, bound in zip(
            a.per_position, a.per_position_low, a.per_position_high, bounds, strict=True
        )
    )
    trust = f" ({escape(a.note)})" if a.note else ""
    console.print(
        f"  acceptance per position: {rates}; tau {a.tau:.2f} over {a.drafts:.0f} drafts{trust}"
    )
    if a.proposals == "schedule":
        shares = ", ".join(f"{s:.2f}" for s in a.proposed_share)
        naive = ", ".join(f"{p:.2f}" for p in a.naive_per_position)
        console.print(
            f"  read with the schedule {escape(a.read_with or '')}: share of drafts that "
            f"proposed each position {shares} (rates as counted, over every draft: {naive})"
        )
    if a.proposals_note:
        console.print(f"  [yellow]{escape(a.proposals_note)}[/]")
