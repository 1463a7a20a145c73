"""The canary comparison (pure) and one run against the simulated server's completions."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from autotuner.canary import CanaryRun, Verdict, compare, load_canary, run_canary
from autotuner.canary.compare import binomial_tail, first_divergence
from autotuner.canary.run import BUILT_IN
from autotuner.errors import CanaryError, InputError
from autotuner.sim.completions import CompletionsEngine
from autotuner.sim.engine import SimSetup, SimulatedVllm
from autotuner.sim.server import SimServer, greedy_text


def canned(outputs: list[str], prompts=BUILT_IN) -> CanaryRun:  # type: ignore[no-untyped-def]
    return CanaryRun(
        url="http://x",
        model="m",
        setup=None,
        prompts=tuple(prompts),
        outputs=tuple(outputs),
        max_tokens=32,
        seed=0,
        completion_tokens=32 * len(outputs),
        duration_s=1.0,
    )


BASE = [f"{p.answer or ''} " + "abcdefghij" * 4 for p in BUILT_IN]


def diverge(outputs: list[str], indexes: range | list[int], at: int) -> list[str]:
    return [o[:at] + "#" + o[at + 1 :] if i in indexes else o for i, o in enumerate(outputs)]


def test_identical_outputs_pass() -> None:
    result = compare(canned(BASE), canned(list(BASE)))
    assert result.verdict is Verdict.IDENTICAL
    assert result.exact_match_rate == 1.0
    assert result.score_before == result.score_after == 1.0


def test_one_early_divergence_is_within_noise() -> None:
    after = diverge(BASE, [0], at=3)
    result = compare(canned(BASE), canned(after))
    assert result.verdict is Verdict.WITHIN_NOISE
    assert result.early_divergences == 1
    assert result.prompts[0].first_divergence == 3
    assert result.divergence_p_value == pytest.approx(1 - 0.95**12)


def test_half_the_prompts_diverging_early_is_worse() -> None:
    after = diverge(BASE, range(0, 12, 2), at=1)
    result = compare(canned(BASE), canned(after))
    assert result.verdict is Verdict.WORSE
    assert result.early_divergences == 6
    assert result.confidence > 0.999
    assert "6 diverged early" in result.summary


def test_late_divergences_everywhere_stay_within_noise() -> None:
    after = diverge(BASE, range(12), at=len(BASE[0]) - 2)
    result = compare(canned(BASE), canned(after))
    assert result.verdict is Verdict.WITHIN_NOISE
    assert result.exact_match_rate == 0.0
    assert result.early_divergences == 0


def test_lost_known_answers_are_worse_even_when_divergences_are_few() -> None:
    answered = [i for i, p in enumerate(BUILT_IN) if p.answer]
    after = [
        ("0" + o[len(BUILT_IN[i].answer or "") :]) if i in answered else o
        for i, o in enumerate(BASE)
    ]
    result = compare(canned(BASE), canned(after), noise_rate=0.5)
    assert result.score_before == 1.0
    assert result.score_after == 0.0
    assert result.score_p_value == pytest.approx(0.5 ** len(answered))
    assert result.verdict is Verdict.WORSE


def test_runs_of_different_prompt_sets_are_refused() -> None:
    other = replace(BUILT_IN[0], prompt="something else")
    with pytest.raises(InputError, match="different prompt sets"):
        compare(canned(BASE), canned(BASE, prompts=(other, *BUILT_IN[1:])))


def test_statistics_helpers() -> None:
    assert binomial_tail(0, 10, 0.3) == 1.0
    assert binomial_tail(10, 10, 0.5) == pytest.approx(0.5**10)
    assert first_divergence("abc", "abc") is None
    assert first_divergence("abc", "abd") == 2
    assert first_divergence("abc", "abcd") == 3


def test_canary_file_and_saved_runs_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "canary.json"
    path.write_text(json.dumps(["plain prompt", {"name": "q", "prompt": "2+2=", "answer": 4}]))
    prompts = load_canary(str(path))
    assert [p.name for p in prompts] == ["p0", "q"]
    assert prompts[1].correct(" 4, of course") is True
    assert prompts[1].correct(" five") is False
    run = canned(["a", "b"], prompts=prompts)
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(run.to_json()))
    assert CanaryRun.load(str(saved)) == run


@pytest.mark.parametrize(
    ("text", "message"),
    [("{", "not JSON"), ("[]", "non-empty"), ('[{"name": "x"}]', "no string 'prompt'")],
)
def test_bad_canary_files_are_refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_canary(str(path))


def sim_server(generate=None) -> SimServer:  # type: ignore[no-untyped-def]
    sim = SimulatedVllm(setup=SimSetup(spec_tokens=0))
    engine = CompletionsEngine(lambda: sim.setup, lambda b, s: 0.001)
    return SimServer(sim, completions=engine, generate=generate)


def test_run_against_the_simulated_server_is_greedy_and_repeatable() -> None:
    prompts = list(BUILT_IN)
    with sim_server() as server:
        first = run_canary(server.url, prompts, max_tokens=8)
        second = run_canary(server.url, prompts, max_tokens=8)
    assert first.outputs == tuple(greedy_text(p.prompt, 8) for p in prompts)
    assert first.completion_tokens == 8 * len(prompts)
    assert compare(first, second).verdict is Verdict.IDENTICAL


def test_a_server_that_answers_differently_is_caught() -> None:
    prompts = list(BUILT_IN)
    with sim_server() as server:
        before = run_canary(server.url, prompts, max_tokens=8)
    with sim_server(generate=lambda prompt, n: greedy_text(prompt + "!", n)) as server:
        after = run_canary(server.url, prompts, max_tokens=8)
    result = compare(before, after)
    assert result.verdict is Verdict.WORSE
    assert result.early_divergences == len(prompts)


def test_a_server_that_is_down_or_not_openai_is_a_canary_error() -> None:
    with pytest.raises(CanaryError, match="ConnectError"):
        run_canary("http://127.0.0.1:9", list(BUILT_IN), timeout_s=1)
    not_openai = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, json={})))
    with pytest.raises(CanaryError, match="not an OpenAI completions reply"):
        run_canary("http://x", list(BUILT_IN), client=not_openai)


def test_cli_saves_a_run_then_compares_and_exits_4_on_worse(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from autotuner.cli.main import app

    runner = CliRunner()
    saved = tmp_path / "before.json"
    with sim_server() as server:
        first = runner.invoke(app, ["canary", "--url", server.url, "--out", str(saved)])
        same = runner.invoke(app, ["canary", "--url", server.url, "--against", str(saved)])
    assert first.exit_code == 0, first.output
    assert "12 prompts" in first.output
    assert same.exit_code == 0, same.output
    assert "identical: 12/12 outputs identical" in same.output
    with sim_server(generate=lambda prompt, n: greedy_text(prompt + "!", n)) as server:
        worse = runner.invoke(app, ["canary", "--url", server.url, "--against", str(saved)])
    assert worse.exit_code == 4, worse.output
    assert "worse" in worse.output
    missing = runner.invoke(app, ["canary", "--url", "http://x", "--against", str(tmp_path / "no")])
    assert missing.exit_code == 2
    assert "canary run" in missing.output
