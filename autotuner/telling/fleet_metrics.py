"""The fleet's /metrics: every SpecTuner loop's own metrics, each sample labelled
`tuner="NAMESPACE/NAME"`, under the same names as the sidecar's (one dashboard and one set of
alerts for both: a sidecar's series simply lack the label)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from autotuner.telling.exporter import TunerMetrics
from autotuner.telling.snapshot import Snapshot

TUNER_LABEL = "tuner"


class TunerLabelled:
    """A collector over the loops' registries, merged by family, labelled by tuner."""

    def __init__(self, tuners: Callable[[], Mapping[str, TunerMetrics]]) -> None:
        self.tuners = tuners

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for tuner, metrics in sorted(self.tuners().items()):
            for family in metrics.registry.collect():
                merged = families.get(family.name)
                if merged is None:
                    merged = Metric(family.name, family.documentation, family.type, family.unit)
                    families[family.name] = merged
                merged.samples.extend(
                    s._replace(labels={**s.labels, TUNER_LABEL: tuner}) for s in family.samples
                )
        yield from families.values()


class FleetMetrics:
    """What the fleet's exporter serves: the loops' metrics in one exposition."""

    def __init__(self, tuners: Callable[[], Mapping[str, TunerMetrics]]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(TunerLabelled(tuners))

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def current(self) -> Snapshot:
        """No single decision: each SpecTuner's status holds its own."""
        return Snapshot()
