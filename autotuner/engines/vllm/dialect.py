"""vLLM's `Dialect`: its command line read and written with the operator's flag spellings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from autotuner.core.engine.args import EngineArgs, SpeculativeConfig
from autotuner.core.engine.builds import Companion
from autotuner.core.types import Setup
from autotuner.engines.companion_record import Spelling
from autotuner.engines.dialect import Dialect
from autotuner.engines.vllm import args as vllm_args
from autotuner.engines.vllm import builds
from autotuner.engines.vllm import setup as vllm_setup
from autotuner.engines.vllm.companions import SPELLING, spelled
from autotuner.engines.vllm.flags import FlagNames


@dataclass(frozen=True)
class VllmDialect(Dialect):
    names: FlagNames = field(default_factory=FlagNames)

    name = "vllm"
    container_hint = vllm_setup.CONTAINER_HINT
    build_table = builds.TABLE

    @property
    def managed(self) -> frozenset[str]:
        return frozenset(self.names.managed)

    @property
    def spelling(self) -> Spelling:
        return SPELLING

    @property
    def drafter_flag(self) -> str | None:
        return self.names.speculative_config

    def tokens(self, command: Sequence[str], args: Sequence[str]) -> list[str]:
        return vllm_setup.vllm_tokens(command, args, self.names)

    def live_args(self, command: Sequence[str], args: Sequence[str]) -> EngineArgs:
        return vllm_args.live_args(command, args, self.names)

    def served_model(self, tokens: Sequence[str]) -> str | None:
        return vllm_args.served_model_id(tokens)

    def parse(self, tokens: Sequence[str]) -> Setup:
        return vllm_setup.parse_setup(tokens, self.names)

    def speculative_config(
        self, command: Sequence[str], args: Sequence[str]
    ) -> dict[str, Any] | None:
        return vllm_setup.container_speculative_config(command, args, self.names)

    def drafter_of(self, saved: dict[str, Any] | None) -> SpeculativeConfig | None:
        return vllm_args.speculative_of(saved)

    def write(self, tokens: Sequence[str], setup: Setup, **options: Any) -> list[str]:
        return vllm_setup.render(tokens, setup, names=self.names, **options)

    def companions_written(
        self, setup: Setup, companions: Sequence[Companion]
    ) -> tuple[Companion, ...]:
        return tuple(companions)  # the build's, as its capability rows name them

    def setup_flags(self, setup: Setup, companions: Sequence[Companion]) -> list[str]:
        own = []
        if setup.spec_tokens:
            own.append(
                f'{self.names.speculative_config} \'{{..., "num_speculative_tokens": '
                f"{setup.spec_tokens}}}'"
            )
        if setup.replay_window:
            own.append(
                f"{self.names.use_replayssm} {self.names.replayssm_buffer_len} "
                f"{setup.replay_window}"
            )
        return own + [spelled(c) for c in companions]
