"""The Kubernetes actuator: a serving object (Deployment, StatefulSet, LeaderWorkerSet,
DynamoGraphDeployment, LLMInferenceService, InferenceService; actuators/kinds.py) through the
official client.

Every object is read and patched through its REST path (apps/v1 and the custom resources
alike), so what the tuner does not manage comes back byte-identical: every write is one JSON
patch of the engine args where they sit (actuators/sites.py: every engine container of the
object, leader and workers alike), the state annotations and, for a canary, the partition,
guarded by the resourceVersion that was read and preceded by a server-side dry run.

A 409 is client-go's `retry.RetryOnConflict`: re-read, and when the other writer left what the
caller decided on alone (the setup, the drafter, the pause and the state record), re-render from
the fresh object and write again, a bounded number of times with jitter; the other writer's
change survives because only the managed flags are rewritten. A write that touched what was
decided on is a ConflictError: the loop re-decides next step.

An object another controller owns, one whose args live in a ConfigMap, and (unless
`write_managed`) one that Helm or a GitOps tool re-applies are never written: apply raises
AdviceOnlyError with the change to make where it belongs.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kubernetes import client as k8s

from autotuner.actuators.base import (
    STATE_ANNOTATION,
    Actuator,
    ApplyResult,
    Change,
    LiveTarget,
    RolloutStatus,
    Wanted,
    args_diff,
    live_target,
)
from autotuner.actuators.kinds import (
    LWS_UPDATE,
    Engine,
    Path,
    at,
    engine_sites,
    kind_named,
    lws_canary_scope,
    lws_partition,
    pointer,
)
from autotuner.actuators.kubeapi import K8sTarget, request
from autotuner.actuators.managers import controller_owner, source_manager
from autotuner.actuators.sites import Site, config_change, site_ops
from autotuner.deadline import Deadline, backoff_s
from autotuner.engines.dialect import Dialect
from autotuner.engines.vllm.dialect import VllmDialect
from autotuner.errors import ActuatorError, AdviceOnlyError, ArgsError, ConflictError

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
SEEN = 8  # reads remembered by resourceVersion, to tell what a conflicting writer changed
# The LeaderWorkerSet's own partition while a canary holds it (restored on release).
PARTITION_ANNOTATION = "spec-autotuner.io/operator-partition"
Obj = dict[str, Any]


@dataclass(frozen=True)
class Read:
    """One read of the object, as apply needs it: the raw object and each engine's site."""

    raw: Obj
    sites: list[tuple[Engine, Site]]


class KubernetesActuator(Actuator):
    def __init__(
        self,
        target: K8sTarget,
        api: k8s.ApiClient,
        *,
        dialect: Dialect | None = None,
        field_manager: str = "spec-autotuner",
        identity: str = "spec-autotuner",
        allow_surge: bool = False,
        allow_low_precision_replay: bool = False,
        timeout_s: float = 10.0,
        deadline_s: float | None = None,
        conflict_attempts: int = 5,
        write_managed: bool = False,
        canary: bool = False,
        unschedulable_after_s: float = 300.0,
    ) -> None:
        self.target = target
        self.kind = kind_named(target.kind)
        self.objects = k8s.CustomObjectsApi(api)
        self.core = k8s.CoreV1Api(api)
        self.dialect: Dialect = dialect or VllmDialect()
        self.field_manager = field_manager
        self.identity = identity
        self.allow_surge = allow_surge
        self.allow_low_precision_replay = allow_low_precision_replay
        self.write_managed = write_managed  # patch even what Helm or GitOps re-applies
        self.canary = canary and self.kind.partitioned  # roll the last group first
        self.unschedulable_after_s = unschedulable_after_s
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s if deadline_s is not None else 3 * timeout_s
        self.conflict_attempts = conflict_attempts
        self._uid: str | None = None
        self._call: Deadline | None = None  # the deadline of the apply in progress
        self._seen: dict[str, LiveTarget] = {}

    def _request(self, what: str, call: Callable[..., Any], *args: Any, **options: Any) -> Any:
        deadline = self._call or Deadline(self.deadline_s)
        return request(what, deadline, self.timeout_s, call, *args, **options)

    # ----------------------------------------------------------------- reading

    def _get(self) -> Obj:
        k, t = self.kind, self.target
        get = self.objects.get_namespaced_custom_object
        raw: Obj = self._request(str(t), get, k.group, k.version, t.namespace, k.plural, t.name)
        return raw

    def _config_map(self, name: str) -> dict[str, str]:
        namespace = self.target.namespace
        found = self._request(
            f"ConfigMap {namespace}/{name}", self.core.read_namespaced_config_map, name, namespace
        )
        return dict(found.data or {})

    def _sites(self, raw: Obj) -> list[tuple[Engine, Site]]:
        where = str(self.target)
        try:
            return engine_sites(
                self.kind, raw, self.target.container, self.dialect, self._config_map
            )
        except ArgsError as exc:
            raise ActuatorError(f"{where}: {exc}") from None
        except ActuatorError as exc:  # a 403 on a ConfigMap stays a ForbiddenError
            raise type(exc)(f"{where}: {exc}") from None

    def read(self) -> LiveTarget:
        """The object, the ConfigMaps its args come from and (LWS) its pods, within one
        deadline as a whole."""
        own = self._call is None
        if own:
            self._call = Deadline(self.deadline_s)
        try:
            raw = self._get()
            return self._live(raw, self._sites(raw))
        finally:
            if own:
                self._call = None

    def _live(self, raw: Obj, sites: list[tuple[Engine, Site]]) -> LiveTarget:
        self._uid = raw["metadata"].get("uid")
        engine, site = sites[0]
        annotations = raw["metadata"].get("annotations") or {}
        live = live_target(
            str(self.target),
            description=f"{self.target} {pointer(engine.container)}",
            command=site.command,
            args=site.args,
            annotations=annotations,
            dialect=self.dialect,
            version=raw["metadata"].get("resourceVersion"),
            rollout=self._rollout(raw),
            image=at(raw, (*engine.container, "image")),
        )
        held = PARTITION_ANNOTATION in annotations  # written only on partitioned kinds
        live = replace(
            live,
            advice=self._advice(raw, [s for _, s in sites]),
            canary_held=held,
            scope=lws_canary_scope(raw, str(self.target)) if held else None,
        )
        if live.version is not None:
            self._seen[live.version] = live
            while len(self._seen) > SEEN:
                del self._seen[next(iter(self._seen))]
        return live

    def _advice(self, raw: Obj, sites: list[Site]) -> str | None:
        """Why the tuner must not write this object, or None."""
        owner = controller_owner(raw["metadata"], self.target.namespace)
        if owner:
            return owner
        for site in sites:
            if site.advice:
                return site.advice
        manager = source_manager(raw["metadata"])
        if manager and not self.write_managed:
            return (
                f"it is managed by {manager}, which re-applies its source and undoes a "
                "patch here: change the args in that source (or set write_managed)"
            )
        return None

    def _rollout(self, raw: Obj) -> RolloutStatus:
        status = self.kind.rollout(raw)
        selector = self.kind.pod_selector(raw)
        if status.done or status.stuck or selector is None:
            return status
        try:
            pending = self._unschedulable(selector)
        except ActuatorError as exc:  # the rollout as the object tells it is still worth having
            return replace(status, detail=f"{status.detail}; pods not read: {exc}")
        return replace(status, stuck=pending) if pending else status

    def _unschedulable(self, selector: str) -> str | None:
        """A pod of the object no node can take for longer than `unschedulable_after_s`."""
        namespace = self.target.namespace
        pods = self._request(
            f"pods of {self.target}",
            self.core.list_namespaced_pod,
            namespace,
            label_selector=selector,
        )
        now = datetime.datetime.now(datetime.timezone.utc)
        for pod in pods.items or []:
            for condition in (pod.status.conditions if pod.status else None) or []:
                if condition.type != "PodScheduled" or condition.status != "False":
                    continue
                since = condition.last_transition_time
                waited = (now - since).total_seconds() if since else 0.0
                if waited >= self.unschedulable_after_s:
                    return (
                        f"{condition.reason}: pod {pod.metadata.name} unschedulable for "
                        f"{waited:.0f}s: {condition.message}"
                    )
        return None

    # ----------------------------------------------------------------- writing

    @property
    def where(self) -> str:
        return str(self.target)

    @property
    def longest_call_s(self) -> float:
        return self.deadline_s

    def _apply(self, wanted: Wanted) -> ApplyResult:
        """Write the wanted setup (and state) on the object as read at the expected version;
        on a conflict, re-read and re-render from the fresh object (see the module's
        docstring)."""
        expected = wanted.expected_version
        seen = self._seen.get(expected) if expected is not None else None
        self._call = Deadline(self.deadline_s)
        try:
            for attempt in range(self.conflict_attempts):
                live, read = self._read_for_apply()
                command, args, record = self.render_for(live, wanted)
                if attempt and _written(live, command, args, wanted.state):
                    return _landed(seen or live, live, self.where)  # an earlier try landed
                if expected is not None and live.version != expected:
                    _same_inputs(seen, live, self.where)
                try:
                    change = Change(
                        live, command, args, wanted.state, wanted.dry_run, wanted, record
                    )
                    return self._write(change, read)
                except ConflictError:
                    last = attempt + 1 == self.conflict_attempts
                    if last or not self._call.sleep(backoff_s(attempt)):
                        raise
            raise ConflictError(f"{self.where}: lost the race {self.conflict_attempts} times")
        finally:
            self._call = None

    def _read_for_apply(self) -> tuple[LiveTarget, Read]:
        raw = self._get()  # one read: the args, the strategy, the owners and the containers
        sites = self._sites(raw)
        return self._live(raw, sites), Read(raw, sites)

    def _write(self, change: Change, read: Read) -> ApplyResult:
        live, command, args, state = change.live, change.command, change.args, change.state
        before, after = (*live.command, *live.args), (*command, *args)
        diff = args_diff(before, after, str(self.target))
        if after == before and (state is None or state == live.state):
            return ApplyResult(False, change.dry_run, before, after, "", live.version)
        if live.advice and after != before:
            in_file = config_change(read.sites[0][1], command, args, self.dialect)
            raise AdviceOnlyError(
                f"{self.where}: not patched: {live.advice}{in_file}; the change:\n{diff}"
            )
        risk = self.kind.surge(read.raw)
        if risk and not self.allow_surge and after != before:
            raise ActuatorError(f"refused: {self.where}: {risk}")
        ops = self._ops(change, read)
        self._patch(ops, JSON_PATCH, dry_run=True)  # the server validates first, changes nothing
        if change.dry_run:
            return ApplyResult(after != before, True, before, after, diff, live.version)
        patched = self._patch(ops, JSON_PATCH, dry_run=False)
        version = patched["metadata"].get("resourceVersion")
        return ApplyResult(after != before, False, before, after, diff, version)

    def _ops(self, change: Change, read: Read) -> list[Obj]:
        """The one JSON patch: the resourceVersion read (a stale one is a 409), every site's
        managed flags, the state annotations and, for a canary, the partition."""
        raw, live = read.raw, change.live
        ops: list[Obj] = [
            {"op": "replace", "path": "/metadata/resourceVersion", "value": live.version}
        ]
        others = [self.render_other(change, site) for _, site in read.sites[1:]]
        renders = [(change.command, change.args), *[(c, a) for c, a, _ in others]]
        for (engine, site), (command, args) in zip(read.sites, renders, strict=True):
            ops += site_ops(site, at(raw, engine.container), command, args)
        annotations = change.annotations()
        moved = (change.command, change.args) != (list(live.command), list(live.args))
        if self.canary and moved:
            ops += self._hold_partition(raw, annotations)
        return ops + _annotation_ops(raw, annotations)

    def _hold_partition(self, raw: Obj, annotations: dict[str, str | None]) -> list[Obj]:
        """Set the LeaderWorkerSet's partition so that only its last group rolls (a canary
        that needs no spare GPU); the operator's own partition is kept to restore."""
        replicas = int(raw["spec"].get("replicas", 1))
        if replicas < 2:
            return []
        held = (raw["metadata"].get("annotations") or {}).get(PARTITION_ANNOTATION)
        if held is None:
            annotations[PARTITION_ANNOTATION] = str(lws_partition(raw))
        return _set(raw, LWS_UPDATE, "partition", replicas - 1)

    def release_canary(self) -> bool:
        """Let every group roll: restore the operator's partition held by a canary apply.
        False when no canary holds it."""
        self._call = Deadline(self.deadline_s)
        try:
            raw = self._get()
            held = (raw["metadata"].get("annotations") or {}).get(PARTITION_ANNOTATION)
            if held is None:
                return False
            version = raw["metadata"].get("resourceVersion")
            ops: list[Obj] = [
                {"op": "replace", "path": "/metadata/resourceVersion", "value": version}
            ]
            ops += _set(raw, LWS_UPDATE, "partition", int(held or 0))
            ops += _annotation_ops(raw, {PARTITION_ANNOTATION: None})
            self._patch(ops, JSON_PATCH, dry_run=True)
            self._patch(ops, JSON_PATCH, dry_run=False)
            return True
        finally:
            self._call = None

    def save_state(self, state: str, *, expected_version: str | None) -> str | None:
        """Persist the state annotation alone (no rollout: the pod template is untouched). A
        conflict with a writer that left the state record alone is written again on top."""
        seen = self._seen.get(expected_version) if expected_version is not None else None
        self._call = Deadline(self.deadline_s)
        version = expected_version
        try:
            for attempt in range(self.conflict_attempts):
                body = {
                    "metadata": {
                        "annotations": {STATE_ANNOTATION: state},
                        "resourceVersion": version,
                    }
                }
                try:
                    patched = self._patch(body, MERGE_PATCH, dry_run=False)
                    written = patched["metadata"].get("resourceVersion")
                    return str(written) if written is not None else None
                except ConflictError:
                    fresh = self.read()
                    last = attempt + 1 == self.conflict_attempts
                    if seen is None or fresh.state != seen.state or last:
                        raise
                    if not self._call.sleep(backoff_s(attempt)):
                        raise
                    version = fresh.version
            raise ConflictError(f"{self.where}: lost the race {self.conflict_attempts} times")
        finally:
            self._call = None

    def _patch(self, body: Any, content_type: str, *, dry_run: bool) -> Obj:
        k, t = self.kind, self.target
        options: dict[str, Any] = {
            "field_manager": self.field_manager,
            "_content_type": content_type,
        }
        if dry_run:
            options["dry_run"] = "All"
        patch = self.objects.patch_namespaced_custom_object
        raw: Obj = self._request(
            str(t), patch, k.group, k.version, t.namespace, k.plural, t.name, body, **options
        )
        return raw

    def event(self, reason: str, message: str, *, warning: bool = False) -> None:
        """A Kubernetes Event on the target, with the decision's sentence."""
        t = self.target
        now = datetime.datetime.now(datetime.timezone.utc)
        body = k8s.CoreV1Event(
            metadata=k8s.V1ObjectMeta(
                generate_name=f"{t.name}.spec-autotuner.", namespace=t.namespace
            ),
            involved_object=k8s.V1ObjectReference(
                api_version=self.kind.api_version,
                kind=self.kind.kind,
                name=t.name,
                namespace=t.namespace,
                uid=self._uid,
            ),
            reason=reason,
            message=message[:1024],
            type="Warning" if warning else "Normal",
            source=k8s.V1EventSource(component="spec-autotuner"),
            reporting_component="spec-autotuner",
            reporting_instance=self.identity,
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        self._request(f"event on {t}", self.core.create_namespaced_event, t.namespace, body)


def _set(raw: Obj, parent: Path, key: str, value: Any) -> list[Obj]:
    """JSON patch operations that set `parent.key`, adding the missing parents."""
    for depth in range(len(parent)):
        if at(raw, parent[: depth + 1]) is None:
            nested: Any = {key: value}
            for part in reversed(parent[depth + 1 :]):
                nested = {part: nested}
            return [{"op": "add", "path": pointer(parent[: depth + 1]), "value": nested}]
    return [{"op": "add", "path": pointer((*parent, key)), "value": value}]


def _annotation_ops(raw: Obj, annotations: dict[str, str | None]) -> list[Obj]:
    """Set (or, for None, remove) annotations; the map is added when the object has none."""
    present = raw["metadata"].get("annotations")
    ops: list[Obj] = []
    if present is None and any(v is not None for v in annotations.values()):
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
        present = {}
    for key, value in annotations.items():
        path = pointer(("metadata", "annotations", key))
        if value is not None:
            ops.append({"op": "add", "path": path, "value": value})
        elif present is not None and key in present:
            ops.append({"op": "remove", "path": path})
    return ops


def _written(live: LiveTarget, command: list[str], args: list[str], state: str | None) -> bool:
    """The object already holds this write (an attempt the server answered 5xx had landed)."""
    return (list(live.command), list(live.args)) == (command, args) and (
        state is None or live.state == state
    )


def _landed(before: LiveTarget, now: LiveTarget, where: str) -> ApplyResult:
    old, new = (*before.command, *before.args), (*now.command, *now.args)
    return ApplyResult(old != new, False, old, new, args_diff(old, new, where), now.version)


def _same_inputs(seen: LiveTarget | None, fresh: LiveTarget, where: str) -> None:
    """ConflictError unless the other writer left alone what the caller decided on."""
    if seen is None:
        raise ConflictError(f"{where} changed since it was read (-> {fresh.version})")
    decided = ("setup", "speculative_config", "paused", "state")
    changed = [name for name in decided if getattr(seen, name) != getattr(fresh, name)]
    if changed:
        raise ConflictError(
            f"{where} changed since it was read ({seen.version} -> {fresh.version}: "
            f"{', '.join(changed)}); re-decide"
        )
