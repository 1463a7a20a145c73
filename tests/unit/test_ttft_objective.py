"""The time to first token in the latency objective: under `latency_slo` with `ttft_slo_s`, a
setup whose predicted TTFT at the latency percentile's batch exceeds the limit is ruled out,
however many tokens/s it serves, and the decision says which setups the limit ruled out.

Long prompts are prefilled in the step budget beside the batch's decoding: speculation's
longer steps (and the drafts it adds to each step) delay the last chunk, so the setup that
serves the most tokens/s is also the one that answers last."""

from __future__ import annotations

from dataclasses import dataclass, replace

from autotuner.core.decide.context import Context, situation
from autotuner.core.decide.policy import decide
from autotuner.core.decide.settings import PolicySettings
from autotuner.core.decide.state import TunerState
from autotuner.core.decide.valuation import misses_latency_limits
from autotuner.core.engine.workload import Workload
from autotuner.core.observe.limits import ObservationLimits
from autotuner.core.predict.acceptance import from_conditional
from autotuner.core.predict.attribution import Attribution
from autotuner.core.predict.predictor import Predictor
from autotuner.core.types import Action, Decision, Observation, Setup
from autotuner.sim.truth import TruthEngine
from tests.support.policy import H200, MODEL, STATIC_K, policy_settings

RATES = (0.8, 0.7, 0.6)
BATCH = 32
# Chat-like lengths: short enough that speculation still pays in tokens/s (P/G 8).
WORKLOAD = Workload(prompt_tokens=2048, generation_tokens=256)
PLAIN, REPLAY = Setup(), Setup(replay_window=16)
SPECS = tuple(Setup(spec_tokens=k) for k in (1, 2, 3))
BASE = policy_settings(
    switch={"dwell_s": 0},
    restart={"downtime_s": 120, "cooldown_s": 1800},
    verification={"settle_s": 120},
    estimates={"min_batch_weight": 5, "batch_half_life_s": 300},
    candidates={"spec_tokens": (1, 2, 3), "replay_windows": (16,)},
    exploration={"enabled": False},
)


def _model_ttft(setup: Setup) -> float:
    predictor = Predictor(MODEL, H200, WORKLOAD, Attribution(), 0.0, 3600.0)
    return float(predictor.time_to_first_token_s(setup, [BATCH], from_conditional(RATES))[0])


# Between what plain and replay answer in and what the quickest speculation answers in.
LIMIT = (max(_model_ttft(PLAIN), _model_ttft(REPLAY)) + min(map(_model_ttft, SPECS))) / 2


@dataclass
class Run:
    settings: PolicySettings
    state: TunerState
    deployed: Setup = SPECS[-1]  # acceptance is observed only while drafting
    now: float = 0.0
    workload: Workload = WORKLOAD

    def observation(self) -> Observation:
        """The window just ended, on the deployed setup (the truth is the cost model)."""
        return TruthEngine(MODEL, H200, self.workload).observation(
            now=self.now,
            window_s=60.0,
            setup=self.deployed,
            batch=BATCH,
            rates=RATES,
            limits=ObservationLimits(min_drafts=100),
            ssm_dtype=MODEL.ssm_state_dtype,
        )

    def context(self) -> Context:
        return Context(
            now=self.now,
            model=MODEL,
            hardware=H200,
            engine=STATIC_K,
            workload=self.workload,
            deployed=self.deployed,
        )

    def step(self) -> Decision:
        self.now += 60.0
        decision, self.state, _ = decide(
            self.state, self.observation(), self.context(), self.settings
        )
        if decision.action in (Action.SWITCH, Action.REVERT) and decision.target is not None:
            self.deployed = decision.target
        return decision


def _run(settings: PolicySettings, minutes: int = 20) -> tuple[Run, list[Decision]]:
    run = Run(settings, TunerState())
    return run, [run.step() for _ in range(minutes)]


def test_the_limit_lies_between_the_setups_it_must_separate() -> None:
    """The premise: speculation serves more tokens/s here and answers later."""
    predictor = Predictor(MODEL, H200, WORKLOAD, Attribution(), 0.0, 3600.0)
    accept = from_conditional(RATES)
    served = {s: float(predictor.curve(s, [BATCH], accept)[0][0]) for s in (PLAIN, *SPECS)}
    assert max(served[s] for s in SPECS) > 1.1 * served[PLAIN]
    assert all(_model_ttft(s) > LIMIT for s in SPECS)
    assert _model_ttft(PLAIN) < LIMIT


def test_throughput_alone_keeps_speculation() -> None:
    run, decisions = _run(BASE)
    assert run.deployed in SPECS
    assert all(d.target in SPECS for d in decisions if d.action is Action.SWITCH)
    assert not any(n.startswith("ruled out by time to first") for d in decisions for n in d.notes)


def test_a_ttft_limit_rules_out_the_faster_setup_and_says_which() -> None:
    settings = policy_settings(BASE, objective={"kind": "latency_slo", "ttft_slo_s": LIMIT})
    _, decisions = _run(settings)
    moved = next(d for d in decisions if d.action is Action.SWITCH)
    assert moved.target not in SPECS
    (said,) = [n for n in moved.notes if n.startswith("ruled out by time to first token")]
    for spec in SPECS:
        assert f"{spec.label} (" in said
    assert f"{PLAIN.label} (" not in said
    assert f"{REPLAY.label} (" not in said
    assert f"over {LIMIT:g} s at batch " in said


def test_without_prompt_lengths_the_limit_rules_out_nothing_and_says_so() -> None:
    settings = policy_settings(BASE, objective={"kind": "latency_slo", "ttft_slo_s": LIMIT})
    run = Run(settings, TunerState(), workload=Workload())
    decisions = [run.step() for _ in range(20)]
    assert run.deployed in SPECS
    assert any(
        "rules out nothing: the prompt length is unknown" in n for d in decisions for n in d.notes
    )


def test_the_setups_a_limit_rules_out_are_named_for_verification() -> None:
    """What verification asks before holding a change to the previous setup's speed."""
    settings = policy_settings(BASE, objective={"kind": "latency_slo", "ttft_slo_s": LIMIT})
    for objective, ruled_out in ((settings, True), (BASE, False)):
        run = Run(objective, TunerState())
        for _ in range(8):
            run.step()
        observation, context = run.observation(), replace(run.context(), deployed=None)
        sit = situation(run.state, observation, context, objective)
        assert misses_latency_limits(sit, SPECS[-1]) is ruled_out
        assert misses_latency_limits(sit, PLAIN) is False


def test_a_move_made_for_the_ttft_limit_is_kept_at_verification() -> None:
    """The move serves fewer tokens/s than the setup it left, which missed the limit: its
    verification judges it by the limit, so it is kept, not reverted."""
    settings = policy_settings(BASE, objective={"kind": "latency_slo", "ttft_slo_s": LIMIT})
    run, decisions = _run(settings, minutes=40)
    moved = next(d for d in decisions if d.action is Action.SWITCH)
    judged = [d for d in decisions if d.id > moved.id and d.action in (Action.KEEP, Action.REVERT)]
    assert judged
    assert judged[0].action is Action.KEEP, judged[0].sentence
    assert run.deployed == moved.target


def test_the_move_says_the_running_setup_misses_the_latency_objective() -> None:
    """The running setup serves nothing under the objective (it misses the limit), so the
    sentence says that rather than an unknown gain."""
    settings = policy_settings(BASE, objective={"kind": "latency_slo", "ttft_slo_s": LIMIT})
    _, decisions = _run(settings)
    moved = next(d for d in decisions if d.action is Action.SWITCH)
    assert moved.current is not None
    assert f"meets the latency objective {moved.current.label} misses" in moved.sentence
    assert "unknown amount" not in moved.sentence
