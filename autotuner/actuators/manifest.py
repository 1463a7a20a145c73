"""The GitOps actuator: the same change applied to a serving object's YAML file on disk (any
kind a Kubernetes target can be: a Deployment, a LeaderWorkerSet, a DynamoGraphDeployment ...).

The file is read with ruamel.yaml and written by editing its own text (actuators/yaml_text.py):
only the characters of the managed flags where each engine container keeps them change
(actuators/sites.py), leader and workers alike, and the tuner's annotations; comments, quoting,
indentation and block scalars stay byte for byte. A ConfigMap the args come from is read from
the same file, and advised, never written. The write is atomic (temp file + rename) and the
diff is returned for review. This is also how the demo acts.
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError

from autotuner.actuators.base import (
    Actuator,
    ApplyResult,
    Change,
    LiveTarget,
    RolloutStatus,
    atomic_write,
    live_target,
)
from autotuner.actuators.kinds import BY_KIND, Engine, at, engine_sites, kind_named, pointer
from autotuner.actuators.sites import Site, config_change, site_ops
from autotuner.actuators.yaml_text import TextEditError, edit_document
from autotuner.engines.dialect import Dialect
from autotuner.engines.vllm.dialect import VllmDialect
from autotuner.errors import ActuatorError, AdviceOnlyError, ArgsError

Sites = list[tuple[Engine, Site]]


class ManifestActuator(Actuator):
    # A GitOps file changes only with a decision: no periodic state commits.
    periodic_state = False

    def __init__(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        container: str | None = None,
        dialect: Dialect | None = None,
        allow_low_precision_replay: bool = False,
    ) -> None:
        self.path = Path(path)
        self.name = name
        self.container_name = container
        self.dialect: Dialect = dialect or VllmDialect()
        self.allow_low_precision_replay = allow_low_precision_replay
        self.yaml = YAML()
        self.events: list[tuple[str, str, bool]] = []

    def _load(self) -> tuple[str, list[Any]]:
        try:
            text = self.path.read_bytes().decode("utf-8")  # its line ends as they are
        except OSError as exc:
            raise ActuatorError(f"{self.path}: cannot read ({exc.strerror})") from None
        try:
            documents = list(self.yaml.load_all(text))
        except YAMLError as exc:
            raise ActuatorError(f"{self.path}: not valid YAML ({exc})") from None
        return text, documents

    def _workload(self, documents: list[Any]) -> CommentedMap:
        found = [
            d
            for d in documents
            if isinstance(d, dict)
            and d.get("kind") in BY_KIND
            and (self.name is None or (d.get("metadata") or {}).get("name") == self.name)
        ]
        if not found:
            raise ActuatorError(
                f"{self.path}: no {', '.join(BY_KIND)}"
                + (f" named {self.name!r}" if self.name else "")
            )
        if len(found) > 1:
            names = ", ".join(str((d.get("metadata") or {}).get("name")) for d in found)
            raise ActuatorError(
                f"{self.path}: several workloads ({names}); name one: file://{self.path}?name=NAME"
            )
        workload = found[0]
        assert isinstance(workload, CommentedMap)
        return workload

    def _sites(self, workload: CommentedMap, documents: list[Any]) -> Sites:
        """Every engine container of the workload and where its args sit."""
        version = str(workload.get("apiVersion", "")).rpartition("/")[2]
        word = BY_KIND[workload["kind"]].word
        kind = kind_named(f"{word}.{version}" if version else word)

        def config_map(name: str) -> dict[str, str]:
            for document in documents:
                if not isinstance(document, dict):  # an empty document (`---` twice)
                    continue
                meta = document.get("metadata") or {}
                if document.get("kind") == "ConfigMap" and meta.get("name") == name:
                    return {str(k): str(v) for k, v in (document.get("data") or {}).items()}
            raise ArgsError(f"the engine args come from ConfigMap {name}, not in this file")

        try:
            return engine_sites(kind, workload, self.container_name, self.dialect, config_map)
        except (ArgsError, ActuatorError) as exc:
            raise ActuatorError(f"{self.path}: {exc}") from None

    def read(self) -> LiveTarget:
        text, documents = self._load()
        return self._live(text, documents)

    def _live(self, text: str, documents: list[Any]) -> LiveTarget:
        workload = self._workload(documents)
        sites = self._sites(workload, documents)
        engine, site = sites[0]
        image = at(workload, (*engine.container, "image"))
        live = live_target(
            str(self.path),
            description=f"file://{self.path} {pointer(engine.container)}",
            command=site.command,
            args=site.args,
            annotations=dict((workload.get("metadata") or {}).get("annotations") or {}),
            dialect=self.dialect,
            version=hashlib.sha256(text.encode()).hexdigest()[:16],
            rollout=RolloutStatus(True, None, "a manifest has no rollout; GitOps applies it"),
            image=str(image) if image else None,
        )
        return replace(live, advice=next((s.advice for _, s in sites if s.advice), None))

    @property
    def where(self) -> str:
        return str(self.path)

    def _read_for_apply(self) -> tuple[LiveTarget, tuple[str, list[Any]]]:
        text, documents = self._load()
        return self._live(text, documents), (text, documents)

    def _write(self, change: Change, read: tuple[str, list[Any]]) -> ApplyResult:
        live, command, args, dry_run = change.live, change.command, change.args, change.dry_run
        text, documents = read
        workload = self._workload(documents)
        sites = self._sites(workload, documents)
        renders = [(command, args)]
        renders += [self.render_other(change, site)[:2] for _, site in sites[1:]]
        ops: list[dict[str, Any]] = []
        try:
            for (engine, site), (new_command, new_args) in zip(sites, renders, strict=True):
                container = at(workload, engine.container)
                ops += site_ops(site, container, new_command, new_args)
        except ArgsError as exc:
            in_file = config_change(sites[0][1], command, args, self.dialect)
            raise AdviceOnlyError(f"{self.path}: not written: {exc}{in_file}") from None
        index = next(i for i, d in enumerate(documents) if d is workload)
        try:
            new_text = edit_document(text, index, ops, change.annotations())
        except TextEditError as exc:
            raise AdviceOnlyError(
                f"{self.path}: not written: cannot edit the file's text safely ({exc})"
            ) from None
        diff = "".join(
            difflib.unified_diff(
                text.splitlines(keepends=True),
                new_text.splitlines(keepends=True),
                fromfile=str(self.path),
                tofile=f"{self.path} (new)",
            )
        )
        before, after = (*live.command, *live.args), (*command, *args)
        if dry_run or new_text == text:
            return ApplyResult(after != before, dry_run, before, after, diff, live.version)
        atomic_write(self.path, new_text)
        version = hashlib.sha256(new_text.encode()).hexdigest()[:16]
        return ApplyResult(after != before, False, before, after, diff, version)

    def save_state(self, state: str, *, expected_version: str | None) -> str | None:
        live = self.read()
        return self.apply(live.setup, state=state, expected_version=expected_version).version

    def event(self, reason: str, message: str, *, warning: bool = False) -> None:
        """No cluster to post to: events are kept (the controller logs them too)."""
        self.events.append((reason, message, warning))
