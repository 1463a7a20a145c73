"""The serving objects a Kubernetes target can be (pure): where each keeps its engine
containers, what in its rollout strategy needs a spare GPU, and how far its rollout got.

Paths and fields follow each project's API types: apps/v1; LeaderWorkerSet
(leaderworkerset.x-k8s.io/v1, sigs.k8s.io/lws api/leaderworkerset/v1); Dynamo's
DynamoGraphDeployment (nvidia.com v1beta1 `spec.components[]`, v1alpha1 `spec.services{}`,
deploy/operator/api); KServe's LLMInferenceService (serving.kserve.io/v1alpha2, v1alpha1 by
name) and InferenceService (v1beta1) (pkg/apis/serving).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from autotuner.actuators.base import RolloutStatus, select_container
from autotuner.actuators.sites import (
    ConfigMapReader,
    Site,
    check_agreement,
    read_site,
    templated_site,
)
from autotuner.engines.dialect import Dialect
from autotuner.errors import ActuatorError, ArgsError, InputError
from autotuner.sources.scope import MetricsScope, literal

Obj = dict[str, Any]
Path = tuple[str | int, ...]
DEFAULT_SURGE = "25%"  # apps/v1 Deployments, and Dynamo's managed worker rollout
WORKER_TYPES = frozenset({"worker", "prefill", "decode"})  # Dynamo's rolling components
MAIN = "main"  # the engine container of Dynamo and KServe LLMInferenceService pods
# A condition that says the rollout cannot finish: no node has the GPUs, or it ran out of time.
STUCK_REASONS = frozenset(
    {"ProgressDeadlineExceeded", "Unschedulable", "insufficient_capacity", "RevisionFailed"}
)


class Engine(NamedTuple):
    """One engine container of the object: its path and that of the pod spec around it."""

    container: Path
    pod_spec: Path


@dataclass(frozen=True)
class Kind:
    """A kind of serving object, as the URI names it and the API server serves it."""

    word: str  # in the target URI
    kind: str
    group: str
    version: str
    plural: str
    engines: Callable[[Obj, str | None, str], list[Engine]]  # (object, URI part, hint)
    surge: Callable[[Obj], str | None]  # why a rollout starts pods before old ones stop
    rollout: Callable[[Obj], RolloutStatus]
    pod_selector: Callable[[Obj], str | None] = lambda raw: None  # its pods, to find pending
    partitioned: bool = False  # offers `partition`: a canary without a spare GPU
    # A container without a command line runs the kind's template (sites.templated_site).
    templated: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


def at(raw: Any, path: Path) -> Any:
    """The value at `path`, or None where a part is missing."""
    for part in path:
        if isinstance(raw, dict) and isinstance(part, str):
            raw = raw.get(part)
        elif isinstance(raw, list) and isinstance(part, int) and part < len(raw):
            raw = raw[part]
        else:
            return None
    return raw


def pointer(path: Path) -> str:
    """A path as a JSON pointer (RFC 6901)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _in_pod(raw: Obj, spec: Path, wanted: str | None, hint: str) -> Engine:
    containers = at(raw, (*spec, "containers")) or []
    if not containers:
        raise ActuatorError(f"no pod template containers at {pointer(spec)}")
    chosen = select_container(containers, wanted, pointer(spec), hint)
    return Engine((*spec, "containers", containers.index(chosen)), spec)


def _in_group(raw: Obj, specs: list[Path], wanted: str | None, hint: str) -> list[Engine]:
    """The engine of each pod of a group (leader and workers): the container named where the
    pod has one by that name, else chosen as for an unnamed target (their names differ)."""
    engines = []
    for spec in specs:
        names = [c.get("name") for c in at(raw, (*spec, "containers")) or []]
        engines.append(_in_pod(raw, spec, wanted if wanted in names else None, hint))
    if wanted is not None and not any(at(raw, (*e.container, "name")) == wanted for e in engines):
        raise ActuatorError(f"no container named {wanted!r} in {', '.join(map(pointer, specs))}")
    return engines


# --------------------------------------------------------------------------- rollouts


def surge_pods(surge: int | str | None, replicas: int, default: int | str = 0) -> int:
    """maxSurge as pods (a percentage rounds up, as the controllers do)."""
    value = default if surge is None else surge
    if isinstance(value, str) and value.endswith("%"):
        return -(-int(value[:-1]) * replicas // 100)
    return int(value)


def _surge_risk(
    what: str, surge: int | str | None, replicas: int, default: int | str
) -> str | None:
    pods = surge_pods(surge, replicas, default)
    if pods < 1:
        return None
    shown = default if surge is None else surge
    return (
        f"{what} maxSurge {shown} starts a new GPU pod before an old one stops; without a "
        "spare GPU it stays Pending forever (set maxSurge 0, or allow_surge)"
    )


def stuck_condition(conditions: Sequence[Obj]) -> str | None:
    """A failed condition that says the rollout cannot finish, as `reason: message`."""
    for condition in conditions:
        if condition.get("status") != "False":
            continue
        reason, message = str(condition.get("reason")), str(condition.get("message", ""))
        if reason in STUCK_REASONS or "Insufficient nvidia.com/gpu" in message:
            return f"{reason}: {message}"
    return None


def _observed(raw: Obj) -> bool:
    """The controller has seen the object's latest spec; a status without observedGeneration
    (older Dynamo and LeaderWorkerSet releases) is taken as current, the kind's own checks
    (phase, Ready, updated replicas) deciding."""
    observed = (raw.get("status") or {}).get("observedGeneration")
    return observed is None or bool(observed >= raw["metadata"].get("generation", 0))


def _ready(raw: Obj) -> bool:
    """The Ready condition is True (KServe, Dynamo), or absent."""
    conditions = at(raw, ("status", "conditions")) or []
    ready = [c for c in conditions if c.get("type") == "Ready"]
    return all(c.get("status") == "True" for c in ready)


def _replica_rollout(raw: Obj, replicas: int, waiting: int = 0) -> RolloutStatus:
    """apps/v1 and LWS: every replica (less the `waiting` ones below a partition) updated and
    available, unless a condition says it cannot finish."""
    status = raw.get("status") or {}
    stuck = stuck_condition(status.get("conditions") or [])
    if stuck:
        return RolloutStatus(False, stuck)
    updated = status.get("updatedReplicas", 0) or 0
    available = status.get("availableReplicas", status.get("readyReplicas", 0)) or 0
    done = _observed(raw) and updated >= replicas - waiting and available >= replicas
    held = f", {waiting} held by the partition" if waiting else ""
    return RolloutStatus(done, None, f"{updated}/{replicas} updated, {available} available{held}")


def _conditions_rollout(raw: Obj) -> RolloutStatus:
    """KServe: the generation observed and Ready, unless a condition says it cannot finish."""
    conditions = at(raw, ("status", "conditions")) or []
    stuck = stuck_condition(conditions)
    if stuck:
        return RolloutStatus(False, stuck)
    ready = _ready(raw) and bool(conditions)
    return RolloutStatus(_observed(raw) and ready, None, "Ready" if ready else "not Ready yet")


# --------------------------------------------------------------------------- apps/v1


def _template_engines(raw: Obj, wanted: str | None, hint: str) -> list[Engine]:
    return [_in_pod(raw, ("spec", "template", "spec"), wanted, hint)]


def _deployment_surge(raw: Obj) -> str | None:
    strategy = raw["spec"].get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return None
    surge = (strategy.get("rollingUpdate") or {}).get("maxSurge")
    return _surge_risk("the Deployment's", surge, raw["spec"].get("replicas", 1), DEFAULT_SURGE)


def _apps_rollout(raw: Obj) -> RolloutStatus:
    return _replica_rollout(raw, raw["spec"].get("replicas", 1))


# --------------------------------------------------------------------------- LeaderWorkerSet

LWS_TEMPLATE: Path = ("spec", "leaderWorkerTemplate")
LWS_UPDATE: Path = ("spec", "rolloutStrategy", "rollingUpdateConfiguration")


def _lws_engines(raw: Obj, wanted: str | None, hint: str) -> list[Engine]:
    """The leader's engine (its template defaults to the worker's) and the workers'."""
    pods: list[Path] = []
    if at(raw, (*LWS_TEMPLATE, "leaderTemplate")) is not None:
        pods.append((*LWS_TEMPLATE, "leaderTemplate", "spec"))
    pods.append((*LWS_TEMPLATE, "workerTemplate", "spec"))
    return _in_group(raw, pods, wanted, hint)


def _lws_surge(raw: Obj) -> str | None:
    surge = at(raw, (*LWS_UPDATE, "maxSurge"))
    return _surge_risk("the LeaderWorkerSet's", surge, raw["spec"].get("replicas", 1), 0)


def lws_partition(raw: Obj) -> int:
    return int(at(raw, (*LWS_UPDATE, "partition")) or 0)


def _lws_rolling(raw: Obj) -> range:
    """The group indices the partition lets roll (those below it wait for it to be lowered)."""
    replicas = int(raw["spec"].get("replicas", 1))
    return range(min(lws_partition(raw), replicas), replicas)


def _lws_rollout(raw: Obj) -> RolloutStatus:
    """Groups at or above the partition roll; those below wait for it to be lowered."""
    rolling = _lws_rolling(raw)
    return _replica_rollout(raw, rolling.stop, waiting=rolling.start)


def lws_canary_scope(raw: Obj, target: str) -> MetricsScope | None:
    """The pods of the groups a partition lets roll (index partition..replicas-1: the canary),
    None when it holds none back. LWS names a group's leader `<name>-<group>` and its workers
    `<name>-<group>-<worker>` (api/leaderworkerset/v1, LeaderWorkerSetSpec) and labels them
    `leaderworkerset.sigs.k8s.io/group-index`; a Prometheus `pod` label carries the names."""
    rolling = _lws_rolling(raw)
    groups = tuple(rolling)
    if not groups or len(groups) == rolling.stop:
        return None
    which = "|".join(str(g) for g in groups)
    pods = f"{literal(raw['metadata']['name'])}-({which})(-[0-9]+)?"
    return MetricsScope(target=target, groups=groups, pods=pods)


# --------------------------------------------------------------------------- Dynamo

# The worker's name goes where the target names a part: a cluster object's URI path, a file's
# `container` query (one message for both, as the same reading serves both).
_NAME_THE_WORKER = (
    "name the worker in the target: file://PATH?container=WORKER for a file, "
    "k8s://NS/dynamographdeployment"
)


def _dynamo_component(raw: Obj, wanted: str | None) -> int:
    components = raw["spec"].get("components") or []
    names = [str(c.get("name")) for c in components]
    if wanted is None:
        workers = [i for i, c in enumerate(components) if c.get("podTemplate")]
        if len(workers) == 1:
            return workers[0]
        raise ActuatorError(f"components {', '.join(names)}: {_NAME_THE_WORKER}/NAME/COMPONENT")
    if wanted not in names:
        raise ActuatorError(f"no component named {wanted!r} (have {', '.join(names)})")
    return names.index(wanted)


def _dynamo_engines(raw: Obj, wanted: str | None, hint: str) -> list[Engine]:
    index = _dynamo_component(raw, wanted)
    return [_in_pod(raw, ("spec", "components", index, "podTemplate", "spec"), MAIN, hint)]


def _dynamo_alpha_engines(raw: Obj, wanted: str | None, hint: str) -> list[Engine]:
    services = raw["spec"].get("services") or {}
    if wanted is None:
        named = [name for name, s in services.items() if at(s, ("extraPodSpec", "mainContainer"))]
        if len(named) != 1:
            raise ActuatorError(
                f"services {', '.join(services)}: {_NAME_THE_WORKER}.v1alpha1/NAME/SERVICE"
            )
        wanted = named[0]
    if at(services, (wanted, "extraPodSpec", "mainContainer")) is None:
        raise ActuatorError(f"service {wanted!r} has no extraPodSpec.mainContainer")
    spec: Path = ("spec", "services", wanted, "extraPodSpec")
    return [Engine((*spec, "mainContainer"), spec)]


def _dynamo_surge(raw: Obj) -> str | None:
    """Dynamo's managed rollout of its workers (Deployment-backed, single node; every worker
    rolls on a change) surges 25% by default, set per component by annotation; multinode
    workers (Grove, LWS) roll with maxSurge 0, and non-workers do not surge."""
    key = "nvidia.com/deployment-rolling-update-max-surge"
    spec = raw["spec"]
    parts = [(str(c.get("name")), c) for c in spec.get("components") or []]
    parts += list((spec.get("services") or {}).items())
    for name, part in parts:
        kind = part.get("type") or part.get("componentType")
        if kind not in WORKER_TYPES or (at(part, ("multinode", "nodeCount")) or 1) > 1:
            continue
        annotations = {
            **(at(part, ("podTemplate", "metadata", "annotations")) or {}),
            **(part.get("annotations") or {}),
        }
        replicas = part.get("replicas", 1) or 1
        risk = _surge_risk(f"worker {name}'s", annotations.get(key), replicas, DEFAULT_SURGE)
        if risk:
            return f"{risk} (annotation {key})"
    return None


def _dynamo_rollout(raw: Obj) -> RolloutStatus:
    """`.status.rollingUpdate.phase`: Failed is stuck, Pending and InProgress are rolling."""
    status = raw.get("status") or {}
    phase = at(status, ("rollingUpdate", "phase")) or ""
    stuck = stuck_condition(status.get("conditions") or [])
    if phase == "Failed" or status.get("state") == "failed":
        return RolloutStatus(
            False, f"Dynamo rolling update failed ({stuck or status.get('state')})"
        )
    if stuck:
        return RolloutStatus(False, stuck)
    done = _observed(raw) and phase in ("", "Completed") and _ready(raw)
    return RolloutStatus(
        done, None, f"rolling update {phase or 'none'}, state {status.get('state')}"
    )


# --------------------------------------------------------------------------- KServe


def _llmisvc_engines(raw: Obj, wanted: str | None, hint: str) -> list[Engine]:
    """The head's engine (`spec.template`) and the workers' (`spec.worker`, multi-node)."""
    pods: list[Path] = [("spec", "template")]
    if at(raw, ("spec", "worker")) is not None:
        pods.append(("spec", "worker"))
    return _in_group(raw, pods, wanted or MAIN, hint)


def _llmisvc_surge(raw: Obj) -> str | None:
    """Its Deployment's default maxSurge is 25%; multi-node (an LWS) rolls with 0."""
    default: int | str = 0 if at(raw, ("spec", "worker")) is not None else DEFAULT_SURGE
    surge = at(raw, ("spec", "rolloutStrategy", "maxSurge"))
    replicas = raw["spec"].get("replicas", 1) or 1
    return _surge_risk("the LLMInferenceService's", surge, replicas, default)


def _isvc_engines(raw: Obj, wanted: str | None, hint: str) -> list[Engine]:
    if at(raw, ("spec", "predictor", "model")) is not None:
        return [Engine(("spec", "predictor", "model"), ("spec", "predictor"))]
    return [_in_pod(raw, ("spec", "predictor"), wanted, hint)]


def _isvc_surge(raw: Obj) -> str | None:
    """Serverless (Knative) starts the new revision beside the old one; RawDeployment uses
    the Deployment's strategy (25% surge by default)."""
    mode = (raw["metadata"].get("annotations") or {}).get("serving.kserve.io/deploymentMode")
    if mode not in ("RawDeployment", "Standard"):
        return (
            "a serverless InferenceService starts the new revision beside the old one; "
            "without a spare GPU it stays Pending (use RawDeployment with maxSurge 0, or "
            "allow_surge)"
        )
    surge = at(raw, ("spec", "predictor", "deploymentStrategy", "rollingUpdate", "maxSurge"))
    replicas = at(raw, ("spec", "predictor", "minReplicas")) or 1
    return _surge_risk("the InferenceService's", surge, replicas, DEFAULT_SURGE)


# --------------------------------------------------------------------------- the table

KINDS: dict[str, Kind] = {
    kind.word: kind
    for kind in (
        Kind(
            "deployment",
            "Deployment",
            "apps",
            "v1",
            "deployments",
            _template_engines,
            _deployment_surge,
            _apps_rollout,
        ),
        Kind(
            "statefulset",
            "StatefulSet",
            "apps",
            "v1",
            "statefulsets",
            _template_engines,
            lambda raw: None,
            _apps_rollout,
        ),
        Kind(
            "leaderworkerset",
            "LeaderWorkerSet",
            "leaderworkerset.x-k8s.io",
            "v1",
            "leaderworkersets",
            _lws_engines,
            _lws_surge,
            _lws_rollout,
            pod_selector=lambda raw: f"leaderworkerset.sigs.k8s.io/name={raw['metadata']['name']}",
            partitioned=True,
        ),
        Kind(
            "dynamographdeployment",
            "DynamoGraphDeployment",
            "nvidia.com",
            "v1beta1",
            "dynamographdeployments",
            _dynamo_engines,
            _dynamo_surge,
            _dynamo_rollout,
        ),
        Kind(
            "llminferenceservice",
            "LLMInferenceService",
            "serving.kserve.io",
            "v1alpha2",
            "llminferenceservices",
            _llmisvc_engines,
            _llmisvc_surge,
            _conditions_rollout,
            templated=True,
        ),
        Kind(
            "inferenceservice",
            "InferenceService",
            "serving.kserve.io",
            "v1beta1",
            "inferenceservices",
            _isvc_engines,
            _isvc_surge,
            _conditions_rollout,
        ),
    )
}
# The versions whose schema differs from the default's (DynamoGraphDeployment v1alpha1).
VERSIONS: dict[tuple[str, str], Kind] = {
    ("dynamographdeployment", "v1alpha1"): replace(
        KINDS["dynamographdeployment"], version="v1alpha1", engines=_dynamo_alpha_engines
    ),
}
BY_KIND = {kind.kind: kind for kind in KINDS.values()}


def engine_sites(
    kind: Kind, raw: Obj, wanted: str | None, dialect: Dialect, config_map: ConfigMapReader
) -> list[tuple[Engine, Site]]:
    """Every engine container of the object with where its args sit (a pod that runs no
    engine, such as a Ray worker, has none); they must agree on the managed flags (ArgsError,
    or ActuatorError for a container that is not there)."""
    found = []
    for engine in kind.engines(raw, wanted, dialect.container_hint):
        container, pod = at(raw, engine.container), at(raw, engine.pod_spec)
        site = read_site(container, pointer(engine.container), pod, dialect, config_map)
        if site is not None and kind.templated:
            site = templated_site(site)
        if site is not None:
            found.append((engine, site))
    if not found:
        raise ArgsError("no container runs the engine (its scripts run other commands)")
    check_agreement([site for _, site in found], dialect)
    return found


def kind_named(word: str) -> Kind:
    """`deployment`, `leaderworkerset`, ... or `WORD.VERSION` (e.g.
    `dynamographdeployment.v1alpha1`, `llminferenceservice.v1alpha1`)."""
    base, _, version = word.partition(".")
    if base not in KINDS:
        raise InputError(f"unknown target kind {base!r}: use one of {', '.join(KINDS)}")
    kind = KINDS[base]
    if not version or version == kind.version:
        return kind
    return VERSIONS.get((base, version)) or replace(kind, version=version)
