"""vLLM's `Dialect`: its command line read and written with the operator's flag spellings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from autotuner.core.engine.args import EngineArgs, SpeculativeConfig
from autotuner.core.engine.builds import BuildInForce, Companion
from autotuner.core.types import Setup
from autotuner.engines.companion_record import saved_record
from autotuner.engines.dialect import Rendered, Saved
from autotuner.engines.vllm import args as vllm_args
from autotuner.engines.vllm import builds
from autotuner.engines.vllm import setup as vllm_setup
from autotuner.engines.vllm.companions import spelled
from autotuner.engines.vllm.flags import FlagNames


@dataclass(frozen=True)
class VllmDialect:
    names: FlagNames = field(default_factory=FlagNames)

    @property
    def name(self) -> str:
        return "vllm"

    @property
    def container_hint(self) -> str:
        return vllm_setup.CONTAINER_HINT

    @property
    def managed(self) -> frozenset[str]:
        return frozenset(self.names.managed)

    def tokens(self, command: Sequence[str], args: Sequence[str]) -> list[str]:
        return vllm_setup.vllm_tokens(command, args, self.names)

    def live_args(self, command: Sequence[str], args: Sequence[str]) -> EngineArgs:
        return vllm_args.live_args(command, args, self.names)

    def served_model(self, tokens: Sequence[str]) -> str | None:
        return vllm_args.served_model_id(tokens)

    def setup_of(self, command: Sequence[str], args: Sequence[str]) -> Setup:
        return vllm_setup.container_setup(command, args, self.names)

    def speculative_config(
        self, command: Sequence[str], args: Sequence[str]
    ) -> dict[str, Any] | None:
        return vllm_setup.container_speculative_config(command, args, self.names)

    def drafter_of(self, saved: dict[str, Any] | None) -> SpeculativeConfig | None:
        return vllm_args.speculative_of(saved)

    def render(
        self,
        command: Sequence[str],
        args: Sequence[str],
        setup: Setup,
        *,
        saved_speculative_config: dict[str, Any] | None,
        allow_low_precision_replay: bool,
        companions: Sequence[Companion] = (),
        saved_companions: Saved | None = None,
    ) -> Rendered:
        return vllm_setup.render_container(
            command,
            args,
            setup,
            names=self.names,
            saved_speculative_config=saved_speculative_config,
            allow_low_precision_replay=allow_low_precision_replay,
            companions=tuple(companions),
            saved_companions=saved_companions,
        )

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

    def saved_record(self, value: object) -> Saved | None:
        return saved_record(value)

    def build_in_force(self, declared: str, *, image: str | None) -> BuildInForce:
        return builds.build_in_force(declared, image=image)
