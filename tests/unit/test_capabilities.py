import pytest

from autotuner.core.capabilities import REPLAY_SPEC, UPSTREAM, EngineCapabilities, needed
from autotuner.core.types import Setup


def test_upstream_runs_replay_or_speculation_not_both() -> None:
    assert UPSTREAM.accepts(Setup.parse("spec:3"))
    assert UPSTREAM.accepts(Setup.parse("replay:16"))
    assert UPSTREAM.accepts(Setup.parse("spec:3@1-64:3,65-512:0"))
    reason = UPSTREAM.refusal(Setup.parse("replay+spec:3:16"))
    assert reason is not None
    assert "does not support speculative decoding" in reason
    assert REPLAY_SPEC.accepts(Setup.parse("replay+spec:3:16"))


def test_limits_of_an_older_build() -> None:
    old = EngineCapabilities(name="v0.10", replay=False, spec_schedule=False, max_spec_tokens=4)
    assert not old.accepts(Setup.parse("replay:16"))
    assert not old.accepts(Setup.parse("spec:3@1-64:3"))
    assert not old.accepts(Setup.parse("spec:5"))
    assert old.accepts(Setup.parse("spec:4"))
    assert old.accepts(Setup())


@pytest.mark.parametrize(
    ("target", "previous", "capability"),
    [
        ("spec:3@1-64:3,65-512:0", "spec:3", "spec_schedule"),
        ("replay+spec:2:16", "replay:16", "replay_with_speculation"),
        ("replay:16", "spec:3", "replay"),
        ("spec:2", "plain", "speculation"),
        ("spec:1", "spec:3", None),
        ("plain", "replay:16", None),
    ],
)
def test_a_failed_change_names_the_capability_it_needed(
    target: str, previous: str, capability: str | None
) -> None:
    assert needed(Setup.parse(target), Setup.parse(previous)) == capability


def test_refused_capabilities_are_turned_off_and_unknown_names_ignored() -> None:
    engine = UPSTREAM.without(["spec_schedule", "no_such_thing"])
    assert not engine.spec_schedule
    assert engine.replay
    assert not engine.accepts(Setup.parse("spec:3@1-64:3,65-512:0"))
    assert engine.accepts(Setup.parse("spec:3"))
