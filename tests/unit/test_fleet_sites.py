"""Where a container keeps the engine args, what a strategy surges, who else writes an object:
the pure parts of the fleet targets."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from autotuner.actuators.base import select_container
from autotuner.actuators.kinds import kind_named, stuck_condition, surge_pods
from autotuner.actuators.managers import controller_owner, source_manager
from autotuner.actuators.manifest import ManifestActuator
from autotuner.actuators.sites import (
    ENV_ARGS,
    ConfigMapReader,
    Site,
    config_tokens,
    read_site,
    site_ops,
    templated_site,
)
from autotuner.core.types import Setup
from autotuner.engines.vllm.dialect import VllmDialect
from autotuner.errors import ActuatorError, ArgsError, InputError

DIALECT = VllmDialect()
MTP = '{"method":"mtp","num_speculative_tokens":3}'


def no_config_maps(name: str) -> dict[str, str]:
    raise AssertionError(f"no ConfigMap should be read (asked for {name})")


def rendered(site: Site, setup: Setup) -> tuple[list[str], list[str]]:
    """The (command, args) that write `setup` into the site's command line."""
    command, args, _ = DIALECT.render(
        site.command,
        site.args,
        setup,
        saved_speculative_config=None,
        allow_low_precision_replay=False,
    )
    return command, args


def site_of(
    container: dict[str, Any],
    pod: dict[str, Any] | None = None,
    config_map: ConfigMapReader = no_config_maps,
) -> Site:
    site = read_site(container, "/c", pod or {}, DIALECT, config_map)
    assert site is not None
    return site


def test_plain_args_are_written_as_a_list_and_only_what_changed() -> None:
    container = {"name": "vllm", "args": ["--model", "m", "--speculative-config", MTP]}
    site = site_of(container)
    assert site.args == ("--model", "m", "--speculative-config", MTP)
    assert site.advice is None
    ops = site_ops(site, container, [], ["--model", "m", "--use-replayssm"])
    assert ops == [
        {"op": "replace", "path": "/c/args", "value": ["--model", "m", "--use-replayssm"]}
    ]
    assert site_ops(site, container, [], list(site.args)) == []


def test_the_env_var_holds_the_args_and_is_edited_in_place() -> None:
    value = f"--max-model-len  4096 --speculative-config='{MTP}'"
    container = {"name": "main", "env": [{"name": ENV_ARGS, "value": value}]}
    site = site_of(container)
    assert site.env_index == 0
    assert site.args == ("--max-model-len", "4096", f"--speculative-config={MTP}")
    ops = site_ops(site, container, [], ["--max-model-len", "4096", "--use-replayssm"])
    assert ops == [
        {
            "op": "replace",
            "path": "/c/env/0/value",
            "value": "--max-model-len  4096 --use-replayssm",
        }
    ]


def test_a_literal_env_var_referenced_in_the_args_is_written_in_place() -> None:
    container = {
        "args": ["--model", "m", "$(EXTRA)"],
        "env": [{"name": "EXTRA", "value": f"--speculative-config '{MTP}'"}],
    }
    site = site_of(container)
    assert (site.env_index, site.args) == (0, ("--speculative-config", MTP))
    ops = site_ops(site, container, [], ["--use-replayssm"])
    assert ops == [{"op": "replace", "path": "/c/env/0/value", "value": "--use-replayssm"}]


def test_managed_flags_in_both_places_are_refused() -> None:
    container = {
        "args": ["--speculative-config", MTP],
        "env": [{"name": ENV_ARGS, "value": "--use-replayssm"}],
    }
    with pytest.raises(ArgsError, match="refusing to guess"):
        site_of(container)


def test_a_configmap_reference_is_read_and_advised() -> None:
    container = {
        "args": ["--model", "m", "$(EXTRA)"],
        "env": [{"name": "EXTRA", "valueFrom": {"configMapKeyRef": {"name": "e", "key": "k"}}}],
    }
    site = site_of(container, {}, lambda name: {"k": f"--speculative-config '{MTP}'"})
    assert site.args == ("--speculative-config", MTP)
    assert site.advice is not None
    assert "ConfigMap e key k" in site.advice
    with pytest.raises(ArgsError, match="advise only"):
        site_ops(site, container, [], [])
    partial = {
        **container,
        "env": [{"name": "EXTRA", "valueFrom": {"configMapKeyRef": {"name": "e"}}}],
    }
    with pytest.raises(ArgsError, match="without a name and a key"):
        site_of(partial, {}, lambda name: {})


def test_a_mounted_config_file_with_managed_flags_is_advised_the_cli_winning() -> None:
    container = {
        "args": ["--model", "m", "--config", "/etc/v/c.yaml", "--max-num-seqs", "8"],
        "volumeMounts": [{"name": "v", "mountPath": "/etc/v"}],
    }
    pod = {
        "volumes": [
            {
                "name": "v",
                "configMap": {"name": "conf", "items": [{"key": "engine", "path": "c.yaml"}]},
            }
        ]
    }
    text = "speculative_config:\n  method: mtp\n  num_speculative_tokens: 2\nmax-num-seqs: 64\n"
    site = site_of(container, pod, lambda name: {"engine": text})
    assert site.advice is not None
    assert "ConfigMap conf key engine" in site.advice
    tokens = list(site.args)
    assert tokens.count("--max-num-seqs") == 1  # the command line's 8, not the file's 64
    assert DIALECT.setup_of(site.command, site.args).spec_tokens == 2


def test_config_tokens() -> None:
    assert config_tokens("a_b: 1\nflag: true\noff: false\n", "f") == ["--a-b", "1", "--flag"]
    with pytest.raises(ArgsError):
        config_tokens("- a\n", "f")


def test_surge_is_counted_as_the_controllers_do() -> None:
    assert surge_pods("25%", 1) == 1  # rounds up
    assert surge_pods(None, 4, default=0) == 0
    assert surge_pods(2, 1) == 2
    lws = kind_named("leaderworkerset")
    raw = {"metadata": {"name": "x"}, "spec": {"replicas": 4}}
    assert lws.surge(raw) is None  # LWS defaults to maxSurge 0
    llmisvc = kind_named("llminferenceservice")
    assert llmisvc.surge({"metadata": {}, "spec": {}}) is not None  # a Deployment: 25%
    assert llmisvc.surge({"metadata": {}, "spec": {"worker": {}}}) is None  # an LWS: 0


def test_kind_names_and_versions() -> None:
    assert kind_named("dynamographdeployment").version == "v1beta1"
    alpha = kind_named("dynamographdeployment.v1alpha1")
    assert (alpha.group, alpha.version) == ("nvidia.com", "v1alpha1")
    assert kind_named("llminferenceservice").api_version == "serving.kserve.io/v1alpha2"
    assert kind_named("llminferenceservice.v1alpha1").api_version == "serving.kserve.io/v1alpha1"
    with pytest.raises(InputError, match="leaderworkerset"):
        kind_named("pod")


def test_stuck_conditions() -> None:
    gpu = {"status": "False", "reason": "X", "message": "0/2 nodes: 2 Insufficient nvidia.com/gpu"}
    assert stuck_condition([{"status": "True", "reason": "ProgressDeadlineExceeded"}]) is None
    assert stuck_condition([gpu]) is not None


def test_owners_and_managers() -> None:
    owned = {
        "ownerReferences": [{"kind": "DynamoComponentDeployment", "name": "d", "controller": True}]
    }
    assert "change its args where that controller takes them" in (
        controller_owner(owned, "n") or ""
    )
    lws_owned = {"ownerReferences": [{"kind": "LeaderWorkerSet", "name": "w", "controller": True}]}
    assert "k8s://n/leaderworkerset/w" in (controller_owner(lws_owned, "n") or "")
    alpha_owned = {
        "ownerReferences": [
            {
                "kind": "DynamoGraphDeployment",
                "apiVersion": "nvidia.com/v1alpha1",
                "name": "g",
                "controller": True,
            }
        ]
    }
    said = controller_owner(alpha_owned, "n") or ""
    assert "controlled by DynamoGraphDeployment g" in said
    assert "k8s://n/dynamographdeployment.v1alpha1/g" in said
    assert controller_owner({"ownerReferences": [{"kind": "X", "name": "y"}]}, "n") is None
    assert "Argo CD" in (
        source_manager({"managedFields": [{"manager": "argocd-controller"}]}) or ""
    )
    assert "Flux" in (source_manager({"labels": {"kustomize.toolkit.fluxcd.io/name": "a"}}) or "")
    assert source_manager({"managedFields": [{"manager": "kubectl-edit"}]}) is None


@pytest.mark.parametrize(
    ("line", "engine"),
    [
        ("setup.sh; vllm serve m", "vllm serve m"),
        ("a && vllm serve m || c | d & e", "vllm serve m"),
        ("echo 'x; vllm serve' \"$(date; id)\"; vllm serve m", "vllm serve m"),
        ("vllm serve m 2>&1 | tee l", "vllm serve m"),
        ("pip install vllm && exec vllm serve m", "exec vllm serve m"),
    ],
)
def test_the_engine_command_of_a_script(line: str, engine: str) -> None:
    site = site_of({"command": ["sh", "-c", line]})
    assert site.shell is not None
    assert line[site.shell.start : site.shell.end] == engine


def test_a_ray_worker_script_runs_no_engine_and_a_split_script_is_read() -> None:
    ray = {"command": ["sh", "-c", "bash /vllm-workspace/ray.sh worker --addr=$(LEADER)"]}
    assert read_site(ray, "/c", {}, DIALECT, no_config_maps) is None
    split = {"command": ["/bin/bash", "-c"], "args": [f"vllm serve m --speculative-config '{MTP}'"]}
    site = site_of(split)
    assert site.args == ("vllm", "serve", "m", "--speculative-config", MTP)
    ops = site_ops(site, split, [], ["vllm", "serve", "m"])
    assert ops == [{"op": "replace", "path": "/c/args/0", "value": "vllm serve m"}]


def test_the_engine_container_of_an_llm_d_pod_is_found_by_its_name() -> None:
    containers = [{"name": "routing-proxy"}, {"name": "modelserver"}]
    assert select_container(containers, None, "w", "vllm") == {"name": "modelserver"}
    with pytest.raises(ActuatorError, match="name the engine's one"):
        select_container([{"name": "a"}, {"name": "b"}], None, "w", "vllm")


LWS_FILE = """\
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: vllm  # the multi-host engine
spec:
  replicas: 2
  leaderWorkerTemplate:
    leaderTemplate:
      spec:
        containers:
          - name: vllm-leader
            command:
              - sh
              - -c
              - 'ray start --head; vllm serve m --speculative-config ''{spec}'' '
    workerTemplate:
      spec:
        containers:
          - name: vllm-worker
            args:
              - --model  # kept
              - m
              - --speculative-config
              - '{spec}'
"""


def test_a_leaderworkerset_file_is_edited_leader_and_workers(tmp_path: Path) -> None:
    path = tmp_path / "lws.yaml"
    path.write_text(LWS_FILE.format(spec=MTP))
    target = ManifestActuator(path)
    assert target.read().setup == Setup(spec_tokens=3)
    target.apply(Setup(replay_window=8), state=None, expected_version=None)
    text = path.read_text()
    assert "- 'ray start --head; vllm serve m --use-replayssm --replayssm-buffer-len 8 '" in text
    assert "- --model  # kept\n              - m\n              - --use-replayssm\n" in text
    assert "name: vllm  # the multi-host engine" in text


CONFIGMAP_FILE = """\
---
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: engine-args}}
data:
  extra: --speculative-config '{spec}'
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: vllm}}
spec:
  template:
    spec:
      containers:
        - name: vllm
          args: [--model, m, $(EXTRA)]
          env:
            - name: EXTRA
              valueFrom: {{configMapKeyRef: {{name: engine-args, key: extra}}}}
"""


def test_a_file_whose_args_come_from_its_configmap_is_read_and_advised(tmp_path: Path) -> None:
    """An empty document among them (`---` twice) is skipped; the ConfigMap in the same file
    fills the args, and the change is advised there."""
    path = tmp_path / "vllm.yaml"
    path.write_text(CONFIGMAP_FILE.format(spec=MTP))
    live = ManifestActuator(path).read()
    assert live.setup == Setup(spec_tokens=3)
    assert live.advice is not None
    assert "ConfigMap engine-args key extra" in live.advice


def test_a_status_without_observed_generation_is_judged_by_its_own_fields() -> None:
    """Older LeaderWorkerSet and Dynamo releases report no observedGeneration: their replica
    counts decide; one that reports it must have seen the latest spec."""
    lws = kind_named("leaderworkerset")
    groups = {"replicas": 2, "readyReplicas": 2, "updatedReplicas": 2}
    raw: dict[str, Any] = {"metadata": {"generation": 3}, "spec": {"replicas": 2}}
    assert lws.rollout({**raw, "status": groups}).done
    assert not lws.rollout({**raw, "status": {**groups, "observedGeneration": 2}}).done


def _referencing(env_entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "command": ["vllm", "serve"],
        "args": ["m", "--speculative-config=$(SPEC)", "--port", "$(PORT)"],
        "env": [env_entry, {"name": "PORT", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
    }


def test_a_value_inside_an_arg_is_read_from_its_literal_env_var_and_written_there() -> None:
    container = _referencing({"name": "SPEC", "value": MTP})
    site = site_of(container)
    assert site.args == ("m", f"--speculative-config={MTP}", "--port", "$(PORT)")
    assert DIALECT.setup_of(site.command, site.args) == Setup(spec_tokens=3)
    command, args = rendered(site, Setup(spec_tokens=2))
    ops = site_ops(site, container, command, args)
    assert [op["path"] for op in ops] == ["/c/env/0/value"]
    assert re.search(r'"num_speculative_tokens":\s*2\b', ops[0]["value"])
    assert site_ops(site, container, list(site.command), list(site.args)) == []


def test_a_value_inside_an_arg_from_a_configmap_is_advised_with_its_new_value() -> None:
    ref = {"configMapKeyRef": {"name": "conf", "key": "spec"}}
    container = _referencing({"name": "SPEC", "valueFrom": ref})
    site = site_of(container, {}, lambda name: {"spec": MTP.replace(",", ",\n  ")})
    assert DIALECT.setup_of(site.command, site.args) == Setup(spec_tokens=3)
    command, args = rendered(site, Setup(spec_tokens=2))
    with pytest.raises(ArgsError, match="ConfigMap conf key spec") as said:
        site_ops(site, container, command, args)
    assert re.search(r'"num_speculative_tokens":\s*2\b', str(said.value))
    with pytest.raises(ArgsError, match="the arg goes"):
        site_ops(site, container, ["vllm", "serve"], ["m", "--port", "$(PORT)"])


def test_a_script_that_computes_a_managed_flag_is_advised_and_one_that_does_not_is_written() -> (
    None
):
    script = 'S="--speculative-config {}"\nexec vllm serve $S m \\\n  --port $P\n'
    site = site_of({"command": ["/bin/bash", "-c"], "args": [script]})
    assert site.advice is not None
    assert "$S" in site.advice
    plain = script.replace("$S ", "")
    container = {"command": ["/bin/bash", "-c"], "args": [plain]}
    site = site_of(container)
    assert site.advice is None
    assert site.args == ("exec", "vllm", "serve", "m", "--port", "$P")
    ops = site_ops(site, container, [], [*site.args, "--use-replayssm"])
    assert ops == [
        {"op": "replace", "path": "/c/args/0", "value": plain.replace("$P", "$P --use-replayssm")}
    ]


def test_an_arg_that_is_only_a_reference_to_a_json_value_is_read_as_that_value() -> None:
    container = {
        "args": ["--model", "m", "--speculative-config", "$(SPEC)"],
        "env": [{"name": "SPEC", "value": MTP.replace(",", ",\n ")}],
    }
    site = site_of(container)
    assert site.args[-1] == MTP.replace(",", ",\n ")
    assert DIALECT.setup_of(site.command, site.args) == Setup(spec_tokens=3)


def test_an_escaped_reference_is_literal() -> None:
    container = {"args": ["--model", "m", "--x=$$(SPEC)"], "env": [{"name": "SPEC", "value": "v"}]}
    assert site_of(container).args[-1] == "--x=$$(SPEC)"


def test_a_templated_container_gets_its_flags_in_a_new_env_var_and_loses_it_going_back() -> None:
    """A KServe `main` with no command line of its own runs its template's: `args` would
    replace that, so the flags go into VLLM_ADDITIONAL_ARGS, which goes again when empty."""
    container: dict[str, Any] = {"name": "main", "env": [{"name": "X", "value": "1"}]}
    site = templated_site(site_of(container))
    assert site.new_env
    flags = ["--use-replayssm", "--replayssm-buffer-len", "16"]
    added = site_ops(site, container, flags, [])
    value = "--use-replayssm --replayssm-buffer-len 16"
    assert added == [{"op": "add", "path": "/c/env/-", "value": {"name": ENV_ARGS, "value": value}}]
    container["env"].append({"name": ENV_ARGS, "value": value})
    written = templated_site(site_of(container))
    assert not written.new_env
    assert written.args == tuple(flags)
    assert site_ops(written, container, [], []) == [{"op": "remove", "path": "/c/env/1"}]
    bare: dict[str, Any] = {"name": "main"}
    assert site_ops(templated_site(site_of(bare)), bare, flags, [])[0]["path"] == "/c/env"
    own = {"name": "main", "args": ["--model", "m"]}
    assert not templated_site(site_of(own)).new_env  # its own command line: written there


def test_a_config_file_change_is_advised_in_the_files_own_keys() -> None:
    """An SGLang-style file (`speculative_num_steps: 3`): the advice names its keys, not the
    command-line flags they stand for; a map-valued vLLM key is given as a map."""
    from autotuner.actuators.sites import config_change

    container = {
        "args": ["--model", "m", "--config", "/etc/v/c.yaml"],
        "volumeMounts": [{"name": "v", "mountPath": "/etc/v"}],
    }
    pod = {"volumes": [{"name": "v", "configMap": {"name": "conf"}}]}
    text = "speculative_config:\n  method: mtp\n  num_speculative_tokens: 2\nmax_num_seqs: 64\n"
    site = site_of(container, pod, lambda name: {"c.yaml": text})
    assert site.config is not None
    new = rendered(site, Setup(spec_tokens=3))
    said = config_change(site, new[0], new[1], DIALECT)
    assert said.startswith("; set there ")
    assert "speculative_config: {method: mtp, num_speculative_tokens: 3}" in said
    assert "--speculative" not in said
    off = rendered(site, Setup())
    assert "remove speculative_config" in config_change(site, off[0], off[1], DIALECT)
