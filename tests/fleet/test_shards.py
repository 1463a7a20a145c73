"""Sharding SpecTuners across controller replicas: a stable hash of namespace/name picks the
replica; two replicas against the loopback API server split the objects with no overlap and
none left out; a new SpecTuner is picked up by exactly one; one Lease per shard."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from autotuner.actuators.kubeapi import api_client
from autotuner.errors import InputError
from autotuner.fleet.runner import FleetProcess, fleet_process
from autotuner.fleet.shards import Shard, ordinal, shard_for, shard_of
from autotuner.settings import load_settings
from tests.support.fake_apiserver import FakeApiServer, deployment, fake_apiserver
from tests.support.fleet import ARGS, RunningFleet, running_fleet, spectuner, wait_for

NAMES = [f"tune-{i}" for i in range(8)]


def test_the_shard_of_an_object_is_the_same_in_another_process() -> None:
    """Python's hash() is salted per process; two replicas must agree without talking."""
    keys = [("llm", name) for name in NAMES]
    code = f"from autotuner.fleet.shards import shard_of;print([shard_of(k, 3) for k in {keys!r}])"
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert other.stdout.strip() == str([shard_of(k, 3) for k in keys])


def test_every_object_is_in_exactly_one_shard_and_each_shard_gets_some() -> None:
    keys = [("llm", name) for name in NAMES]
    shards = [Shard(i, 2) for i in range(2)]
    holders = [[s.index for s in shards if s.holds(k)] for k in keys]
    assert all(len(h) == 1 for h in holders)
    assert {h[0] for h in holders} == {0, 1}
    assert all(Shard().holds(k) for k in keys)  # unsharded: every object


def test_the_shard_comes_from_the_flag_or_the_statefulset_ordinal() -> None:
    assert shard_for(2, 1, "anything") == Shard(1, 2)
    assert shard_for(3, None, "spec-autotuner-fleet-2") == Shard(2, 3)
    assert shard_for(1, None, "no-ordinal-here") == Shard(0, 1)
    assert ordinal("spec-autotuner-fleet-12") == 12
    assert ordinal("laptop") is None
    with pytest.raises(InputError, match="--shard"):
        shard_for(2, None, "laptop")
    with pytest.raises(InputError, match=r"not one of 0\.\.1"):
        shard_for(2, None, "spec-autotuner-fleet-2")  # more pods than shards
    with pytest.raises(InputError, match="at least one"):
        Shard(0, 0)


def test_lease_names_are_one_per_shard() -> None:
    base = "spec-autotuner-controller"
    assert Shard().lease_name(base) == base
    assert {Shard(i, 2).lease_name(base) for i in range(2)} == {
        f"{base}-shard-0",
        f"{base}-shard-1",
    }


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with fake_apiserver() as fake:
        for name in NAMES:
            fake.put("Deployment", deployment(name.removeprefix("tune-"), args=ARGS))
            fake.put("SpecTuner", spectuner(name, name.removeprefix("tune-")))
        yield fake


def held(run: RunningFleet) -> set[tuple[str, str]]:
    with run.fleet.lock:
        return set(run.fleet.loops)


def test_two_replicas_split_the_spectuners_and_a_new_one_goes_to_one(
    server: FakeApiServer,
) -> None:
    every = {("llm", name) for name in NAMES}
    with ExitStack() as stack:
        runs = [stack.enter_context(running_fleet(server, shard=Shard(i, 2))) for i in range(2)]
        first, second = (held(run) for run in runs)
        assert first
        assert second
        assert not first & second
        assert first | second == every
        server.put("Deployment", deployment("new", args=ARGS))
        server.put("SpecTuner", spectuner("tune-new", "new"))
        key = ("llm", "tune-new")
        wait_for(lambda: any(key in held(run) for run in runs), "the new SpecTuner's loop")
        owner = shard_of(key, 2)
        for run in runs:
            run.steps(1)
        assert [key in held(run) for run in runs] == [i == owner for i in range(2)]
        status = server.get("SpecTuner", "llm", "tune-new")["status"]
        assert status["shard"] == f"{owner}/2"
        assert all(
            server.get("SpecTuner", "llm", n)["status"]["shard"] == f"{shard_of(('llm', n), 2)}/2"
            for n in NAMES
        )


def controller(server: FakeApiServer, config: Path, shard: Shard, identity: str) -> FleetProcess:
    settings, _ = load_settings(config)
    return fleet_process(
        api_client(server.url, timeout_s=5),
        settings,
        config,
        namespaces=["llm"],
        identity=identity,
        logger=logging.getLogger(f"test.fleet.{identity}"),
        workers=1,
        lease_namespace="llm",
        shard=shard,
    )


def test_each_shard_holds_its_own_lease_and_a_standby_of_a_shard_does_not_step(
    server: FakeApiServer, tmp_path: Path
) -> None:
    config = tmp_path / "autotuner.yaml"
    config.write_text("source: {urls: ['http://127.0.0.1:9/metrics']}\nloop: {interval_s: 1}\n")
    processes = {
        "zero": controller(server, config, Shard(0, 2), "zero"),
        "one": controller(server, config, Shard(1, 2), "one"),
        "standby": controller(server, config, Shard(1, 2), "standby"),
    }
    processes["zero"].start()
    processes["one"].start()
    try:
        lease = "spec-autotuner-controller-shard-{}"

        def holder(index: int) -> str | None:
            try:
                spec = server.get("Lease", "llm", lease.format(index))["spec"]
            except KeyError:
                return None
            found = spec.get("holderIdentity")
            return str(found) if found else None

        wait_for(lambda: holder(0) == "zero" and holder(1) == "one", "a Lease per shard")
        processes["standby"].start()
        wait_for(lambda: processes["standby"].ready()[0], "the standby's first list")

        def written(process: FleetProcess) -> int:
            with process.fleet.lock:
                return sum(loop.written is not None for loop in process.fleet.loops.values())

        loops_one = sum(shard_of(("llm", n), 2) == 1 for n in NAMES)
        wait_for(lambda: written(processes["one"]) == loops_one, "shard 1 stepping its loops")
        assert len(processes["standby"].fleet.loops) == loops_one  # watched, warm
        assert written(processes["standby"]) == 0  # not its Lease: it never stepped
        assert holder(1) == "one"
    finally:
        for process in processes.values():
            process.stop(5)
