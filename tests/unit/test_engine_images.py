"""Only an image known to carry the engine names its version (issue 38: llm-d-cuda:v0.9.0 was
shown as "vLLM 0.9.0", Dynamo's sglang-runtime:1.3.0 as "vLLM 1.3.0", ubuntu:22.04 as 22.4)."""

from __future__ import annotations

import pytest

from autotuner.core.engine.builds import Origin
from autotuner.engines.build_table import image_version
from autotuner.engines.sglang.builds import TABLE as SGLANG
from autotuner.engines.vllm.builds import TABLE as VLLM


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("vllm/vllm-openai:v0.33.0", "0.33.0"),
        ("docker.io/vllm/vllm-openai:v0.32.0", "0.32.0"),
        ("registry.local:5000/vllm/vllm-openai:v0.33.0", "0.33.0"),  # a mirror keeps the tags
        ("docker.io/vllm/vllm-openai-cpu:v0.32.0", "0.32.0"),
    ],
)
def test_an_engine_image_names_its_version(image: str, version: str) -> None:
    build = VLLM.build_in_force(image=image)
    assert (build.version, build.origin) == (version, Origin.IMAGE_TAG)


@pytest.mark.parametrize(
    "image",
    [
        "ghcr.io/llm-d/llm-d-cuda:v0.9.0",
        "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.7.0",
        "aibrix/vllm-openai:v0.10.1-aibrix",  # another project's build of vLLM
        "ubuntu:22.04",
    ],
)
def test_another_images_tag_is_not_a_vllm_version(image: str) -> None:
    assert image_version(image) is not None  # the tag does read as a version...
    build = VLLM.build_in_force(image=image)
    assert build.origin is not Origin.IMAGE_TAG  # ...but not as vLLM's
    assert "is not a vLLM image" in build.detail


def test_sglang_reads_its_own_images_only() -> None:
    own = SGLANG.build_in_force(image="lmsysorg/sglang:v0.5.23-cu126")
    assert (own.version, own.origin) == ("0.5.23", Origin.IMAGE_TAG)
    dynamo = SGLANG.build_in_force(image="nvcr.io/nvidia/ai-dynamo/sglang-runtime:1.3.0")
    assert dynamo.origin is not Origin.IMAGE_TAG
    assert VLLM.build_in_force(image="lmsysorg/sglang:v0.5.23").origin is not Origin.IMAGE_TAG
