"""`autotuner controller`: one process tuning every SpecTuner it watches (docs/fleet.md)."""

from __future__ import annotations

import os
import socket
import threading
from typing import Annotated

import typer

from autotuner.cli.common import ConfigFile, SetOption, failing_on_bad_input, load_cli_settings
from autotuner.cli.stopping import Stopper, stop_grace_s


def controller(
    config: ConfigFile = None,
    overrides: SetOption = None,
    namespace: Annotated[
        list[str] | None,
        typer.Option(help="Watch SpecTuners in this namespace (repeat for several; none: all)."),
    ] = None,
    workers: Annotated[int, typer.Option(min=1, help="Loops stepped at once.")] = 4,
    leader_elect: Annotated[
        bool,
        typer.Option(help="Hold a Lease (in POD_NAMESPACE) before stepping: replicas stand by."),
    ] = False,
    port: Annotated[int | None, typer.Option(help="Exporter port.")] = None,
    shards: Annotated[
        int,
        typer.Option(
            min=1, help="Replicas the SpecTuners are split over (by a hash of namespace/name)."
        ),
    ] = 1,
    shard: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="This replica's shard (0..shards-1); default the StatefulSet ordinal of "
            "HOSTNAME (-N).",
        ),
    ] = None,
) -> None:
    """Watch SpecTuners and run one loop per object in this process; the settings file is
    every loop's base, each SpecTuner's spec is laid over it."""
    from autotuner.actuators.kubeapi import api_client
    from autotuner.fleet.runner import fleet_process
    from autotuner.fleet.shards import shard_for
    from autotuner.telling.logs import configure, event
    from autotuner.telling.server import ExporterServer

    stopper = Stopper()
    stopper.install()
    with failing_on_bad_input():
        settings, _ = load_cli_settings(config, overrides, **{"exporter.port": port})
        logger = configure(settings.log.format, settings.log.level)
        target = settings.target
        api = api_client(target.kube_server, timeout_s=target.request_timeout_s)
        identity = target.identity or os.environ.get("POD_NAME") or socket.gethostname()
        held = shard_for(shards, shard, os.environ.get("HOSTNAME") or socket.gethostname())
        process = fleet_process(
            api,
            settings,
            config,
            namespaces=list(namespace or []),
            identity=identity,
            logger=logger,
            workers=workers,
            lease_namespace=os.environ.get("POD_NAMESPACE", "default") if leader_elect else None,
            shard=held,
        )
    server = ExporterServer(
        process.metrics(),
        host=settings.exporter.host,
        port=settings.exporter.port,
        alive=process.alive,
        ready=process.ready,
    )
    event(
        logger,
        "started",
        namespaces=namespace or "all",
        workers=workers,
        shard=held.label,
        port=server.port,
    )
    process.start()
    stopper.stops(process.stop_event)
    waiter = threading.Thread(target=process.stop_event.wait, daemon=True)
    waiter.start()
    grace = stop_grace_s(settings)
    stopper.wait(waiter, grace, logger)
    process.stop(grace)
    server.close()
