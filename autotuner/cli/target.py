"""`autotuner apply` and `autotuner status`: write a setup into the deployment's args by hand,
and show what the live args, the persisted state and the Lease say."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autotuner.cli.common import (
    ConfigFile,
    SetOption,
    failing_on_bad_input,
    load_cli_settings,
    one_line,
)
from autotuner.cli.render.status import render_status
from autotuner.core.engine.args import SpeculativeConfig
from autotuner.core.engine.drafter import DEFAULT, LIVE
from autotuner.core.engine.resolution import args_table
from autotuner.core.model.registry import load_draft_model, load_model
from autotuner.core.model.spec import DrafterKind, ModelSpec
from autotuner.core.types import Setup
from autotuner.engines.build_table import AUTO
from autotuner.engines.kinds import Engine, EngineKind, engine, kind_of_command
from autotuner.errors import AutotunerError, InputError

if TYPE_CHECKING:
    from autotuner.actuators.base import Actuator

# The target both commands open, as its URI.
TargetUri = Annotated[
    str,
    typer.Option(
        help="k8s://NS/KIND[.VERSION]/NAME[/CONTAINER|COMPONENT] (KIND: deployment, "
        "statefulset, leaderworkerset, dynamographdeployment, llminferenceservice, "
        "inferenceservice), file://PATH or exec://PATH"
    ),
]


def apply(
    setup: Annotated[str, typer.Option(help="plain | spec:K | replay:L | replay+spec:K:L")],
    target: TargetUri,
    schedule: Annotated[
        str | None, typer.Option(help="Per-batch K bands, e.g. 1-64:3,65-128:1,129-512:0.")
    ] = None,
    dry_run: Annotated[bool, typer.Option(help="Show the change; write nothing.")] = False,
    kube_server: Annotated[
        str | None, typer.Option(help="API server URL (e.g. kubectl proxy); default in-cluster.")
    ] = None,
    allow_surge: Annotated[
        bool,
        typer.Option(help="Patch even when the rollout starts new GPU pods before old ones stop."),
    ] = False,
    write_managed: Annotated[
        bool,
        typer.Option(help="Patch even an object Helm or a GitOps tool re-applies (else: advise)."),
    ] = False,
    allow_low_precision_replay: Annotated[
        bool, typer.Option(help="Allow replay with a non-fp32 SSM state (it drifts).")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(help="Apply even to a paused target, or a setup the engine build refuses."),
    ] = False,
    model: Annotated[
        str | None,
        typer.Option(help="The served model (default: the --model in the target's args)."),
    ] = None,
    engine_version: Annotated[
        str | None,
        typer.Option(help="The engine version the target runs (default: its image tag)."),
    ] = None,
    engine_kind: Annotated[
        str,
        typer.Option(
            help="The target's engine: vllm, sglang, or auto (what its command line starts)."
        ),
    ] = EngineKind.AUTO.value,
) -> None:
    """Write a setup into the engine deployment's args (only the managed flags, and the
    companion flags the engine build needs for it, change), recorded in the tuner's state on
    the target, with an Event. A setup the build refuses is refused, naming the rule."""
    from autotuner.actuators.manual import apply_by_hand
    from autotuner.actuators.targets import open_target
    from autotuner.core.types import Setup

    with failing_on_bad_input(target_code=1):
        wanted = Setup.parse(f"{setup}@{schedule}" if schedule else setup)
        chosen = target_engine(EngineKind(engine_kind), target, kube_server)
        actuator = open_target(
            target,
            kube_server=kube_server,
            dialect=chosen.dialect(),
            allow_surge=allow_surge,
            allow_low_precision_replay=allow_low_precision_replay,
            write_managed=write_managed,
        )
        _check_build(actuator, chosen, wanted, model, engine_version, force=force)
        change = apply_by_hand(actuator, wanted, dry_run=dry_run, force=force)
    live, result = change.live, change.result
    if not result.changed:
        print(f"{live.description}: already {wanted.label}; nothing to change")
        return
    print(result.diff, end="")
    verb = "would change" if dry_run else "changed"
    print(f"{live.description}: {verb} {live.setup.label} -> {wanted.label}", flush=True)
    if change.event_error:
        print(f"autotuner: warning: event not posted: {change.event_error}", file=sys.stderr)


def target_engine(kind: EngineKind, target: str, kube_server: str | None) -> Engine:
    """The engine the option names, or (auto) the one the target's command line starts."""
    if kind is EngineKind.AUTO:
        from autotuner.actuators.targets import open_target

        live = open_target(target, kube_server=kube_server).read()
        kind = kind_of_command(live.command, live.args) or EngineKind.VLLM
    return engine(kind)


def _check_build(
    actuator: Actuator,
    chosen: Engine,
    wanted: Setup,
    model: str | None,
    version: str | None,
    *,
    force: bool,
) -> None:
    """Set the served model and build on the actuator (so it writes the companion flags), and
    refuse a setup the build refuses (InputError naming the rule) unless forced."""
    live = actuator.read()
    actuator.enforce_rules = not force
    try:  # the declared version, over the tag
        actuator.declared_build = chosen.table.check_declared(version) if version else AUTO
    except ValueError as exc:
        raise InputError(f"--engine-version: {exc}") from None
    dialect = actuator.dialect
    served = model or dialect.served_model(dialect.tokens(live.command, live.args))
    spec = _loaded(served)
    follow_build = chosen.follow_build
    if spec is not None:
        actuator.engine = follow_build.serving(spec)
    # A schedule is checked where the engine writes one (vLLM); SGLang's dialect refuses it
    # itself, naming its adaptive tiers.
    ruled = wanted.replay_window or (wanted.schedule and follow_build.spec_schedule)
    if force or not ruled:
        return
    build = actuator.build_of(live)
    said = dialect.live_args(live.command, live.args)
    kv_connector, data_parallel = bool(said.kv_connector), said.data_parallel
    method = said.speculative.resolved_method if said.speculative else None
    # The rules of the args alone first: a KV connector refuses replay whatever the model.
    for known in (None, spec):
        deployment = follow_build.deployed(build, known, kv_connector, data_parallel, method)
        refusal = deployment.refusal(wanted)
        if refusal is not None:
            raise InputError(
                f"refused by the engine build ({build.describe()}): {refusal}; nothing "
                "changed (--force writes it anyway)"
            )
    if spec is None and wanted.replay_window:
        raise InputError(
            f"the served model is not known ({served or 'no --model in the args'}): the "
            f"{build.describe()} rules for replay cannot be checked; nothing changed (--model "
            "names it, --force writes it anyway)"
        )


def _loaded(model_id: str | None) -> ModelSpec | None:
    if not model_id:
        return None
    try:
        return load_model(model_id)
    except AutotunerError:
        return None


def status(
    target: TargetUri,
    kube_server: Annotated[str | None, typer.Option(help="API server URL.")] = None,
    lease: Annotated[
        str | None, typer.Option(help="Lease name to report the leader of (k8s targets).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    config: ConfigFile = None,
    overrides: SetOption = None,
    engine_kind: Annotated[
        str | None,
        typer.Option(
            help="The target's engine: vllm, sglang, or auto (default: engine.kind where the "
            "settings set it, else what the command line starts, as apply reads it)."
        ),
    ] = None,
) -> None:
    """Show the live args, the setup they configure, the engine inputs they set (and which are
    left to vLLM's defaults), the deployed drafter, the persisted state, pause and leader."""
    from autotuner.actuators.targets import open_target

    with failing_on_bad_input(target_code=1):
        settings, sources = load_cli_settings(config, overrides, **{"engine.kind": engine_kind})
        # Unset anywhere, the engine is what the command line starts (as apply reads it).
        kind = settings.engine.kind if "engine.kind" in sources else EngineKind.AUTO
        chosen = target_engine(kind, target, kube_server)
        dialect = chosen.dialect(settings.engine.flags)
        live = open_target(target, kube_server=kube_server, dialect=dialect).read()
        leader = _lease_holder(target, kube_server, lease) if lease else None
        engine_args = dialect.live_args(live.command, live.args)
    report = {
        "target": live.description,
        "setup": live.setup.label,
        "command": list(live.command),
        "args": list(live.args),
        "engine_args": {
            name: i.model_dump(mode="json") for name, i in args_table(engine_args).items()
        },
        "drafter": _status_drafter(engine_args.speculative),
        "build": _status_build(live.image, settings.engine.build, chosen),
        "paused": live.paused,
        "advice": live.advice,
        "rollout": {
            "done": live.rollout.done,
            "stuck": live.rollout.stuck,
            "detail": live.rollout.detail,
        },
        "state": json.loads(live.state) if live.state else None,
        "leader": leader,
    }
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        render_status(report, live.state, settings.policy)


def _status_drafter(spec: SpeculativeConfig | None) -> dict[str, Any]:
    """The drafter the live args deploy, as far as the args alone tell (no model is read:
    whether the model has MTP layers is the sidecar's check)."""
    if spec is None:
        return {
            "description": "none in the args",
            "source": DEFAULT,
            "note": "no --speculative-config: the model's own MTP layers or a declared drafter "
            "(model.drafter), else no speculation",
        }
    method = spec.resolved_method
    described = {
        **spec.model_dump(mode="json"),
        "resolved_method": method,
        "source": LIVE,
        "note": "" if spec.kind else f"method {method} is not modelled: speculation not predicted",
    }
    size = ""
    if spec.kind is DrafterKind.DRAFT_MODEL and spec.model:
        try:
            draft = load_draft_model(spec.model)
            size = f", {draft.params / 1e9:.2f}B params"
            described["draft_params"] = draft.params
        except AutotunerError as exc:
            described["note"] = f"draft model size unknown ({one_line(exc)})"
    described["description"] = " ".join(
        filter(
            None,
            (
                method or "?",
                f"({spec.model}{size})" if spec.model else "",
                f"K={spec.num_speculative_tokens}" if spec.num_speculative_tokens else "",
                "adaptive verification" if spec.enable_adaptive_verification else "",
            ),
        )
    )
    return described


def _status_build(image: str | None, declared: str, chosen: Engine) -> dict[str, Any]:
    """The capability table's rows in force for the target's image (or the declared build)."""
    build = chosen.table.build_in_force(declared, image=image)
    return {
        "description": build.describe(),
        "version": build.version,
        "origin": build.origin.value,
        "known": build.known,
        "rows": [row.name for row in build.rows],
    }


def _lease_holder(target: str, kube_server: str | None, lease: str) -> str | None:
    from kubernetes import client as k8s

    from autotuner.actuators.kubeapi import K8sTarget, api_client

    parsed = K8sTarget.parse(target)
    record = k8s.CoordinationV1Api(api_client(kube_server)).read_namespaced_lease(
        lease, parsed.namespace
    )
    return record.spec.holder_identity if record.spec else None
