"""A loopback Kubernetes API server implementing just what spec-autotuner relies on.

No kube-apiserver can run on our machines, so the official client talks real HTTP to this:
GET/PATCH of Deployments and StatefulSets and of the serving custom resources under their real
groups and versions (LeaderWorkerSet leaderworkerset.x-k8s.io/v1, DynamoGraphDeployment
nvidia.com/v1alpha1 and v1beta1, LLMInferenceService serving.kserve.io/v1alpha1 and v1alpha2,
InferenceService serving.kserve.io/v1beta1); strategic merge for the built-in kinds only (a custom
resource gets 415, as from a real server), JSON merge and JSON patch for all; optimistic
concurrency (a resourceVersion in the patch, or one a JSON patch writes, that is not current ->
409); dryRun=All; Pods (GET, and listed by label selector), ReplicaSets and
DynamoComponentDeployments for the owner chain; ConfigMaps; Events; Leases (GET/POST/PUT with
resourceVersion); 403 for verbs the test forbids; slow and failing responses (a 429 or 503 with a
Retry-After); another writer landing before a request (`interfere`); and a restart on the same
port.

It stores each object as put and serves it at any version its kind is served at: there is no
conversion between versions and no schema validation beyond what a patch needs.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import jsonpatch

Obj = dict[str, Any]

ROUTES = [
    re.compile(r"^/apis/([^/]+)/([^/]+)/namespaces/([^/]+)/([^/]+)(?:/([^/]+))?$"),
    re.compile(r"^/api/(v1)/namespaces/([^/]+)/([^/]+)(?:/([^/]+))?$"),
]
# GROUP/VERSION RESOURCE KIND, one a line; the core group is "v1" alone.
SERVED_TEXT = """
apps/v1 deployments Deployment
apps/v1 statefulsets StatefulSet
apps/v1 replicasets ReplicaSet
v1 pods Pod
v1 configmaps ConfigMap
v1 events Event
coordination.k8s.io/v1 leases Lease
leaderworkerset.x-k8s.io/v1 leaderworkersets LeaderWorkerSet
nvidia.com/v1alpha1 dynamographdeployments DynamoGraphDeployment
nvidia.com/v1beta1 dynamographdeployments DynamoGraphDeployment
nvidia.com/v1alpha1 dynamocomponentdeployments DynamoComponentDeployment
serving.kserve.io/v1alpha1 llminferenceservices LLMInferenceService
serving.kserve.io/v1alpha2 llminferenceservices LLMInferenceService
serving.kserve.io/v1beta1 inferenceservices InferenceService
"""
# (group, version, resource) -> the kind it holds; "" is the core group.
SERVED = {
    (*group_version.rpartition("/")[::2], resource): kind
    for group_version, resource, kind in (line.split() for line in SERVED_TEXT.split("\n") if line)
}
STRATEGIC = frozenset({"", "apps"})  # strategic merge exists for built-in kinds only


def strategic_merge(target: Any, patch: Any) -> Any:
    """Strategic merge as Kubernetes does it for the fields we patch: maps merge, `null`
    deletes, lists of objects with a `name` merge by name, other lists are replaced."""
    if isinstance(patch, dict) and isinstance(target, dict):
        return _merge_maps(target, patch, strategic_merge)
    if (
        isinstance(patch, list)
        and isinstance(target, list)
        and patch
        and all(isinstance(p, dict) and "name" in p for p in patch)
        and all(isinstance(t, dict) and "name" in t for t in target)
    ):
        by_name = {item["name"]: item for item in target}
        result = []
        for item in target:
            update = next((p for p in patch if p["name"] == item["name"]), None)
            result.append(strategic_merge(item, update) if update else item)
        result += [p for p in patch if p["name"] not in by_name]
        return result
    return copy.deepcopy(patch)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    return _merge_maps(target if isinstance(target, dict) else {}, patch, merge_patch)


def _merge_maps(target: Obj, patch: Obj, merge: Callable[[Any, Any], Any]) -> Obj:
    """The two patches agree on maps: key by key, `null` deletes, any other value is merged
    (by the patch's own rules) into what was there."""
    merged = dict(target)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge(merged.get(key), value)
    return merged


@dataclass(frozen=True)
class Request:
    method: str
    kind: str
    namespace: str
    name: str
    query: str


def _parts(path: str) -> tuple[str, str, str, str, str] | None:
    """(group, version, namespace, resource, name) of a namespaced REST path."""
    match = ROUTES[0].match(path)
    if match:
        group, version, namespace, resource, name = match.groups()
        return group, version, namespace, resource, name or ""
    match = ROUTES[1].match(path)
    if match:
        version, namespace, resource, name = match.groups()
        return "", version, namespace, resource, name or ""
    return None


def found_key(path: str) -> tuple[str, str, str]:
    parts = _parts(path)
    assert parts is not None
    return parts[0], parts[1], parts[3]


def _resolve(path: str) -> tuple[str, str, str, str] | None:
    """(group, namespace, resource, name) of a path this server serves, else None."""
    parts = _parts(path)
    if parts is None or (parts[0], parts[1], parts[3]) not in SERVED:
        return None
    group, _, namespace, resource, name = parts
    return group, namespace, resource, name


def _selected(obj: Obj, query: str) -> bool:
    """The object's labels match every `key=value` of the query's labelSelector."""
    selector = parse_qs(query).get("labelSelector", [""])[0]
    labels = obj.get("metadata", {}).get("labels") or {}
    pairs = [term.split("=", 1) for term in selector.split(",") if term]
    return all(labels.get(k) == v for k, v in pairs)


class FakeApiServer:
    """Holds objects by (kind, namespace, name); serves them on 127.0.0.1."""

    def __init__(self, port: int = 0) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.events: list[Obj] = []
        self.requests: list[tuple[str, str, str]] = []  # method, path, content type
        self.forbidden: set[tuple[str, str]] = set()  # (verb, resource) -> 403
        self.delay_s = 0.0
        self.fail_next: list[int] = []  # status codes to answer with, in order
        self.retry_after: str | None = None  # the Retry-After header of an injected failure
        # Called with (method, path and query) before each request is served: another writer's
        # change, or a request held in flight.
        self.interfere: Callable[[str, str], None] | None = None
        self.version = 1000
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # ----------------------------------------------------------------- test helpers

    def put(self, kind: str, obj: Obj) -> Obj:
        with self.lock:
            meta = obj.setdefault("metadata", {})
            meta.setdefault("generation", 1)
            meta.setdefault("annotations", {})
            return self._store((kind, meta.get("namespace", "default"), meta["name"]), obj)

    def _store(self, key: tuple[str, str, str], obj: Obj) -> Obj:
        """Keep `obj` under `key` with the next resourceVersion (the caller holds the lock)."""
        self.version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self.objects[key] = obj
        return obj

    def _list(self, request: Request) -> Obj:
        """The objects of a kind in a namespace that the label selector picks (lock held)."""
        items = [
            obj
            for (kind, namespace, _), obj in self.objects.items()
            if kind == request.kind
            and namespace == request.namespace
            and _selected(obj, request.query)
        ]
        return {"kind": f"{request.kind}List", "apiVersion": "v1", "metadata": {}, "items": items}

    def get(self, kind: str, namespace: str, name: str) -> Obj:
        with self.lock:
            return copy.deepcopy(self.objects[(kind, namespace, name)])

    def delete(self, kind: str, namespace: str, name: str) -> None:
        with self.lock:
            del self.objects[(kind, namespace, name)]

    def complete_rollout(self, kind: str, namespace: str, name: str) -> None:
        """The controller finished: every replica runs the latest template."""
        with self.lock:
            obj = self.objects[(kind, namespace, name)]
            replicas = obj["spec"].get("replicas", 1)
            obj["status"] = {
                "observedGeneration": obj["metadata"]["generation"],
                "replicas": replicas,
                "updatedReplicas": replicas,
                "availableReplicas": replicas,
                "readyReplicas": replicas,
                "conditions": [
                    {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}
                ],
            }

    def stall_rollout(self, kind: str, namespace: str, name: str, message: str) -> None:
        """The rollout cannot finish (e.g. Insufficient nvidia.com/gpu)."""
        with self.lock:
            obj = self.objects[(kind, namespace, name)]
            obj["status"] = {
                "observedGeneration": obj["metadata"]["generation"],
                "replicas": obj["spec"].get("replicas", 1),
                "updatedReplicas": 0,
                "availableReplicas": obj["spec"].get("replicas", 1) - 1,
                "conditions": [
                    {
                        "type": "Progressing",
                        "status": "False",
                        "reason": "ProgressDeadlineExceeded",
                        "message": message,
                    }
                ],
            }

    # ----------------------------------------------------------------- HTTP

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                return

            def _send(self, status: int, body: Obj) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                if status >= 400 and server.retry_after is not None:
                    self.send_header("Retry-After", server.retry_after)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _status(self, code: int, reason: str, message: str) -> None:
                self._send(
                    code,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "reason": reason,
                        "message": message,
                        "code": code,
                    },
                )

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length", 0))
                return json.loads(self.rfile.read(length) or b"null")

            def _route(self, method: str) -> None:
                path, _, query = self.path.partition("?")
                content_type = self.headers.get("Content-Type", "")
                server.requests.append((method, path, content_type))
                if server.interfere is not None:
                    server.interfere(method, self.path)
                if server.delay_s:
                    time.sleep(server.delay_s)
                if server.fail_next:
                    code = server.fail_next.pop(0)
                    self._status(code, "InternalError", "injected failure")
                    return
                found = _resolve(path)
                if found is None:
                    self._status(404, "NotFound", f"no route for {path}")
                    return
                group, namespace, resource, name = found
                verbs = {"GET": "get" if name else "list", "PATCH": "patch", "POST": "create"}
                verb = verbs.get(method, "update")
                if (verb, resource) in server.forbidden:
                    self._status(
                        403, "Forbidden", f'{resource} "{name}" is forbidden: cannot {verb}'
                    )
                    return
                if method == "PATCH" and "strategic" in content_type and group not in STRATEGIC:
                    self._status(
                        415, "UnsupportedMediaType", "strategic merge patch: built-ins only"
                    )
                    return
                request = Request(method, SERVED[found_key(path)], namespace, name, query)
                self._dispatch(request, content_type)

            def _dispatch(self, request: Request, content_type: str) -> None:
                if request.kind == "Event":
                    event = self._body()
                    server.events.append(event)
                    self._send(201, event)
                    return
                key = (request.kind, request.namespace, request.name)
                with server.lock:
                    if request.method == "POST":
                        body = self._body()
                        key = (request.kind, request.namespace, body["metadata"]["name"])
                        if key in server.objects:
                            self._status(409, "AlreadyExists", "already exists")
                            return
                        self._send(201, server._store(key, body))
                        return
                    if request.method == "GET" and not request.name:
                        self._send(200, server._list(request))
                        return
                    if key not in server.objects:
                        self._status(404, "NotFound", f'{request.kind} "{request.name}" not found')
                        return
                    current = server.objects[key]
                    if request.method == "GET":
                        self._send(200, current)
                        return
                    dry_run = "dryRun=All" in request.query
                    self._update(key, current, request.method, content_type, dry_run)

            def _update(
                self,
                key: tuple[str, str, str],
                current: Obj,
                method: str,
                content_type: str,
                dry_run: bool,
            ) -> None:
                """PUT or PATCH (JSON patch, merge patch or strategic merge) of a stored object,
                refused on a stale resourceVersion; a new spec is a new generation."""
                body = self._body()
                if method == "PUT":
                    updated = body
                    wanted = body.get("metadata", {}).get("resourceVersion")
                elif "json-patch" in content_type:
                    try:
                        updated = jsonpatch.apply_patch(current, body)
                    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                        self._status(422, "Invalid", f"JSON patch does not apply: {exc}")
                        return
                    # A patch that writes the resourceVersion it read is a precondition.
                    wanted = (updated.get("metadata") or {}).get("resourceVersion")
                elif "merge-patch" in content_type and "strategic" not in content_type:
                    updated = merge_patch(current, body)
                    wanted = (body.get("metadata") or {}).get("resourceVersion")
                else:
                    updated = strategic_merge(current, body)
                    wanted = (body.get("metadata") or {}).get("resourceVersion")
                if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
                    self._status(
                        409,
                        "Conflict",
                        "the object has been modified; please "
                        "apply your changes to the latest version and try again",
                    )
                    return
                updated = copy.deepcopy(updated)
                if updated.get("spec") != current.get("spec"):
                    updated["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
                if not dry_run:
                    server._store(key, updated)
                self._send(200, updated)

            def do_GET(self) -> None:
                self._route("GET")

            def do_PATCH(self) -> None:
                self._route("PATCH")

            def do_POST(self) -> None:
                self._route("POST")

            def do_PUT(self) -> None:
                self._route("PUT")

        return Handler


def fake_apiserver(port: int = 0) -> closing[FakeApiServer]:
    """A FakeApiServer on `port` (0: a free one), closed when the `with` block ends."""
    return closing(FakeApiServer(port))


def deployment(
    name: str = "vllm",
    namespace: str = "llm",
    *,
    args: list[str],
    container: str = "vllm",
    replicas: int = 1,
    max_surge: int | str = 0,
    command: list[str] | None = None,
    image: str = "vllm/vllm-openai:v0.33.0",
) -> Obj:
    """A vLLM Deployment like the one deploy/ ships (GPU request, maxSurge 0)."""
    main: Obj = {
        "name": container,
        "image": image,
        "args": list(args),
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    if command is not None:
        main["command"] = list(command)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "generation": 1},
        "spec": {
            "replicas": replicas,
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": max_surge, "maxUnavailable": 1},
            },
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [main, {"name": "autotuner", "image": "spec-autotuner:0.1.0"}]
                },
            },
        },
        "status": {
            "observedGeneration": 1,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "availableReplicas": replicas,
        },
    }
