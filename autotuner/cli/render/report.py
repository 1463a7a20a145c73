"""`predict`'s report as text: the model and its inputs, the winners per batch, the notes, and
every setup at every batch on request."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from autotuner.core.engine.drafter import DEFAULT


def render_report(report: dict[str, Any], *, detail: bool, console: Console | None = None) -> None:
    console = console or Console()
    _print_model_and_inputs(report, console)
    rates = ", ".join(f"{p:.2f}" for p in report["acceptance"]["conditional"])
    console.print(f"  acceptance per position: {rates}; engine: {report['engine']['name']}")
    build = report.get("build")
    if build:
        row = f"; row: {build['row']} ({build['source']})" if build["row"] else ""
        console.print(f"  engine build: {escape(build['description'])}{escape(row)}")
    rows = _by_batch(report)
    console.print(_winners_table(report, rows))
    _print_report_notes(report, console)
    if detail:
        console.print(_every_setup_table(report, rows))


def _by_batch(report: dict[str, Any]) -> dict[int, dict[str, dict[str, Any]]]:
    rows: dict[int, dict[str, dict[str, Any]]] = {}
    for p in report["predictions"]:
        rows.setdefault(p["batch"], {})[p["setup"]["label"]] = p
    return rows


def _print_model_and_inputs(report: dict[str, Any], console: Console) -> None:
    summary = report["model"]
    workload = report["workload"]
    console.print(
        f"[bold]{summary['name']}[/] on [bold]{report['gpu']}[/] ({report['profile_source']}), "
        f"TP={workload['tensor_parallel']}, context {workload['context_tokens']:.0f} tokens"
    )
    console.print(
        f"  {summary['ssm_layers']} SSM / {summary['attention_layers']} attention / "
        f"{summary['moe_layers']} MoE blocks; {summary['total_params_b']}B params "
        f"({summary['active_params_b']}B active, {summary['weight_gib']} GiB); state "
        f"{summary['ssm_state_mib_per_layer']} MiB/layer, {summary['ssm_state_mib_per_request']} "
        f"MiB/request; ring entry {summary['ring_entry_kib']} KiB; KV "
        f"{summary['kv_kib_per_token']} KiB/token; drafter {summary['drafter']}"
    )
    drafter = report.get("drafter")
    if drafter:
        predicted = "" if drafter["speculation_predicted"] else "; speculation not predicted"
        console.print(
            f"  deployed drafter: {escape(drafter['description'])} ({drafter['source']}){predicted}"
        )
    if report.get("inputs"):
        console.print("  inputs: " + escape(_inputs_line(report["inputs"])))
        for name, item in report["inputs"].items():
            said = item["source"] != DEFAULT or item["note"].startswith("bounded")
            if item["note"] and name != "drafter" and said:
                console.print(f"  [dim]{name}: {escape(item['note'])}[/]")


def _winners_table(report: dict[str, Any], rows: dict[int, dict[str, dict[str, Any]]]) -> Table:
    table = Table(title="Predicted decode throughput (tokens/s; x = ratio to plain)")
    for column in ("batch", "plain", "best spec", "best replay", "best replay+spec", "winner"):
        table.add_column(column, justify="right" if column == "batch" else "left")
    best = {row["batch"]: row for row in report["best"]}
    for batch_size, by_label in sorted(rows.items()):
        plain = by_label["plain"]
        cells = [str(batch_size), _cell(plain, plain)]
        for family in ("spec", "replay", "replay+spec"):
            members = [p for p in by_label.values() if p["setup"]["name"] == family]
            top = max(members, key=lambda p: p["tokens_per_s"], default=None)
            cell = _cell(top, plain) if top else "-"
            cells.append(f"[dim]{cell} (refused)[/]" if top and top["refused_by_engine"] else cell)
        winner = best[batch_size]
        ratio = winner["ratio_to_plain"]
        cells.append(f"[bold]{winner['setup']}[/]" + (f" x{ratio:.2f}" if ratio else ""))
        table.add_row(*cells)
    return table


def _print_report_notes(report: dict[str, Any], console: Console) -> None:
    refused = {p["refused_by_engine"] for p in report["predictions"] if p["refused_by_engine"]}
    for reason in sorted(refused):
        console.print(f"[dim](refused) {reason}: predicted, never chosen[/]")
    if report["crossovers"]:
        console.print("Winner changes (first batch of the new winner):")
        for c in report["crossovers"]:
            console.print(f"  batch {c['batch']:>4}: {c['from']} -> {c['to']}")
    flips = {k: v for k, v in report["versus_plain"].items() if v and k.startswith("spec:")}
    for label, batches in flips.items():
        console.print(f"  {label} vs plain flips at batch {', '.join(map(str, batches))}")
    _print_adaptive(report, console)
    if report["quick_rule"]:
        console.print("Quick rule (speculation with state copies, state-dominated steps):")
    for rule in report["quick_rule"]:
        console.print(
            f"  T={rule['drafts']}: copy_rule(p={rule['rate']:.2f}) = {rule['value']:.2f} -> "
            f"{rule['verdict']} (break-even p = {rule['break_even_rate']:.2f})"
        )
    infeasible = sorted({p["setup"]["label"] for p in report["predictions"] if not p["feasible"]})
    if infeasible:
        capacity = report["capacity"]
        limited = ", ".join(f"{label} {capacity[label]}" for label in infeasible)
        console.print(
            "* = batch does not fit in memory (or is above --max-num-seqs); shown is what the "
            f"engine reaches by queueing. Max batch: {limited}"
        )
    for note in report["notes"]:
        console.print(f"[dim]note: {note}[/]")
    if report.get("flags"):
        console.print("Flags each winner is written with on this build (`autotuner apply`):")
    for label, flags in (report.get("flags") or {}).items():
        console.print(f"  {label}: {escape(' '.join(flags) or '(none of the managed flags)')}")


def _print_adaptive(report: dict[str, Any], console: Console) -> None:
    """How many of its K drafts adaptive verification is predicted to verify at each batch."""
    verified: dict[str, list[str]] = {}
    for p in report["predictions"]:
        if p["setup"]["adaptive"] and not p["refused_by_engine"]:
            verified.setdefault(p["setup"]["label"], []).append(f"{p['spec_tokens']}@{p['batch']}")
    if verified:
        console.print("Adaptive verification, drafts verified of K (at batch):")
    for label, counts in verified.items():
        console.print(f"  {label}: {', '.join(counts)}")


def _every_setup_table(report: dict[str, Any], rows: dict[int, dict[str, dict[str, Any]]]) -> Table:
    full = Table(title="Every setup")
    for column in ("setup", "batch", "tokens/s", "x plain", "step ms", "tau", "fits"):
        full.add_column(column)
    for p in report["predictions"]:
        plain = rows[p["batch"]]["plain"]
        versus = p["tokens_per_s"] / plain["tokens_per_s"] if plain["tokens_per_s"] else 0.0
        full.add_row(
            p["setup"]["label"],
            str(p["batch"]),
            f"{p['tokens_per_s']:.0f}",
            f"{versus:.2f}",
            f"{p['step_time_s'] * 1e3:.2f}",
            f"{p['tau']:.2f}",
            "yes" if p["feasible"] else "no",
        )
    return full


def _inputs_line(inputs: dict[str, dict[str, Any]]) -> str:
    """`name value (source)` for every input the prediction used, the drafter aside."""
    parts = []
    for name, item in inputs.items():
        if name == "drafter":
            continue
        value = "-" if item["value"] is None else item["value"]
        mark = "" if item["modelled"] else ", not modelled"
        parts.append(f"{name} {value} ({item['source']}{mark})")
    return ", ".join(parts)


def _cell(p: dict[str, Any], plain: dict[str, Any]) -> str:
    mark = "" if p["feasible"] else "*"
    if p is plain:
        return f"{p['tokens_per_s']:,.0f}{mark}"
    ratio = p["tokens_per_s"] / plain["tokens_per_s"] if plain["tokens_per_s"] else 0.0
    setup = p["setup"]
    knobs = " ".join(
        f"{name}{value}"
        for name, value in (("K", setup["spec_tokens"]), ("L", setup["replay_window"]))
        if value
    ) + (" adaptive" if setup.get("adaptive") else "")
    return f"{knobs}: {p['tokens_per_s']:,.0f}{mark} x{ratio:.2f}"
