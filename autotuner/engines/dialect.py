"""What the actuators, the loop and the commands ask of a serving engine, whichever it is.

One `Dialect` per engine (`vllm.dialect.VllmDialect`, `sglang.dialect.SglangDialect`): it
reads a container's command and args into the core's engine-neutral values, writes a `Setup`
back into them, and names the build an image runs. Actuators hold a dialect instead of
importing an engine, so a Deployment, a LeaderWorkerSet or a file target patches vLLM and
SGLang alike.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from autotuner.core.engine.args import EngineArgs, SpeculativeConfig
from autotuner.core.engine.builds import BuildInForce, Companion
from autotuner.core.types import Setup
from autotuner.engines.build_table import BuildTable
from autotuner.engines.commandline import edit_container
from autotuner.engines.companion_record import Saved, Spelling, render_companions
from autotuner.engines.drafter_place import DRAFTER, drafter_record, placed

# New (command, args) for a setup, and the operator's companion record to keep.
Rendered = tuple[list[str], list[str], Saved | None]


class Dialect(ABC):
    """An engine's command line, read and written; pure (no I/O). Each engine says how it
    reads and writes its own flags; how a setup and its companion flags are written into a
    container, and the operator's companion flags put back, is the same for every engine."""

    name: ClassVar[str]  # the engine, as settings and messages name it (e.g. `vllm`)
    # Among several containers, the engine's is the one whose name holds this.
    container_hint: ClassVar[str]
    build_table: ClassVar[BuildTable]  # the builds this engine ships and what each accepts

    @property
    @abstractmethod
    def managed(self) -> frozenset[str]:
        """The flags that mark where in a container the engine's args sit."""

    @property
    @abstractmethod
    def spelling(self) -> Spelling:
        """Where the engine's companion flags stand in its args, and how they are written."""

    @abstractmethod
    def tokens(self, command: Sequence[str], args: Sequence[str]) -> list[str]:
        """The engine's argument list a container runs (command, args or a `sh -c` line)."""

    @abstractmethod
    def live_args(self, command: Sequence[str], args: Sequence[str]) -> EngineArgs:
        """What a container's command line tells of the run."""

    @abstractmethod
    def served_model(self, tokens: Sequence[str]) -> str | None:
        """The model the command line serves."""

    @abstractmethod
    def parse(self, tokens: Sequence[str]) -> Setup:
        """The Setup an engine argument list configures."""

    @abstractmethod
    def speculative_config(
        self, command: Sequence[str], args: Sequence[str]
    ) -> dict[str, Any] | None:
        """The drafter's configuration as deployed (kept to restore speculation later)."""

    @abstractmethod
    def drafter_of(self, saved: dict[str, Any] | None) -> SpeculativeConfig | None:
        """A saved drafter (what `speculative_config` returned) read back leniently: None if
        unreadable."""

    @abstractmethod
    def write(self, tokens: Sequence[str], setup: Setup, **options: Any) -> list[str]:
        """An engine argument list configuring `setup` (`options`: saved_speculative_config,
        allow_low_precision_replay): only the managed flags rewritten, the untouched args keep
        their bytes and order."""

    @abstractmethod
    def companions_written(
        self, setup: Setup, companions: Sequence[Companion]
    ) -> tuple[Companion, ...]:
        """The companion flags to write for `setup`, of those the build needs (`companions`)."""

    @abstractmethod
    def setup_flags(self, setup: Setup, companions: Sequence[Companion]) -> list[str]:
        """A setup's own flags and its companions' as a reader would type them (for reports,
        not for writing: `render` writes)."""

    @property
    def drafter_flag(self) -> str | None:
        """The one flag that carries the operator's drafter, where there is one: turning
        speculation off and on again puts it back where and as it stood (drafter_place.py)."""
        return None

    def build_in_force(self, declared: str, *, image: str | None) -> BuildInForce:
        """The build the target runs: the declared version, else its image's tag."""
        return self.build_table.build_in_force(declared, image=image)

    def setup_of(self, command: Sequence[str], args: Sequence[str]) -> Setup:
        """The Setup a container's command line configures."""
        return self.parse(self.tokens(command, args))

    def render_args(
        self,
        tokens: Sequence[str],
        setup: Setup,
        *,
        companions: Sequence[Companion] = (),
        saved_companions: Saved | None = None,
        saved_speculative_config: dict[str, Any] | None = None,
        allow_low_precision_replay: bool = False,
        enforce_rules: bool = True,
    ) -> tuple[list[str], Saved | None]:
        """`write`, with the companion flags the build needs for `setup` written and those it
        no longer needs put back as the operator had them (`saved_companions`); the record of
        the operator's tokens to keep on the target. Args that already configure `setup` are
        kept as they are. A setup the engine would refuse at start on these args raises
        EngineRuleError unless `enforce_rules` is off (`apply --force`)."""
        running = self.parse(tokens)
        if setup == running:
            return list(tokens), saved_companions
        saved = dict(saved_companions or {})
        drafter = saved.pop(DRAFTER, None)
        written = self.write(
            tokens,
            setup,
            saved_speculative_config=saved_speculative_config,
            allow_low_precision_replay=allow_low_precision_replay,
            enforce_rules=enforce_rules,
        )
        flag = self.drafter_flag
        if flag is not None and setup.spec_tokens:
            written = placed(written, flag, drafter) if drafter else written
            drafter = None  # back where it stood: nothing left to keep
        elif flag is not None and running.spec_tokens:
            drafter = drafter_record(tokens, flag)  # turned off now: keep where it stood
        wanted = self.companions_written(setup, companions)
        out, record = render_companions(written, wanted, saved or None, self.spelling)
        if drafter:
            record = {**(record or {}), DRAFTER: drafter}
        return out, record

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
        enforce_rules: bool = True,
    ) -> Rendered:
        """New (command, args) configuring `setup` (see `render_args`), and the operator's
        companion record to keep (`saved_companions` when the list without the engine's args
        is returned unchanged)."""
        kept: list[Saved | None] = [saved_companions]

        def edit(words: list[str]) -> list[str]:
            out, kept[0] = self.render_args(
                words,
                setup,
                companions=companions,
                saved_companions=saved_companions,
                saved_speculative_config=saved_speculative_config,
                allow_low_precision_replay=allow_low_precision_replay,
                enforce_rules=enforce_rules,
            )
            return out

        new_command, new_args = edit_container(command, args, self.managed, edit)
        return new_command, new_args, kept[0]
