"""The Qwen3.5-on-SGLang world: speculation below plain decoding at batch 512 (the headline
case), replay with speculation above both, each setup run as SGLang 0.5.23 runs it."""

from __future__ import annotations

import pytest

from autotuner.core.types import Setup
from autotuner.sim.days import DAY
from autotuner.sim.worlds import qwen_sglang_world

WORLD = qwen_sglang_world()
NOON = DAY / 2  # the day's peak: demand 512


def test_the_day_reaches_batch_512_where_speculation_falls_below_plain() -> None:
    assert WORLD.demand(NOON) == 512
    plain = WORLD.tokens_per_s(Setup(), NOON)
    spec = WORLD.tokens_per_s(Setup(spec_tokens=3), NOON)
    replay_spec = WORLD.tokens_per_s(Setup(spec_tokens=3, replay_window=16), NOON)
    assert spec < plain < replay_spec


def test_replay_with_speculation_verifies_through_the_draft_maximum() -> None:
    sixteen = WORLD.tokens_per_s(Setup(spec_tokens=3, replay_window=16), NOON)
    assert WORLD.tokens_per_s(Setup(spec_tokens=3, replay_window=8), NOON) == sixteen
    assert WORLD.tokens_per_s(Setup(spec_tokens=3, replay_window=4), NOON) == sixteen


def test_adaptive_speculation_drafts_nothing_from_batch_64() -> None:
    adaptive = Setup(spec_tokens=3, adaptive=True)
    observed = WORLD.observation(adaptive, NOON, 300.0)
    assert observed.acceptance is None or observed.acceptance.drafts == 0
    early = WORLD.observation(adaptive, 600.0, 300.0)  # demand about 4: the first tier drafts
    assert early.acceptance is not None
    assert early.acceptance.drafts > 0


def test_a_scrape_reads_only_the_mean_accepted_length() -> None:
    stats = WORLD.observation(Setup(spec_tokens=3), 600.0, 300.0).acceptance
    assert stats is not None
    assert stats.note is not None
    assert "geometric fit" in stats.note
    first = stats.per_position[0]
    assert stats.per_position == pytest.approx([first] * 3)  # one rate: no more is known
    rates = WORLD.acceptance(600.0)
    truth = 1 + rates[0] + rates[0] * rates[1] + rates[0] * rates[1] * rates[2]
    assert stats.tau == pytest.approx(truth)
