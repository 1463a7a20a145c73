import pytest

from tests.support.fixtures import FIXTURES

FIXTURE = FIXTURES / "vllm_cpu_spec_ngram.metrics.txt"


@pytest.fixture(scope="session")
def vllm_capture() -> str:
    """The real vLLM CPU capture from ../shared/fixtures (ngram speculation, K=3)."""
    if not FIXTURE.is_file():
        pytest.fail(f"the shared fixture is missing: {FIXTURE}")
    return FIXTURE.read_text()
