"""Which pods the observer reads: a held canary's alone (a LeaderWorkerSet partition), so that
verification judges the new setup by them and not by the groups still on the old one; every
pod otherwise."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from autotuner.actuators.base import LiveTarget
from autotuner.sources.scope import MetricsScope
from autotuner.telling.notifier import Notifier


@runtime_checkable
class Narrowing(Protocol):
    """An observer that can be told a held canary's pods (sources/observers.py): it reads
    them alone until told None, or answers with a note saying why it cannot."""

    def narrow(self, scope: MetricsScope | None) -> str | None: ...


@dataclass
class ObservedPods:
    """The scope the observer was last told (None: every pod)."""

    observer: object  # narrowed when it is a Narrowing; any other observer reads every pod
    notifier: Notifier
    scope: MetricsScope | None = None

    def follow(self, live: LiveTarget | None) -> str | None:
        """Point the observer at the live target's held canary, or at every pod once it is
        released; a target that could not be read keeps the last scope. Returns the
        observer's note when it cannot read the canary alone."""
        scope = live.scope if live is not None else self.scope
        if scope != self.scope:
            told = f"metrics read from {scope} alone" if scope else "metrics read from every pod"
            self.notifier.log(told)
        self.scope = scope
        return self.observer.narrow(scope) if isinstance(self.observer, Narrowing) else None
