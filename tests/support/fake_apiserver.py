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
port. Watches (`?watch=true` on a list, in one namespace or all) stream ADDED, MODIFIED and
DELETED from a resourceVersion, as lines of JSON; an expired resourceVersion gets an ERROR
event with a 410 Status; `drop_watches` ends every open stream, as an API server restart or a
load balancer does. SpecTuners (spec-autotuner.io/v1alpha1) have a status subresource.

It stores each object as put and serves it at any version its kind is served at: there is no
conversion between versions and no schema validation beyond what a patch needs.
"""

from __future__ import annotations

import bisect
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
    re.compile(r"^/apis/([^/]+)/([^/]+)/namespaces/([^/]+)/([^/]+)(?:/([^/]+))?(/status)?$"),
    re.compile(r"^/api/(v1)/namespaces/([^/]+)/([^/]+)(?:/([^/]+))?$"),
]
ALL_NAMESPACES = re.compile(r"^/apis/([^/]+)/([^/]+)/([^/]+)$")  # a list or watch of every one
WATCH_POLL_S = 0.05  # how often an open watch looks for news (and for being dropped)
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
spec-autotuner.io/v1alpha1 spectuners SpecTuner
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
    namespace: str  # "" in a request for every namespace
    name: str
    query: str
    status: bool = False  # the status subresource


@dataclass(frozen=True)
class Change:
    """One stored change, as a watch tells it."""

    version: int
    type: str  # ADDED, MODIFIED, DELETED
    key: tuple[str, str, str]
    obj: Obj


def _parts(path: str) -> tuple[str, str, str, str, str] | None:
    """(group, version, namespace, resource, name) of a namespaced REST path."""
    match = ROUTES[0].match(path)
    if match:
        group, version, namespace, resource, name, _ = match.groups()
        return group, version, namespace, resource, name or ""
    match = ALL_NAMESPACES.match(path)
    if match:
        group, version, resource = match.groups()
        return group, version, "", resource, ""
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
        self.changed = threading.Condition(self.lock)  # a change stored, or watches dropped
        self.changes: list[Change] = []
        self.compacted_to = 0  # a watch from a resourceVersion below this gets 410 Gone
        self.drops = 0  # drop_watches() calls: an open stream ends when this moves
        self.open_watches = 0
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.httpd.daemon_threads = True
        # close() waits for the serving loop's next poll: a short one keeps each test that
        # starts a server from idling up to half a second at teardown.
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self.drop_watches()
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
        kind = "MODIFIED" if key in self.objects else "ADDED"
        self.objects[key] = obj
        self._changed(kind, key, obj)
        return obj

    def _changed(self, kind: str, key: tuple[str, str, str], obj: Obj) -> None:
        """Log a change for the watches and wake them (the caller holds the lock)."""
        self.changes.append(Change(self.version, kind, key, copy.deepcopy(obj)))
        self.changed.notify_all()

    def drop_watches(self) -> None:
        """End every open watch stream (clients must list or watch again)."""
        with self.lock:
            self.drops += 1
            self.changed.notify_all()

    def compact(self) -> None:
        """Forget the change log: a watch from an older resourceVersion gets 410 Gone."""
        with self.lock:
            self.compacted_to = self.version
            self.changes.clear()

    def _watched(self, request: Request, since: int) -> list[Change]:
        """Changes after `since` to objects of the request's kind and namespace (lock held)."""
        first = bisect.bisect_right(self.changes, since, key=lambda change: change.version)
        return [
            change
            for change in self.changes[first:]
            if change.version > since
            and change.key[0] == request.kind
            and request.namespace in ("", change.key[1])
        ]

    def _list(self, request: Request) -> Obj:
        """The objects of a kind in a namespace that the label selector picks (lock held)."""
        items = [
            obj
            for (kind, namespace, _), obj in self.objects.items()
            if kind == request.kind
            and request.namespace in ("", namespace)
            and _selected(obj, request.query)
        ]
        return {
            "kind": f"{request.kind}List",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(self.version)},
            "items": items,
        }

    def get(self, kind: str, namespace: str, name: str) -> Obj:
        with self.lock:
            return copy.deepcopy(self.objects[(kind, namespace, name)])

    def delete(self, kind: str, namespace: str, name: str) -> None:
        with self.lock:
            obj = self.objects.pop((kind, namespace, name))
            self.version += 1
            self._changed("DELETED", (kind, namespace, name), obj)

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
                status = path.endswith("/status") and bool(name)
                request = Request(method, SERVED[found_key(path)], namespace, name, query, status)
                if method == "GET" and not name and _watching(query):
                    self._watch(request)
                    return
                self._dispatch(request, content_type)

            def _watch(self, request: Request) -> None:
                """Stream the changes after the request's resourceVersion until its
                timeoutSeconds, a drop_watches() or the server closing."""
                options = parse_qs(request.query)
                since = int(options.get("resourceVersion", ["0"])[0] or 0)
                ends = time.monotonic() + float(options.get("timeoutSeconds", ["3600"])[0])
                # Chunked, as the API server streams a watch (a client reads each chunk as
                # it comes; without a length or chunks it would read to the end).
                self.protocol_version = "HTTP/1.1"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                with server.lock:
                    drops = server.drops
                    server.open_watches += 1
                try:
                    self._stream(request, since, drops, ends)
                except OSError:
                    return  # the client went away
                finally:
                    with server.lock:
                        server.open_watches -= 1

            def _stream(self, request: Request, since: int, drops: int, ends: float) -> None:
                try:
                    if since and since < server.compacted_to:
                        self._event("ERROR", _gone(since))
                        return
                    while time.monotonic() < ends:
                        with server.lock:
                            news = server._watched(request, since)
                            if not news and server.drops == drops:
                                server.changed.wait(WATCH_POLL_S)
                                news = server._watched(request, since)
                            if server.drops != drops:
                                return
                        for change in news:
                            self._event(change.type, change.obj)
                            since = change.version
                finally:
                    self.wfile.write(b"0\r\n\r\n")  # the last chunk: the stream ends

            def _event(self, kind: str, obj: Obj) -> None:
                line = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
                self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                self.wfile.flush()

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
                    if request.status:
                        self._patch_status(key, current)
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

            def _patch_status(self, key: tuple[str, str, str], current: Obj) -> None:
                """A merge patch of the status subresource: the spec and generation stay."""
                body = self._body()
                updated = copy.deepcopy(current)
                updated["status"] = merge_patch(current.get("status"), body.get("status") or {})
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


def _watching(query: str) -> bool:
    return parse_qs(query).get("watch", [""])[0].lower() in ("true", "1")


def _gone(since: int) -> Obj:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": "Expired",
        "message": f"too old resource version: {since}",
        "code": 410,
    }


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
