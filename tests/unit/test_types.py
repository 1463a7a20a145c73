"""Setup labels: what parses, what is refused and why, and the per-batch K schedule."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from autotuner.core.types import Setup, SetupKind
from autotuner.errors import InputError


@pytest.mark.parametrize(
    ("text", "k", "window", "kind"),
    [
        ("plain", 0, 0, SetupKind.PLAIN),
        ("spec:3", 3, 0, SetupKind.SPEC),
        ("replay:16", 0, 16, SetupKind.REPLAY),
        ("replay+spec:4:16", 4, 16, SetupKind.REPLAY_SPEC),
    ],
)
def test_parse(text: str, k: int, window: int, kind: SetupKind) -> None:
    setup = Setup.parse(text)
    assert (setup.spec_tokens, setup.replay_window, setup.kind) == (k, window, kind)
    assert setup.label == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "cannot read setup ''"),
        ("spec", "spec takes 1 number"),
        ("spec:0", "K must be >= 1"),
        ("replay:1", "replay window L must be >= 2"),
        ("replay+spec:3", r"replay\+spec takes 2 number"),
        ("fast", "cannot read setup 'fast'"),
        ("spec:3@1-64", "use start-end:K"),
        ("spec:2@1-8:3", "band K=3 exceeds num_speculative_tokens=2"),
        ("spec:3@1-64:3,32-128:1", "bands must be sorted and must not overlap"),
        ("spec:99", "less than or equal to 16"),
    ],
)
def test_bad_setups_are_refused_with_a_message(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        Setup.parse(text)


def test_schedule_picks_k_per_band_and_falls_back_to_static_k() -> None:
    setup = Setup.parse("spec:3@1-64:3,65-128:1,129-512:0")
    k = setup.spec_tokens_at([1, 64, 65, 128, 129, 512, 600])
    assert k.tolist() == [3, 3, 1, 1, 0, 0, 3]
    assert Setup.parse(setup.label) == setup


@given(st.integers(0, 16), st.sampled_from([0, 2, 8, 16, 32]))
def test_label_round_trips(k: int, window: int) -> None:
    setup = Setup(spec_tokens=k, replay_window=window)
    assert Setup.parse(setup.label) == setup
    assert np.all(setup.spec_tokens_at([1, 100]) == k)
