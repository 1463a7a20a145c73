"""A change is judged on the engine that runs it: settle counts from when the restarted engine
was seen serving the new setup, only whole windows after that judge it, and the clients'
reconnection after a restart never reaches the demand estimate (issue 39: an exec restart
ended inside the step, a 1.1 s window at demand 1 was judged at once, and the tuner flapped).

The engine here restarts as a real one does: down for `restart_s` after each change (ending
inside a step), its counters reset, so the first windows after it are short and grow; for the
first `reconnect_s` the load's clients are still coming back (demand 1)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from autotuner.core.decide.context import Context
from autotuner.core.decide.policy import decide
from autotuner.core.decide.settings import PolicySettings
from autotuner.core.decide.state import TunerState
from autotuner.core.engine.workload import Workload
from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.types import Action, Decision, Observation, Setup
from autotuner.errors import UnusableReason
from autotuner.sim.truth import TruthEngine, realistic_error
from tests.support.policy import H200, MODEL, STATIC_K, policy_settings

INTERVAL = 15.0
WINDOW = 60.0
HIGH = (0.8, 0.7, 0.6)
LIMITS = ObservationLimits(min_drafts=100)
SETTINGS = policy_settings(
    switch={"dwell_s": 0},
    restart={"downtime_s": 30, "cooldown_s": 1800},
    verification={"settle_s": 90},
    estimates={"min_batch_weight": 5, "batch_half_life_s": 300},
    candidates={"spec_tokens": (1, 2, 3), "replay_windows": (16,)},
    exploration={"enabled": False},
)


@dataclass
class Restarting:
    """The policy over an engine that restarts after each change the way a real one does."""

    demand: Callable[[float], float]  # the load's demand per engine at time t, once reconnected
    settings: PolicySettings = SETTINGS
    restart_s: float = 25.0  # ends inside the 15 s step after the one that decided
    reconnect_s: float = 30.0
    deployed: Setup = field(default_factory=lambda: Setup(spec_tokens=3))
    state: TunerState = field(default_factory=TunerState)
    now: float = 0.0
    up_since: float = -1e9
    down_until: float = -1e9
    truth: TruthEngine = field(
        default_factory=lambda: TruthEngine(MODEL, H200, Workload(), realistic_error)
    )
    seen: list[tuple[Decision, Observation]] = field(default_factory=list)

    def observation(self) -> Observation:
        if self.now < self.down_until:
            return Observation(
                source="sim",
                window_start=self.now - WINDOW,
                window_end=self.now,
                usable=False,
                reason=UnusableReason.SERVER_DOWN,
            )
        start = max(self.now - WINDOW, self.up_since)  # the counters began with the engine
        reconnecting = self.now - self.up_since < self.reconnect_s
        window = self.truth.observation(
            now=self.now,
            window_s=self.now - start,
            setup=self.deployed,
            batch=1.0 if reconnecting else self.demand(self.now),
            rates=HIGH,
            limits=LIMITS,
            ssm_dtype=MODEL.ssm_state_dtype,
        )
        return window.model_copy(update={"window_start": start, "window_end": self.now})

    def step(self) -> Decision:
        self.now += INTERVAL
        observation = self.observation()
        context = Context(
            now=self.now,
            model=MODEL,
            hardware=H200,
            engine=STATIC_K,
            deployed=self.deployed,
            window_s=WINDOW,
        )
        decision, self.state, _ = decide(self.state, observation, context, self.settings)
        if decision.action in (Action.SWITCH, Action.REVERT) and decision.target is not None:
            self.deployed = decision.target
            self.down_until = self.now + self.restart_s
            self.up_since = self.down_until
        self.seen.append((decision, observation))
        return decision

    def until(self, done: Callable[[Decision], bool], steps: int = 400) -> Decision:
        for _ in range(steps):
            decision = self.step()
            if done(decision):
                return decision
        raise AssertionError(f"not reached in {steps} steps: {self.seen[-1][0].sentence}")


def switched(decision: Decision) -> bool:
    return decision.action is Action.SWITCH


def judged(decision: Decision) -> bool:
    return decision.action is Action.REVERT or decision.sentence.startswith("verified")


def busy_from(minute: float) -> Callable[[float], float]:
    """Demand 32 per engine, then 512 (past the crossover: the tuner moves)."""
    return lambda t: 32.0 if t < minute * 60 else 512.0


def test_a_restart_ending_inside_the_step_is_judged_only_past_readiness_plus_settle() -> None:
    run = Restarting(busy_from(10))
    switch = run.until(switched)
    verdict = run.until(judged)
    ready_at = run.up_since  # the engine answered here, 25 s into the step after the switch
    decision, window = run.seen[-1]
    assert decision is verdict
    assert window.window_start >= ready_at + SETTINGS.verification.settle_s
    assert window.window_end - window.window_start >= 0.75 * WINDOW
    waits = [d.sentence for d, _ in run.seen if d.at > switch.at and d is not verdict]
    assert waits, "judged at the first step after the restart"
    assert any("settle left" in s for s in waits), waits
    assert any("no usable window yet" in s for s in waits), waits  # while it restarted


def test_no_window_straddling_the_restart_or_shorter_than_a_window_is_judged() -> None:
    settings = policy_settings(SETTINGS, verification={"settle_s": 0})
    run = Restarting(busy_from(10), settings=settings)
    switch = run.until(switched)
    run.until(judged)
    after = [(d, w) for d, w in run.seen if d.at > switch.at]
    verdicts = [w for d, w in after if judged(d)]
    assert len(verdicts) == 1
    window = verdicts[0]
    assert window.window_start >= run.up_since  # wholly after the restart
    assert window.window_end - window.window_start >= 0.75 * WINDOW
    short = [d.sentence for d, w in after if w.usable and w.window_end - w.window_start < 45]
    assert short, "the engine came back with a whole window at once"
    assert all("shorter than the 60 s window" in s for s in short), short


def test_the_reconnection_after_a_restart_does_not_move_the_demand_estimate() -> None:
    """Two runs alike but for the demand the reconnecting clients show after the restart (1
    under the load's 512, or 512 at once): what the tuner believes of the load is the same."""
    settings = policy_settings(SETTINGS, verification={"settle_s": 0})  # no settle to hide it
    runs = [
        Restarting(busy_from(10), settings=settings, reconnect_s=30.0),
        Restarting(busy_from(10), settings=settings, reconnect_s=0),
    ]
    for run in runs:
        run.until(switched)
        run.until(judged)
    reconnecting, direct = runs
    assert reconnecting.now == direct.now
    assert reconnecting.state.batch == direct.state.batch
    assert reconnecting.state.load == direct.state.load
    verdicts = [d for d, _ in reconnecting.seen if judged(d)]
    assert "at demand 512" in verdicts[0].sentence


def test_a_load_still_coming_back_is_waited_for_before_judging() -> None:
    """Clients that take longer than the settle to come back are waited for (a few windows)."""
    run = Restarting(busy_from(10), reconnect_s=SETTINGS.verification.settle_s + 2 * WINDOW)
    run.until(switched)
    verdict = run.until(judged)
    waits = [d.sentence for d, _ in run.seen if "waiting for the load to come back" in d.sentence]
    assert waits
    assert "at demand 512" in verdict.sentence


def burst(start_minute: float, minutes: float) -> Callable[[float], float]:
    """Demand 32 per engine, 512 for `minutes` from `start_minute`, then 32 again."""
    return lambda t: 512.0 if start_minute * 60 <= t < (start_minute + minutes) * 60 else 32.0


def test_a_change_reverted_at_a_load_that_had_gone_is_remembered() -> None:
    """The tuner moves for a burst that is over before the change is judged: the revert says
    the load it was made for had gone, and for a day no change passes its dwell early. A load
    that stays leaves no such memory."""
    gone = Restarting(burst(10, 2))
    gone.until(switched)
    verdict = gone.until(judged)
    assert verdict.action is Action.REVERT, verdict.sentence
    assert "at demand 32" in verdict.sentence
    assert "(demand 512) had gone before it settled" in verdict.sentence
    memory = SETTINGS.switch.load_gone_memory_s
    assert gone.state.load_went_within(gone.now + memory - 1, memory)
    assert not gone.state.load_went_within(gone.now + memory + 1, memory)
    stayed = Restarting(busy_from(10))
    stayed.until(switched)
    stayed.until(judged)
    assert not stayed.state.load_went_within(stayed.now, memory)
