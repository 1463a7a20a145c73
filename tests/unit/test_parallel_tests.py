"""How scripts/test.sh shares the suite out over xdist workers (tests/conftest.py)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from xdist.scheduler import LoadScopeScheduling

from tests.conftest import pytest_xdist_make_scheduler, work_unit


def test_the_real_vllm_tier_is_one_unit_of_work_and_every_other_test_its_own() -> None:
    tier = {
        work_unit("tests/vllm/test_real_vllm.py::test_bench_sweep_against_the_real_server"),
        work_unit("tests/vllm/test_real_hybrid.py::test_a_replay_refused_at_start_is_learned"),
    }
    assert tier == {"vllm"}
    others = ["tests/unit/test_state.py::test_a", "tests/unit/test_state.py::test_b"]
    assert [work_unit(nodeid) for nodeid in others] == others


def test_xdist_still_asks_the_method_the_scheduler_overrides() -> None:
    """Renamed upstream, the override would be silently ignored and the tier split."""
    assert callable(vars(LoadScopeScheduling).get("_split_scope"))


class _Options:
    """A config as far as the scheduler hook reads it: the options given."""

    def __init__(self, **options: object) -> None:
        self.options = options

    def getoption(self, name: str, default: object = None) -> object:
        return self.options.get(name, default)

    def getvalue(self, name: str) -> object:
        return self.options.get(name)


def test_the_tier_scheduler_runs_for_n_and_steps_aside_for_another_dist() -> None:
    def made(**options: object) -> Any:
        return pytest_xdist_make_scheduler(cast(pytest.Config, _Options(**options)), None)

    ours = made(dist="load", tx=["popen"] * 2, numprocesses=2)
    assert isinstance(ours, LoadScopeScheduling)
    assert ours._split_scope("tests/vllm/test_real_vllm.py::test_x") == "vllm"
    for dist in ("loadfile", "loadscope", "each"):
        assert made(dist=dist) is None, dist
