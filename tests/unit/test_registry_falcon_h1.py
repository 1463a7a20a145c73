"""Falcon-H1-0.5B's entry is its published config.json, byte for byte.

No public copy of the file was found; two projects publish what identifies it: its size,
SHA-256 and git blob id (the name the Hugging Face cache stores it under), for the Instruct
checkpoint and for the Base checkpoint's identical file. The entry's config, written as
transformers writes a config.json (sorted keys, two-space indent, a final newline), must give
those three values: a field added, dropped or changed anywhere fails here.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from autotuner.core.model.hf_config import from_hf_config
from autotuner.core.model.registry import registry

FALCON = "tiiuae/Falcon-H1-0.5B-Instruct"
# Where the published file's size and hashes were read: "owner/name@full-commit path".
RECORDS = (
    "SujeethJinesh/LatentWire@273e34bd3bbb5a25c6624b716325c2d4c0d3dd8b "
    "experimental/outlier_migrate/phase7/results/om_phase7_falcon_h1_20260512T223600Z/"
    "model_provenance.json",
    "liuhanzuo/qcomem@4e0d84fd212f75aa30ae1f442ed604c9f8e4ff63 "
    "paper_autonomous_multifork_iteration/evidence/r39_falcon_h1_transfer/preregistration/"
    "huggingface-tree.json",
)
PUBLISHED_SIZE = 1584
PUBLISHED_SHA256 = "73d036cc5e36429ba554c9e6d553571c0042af137e070380818980a7ef02b1ff"
PUBLISHED_BLOB = "12d90a0816165a2d3af5bd1c4deaa2afddd0a095"


def written(config: dict[str, Any]) -> bytes:
    """A config's bytes as transformers' `PretrainedConfig.to_json_file` writes them."""
    return (json.dumps(config, indent=2, sort_keys=True) + "\n").encode()


def identity(data: bytes) -> tuple[int, str, str]:
    """Size, SHA-256 and git blob id of a file's bytes."""
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    return len(data), hashlib.sha256(data).hexdigest(), blob


def test_the_entry_is_the_published_file_byte_for_byte() -> None:
    assert identity(written(registry()[FALCON].config)) == (
        PUBLISHED_SIZE,
        PUBLISHED_SHA256,
        PUBLISHED_BLOB,
    )


def test_the_entry_cites_where_the_hashes_were_published() -> None:
    first = registry()[FALCON].notes[0]
    assert "published config.json" in first
    assert all(record in first for record in RECORDS)
    assert PUBLISHED_SHA256 in first
    assert PUBLISHED_BLOB in first


def test_the_mixer_is_read_at_its_published_width() -> None:
    spec = from_hf_config(registry()[FALCON].config, name=FALCON, built_in="bfloat16")
    ssm = spec.ssm
    assert ssm is not None
    assert (ssm.heads, ssm.head_dim, ssm.state_size) == (24, 64, 128)
    assert ssm.heads * ssm.head_dim == registry()[FALCON].config["mamba_d_ssm"]
