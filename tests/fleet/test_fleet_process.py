"""The controller process as `autotuner controller` assembles it: real watches, its own
stepping thread on the real clock, one /metrics with a `tuner` label per SpecTuner."""

from __future__ import annotations

import logging
from pathlib import Path

from autotuner.actuators.kubeapi import api_client
from autotuner.fleet.runner import fleet_process
from autotuner.settings import load_settings
from tests.support.fake_apiserver import deployment, fake_apiserver
from tests.support.fleet import ARGS, spectuner, wait_for


def test_the_process_steps_each_spectuner_and_labels_its_metrics(tmp_path: Path) -> None:
    config = tmp_path / "autotuner.yaml"  # every loop's base: a short interval, no engine
    config.write_text("source: {urls: ['http://127.0.0.1:9/metrics']}\nloop: {interval_s: 1}\n")
    with fake_apiserver() as server:
        for name in ("a", "b"):
            server.put("Deployment", deployment(name, args=ARGS))
            server.put("SpecTuner", spectuner(f"tune-{name}", name))
        api = api_client(server.url, timeout_s=5)
        settings, _ = load_settings(config)
        process = fleet_process(
            api,
            settings,
            config,
            namespaces=["llm"],
            identity="test",
            logger=logging.getLogger("test.fleet"),
            workers=2,
            lease_namespace="llm",
        )
        process.start()
        try:
            wait_for(lambda: process.ready()[0], "the first list")

            def stepped() -> bool:
                return all(
                    "lastDecision"
                    in (server.get("SpecTuner", "llm", f"tune-{n}").get("status") or {})
                    for n in ("a", "b")
                )

            wait_for(stepped, "a step of each SpecTuner")
            text = process.metrics().render().decode()
            for tuner in ("llm/tune-a", "llm/tune-b"):
                assert f'autotuner_gain{{tuner="{tuner}"}}' in text
            assert (
                server.get("Lease", "llm", "spec-autotuner-controller")["spec"]["holderIdentity"]
                == "test"
            )
            assert process.alive()
        finally:
            process.stop(5)
        assert server.get("Lease", "llm", "spec-autotuner-controller")["spec"].get(
            "holderIdentity"
        ) in (None, "")
