"""The Kubernetes actuator: the vLLM Deployment (or StatefulSet) through the official client.

Every write is one strategic-merge patch of the container's args and the state annotation,
guarded by the resourceVersion that was read, and preceded by a server-side dry run.

Every request carries what is left of one deadline per call (`deadline_s`, retries included) as
its `_request_timeout`. A 429 or 5xx is retried within that deadline (after the server's
Retry-After when it gives one). A 409 is client-go's `retry.RetryOnConflict`: re-read, and when
the other writer left what the caller decided on alone (the setup, the drafter, the pause and
the state record), re-render from the fresh object and write again, a bounded number of times
with jitter; the other writer's change survives because only the managed flags are rewritten.
A write that touched what was decided on is a ConflictError: the loop re-decides next step.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from autotuner.actuators.base import (
    OPERATOR_ANNOTATION,
    STATE_ANNOTATION,
    Actuator,
    ApplyResult,
    Change,
    LiveTarget,
    RolloutStatus,
    args_diff,
    live_target,
    record_text,
    rendered,
    select_container,
)
from autotuner.core.types import Setup
from autotuner.deadline import Deadline, backoff_s
from autotuner.engines.dialect import Dialect
from autotuner.engines.vllm.dialect import VllmDialect
from autotuner.errors import ActuatorError, ConflictError, ForbiddenError, InputError

SMP = "application/strategic-merge-patch+json"
TRANSIENT = frozenset({429, 500, 502, 503, 504})  # the server says: try again
SEEN = 8  # reads remembered by resourceVersion, to tell what a conflicting writer changed


@dataclass(frozen=True)
class K8sTarget:
    """k8s://NAMESPACE/deployment|statefulset/NAME[/CONTAINER]"""

    namespace: str
    kind: str
    name: str
    container: str | None = None

    @classmethod
    def parse(cls, uri: str) -> K8sTarget:
        match = re.fullmatch(
            r"k8s://([a-z0-9-]+)/(deployment|statefulset)/([a-z0-9.-]+)(?:/([a-z0-9-]+))?", uri
        )
        if match is None:
            raise InputError(
                f"cannot read target {uri!r}: use k8s://NAMESPACE/deployment/NAME[/CONTAINER]"
            )
        namespace, kind, name, container = match.groups()
        return cls(namespace, kind, name, container)

    def __str__(self) -> str:
        suffix = f"/{self.container}" if self.container else ""
        return f"k8s://{self.namespace}/{self.kind}/{self.name}{suffix}"


def api_client(host: str | None = None, *, timeout_s: float = 10.0) -> k8s.ApiClient:
    """In-cluster config when running in a pod, else kubeconfig; `host` for tests."""
    from kubernetes import config

    if host is not None:
        configuration = k8s.Configuration()
        configuration.host = host
    else:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        configuration = k8s.Configuration.get_default_copy()
    configuration.retries = False
    api = k8s.ApiClient(configuration)
    api.rest_client.pool_manager.connection_pool_kw["timeout"] = urllib3.Timeout(
        connect=timeout_s, read=timeout_s
    )
    return api


def discover_target(
    api: k8s.ApiClient, namespace: str, pod: str, container: str | None = None
) -> K8sTarget:
    """Walk the pod's owner chain (Pod -> ReplicaSet -> Deployment, or Pod -> StatefulSet)."""
    core, apps = k8s.CoreV1Api(api), k8s.AppsV1Api(api)
    try:
        meta = core.read_namespaced_pod(pod, namespace).metadata
        for owner in (meta.owner_references if meta else None) or []:
            if owner.kind == "StatefulSet":
                return K8sTarget(namespace, "statefulset", owner.name, container)
            if owner.kind == "ReplicaSet":
                rs_meta = apps.read_namespaced_replica_set(owner.name, namespace).metadata
                for parent in (rs_meta.owner_references if rs_meta else None) or []:
                    if parent.kind == "Deployment":
                        return K8sTarget(namespace, "deployment", parent.name, container)
    except ApiException as exc:
        raise _error(exc, f"pod {namespace}/{pod}") from None
    raise ActuatorError(f"pod {namespace}/{pod} is not owned by a Deployment or StatefulSet")


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
    ) -> None:
        self.target = target
        self.apps = k8s.AppsV1Api(api)
        self.core = k8s.CoreV1Api(api)
        self.dialect: Dialect = dialect or VllmDialect()
        self.field_manager = field_manager
        self.identity = identity
        self.allow_surge = allow_surge
        self.allow_low_precision_replay = allow_low_precision_replay
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s if deadline_s is not None else 3 * timeout_s
        self.conflict_attempts = conflict_attempts
        self._uid: str | None = None
        self._call: Deadline | None = None  # the deadline of the apply in progress
        self._seen: dict[str, LiveTarget] = {}

    def _request(self, what: str, request: Callable[..., Any], *args: Any, **options: Any) -> Any:
        """One API request within the call's deadline; a 429 or 5xx is tried again while the
        deadline leaves room for the wait (the server's Retry-After, else a jittered backoff)."""
        deadline = self._call or Deadline(self.deadline_s)
        for attempt in range(64):
            try:
                with api_errors(what):
                    try:
                        timeout = deadline.cap(self.timeout_s)
                        return request(*args, _request_timeout=timeout, **options)
                    except ApiException as exc:
                        if exc.status not in TRANSIENT:
                            raise
                        wait = _retry_after(exc)
                        if not deadline.sleep(backoff_s(attempt) if wait is None else wait):
                            raise
            except ActuatorError as exc:
                if deadline.expired and not isinstance(exc, ConflictError | ForbiddenError):
                    raise ActuatorError(
                        f"past the {deadline.seconds:g}s deadline of the call: {exc}"
                    ) from None
                raise
        raise ActuatorError(f"{what}: the API server kept asking to try again")

    # ----------------------------------------------------------------- reading

    def _get(self) -> dict[str, Any]:
        t = self.target
        read = (
            self.apps.read_namespaced_deployment
            if t.kind == "deployment"
            else self.apps.read_namespaced_stateful_set
        )
        obj = self._request(str(t), read, t.name, t.namespace)
        raw: dict[str, Any] = self.apps.api_client.sanitize_for_serialization(obj)
        return raw

    def _container(self, raw: dict[str, Any]) -> dict[str, Any]:
        containers = raw["spec"]["template"]["spec"]["containers"]
        container: dict[str, Any] = select_container(
            containers, self.target.container, str(self.target), self.dialect.container_hint
        )
        return container

    def read(self) -> LiveTarget:
        return self._live(self._get())

    def _live(self, raw: dict[str, Any]) -> LiveTarget:
        self._uid = raw["metadata"].get("uid")
        container = self._container(raw)
        live = live_target(
            str(self.target),
            description=f"{self.target} container {container['name']}",
            command=container.get("command") or [],
            args=container.get("args") or [],
            annotations=raw["metadata"].get("annotations") or {},
            dialect=self.dialect,
            version=raw["metadata"].get("resourceVersion"),
            rollout=_rollout(raw),
            image=container.get("image"),
        )
        if live.version is not None:
            self._seen[live.version] = live
            while len(self._seen) > SEEN:
                del self._seen[next(iter(self._seen))]
        return live

    def surge_risk(self, raw: dict[str, Any] | None = None) -> str | None:
        """A reason the rollout can deadlock on GPUs (maxSurge >= 1), or None."""
        raw = raw if raw is not None else self._get()
        if self.target.kind != "deployment":
            return None
        strategy = raw["spec"].get("strategy") or {}
        if strategy.get("type") == "Recreate":
            return None
        surge = (strategy.get("rollingUpdate") or {}).get("maxSurge", "25%")
        replicas = raw["spec"].get("replicas", 1)
        if isinstance(surge, str) and surge.endswith("%"):
            surge_pods = -(-int(surge[:-1]) * replicas // 100)
        else:
            surge_pods = int(surge)
        if surge_pods >= 1:
            return (
                f"{self.target}: maxSurge {surge} starts a new GPU pod before an old one "
                "stops; without a spare GPU it stays Pending forever (set maxSurge 0, or "
                "allow_surge)"
            )
        return None

    # ----------------------------------------------------------------- writing

    @property
    def where(self) -> str:
        return str(self.target)

    @property
    def longest_call_s(self) -> float:
        return self.deadline_s

    def apply(
        self,
        setup: Setup,
        *,
        state: str | None,
        expected_version: str | None,
        saved_speculative_config: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> ApplyResult:
        """Write `setup` (and `state`) on the object as read at `expected_version`; on a
        conflict, re-read and re-render from the fresh object (see the module's docstring)."""
        seen = self._seen.get(expected_version) if expected_version is not None else None
        self._call = Deadline(self.deadline_s)
        try:
            for attempt in range(self.conflict_attempts):
                live, read = self._read_for_apply()
                command, args, record = rendered(
                    self.where,
                    live,
                    setup,
                    dialect=self.dialect,
                    saved_speculative_config=saved_speculative_config,
                    allow_low_precision_replay=self.allow_low_precision_replay,
                    companions=self.companions(live, setup),
                )
                if attempt and _written(live, command, args, state):
                    return _landed(seen or live, live, self.where)  # an earlier try landed
                if expected_version is not None and live.version != expected_version:
                    _same_inputs(seen, live, self.where)
                try:
                    change = Change(live, command, args, state, dry_run, operator_args=record)
                    return self._write(change, read)
                except ConflictError:
                    last = attempt + 1 == self.conflict_attempts
                    if last or not self._call.sleep(backoff_s(attempt)):
                        raise
            raise ConflictError(f"{self.where}: lost the race {self.conflict_attempts} times")
        finally:
            self._call = None

    def _read_for_apply(self) -> tuple[LiveTarget, dict[str, Any]]:
        raw = self._get()  # one read: the live args, the rollout strategy and the container
        return self._live(raw), raw

    def _write(self, change: Change, read: dict[str, Any]) -> ApplyResult:
        live, command, args, state = change.live, change.command, change.args, change.state
        dry_run, operator_args = change.dry_run, change.operator_args
        risk = self.surge_risk(read)
        if risk and not self.allow_surge:
            raise ActuatorError(f"refused: {risk}")
        before = (*live.command, *live.args)
        after = (*command, *args)
        diff = args_diff(before, after, str(self.target))
        if after == before and (state is None or state == live.state):
            return ApplyResult(False, dry_run, before, after, "", live.version)
        container = self._container(read)["name"]
        body: dict[str, Any] = {
            "metadata": {"resourceVersion": live.version},
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": container, "command": command or None, "args": args or None}
                        ]
                    }
                }
            },
        }
        annotations: dict[str, str | None] = {}
        if state is not None:
            annotations[STATE_ANNOTATION] = state
        if operator_args != live.operator_args:  # null removes it (strategic merge patch)
            annotations[OPERATOR_ANNOTATION] = record_text(operator_args)
        if annotations:
            body["metadata"]["annotations"] = annotations
        self._patch(body, dry_run=True)  # the server validates first, changes nothing
        if dry_run:
            return ApplyResult(after != before, True, before, after, diff, live.version)
        patched = self._patch(body, dry_run=False)
        version = patched["metadata"].get("resourceVersion")
        return ApplyResult(after != before, False, before, after, diff, version)

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
                    patched = self._patch(body, dry_run=False)
                    written = patched["metadata"].get("resourceVersion")
                    return str(written) if written is not None else None
                except ConflictError:
                    fresh = self.read()
                    if (
                        seen is None
                        or fresh.state != seen.state
                        or attempt + 1 == self.conflict_attempts
                    ):
                        raise
                    if not self._call.sleep(backoff_s(attempt)):
                        raise
                    version = fresh.version
            raise ConflictError(f"{self.where}: lost the race {self.conflict_attempts} times")
        finally:
            self._call = None

    def _patch(self, body: dict[str, Any], *, dry_run: bool) -> dict[str, Any]:
        t = self.target
        options: dict[str, Any] = {"field_manager": self.field_manager, "_content_type": SMP}
        if dry_run:
            options["dry_run"] = "All"
        patch = (
            self.apps.patch_namespaced_deployment
            if t.kind == "deployment"
            else self.apps.patch_namespaced_stateful_set
        )
        result = self._request(str(t), patch, t.name, t.namespace, body, **options)
        raw: dict[str, Any] = self.apps.api_client.sanitize_for_serialization(result)
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
                api_version="apps/v1",
                kind="Deployment" if t.kind == "deployment" else "StatefulSet",
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


def _retry_after(exc: ApiException) -> float | None:
    headers = exc.headers or {}
    try:
        value = float(headers.get("Retry-After", ""))
    except ValueError:
        return None
    return max(value, 0.0)


def _rollout(raw: dict[str, Any]) -> RolloutStatus:
    status = raw.get("status") or {}
    replicas = raw["spec"].get("replicas", 1)
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Progressing" and condition.get("status") == "False":
            return RolloutStatus(False, f"{condition.get('reason')}: {condition.get('message')}")
    observed = status.get("observedGeneration", 0) >= raw["metadata"].get("generation", 0)
    updated = status.get("updatedReplicas", status.get("updatedReplicas", 0)) or 0
    available = status.get("availableReplicas", status.get("readyReplicas", 0)) or 0
    done = observed and updated >= replicas and available >= replicas
    return RolloutStatus(done, None, f"{updated}/{replicas} updated, {available} available")


@contextmanager
def api_errors(what: str) -> Iterator[None]:
    """The client's exceptions as ActuatorErrors naming `what` (409 -> ConflictError, 403 ->
    ForbiddenError), and an unreachable or slow API server as one too."""
    try:
        yield
    except ApiException as exc:
        raise _error(exc, what) from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise ActuatorError(f"{what}: API server unreachable or slow ({exc})") from None


def _error(exc: ApiException, what: str) -> ActuatorError:
    if exc.status == 409:
        return ConflictError(f"{what}: changed by someone else (409)")
    if exc.status == 403:
        return ForbiddenError(f"{what}: forbidden by RBAC (403): {exc.reason}")
    if exc.status == 404:
        return ActuatorError(f"{what}: not found (404)")
    return ActuatorError(f"{what}: API error {exc.status} {exc.reason}")
