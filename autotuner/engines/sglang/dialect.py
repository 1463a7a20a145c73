"""SGLang's `Dialect`: its command line read and written (sglang 0.5.23's flags)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotuner.core.engine.args import EngineArgs, SpeculativeConfig
from autotuner.core.engine.builds import Companion
from autotuner.core.types import Setup
from autotuner.engines.companion_record import Spelling
from autotuner.engines.dialect import Dialect
from autotuner.engines.sglang import args as sglang_args
from autotuner.engines.sglang import builds, flags
from autotuner.engines.sglang import setup as sglang_setup
from autotuner.errors import InputError


@dataclass(frozen=True)
class SglangDialect(Dialect):
    name = "sglang"
    container_hint = sglang_setup.CONTAINER_HINT
    build_table = builds.TABLE

    @property
    def managed(self) -> frozenset[str]:
        return frozenset(flags.MANAGED)

    @property
    def spelling(self) -> Spelling:
        return sglang_setup.SPELLING

    def tokens(self, command: Sequence[str], args: Sequence[str]) -> list[str]:
        return sglang_setup.sglang_tokens(command, args)

    def live_args(self, command: Sequence[str], args: Sequence[str]) -> EngineArgs:
        return sglang_args.live_args(command, args)

    def served_model(self, tokens: Sequence[str]) -> str | None:
        return sglang_args.served_model_id(tokens)

    def parse(self, tokens: Sequence[str]) -> Setup:
        return sglang_setup.parse_setup(tokens)

    def speculative_config(
        self, command: Sequence[str], args: Sequence[str]
    ) -> dict[str, Any] | None:
        return sglang_setup.speculative_config(self.tokens(command, args))

    def drafter_of(self, saved: dict[str, Any] | None) -> SpeculativeConfig | None:
        try:
            return sglang_args.speculative(sglang_setup.saved_drafter(saved)) if saved else None
        except InputError:
            return None

    def write(self, tokens: Sequence[str], setup: Setup, **options: Any) -> list[str]:
        return sglang_setup.render(tokens, setup, **options)

    def companions_written(
        self, setup: Setup, companions: Sequence[Companion]
    ) -> tuple[Companion, ...]:
        return sglang_setup.companions_for(setup, companions)

    def setup_flags(self, setup: Setup, companions: Sequence[Companion]) -> list[str]:
        return sglang_setup.setup_flags(setup, companions)
