"""Target URIs -> actuators: k8s://NAMESPACE/KIND/NAME[/CONTAINER] (actuators/kinds.py),
file://PATH[?name=DEPLOYMENT&container=C], exec://ARGS_FILE?restart=COMMAND[&env=VAR]."""

from __future__ import annotations

import shlex
from urllib.parse import parse_qs, urlsplit

from autotuner.actuators.base import Actuator
from autotuner.engines.dialect import Dialect
from autotuner.errors import InputError


def open_target(
    uri: str,
    *,
    kube_server: str | None = None,
    dialect: Dialect | None = None,
    allow_surge: bool = False,
    allow_low_precision_replay: bool = False,
    identity: str = "spec-autotuner",
    timeout_s: float = 10.0,
    deadline_s: float | None = None,
    write_managed: bool = False,
    canary: bool = False,
) -> Actuator:
    # Each kind imports its own dependencies: the Kubernetes client alone is ~20 MB of RSS.
    if uri.startswith("k8s://"):
        from autotuner.actuators.kubeapi import K8sTarget, api_client
        from autotuner.actuators.kubernetes import KubernetesActuator

        return KubernetesActuator(
            K8sTarget.parse(uri),
            api_client(kube_server, timeout_s=timeout_s),
            dialect=dialect,
            allow_surge=allow_surge,
            allow_low_precision_replay=allow_low_precision_replay,
            identity=identity,
            timeout_s=timeout_s,
            deadline_s=deadline_s,
            write_managed=write_managed,
            canary=canary,
        )
    parts = urlsplit(uri)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    path = parts.netloc + parts.path
    if parts.scheme == "file" and path:
        from autotuner.actuators.manifest import ManifestActuator

        return ManifestActuator(
            path,
            name=query.get("name"),
            container=query.get("container"),
            dialect=dialect,
            allow_low_precision_replay=allow_low_precision_replay,
        )
    if parts.scheme == "exec" and path:
        from autotuner.actuators.exec import ExecActuator

        if "restart" not in query:
            raise InputError(f"{uri}: exec targets need ?restart=COMMAND")
        return ExecActuator(
            path,
            shlex.split(query["restart"]),
            env_var=query.get("env"),
            timeout_s=float(query.get("timeout", timeout_s * 12)),
            dialect=dialect,
            allow_low_precision_replay=allow_low_precision_replay,
        )
    raise InputError(
        f"cannot read target {uri!r}: use k8s://NAMESPACE/KIND/NAME[/CONTAINER], "
        "file://PATH[?name=...&container=...] or exec://ARGS_FILE?restart=COMMAND"
    )
