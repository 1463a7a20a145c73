"""vLLM's capability table (builds.yaml, package data) loaded into the core's BuildRow values,
and the build in force chosen from what is known of the running engine: the settings' declared
version, the image tag, `GET /version`, else the table's default version."""

from __future__ import annotations

import re
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


@cache
def table() -> tuple[str, tuple[BuildRow, ...]]:
    """The default version and every row of builds.yaml."""
    text = resources.files("autotuner.engines.vllm").joinpath("builds.yaml").read_text("utf-8")
    data: dict[str, Any] = yaml.safe_load(text)
    rows = tuple(BuildRow.model_validate(row) for row in data["rows"])
    return str(data["default_version"]), rows


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


def image_version(image: str | None) -> str | None:
    """The version an image's tag names (vllm/vllm-openai:v0.33.0 -> 0.33.0); None for a
    digest, `latest`, `nightly` or no tag."""
    if not image or "@" in image:
        return None
    tag = image.rsplit("/", 1)[-1].partition(":")[2]
    parsed = version_tuple(tag) if tag else None
    return ".".join(map(str, parsed)) if parsed else None


def rows_for(version: str | None, origin: Origin, detail: str = "") -> BuildInForce:
    """The rows of the build with this version (None: the table's default version)."""
    default, rows = table()
    text = version or default
    platform = "cpu" if text.endswith(CPU_SUFFIX) else "cuda"
    parsed = version_tuple(text.removesuffix(CPU_SUFFIX))
    if parsed is None:
        raise InputError(f"not a vLLM version: {text!r} (e.g. 0.33.0, 0.32, 0.32.0-cpu)")
    matching = tuple(r for r in rows if r.platform == platform and in_range(parsed, r.versions))
    known = bool(matching)
    if not known:
        matching = tuple(r for r in rows if r.versions == UNKNOWN)
    return BuildInForce(
        version=text,
        origin=origin,
        detail=detail,
        rows=matching,
        known=known,
    )


def build_in_force(
    declared: str = AUTO,
    *,
    image: str | None = None,
    reported: str | None = None,
    declared_by: str = "engine.build",
) -> BuildInForce:
    """The build the engine runs, by precedence: the settings' declared version (`declared_by`
    names the setting or option) > the image tag > `GET /version` (`reported`) > the table's
    default version."""
    if declared != AUTO:
        return rows_for(declared, Origin.SETTINGS, f"{declared_by}: {declared}")
    tagged = image_version(image)
    if tagged is not None:
        return rows_for(tagged, Origin.IMAGE_TAG, image or "")
    if reported and version_tuple(reported) is not None:
        return rows_for(reported, Origin.VERSION_ENDPOINT, f"version {reported}")
    said = [
        "the image tag names no version" if image else "no image tag",
        f"/version said {reported!r}" if reported else "no /version read",
    ]
    return rows_for(None, Origin.DEFAULT, "; ".join(said))


def check_declared(value: str) -> str:
    """A setting's declared build: 'auto' or a version (a bad one raises ValueError)."""
    if value != AUTO and version_tuple(value.removesuffix(CPU_SUFFIX)) is None:
        raise ValueError(f"not a vLLM version or 'auto': {value!r} (e.g. 0.33.0, 0.32.0-cpu)")
    return value
