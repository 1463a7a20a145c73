"""The engine a container's command line starts, read from the word that runs it (issue 38:
SGLang objects were shown as vLLM by `status`; a substring would flip on a model's name)."""

from __future__ import annotations

import pytest

from autotuner.engines.kinds import EngineKind, kind_of_command

SCRIPT = "set -ex\npip list | grep vllm-router\nexec python3 -m sglang.launch_server --tp $TP \\\n"


@pytest.mark.parametrize(
    ("command", "args", "kind"),
    [
        (["python3", "-m", "sglang.launch_server"], ["--model-path", "m"], EngineKind.SGLANG),
        (["python3", "sglang.launch_server"], [], EngineKind.SGLANG),  # an LWS worker's form
        (["sglang", "serve"], ["--model-path", "m"], EngineKind.SGLANG),
        (["python3", "-m", "dynamo.sglang"], ["--model-path", "m"], EngineKind.SGLANG),
        (["vllm", "serve"], ["org/sglang-finetune"], EngineKind.VLLM),  # a model's name
        (["/usr/local/bin/vllm"], ["serve", "m"], EngineKind.VLLM),
        (["python3", "-m", "vllm.entrypoints.openai.api_server"], [], EngineKind.VLLM),
        (["python3", "-m", "dynamo.vllm"], ["--model", "m"], EngineKind.VLLM),
        (["/bin/bash", "-c"], ["exec vllm serve $MODEL \\\n  --port 8000"], EngineKind.VLLM),
        (["sh", "-c", SCRIPT], [], EngineKind.SGLANG),  # `vllm-router` is not vLLM
        (["sh", "-c", "ray start --block"], [], None),
        ([], ["--model", "/models/vllm-cache/llama"], None),
    ],
)
def test_the_word_that_runs_the_engine_names_it(
    command: list[str], args: list[str], kind: EngineKind | None
) -> None:
    assert kind_of_command(command, args) is kind
