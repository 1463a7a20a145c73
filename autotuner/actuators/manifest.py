"""The GitOps actuator: the same change applied to a serving object's YAML file on disk (any
kind a Kubernetes target can be: a Deployment, a LeaderWorkerSet, a DynamoGraphDeployment ...).

Round-trip YAML (ruamel.yaml) keeps comments, key order, anchors and formatting of everything
else; only the managed flags where each engine container keeps them change (actuators/sites.py),
leader and workers alike. A ConfigMap the args come from is read from the same file, and
advised, never written. The write is atomic (temp file + rename) and the diff is returned for
review. This is also how the demo acts.
"""

from __future__ import annotations

import difflib
import hashlib
import io
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError
from ruamel.yaml.util import load_yaml_guess_indent

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
from autotuner.actuators.sites import Site, site_ops
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
        self.yaml.preserve_quotes = True
        self.yaml.width = 4096
        self.events: list[tuple[str, str, bool]] = []

    def _load(self) -> tuple[str, list[Any]]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ActuatorError(f"{self.path}: cannot read ({exc.strerror})") from None
        try:
            sequence, offset = _sequence_style(text)
            self.yaml.indent(mapping=max(sequence - offset, 2), sequence=sequence, offset=offset)
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
            raise ActuatorError(f"{self.path}: several workloads; name the one to tune")
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
        try:
            for (engine, site), (new_command, new_args) in zip(sites, renders, strict=True):
                container = at(workload, engine.container)
                _apply_ops(workload, site_ops(site, container, new_command, new_args))
        except ArgsError as exc:
            raise AdviceOnlyError(f"{self.path}: not written: {exc}") from None
        for key, value in change.annotations().items():
            _annotate(workload, key, value)
        buffer = io.StringIO()
        self.yaml.dump_all(documents, buffer)
        new_text = buffer.getvalue()
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


def _edit_sequence(container: CommentedMap, key: str, values: list[str]) -> None:
    """Make container[key] equal `values`, editing the existing sequence item by item so
    untouched items keep their comments and quoting."""
    existing = container.get(key)
    if not isinstance(existing, CommentedSeq):
        container[key] = CommentedSeq(values)
        return
    matcher = difflib.SequenceMatcher(a=[str(v) for v in existing], b=values, autojunk=False)
    for tag, i1, i2, j1, j2 in reversed(matcher.get_opcodes()):
        if tag == "equal":
            continue
        for index in range(i2 - 1, i1 - 1, -1):
            del existing[index]
        for offset, value in enumerate(values[j1:j2]):
            existing.insert(i1 + offset, value)


def _apply_ops(document: CommentedMap, ops: list[dict[str, Any]]) -> None:
    """The JSON patch operations of the sites, applied to the round-trip document so that a
    list edited keeps its items' comments and quoting."""
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent: Any = document
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        key: Any = int(parts[-1]) if isinstance(parent, list) else parts[-1]
        if op["op"] == "remove":
            del parent[key]
        elif isinstance(op["value"], list):
            _edit_sequence(parent, key, [str(v) for v in op["value"]])
        else:
            parent[key] = op["value"]


def _annotate(workload: CommentedMap, key: str, value: str | None) -> None:
    """One of the workload's annotations set (the map made when missing), or removed (None)."""
    metadata = workload.setdefault("metadata", CommentedMap())
    annotations = metadata.get("annotations")
    if value is None:
        if annotations is not None:
            annotations.pop(key, None)
        return
    if annotations is None:
        annotations = CommentedMap()
        metadata["annotations"] = annotations
    annotations[key] = value


def _sequence_style(text: str) -> tuple[int, int]:
    """The file's own sequence style ("- x" flush or indented under its key), as the first of
    its documents that has a nested sequence writes it (2, 0 when none does)."""
    for document in re.split(r"(?m)^---.*$", text):
        _, sequence, offset = load_yaml_guess_indent(document)
        if sequence and offset is not None:  # no offset: the document has no nested sequence
            return sequence, offset
    return 2, 0
