"""The quality guard's adapter: when the canary may run, and before/after -> QualityCheck.
The server is an injected httpx transport whose answers depend on what it "serves"."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import httpx
import pytest

from autotuner.canary.guard import QualityGuard, admission
from autotuner.core.decide.state import QualityCheck
from autotuner.core.types import Observation, Setup
from autotuner.durations import format_duration, parse_duration
from autotuner.settings import QualitySettings

SPEC = Setup(spec_tokens=3)
REPLAY = Setup(replay_window=16)
SETTINGS = QualitySettings(max_tokens=8, after_deadline_s=600)


def observed(*, waiting: float = 0.0, usable: bool = True, rate: float = 1000.0) -> Observation:
    return Observation(
        source="test",
        window_start=0.0,
        window_end=60.0,
        usable=usable,
        series=1,
        waiting_mean=waiting,
        generation_tokens_per_s=rate,
    )


@dataclass
class Server:
    """Answers greedy completions; `broken` prompts come out different; `down` refuses."""

    broken: set[str] = field(default_factory=set)
    name: str = "m"
    down: bool = False
    requests: int = 0
    priorities: list[object] = field(default_factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        if self.down:
            return httpx.Response(503, text="engine restarting")
        body = json.loads(request.content)
        self.priorities.append(body.get("priority"))
        prompt, tokens = body["prompt"], body["max_tokens"]
        text = "".join(f" t{(len(prompt) * 7 + i) % 97}" for i in range(tokens))
        if prompt in self.broken:
            text = " different" + text
        return httpx.Response(
            200,
            json={
                "model": self.name,
                "choices": [{"text": text}],
                "usage": {"completion_tokens": tokens},
            },
        )


def guard(server: Server, settings: QualitySettings = SETTINGS) -> QualityGuard:
    client = httpx.Client(transport=httpx.MockTransport(server.handle))
    return QualityGuard(settings, "http://replica:8000", client=client)


def switching(server: Server) -> tuple[QualityGuard, QualityCheck]:
    """A guard on `server` and the check its run opened as a switch away from SPEC began."""
    g = guard(server)
    before = g.before(None, SPEC, observed(), 5000.0, now=100.0)
    assert before.check is not None
    return g, before.check


@pytest.mark.parametrize(
    ("observation", "capacity", "why"),
    [
        (observed(waiting=3), 5000.0, "saturated (3.0 requests waiting per engine)"),
        (observed(usable=False), 5000.0, "no usable observation"),
        (observed(), None, "capacity is unknown"),
        (observed(), 100.0, "over 1% of a minute's capacity (60 tokens)"),
    ],
)
def test_admission_refuses_with_the_reason(
    observation: Observation, capacity: float | None, why: str
) -> None:
    reason = admission(
        observation, cost_tokens=96, capacity_tokens_per_s=capacity, settings=SETTINGS
    )
    assert reason is not None
    assert why in reason


def test_admission_lets_a_cheap_canary_run_on_a_quiet_server() -> None:
    reason = admission(
        observed(waiting=0.4), cost_tokens=96, capacity_tokens_per_s=200.0, settings=SETTINGS
    )
    assert reason is None  # 96 tokens <= 1% of 60 s x 200 tokens/s = 120


def test_identical_answers_pass_and_become_the_new_baseline() -> None:
    server = Server()
    g = guard(server)
    before = g.before(None, SPEC, observed(), 5000.0, now=100.0)
    assert before.result == "ran"
    assert before.check is not None
    assert before.check.status == "pending"
    assert server.requests == 12
    after = g.after(before.check, REPLAY, observed(), 5000.0, now=200.0)
    assert after.check is not None
    assert after.check.status == "passed"
    assert after.check.summary.startswith("identical: 12/12")
    assert after.baseline is not None
    assert after.baseline.setup == REPLAY.label
    assert after.check.evidence == ()


def test_a_fresh_baseline_is_used_without_asking_the_server() -> None:
    server = Server()
    g = guard(server)
    taken = g.baseline(SPEC, observed(), 5000.0)
    assert taken.baseline is not None
    record = taken.baseline.to_record()
    assert "prompts" not in record  # the state keeps the set by hash, not by text
    asked = server.requests
    outcome = g.before(record, SPEC, observed(), 5000.0, now=taken.baseline.at + 60)
    assert outcome.check is not None
    assert outcome.check.before == record
    assert server.requests == asked
    # Too old, or of another setup: run again.
    late = taken.baseline.at + SETTINGS.baseline_max_age_s + 1
    assert not g.fresh(record, SPEC, late)
    assert not g.fresh(record, REPLAY, taken.baseline.at)


def test_changed_answers_fail_with_evidence() -> None:
    server = Server()
    g, check = switching(server)
    server.broken = {p.prompt for p in g.prompts[:6]}
    after = g.after(check, REPLAY, observed(), 5000.0, now=200.0)
    assert after.check is not None
    assert after.check.status == "failed"
    assert after.check.summary.startswith("worse: 6/12 outputs identical")
    assert after.check.confidence is not None
    assert after.check.confidence > 0.99
    assert len(after.check.evidence) == 6
    assert after.check.evidence[0].startswith("code-fib: diverged at char 1 (early): 't52")
    assert after.baseline is None  # a failed setup's answers are no baseline


def test_a_saturated_or_down_server_is_retried_then_skipped_at_the_deadline() -> None:
    server = Server()
    g, check = switching(server)
    waiting = g.after(check, REPLAY, observed(waiting=5), 5000.0, now=200.0)
    assert waiting.check is None
    assert waiting.result == "skipped"
    assert waiting.why is not None
    assert "saturated" in waiting.why
    server.down = True
    down = g.after(check, REPLAY, observed(), 5000.0, now=300.0)
    assert down.check is None
    assert down.result == "error"
    assert down.why is not None
    assert "HTTP 503" in down.why
    late = g.after(check, REPLAY, observed(), 5000.0, now=100.0 + 601)
    assert late.check is not None
    assert late.check.status == "skipped"
    assert "within 10m: " in late.check.summary
    assert "HTTP 503" in late.check.summary


def test_no_canary_before_a_switch_on_a_saturated_server_says_so() -> None:
    server = Server()
    outcome = guard(server).before(None, SPEC, observed(waiting=9), 5000.0, now=1.0)
    assert outcome.check == QualityCheck(
        status="skipped",
        summary="no canary before the switch: the server is saturated "
        "(9.0 requests waiting per engine)",
    )
    assert server.requests == 0


def test_a_changed_canary_set_skips_instead_of_comparing_different_prompts() -> None:
    server = Server()
    _, check = switching(server)
    other = guard(server, SETTINGS.model_copy(update={"max_tokens": 9}))
    after = other.after(check, REPLAY, observed(), 5000.0, now=200.0)
    assert after.check is not None
    assert after.check.status == "skipped"
    assert "canary set or its request settings changed" in after.check.summary


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(45, "45s"), (900, "15m"), (21600, "6h"), (129600, "1.5d"), (3.75, "3.75s")],
)
def test_durations_read_back_as_operators_write_them(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == pytest.approx(seconds)


def test_priority_is_sent_only_when_set() -> None:
    server = Server()
    guard(server).baseline(SPEC, observed(), 5000.0)
    assert set(server.priorities) == {None}  # servers without priority scheduling reject it
    server.priorities.clear()
    guard(server, SETTINGS.model_copy(update={"priority": 10})).baseline(SPEC, observed(), 5000.0)
    assert server.priorities == [10] * 12


def test_another_served_model_is_not_compared() -> None:
    # The operator rolled out another model meanwhile: not the switch's doing, not comparable.
    server = Server()
    g, check = switching(server)
    server.name, server.broken = "m-v2", {p.prompt for p in g.prompts}
    after = g.after(check, REPLAY, observed(), 5000.0, now=200.0)
    assert after.check is not None
    assert after.check.status == "skipped"
    assert "the served model changed (m -> m-v2)" in after.check.summary
