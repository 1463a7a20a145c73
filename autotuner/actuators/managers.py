"""Who else writes a serving object (pure): the controller that owns it, or the Helm release or
GitOps tool that keeps it as its source says. A direct patch of such an object is reverted (an
owner's reconcile, the next `helm upgrade`, the next sync): the tuner patches the owner instead,
or advises where the change belongs."""

from __future__ import annotations

from typing import Any

from autotuner.actuators.kinds import BY_KIND, Kind

Obj = dict[str, Any]
# managedFields managers of the tools that re-apply an object from its source.
TOOLS = {
    "helm": "Helm",
    "argocd-controller": "Argo CD",
    "argocd-application-controller": "Argo CD",
    "kustomize-controller": "Flux",
    "helm-controller": "Flux (HelmRelease)",
}
# Labels and annotations those tools put on what they apply.
MARKS = {
    "meta.helm.sh/release-name": "Helm",
    "argocd.argoproj.io/tracking-id": "Argo CD",
    "kustomize.toolkit.fluxcd.io/name": "Flux",
    "helm.toolkit.fluxcd.io/name": "Flux (HelmRelease)",
}


def controller_owner(meta: Obj, namespace: str) -> str | None:
    """The controller that owns the object and what to target instead, or None."""
    for owner in meta.get("ownerReferences") or []:
        if not owner.get("controller"):
            continue
        kind, name = owner.get("kind", "?"), owner.get("name", "?")
        known = BY_KIND.get(kind)
        instead = (
            f"target k8s://{namespace}/{_uri_kind(known, owner)}/{name}"
            if known
            else "change its args where that controller takes them"
        )
        return f"it is controlled by {kind} {name}, which would undo a patch here: {instead}"
    return None


def _uri_kind(known: Kind, owner: Obj) -> str:
    """The owner's kind as a target URI names it: with its API version where that is not the
    kind's default (a Dynamo v1alpha1 graph), so the URI opens the owner as it is served."""
    version = str(owner.get("apiVersion", "")).rpartition("/")[2]
    return known.word if version in ("", known.version) else f"{known.word}.{version}"


def source_manager(meta: Obj) -> str | None:
    """The Helm release or GitOps tool that re-applies the object, with the evidence."""
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    for key, tool in MARKS.items():
        value = annotations.get(key) or labels.get(key)
        if value:
            return f"{tool} ({key}={value})"
    managed_by = labels.get("app.kubernetes.io/managed-by")
    if managed_by and managed_by.lower() in ("helm", "argocd", "flux", "kustomize-controller"):
        return f"{managed_by} (app.kubernetes.io/managed-by)"
    for entry in meta.get("managedFields") or []:
        found = TOOLS.get(str(entry.get("manager", "")).lower())
        if found:
            return f"{found} (managedFields manager {entry['manager']})"
    return None
