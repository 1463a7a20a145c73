"""The engine is chosen by settings (engine.kind, or source.kind sglang) or detected from what
the endpoint serves; the chosen engine's dialect, capability table and version endpoint follow."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotuner.core.types import Setup
from autotuner.engines.kinds import EngineKind, kind_of_command
from autotuner.engines.sglang.dialect import SglangDialect
from autotuner.engines.vllm.dialect import VllmDialect
from autotuner.errors import InputError
from autotuner.settings import Settings, SourceKind
from autotuner.sources.detect import detect, engine_version
from autotuner.wiring import settled_engine
from tests.support.pages import serving
from tests.support.sglang_exposition import Server, exposition


def test_engine_kind_sglang_brings_its_dialect_table_and_scrape() -> None:
    settings = Settings.model_validate({"engine": {"kind": "sglang"}})
    assert isinstance(settings.engine.dialect, SglangDialect)
    assert settings.source.kind is SourceKind.SGLANG
    build = settings.engine.capabilities.build
    assert build is not None
    assert build.describe().startswith("SGLang 0.5.23")
    capabilities = settings.engine.capabilities
    assert not capabilities.spec_schedule  # SGLang has no K schedule
    assert capabilities.accepts(Setup.parse("spec:3@adaptive"))
    refusal = capabilities.refusal(Setup.parse("spec:2@adaptive"))  # not a candidate step
    assert refusal is not None
    assert "1, 3, 5, 7" in refusal
    assert isinstance(Settings().engine.dialect, VllmDialect)  # the default stays vLLM


def test_source_kind_sglang_alone_sets_the_engine_and_a_contradiction_is_refused() -> None:
    assert Settings.model_validate({"source": {"kind": "sglang"}}).engine.kind is EngineKind.SGLANG
    with pytest.raises(ValueError, match=r"engine\.kind is sglang"):
        Settings.model_validate({"engine": {"kind": "sglang"}, "source": {"kind": "vllm"}})


def test_a_preset_with_an_engine_still_to_detect_is_refused() -> None:
    """A preset is one engine's: under `kind: auto` it would be read as vLLM's and then handed
    to SGLang once detected."""
    with pytest.raises(ValueError, match=r"set engine\.kind"):
        Settings.model_validate({"engine": {"kind": "auto", "capabilities": "build"}})
    chosen = Settings.model_validate({"engine": {"kind": "sglang", "capabilities": "build"}})
    assert chosen.engine.capabilities.adaptive_tiers  # SGLang's own preset


@pytest.mark.parametrize(
    ("pages", "expected"),
    [
        ({"/metrics": exposition(Server(running=3))}, EngineKind.SGLANG),
        (
            {"/metrics": "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"},
            EngineKind.VLLM,
        ),
        ({"/server_info": '{"version": "0.5.23"}'}, EngineKind.SGLANG),
        ({"/version": '{"version": "0.33.0"}'}, EngineKind.VLLM),
        ({}, None),
    ],
)
def test_the_engine_is_detected_from_what_it_serves(
    pages: dict[str, str], expected: EngineKind | None
) -> None:
    with serving(pages) as base:
        assert detect(f"{base}/metrics", deadline_s=5.0) is expected


def test_auto_settles_on_the_detected_engine_and_reads_server_info() -> None:
    with serving(
        {"/metrics": exposition(Server()), "/server_info": '{"version": "0.5.23"}'}
    ) as base:
        auto = Settings.model_validate(
            {"engine": {"kind": "auto"}, "source": {"urls": [f"{base}/metrics"]}}
        )
        settled = settled_engine(auto)
        assert settled.engine.kind is EngineKind.SGLANG
        assert settled.source.kind is SourceKind.SGLANG
        assert engine_version(base, 5.0, settled.engine.engine.version_path) == "0.5.23"
    with pytest.raises(InputError, match=r"set engine\.kind"):
        settled_engine(
            auto.model_copy(
                update={
                    "source": auto.source.model_copy(
                        update={"urls": ["http://127.0.0.1:9/metrics"], "timeout_s": 0.5}
                    )
                }
            )
        )


def test_auto_reads_the_targets_command_line_while_the_engine_is_not_up(tmp_path: Path) -> None:
    """A sidecar starts beside an engine still loading its weights: nothing answers on the
    source URL, and the target's command line says which engine it starts."""
    args = tmp_path / "engine.args"
    args.write_text("python3\n-m\nsglang.launch_server\n--model-path\nm\n")
    auto = Settings.model_validate(
        {
            "engine": {"kind": "auto"},
            "source": {"urls": ["http://127.0.0.1:9/metrics"], "timeout_s": 0.5},
            "target": {"uri": f"exec://{args}?restart=true"},
        }
    )
    assert settled_engine(auto).engine.kind is EngineKind.SGLANG


def test_a_command_line_names_its_engine() -> None:
    assert kind_of_command(["python3", "-m", "sglang.launch_server"], []) is EngineKind.SGLANG
    assert kind_of_command(["sh", "-c", "vllm serve m --max-num-seqs 8"], []) is EngineKind.VLLM
    assert kind_of_command(["/bin/server"], ["--port", "8"]) is None
