"""The workload, model and drafter the engine really runs: the target's live args read once
per step and resolved over the settings, each input with its source (for /decision)."""

from __future__ import annotations

import logging
from functools import cache
from typing import Any

from autotuner.actuators.base import LiveTarget
from autotuner.core.decide.state import TunerState
from autotuner.core.engine.args import EngineArgs
from autotuner.core.engine.resolution import Fallback, Resolved, resolve
from autotuner.core.model.registry import load_draft_model
from autotuner.core.model.spec import ModelSpec
from autotuner.core.types import Observation
from autotuner.engines.vllm.args import live_args, speculative_of
from autotuner.errors import ArgsError
from autotuner.settings import Settings
from autotuner.telling.notifier import Notifier

_draft_model_size = cache(load_draft_model)  # a deployed draft model's config, read once


class LiveInputs:
    """Resolves each step's inputs; says once when the live args cannot be read."""

    def __init__(self, settings: Settings, model: ModelSpec, notifier: Notifier) -> None:
        self.settings, self.model, self.notifier = settings, model, notifier
        self.table: dict[str, Any] = {}  # the last step's inputs with their sources
        self.problem: str | None = None  # why the live args cannot be read (told once)

    def resolve(
        self, state: TunerState, observation: Observation, live: LiveTarget | None
    ) -> Resolved:
        """The live args over the settings (core/engine/resolution.py)."""
        args, problem = self._args(live)
        if problem != self.problem and problem is not None:
            self.notifier.log(problem, logging.WARNING)
        self.problem = problem
        model = self.settings.model
        resolved = resolve(
            self.model,
            args,
            Fallback(
                context_tokens=model.context_tokens,
                tensor_parallel=model.tensor_parallel,
                drafter=model.drafter,
            ),
            observed_context=observation.mean_context_tokens if observation.usable else None,
            saved=speculative_of(state.drafter),
            load_draft=_draft_model_size,
        )
        self.table = resolved.table()
        if problem is not None:
            self.table["live_args"] = {"value": None, "source": "live args", "note": problem}
        return resolved

    def _args(self, live: LiveTarget | None) -> tuple[EngineArgs | None, str | None]:
        if live is None:
            return None, None
        try:
            return live_args(live.command, live.args, self.settings.engine.flags), None
        except ArgsError as exc:
            return None, f"the live args cannot be read ({exc}): the settings are used"
