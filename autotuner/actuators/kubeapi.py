"""The Kubernetes API as the actuators use it: the client, target URIs, requests within one
deadline, errors, and finding the object that owns this pod.

Every request carries what is left of one deadline per call as its `_request_timeout`; a 429 or
5xx is retried within that deadline (after the server's Retry-After when it gives one).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from autotuner.actuators.kinds import BY_KIND, KINDS, kind_named
from autotuner.deadline import Deadline, backoff_s
from autotuner.errors import ActuatorError, ConflictError, ForbiddenError, InputError

TRANSIENT = frozenset({429, 500, 502, 503, 504})  # the server says: try again
URI_FORMS = (
    "k8s://NAMESPACE/KIND/NAME[/CONTAINER], KIND one of "
    + ", ".join(KINDS)
    + " (optionally KIND.VERSION); for a DynamoGraphDeployment the last part names the component"
)
# Kinds between a pod and the object that holds its engine args (not targets themselves).
INTERMEDIATE = {
    ("apps", "ReplicaSet"): "replicasets",
    ("nvidia.com", "DynamoComponentDeployment"): "dynamocomponentdeployments",
}
CONTAINER_PART = frozenset({"deployment", "statefulset", "leaderworkerset"})


class NotFoundError(ActuatorError):
    """The object is not there (HTTP 404): deleted, or never created."""


@dataclass(frozen=True)
class K8sTarget:
    """k8s://NAMESPACE/KIND/NAME[/PART]: PART is the engine's container, or the
    DynamoGraphDeployment's component."""

    namespace: str
    kind: str
    name: str
    container: str | None = None

    @classmethod
    def parse(cls, uri: str) -> K8sTarget:
        match = re.fullmatch(
            r"k8s://([a-z0-9-]+)/([a-z0-9.]+)/([a-z0-9.-]+)(?:/([A-Za-z0-9_.-]+))?", uri
        )
        if match is None:
            raise InputError(f"cannot read target {uri!r}: use {URI_FORMS}")
        namespace, kind, name, container = match.groups()
        kind_named(kind)  # an unknown kind is refused here, with the known ones
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


def request(
    what: str,
    deadline: Deadline,
    timeout_s: float,
    call: Callable[..., Any],
    *args: Any,
    **options: Any,
) -> Any:
    """One API request within `deadline`; a 429 or 5xx is tried again while the deadline
    leaves room for the wait (the server's Retry-After, else a jittered backoff)."""
    for attempt in range(64):
        try:
            with api_errors(what):
                try:
                    return call(*args, _request_timeout=deadline.cap(timeout_s), **options)
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


def _retry_after(exc: ApiException) -> float | None:
    headers = exc.headers or {}
    try:
        value = float(headers.get("Retry-After", ""))
    except ValueError:
        return None
    return max(value, 0.0)


@contextmanager
def api_errors(what: str) -> Iterator[None]:
    """The client's exceptions as ActuatorErrors naming `what` (409 -> ConflictError, 403 ->
    ForbiddenError), and an unreachable or slow API server as one too."""
    try:
        yield
    except ApiException as exc:
        raise api_error(exc, what) from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise ActuatorError(f"{what}: API server unreachable or slow ({exc})") from None


def api_error(exc: ApiException, what: str) -> ActuatorError:
    if exc.status == 409:
        return ConflictError(f"{what}: changed by someone else (409)")
    if exc.status == 403:
        return ForbiddenError(f"{what}: forbidden by RBAC (403): {exc.reason}")
    if exc.status == 404:
        return NotFoundError(f"{what}: not found (404)")
    return ActuatorError(f"{what}: API error {exc.status} {exc.reason}")


def discover_target(
    api: k8s.ApiClient, namespace: str, pod: str, container: str | None = None
) -> K8sTarget:
    """Walk the pod's controllers up to the top-most object that holds the engine args (Pod ->
    ReplicaSet -> Deployment [-> LLMInferenceService | DynamoComponentDeployment ->
    DynamoGraphDeployment], Pod -> StatefulSet [-> LeaderWorkerSet])."""
    core, objects = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    found: K8sTarget | None = None
    with api_errors(f"pod {namespace}/{pod}"):
        raw = api.sanitize_for_serialization(core.read_namespaced_pod(pod, namespace))  # type: ignore[no-untyped-call]
        for _ in range(8):
            owner = _controller(raw.get("metadata") or {})
            if owner is None:
                break
            group, _, version = str(owner.get("apiVersion")).rpartition("/")
            kind = BY_KIND.get(owner["kind"])
            plural = kind.plural if kind else INTERMEDIATE.get((group, owner["kind"]))
            if plural is None:
                break
            raw = objects.get_namespaced_custom_object(
                group, version, namespace, plural, owner["name"]
            )
            if kind is not None:
                part = container if kind.word in CONTAINER_PART else None
                word = kind.word if version == kind.version else f"{kind.word}.{version}"
                found = K8sTarget(namespace, word, owner["name"], part)
    if found is None:
        raise ActuatorError(f"pod {namespace}/{pod} is not owned by an object the tuner patches")
    return found


def _controller(meta: dict[str, Any]) -> dict[str, Any] | None:
    owners = meta.get("ownerReferences") or []
    controlling = [o for o in owners if o.get("controller")]
    chosen: dict[str, Any] | None = (controlling or owners or [None])[0]
    return chosen
