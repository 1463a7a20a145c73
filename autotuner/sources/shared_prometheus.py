"""One Prometheus source for many targets (the fleet): each query is asked once for all of them,
with their scopes merged, and its answer split back per target.

A target's view (`SharedView`) writes its queries as `PrometheusSource` does, with a marker
where its own label matchers go. The first target to ask a query in a time bucket (one scrape
interval: the server's data does not change within one) asks it for every target seen lately
whose selector has the same label names: `sum(increase(m{namespace="a"}[60s]))` becomes
`sum by (namespace) (increase(m{namespace=~"a|b|c"}[60s]))`, and each target takes its own
series from the answer; the others in that bucket are answered from it. A window is then read
as of the start of the bucket, at most one scrape interval before its step.

A batched query is bounded as the asking target's own would be: its query timeout and what is
left of that target's window deadline; a failure is every waiting target's failure.

Only selectors made of `label="value"` matchers are merged (a value a Kubernetes name can be);
anything else (a regex, a negation), and any target while a canary narrows its pods, queries
on its own as `PrometheusSource` does."""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotuner.deadline import Deadline
from autotuner.errors import SourceError
from autotuner.sources.prometheus_api import PrometheusSource, Vector, flat
from autotuner.sources.scope import literal

# Stands for a target's own matchers inside a query that many targets share.
MARK = "__fleet_scope__"
Labels = tuple[tuple[str, str], ...]  # a selector's equality matchers, sorted by name
EQUALITY = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"([A-Za-z0-9_.:/-]*)"\s*')
MEMBER_TTL_S = 600.0  # a target that asked nothing for this long is left out of the batches


def equalities(selector: str) -> Labels | None:
    """`namespace="llm", pod="x"` as sorted (name, value) pairs; None when the selector has any
    other kind of matcher (it cannot be merged with others by label value)."""
    text = selector.strip().strip("{}").strip()
    if not text:
        return None
    pairs = []
    for part in text.split(","):
        found = EQUALITY.fullmatch(part)
        if found is None:
            return None
        pairs.append((found.group(1), found.group(2)))
    names = [name for name, _ in pairs]
    return tuple(sorted(pairs)) if len(set(names)) == len(names) else None


def merged(members: Sequence[Labels]) -> str:
    """One matcher per label name that every member's value passes (`pod=~"a|b"`)."""
    names = [name for name, _ in members[0]]
    parts = []
    for index, name in enumerate(names):
        values = sorted({m[index][1] for m in members})
        if len(values) == 1:
            parts.append(f"{name}={json.dumps(values[0])}")
        else:
            pattern = "|".join(literal(v) for v in values)
            parts.append(f"{name}=~{json.dumps(pattern)}")
    return ", ".join(parts)


def grouped(query: str, names: list[str]) -> str:
    """`query` kept apart by `names`: a plain `sum(...)` or `sum by (x) (...)` gains them."""
    by = ", ".join(names)
    if query.startswith("sum by ("):
        return f"sum by ({by}, " + query.removeprefix("sum by (")
    if query.startswith("sum("):
        return f"sum by ({by}) (" + query.removeprefix("sum(")
    return query


def owner(series: dict[str, Any], names: list[str]) -> Labels:
    metric = series.get("metric") or {}
    return tuple((name, str(metric.get(name, ""))) for name in names)


Key = tuple[str, str, tuple[float, ...], tuple[str, ...]]  # kind, query, times, label names


@dataclass
class SharedPrometheus:
    """The fleet's one source per Prometheus server: batched queries, their answers split per
    target and kept for the bucket they were asked in."""

    base: PrometheusSource  # the connection, its deadlines and limits
    bucket_s: float
    clock: Callable[[], float] = time.time
    member_ttl_s: float = MEMBER_TTL_S
    queries: int = 0  # asked of the server (the benchmark reports them per step)
    members: dict[Labels, float] = field(default_factory=dict)  # -> when last seen
    answers: dict[Key, dict[Labels, Vector] | SourceError] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    asking: dict[Key, threading.Lock] = field(default_factory=dict)

    def now(self) -> float:
        """The start of the current bucket: every target stepping in it reads the same time."""
        return math.floor(self.clock() / self.bucket_s) * self.bucket_s

    def view(self, selector: str) -> SharedView:
        return SharedView(self, selector)

    def answer(
        self,
        member: Labels,
        kind: str,
        query: str,
        times: tuple[float, ...],
        window: Deadline | None = None,
    ) -> Vector:
        """`member`'s series of `query` (a batched answer, asked now or earlier in the bucket);
        a query asked now is bounded by the asking target's `window` deadline too."""
        names = tuple(name for name, _ in member)
        key: Key = (kind, query, times, names)
        with self.lock:
            self.members[member] = self.clock()
            asking = self.asking.setdefault(key, threading.Lock())
        with asking:  # one target asks; the others in the bucket wait for its answer
            with self.lock:
                found = self.answers.get(key)
            if found is None or (isinstance(found, dict) and member not in found):
                found = self._ask(kind, query, times, names, window)
        if isinstance(found, SourceError):
            raise found
        return found.get(member, [])

    def _ask(
        self,
        kind: str,
        query: str,
        times: tuple[float, ...],
        names: tuple[str, ...],
        window: Deadline | None,
    ) -> dict[Labels, Vector] | SourceError:
        together = self._members(names)
        text = query.replace(MARK, merged(together))
        try:
            if kind == "range":
                result = self.base.range_series(text, *times, window=window)
            else:
                result = self.base.instant(grouped(text, list(names)), times[0], window=window)
            split: dict[Labels, Vector] | SourceError = self._split(result, together, names)
        except SourceError as exc:  # the same failure for every target in the batch
            split = exc
        with self.lock:
            self.queries += 1
            self.answers[(kind, query, times, names)] = split
        return split

    @staticmethod
    def _split(
        result: Vector, together: list[Labels], names: tuple[str, ...]
    ) -> dict[Labels, Vector]:
        """Each member's series; a series no member owns (a combination of values the
        per-label regexes let through) is dropped."""
        split: dict[Labels, Vector] = {m: [] for m in together}
        for series in result:
            mine = split.get(owner(series, list(names)))
            if mine is not None:
                mine.append(series)
        return split

    def _members(self, names: tuple[str, ...]) -> list[Labels]:
        """The targets seen lately whose selectors have these label names; old answers go."""
        now = self.clock()
        with self.lock:
            for gone in [m for m, at in self.members.items() if now - at > self.member_ttl_s]:
                del self.members[gone]
            oldest = self.now() - self.bucket_s
            for stale in [k for k in self.answers if k[2] and k[2][-1] < oldest]:
                del self.answers[stale]
                self.asking.pop(stale, None)
            return sorted(m for m in self.members if tuple(n for n, _ in m) == names)


class SharedView(PrometheusSource):
    """One target's `PrometheusSource` over the fleet's shared one: its queries batched with
    every other target's while its selector allows (and no canary narrows it)."""

    def __init__(self, shared: SharedPrometheus, selector: str) -> None:
        base = shared.base
        super().__init__(
            base.url,
            selector,
            client=base.client,
            timeout_s=base.timeout_s,
            deadline_s=base.deadline_s,
            scrape_interval_s=base.scrape_interval_s,
            max_bytes=base.max_bytes,
            clock=self._now,
            engine=base.engine,
            pod_label=base.pod_label,
        )
        self.shared = shared
        self.labels = equalities(self.selector)

    @property
    def member(self) -> Labels | None:
        return self.labels if self.scope is None else None

    def _now(self) -> float:
        return self.shared.now() if self.member is not None else self.shared.clock()

    @property
    def matchers(self) -> str:
        return MARK if self.member is not None else super().matchers

    def instant(self, query: str, at: float, *, window: Deadline | None = None) -> Vector:
        member = self.member
        if member is None:
            return super().instant(query, at, window=window)
        return self.shared.answer(member, "instant", query, (at,), window or self.window)

    def scalar(self, query: str, at: float) -> float | None:
        member = self.member
        if member is None:
            return super().scalar(query, at)
        result = self.shared.answer(member, "instant", f"sum({query})", (at,), self.window)
        return float(result[0]["value"][1]) if result else None

    def range_series(
        self, query: str, start: float, end: float, *, window: Deadline | None = None
    ) -> Vector:
        member = self.member
        if member is None:
            return super().range_series(query, start, end, window=window)
        return self.shared.answer(member, "range", query, (start, end), window or self.window)

    def samples(self, query: str, start: float, end: float) -> list[float]:
        return flat(self.range_series(query, start, end))

    def close(self) -> None:
        """The connection is the shared source's."""


@dataclass
class SharedSources:
    """The fleet's shared sources, one per server and the way it is read (engine, scrape
    interval, deadline, pod label): targets that differ in any of these are not batched."""

    clock: Callable[[], float] = time.time
    sources: dict[tuple[str, str, float, float, str], SharedPrometheus] = field(
        default_factory=dict
    )
    lock: threading.Lock = field(default_factory=threading.Lock)

    def view(
        self,
        url: str,
        selector: str,
        *,
        engine: str,
        scrape_interval_s: float,
        timeout_s: float,
        pod_label: str,
    ) -> SharedView:
        key = (url.rstrip("/"), engine, scrape_interval_s, timeout_s, pod_label)
        with self.lock:
            shared = self.sources.get(key)
            if shared is None:
                base = PrometheusSource(
                    url,
                    timeout_s=timeout_s,
                    scrape_interval_s=scrape_interval_s,
                    engine=engine,
                    pod_label=pod_label,
                )
                shared = SharedPrometheus(base, bucket_s=scrape_interval_s, clock=self.clock)
                self.sources[key] = shared
        return shared.view(selector)

    @property
    def queries(self) -> int:
        with self.lock:
            return sum(s.queries for s in self.sources.values())

    def close(self) -> None:
        with self.lock:
            for shared in self.sources.values():
                shared.base.close()
