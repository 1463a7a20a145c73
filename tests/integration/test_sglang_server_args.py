"""SGLang 0.5.23's own validation of the args the tuner writes: each rendered setup is parsed
and resolved by the wheel's `prepare_server_args` and `ServerArgs.resolve_once` (the checks the
server runs before it listens), on CPU, for a Qwen3-Next config (a Gated DeltaNet hybrid).

Needs an interpreter where sglang 0.5.23 imports: AUTOTUNER_SGLANG_PYTHON names it (a throwaway
venv: `pip install --no-deps sglang==0.5.23` and the modules its server_args import: numpy,
torch (CPU), transformers, msgspec, ...). Without one the tier skips, saying so; the same rules,
restated with file and line, run everywhere (tests/unit/test_sglang_args.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from autotuner.core.engine.builds import BuildInForce
from autotuner.core.types import Setup
from autotuner.engines.sglang.capabilities import FOLLOW_BUILD
from autotuner.engines.sglang.dialect import SglangDialect
from tests.support.sglang_rules import broken

PYTHON = os.environ.get("AUTOTUNER_SGLANG_PYTHON", "")
REGISTRY = Path(__file__).resolve().parents[2] / "autotuner/core/model/data/models"
# Resolve each argument list in one child process; print each one's error, or null.
CHILD = """
import json, logging, sys
logging.disable(logging.CRITICAL)
from sglang.srt.server_args import prepare_server_args
out = []
for argv in json.load(sys.stdin):
    try:
        prepare_server_args(argv).resolve_once()
        out.append(None)
    except BaseException as exc:
        out.append(f"{type(exc).__name__}: {exc}")
print("RESULT " + json.dumps(out))
"""
# The CPU platform has no Mamba state snapshots, so the operator's own args there already name
# the no_buffer strategy (and the scheduler it needs); on GPUs `auto` is extra_buffer.
CPU = ["--device", "cpu", "--load-format", "dummy", "--skip-tokenizer-init"]
SETUPS = ["spec:3", "spec:1", "replay:16", "replay:64", "replay+spec:3:16", "spec:3@adaptive"]

pytestmark = pytest.mark.skipif(
    not PYTHON,
    reason="no interpreter with sglang 0.5.23: set AUTOTUNER_SGLANG_PYTHON to run SGLang's own "
    "validation of the rendered args (the restated rules ran in tests/unit/test_sglang_args.py)",
)


def _model_dir(tmp_path: Path) -> Path:
    config = json.loads((REGISTRY / "qwen3-next-80b-a3b-instruct.json").read_text())["config"]
    config.update(max_position_embeddings=262144, rms_norm_eps=1e-6, intermediate_size=5120)
    config.update(rope_theta=10_000_000, partial_rotary_factor=0.25)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def _resolve(argvs: list[list[str]]) -> list[str | None]:
    done = subprocess.run(
        [PYTHON, "-c", CHILD],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        timeout=540,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stderr[-2000:]
    result: list[str | None] = json.loads(lines[-1].removeprefix("RESULT "))
    return result


def test_sglang_resolves_every_setup_the_tuner_writes(tmp_path: Path) -> None:
    model = _model_dir(tmp_path)
    base = [
        "--model-path",
        str(model),
        *CPU,
        "--max-running-requests",
        "64",
        "--mamba-radix-cache-strategy",
        "no_buffer",
        "--disable-overlap-schedule",
    ]
    drafter = ["--speculative-algorithm", "NEXTN"]
    build = FOLLOW_BUILD.build
    assert isinstance(build, BuildInForce)
    row = build.row("gated_deltanet")
    assert row is not None
    rendered = []
    for label in SETUPS:
        setup = Setup.parse(label)
        command, _, _ = SglangDialect().render(
            base,
            [],
            setup,
            saved_speculative_config={"args": drafter},
            allow_low_precision_replay=False,
            companions=row.companions(setup),
        )
        assert broken(command) == []
        rendered.append(command)
    # The refusals the restated rules name are SGLang's too: replay with `auto` (extra_buffer).
    refused = [*base[: base.index("--mamba-radix-cache-strategy")], "--enable-linear-replayssm"]
    assert broken(refused)
    errors = _resolve([base, *rendered, refused])
    assert errors[:-1] == [None] * (1 + len(SETUPS)), dict(
        zip(["plain", *SETUPS], errors, strict=False)
    )
    assert errors[-1] is not None
