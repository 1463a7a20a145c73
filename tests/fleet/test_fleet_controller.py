"""`autotuner controller` against the loopback API server with real watches: SpecTuners
created, edited, paused, deleted and wrong; a target deleted under its loop; the API server
dropping watches and forgetting versions. Engines are the truth engine; time is simulated."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from autotuner.core.types import BlockReason
from autotuner.engines.vllm.setup import parse_setup
from tests.support.fake_apiserver import FakeApiServer, deployment, fake_apiserver
from tests.support.fleet import ARGS, edit_spec, running_fleet, spectuner, wait_for


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with fake_apiserver() as fake:
        for name in ("a", "b"):
            fake.put("Deployment", deployment(name, args=ARGS))
        yield fake


def args_of(server: FakeApiServer, name: str) -> list[str]:
    obj = server.get("Deployment", "llm", name)
    return list(obj["spec"]["template"]["spec"]["containers"][0]["args"])


def status(server: FakeApiServer, name: str) -> dict[str, Any]:
    return dict(server.get("SpecTuner", "llm", name).get("status") or {})


def condition(server: FakeApiServer, name: str, kind: str) -> dict[str, Any]:
    found = [c for c in status(server, name).get("conditions", []) if c["type"] == kind]
    assert len(found) == 1, status(server, name)
    return dict(found[0])


def test_a_new_spectuner_advises_then_acts_when_edited(server: FakeApiServer) -> None:
    with running_fleet(server) as run:
        server.put("SpecTuner", spectuner("tune-a", "a"))
        wait_for(lambda: ("llm", "tune-a") in run.fleet.loops, "the new SpecTuner's loop")
        run.steps(4)
        assert args_of(server, "a") == ARGS  # advise by default: nothing written
        seen = status(server, "tune-a")
        assert seen["observedGeneration"] == 1
        assert seen["target"] == "Deployment/a"
        assert seen["currentSetup"] == parse_setup(ARGS).label
        assert seen["lastDecision"]["sentence"]
        assert condition(server, "tune-a", "Ready")["status"] == "True"
        assert condition(server, "tune-a", "Degraded")["status"] == "False"
        edit_spec(server, "llm", "tune-a", mode="act")
        wait_for(lambda: run.fleet.loops[("llm", "tune-a")].generation == 2, "the edit")
        run.steps(4)
        assert parse_setup(args_of(server, "a")).replay_window  # the switch happened
        assert status(server, "tune-a")["observedGeneration"] == 2
        assert status(server, "tune-a")["restartsToday"] >= 1
        assert args_of(server, "b") == ARGS  # no SpecTuner names b


def test_pause_stops_patching_and_says_so(server: FakeApiServer) -> None:
    with running_fleet(server) as run:
        server.put("SpecTuner", spectuner("tune-a", "a", mode="act", paused=True))
        wait_for(lambda: ("llm", "tune-a") in run.fleet.loops, "the loop")
        run.steps(5)
        assert args_of(server, "a") == ARGS
        assert condition(server, "tune-a", "Paused")["status"] == "True"
        assert status(server, "tune-a")["lastDecision"]["blockedBy"] == BlockReason.PAUSED.value


def test_deleting_a_spectuner_stops_its_loop_and_leaves_the_target(server: FakeApiServer) -> None:
    with running_fleet(server) as run:
        server.put("SpecTuner", spectuner("tune-a", "a", mode="act"))
        wait_for(lambda: ("llm", "tune-a") in run.fleet.loops, "the loop")
        run.steps(4)
        switched = args_of(server, "a")
        assert switched != ARGS
        server.delete("SpecTuner", "llm", "tune-a")
        wait_for(lambda: ("llm", "tune-a") not in run.fleet.loops, "the loop stopped")
        run.demand.batch = 2.0  # would call for a switch back, were anything still tuning a
        run.steps(6)
        assert args_of(server, "a") == switched


def test_a_bad_spec_is_degraded_and_the_others_keep_running(server: FakeApiServer) -> None:
    with running_fleet(server) as run:
        bad_kind = spectuner("bad-kind", "a")
        bad_kind["spec"]["targetRef"]["kind"] = "Pod"
        bad_policy = spectuner("bad-policy", "a", policy={"switch": {"dwel_s": 10}})
        for obj in (bad_kind, bad_policy, spectuner("good", "b", mode="act")):
            server.put("SpecTuner", obj)
        wait_for(lambda: len(run.fleet.loops) == 3, "three loops")
        run.steps(4)
        kind = condition(server, "bad-kind", "Degraded")
        assert (kind["status"], kind["reason"]) == ("True", "InvalidSpec")
        assert "Pod" in kind["message"]
        policy = condition(server, "bad-policy", "Degraded")
        assert (policy["status"], policy["reason"]) == ("True", "InvalidSpec")
        assert "policy.switch.dwel_s" in policy["message"]
        assert parse_setup(args_of(server, "b")).replay_window
        assert args_of(server, "a") == ARGS
        # Fixed, it runs.
        edit_spec(server, "llm", "bad-policy", policy={"switch": {"dwell_s": 0}})
        wait_for(lambda: run.fleet.loops[("llm", "bad-policy")].running, "the fixed loop")
        run.steps(1)
        assert condition(server, "bad-policy", "Degraded")["status"] == "False"


def test_a_target_deleted_under_its_loop_is_reported_not_read_forever(
    server: FakeApiServer,
) -> None:
    with running_fleet(server) as run:
        server.put("SpecTuner", spectuner("tune-a", "a"))
        wait_for(lambda: ("llm", "tune-a") in run.fleet.loops, "the loop")
        run.steps(2)
        server.delete("Deployment", "llm", "a")
        run.steps(4)
        degraded = condition(server, "tune-a", "Degraded")
        assert (degraded["status"], degraded["reason"]) == ("True", "TargetNotFound")
        reads = sum(1 for m, p, _ in server.requests if m == "GET" and p.endswith("/a"))
        run.steps(10)
        assert sum(1 for m, p, _ in server.requests if m == "GET" and p.endswith("/a")) == reads


def test_dropped_watches_and_expired_versions_are_recovered(server: FakeApiServer) -> None:
    with running_fleet(server) as run:
        server.put("SpecTuner", spectuner("tune-a", "a"))
        wait_for(lambda: ("llm", "tune-a") in run.fleet.loops, "the loop")
        server.drop_watches()
        server.put("SpecTuner", spectuner("tune-b", "b"))
        wait_for(lambda: ("llm", "tune-b") in run.fleet.loops, "a SpecTuner after the drop")
        # The server forgets its history while no watch is open; a delete happens meanwhile:
        # the resumed watch gets 410 Gone, lists again, and the list shows the delete.
        restarts = run.watch.restarts
        server.compact()
        server.drop_watches()
        server.delete("SpecTuner", "llm", "tune-a")
        server.compact()
        wait_for(lambda: ("llm", "tune-a") not in run.fleet.loops, "the delete, by a list")
        assert run.watch.restarts > restarts
        assert ("llm", "tune-b") in run.fleet.loops
