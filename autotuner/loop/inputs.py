"""The workload, model and drafter the engine really runs: the target's live args read once
per step and resolved over the settings, each input with its source (for /decision)."""

from __future__ import annotations

import dataclasses
import logging
import time
from functools import cache
from typing import Any

from autotuner.actuators.base import LiveTarget
from autotuner.core.decide.state import TunerState
from autotuner.core.engine.args import EngineArgs
from autotuner.core.engine.builds import BuildInForce
from autotuner.core.engine.resolution import Fallback, Resolved, resolve
from autotuner.core.engine.workload import ENGINE_NAMES, PrefixCacheReading, Workload
from autotuner.core.model.registry import load_draft_model
from autotuner.core.model.spec import ModelSpec
from autotuner.core.observe.workload import workload_reading
from autotuner.core.types import Observation
from autotuner.engines.build_table import AUTO
from autotuner.errors import ArgsError
from autotuner.settings import Settings
from autotuner.sources.detect import engine_version
from autotuner.telling.notifier import Notifier

_draft_model_size = cache(load_draft_model)  # a deployed draft model's config, read once
VERSION_DEADLINE_S = 2.0  # GET /version (vLLM) or /server_info (SGLang): the whole answer
VERSION_RETRY_S = 300.0  # an engine that did not answer is asked again after this long


class LiveInputs:
    """Resolves each step's inputs; says once when the live args cannot be read."""

    def __init__(self, settings: Settings, model: ModelSpec, notifier: Notifier) -> None:
        self.settings, self.model, self.notifier = settings, model, notifier
        self.table: dict[str, Any] = {}  # the last step's inputs with their sources
        self.problem: str | None = None  # why the live args cannot be read (told once)
        self.reported: str | None = None  # the version the engine says it runs
        self.asked_at = -VERSION_RETRY_S  # when /version was last asked (monotonic)
        # The request lengths of the last window that finished requests, and the last hit
        # rate read (a setup without prefix caching looks nothing up): they price prefill.
        self.prefix: PrefixCacheReading | None = None

    def resolve(
        self, state: TunerState, observation: Observation, live: LiveTarget | None
    ) -> Resolved:
        """The live args over the settings (core/engine/resolution.py)."""
        args, problem = self._args(live)
        if problem != self.problem and problem is not None:
            self.notifier.log(problem, logging.WARNING)
        self.problem = problem
        model = self.settings.model
        self.prefix = workload_reading(observation, self.prefix)
        resolved = resolve(
            self.model,
            args,
            Fallback(
                context_tokens=model.context_tokens,
                tensor_parallel=model.tensor_parallel,
                drafter=model.drafter,
            ),
            observed_context=observation.mean_context_tokens if observation.usable else None,
            observed_prefix=self.prefix,
            saved=self.settings.engine.dialect.drafter_of(state.drafter),
            load_draft=_draft_model_size,
            base=Workload(engine_name=ENGINE_NAMES[self.settings.engine.engine.kind.value]),
        )
        self.table = resolved.table()
        if problem is not None:
            self.table["live_args"] = {"value": None, "source": "live args", "note": problem}
        return dataclasses.replace(resolved, build=self.build(live, observation))

    def build(self, live: LiveTarget | None, observation: Observation) -> BuildInForce:
        """The build in force: engine.build > the image tag > the version the engine says
        (GET /version, GET /server_info) > the one its metrics' labels show > the default."""
        declared = self.settings.engine.build
        table = self.settings.engine.engine.table
        image = live.image if live is not None else None
        if declared == AUTO and table.build_in_force(image=image).origin.value == "default":
            self._ask_version()
        labels = observation.live_setup.cache_config_labels if observation.live_setup else ()
        shown = table.version_shown(labels)
        return table.build_in_force(declared, image=image, reported=self.reported, shown=shown)

    def _ask_version(self) -> None:
        """Ask the first engine its version (once, then again only while it has not
        answered)."""
        source = self.settings.source
        if self.reported is not None or not source.direct or not source.urls:
            return
        if time.monotonic() - self.asked_at < VERSION_RETRY_S:
            return
        self.asked_at = time.monotonic()
        path = self.settings.engine.engine.version_path
        self.reported = engine_version(source.urls[0], VERSION_DEADLINE_S, path)

    def _args(self, live: LiveTarget | None) -> tuple[EngineArgs | None, str | None]:
        if live is None:
            return None, None
        try:
            return self.settings.engine.dialect.live_args(live.command, live.args), None
        except ArgsError as exc:
            return None, f"the live args cannot be read ({exc}): the settings are used"
