"""The fleet's Kubernetes side: list-then-watch of SpecTuners (the official client's Watch,
resumed from the last resourceVersion, listed again after a 410 or a dropped stream) and the
status subresource's writer."""

from __future__ import annotations

import logging
import threading
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

from autotuner.actuators.kubeapi import api_errors
from autotuner.fleet.loops import Fleet, Key, Obj
from autotuner.fleet.spec import GROUP, PLURAL, VERSION

GONE = 410


class KubeStatusWriter:
    """PATCH (JSON merge) of a SpecTuner's status subresource, within a deadline."""

    def __init__(self, api: k8s.ApiClient, timeout_s: float) -> None:
        self.objects = k8s.CustomObjectsApi(api)
        self.timeout_s = timeout_s

    def write(self, key: Key, status: Obj) -> None:
        namespace, name = key
        with api_errors(f"status of spectuner {namespace}/{name}"):
            self.objects.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                {"status": status},
                _request_timeout=self.timeout_s,
            )


class SpecTunerWatch:
    """Keeps the fleet in step with the SpecTuners of one namespace (or all: None)."""

    def __init__(
        self,
        api: k8s.ApiClient,
        fleet: Fleet,
        namespace: str | None,
        *,
        stop: threading.Event,
        logger: logging.Logger,
        timeout_s: float = 10.0,
        watch_s: int = 300,
        backoff_s: float = 5.0,
    ) -> None:
        self.objects = k8s.CustomObjectsApi(api)
        self.fleet, self.namespace, self.stop = fleet, namespace, stop
        self.logger = logger
        self.timeout_s, self.watch_s, self.backoff_s = timeout_s, watch_s, backoff_s
        self.synced = threading.Event()  # the first list has been applied
        self.restarts = 0  # watches opened again after one ended or failed
        self.stream: k8s_watch.Watch | None = None

    def run(self) -> None:
        """List, then watch from the list's resourceVersion until stopped; list again when
        the server says the version is gone (410), wait and list again on any failure."""
        while not self.stop.is_set():
            try:
                version = self._list()
                self._watch(version)
            except Exception as exc:  # the API server down or slow: try again, later
                self.logger.warning("spectuner watch (%s): %s", self._scope, exc)
                self.stop.wait(self.backoff_s)
            self.restarts += 1

    def close(self) -> None:
        self.stop.set()
        if self.stream is not None:
            self.stream.stop()  # type: ignore[no-untyped-call]

    @property
    def _scope(self) -> str:
        return self.namespace or "all namespaces"

    def _list(self) -> str:
        listed: Obj = self._lister()(*self._where(), _request_timeout=self.timeout_s)
        self.fleet.resync(self.namespace, listed.get("items") or [])
        self.synced.set()
        return str(listed["metadata"]["resourceVersion"])

    def _watch(self, version: str) -> None:
        """Apply each event until the stream ends (timeout, a drop) or a 410; resumes from
        the last version seen while the stream keeps ending cleanly."""
        while not self.stop.is_set():
            self.stream = k8s_watch.Watch()  # type: ignore[no-untyped-call]
            try:
                for event in self.stream.stream(  # type: ignore[no-untyped-call]
                    self._lister(),
                    *self._where(),
                    resource_version=version,
                    timeout_seconds=self.watch_s,
                    _request_timeout=(self.timeout_s, self.watch_s + self.timeout_s),
                ):
                    if self.stop.is_set():
                        return
                    version = self._apply(event["type"], event["raw_object"]) or version
            except ApiException as exc:
                if exc.status != GONE:
                    raise
                self.logger.info("spectuner watch (%s): %s; listing again", self._scope, exc)
                return
            self.restarts += 1

    def _apply(self, kind: str, obj: Obj) -> str | None:
        meta = obj.get("metadata") or {}
        if kind == "DELETED":
            self.fleet.remove((meta.get("namespace", ""), meta.get("name", "")))
        elif kind in ("ADDED", "MODIFIED"):
            self.fleet.upsert(obj)
        version = meta.get("resourceVersion")
        return str(version) if version else None

    def _lister(self) -> Any:
        if self.namespace is None:
            return self.objects.list_cluster_custom_object
        return self.objects.list_namespaced_custom_object

    def _where(self) -> tuple[str, ...]:
        if self.namespace is None:
            return (GROUP, VERSION, PLURAL)
        return (GROUP, VERSION, self.namespace, PLURAL)
