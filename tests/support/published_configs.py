"""Checks shared by the registry tests that hold an entry to the published config.json it
cites: every field the cost model reads, transcribed by hand from the cited copy, and the
citation of that verbatim copy as owner/name@full-commit path."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from autotuner.core.model.registry import registry

Config = dict[str, Any]
# The fields of a config as the cost model reads them (a reader may look under text_config).
Fields = Callable[[Config], Config]

VERBATIM_SOURCE = re.compile(r"\b[\w.-]+/[\w.-]+@[0-9a-f]{40} \S+config\.json\b")


def differences(config: Config, published: Config, fields: Fields = lambda c: c) -> list[str]:
    """Each published field the entry does not hold, said as entry against published."""
    read = fields(config)
    return [
        f"{name}: entry {read.get(name)!r}, published {value!r}"
        for name, value in published.items()
        if read.get(name) != value
    ]


def assert_holds_published(model_id: str, published: Config, fields: Fields = lambda c: c) -> None:
    """The entry holds every published field, and a drifted KV head count is named."""
    config = registry()[model_id].config
    assert differences(config, published, fields) == []
    drifted = copy.deepcopy(config)
    drifted.get("text_config", drifted)["num_key_value_heads"] += 1
    assert differences(drifted, published, fields) == [
        f"num_key_value_heads: entry {published['num_key_value_heads'] + 1}, "
        f"published {published['num_key_value_heads']}"
    ]


def assert_cites_verbatim_copy(model_id: str, source: str) -> None:
    """The entry's first note says it is the published config.json, copied verbatim at
    `source` (owner/name@full-commit path)."""
    first = registry()[model_id].notes[0]
    assert "published config.json" in first
    assert "verbatim" in first
    assert source in first
    assert VERBATIM_SOURCE.search(first)
