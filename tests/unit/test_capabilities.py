from autotuner.core.capabilities import REPLAY_SPEC, UPSTREAM, EngineCapabilities
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
