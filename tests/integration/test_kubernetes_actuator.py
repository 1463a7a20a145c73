"""The Kubernetes actuator and Lease election: the official client over real HTTP against the
loopback test API server."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from autotuner.actuators.base import STATE_ANNOTATION
from autotuner.actuators.kubeapi import K8sTarget, api_client, discover_target
from autotuner.actuators.kubernetes import KubernetesActuator
from autotuner.actuators.lease import LeaseElector
from autotuner.core.types import Setup
from autotuner.engines.vllm.setup import parse_setup
from autotuner.errors import ActuatorError, ConflictError, ForbiddenError, InputError
from tests.support.fake_apiserver import FakeApiServer, deployment, fake_apiserver

MTP = '{"method":"mtp","num_speculative_tokens":3}'
ARGS = [
    "--model",
    "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4",
    "--port",
    "8000",
    "--speculative-config",
    MTP,
    "--max-num-seqs",
    "256",
]
TARGET = K8sTarget("llm", "deployment", "vllm", "vllm")


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with fake_apiserver() as fake:
        fake.put("Deployment", deployment(args=ARGS))
        yield fake


def actuator(server: FakeApiServer, **options: object) -> KubernetesActuator:
    return KubernetesActuator(TARGET, api_client(server.url, timeout_s=2), **options)  # type: ignore[arg-type]


def test_target_uri() -> None:
    assert K8sTarget.parse("k8s://llm/deployment/vllm/vllm") == TARGET
    assert K8sTarget.parse("k8s://llm/statefulset/v").container is None
    with pytest.raises(InputError):
        K8sTarget.parse("k8s://llm/pod/x")


def test_read_reports_setup_state_and_rollout(server: FakeApiServer) -> None:
    live = actuator(server).read()
    assert live.setup == Setup(spec_tokens=3)
    assert live.speculative_config == {"method": "mtp", "num_speculative_tokens": 3}
    assert live.state is None
    assert not live.paused
    assert live.rollout.done
    assert live.version


def test_apply_patches_args_and_state_in_one_guarded_patch(server: FakeApiServer) -> None:
    act = actuator(server)
    live = act.read()
    server.requests.clear()
    result = act.apply(Setup(replay_window=16), state='{"v":1}', expected_version=live.version)
    # One read gives the args, the rollout strategy and the container (it was three).
    assert [r[0] for r in server.requests] == ["GET", "PATCH", "PATCH"]
    assert result.changed
    assert "--use-replayssm" in result.diff
    obj = server.get("Deployment", "llm", "vllm")
    containers = obj["spec"]["template"]["spec"]["containers"]
    assert containers[0]["args"] == [
        "--model",
        ARGS[1],
        "--port",
        "8000",
        "--max-num-seqs",
        "256",
        "--use-replayssm",
        "--replayssm-buffer-len",
        "16",
    ]
    assert containers[1] == {"name": "autotuner", "image": "spec-autotuner:0.1.0"}
    assert obj["metadata"]["annotations"][STATE_ANNOTATION] == '{"v":1}'
    patches = [r for r in server.requests if r[0] == "PATCH"]
    assert len(patches) == 2  # the dry run, then the real one
    assert all("json-patch" in r[2] for r in patches)
    assert obj["metadata"]["generation"] == 2


def test_dry_run_changes_nothing(server: FakeApiServer) -> None:
    before = server.get("Deployment", "llm", "vllm")
    act = actuator(server)
    result = act.apply(Setup(spec_tokens=1), state=None, expected_version=None, dry_run=True)
    assert result.dry_run
    assert result.changed
    assert '"num_speculative_tokens":1' in result.diff
    assert server.get("Deployment", "llm", "vllm") == before


def containers(server: FakeApiServer) -> list[dict[str, object]]:
    spec = server.get("Deployment", "llm", "vllm")["spec"]["template"]["spec"]
    return list(spec["containers"])


def test_a_conflict_on_what_was_decided_is_not_retried(server: FakeApiServer) -> None:
    act = actuator(server)
    stale = act.read().version
    other = server.get("Deployment", "llm", "vllm")  # someone else changed the setup
    other["spec"]["template"]["spec"]["containers"][0]["args"] = ARGS[:4]
    server.put("Deployment", other)
    with pytest.raises(ConflictError, match="setup"):
        act.apply(Setup(replay_window=16), state=None, expected_version=stale)
    assert [r for r in server.requests if r[0] == "PATCH"] == []


def test_a_conflict_elsewhere_is_rendered_again_and_the_other_change_survives(
    server: FakeApiServer,
) -> None:
    act = actuator(server)
    live = act.read()
    original = act._get
    raced: list[bool] = []

    def racing() -> dict[str, object]:
        raw = original()
        if not raced:  # another writer lands between our read and our write
            raced.append(True)
            other = server.get("Deployment", "llm", "vllm")
            args = other["spec"]["template"]["spec"]["containers"][0]["args"]
            args[args.index("--max-num-seqs") + 1] = "128"
            other["spec"]["replicas"] = 2
            server.put("Deployment", other)
        return raw

    act._get = racing  # type: ignore[method-assign]
    result = act.apply(Setup(replay_window=16), state="s", expected_version=live.version)
    assert result.changed
    args = containers(server)[0]["args"]
    assert isinstance(args, list)
    assert parse_setup(args) == Setup(replay_window=16)
    assert args[args.index("--max-num-seqs") + 1] == "128"  # the other writer's change
    assert server.get("Deployment", "llm", "vllm")["spec"]["replicas"] == 2


def test_losing_every_race_is_a_conflict(server: FakeApiServer) -> None:
    act = actuator(server, conflict_attempts=3)
    live = act.read()
    original = act._get

    def racing() -> dict[str, object]:
        raw = original()
        server.put("Deployment", server.get("Deployment", "llm", "vllm"))  # lands in between
        return raw

    act._get = racing  # type: ignore[method-assign]
    with pytest.raises(ConflictError):
        act.apply(Setup(replay_window=16), state=None, expected_version=live.version)
    assert parse_setup(containers(server)[0]["args"]) == Setup(spec_tokens=3)  # type: ignore[arg-type]
    patches = [r for r in server.requests if r[0] == "PATCH"]
    assert len(patches) == 3  # one dry run per try, each refused


def test_forbidden_and_unknown_container_and_timeouts(server: FakeApiServer) -> None:
    server.forbidden.add(("patch", "deployments"))
    with pytest.raises(ForbiddenError):
        actuator(server).apply(Setup(replay_window=16), state=None, expected_version=None)
    server.forbidden.clear()
    wrong = KubernetesActuator(
        K8sTarget("llm", "deployment", "vllm", "nope"), api_client(server.url)
    )
    with pytest.raises(ActuatorError, match="no container named"):
        wrong.read()
    server.delay_s = 1.5
    slow = KubernetesActuator(TARGET, api_client(server.url, timeout_s=0.3), timeout_s=0.3)
    with pytest.raises(ActuatorError, match="unreachable or slow"):
        slow.read()
    server.delay_s = 0
    server.fail_next = [500] * 1000
    with pytest.raises(ActuatorError, match="500"):
        actuator(server, deadline_s=0.5).read()
    server.fail_next = []
    assert server.get("Deployment", "llm", "vllm")["metadata"]["generation"] == 1


def test_surge_deployments_are_refused_by_default(server: FakeApiServer) -> None:
    server.put("Deployment", deployment(args=ARGS, max_surge=1))
    with pytest.raises(ActuatorError, match="maxSurge"):
        actuator(server).apply(Setup(replay_window=16), state=None, expected_version=None)
    allowed = actuator(server, allow_surge=True)
    assert allowed.apply(Setup(replay_window=16), state=None, expected_version=None).changed


def test_unparseable_args_are_refused_and_nothing_written(server: FakeApiServer) -> None:
    server.put(
        "Deployment", deployment(args=[], command=["sh", "-c", "vllm serve $(cat /m) --port 1"])
    )
    with pytest.raises(ActuatorError, match="shell syntax"):
        actuator(server).read()
    assert [r for r in server.requests if r[0] == "PATCH"] == []


def test_the_engine_command_of_a_script_is_edited_alone(server: FakeApiServer) -> None:
    line = f"nvidia-smi; vllm serve m --speculative-config '{MTP}' 2>&1 | tee /tmp/log"
    server.put("Deployment", deployment(args=[], command=["sh", "-c", line]))
    actuator(server).apply(Setup(replay_window=8), state=None, expected_version=None)
    command = containers(server)[0]["command"]
    assert command == [
        "sh",
        "-c",
        "nvidia-smi; vllm serve m --use-replayssm --replayssm-buffer-len 8 2>&1 | tee /tmp/log",
    ]


def test_shell_command_line_is_edited(server: FakeApiServer) -> None:
    line = f"vllm serve m --port 8000 --speculative-config '{MTP}'"
    server.put("Deployment", deployment(args=[], command=["/bin/sh", "-c", line]))
    act = actuator(server)
    assert act.read().setup == Setup(spec_tokens=3)
    act.apply(Setup(replay_window=8), state=None, expected_version=None)
    command = server.get("Deployment", "llm", "vllm")["spec"]["template"]["spec"]["containers"][0][
        "command"
    ]
    assert command[:2] == ["/bin/sh", "-c"]
    assert command[2] == "vllm serve m --port 8000 --use-replayssm --replayssm-buffer-len 8"


def test_rollout_stuck_is_reported(server: FakeApiServer) -> None:
    server.stall_rollout(
        "Deployment", "llm", "vllm", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    )
    rollout = actuator(server).read().rollout
    assert not rollout.done
    assert rollout.stuck is not None
    assert "ProgressDeadlineExceeded" in rollout.stuck


def test_events_carry_the_reason_sentence(server: FakeApiServer) -> None:
    act = actuator(server)
    act.read()
    act.event("SetupSwitched", "switch spec:3 -> replay:16: +29%")
    act.event("SwitchReverted", "revert", warning=True)
    assert [e["reason"] for e in server.events] == ["SetupSwitched", "SwitchReverted"]
    assert server.events[0]["involvedObject"]["name"] == "vllm"
    assert server.events[1]["type"] == "Warning"


def test_pause_annotation_and_saved_state(server: FakeApiServer) -> None:
    obj = server.get("Deployment", "llm", "vllm")
    obj["metadata"]["annotations"]["spec-autotuner.io/paused"] = "true"
    server.put("Deployment", obj)
    act = actuator(server)
    live = act.read()
    assert live.paused
    version = act.save_state(json.dumps({"decision": 7}), expected_version=live.version)
    assert version != live.version
    assert act.read().state == '{"decision": 7}'


def test_owner_chain_discovery(server: FakeApiServer) -> None:
    server.put(
        "ReplicaSet",
        {
            "metadata": {
                "name": "vllm-abc",
                "namespace": "llm",
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm", "uid": "u-1"}
                ],
            },
            "spec": {"selector": {"matchLabels": {"app": "vllm"}}},
        },
    )
    server.put(
        "Pod",
        {
            "metadata": {
                "name": "vllm-abc-1",
                "namespace": "llm",
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "ReplicaSet",
                        "name": "vllm-abc",
                        "uid": "u-2",
                    }
                ],
            },
            "spec": {"containers": [{"name": "vllm"}]},
        },
    )
    found = discover_target(api_client(server.url), "llm", "vllm-abc-1", "vllm")
    assert found == TARGET


def two_sidecars(
    server: FakeApiServer, now: list[float], lease: str
) -> tuple[LeaseElector, LeaseElector]:
    """Sidecars "a" and "b" contending for one Lease, on the clock `now[0]`."""

    def sidecar(identity: str) -> LeaseElector:
        api = api_client(server.url)
        return LeaseElector(
            api, namespace="llm", name=lease, identity=identity, clock=lambda: now[0]
        )

    return sidecar("a"), sidecar("b")


def test_exactly_one_of_two_sidecars_leads_and_release_hands_over(server: FakeApiServer) -> None:
    now = [1000.0]
    first, second = two_sidecars(server, now, "autotuner")  # a 15 s Lease
    results = [first.try_acquire_or_renew(), second.try_acquire_or_renew()]
    assert results == [True, False]
    for _ in range(5):
        now[0] += 5
        assert [second.try_acquire_or_renew(), first.try_acquire_or_renew()] == [False, True]
    first.release()
    assert second.try_acquire_or_renew()
    now[0] += 5
    assert not first.try_acquire_or_renew()


def test_expired_lease_is_taken_over(server: FakeApiServer) -> None:
    now = [1000.0]
    first, second = two_sidecars(server, now, "l")
    assert first.try_acquire_or_renew()
    now[0] += 30  # first crashed without releasing
    assert second.try_acquire_or_renew()
    lease = server.get("Lease", "llm", "l")
    assert lease["spec"]["holderIdentity"] == "b"
    assert lease["spec"]["leaseTransitions"] == 1


def test_lease_errors_mean_not_leader(server: FakeApiServer) -> None:
    server.forbidden.add(("get", "leases"))
    elector = LeaseElector(api_client(server.url), namespace="llm", name="l", identity="a")
    assert not elector.try_acquire_or_renew()
    assert elector.last_error is not None
    assert "403" in elector.last_error


def test_companion_flags_and_the_operators_record_round_trip(server: FakeApiServer) -> None:
    """On vLLM 0.33 (declared) replay+spec brings its companion flags, the operator's record
    rides in an annotation of the same patch, and leaving removes both."""
    from autotuner.actuators.base import OPERATOR_ANNOTATION
    from autotuner.core.model.registry import load_model
    from autotuner.engines.vllm.capabilities import FOLLOW_BUILD

    tuner = actuator(server)
    tuner.engine = FOLLOW_BUILD.serving(load_model(ARGS[1]))
    tuner.declared_build = "0.33.0"
    tuner.apply(Setup(spec_tokens=3, replay_window=16), state=None, expected_version=None)
    args = containers(server)[0]["args"]
    assert isinstance(args, list)
    assert args[-3:] == ["--mamba-backend", "flashinfer", "--no-enable-prefix-caching"]
    annotations = server.get("Deployment", "llm", "vllm")["metadata"]["annotations"]
    assert json.loads(annotations[OPERATOR_ANNOTATION]) == {
        "mamba_backend_flashinfer": None,
        "prefix_caching_off": None,
    }
    tuner.apply(Setup(spec_tokens=3), state=None, expected_version=None)
    assert containers(server)[0]["args"] == ARGS
    annotations = server.get("Deployment", "llm", "vllm")["metadata"].get("annotations") or {}
    assert OPERATOR_ANNOTATION not in annotations
