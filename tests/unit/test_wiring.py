"""Wiring reads the model as the engine runs it: the live --mamba-ssm-cache-dtype of the target
(or the settings' override) decides the SSM state's size, not only the config's own field."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotuner.core.types import Setup
from autotuner.settings import Settings, cli_overrides, load_settings
from autotuner.sim.deployment import demo_manifest
from autotuner.wiring import _actuator, served_model

GRANITE = "ibm-granite/granite-4.0-h-small-BF16"


def settings_for(manifest: Path, *extra: str) -> Settings:
    pairs = [f"model.id={GRANITE}", f"target.uri=file://{manifest}", *extra]
    return load_settings(cli=cli_overrides(pairs))[0]


def manifest(tmp_path: Path, *flags: str) -> Path:
    text = demo_manifest(GRANITE, Setup(spec_tokens=3))
    extra = "".join(f"\n            - {flag}" for flag in flags)
    text = text.replace('            - "1024"', '            - "1024"' + extra)
    path = tmp_path / "vllm.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("flags", "overrides", "expected"),
    [
        ((), (), None),  # as vLLM resolves it from the config
        (("--mamba-ssm-cache-dtype", "float32"), (), "float32"),
        (("--mamba-ssm-cache-dtype=float32",), (), "float32"),
        (("--mamba-ssm-cache-dtype", "float32"), ("model.ssm_state_dtype=bfloat16",), "bfloat16"),
    ],
    ids=["config", "live flag", "live flag joined", "settings override"],
)
def test_the_ssm_state_dtype_follows_the_live_args(
    tmp_path: Path, flags: tuple[str, ...], overrides: tuple[str, ...], expected: str | None
) -> None:
    settings = settings_for(manifest(tmp_path, *flags), *overrides)
    actuator = _actuator(settings, settings.target.uri, "test")
    model = served_model(settings, actuator)
    from_config = served_model(settings_for(manifest(tmp_path)), None)
    assert from_config.ssm_state_dtype == "bfloat16"  # Granite-4.0-H: vLLM follows the model
    assert model.ssm_state_dtype == (expected or "bfloat16")
    ratio = model.ssm_state_bytes_per_request / from_config.ssm_state_bytes_per_request
    assert ratio == pytest.approx(2.0 if model.ssm_state_dtype == "float32" else 1.0)


def test_a_weights_override_changes_the_weight_bytes(tmp_path: Path) -> None:
    path = manifest(tmp_path)
    bf16 = served_model(settings_for(path), None)
    nvfp4 = served_model(settings_for(path, "model.weights=nvfp4"), None)
    assert nvfp4.weight_bytes < bf16.weight_bytes / 2.5


def test_the_ssm_state_dtype_is_read_from_a_shell_command_line(tmp_path: Path) -> None:
    """`command: [sh, -c, "vllm serve ..."]` is how many charts start vLLM: the dtype given
    there counts as much as one in `args`."""
    text = demo_manifest(GRANITE, Setup(spec_tokens=3))
    head, _, _ = text.partition("          args:")
    line = f"vllm serve {GRANITE} --max-num-seqs 1024 --mamba-ssm-cache-dtype float32"
    shell = f'          command: ["sh", "-c", "{line}"]\n'
    path = tmp_path / "vllm.yaml"
    limits = '          resources:\n            limits: {nvidia.com/gpu: "1"}\n'
    path.write_text(head + shell + limits)
    settings = settings_for(path)
    model = served_model(settings, _actuator(settings, settings.target.uri, "test"))
    assert model.ssm_state_dtype == "float32"
