"""Which pods a window's metrics are read from while a canary holds the rest of a serving object
back (pure data the actuator's read reports), and the PromQL label matcher that narrows a query
to them."""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class MetricsScope:
    """The pods whose metrics stand for the setup being verified: a canary's, as the actuator
    read them off the serving object. No scope (None) means every pod counts.

    `pods` is an RE2 regular expression of their names, matched whole (as Prometheus matches a
    label regex); `groups` and `target` say which part of which object it is, for the log."""

    target: str  # the serving object, e.g. "k8s://llm/leaderworkerset/vllm"
    groups: tuple[int, ...]  # its group indices in the canary
    pods: str  # their pod names, leaders and workers

    def __str__(self) -> str:
        which = ", ".join(str(g) for g in self.groups)
        noun = "group" if len(self.groups) == 1 else "groups"
        return f"the canary ({noun} {which} of {self.target}: pods {self.pods})"


def literal(text: str) -> str:
    """`text` as an RE2 pattern that matches it alone (Kubernetes names: letters, digits, `-`
    and `.`; any other punctuation is escaped too)."""
    return "".join(c if c.isalnum() or c == "-" else "\\" + c for c in text)


def pod_matcher(scope: MetricsScope | None, label: str) -> str:
    """The matcher on `label` (a label name, as the settings check) that keeps the scope's pods'
    series (`pod=~"vllm-(1)(-[0-9]+)?"`), or "" without a scope. The pattern is written as a JSON
    string, which is also a valid PromQL string literal (the same escapes), so a backslash in
    it reaches the regex intact."""
    if scope is None:
        return ""
    return f"{label}=~{json.dumps(scope.pods)}"


def joined(*matchers: str) -> str:
    """Label matchers (selector bodies, without braces) joined into one (empty ones left out)."""
    return ", ".join(m for m in matchers if m)
