"""`status` as text: the live setup and args, which engine inputs the args set, the drafter,
the rollout, and what an operator asks of the persisted state."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.markup import escape

from autotuner.core.decide.settings import PolicySettings
from autotuner.core.engine.drafter import LIVE


def render_status(
    report: dict[str, Any], persisted: str | None, policy: PolicySettings | None = None
) -> None:
    console = Console()
    paused = " [yellow](paused)[/]" if report["paused"] else ""
    console.print(f"[bold]{report['target']}[/]: {report['setup']}{paused}")
    console.print(f"  args: {' '.join(report['command'] + report['args'])}")
    inputs = report["engine_args"]
    given = [f"{k} {v['value']}" for k, v in inputs.items() if v["source"] == LIVE]
    left = [k for k, v in inputs.items() if v["source"] != LIVE]
    console.print(f"  from the live args: {', '.join(given) or 'none of the modelled flags'}")
    console.print(f"  the engine's defaults (not in the args): {', '.join(left) or '-'}")
    drafter = report["drafter"]
    console.print(
        f"  drafter: {escape(drafter['description'])}"
        + (f" [dim]({escape(drafter['note'])})[/]" if drafter["note"] else "")
    )
    build = report.get("build")
    if build:
        console.print(
            f"  engine build: {escape(build['description'])}; rows: "
            + escape(", ".join(build["rows"]))
        )
    if report.get("advice"):
        console.print(f"  [yellow]advice only[/]: {escape(report['advice'])}")
    rollout = report["rollout"]
    console.print(
        f"  rollout: {'done' if rollout['done'] else 'in progress'} "
        f"{rollout['stuck'] or rollout['detail']}"
    )
    console.print(
        f"  state: {'persisted' if persisted else 'none'}; leader: {report['leader'] or '-'}"
    )
    for line in state_lines(persisted, policy):
        console.print(f"  {line}")


def state_lines(persisted: str | None, policy: PolicySettings | None = None) -> list[str]:
    """What an operator asks of the persisted state: a change in flight, quality, refusals,
    what the calibration learned, what was explored."""
    from autotuner.core.decide.state import read_state

    if not persisted:
        return []
    read = read_state(persisted)
    state = read.state
    if state is None:
        return [f"state: unreadable ({read.problem}); the tuner keeps it aside and starts afresh"]
    lines = [f"state: schema {read.written_as}" + (" (migrated on read)" if read.migrated else "")]
    if state.verification is not None:
        v = state.verification
        kind = "exploring" if v.exploration else "verifying"
        lines.append(f"{kind}: {v.previous.label} -> {v.target.label}")
    if state.last_quality is not None:
        lines.append(f"quality: {state.last_quality.status}: {state.last_quality.summary}")
    lines += [f"quarantined: {label}" for label in sorted(state.quarantine)]
    lines += [f"refused by the engine: {name} ({r.why})" for name, r in state.refused.items()]
    lines += [
        f"explored: {key.kind.value} in batch band {key.band}"
        for key in sorted(state.explored, key=str)
    ]
    lines += [
        f"answered no: {key.kind.value} in batch band {key.band}"
        + (f", first-position acceptance {a.acceptance:.2f}" if a.acceptance is not None else "")
        for key, a in sorted(state.answered_no.items(), key=lambda item: str(item[0]))
    ]
    calibration = (policy or PolicySettings()).calibration
    fit = state.calibration.fit(time.time(), calibration.half_life_s, calibration.bounds)
    lines += [
        f"calibration: {f.term} {f.kernel} x{f.factor:.2f} (batch band {f.band})"
        for f in fit.factors()
    ]
    return lines
