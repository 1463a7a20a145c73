"""An engine's capability table (its `builds.yaml`, package data) loaded into the core's
BuildRow values, and the build in force chosen from what is known of the running engine: the
settings' declared version, the image tag, the version the engine reports, else the table's
default version. One `BuildTable` per engine."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from autotuner.core.engine.builds import BuildInForce, BuildRow, Origin
from autotuner.errors import InputError

AUTO = "auto"  # engine.build: read the version from the engine
CPU_SUFFIX = "-cpu"
UNKNOWN = "unknown"
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")
_BOUND = re.compile(r"(>=|<=|<|>|==)\s*(\d+(?:\.\d+){0,2})")


def version_tuple(text: str) -> tuple[int, int, int] | None:
    """'0.33.0', 'v0.33', '0.33.0rc1', '0.33.0+cu129' -> (0, 33, 0); None if no version."""
    match = _VERSION.match(text.strip())
    if not match:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def in_range(version: tuple[int, int, int], versions: str) -> bool:
    """Whether a version is in a range written as '>=0.33.0,<0.34'."""
    bounds = _BOUND.findall(versions)
    if not bounds:
        return False
    for op, text in bounds:
        bound = version_tuple(text)
        assert bound is not None
        compare = {
            ">=": version >= bound,
            ">": version > bound,
            "<=": version <= bound,
            "<": version < bound,
            "==": version == bound,
        }
        if not compare[op]:
            return False
    return True


def image_version(image: str | None, engine_images: Collection[str] | None = None) -> str | None:
    """The version an image's tag names (vllm/vllm-openai:v0.33.0 -> 0.33.0); None for a
    digest, `latest`, `nightly` or no tag, and (given `engine_images`) for an image whose
    repository path does not end with one of them: its tag is another project's release."""
    if not image or "@" in image:
        return None
    path, _, last = image.rpartition("/")  # a registry's port stays in the path
    name, _, tag = last.partition(":")
    repository = f"{path}/{name}" if path else name
    if engine_images is not None and not any(
        repository == known or repository.endswith("/" + known) for known in engine_images
    ):
        return None
    parsed = version_tuple(tag) if tag else None
    return ".".join(map(str, parsed)) if parsed else None


def _image_said(image: str | None, label: str) -> str:
    """Why the image named no version, for the build's detail."""
    if not image:
        return "no image tag"
    if image_version(image) is not None:
        return f"{image} is not a {label} image: its tag is another release"
    return "the image tag names no version"


@cache
def _document(package: str) -> dict[str, Any]:
    """The package's builds.yaml, read once."""
    text = resources.files(package).joinpath("builds.yaml").read_text("utf-8")
    data: dict[str, Any] = yaml.safe_load(text)
    return data


@cache
def _load(package: str) -> tuple[str, tuple[BuildRow, ...]]:
    data = _document(package)
    rows = tuple(BuildRow.model_validate(row) for row in data["rows"])
    return str(data["default_version"]), rows


@cache
def _markers(package: str) -> dict[str, str]:
    """`shown_by_labels` of builds.yaml: a metrics label -> the version from which the engine
    exports it (none: the table has none)."""
    labels = _document(package).get("shown_by_labels") or {}
    return {str(k): str(v) for k, v in labels.items()}


@dataclass(frozen=True)
class BuildTable:
    """One engine's table: `package` holds its builds.yaml; `label` names the engine in
    messages; `reported_by` is where the running engine says its version."""

    package: str
    label: str
    reported_by: Origin
    example: str  # versions as an operator writes them, for messages

    def table(self) -> tuple[str, tuple[BuildRow, ...]]:
        """The default version and every row of builds.yaml."""
        return _load(self.package)

    def engine_images(self) -> tuple[str, ...]:
        """The repositories whose image tags are this engine's versions (builds.yaml)."""
        return tuple(str(name) for name in _document(self.package).get("engine_images") or ())

    def version_shown(self, labels: Collection[str]) -> str | None:
        """The newest version whose marker label the engine's metrics carry (None: no
        marker among them)."""
        shown = [v for label, v in _markers(self.package).items() if label in labels]
        return max(shown, key=lambda v: version_tuple(v) or (0, 0, 0), default=None)

    def rows_for(self, version: str | None, origin: Origin, detail: str = "") -> BuildInForce:
        """The rows of the build with this version (None: the table's default version)."""
        default, rows = self.table()
        text = version or default
        platform = "cpu" if text.endswith(CPU_SUFFIX) else "cuda"
        parsed = version_tuple(text.removesuffix(CPU_SUFFIX))
        if parsed is None:
            raise InputError(f"not a {self.label} version: {text!r} (e.g. {self.example})")
        matching = tuple(r for r in rows if r.platform == platform and in_range(parsed, r.versions))
        known = bool(matching)
        if not known:
            matching = tuple(r for r in rows if r.versions == UNKNOWN)
        return BuildInForce(version=text, origin=origin, detail=detail, rows=matching, known=known)

    def build_in_force(
        self,
        declared: str = AUTO,
        *,
        image: str | None = None,
        reported: str | None = None,
        shown: str | None = None,
        declared_by: str = "engine.build",
    ) -> BuildInForce:
        """The build the engine runs, by precedence: the settings' declared version
        (`declared_by` names the setting or option) > the image tag > the version the engine
        reports (`reported`) > the version its metrics' labels show (`shown`) > the table's
        default version."""
        if declared != AUTO:
            return self.rows_for(declared, Origin.SETTINGS, f"{declared_by}: {declared}")
        tagged = image_version(image, self.engine_images())
        if tagged is not None:
            return self.rows_for(tagged, Origin.IMAGE_TAG, image or "")
        if reported and version_tuple(reported) is not None:
            return self.rows_for(reported, self.reported_by, f"version {reported}")
        if shown is not None:
            return self.rows_for(shown, Origin.METRICS, f"labels a {shown} build exports")
        said = [
            _image_said(image, self.label),
            f"{self.reported_by.value} said {reported!r}"
            if reported
            else f"no {self.reported_by.value} read",
        ]
        return self.rows_for(None, Origin.DEFAULT, "; ".join(said))

    def check_declared(self, value: str) -> str:
        """A setting's declared build: 'auto' or a version (a bad one raises ValueError)."""
        if value != AUTO and version_tuple(value.removesuffix(CPU_SUFFIX)) is None:
            raise ValueError(
                f"not a {self.label} version or 'auto': {value!r} (e.g. {self.example})"
            )
        return value
