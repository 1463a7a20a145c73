"""Telling the operator: one call writes the log line, posts the Kubernetes Event and moves the
counter of one notable thing (kopf's K8sPoster, a logging handler that posts Events, is the
model), so none of the three can be forgotten."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from autotuner.core.decide.step import Notice, NoticeKind
from autotuner.errors import ActuatorError
from autotuner.telling.counting import ErrorKind
from autotuner.telling.exporter import TunerMetrics
from autotuner.telling.logs import event


class EventSink(Protocol):
    def event(self, reason: str, message: str, *, warning: bool = False) -> None: ...


@dataclass(frozen=True)
class _Telling:
    level: int | None  # log level (None: the decision's own line says it)
    warning: bool  # a Warning Event (else Normal)


_TELLING = {
    NoticeKind.DRIFT: _Telling(logging.WARNING, True),
    NoticeKind.RECOMMENDED: _Telling(None, False),
    NoticeKind.BLOCKED: _Telling(None, False),
    NoticeKind.SWITCHED: _Telling(None, False),
    NoticeKind.REVERTED: _Telling(None, True),
    NoticeKind.PATCH_FAILED: _Telling(logging.ERROR, True),
    NoticeKind.CAPABILITY_REFUSED: _Telling(logging.WARNING, True),
    NoticeKind.QUALITY_REGRESSION: _Telling(logging.WARNING, True),
    NoticeKind.CANARY_SKIPPED: _Telling(logging.WARNING, False),
    NoticeKind.STATE_SET_ASIDE: _Telling(logging.ERROR, True),
}


class Notifier:
    def __init__(
        self, logger: logging.Logger, metrics: TunerMetrics, events: EventSink | None
    ) -> None:
        self.logger, self.metrics, self.events = logger, metrics, events

    def tell(self, notice: Notice, **fields: Any) -> None:
        """Log, post and count one notice (`fields` go into the log line)."""
        telling = _TELLING[notice.kind]
        if telling.level is not None:
            event(self.logger, notice.message, telling.level, **fields)
        self.metrics.count(notice.kind)
        self._post(notice.kind.value, notice.message, telling.warning)

    def log(self, message: str, level: int = logging.INFO, **fields: Any) -> None:
        """A line for the log alone (routine, or said elsewhere too)."""
        event(self.logger, message, level, **fields)

    def failed(self, kind: ErrorKind, message: str, level: int = logging.WARNING) -> None:
        """Count and log one error (no Event: errors are the metrics' and logs' business)."""
        self.metrics.count(kind)
        event(self.logger, message, level)

    def _post(self, reason: str, message: str, warning: bool) -> None:
        if self.events is None:
            return
        try:
            self.events.event(reason, message, warning=warning)
        except ActuatorError as exc:
            self.failed(ErrorKind.EVENT, f"event not posted: {exc}")
