import json
from pathlib import Path

import pytest

from autotuner.core.predict.hardware import datasheet, datasheets, load_profile, save_profile
from autotuner.errors import ProfileError

REQUIRED = ("A100-80GB", "H100-SXM", "H200", "GH200", "B200", "B300", "GB200", "L40S", "MI300X")


@pytest.mark.parametrize("name", REQUIRED)
def test_datasheets_cover_the_fleet(name: str) -> None:
    profile = datasheet(name.lower())
    assert profile.name == name
    assert profile.hbm_bytes_per_s > 0.5e12
    assert profile.bf16_flops > profile.fp32_flops
    assert profile.source == "datasheet"


def test_h200_figures() -> None:
    h200 = datasheet("H200")
    assert h200.hbm_bytes_per_s == pytest.approx(4.8e12)
    assert h200.memory_bytes == pytest.approx(141e9)


def test_gh200_is_an_h100_with_96_gb_of_hbm3() -> None:
    gh200, h100 = datasheet("GH200"), datasheet("H100-SXM")
    assert gh200.hbm_bytes_per_s == pytest.approx(4.0e12)
    assert gh200.memory_bytes == pytest.approx(96e9)
    assert (gh200.bf16_flops, gh200.fp8_flops) == (h100.bf16_flops, h100.fp8_flops)


def test_profile_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    save_profile(datasheet("H200"), path)
    assert load_profile(path) == datasheet("H200")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{broken", "not a JSON profile"),
        ("[1, 2]", "a profile is a JSON object"),
        (json.dumps({"schema_version": 99, "name": "x"}), "schema_version 99"),
        (json.dumps({"name": "x"}), "schema_version None"),
    ],
)
def test_bad_profiles_are_refused(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(ProfileError, match=message):
        load_profile(path)


def test_invalid_field_is_named(tmp_path: Path) -> None:
    raw = json.loads(datasheet("H200").model_dump_json())
    raw["hbm_bytes_per_s"] = -1
    path = tmp_path / "p.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ProfileError, match="hbm_bytes_per_s"):
        load_profile(path)


def test_missing_file_and_unknown_gpu() -> None:
    with pytest.raises(ProfileError, match="cannot read"):
        load_profile("/nonexistent/profile.json")
    with pytest.raises(ProfileError, match="unknown GPU"):
        datasheet("TPU")
    assert set(REQUIRED) <= set(datasheets())
