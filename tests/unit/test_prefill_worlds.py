"""The long-prompt worlds of the decision-quality benchmark: the prompts' prefill shrinks what
speculation and replay gain (or lose) against plain decoding."""

from __future__ import annotations

import math

from autotuner.core.types import PLAIN, Setup
from autotuner.sim.prefill_worlds import PREFILL_ERROR, prefill_worlds


def test_long_prompts_shrink_the_gain_the_world_really_gives() -> None:
    worlds = prefill_worlds()
    long, chat = worlds["long-prompts"], worlds["chat"]
    spec, replay_spec = Setup(spec_tokens=3), Setup(spec_tokens=3, replay_window=16)
    for t in (3 * 3600.0, 12 * 3600.0):  # the night's low load, the afternoon peak
        for setup in (spec, replay_spec):
            long_gain = long.tokens_per_s(setup, t) / long.tokens_per_s(PLAIN, t)
            chat_gain = chat.tokens_per_s(setup, t) / chat.tokens_per_s(PLAIN, t)
            # Toward 1 from either side: the prefill dilutes a loss as it dilutes a gain.
            assert abs(math.log(long_gain)) < abs(math.log(chat_gain)), (setup.label, t)
    night = 3 * 3600.0
    assert long.tokens_per_s(spec, night) / long.tokens_per_s(PLAIN, night) > 1.0
    # The world prices prefill apart from the model the policy is told.
    assert PREFILL_ERROR != 1.0
    assert long.prior.workload.prompt_tokens == 8192
    assert long.prior.workload.generation_tokens == 512
