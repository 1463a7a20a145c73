"""Every PromQL expression of the dashboard and the alert rules, evaluated by a real Prometheus
that scrapes the simulated vLLM and a running sidecar: each parses, and every metric it names
has data (no typos, no wrong metric names)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from autotuner.sim.engine import SimSetup, SimulatedVllm
from autotuner.sim.server import SimServer
from tests.integration.conftest import StartPrometheus, free_port, wait_for_samples
from tests.support.run import sidecar_process

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
METRIC = re.compile(r"\b(autotuner_[a-z_]+|vllm:[a-z_:]+)\b")
SUBSTITUTIONS = {"$__rate_interval": "1m", "$namespace": "llm", "$model": ".*", "${datasource}": ""}


def dashboard_expressions() -> list[str]:
    board = json.loads((DEPLOY / "grafana" / "dashboard.json").read_text())
    found = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    found += [a["expr"] for a in board["annotations"]["list"]]
    for variable in board["templating"]["list"]:
        query = variable.get("definition", "")
        match = re.fullmatch(r"label_values\((.+), *(\w+)\)", query)
        if match:
            found.append(f"count by ({match.group(2)}) ({match.group(1)})")
    return found


def rule_expressions() -> list[str]:
    groups = yaml.safe_load((DEPLOY / "prometheus" / "rules.yaml").read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def substitute(expr: str) -> str:
    for key, value in SUBSTITUTIONS.items():
        expr = expr.replace(key, value)
    return expr


def query(prometheus: str, expr: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(
        f"{prometheus}/api/v1/query", params={"query": expr}, timeout=5
    ).json()
    return body


def answered(prometheus: str, expr: str, first: dict[str, Any]) -> bool:
    """The expression selects something now, or within a few scrapes (one scrape may lack a
    family whose window had no batch)."""
    deadline = time.monotonic() + 15
    answer = first
    while not answer["data"]["result"]:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
        answer = query(prometheus, expr)
    return True


def test_every_dashboard_and_rule_expression_has_data(
    start_prometheus: StartPrometheus, tmp_path: Path
) -> None:
    sim = SimulatedVllm(
        setup=SimSetup(spec_tokens=3, acceptance=(0.8, 0.7, 0.6)),
        load=lambda t: 128.0,
        step_time=lambda b, s: 0.03,
        model_name="nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4",
    )
    port = free_port()
    with SimServer(sim) as server:
        config = tmp_path / "autotuner.yaml"
        config.write_text(f"""\
mode: advise
source: {{urls: ["{server.url}/metrics"]}}
loop: {{interval_s: 250ms, window_s: 1s}}
limits: {{min_drafts: 20, min_batch_samples: 2}}
policy: {{estimates: {{min_batch_weight: 2}}}}
exporter: {{host: 127.0.0.1, port: {port}}}
log: {{format: json, level: warning}}
""")
        sidecar = sidecar_process(config)
        try:
            prometheus = start_prometheus(
                # 1 s (and so a 1 s scrape timeout): a scrape that times out on a busy machine
                # marks every series stale, and an instant query then finds nothing.
                [server.url.removeprefix("http://"), f"127.0.0.1:{port}"],
                "1s",
            )
            wait_for_samples(prometheus, "autotuner_quick_rule", 10)
            wait_for_samples(prometheus, "vllm:num_requests_running", 10)
            time.sleep(1.0)
            failures = []
            expressions = dashboard_expressions() + rule_expressions()
            assert len(expressions) > 30
            for raw in expressions:
                expr = substitute(raw)
                answer = query(prometheus, expr)
                if answer.get("status") != "success":
                    failures.append(f"{raw!r}: {answer.get('error')}")
                    continue
                for name in set(METRIC.findall(expr)):
                    # Over the last minute: a window without a batch leaves a family out of
                    # that one scrape, which is not "no data".
                    seen = f'count(last_over_time({{__name__="{name}"}}[1m]))'
                    if not query(prometheus, seen)["data"]["result"]:
                        failures.append(f"{raw!r}: no data for {name}")
                # A condition (against a number, or between series: "approaching the
                # crossover") may rightly select nothing now; its metrics must still exist.
                filters = re.search(r"(==|!=|>|<)\s*(?:[\d.]+\s*$|on\()", expr.strip())
                if not filters and not answered(prometheus, expr, answer):
                    failures.append(f"{raw!r}: returned nothing")
            assert not failures, "\n".join(failures)
        finally:
            sidecar.terminate()
            sidecar.wait(timeout=10)
    if sidecar.returncode not in (0, -15):
        pytest.fail(f"sidecar exited with {sidecar.returncode}")
