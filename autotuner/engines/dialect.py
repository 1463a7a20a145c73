"""What the actuators, the loop and the commands ask of a serving engine, whichever it is.

One `Dialect` per engine (today `vllm.dialect.VllmDialect`): it reads a container's command and
args into the core's engine-neutral values, writes a `Setup` back into them, and names the build
an image runs. Actuators hold a dialect instead of importing an engine, so a Deployment, a
LeaderWorkerSet or a file target patches vLLM and SGLang alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from autotuner.core.engine.args import EngineArgs, SpeculativeConfig
from autotuner.core.engine.builds import BuildInForce, Companion
from autotuner.core.types import Setup

# The operator's own tokens for the companion flags a setup made the tuner change.
Saved = dict[str, list[str] | None]
# New (command, args) for a setup, and the operator's companion record to keep.
Rendered = tuple[list[str], list[str], Saved | None]


class Dialect(Protocol):
    """An engine's command line, read and written; pure (no I/O)."""

    @property
    def name(self) -> str:
        """The engine, as settings and messages name it (e.g. `vllm`)."""

    @property
    def container_hint(self) -> str:
        """Among several containers, the engine's is the one whose name holds this."""

    @property
    def managed(self) -> frozenset[str]:
        """The flags that mark where in a container the engine's args sit."""

    def tokens(self, command: Sequence[str], args: Sequence[str]) -> list[str]:
        """The engine's argument list a container runs (command, args or a `sh -c` line)."""

    def live_args(self, command: Sequence[str], args: Sequence[str]) -> EngineArgs:
        """What a container's command line tells of the run."""

    def served_model(self, tokens: Sequence[str]) -> str | None:
        """The model the command line serves."""

    def setup_of(self, command: Sequence[str], args: Sequence[str]) -> Setup:
        """The Setup a container's command line configures."""

    def speculative_config(
        self, command: Sequence[str], args: Sequence[str]
    ) -> dict[str, Any] | None:
        """The drafter's configuration as deployed (kept to restore speculation later)."""

    def drafter_of(self, saved: dict[str, Any] | None) -> SpeculativeConfig | None:
        """A saved drafter (what `speculative_config` returned) read back leniently: None if
        unreadable."""

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
        """New (command, args) configuring `setup`, only the managed flags rewritten."""

    def setup_flags(self, setup: Setup, companions: Sequence[Companion]) -> list[str]:
        """A setup's own flags and its companions' as a reader would type them (for reports,
        not for writing: `render` writes)."""

    def saved_record(self, value: object) -> Saved | None:
        """The operator's companion record read back from the target (ArgsError if bad)."""

    def build_in_force(self, declared: str, *, image: str | None) -> BuildInForce:
        """The build the target runs: the declared version, else its image's tag."""
