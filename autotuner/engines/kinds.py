"""Which serving engine the tuner works with, and that engine's package behind one value: its
Dialect, its capability presets and table, where it says its version, how its series are
named. `engine.kind` in settings names it (`auto`: detected from the served /metrics)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from autotuner.core.engine.capabilities import BUILD, EngineCapabilities
from autotuner.core.vocabulary import Word
from autotuner.engines import build_table
from autotuner.engines.dialect import Dialect
from autotuner.engines.sglang import builds as sglang_builds
from autotuner.engines.sglang import capabilities as sglang_capabilities
from autotuner.engines.sglang.dialect import SglangDialect
from autotuner.engines.vllm import builds as vllm_builds
from autotuner.engines.vllm import capabilities as vllm_capabilities
from autotuner.engines.vllm.dialect import VllmDialect
from autotuner.engines.vllm.flags import FlagNames
from autotuner.errors import InputError


class EngineKind(Word):
    """The serving engine: vLLM, SGLang, or `auto` (read from what the engine serves)."""

    VLLM = "vllm"
    SGLANG = "sglang"
    AUTO = "auto"


@dataclass(frozen=True)
class Engine:
    """One engine's package, as the settings, the loop and the commands need it."""

    kind: EngineKind
    presets: dict[str, EngineCapabilities]
    table: build_table.BuildTable
    version_path: str  # the GET endpoint whose JSON carries {"version": ...}
    metrics_prefix: str  # how its Prometheus series begin

    @property
    def follow_build(self) -> EngineCapabilities:
        return self.presets[BUILD]

    def dialect(self, flags: FlagNames | None = None) -> Dialect:
        """Its command line, read and written (vLLM's with these flag names)."""
        if self.kind is EngineKind.SGLANG:
            return SglangDialect()
        return VllmDialect(flags or FlagNames())


ENGINES = {
    EngineKind.VLLM: Engine(
        EngineKind.VLLM, vllm_capabilities.PRESETS, vllm_builds.TABLE, "/version", "vllm:"
    ),
    EngineKind.SGLANG: Engine(
        EngineKind.SGLANG,
        sglang_capabilities.PRESETS,
        sglang_builds.TABLE,
        "/server_info",
        "sglang:",
    ),
}


def engine(kind: EngineKind | str) -> Engine:
    """The engine a settled kind names (`auto` must be detected first: InputError)."""
    chosen = EngineKind(kind)
    if chosen is EngineKind.AUTO:
        raise InputError("engine.kind is auto: the engine must be detected before it is used")
    return ENGINES[chosen]


def kind_of_command(command: Sequence[str], args: Sequence[str]) -> EngineKind | None:
    """The engine a container's command line starts, from the first word that runs one (`vllm
    serve`, `/usr/bin/vllm`, `python -m vllm.entrypoints...`, `python3 -m sglang.launch_server`,
    `sglang serve`, Dynamo's `python3 -m dynamo.sglang`, also inside a `sh -c` script), or None
    when no word does. A word that only mentions an engine (a model `org/sglang-finetune`, a
    path `/models/vllm-cache`) names none."""
    for word in _WORD_BREAK.split(" ".join([*command, *args])):
        kind = _engine_word(word)
        if kind is not None:
            return kind
    return None


# Words of a command line or a script: split at blanks, quotes and the shell's separators.
_WORD_BREAK = re.compile(r"""[\s'"`;&|()=]+""")


def _engine_word(word: str) -> EngineKind | None:
    """The engine a word runs: an executable named after it, its module, or Dynamo's worker."""
    base = word.rsplit("/", 1)[-1]
    module = base.removeprefix("dynamo.")
    for kind in (EngineKind.SGLANG, EngineKind.VLLM):
        name = kind.value
        if base == name or module == name or module.startswith(name + "."):
            return kind
    return None
