"""Leader election on a coordination.k8s.io/v1 Lease: only the leader patches.

The official client's `leaderelection` loops forever and cannot release its Lease on
shutdown, so a restarted sidecar would wait a whole lease duration before anyone acts. This
is the same protocol as one non-blocking step (`try_acquire_or_renew`) the controller calls
every interval, plus `release()` on SIGTERM. One round (a read and a write) is bounded by
`timeout_s` as a whole: each request gets what is left of it.
"""

from __future__ import annotations

import datetime
import random
import time
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from autotuner.deadline import Deadline


def _now(clock: Callable[[], float]) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(clock(), datetime.timezone.utc)


class LeaseElector:
    def __init__(
        self,
        api: k8s.ApiClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration_s: float = 15.0,
        clock: Callable[[], float] = time.time,
        timeout_s: float = 5.0,
    ) -> None:
        self.coordination = k8s.CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.clock = clock
        self.timeout_s = timeout_s
        self.is_leader = False
        self.last_error: str | None = None
        self._round_deadline = Deadline(timeout_s)

    def _timeout(self) -> float:
        """What is left of this round's deadline, as a request's `_request_timeout`."""
        return self._round_deadline.cap(self.timeout_s)

    def renew_interval(self) -> float:
        """When to call again: a third of the lease, jittered so candidates do not collide."""
        return self.lease_duration_s / 3 * random.uniform(0.8, 1.2)

    def try_acquire_or_renew(self) -> bool:
        """One round of the protocol; True while this instance holds the Lease."""
        self._round_deadline = Deadline(self.timeout_s)
        try:
            self.is_leader = self._round()
            self.last_error = None
        except ApiException as exc:
            self.is_leader = False
            self.last_error = f"lease {self.namespace}/{self.name}: {exc.status} {exc.reason}"
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self.is_leader = False
            self.last_error = f"lease {self.namespace}/{self.name}: {exc}"
        return self.is_leader

    def _round(self) -> bool:
        now = _now(self.clock)
        try:
            lease: Any = self.coordination.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self._timeout()
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = k8s.V1Lease(
                metadata=k8s.V1ObjectMeta(name=self.name, namespace=self.namespace),
                spec=self._spec(now, now, transitions=0),
            )
            try:
                self.coordination.create_namespaced_lease(
                    self.namespace, body, _request_timeout=self._timeout()
                )
            except ApiException as conflict:
                if conflict.status == 409:
                    return False  # another candidate created it first
                raise
            return True
        spec = lease.spec
        holder = spec.holder_identity if spec else None
        renewed = spec.renew_time if spec else None
        duration = (spec.lease_duration_seconds if spec else None) or self.lease_duration_s
        expired = renewed is None or (now - renewed).total_seconds() > duration
        if holder and holder != self.identity and not expired:
            return False
        acquired = spec.acquire_time if holder == self.identity and spec else now
        transitions = (spec.lease_transitions or 0) if spec else 0
        if holder != self.identity:
            transitions += 1
        lease.spec = self._spec(acquired or now, now, transitions)
        try:
            self.coordination.replace_namespaced_lease(
                self.name, self.namespace, lease, _request_timeout=self._timeout()
            )
        except ApiException as conflict:
            if conflict.status == 409:
                return False  # someone renewed or took it between our read and write
            raise
        return True

    def _spec(
        self, acquired: datetime.datetime, renewed: datetime.datetime, transitions: int
    ) -> k8s.V1LeaseSpec:
        return k8s.V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=max(int(self.lease_duration_s), 1),
            acquire_time=acquired,
            renew_time=renewed,
            lease_transitions=transitions,
        )

    def release(self) -> None:
        """Give the Lease up (clean shutdown) so another instance takes over at once."""
        if not self.is_leader:
            return
        self._round_deadline = Deadline(self.timeout_s)
        try:
            lease: Any = self.coordination.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self._timeout()
            )
            if lease.spec and lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = None
                lease.spec.lease_duration_seconds = 1
                self.coordination.replace_namespaced_lease(
                    self.name, self.namespace, lease, _request_timeout=self._timeout()
                )
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            self.last_error = f"release of lease {self.namespace}/{self.name} failed: {exc}"
        finally:
            self.is_leader = False
