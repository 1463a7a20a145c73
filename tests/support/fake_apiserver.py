"""A loopback Kubernetes API server implementing just what spec-autotuner relies on.

No kube-apiserver can run on our machines, so the official client talks real HTTP to this:
GET/PATCH Deployments and StatefulSets (strategic merge, JSON merge and JSON patch), optimistic
concurrency (a resourceVersion in the patch that is not current -> 409), dryRun=All, Pods and
ReplicaSets for the owner chain, Events, Leases (GET/POST/PUT with resourceVersion), 403 for
verbs the test forbids, slow and failing responses (a 429 or 503 with a Retry-After), another
writer landing before a request (`interfere`), and a restart on the same port.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections.abc import Callable
from contextlib import closing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jsonpatch

Obj = dict[str, Any]

ROUTES = [
    (
        re.compile(
            r"^/apis/apps/v1/namespaces/([^/]+)/(deployments|statefulsets|replicasets)"
            r"/([^/]+)$"
        ),
        "apps",
    ),
    (re.compile(r"^/api/v1/namespaces/([^/]+)/(pods)/([^/]+)$"), "core"),
    (re.compile(r"^/api/v1/namespaces/([^/]+)/(events)()$"), "events"),
    (
        re.compile(r"^/apis/coordination.k8s.io/v1/namespaces/([^/]+)/(leases)(?:/([^/]+))?$"),
        "leases",
    ),
]


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

    def get(self, kind: str, namespace: str, name: str) -> Obj:
        with self.lock:
            return copy.deepcopy(self.objects[(kind, namespace, name)])

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
                for pattern, group in ROUTES:
                    match = pattern.match(path)
                    if match:
                        namespace, resource, name = match.groups()
                        name = name or None
                        verb = {"GET": "get", "PATCH": "patch", "POST": "create", "PUT": "update"}[
                            method
                        ]
                        if (verb, resource) in server.forbidden:
                            self._status(
                                403, "Forbidden", f'{resource} "{name}" is forbidden: cannot {verb}'
                            )
                            return
                        self._dispatch(
                            method,
                            group,
                            namespace,
                            resource,
                            name,
                            "dryRun=All" in query,
                            content_type,
                        )
                        return
                self._status(404, "NotFound", f"no route for {path}")

            def _dispatch(
                self,
                method: str,
                group: str,
                namespace: str,
                resource: str,
                name: str | None,
                dry_run: bool,
                content_type: str,
            ) -> None:
                kind = {
                    "deployments": "Deployment",
                    "statefulsets": "StatefulSet",
                    "replicasets": "ReplicaSet",
                    "pods": "Pod",
                    "leases": "Lease",
                    "events": "Event",
                }[resource]
                if group == "events":
                    event = self._body()
                    server.events.append(event)
                    self._send(201, event)
                    return
                key = (kind, namespace, name or "")
                with server.lock:
                    if method == "POST":
                        body = self._body()
                        key = (kind, namespace, body["metadata"]["name"])
                        if key in server.objects:
                            self._status(409, "AlreadyExists", "already exists")
                            return
                        self._send(201, server._store(key, body))
                        return
                    if key not in server.objects:
                        self._status(404, "NotFound", f'{resource} "{name}" not found')
                        return
                    current = server.objects[key]
                    if method == "GET":
                        self._send(200, current)
                        return
                    self._update(key, current, method, content_type, dry_run)

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
                    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException):
                        self._status(
                            409 if any(op.get("op") == "test" for op in body) else 422,
                            "Conflict",
                            "JSON patch test failed",
                        )
                        return
                    wanted = None
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
